"""Holding a line across processes: the CLI's foreground hold, and no holder outliving its agent.

These run ``liken-devices machine apply`` and a small agent stand-in as real processes. The
adapter's tty in the sysfs fixture is named ttyACM0 but its device node is a real pty
(``DEVNAME=pts/N`` with the pty's numbers), so the command opens and configures a real line.
Where the kernel lacks serio, a ``sitecustomize`` in the child stands in for the two serio
ioctls (recorded in nothing, simply not sent); everything else is real.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.wait import wait_until

from .test_machine_cli import link

USB = "devices/pci0000:00/0000:00:14.0/usb1/1-4"
FAKE_SERIO = textwrap.dedent("""
    from liken_devices.machine import serio
    _real = serio.LineOps.ioctl
    def ioctl(self, fd, request, arg):
        if request in (serio.TIOCSETD, serio.SPIOCSTYPE):
            return None
        return _real(self, fd, request, arg)
    serio.LineOps.ioctl = ioctl
""")


def write_adapter_on_pty(sysfs: Path, pts: str, rdev: int) -> None:
    dev = sysfs / USB
    dev.mkdir(parents=True)
    (dev / "uevent").write_text("DEVTYPE=usb_device\nPRODUCT=2548/1002/101\nBUSNUM=001\n"
                                "DEVNUM=009\n")
    for attr, value in (("idVendor", "2548"), ("idProduct", "1002"), ("busnum", "1"),
                        ("devnum", "9")):
        (dev / attr).write_text(value + "\n")
    link(dev / "subsystem", sysfs / "bus" / "usb")
    link(sysfs / "bus" / "usb" / "devices" / "1-4", dev)
    iface = dev / "1-4:1.0"
    iface.mkdir()
    (iface / "uevent").write_text("DEVTYPE=usb_interface\nINTERFACE=2/2/1\n")
    link(iface / "subsystem", sysfs / "bus" / "usb")
    link(iface / "driver", sysfs / "bus" / "usb" / "drivers" / "cdc_acm")
    link(sysfs / "bus" / "usb" / "devices" / "1-4:1.0", iface)
    tty = iface / "tty" / "ttyACM0"
    tty.mkdir(parents=True)
    (tty / "uevent").write_text(f"MAJOR={os.major(rdev)}\nMINOR={os.minor(rdev)}\n"
                                f"DEVNAME={pts.removeprefix('/dev/')}\n")
    link(tty / "subsystem", sysfs / "class" / "tty")
    link(sysfs / "dev" / "char" / f"{os.major(rdev)}:{os.minor(rdev)}", tty)


@pytest.fixture
def pty() -> Iterator[tuple[int, int, str]]:
    master, slave = os.openpty()
    yield master, slave, os.ttyname(slave)
    for fd in (master, slave):
        with contextlib.suppress(OSError):
            os.close(fd)


def holders_of(pts: str) -> list[int]:
    """Processes running the holder with ``pts`` open."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"liken_devices.machine.holder" not in cmd:
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == pts for fd in fds):
                found.append(int(pid))
        except OSError:
            continue
    return found


def start_cli(tmp_path: Path, pty: tuple[int, int, str], fake_serio: bool
              ) -> subprocess.Popen[str]:
    _, slave, pts = pty
    sysfs = tmp_path / "sys"
    write_adapter_on_pty(sysfs, pts, os.fstat(slave).st_rdev)
    spec = tmp_path / "machine.yaml"
    spec.write_text(yaml.safe_dump({"serio": [{"protocol": "rainshadow-cec", "vendor": "2548",
                                               "product": "1002"}]}))
    env = dict(os.environ)
    if fake_serio:
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(FAKE_SERIO)
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    # machine apply acts on this host alone (rules: machine.apply-this-host): the tree that
    # describes this host's pty is this host's /sys in a mount namespace of the command's own.
    return subprocess.Popen(
        [*own_sysfs(sysfs), sys.executable, "-c", "import sys; from liken_devices.cli import "
                                                   "main; sys.exit(main(sys.argv[1:]))",
         "machine", "apply", "--machine", str(spec),
         "--modules-dir", str(tmp_path / "lib" / "modules" / "x"), "--facts", str(tmp_path),
         "-o", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def own_sysfs(tree: Path) -> list[str]:
    """The command line prefix that runs a command with ``tree`` mounted over /sys in a private
    mount namespace (the host's /sys untouched); the test is skipped where that needs a
    privilege this run lacks."""
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                           capture_output=True, check=False) \
        if os.geteuid() == 0 and shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("a private mount namespace (unshare -m, as root) is not available")
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /sys && exec "$@"', str(tree)]


def first_document(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The first status the command prints (``-o json``: an object that ends with ``}``)."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line == "}\n":
            break
    return dict(json.loads("".join(lines)))


def documents(text: str) -> list[dict[str, Any]]:
    decoder = json.JSONDecoder()
    docs, pos = [], 0
    while text[pos:].strip():
        doc, end = decoder.raw_decode(text, pos)
        docs.append(doc)
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return docs


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_cli_holds_until_sigterm(tmp_path: Path, pty: tuple[int, int, str]) -> None:
    proc = start_cli(tmp_path, pty, fake_serio=True)
    try:
        doc = first_document(proc)
        serio = doc["serio"][0]
        assert (serio["tty"], serio["state"]) == ("ttyACM0", "Attached")
        wait_until(lambda: holders_of(pty[2]), 30.0, "a holder of the tty", every=0.05)
        assert proc.poll() is None  # still holding
        time.sleep(0.2)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        wait_until(lambda: not holders_of(pty[2]), 30.0, "the tty without a holder",
                   every=0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_reports_a_line_that_ends_and_exits(tmp_path: Path,
                                                pty: tuple[int, int, str]) -> None:
    proc = start_cli(tmp_path, pty, fake_serio=True)
    try:
        first_document(proc)
        wait_until(lambda: holders_of(pty[2]), 30.0, "a holder of the tty", every=0.05)
        master, slave, _ = pty
        os.close(slave)
        os.close(master)  # the line hangs up, as an unplugged adapter's does
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 1, err
        later = documents(out)[-1]
        assert later["serio"][0]["state"] == "Failed"
        assert "ended" in later["serio"][0]["message"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_real_tiocsetd_failure_on_this_kernel(tmp_path: Path,
                                                 pty: tuple[int, int, str]) -> None:
    from .test_machine_serio import kernel_has_serport

    if kernel_has_serport():
        pytest.skip("this kernel has the serport line discipline")
    proc = start_cli(tmp_path, pty, fake_serio=False)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    row = json.loads(out)["serio"][0]
    assert row["state"] == "Failed"
    assert "TIOCSETD N_MOUSE) failed: [Errno 22] Invalid argument" in row["message"]
    assert not holders_of(pty[2])


def test_holder_does_not_outlive_its_agent(tmp_path: Path, pty: tuple[int, int, str]) -> None:
    """The agent is SIGKILLed (no cleanup at all): the holder sees its lifeline end and exits."""
    _, _, pts = pty
    agent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import os, sys, time
            from liken_devices.machine.serio import ProcessHolder
            fd = os.open({pts!r}, os.O_RDWR | os.O_NOCTTY)
            h = ProcessHolder.start(fd)
            print(h.pid, flush=True)
            time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None
        holder_pid = int(agent.stdout.readline())
        wait_until(lambda: holder_pid in holders_of(pts), 30.0, "the holder to hold the tty",
                   every=0.05)
        agent.kill()
        agent.wait()
        wait_until(lambda: gone(holder_pid), 30.0, "the holder to end", every=0.05)
        assert holder_pid not in holders_of(pts)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
