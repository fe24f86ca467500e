"""Registration handshake and socket handling over the real unix sockets, as the kubelet's
plugin watcher does them."""

from __future__ import annotations

import socket
import stat
from collections.abc import Callable
from pathlib import Path

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
