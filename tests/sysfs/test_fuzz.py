"""Fuzz: generated recordings and sysfs trees are read or refused, never crash, hang or blow up.

The property (README, "Fuzzing"): the reader returns a snapshot whose every node name stays
under /dev with numbers inside ``dev_t``, or raises :class:`InputError`; the command exits 0 or
2 with one line, no traceback, within a memory limit and a deadline (``tests/support/hostile.py``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.errors import InputError
from liken_devices.sysfs.model import Snapshot
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import parse_recording
from tests.support.hostile import assert_fails_closed, examples, run_cli
from tests.support.sysfs_builder import SysfsBuilder

pytestmark = pytest.mark.fuzz

# Characters that broke readers before: line separators, controls, non-ASCII digits, path bits.
NASTY = "\u2028\u2029\u0085\x0b\x0c\x1c\r\x00\t /.=:\\²٣é\udcff"
text = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(NASTY), max_size=40)
numberish = st.one_of(st.integers(-5, 1 << 22).map(str), st.sampled_from(
    ["", "0", "001", "²", "٣", "0x10", "1_0", "+1", " 7 ", "4096", "1048576", "9" * 30]), text)
KEYS = ["SUBSYSTEM", "DEVNAME", "MAJOR", "MINOR", "BUSNUM", "DEVNUM", "PRODUCT", "PCI_ID",
        "PCI_CLASS", "TYPE", "INTERFACE", "DRIVER", "DEVTYPE", "MODALIAS"]
SUBSYSTEMS = ["usb", "pci", "tty", "drm", "sound", "input", "block", "misc", "hidraw"]
component = st.one_of(st.sampled_from(["pci0000:00", "0000:00:02.0", "usb1", "1-2", "1-2:1.0",
                                       "tty", "ttyACM0", "drm", "renderD128", "..", ".", ""]),
                      text)
path = st.lists(component, min_size=1, max_size=5).map(lambda parts: "/devices/" + "/".join(parts))


@st.composite
def block(draw: st.DrawFn) -> str:
    lines = [f"P: {draw(path)}"]
    if draw(st.booleans()):
        lines.append(f"N: {draw(st.one_of(text, st.sampled_from(['mem', '../mem', 'dri/x'])))}")
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from("EEEEAHLSN?"))
        if kind == "E":
            key = draw(st.sampled_from(KEYS))
            value = draw(st.sampled_from(SUBSYSTEMS)) if key == "SUBSYSTEM" else draw(numberish)
            lines.append(f"E: {key}={value}")
        elif kind in "AHL":
            lines.append(f"{kind}: {draw(st.sampled_from(['dev', 'busnum', 'driver', 'x']))}="
                         f"{draw(text)}")
        else:
            lines.append(f"{kind}: {draw(text)}")
    return "\n".join(lines) + "\n"


recording = st.lists(block(), max_size=6).map("\n".join)


def check_snapshot(snap: Snapshot) -> None:
    for dev in snap.devices.values():
        assert dev.path.startswith("/devices/")
        for key, value in dev.props.items():
            (key + value).encode("utf-8")  # no lone surrogate reaches JSON, YAML or a log
        if dev.node is not None:
            check_devname(dev.node.name)
            # The kernel's dev_t: a 12-bit major and a 20-bit minor (MINORBITS).
            assert 0 <= dev.node.major <= 4095 and 0 <= dev.node.minor <= 1048575, dev.node


def check_devname(name: str) -> None:
    """The rule for a name under /dev, stated here rather than taken from the reader: relative,
    at most 255 characters, components of the characters kernel device names use, none empty,
    "." or ".."."""
    assert 0 < len(name) <= 255 and not name.startswith("/"), name
    for part in name.split("/"):
        assert part not in ("", ".", ".."), name
        assert all(c.isascii() and (c.isalnum() or c in "_.:+@=,-") for c in part), name


@settings(max_examples=examples(150), deadline=None)
@given(recording, st.binary(max_size=16), st.integers(0, 10_000))
def test_generated_recordings_parse_or_are_refused(text: str, noise: bytes, at: int) -> None:
    for candidate in (text, text[:at] + noise.decode("utf-8", "surrogateescape") + text[at:]):
        try:
            snap = parse_recording(candidate, "fuzz")
        except InputError as exc:
            assert "\n" not in str(exc)
            continue
        check_snapshot(snap)


@settings(max_examples=examples(8), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recording | st.binary(max_size=2000).map(lambda b: b.decode("latin-1")))
def test_the_command_on_a_generated_recording_fails_closed(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.umockdev"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        out = run_cli(["scan", "--recording", str(path), "--node", "n", "--facts", tmp,
                       "--modules-dir", tmp, "--hwdata-dir", tmp], memory=384 << 20,
                      deadline=30)
        assert_fails_closed(out)


# ---- sysfs trees -------------------------------------------------------------------------------

MUTATIONS = ["fifo", "zero", "loop", "huge", "bytes", "dir", "dangling", "remove"]


def _tree(root: Path) -> list[Path]:
    b = SysfsBuilder(root)
    b.console("ttyS0")
    b.gpu()
    ctrl = b.pci("0000:00:14.0", driver="xhci_hcd", cls=0x0C0330)
    usb = b.usb_device("1-2", parent=ctrl, busnum=1, devnum=2)
    iface = b.usb_interface(usb, driver="usbhid", cls=3)
    b.node(iface, "hidraw", "hidraw0", 240, 0, subdir="hidraw")
    files = [Path(dirpath) / name for dirpath, _, names in os.walk(root) for name in names]
    links = [Path(dirpath) / name for dirpath, dirs, _ in os.walk(root) for name in dirs
             if (Path(dirpath) / name).is_symlink()]
    return sorted(files + links)


def _mutate(target: Path, how: str, content: bytes) -> None:
    if target.is_dir() and not target.is_symlink():
        return
    if os.path.lexists(target):
        target.unlink()  # a file, a link, or a FIFO an earlier change made
    if how == "fifo":
        os.mkfifo(target)
    elif how == "zero":
        target.symlink_to("/dev/zero")
    elif how == "loop":
        target.symlink_to(target.name)
    elif how == "huge":
        with open(target, "wb") as f:
            f.truncate(1 << 30)
    elif how == "bytes":
        target.write_bytes(content)
    elif how == "dir":
        target.mkdir()
    elif how == "dangling":
        target.symlink_to("/nonexistent/x")


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(MUTATIONS),
                          st.binary(max_size=200) | st.sampled_from(
                              [b"MAJOR=\xc2\xb2\n", b"DEVNAME=../mem\n", b"NAME=a\xe2\x80\xa8"
                               b"DEVNAME=mem\n", b"MAJOR=99999\nMINOR=1\n"])),
                min_size=1, max_size=4))
def test_generated_trees_are_read_within_bounds(changes: list[tuple[int, str, bytes]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sys"
        entries = _tree(root)
        for index, how, content in changes:
            _mutate(entries[index % len(entries)], how, content)
        try:
            snap = read_sysfs(root)
        except InputError as exc:
            assert "dev/char" in str(exc)
            return
        check_snapshot(snap)


@settings(max_examples=examples(6), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(MUTATIONS),
                          st.binary(max_size=100)), min_size=1, max_size=4))
def test_the_command_on_a_generated_tree_fails_closed(changes: list[tuple[int, str,
                                                                         bytes]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sys"
        entries = _tree(root)
        for index, how, content in changes:
            _mutate(entries[index % len(entries)], how, content)
        out = run_cli(["scan", "--sysfs", str(root), "--node", "n", "--facts", tmp,
                       "--modules-dir", tmp, "--hwdata-dir", tmp], memory=384 << 20,
                      deadline=30)
        assert_fails_closed(out)
