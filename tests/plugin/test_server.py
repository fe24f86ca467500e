"""One instance per node, sockets that are nobody else's, and a pool health streams cannot
exhaust (docs/plugin.md, "Bad input": a second instance, hostile company on the socket)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from liken_devices.plugin import Plugin
from liken_devices.plugin.gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
)
from liken_devices.plugin.server import HEALTH_STREAMS, MAX_CLAIMS, SocketError
from liken_devices.plugin.state import STATE_FILE, StateBusy
from tests.support.fakeapi import FakeApiServer

from .conftest import NODE, Hardware, cdi_files, make_config, new_claim
from .kubelet import TestKubelet
from .process import LIKEN, Node


def _serves(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def test_second_instance_is_refused_and_the_first_keeps_serving(
        api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet, kube, hardware) -> None:
    second = Plugin(plugin.config, hardware.walk, kube)
    with pytest.raises(StateBusy, match=f"locked by pid {os.getpid()} on "):
        second.start()
    second.stop()  # as the agent's shutdown does after a failed start: removes nothing
    for path in (plugin.config.dra_socket, plugin.config.registration_socket):
        assert _serves(path)
    claim = new_claim(api, ["usb-1-3"])
    assert kubelet.prepare([claim])[claim[1]].error == ""


def test_second_plugin_process_exits_2_naming_the_holder(api: FakeApiServer, node: Node) -> None:
    node.start()
    assert node.proc is not None
    out = subprocess.run(
        [*LIKEN, "plugin", *node.common(), "--kubeconfig", str(node.kubeconfig),
         "--plugin-dir", str(node.sockdir / "plugins" / "liken.sh"),
         "--registry-dir", str(node.sockdir / "registry")],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert f"pid {node.proc.pid} " in out.stderr
    k = node.kubelet()  # the first one still serves, its sockets untouched
    claim = new_claim(api, ["pci-0000-00-1e-0"])
    assert k.prepare([claim])[claim[1]].error == ""
    k.close()


def test_claims_beside_a_running_plugin_reads_without_writing(api: FakeApiServer,
                                                              node: Node) -> None:
    node.start()
    claim = new_claim(api, ["pci-0000-00-1e-0"])
    k = node.kubelet()
    assert k.prepare([claim])[claim[1]].error == ""
    k.close()
    before = sorted((p.name, p.stat().st_mtime_ns) for p in node.state.iterdir())
    view = node.claims()
    assert [c["uid"] for c in view] == [claim[1]]
    assert sorted((p.name, p.stat().st_mtime_ns) for p in node.state.iterdir()) == before


def test_a_socket_that_answers_is_never_replaced(make_plugin: Callable[..., Plugin],
                                                 tmp_path: Path, sockdir: Path) -> None:
    # Another process serves the DRA socket (not a plugin with this state dir, so no lock).
    cfg = make_config(tmp_path, sockdir)
    cfg.plugin_dir.mkdir(parents=True)
    other = socket.socket(socket.AF_UNIX)
    other.bind(str(cfg.dra_socket))
    other.listen(1)
    ident = cfg.dra_socket.stat().st_ino
    try:
        p = make_plugin(start=False)
        with pytest.raises(SocketError, match="another process answers"):
            p.start()
        p.stop()
        assert cfg.dra_socket.stat().st_ino == ident and _serves(cfg.dra_socket)
        assert not cfg.registration_socket.exists()
    finally:
        other.close()


def test_stop_removes_only_the_sockets_it_bound(plugin: Plugin, sockdir: Path) -> None:
    reg = plugin.config.registration_socket
    reg.unlink()
    other = socket.socket(socket.AF_UNIX)
    other.bind(str(reg))  # someone else's now
    try:
        plugin.stop()
        assert stat.S_ISSOCK(reg.lstat().st_mode)
        assert not plugin.config.dra_socket.exists()
    finally:
        other.close()


def test_sockets_and_their_directory_are_root_only(make_plugin: Callable[..., Plugin]) -> None:
    old = os.umask(0)
    try:
        p = make_plugin()
    finally:
        os.umask(old)
    for path in (p.config.dra_socket, p.config.registration_socket):
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600, path
    assert stat.S_IMODE(p.config.plugin_dir.stat().st_mode) == 0o700
    # Nothing but the two sockets: the temp names they were bound at are gone.
    assert sorted(os.listdir(p.config.plugin_dir)) == ["dra.sock"]
    assert sorted(os.listdir(p.config.registry_dir)) == ["liken.sh-reg.sock"]


def test_health_streams_cannot_starve_prepare(api: FakeApiServer, plugin: Plugin,
                                              kubelet: TestKubelet) -> None:
    channel = grpc.insecure_channel(f"unix:{plugin.config.dra_socket}")
    stub = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(channel)
    # Both versions of the health service share one cap (rules: delivery.health-versions).
    v1 = health_v1_pb2_grpc.DRAResourceHealthStub(channel)
    streams = [(v1, health_v1_pb2) if i % 2 else (stub, health_v1alpha1_pb2)
               for i in range(20)]
    streams = [s.NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=60)
               for s, pb in streams]
    outcomes: list[str] = []
    lock = threading.Lock()

    def first(stream) -> None:
        try:
            next(stream)
            result = "message"
        except grpc.RpcError as e:
            result = e.code().name
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=first, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # Twenty streams are open or refused; the pool still answers a prepare.
    claim = new_claim(api, ["usb-1-3"])
    assert kubelet.prepare([claim])[claim[1]].error == ""
    assert sorted(set(outcomes)) == ["RESOURCE_EXHAUSTED", "message"]
    assert outcomes.count("message") == HEALTH_STREAMS
    for s in streams:
        s.cancel()
    # A cancelled stream frees its slot at once: a new stream is served again.
    fresh = None
    for _ in range(50):
        fresh = stub.NodeWatchResources(health_v1alpha1_pb2.NodeWatchResourcesRequest(),
                                        timeout=10)
        try:
            next(fresh)
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            threading.Event().wait(0.1)
    else:
        raise AssertionError("no health stream admitted after the others were cancelled")
    assert fresh is not None
    fresh.cancel()
    channel.close()


def test_v1_and_v1alpha1_clients_receive_the_same_health_stream(
        api: FakeApiServer, plugin: Plugin, hardware: Hardware) -> None:
    """rules: delivery.health-versions, delivery.health. A kubelet on v1 and one on v1alpha1
    watch at once over the real socket: both see every device healthy, the unplugged one
    unhealthy, and healthy again once it is back, message for message the same list."""
    new = TestKubelet(plugin.config.registration_socket)
    old = TestKubelet(plugin.config.registration_socket,
                      health=("v1alpha1.DRAResourceHealth",))
    seen: dict[str, list[list[tuple[str, str, int]]]] = {}
    cond = threading.Condition()

    def watch(k: TestKubelet) -> None:
        assert k.health_service is not None
        for msg in k.watch_health(timeout=30):
            with cond:
                seen[k.health_service].append(msg)
                cond.notify_all()

    def both_see(expected: list[tuple[str, str, int]]) -> None:
        with cond:
            assert cond.wait_for(lambda: all(m and m[-1] == expected for m in seen.values()),
                                 timeout=10), seen

    try:
        new.register()
        old.register()
        assert (new.health_service, old.health_service) == \
            ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
        claim = new_claim(api, ["usb-1-3", "pnp-00-01"])
        assert new.prepare([claim])[claim[1]].error == ""
        for k in (new, old):
            assert k.health_service is not None
            seen[k.health_service] = []
            threading.Thread(target=watch, args=(k,), daemon=True).start()
        healthy = [(NODE, "pnp-00-01", 1), (NODE, "usb-1-3", 1)]
        both_see(healthy)
        hardware.unplug("usb-1-3")
        plugin.reconcile(hardware.walk())
        both_see([(NODE, "pnp-00-01", 1), (NODE, "usb-1-3", 2)])
        hardware.plug("usb-1-3")
        plugin.reconcile(hardware.walk())
        both_see(healthy)
    finally:
        new.close()
        old.close()


def test_too_many_claims_in_one_call_is_refused(plugin: Plugin) -> None:
    with grpc.insecure_channel(f"unix:{plugin.config.dra_socket}") as ch:
        stub = dra_v1_pb2_grpc.DRAPluginStub(ch)
        claims = [dra_v1_pb2.Claim(namespace="ns", uid=f"u{i}", name=f"n{i}")
                  for i in range(MAX_CLAIMS + 1)]
        with pytest.raises(grpc.RpcError) as e:
            stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=claims),
                                      timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert cdi_files(plugin.config.cdi_dir) == []
    assert not (plugin.config.state_dir / STATE_FILE).exists()


def test_a_run_beside_a_running_plugin_exits_2_naming_the_holder(node: Node,
                                                                  tmp_path: Path) -> None:
    node.start()
    assert node.proc is not None
    out = subprocess.run(
        [*LIKEN, "run", "--no-api", *node.common(), "--plugin-dir", str(tmp_path / "p2"),
         "--registry-dir", str(tmp_path / "r2"), "--console", str(tmp_path / "console"),
         "--metrics-port", "0", "--metrics-addr", "127.0.0.1"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        line for line in out.stderr.strip().splitlines() if f"pid {node.proc.pid} " in line]
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r2" / "liken.sh-reg.sock").exists()
    k = node.kubelet()  # the first one still serves
    k.close()
