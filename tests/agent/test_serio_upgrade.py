"""A serial line stays attached across the agent's restarts and upgrades (docs/machine.md,
"Upgrades and restarts").

Real ``liken-devices run`` processes on one fixture node with a Pulse-Eight adapter whose
``/dev/ttyACM0`` is a real pty; the kernel's uevents are real. This kernel has no serport line
discipline, so ``serport_site`` answers the agents' calls on the line as a tty that serport holds
answers (tests/machine/serport_tty.py: while any instance holds it, termios calls fail with
EINVAL and TIOCGETD reads N_MOUSE until the last close; one reader, EBUSY for a second; the
serio port, CEC adapter and remote registered under the tty while the read lasts, with a real
uevent at registration and at release) around the real holder. Each agent writes its slice and
its Machine status to files the test reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.loopback import free_port
from tests.support.loopback import get as fetch
from tests.support.wait import wait_until

from .node import SYNTHETIC_TTY, FixtureNode, is_root

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not is_root() or not SYNTHETIC_TTY.exists(),
                                 reason="needs root for real uevents")]

REPO = Path(__file__).resolve().parents[2]
SITE = Path(__file__).resolve().parent / "serport_site"
DEVICES = ["usb-1-2-1-0-cec", "usb-1-2-1-0-input"]


class Line:
    """The adapter on the fixture node, its pty and the serport stand-in's configuration."""

    def __init__(self, tmp_path: Path) -> None:
        self.node = FixtureNode(tmp_path)
        self.master, self.slave = os.openpty()
        rdev = os.fstat(self.slave).st_rdev
        b = self.node.builder
        usb = b.usb_device("1-2", vendor="2548", product="1002", devnum=5, serial="P8-0001")
        iface = b.usb_interface(usb, "1.0", driver="cdc_acm", cls=0x02)
        tty = b.node(iface, "tty", "ttyACM0", os.major(rdev), os.minor(rdev), subdir="tty")
        dev_root = tmp_path / "dev"
        dev_root.mkdir()
        (dev_root / "ttyACM0").symlink_to(os.ttyname(self.slave))
        self.config = tmp_path / "serport.json"
        self.config.write_text(json.dumps({"dev_root": str(dev_root), "sysfs": str(b.root),
                                           "tty": tty.path, "state": str(tmp_path / "serport")}))
        self.machine = tmp_path / "machine.yaml"
        self.machine.write_text(yaml.safe_dump({"serio": [{
            "protocol": "pulse8-cec", "vendor": "2548", "product": "1002"}]}))
        self.tmp = tmp_path
        self.port_dir = b.dir(tty) / "serio0"

    def close(self) -> None:
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


class Agent:
    """One instance of the agent (one pod of the DaemonSet)."""

    def __init__(self, line: Line, name: str, **extra_env: str) -> None:
        self.dir = line.tmp / name
        self.dir.mkdir()
        self.port = free_port()
        self.log = self.dir / "log"
        args = [sys.executable, "-m", "liken_devices.cli", "run", "--node", "n1",
                *line.node.args(), "--machine", str(line.machine), "--no-api", "--no-plugin",
                "--seamless-upgrade", "--slice-out", str(self.dir / "slice.json"),
                "--status-out", str(self.dir / "status.json"), "--console", str(self.dir / "con"),
                "--metrics-addr", "127.0.0.1", "--metrics-port", str(self.port), "-v"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE), str(REPO / "src"),
                                                            str(REPO)]),
               "LIKEN_TEST_SERPORT": str(line.config), "POD_UID": name, **extra_env}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         env=env)
        self.rows_seen: list[tuple[str, str]] = []

    def status(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.dir / "status.json").read_text()))
        except (OSError, ValueError):
            return {}

    def serio(self) -> tuple[str, str] | None:
        """The line's (state, SerioAttached reason) in this agent's last status, recorded."""
        status = self.status()
        rows = status.get("serio") or []
        if not rows:
            return None
        reason = next(c["reason"] for c in status["conditions"] if c["type"] == "SerioAttached")
        seen = (rows[0]["state"], reason)
        if not self.rows_seen or self.rows_seen[-1] != seen:
            self.rows_seen.append(seen)
        return seen

    def devices(self) -> list[str]:
        try:
            obj = json.loads((self.dir / "slice.json").read_text())
        except (OSError, ValueError):
            return []
        return sorted(d["name"] for d in obj["spec"]["devices"] if d["name"].startswith("usb-1-2"))

    def walks(self, reason: str) -> float:
        status, text = fetch(self.port, "/metrics")
        assert status == 200
        for row in text.splitlines():
            if row.startswith(f'liken_devices_walks_total{{reason="{reason}"}}'):
                return float(row.split()[-1])
        return 0.0

    def wait(self, cond: Callable[[], object], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert self.proc.poll() is None, f"{what}: agent exited\n{self.log.read_text()}"
            assert time.monotonic() < deadline, f"{what}\n{self.log.read_text()}"
            time.sleep(0.05)

    def attached(self) -> None:
        self.wait(lambda: self.serio() == ("Attached", "AllAttached")
                  and self.devices() == DEVICES, "attached, -cec and -input published")

    def term(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, self.log.read_text()
        return self.log.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def line(tmp_path: Path) -> Iterator[Line]:
    made = Line(tmp_path)
    yield made
    made.close()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for a in started:
        a.kill()


def never_failed(agent: Agent) -> None:
    assert all(state != "Failed" for state, _ in agent.rows_seen), agent.rows_seen
    assert "failed" not in agent.log.read_text().lower().split("serio", 1)[-1], \
        agent.log.read_text()


def test_surge_upgrade_keeps_the_line(line: Line, agents: list[Agent]) -> None:
    """start, overlap, the old one's exit: Waiting in the new one, then attached at the release
    (a walk the port's remove uevent wakes at once), and the -cec/-input devices come back."""
    old = Agent(line, "old")
    agents.append(old)
    old.attached()

    new = Agent(line, "new")  # the surge: the new pod starts while the old one holds the line
    agents.append(new)
    new.wait(lambda: new.serio() == ("Waiting", "LineHeldElsewhere"), "Waiting in the new one")
    assert "held by another process" in new.status()["serio"][0]["message"]
    assert new.devices() == DEVICES  # the old one's attachment publishes them meanwhile
    time.sleep(1.5)  # walks come and go; the new one keeps Waiting and never touches the line
    assert new.serio() == ("Waiting", "LineHeldElsewhere")
    assert old.serio() == ("Attached", "AllAttached")
    assert new.walks("serio") == 0

    log = old.term()  # the old pod's exit
    # The old instance releases the line as late as it can: after it stopped everything else.
    assert log.index("stopped") < log.index("serio pulse8-cec: released ttyACM0"), log
    new.attached()
    assert new.walks("serio") >= 1  # the release's remove uevent walked at once
    never_failed(new)
    assert line.port_dir.exists()  # the new one holds it now
    # One attachment, after the release: while the old one held the line, the new one never
    # configured it, started a holder or said Attached (its walk sees the port through the CEC
    # adapter and the remote under the tty, and the open reads N_MOUSE).
    assert new.log.read_text().count("attached ttyACM0") == 1, new.log.read_text()


def test_crash_and_restart(line: Line, agents: list[Agent]) -> None:
    """After a crash the new instance attaches at its first walk; so does one after a restart."""
    first = Agent(line, "first")
    agents.append(first)
    first.attached()
    first.kill()  # SIGKILL: no cleanup; the holder's lifeline ends and the port goes
    wait_until(lambda: not line.port_dir.exists(), 30, "the killed holder's port to go",
               every=0.05)

    second = Agent(line, "second")
    agents.append(second)
    second.attached()
    assert second.rows_seen[0] == ("Attached", "AllAttached"), second.rows_seen  # first walk
    second.term()  # a restart: the next instance starts after this one's exit

    third = Agent(line, "third")
    agents.append(third)
    third.attached()
    assert third.rows_seen[0] == ("Attached", "AllAttached"), third.rows_seen
    never_failed(third)


def test_crash_during_an_upgrade(line: Line, agents: list[Agent]) -> None:
    """The old instance crashes while the new one waits: the new one attaches at the release."""
    old = Agent(line, "old")
    agents.append(old)
    old.attached()
    new = Agent(line, "new")
    agents.append(new)
    new.wait(lambda: new.serio() == ("Waiting", "LineHeldElsewhere"), "Waiting in the new one")
    old.kill()
    new.attached()
    never_failed(new)


def test_the_old_instance_s_slow_exit(line: Line, agents: list[Agent]) -> None:
    """The old pod's exit is slow after its holder ended: the port is gone (its remove uevent
    walks the new instance at once) but the tty is still open in N_MOUSE, so termios fails with
    EINVAL. The new instance waits, walks again on its own, and attaches within a few seconds of
    the old one's last close; the -cec and -input devices are in its slice."""
    old = Agent(line, "old", LIKEN_TEST_SERPORT_SLOW_EXIT="2")
    agents.append(old)
    old.attached()
    new = Agent(line, "new")
    agents.append(new)
    new.wait(lambda: new.serio() == ("Waiting", "LineHeldElsewhere"), "Waiting in the new one")

    old.proc.send_signal(signal.SIGTERM)
    # The old holder ended: the port is gone, the tty still open.
    wait_until(lambda: not line.port_dir.exists(), 30,
               lambda: f"the old holder's port to go; the old agent's log:\n{old.log.read_text()}")
    assert old.proc.poll() is None
    new.wait(lambda: new.walks("serio") >= 1, "the port's remove uevent walked at once")
    assert new.serio() == ("Waiting", "LineHeldElsewhere"), new.status()
    assert old.proc.wait(30) == 0, old.log.read_text()
    exited = time.monotonic()
    new.wait(lambda: new.serio() == ("Attached", "AllAttached") and new.devices() == DEVICES,
             "attached after the old one's exit, -cec and -input published", timeout=10)
    took = time.monotonic() - exited
    print(f"attached {took:.2f} s after the old instance's exit")
    assert took < 5
    # It met the tty in serport (not only the port in the walk), and said so once.
    assert new.log.read_text().count("TIOCGETD reads N_MOUSE") == 1, new.log.read_text()
    never_failed(new)
    assert line.port_dir.exists()  # the new one holds it now
