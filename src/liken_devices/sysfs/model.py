"""The snapshot: an immutable picture of the devices one walk saw.

Paths are sysfs device paths relative to the sysfs root, always starting with ``/devices/``
(the form a uevent's DEVPATH and a umockdev ``P:`` line use), so the tree structure is plain
string prefixing and the policy stays a pure function.

The records are ``NamedTuple`` classes rather than dataclasses: they are as immutable and typed,
and a command that runs once (``liken-devices scan``) does not pay at every start for the code a
dataclass generates (docs/performance.md, "Start-up").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Literal, NamedTuple

NodeType = Literal["c", "b"]

NO_ATTRS: Mapping[str, bytes] = MappingProxyType({})


class DevNode(NamedTuple):
    """A device node: its name under /dev and its numbers (ordered by name, then numbers)."""

    name: str  # relative to /dev: "dri/renderD128", "bus/usb/001/002"
    type: NodeType
    major: int
    minor: int

    @property
    def path(self) -> str:
        return "/dev/" + self.name

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "type": self.type, "major": self.major, "minor": self.minor}


class SysDevice(NamedTuple):
    """One device directory of sysfs, as far as the inventory needs it."""

    path: str  # "/devices/pci0000:00/0000:00:02.0"
    subsystem: str | None
    driver: str | None
    props: Mapping[str, str]  # the uevent keys (KEY=value)
    attrs: Mapping[str, bytes] = NO_ATTRS  # raw attribute bytes, "\n" stripped
    node: DevNode | None = None
    slaves: tuple[str, ...] = ()  # block devices this (virtual) block device is built on

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def parent_path(self) -> str:
        return self.path.rsplit("/", 1)[0]

    @property
    def devtype(self) -> str | None:
        return self.props.get("DEVTYPE")

    def attr(self, name: str) -> str | None:
        """An attribute as text (undecodable bytes replaced), or None when absent."""
        raw = self.attrs.get(name)
        if raw is None:
            return None
        return raw.decode("utf-8", errors="replace").strip()

    def ancestors(self) -> Iterator[str]:
        """The paths of every enclosing directory, nearest first, down to ``/devices``."""
        path = self.path
        while True:
            path = path.rsplit("/", 1)[0]
            if path in ("", "/devices"):
                return
            yield path


class Snapshot(NamedTuple):
    """What one walk saw."""

    devices: Mapping[str, SysDevice]  # by path
    console: tuple[str, ...] = ()  # tty names the kernel lists as the console
    problems: tuple[str, ...] = ()  # what was skipped during the walk, and why

    def get(self, path: str) -> SysDevice | None:
        return self.devices.get(path)
