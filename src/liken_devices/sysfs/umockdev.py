"""Reading umockdev recordings (the text format of ``umockdev-record``) as snapshots.

An operator records a machine once (``umockdev-record --all > machine.umockdev``) and anyone can
ask what it would publish (``liken-devices scan --recording``). A file is a sequence of blocks, one
per device, separated by blank lines: ``P:`` the path under /sys, ``N:`` the node under /dev
(optionally ``=HEX`` content), ``S:`` a /dev symlink, ``E:`` a uevent/udev property, ``A:`` a text
attribute (C-escaped), ``H:`` a binary attribute (hex), ``L:`` a symlink in the device directory.

A recording is hostile until parsed (docs/inventory.md, "Bad input"): it is read only when it is
a regular file of at most :data:`MAX_RECORDING` bytes, split into lines on ``\n`` alone (a
U+2028 or U+0085 inside a recorded value stays inside it), and every line, block, path, device
name and number is checked; anything malformed is an :class:`~liken_devices.errors.InputError`
naming the line, which the commands turn into exit status 2 and one line on stderr.

Recordings made from ``udevadm info --export-db`` carry only ``P: N: S: E:``; what a sysfs walker
would read from attribute files is then derived from the properties (DRIVER, PCI_ID, PRODUCT,
INTERFACE, BUSNUM/DEVNUM, MAJOR/MINOR), so the policy sees the same snapshot either way.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError
from ..inputfiles import read_input
from .devnames import default_devname
from .model import DevNode, Snapshot, SysDevice
from .values import dec, dev_numbers, devname_problem, has_control, hexnum

log = logging.getLogger(__name__)

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", '"': b'"', "a": b"\a", "b": b"\b",
            "f": b"\f", "v": b"\v", "'": b"'", "?": b"?"}
# Bounds: the largest real recording (a storage server's udev database) is about 1 MiB with
# 3,000 devices; these leave room for any real machine and stop a hostile file early.
MAX_RECORDING = 64 << 20  # bytes
MAX_LINE = 1 << 20  # characters in one line (a binary attribute in hex)
MAX_BLOCKS = 200_000  # devices
MAX_BLOCK_LINES = 10_000  # lines of one device
MAX_PATH = 4096
_KINDS = frozenset("PNSEAHL")


def c_unescape(text: str) -> bytes:
    """Undo C/GLib escapes (``g_strcompress``): ``\\n``, ``\\\\``, octal ``\\NNN``."""
    if "\\" not in text:
        return text.encode("utf-8", errors="surrogateescape")
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 >= n:
            out += ch.encode("utf-8", errors="surrogateescape")
            i += 1
            continue
        nxt = text[i + 1]
        if nxt in "01234567":
            j = i + 1
            while j < n and j < i + 4 and text[j] in "01234567":
                j += 1
            out.append(int(text[i + 1:j], 8) & 0xFF)
            i = j
        else:
            out += _ESCAPES.get(nxt, nxt.encode("utf-8", errors="surrogateescape"))
            i += 2
    return bytes(out)


class Block:
    """One device block of a recording, as written (filled in line by line)."""

    __slots__ = ("attrs", "line", "links", "node", "path", "props", "symlinks")

    def __init__(self, path: str, line: int = 0) -> None:
        self.path = path
        self.line = line  # of its P: line
        self.node: str | None = None
        self.symlinks: list[str] = []
        self.props: dict[str, str] = {}
        self.attrs: dict[str, bytes] = {}
        self.links: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"Block({self.path!r})"


class _LongLine(InputError):
    def __init__(self, lineno: int) -> None:
        super().__init__(f"a line longer than {MAX_LINE} characters")
        self.lineno = lineno


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """The lines of ``text``, split on ``\n`` only (``str.splitlines`` also splits on U+2028,
    U+0085 and other separators, which a recorded value may contain)."""
    start, lineno, n = 0, 0, len(text)
    while start < n:
        lineno += 1
        end = text.find("\n", start)
        if end < 0:
            end = n
        if end - start > MAX_LINE:
            raise _LongLine(lineno)
        line = text[start:end]
        yield lineno, line[:-1] if line.endswith("\r") else line
        start = end + 1


def _check_path(path: str) -> str:
    if len(path) > MAX_PATH:
        raise InputError(f"a device path longer than {MAX_PATH} characters")
    if has_control(path):
        raise InputError(f"device path {path[:60]!r} contains a control character")
    if path.startswith("/devices/") and any(
            part in ("", ".", "..") for part in path[len("/devices/"):].rstrip("/").split("/")):
        raise InputError(f"device path {path[:60]!r} has an empty, '.' or '..' component")
    return path


def _utf8(text: str) -> str:
    """``text`` with whatever UTF-8 cannot hold (lone surrogates: undecodable bytes kept by
    ``surrogateescape``) replaced by U+FFFD, as the tree reader decodes a uevent."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def parse_blocks(text: str, origin: str = "recording") -> Iterator[Block]:
    """The device blocks of a recording; :class:`InputError` names the first malformed line.

    Bytes that are not UTF-8 become U+FFFD (an attribute's raw bytes are written C-escaped,
    ``\\NNN``, and kept as they are)."""
    text = _utf8(text)
    block: Block | None = None
    blocks = lines_in_block = lineno = 0
    attributed = False  # a record before the last had attributes or links
    try:
        for lineno, raw in _lines(text):
            if not raw.strip():
                if block is not None:
                    attributed = attributed or bool(block.attrs or block.links)
                    yield block
                    block = None
                continue
            kind, sep, rest = raw.partition(": ")
            if not sep:
                if raw.rstrip() in ("P:", "N:", "S:", "E:", "A:", "H:", "L:"):
                    kind, rest = raw.rstrip()[0], ""
                else:
                    raise InputError(f"not a umockdev line: {raw[:60]!r}")
            if kind not in _KINDS:
                raise InputError(f"unknown line type {kind[:20]!r}")
            if kind == "P":
                if block is not None:
                    attributed = attributed or bool(block.attrs or block.links)
                    yield block
                blocks += 1
                if blocks > MAX_BLOCKS:
                    raise InputError(f"more than {MAX_BLOCKS} devices")
                block = Block(_check_path(rest.strip()), lineno)
                lines_in_block = 0
                continue
            if block is None:
                raise InputError(f"{kind}: line before any P: line")
            lines_in_block += 1
            if lines_in_block > MAX_BLOCK_LINES:
                raise InputError(f"more than {MAX_BLOCK_LINES} lines for one device")
            _add_line(block, kind, rest, origin, lineno)
        # rules: hardware.whole-recordings. umockdev-record ends every line with a newline: a
        # last line without one was cut inside its record.
        if lineno and not text.endswith("\n"):
            raise InputError("the recording ends inside a record (its last line has no end: "
                             "the file was cut)")
        # A record is its P: line, its properties (E:, which every recorded device has) and, in
        # a recording of sysfs (not of the udev database), its attributes and links after them.
        if block is not None and (not block.props or (
                attributed and not (block.attrs or block.links))):
            lineno = block.line
            missing = "E: line" if not block.props else "A:, H: or L: line"
            raise InputError(f"the recording ends inside the record of {block.path[:80]} (it "
                             f"has no {missing}: the file was cut)")
    except InputError as exc:
        raise InputError(f"{origin}:{getattr(exc, 'lineno', lineno)}: {exc}") from None
    if block is not None:
        yield block


def _add_line(block: Block, kind: str, rest: str, origin: str, lineno: int) -> None:
    if kind in "EAHL" and "=" not in rest:
        # Every property, attribute and link is KEY=VALUE (rules: hardware.whole-recordings).
        raise InputError(f"a {kind}: line with no '=' (a record cut or damaged): {rest[:60]!r}")
    if kind == "N":
        block.node = rest.partition("=")[0].strip()  # a node's recorded content is not read
    elif kind == "S":
        block.symlinks.append(rest.strip())
    elif kind == "E":
        key, _, value = rest.partition("=")
        block.props[key] = value
    elif kind == "A":
        key, _, value = rest.partition("=")
        block.attrs[key] = c_unescape(value)
    elif kind == "H":
        key, _, value = rest.partition("=")
        try:
            block.attrs[key] = bytes.fromhex(value.strip())
        except ValueError:
            log.info("%s:%d: bad hex in binary attribute %s", origin, lineno, key[:60])
    else:  # "L"
        key, _, value = rest.partition("=")
        block.links[key] = value.strip()


def _derived_attrs(b: Block, subsystem: str | None) -> dict[str, bytes]:
    """Attributes a udevdb-only dump lacks, derived from the properties.

    ``PCI_ID=VVVV:DDDD`` gives ``vendor``/``device``, ``PCI_CLASS`` gives ``class``,
    ``PRODUCT=v/p/rev`` gives ``idVendor``/``idProduct``, ``TYPE``/``INTERFACE`` (decimal
    ``class/subclass/protocol``) give ``bDeviceClass``/``bInterfaceClass``, ``BUSNUM``/``DEVNUM``
    give ``busnum``/``devnum``. A property that is not the number it should be derives nothing.
    """
    attrs = {k: v.rstrip(b"\n") for k, v in b.attrs.items()}
    p = b.props
    if subsystem == "pci":
        if "PCI_ID" in p and "vendor" not in attrs:
            ven, _, dev = p["PCI_ID"].partition(":")
            v, d = hexnum(ven), hexnum(dev)
            if v is not None and d is not None and v <= 0xFFFF and d <= 0xFFFF:
                attrs["vendor"] = f"0x{v:04x}".encode()
                attrs["device"] = f"0x{d:04x}".encode()
        cls = hexnum(p.get("PCI_CLASS"))
        if cls is not None and cls <= 0xFFFFFF and "class" not in attrs:
            attrs["class"] = f"0x{cls:06x}".encode()
    elif subsystem == "usb":
        if "PRODUCT" in p and "idVendor" not in attrs:
            parts = p["PRODUCT"].split("/")
            ids = [hexnum(x) for x in parts[:2]]
            if len(parts) >= 2 and all(x is not None and x <= 0xFFFF for x in ids):
                attrs["idVendor"] = f"{ids[0]:04x}".encode()
                attrs["idProduct"] = f"{ids[1]:04x}".encode()
        for key, attr in (("TYPE", "bDeviceClass"), ("INTERFACE", "bInterfaceClass")):
            value = dec(p[key].split("/")[0]) if key in p else None
            if value is not None and value <= 0xFF and attr not in attrs:
                attrs[attr] = f"{value:02x}".encode()
        for key, attr in (("BUSNUM", "busnum"), ("DEVNUM", "devnum")):
            value = dec(p.get(key))
            if value is not None and attr not in attrs:
                attrs[attr] = str(value).encode()
    if "MODALIAS" in p and "modalias" not in attrs:
        attrs["modalias"] = p["MODALIAS"].encode()
    return attrs


def block_device(b: Block) -> SysDevice:
    """A block as the device a sysfs walk would read (its attributes derived when a udevdb
    dump lacks them)."""
    props = dict(b.props)
    if "DEVNAME" in props:
        props["DEVNAME"] = props["DEVNAME"].removeprefix("/dev/")
    subsystem = props.get("SUBSYSTEM") or None
    driver_link = b.links.get("driver")
    driver = os.path.basename(driver_link) if driver_link else props.get("DRIVER")
    attrs = _derived_attrs(b, subsystem)
    node = None
    major, minor = props.get("MAJOR"), props.get("MINOR")
    if (major is None or minor is None) and "dev" in attrs:
        major, _, minor = attrs["dev"].decode(errors="replace").strip().partition(":")
    numbers = dev_numbers(major, minor)
    if numbers is not None:
        name = b.node or props.get("DEVNAME")
        if not name:
            busnum, devnum = attrs.get("busnum"), attrs.get("devnum")
            name = default_devname(subsystem, b.path.rsplit("/", 1)[-1], props,
                                   busnum.decode(errors="replace") if busnum else None,
                                   devnum.decode(errors="replace") if devnum else None,
                                   numbers[0])
        if name:
            name = name.removeprefix("/dev/")
            problem = devname_problem(name)
            if problem is not None:
                raise InputError(f"{b.path[:80]}: device name {name[:60]!r}: {problem}")
            node = DevNode(name, "b" if subsystem == "block" else "c", *numbers)
    return SysDevice(b.path.rstrip("/"), subsystem, driver, props, attrs, node)


def parse_recording(text: str, origin: str = "recording") -> Snapshot:
    devices: dict[str, SysDevice] = {}
    console: list[str] = []
    tty0_active: list[str] = []
    blocks_seen: list[Block] = []
    for block in parse_blocks(text, origin):
        if not block.path.startswith("/devices/"):
            continue
        blocks_seen.append(block)
        try:
            dev = block_device(block)
        except InputError as exc:
            raise InputError(f"{origin}: {exc}") from None
        if dev.path in devices:
            log.info("%s: %s recorded twice; the first block is kept", origin, dev.path)
            continue
        devices[dev.path] = dev
        if dev.path == "/devices/virtual/tty/console" and "active" in block.attrs:
            console = [x.decode(errors="replace") for x in block.attrs["active"].split()]
        if dev.path == "/devices/virtual/tty/tty0" and "active" in block.attrs:
            tty0_active = [x.decode(errors="replace") for x in block.attrs["active"].split()]
    _check_parents(blocks_seen, devices, origin)
    # tty0 is "the current virtual terminal": follow it to the real one
    # (rules: hardware.reserved-nodes).
    names = [n for name in console for n in ([name, *tty0_active] if name == "tty0" else [name])]
    # Virtual block devices built on others (dm, md) are not described by recordings.
    return Snapshot(devices, tuple(names))


# The names that are bus devices wherever they appear in sysfs, never a directory the driver
# core puts between a device and its parent (a class's "glue" directory such as input/ or
# block/): a PCI function, a USB root hub, device or interface.
_PCI_FUNCTION = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_USB_NAME = re.compile(r"usb[0-9]+|[0-9]+-[0-9]+(?:\.[0-9]+)*(?::[0-9]+\.[0-9]+)?")


def _bus_named(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return path.count("/") > 2 and (_PCI_FUNCTION.fullmatch(name) is not None
                                   or _USB_NAME.fullmatch(name) is not None)


def _check_parents(blocks: list[Block], devices: dict[str, SysDevice], origin: str) -> None:
    """rules: hardware.whole-recordings. A device whose parent directory (or, past a class's
    glue directory, the one above it) is a PCI function or a USB root hub, device or interface
    by its name needs that parent in the recording: umockdev-record writes a device and then
    each of its parents, so a cut keeps a child and loses what it hangs from (an interface
    without its USB device has no vendor, product or driver to be published by, and its adapter
    is dropped). A recording of one class alone (block devices under a glue directory) names no
    such parent and is read as it is."""
    for b in blocks:
        path = b.path.rstrip("/")
        parent = path.rsplit("/", 1)[0]
        if parent in devices:
            continue
        if not _bus_named(parent):
            # No device: the directory the driver core puts between a class device and its
            # parent (bluetooth/, input/), one level at most.
            parent = parent.rsplit("/", 1)[0]
        if _bus_named(parent) and parent not in devices:
            raise InputError(f"{origin}:{b.line}: {path[:120]} hangs from {parent[:120]}, "
                             "which the recording lacks (it was cut or edited)")


def load_recording(path: Path | str) -> Snapshot:
    """A recording file as a snapshot; :class:`InputError` when it cannot be one."""
    raw = read_input(path, MAX_RECORDING, "recording")
    return parse_recording(raw.decode("utf-8", errors="replace"), str(path))
