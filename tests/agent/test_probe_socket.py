"""The kubelet's probes reach only the agent: a foreign listener that joins the shared port of a
surge upgrade (any root process on the host network can, with ``SO_REUSEPORT``) is handed the
port's connections, but the probes go over the agent's unix socket in the pod's private /tmp
(``run --probe-socket``, ``liken-devices probe``), which it cannot answer (docs/plugin.md,
"Upgrades")."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from liken_devices.cli import build_parser, main
from liken_devices.kube.endpoint import Endpoint, EndpointError
from tests.support.loopback import free_port
from tests.support.loopback import get as fetch

from .test_deploy import documents

REPO = Path(__file__).resolve().parents[2]


class Foreign:
    """A stranger's listener on the agent's port: it joins the SO_REUSEPORT group and says
    "ok" to everything (it would hide a hung agent)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.answered = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n"
                             b"\r\nforeign\n")
                self.answered += 1

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def hung_agent(tmp_path: Path) -> Iterator[tuple[Endpoint, Path]]:
    """The agent's endpoint in surge mode, its loop wedged: /healthz says so."""
    path = tmp_path / "probe.sock"
    endpoint = Endpoint("127.0.0.1", free_port(), lambda: (b"", "text/plain"),
                        health=lambda: (False, "a pass of the loop has been running for over "
                                               "120 s"),
                        ready=lambda: (True, "ready"), reuse_port=True, probe_socket=path)
    try:
        yield endpoint, path
    finally:
        endpoint.stop()


def test_a_foreign_listener_gets_the_port_but_not_the_probes(
        hung_agent: tuple[Endpoint, Path], capsys: pytest.CaptureFixture[str]) -> None:
    endpoint, path = hung_agent
    foreign = Foreign(endpoint.port)
    try:
        # The shared port: the stranger, bound last, is handed every connection.
        assert [fetch(endpoint.port, "/healthz") for _ in range(10)] == [(200, "foreign\n")] * 10
        assert foreign.answered == 10
        # The probes: 10 of 10 read the agent's own state, a hung agent reported as hung.
        for _ in range(10):
            assert main(["probe", "--socket", str(path), "/healthz"]) == 1
            assert capsys.readouterr().out == (
                "a pass of the loop has been running for over 120 s\n")
        assert main(["probe", "--socket", str(path), "/readyz"]) == 0
        assert capsys.readouterr().out == "ready\n"
        assert foreign.answered == 10
    finally:
        foreign.close()


def test_the_probe_socket_is_the_agents_alone(hung_agent: tuple[Endpoint, Path]) -> None:
    endpoint, path = hung_agent
    assert path.stat().st_mode & 0o777 == 0o600
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with stranger, pytest.raises(OSError):  # the path is taken while the agent runs
        stranger.bind(str(path))
    endpoint.stop()
    assert not path.exists()  # removed at stop


def test_a_stale_socket_is_replaced_and_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "probe.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # an agent that died left its socket file
    endpoint = Endpoint("127.0.0.1", 0, lambda: (b"", "text/plain"), probe_socket=path)
    endpoint.stop()
    path.write_text("not a socket")
    with pytest.raises(EndpointError, match="something other than a socket"):
        Endpoint("127.0.0.1", 0, lambda: (b"", "text/plain"), probe_socket=path)


def test_no_agent_is_a_failed_probe_in_one_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--socket", str(tmp_path / "none.sock"), "/healthz"]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "cannot ask the agent" in out


def test_the_daemonsets_probes_ask_the_agent_over_its_private_socket() -> None:
    ds = next(d for d in documents() if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    run = build_parser().parse_args([a.replace("$(NODE_NAME)", "node-1")
                                     .replace("$(KUBELET_DIR)", "/var/lib/kubelet")
                                     for a in container["args"]])
    assert run.probe_socket is not None and run.metrics_port is not None
    for kind, target in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                         ("readinessProbe", "/readyz")):
        probe = container[kind]
        assert "httpGet" not in probe and "tcpSocket" not in probe
        command = probe["exec"]["command"]
        assert command[0] == "liken-devices"
        asked = build_parser().parse_args(command[1:])
        assert asked.func.__name__ == "cmd_probe"
        assert (asked.socket, asked.target) == (run.probe_socket, target)
        assert asked.timeout < probe["timeoutSeconds"]
    # The socket's directory is the pod's own: an emptyDir, not a host path.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    directory = str(run.probe_socket.parent)
    assert "emptyDir" in volumes[mounts[directory]]


def _console_probe(*argv: str) -> subprocess.CompletedProcess[str]:
    """``liken-devices probe ...`` the console script's way, saying which modules it loaded."""
    script = ("import sys; from liken_devices import entry; sys.argv = ['liken-devices', "
              f"*{list(argv)!r}]; rc = entry.devices(); "
              "print(sorted(m for m in sys.modules if m.startswith('liken_devices') "
              "or m in ('argparse', 'logging'))); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def test_the_console_script_probes_the_short_way(hung_agent: tuple[Endpoint, Path]) -> None:
    _, path = hung_agent
    out = _console_probe("probe", f"--socket={path}", "/healthz")
    assert out.returncode == 1, out.stderr
    line, loaded = out.stdout.splitlines()
    assert line == "a pass of the loop has been running for over 120 s"
    # Only the entry point and the probe: no argument parser, no logging, no other module.
    assert loaded == str(["liken_devices", "liken_devices.entry", "liken_devices.probe"])
    out = _console_probe("probe", "--socket", str(path), "/readyz")
    assert out.returncode == 0 and out.stdout.splitlines()[0] == "ready"


@pytest.mark.parametrize("argv", [["probe", "/healthz"], ["probe", "--socket"],
                                  ["probe", "--socket=/x", "/metrics"],
                                  ["probe", "--socket=/x", "--timeout=soon", "/healthz"]])
def test_a_malformed_probe_line_is_the_full_parsers_usage_error(argv: list[str]) -> None:
    out = _console_probe(*argv)
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1 and "usage" not in out.stdout
