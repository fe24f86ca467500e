"""The agent's metrics and its endpoint: claims are counted (not calls), names carry units, no
``_created`` series; the endpoint listens where it is told, stays bounded under idle
connections, and a busy port is one line and exit 2 (docs/agent.md, "Metrics and health")."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from liken_devices.agent.metrics import AgentMetrics
from liken_devices.cli import main
from liken_devices.kube.endpoint import Endpoint, EndpointError, default_address
from liken_devices.plugin import ClaimRef, Plugin, PluginConfig
from tests.support.loopback import get


def sample(m: AgentMetrics, name: str, **labels: str) -> float:
    value = m.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def test_claims_are_counted_per_claim_and_requests_timed() -> None:
    m = AgentMetrics()
    m.prepared({"a": "", "b": "claim gone", "c": ""}, 0.02)
    m.unprepared({"a": ""}, 0.001)
    assert sample(m, "liken_devices_claims_prepared_total", result="ok") == 2
    assert sample(m, "liken_devices_claims_prepared_total", result="error") == 1
    assert sample(m, "liken_devices_claims_unprepared_total", result="ok") == 1
    assert sample(m, "liken_devices_prepare_request_duration_seconds_count") == 1
    assert sample(m, "liken_devices_prepare_request_duration_seconds_sum") == pytest.approx(0.02)


def test_the_plugin_reports_to_the_metrics_it_was_given(tmp_path: Path) -> None:
    """Metrics are passed in; nothing replaces the plugin's methods."""
    m = AgentMetrics()
    config = PluginConfig(node="n", cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state",
                          plugin_dir=tmp_path / "plugin", registry_dir=tmp_path / "reg",
                          sysfs=tmp_path / "sys")
    plugin = Plugin(config, walk=lambda: None, kube_client=None, metrics=m)  # type: ignore[arg-type,return-value]
    before = Plugin.unprepare
    out = plugin.unprepare([ClaimRef(uid="0b7f4c3e-6a52-4c1f-9a57-1f2f8d0c2a11",
                                     namespace="default", name="c")])
    assert list(out.values()) == [""]  # a claim it never saw succeeds
    assert Plugin.unprepare is before and "unprepare" not in vars(plugin)
    assert sample(m, "liken_devices_claims_unprepared_total", result="ok") == 1
    m.track_registration(lambda: plugin.registered)
    assert sample(m, "liken_devices_registered") == 0
    plugin.registration = (True, "")
    assert sample(m, "liken_devices_registered") == 1


def test_exposition_has_units_build_process_and_no_created() -> None:
    m = AgentMetrics()
    m.published(5, 7)
    m.api_error("slice", None)
    body = m.exposition()[0].decode()
    assert "liken_devices_published_devices 5.0" in body
    assert "liken_devices_slice_writes_total 1.0" in body
    assert 'liken_devices_api_errors_total{code="connection",op="slice"} 1.0' in body
    assert 'liken_devices_build_info{python="' in body
    assert "process_open_fds" in body and "process_resident_memory_bytes" in body
    assert "_created" not in body


def test_address_defaults_to_loopback_or_the_pod_ip() -> None:
    assert default_address({}) == "127.0.0.1"
    assert default_address({"POD_IP": "10.1.2.3"}) == "10.1.2.3"
    assert default_address({"POD_IP": "fd00::5"}) == "fd00::5"
    assert default_address({"POD_IP": "not-an-ip"}) == "127.0.0.1"


def test_endpoint_serves_probes_and_stops() -> None:
    m = AgentMetrics()
    m.uevents.inc(3)
    state = {"ready": False}
    server = m.serve(0, "127.0.0.1", health=lambda: (True, "ok: 1 walks"),
                     ready=lambda: (state["ready"], "the kubelet has not registered the plugin"))
    try:
        code, body = get(server.port, "/metrics")
        assert code == 200 and "liken_devices_uevents_total 3.0" in body
        assert get(server.port, "/healthz") == (200, "ok: 1 walks\n")
        assert get(server.port, "/readyz") == (503, "the kubelet has not registered the plugin\n")
        state["ready"] = True
        assert get(server.port, "/readyz")[0] == 200
        assert get(server.port, "/other")[0] == 404
    finally:
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2


def _threads() -> int:
    return threading.active_count()


def test_many_idle_connections_neither_lock_out_a_scrape_nor_grow_the_server() -> None:
    m = AgentMetrics()
    server = Endpoint("127.0.0.1", 0, m.exposition, max_connections=16, timeout=30.0)
    threads = _threads()
    idle: list[socket.socket] = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=20)
            s.sendall(b"GET /metr")  # a request that never finishes
            idle.append(s)
        # (A loaded machine may drop a SYN while 200 connections arrive: allow its retries.)
        code, body = get(server.port, "/metrics", timeout=20.0)
        assert code == 200 and "liken_devices_walks" in body
        assert server.open_connections <= 16  # what the server holds, whatever clients open
        assert server.evicted >= 200 - 16
        assert _threads() == threads  # no thread per connection
    finally:
        for s in idle:
            s.close()
        server.stop()


def test_a_slow_client_is_cut_at_the_timeout_and_a_huge_request_refused() -> None:
    m = AgentMetrics()
    server = Endpoint("127.0.0.1", 0, m.exposition, timeout=0.3)
    try:
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        slow.sendall(b"GET /metrics HTTP/1.1\r\n")
        slow.settimeout(5)
        assert slow.recv(100) == b""  # closed by the server, no answer
        slow.close()
        big = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        big.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000)
        assert big.recv(100).startswith(b"HTTP/1.1 431 ")
        big.close()
        assert server.open_connections == 0 or time.sleep(0.1) or server.open_connections == 0
    finally:
        server.stop()


def test_a_busy_port_is_one_line() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        with pytest.raises(EndpointError) as info:
            AgentMetrics().serve(port, "127.0.0.1")
        assert str(info.value) == (f"cannot listen on 127.0.0.1:{port}: the port is in use by "
                                   "another process (another agent on this node?)")
        with pytest.raises(EndpointError, match="not an IP address"):
            AgentMetrics().serve(0, "localhost")
    finally:
        holder.close()


def test_run_with_a_busy_metrics_port_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.agent.node import FixtureNode

    node = FixtureNode(tmp_path / "node")
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        rc = main(["run", "--node", "n1", *node.args(), "--no-api", "--no-plugin",
                   "--no-machine-side", "--metrics-port", str(port),
                   "--metrics-addr", "127.0.0.1"])
    finally:
        holder.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1] == (f"liken-devices: cannot listen on 127.0.0.1:{port}: the port is in use "
                       "by another process (another agent on this node?)")
    assert not any("Traceback" in line for line in err)


def test_a_surge_upgrade_shares_the_port_and_an_accident_does_not() -> None:
    def answering(tag: bytes) -> Endpoint:
        port = first.port if tag != b"old" else 0
        return Endpoint("127.0.0.1", port, lambda: (tag, "text/plain"), reuse_port=True)

    first = answering(b"old")
    try:
        assert get(first.port, "/metrics") == (200, "old")
        second = answering(b"new")
        try:
            # While both listen, the newer answers every connection (the kubelet's probes of
            # the new pod read the new instance), and the old one is still there.
            assert {get(first.port, "/metrics")[1] for _ in range(20)} == {"new"}
        finally:
            second.stop()
        assert {get(first.port, "/metrics")[1] for _ in range(5)} == {"old"}
        with pytest.raises(EndpointError, match="in use"):
            AgentMetrics().serve(first.port, "127.0.0.1")  # not a surge: the port is taken
    finally:
        first.stop()
