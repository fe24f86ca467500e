"""Registration handshake and socket handling over the real unix sockets, as the kubelet's
plugin watcher does them."""

from __future__ import annotations

import socket
import stat
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from liken_devices.plugin import Plugin
from liken_devices.plugin.server import SocketError
from tests.support.fakeapi import FakeApiServer

from .conftest import new_claim
from .kubelet import RegistrationRefused, TestKubelet


def is_socket(p: Path) -> bool:
    return p.exists() and stat.S_ISSOCK(p.lstat().st_mode)


def test_handshake_advertises_v1_first(plugin: Plugin) -> None:
    k = TestKubelet(plugin.config.registration_socket)
    try:
        assert k.register() == "v1.DRAPlugin"
        assert k.info.type == "DRAPlugin"
        assert k.info.name == "liken.sh"
        assert k.info.endpoint == str(plugin.config.dra_socket)
        versions = list(k.info.supported_versions)
        assert versions[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        assert "v1alpha1.DRAResourceHealth" in versions
        assert plugin.registration == (True, "")
    finally:
        k.close()


def test_health_is_advertised_in_v1_and_v1alpha1(plugin: Plugin, api: FakeApiServer) -> None:
    """rules: delivery.health-versions. Both health services are registered: a 1.37 kubelet
    chooses v1, an older one v1alpha1, and each gets the stream over the service it chose."""
    new = TestKubelet(plugin.config.registration_socket)
    old = TestKubelet(plugin.config.registration_socket,
                      health=("v1alpha1.DRAResourceHealth",))
    try:
        assert new.register() == old.register() == "v1.DRAPlugin"
        assert {"v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"} <= \
            set(new.info.supported_versions)
        assert new.health_service == "v1.DRAResourceHealth"
        assert old.health_service == "v1alpha1.DRAResourceHealth"
        claim = new_claim(api, ["pnp-00-01"])
        assert new.prepare([claim])[claim[1]].error == ""
        for k in (new, old):
            assert next(k.watch_health(timeout=10)) == [("node-a", "pnp-00-01", 1)]
    finally:
        new.close()
        old.close()


def test_health_services_answer_on_the_kubelets_method_paths(plugin: Plugin,
                                                            api: FakeApiServer) -> None:
    """rules: delivery.health-versions. The wire names the kubelet dials, written out here rather
    than taken from the generated stubs: the v1 package is literally ``v1`` and v1alpha1's
    ``v1alpha1``, and each advertised name is the service's full name."""
    from liken_devices.plugin.gen import health_v1_pb2

    claim = new_claim(api, ["pnp-00-01"])
    k = TestKubelet(plugin.config.registration_socket)
    try:
        k.register()
        assert k.prepare([claim])[claim[1]].error == ""
        for service in ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"):
            assert service in k.info.supported_versions
            with grpc.insecure_channel(f"unix:{plugin.config.dra_socket}") as ch:
                call = ch.unary_stream(f"/{service}/NodeWatchResources",
                                       request_serializer=lambda _: b"",
                                       response_deserializer=health_v1_pb2.
                                       NodeWatchResourcesResponse.FromString)
                stream = call(None, timeout=10)
                msg = next(stream)
                stream.cancel()
            assert [(d.device.pool_name, d.device.device_name, d.health,
                     d.health_check_timeout_seconds > 0) for d in msg.devices] == \
                [("node-a", "pnp-00-01", 1, True)]
    finally:
        k.close()


def test_default_socket_paths(tmp_path: Path) -> None:
    from liken_devices.plugin import PluginConfig

    cfg = PluginConfig(node="n")
    assert str(cfg.dra_socket) == "/var/lib/kubelet/plugins/liken.sh/dra.sock"
    assert str(cfg.registration_socket) == "/var/lib/kubelet/plugins_registry/liken.sh-reg.sock"


def test_old_kubelet_uses_v1beta1(plugin: Plugin, api: FakeApiServer) -> None:
    k = TestKubelet(plugin.config.registration_socket, supported=("v1beta1.DRAPlugin",))
    try:
        assert k.register() == "v1beta1.DRAPlugin"
        claim = new_claim(api, ["pnp-00-01"], request="serial/first")
        ans = k.prepare([claim])[claim[1]]
        assert ans.error == ""
        assert ans.devices == [{"requests": ["serial"], "pool": "node-a", "device": "pnp-00-01",
                                "cdi": [f"liken.sh/device={claim[1]}-pnp-00-01"]}]
        assert k.unprepare([claim]) == {claim[1]: ""}
        # The v1beta1 service answers too (an unprepare of an unknown claim succeeds).
        assert k.unprepare([("ns", "0b7e8e5e-1111-4f00-9a9a-0123456789ab", "c")]) == {
            "0b7e8e5e-1111-4f00-9a9a-0123456789ab": ""}
    finally:
        k.close()


def test_kubelet_without_common_service_refuses(plugin: Plugin) -> None:
    k = TestKubelet(plugin.config.registration_socket, supported=("v9.DRAPlugin",))
    with pytest.raises(RegistrationRefused, match="none of services"):
        k.register()
    assert plugin.registration is not None and plugin.registration[0] is False


def test_stale_sockets_replaced_and_removed_on_stop(make_plugin: Callable[..., Plugin],
                                                    tmp_path: Path, sockdir: Path) -> None:
    from .conftest import make_config

    cfg = make_config(tmp_path, sockdir)
    for path in (cfg.dra_socket, cfg.registration_socket):
        path.parent.mkdir(parents=True, exist_ok=True)
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))  # a socket left by a killed plugin: nobody listens on it
        s.close()
        assert is_socket(path)
    p = make_plugin(start=False)
    p.start()
    try:
        assert is_socket(cfg.dra_socket) and is_socket(cfg.registration_socket)
        k = TestKubelet(cfg.registration_socket)
        assert k.register() == "v1.DRAPlugin"
        k.close()
    finally:
        p.stop()
    assert not cfg.dra_socket.exists()
    assert not cfg.registration_socket.exists()


def test_regular_file_at_socket_path_is_refused(make_plugin: Callable[..., Plugin],
                                                tmp_path: Path, sockdir: Path) -> None:
    from .conftest import make_config

    cfg = make_config(tmp_path, sockdir)
    cfg.registry_dir.mkdir(parents=True)
    cfg.registration_socket.write_text("not a socket")
    p = make_plugin(start=False)
    with pytest.raises(SocketError, match="not a socket"):
        p.start()
    assert cfg.registration_socket.read_text() == "not a socket"
    assert not cfg.dra_socket.exists()  # the DRA server started first was stopped again


def test_too_long_socket_path_is_a_clear_error(make_plugin: Callable[..., Plugin]) -> None:
    p = make_plugin(start=False, plugin_dir=Path("/tmp/" + "x" * 110))
    with pytest.raises(SocketError, match="longer than"):
        p.start()


def test_dra_socket_is_served_before_registration(plugin: Plugin) -> None:
    # When the registration socket exists the endpoint it advertises already answers.
    assert is_socket(plugin.config.dra_socket)
    k = TestKubelet(plugin.config.registration_socket)
    k.register()
    assert k.unprepare([]) == {}
    k.close()
