"""Hostile recordings and sysfs trees: refused in one line, or read within bounds; never a hang.

Each case here was a traceback, a hang, a memory blow-up or an injected node before the readers
were hardened (docs/inventory.md, "Bad input").
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from liken_devices.errors import InputError
from liken_devices.sysfs import reader, umockdev
from liken_devices.sysfs.reader import MAX_ATTR, read_sysfs
from liken_devices.sysfs.umockdev import load_recording, parse_recording
from tests.support.hostile import assert_fails_closed, run_cli
from tests.support.sysfs_builder import SysfsBuilder

# The USB device and its parents, as umockdev-record writes them (rules: hardware.whole-recordings).
USB = """P: /devices/pci0000:00/0000:00:14.0
E: SUBSYSTEM=pci

P: /devices/pci0000:00/0000:00:14.0/usb1
E: SUBSYSTEM=usb

P: /devices/pci0000:00/0000:00:14.0/usb1/1-2
E: SUBSYSTEM=usb
E: DEVTYPE=usb_device
E: DRIVER=usb
E: PRODUCT=46d/c52b/1201
E: BUSNUM=001
E: DEVNUM=002
E: MAJOR=189
E: MINOR=1
A: product=Receiver{sep}{sep}P: /devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0/fake{sep}\
N: mem{sep}E: SUBSYSTEM=mem{sep}E: MAJOR=1{sep}E: MINOR=1
"""


def _cli(*argv: str) -> list[str]:
    return ["scan", "--facts", "/nonexistent", "--modules-dir", "/nonexistent",
            "--hwdata-dir", "/nonexistent", "--node", "n", *argv]


# ---- recordings ------------------------------------------------------------------------------


@pytest.mark.parametrize("sep", ["\u2028", "\u0085", "\u2029", "\x0b", "\x0c", "\x1c", "\r"])
def test_a_line_separator_inside_a_value_injects_no_line(sep: str) -> None:
    snap = parse_recording(USB.format(sep=sep))
    assert list(snap.devices) == ["/devices/pci0000:00/0000:00:14.0",
                                  "/devices/pci0000:00/0000:00:14.0/usb1",
                                  "/devices/pci0000:00/0000:00:14.0/usb1/1-2"]
    nodes = [d.node.name for d in snap.devices.values() if d.node]
    assert nodes == ["bus/usb/001/002"]  # no /dev/mem
    assert sep in snap.devices["/devices/pci0000:00/0000:00:14.0/usb1/1-2"].attr("product") \
        or sep == "\r"


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "+1", "1_0", " ", "9" * 30])
def test_busnum_is_ascii_digits_only(value: str) -> None:
    text = USB.format(sep=" ").replace("E: BUSNUM=001", f"E: BUSNUM={value}").replace(
        "E: MAJOR=189\nE: MINOR=1\n", "A: dev=189:1\n")
    dev = parse_recording(text).devices["/devices/pci0000:00/0000:00:14.0/usb1/1-2"]
    assert dev.node is None or dev.node.name == "1-2"  # never an invented bus/usb/003 name
    assert "busnum" not in dev.attrs


@pytest.mark.parametrize(("major", "minor"), [("\u00b2", "1"), ("1", "\u0663"), ("4096", "0"),
                                              ("1", "1048576"), ("-1", "1")])
def test_device_numbers_outside_dev_t_make_no_node(major: str, minor: str) -> None:
    text = USB.format(sep=" ").replace("E: MAJOR=189", f"E: MAJOR={major}").replace(
        "E: MINOR=1", f"E: MINOR={minor}")
    assert parse_recording(text).devices["/devices/pci0000:00/0000:00:14.0/usb1/1-2"].node is None


@pytest.mark.parametrize("name", ["../mem", "dri/../../mem", "/dev/../mem", "a//b", "x\x00y",
                                  "./x", "ok\u2028no", "caf\u00e9", "a b", "x;y"])
def test_a_device_name_that_leaves_dev_is_refused(name: str) -> None:
    text = ("P: /devices/platform/x/misc/x\nN: " + name
            + "\nE: SUBSYSTEM=misc\nE: MAJOR=10\nE: MINOR=1\n")
    with pytest.raises(InputError, match="device name"):
        parse_recording(text, "rec")


@pytest.mark.parametrize(("text", "says"), [
    ("E: A=b\n", "rec:1: E: line before any P: line"),
    ("P: /devices/x\nQ: what\n", "rec:2: unknown line type 'Q'"),
    ("P: /devices/x\nnonsense\n", "rec:2: not a umockdev line"),
    ("P: /devices/../../etc\n", "rec:1: device path"),
    ("P: /devices/a\x00b\n", "control character"),
    ("P: /devices/x\nE: " + "A" * (umockdev.MAX_LINE + 1) + "\n", "rec:2: a line longer than"),
])
def test_a_malformed_recording_names_the_line(text: str, says: str) -> None:
    with pytest.raises(InputError) as err:
        parse_recording(text, "rec")
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_counts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(umockdev, "MAX_BLOCKS", 3)
    with pytest.raises(InputError, match="more than 3 devices"):
        parse_recording("".join(f"P: /devices/d{i}\n\n" for i in range(4)))
    monkeypatch.setattr(umockdev, "MAX_BLOCK_LINES", 2)
    with pytest.raises(InputError, match="more than 2 lines for one device"):
        parse_recording("P: /devices/d\nE: A=1\nE: B=2\nE: C=3\n")


def test_truncated_at_every_byte_parses_or_fails_cleanly() -> None:
    text = USB.format(sep=" ") + "\nP: /devices/pci0000:00/0000:00:02.0\nE: PCI_CLASS=30000\n" \
        "E: PCI_ID=8086:0166\nE: SUBSYSTEM=pci\nA: vendor=0x8086\\n\n"
    data = text.encode()
    for cut in range(len(data)):
        piece = data[:cut].decode("utf-8", errors="surrogateescape")
        with contextlib.suppress(InputError):
            parse_recording(piece)


def test_a_huge_recording_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.umockdev"
    with open(huge, "wb") as f:
        f.truncate(umockdev.MAX_RECORDING + 1)  # sparse: no disk used
    with pytest.raises(InputError, match="larger than"):
        load_recording(huge)
    out = run_cli(_cli("--recording", str(huge)))
    assert_fails_closed(out, allowed=(2,))
    assert "larger than" in out.stderr


def test_a_fifo_or_a_device_as_the_recording_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(InputError, match="not a regular file"):
            load_recording(path)


def test_binary_and_malformed_recordings_exit_2_with_one_line(tmp_path: Path) -> None:
    cases = {
        "binary": bytes(range(256)) * 8,
        "nul": b"P: /devices/x\n\x00\x00\x00\n",
        "latin1": b"P: /devices/x\nE: SUBSYSTEM=usb\xff\xfe\nE: BUSNUM=\xc2\xb2\n",
        "injected": USB.format(sep="\u2028").encode(),
        "malformed": b"E: before any path\n",
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.umockdev"
        path.write_bytes(data)
        out = run_cli(_cli("--recording", str(path)))
        assert_fails_closed(out)
        assert "/dev/mem" not in out.stdout, name


# ---- sysfs trees -----------------------------------------------------------------------------


def _tree(tmp_path: Path) -> SysfsBuilder:
    b = SysfsBuilder(tmp_path / "sys")
    b.gpu()
    return b


def _render_dir(b: SysfsBuilder) -> Path:
    return b.root / "devices/pci0000:00/0000:00:02.0/drm/renderD128"


def test_a_fifo_where_the_uevent_belongs_does_not_block_the_walk(tmp_path: Path) -> None:
    b = _tree(tmp_path)
    uevent = _render_dir(b) / "uevent"
    uevent.unlink()
    os.mkfifo(uevent)
    snap = read_sysfs(b.root)  # would block forever in open() without O_NONBLOCK
    assert any("renderD128/uevent is not a regular file" in p for p in snap.problems)
    out = run_cli(_cli("--sysfs", str(b.root)), deadline=20)
    assert_fails_closed(out, allowed=(0,))


def test_a_device_or_a_huge_file_where_an_attribute_belongs_is_not_read(tmp_path: Path) -> None:
    b = _tree(tmp_path)
    uevent = _render_dir(b) / "uevent"
    uevent.unlink()
    uevent.symlink_to("/dev/zero")  # a /dev/zero-like file: endless
    gpu_uevent = b.root / "devices/pci0000:00/0000:00:02.0/uevent"
    with open(gpu_uevent, "r+b") as f:
        f.truncate(1 << 30)  # sparse gigabyte
    snap = read_sysfs(b.root)
    assert any("renderD128/uevent is not a regular file" in p for p in snap.problems)
    assert any(f"larger than {MAX_ATTR} bytes" in p for p in snap.problems)
    out = run_cli(_cli("--sysfs", str(b.root)), memory=256 << 20)
    assert_fails_closed(out, allowed=(0,))


def test_symlink_loops_are_problems_not_hangs(tmp_path: Path) -> None:
    b = _tree(tmp_path)
    loop = b.root / "devices/virtual/loopy"
    loop.parent.mkdir(parents=True, exist_ok=True)
    loop.symlink_to("loopy")
    (b.root / "dev/char/10:99").symlink_to("../../devices/virtual/loopy")
    (b.root / "bus/pci/devices/0000:00:09.0").symlink_to("../../../devices/pci0000:00/0000:00:09.0")
    (b.root / "devices/pci0000:00/0000:00:09.0").symlink_to("0000:00:09.0")
    (b.root / "dev/char/226:1").symlink_to("226:1")
    snap = read_sysfs(b.root)
    assert "/devices/pci0000:00/0000:00:02.0" in snap.devices
    assert "/devices/pci0000:00/0000:00:09.0" not in snap.devices
    out = run_cli(_cli("--sysfs", str(b.root)))
    assert_fails_closed(out, allowed=(0,))


def test_uevent_keys_injected_after_the_kernel_s_do_not_win(tmp_path: Path) -> None:
    b = _tree(tmp_path)
    uevent = _render_dir(b) / "uevent"
    text = uevent.read_text()
    uevent.write_text(text + "NAME=x\u2028DEVNAME=mem\nDEVNAME=mem\nMAJOR=1\n")
    dev = read_sysfs(b.root).devices["/devices/pci0000:00/0000:00:02.0/drm/renderD128"]
    assert dev.node is not None and dev.node.name == "dri/renderD128"
    assert (dev.node.major, dev.node.minor) == (226, 128)


@pytest.mark.parametrize(("line", "problem"), [("DEVNAME=../mem", "device name"),
                                                ("MAJOR=\u00b2", "bad device number")])
def test_a_bad_node_in_a_tree_is_a_problem(tmp_path: Path, line: str, problem: str) -> None:
    b = _tree(tmp_path)
    uevent = _render_dir(b) / "uevent"
    key = line.split("=")[0]
    kept = [ln for ln in uevent.read_text().splitlines() if not ln.startswith(key + "=")]
    uevent.write_text("\n".join([line, *kept]) + "\n")
    snap = read_sysfs(b.root)
    assert snap.devices["/devices/pci0000:00/0000:00:02.0/drm/renderD128"].node is None
    assert any(problem in p for p in snap.problems)


def test_a_tree_without_dev_char_exits_2_saying_it_is_not_sysfs(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    (root / "devices").mkdir(parents=True)
    out = run_cli(_cli("--sysfs", str(root)))
    assert_fails_closed(out, allowed=(2,))
    assert "is not a sysfs tree: it has no dev/char index" in out.stderr


def test_an_index_with_too_many_entries_is_not_a_sysfs_tree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _tree(tmp_path)
    monkeypatch.setattr(reader, "MAX_ENTRIES", 3)
    for minor in range(4):
        (b.root / "dev/char" / f"10:{minor + 200}").symlink_to("../../devices/virtual/x")
    with pytest.raises(InputError, match="more than 3: not a sysfs tree"):
        read_sysfs(b.root)


def test_the_command_refuses_a_fifo_or_a_device_as_the_recording(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        out = run_cli(_cli("--recording", str(path)), deadline=20)
        assert_fails_closed(out, allowed=(2,))
        assert "is not a regular file" in out.stderr


def test_undecodable_bytes_become_replacement_characters(tmp_path: Path) -> None:
    """Found by the fuzz suite: a raw non-UTF-8 byte in a property crashed the derived
    attributes (a lone surrogate cannot be encoded)."""
    text = "P: /devices/0\nE: MODALIAS=0" + b"\x80".decode("utf-8", "surrogateescape") + "\n"
    dev = parse_recording(text).devices["/devices/0"]
    assert dev.props["MODALIAS"].startswith("0\ufffd")
    path = tmp_path / "r.umockdev"
    path.write_bytes(b"P: /devices/0\nE: MODALIAS=0\x80\xff\n")
    assert load_recording(path).devices["/devices/0"].props["MODALIAS"] == "0\ufffd\ufffd"


def test_fifos_and_devices_as_catalogs_do_not_block_the_walk(tmp_path: Path) -> None:
    b = _tree(tmp_path)
    cat = tmp_path / "catalogs"
    cat.mkdir()
    for name in ("pci.ids", "usb.ids", "modules.alias", "modules.dep"):
        os.mkfifo(cat / name)
    (cat / "modules.builtin").symlink_to("/dev/zero")
    out = run_cli(["explain", "--sysfs", str(b.root), "--facts", str(tmp_path), "--node", "n",
                   "--modules-dir", str(cat), "--hwdata-dir", str(cat)], deadline=30)
    assert_fails_closed(out, allowed=(0,))
    assert "pci 0000:00:02.0" in out.stdout
