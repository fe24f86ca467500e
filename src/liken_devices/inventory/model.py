"""The inventory's vocabulary: what the policy takes in and what it decides.

The inputs besides the snapshot (facts, the Machine's spec, the module and ID catalogs) are
gathered in :class:`Context`. The answer is an :class:`Inventory`: the published devices with
their attributes and deliveries, an outcome for every piece of hardware considered, and the
unclaimed hardware with the modules that could drive it. The records are ``NamedTuple``
classes, immutable and cheap to define at start-up (docs/performance.md, "Start-up").
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

from ..sysfs.model import DevNode
from .limits import MAX_DEVICES

AttrValue = bool | int | str  # an int only for resource.kubernetes.io/numaNode

class Reason(StrEnum):
    """Why a considered piece of hardware is not published (the rules of docs/rules/hardware.md,
    usb.md and limits.md). A member is its words, as ``explain`` shows them."""

    NO_DRIVER = "no driver"
    NO_NODE = "no device node"
    BUS_STRUCTURE = "bus structure"
    STORAGE_ROLE = "storage role"
    ONLY_RESERVED = "only reserved nodes"
    FACTS_UNREADABLE = "facts unreadable"
    OVER_CAP = f"past the {MAX_DEVICES} cap"
    HELD_BY_PROGRAM = "held by a program through usbfs"
    HELD_BY_CLAIM = "held by a claim"
    FOLDED = "folded into another device"
    ONLY_WITHHELD = "only withheld nodes"
    NETWORK_CARD = "a network card"


class SerioEntry(NamedTuple):
    """One ``spec.serio`` entry: a serial-line adapter the machine attaches to serio."""

    protocol: str  # "pulse8-cec" | "rainshadow-cec"
    vendor: str  # 4 lowercase hex digits (the adapter's USB IDs)
    product: str
    serial: str | None = None


class MachineSpec(NamedTuple):
    """The part of the Machine's spec the device layer reads."""

    modules: tuple[str, ...] = ()
    serio: tuple[SerioEntry, ...] = ()


class Facts(NamedTuple):
    """Storage roles from init's facts: the partitions backing a role, or why they are unknown."""

    role_partitions: frozenset[str] | None  # None: the facts could not be read
    error: str | None = None
    # False for another machine's walk (a recording, another sysfs) given no --facts: its
    # disks are withheld, and nothing about this host's facts is said (docs/inventory.md).
    given: bool = True

    @property
    def readable(self) -> bool:
        return self.role_partitions is not None


class LeftOut(NamedTuple):
    """A node a claim would state but does not, because it is another device's.

    rules: bluetooth.event-numbers-exclusive
    """

    node: DevNode  # as the claim would state it: /dev/input/eventN, 13:(64 + N)
    host_name: str  # the host's node at those numbers, relative to /dev ("input/event3")
    owner: str  # the bus or board device whose node it is: "platform i8042"
    # the owner's device name ("platform-i8042", "usb-1-2-1-0"); "" for a virtual device
    device: str = ""

    def why(self) -> str:
        return (f"{self.node.major}:{self.node.minor} is /dev/{self.host_name}, the node of "
                f"{self.owner}")

    def to_json(self) -> dict[str, object]:
        return {"path": self.node.path, "major": self.node.major, "minor": self.node.minor,
                "hostPath": "/dev/" + self.host_name, "owner": self.owner, "why": self.why()}


class Claimed:
    """The devices that claims prepared on this node hold, by the names they were allocated.

    Only the node's agent and its kubelet plugin know them (the plugin's state); offline commands
    pass none, so ``scan`` may differ from the agent's slice while such a claim is held. Two rules
    read them: a claimed USB device keeps its shape until its claim ends, and the 128 cap keeps
    what is claimed (rules: usb.claimed-keeps-shape, limits.cap-keeps-claimed).
    """

    __slots__ = ("names", "preparing")

    def __init__(self, names: frozenset[str] = frozenset(),
                 preparing: frozenset[str] = frozenset()) -> None:
        self.names = names
        # The devices of the claims a prepare call is resolving now: not held yet, but they
        # count among the node's Bluetooth claims (rules: bluetooth.virtual-nodes).
        self.preparing = preparing

    def counted(self) -> frozenset[str]:
        """The devices held or being prepared."""
        return self.names | self.preparing

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __bool__(self) -> bool:
        return bool(self.names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Claimed) and (other.names, other.preparing) == \
            (self.names, self.preparing)

    def __hash__(self) -> int:
        return hash((self.names, self.preparing))

    def __repr__(self) -> str:
        more = f", preparing={sorted(self.preparing)}" if self.preparing else ""
        return f"Claimed({sorted(self.names)}{more})"


NO_CLAIMS = Claimed()


class PublishedDevice(NamedTuple):
    """One device of the slice, and what a claim on it delivers."""

    name: str
    attributes: Mapping[str, AttrValue]
    nodes: tuple[DevNode, ...]  # what a claim receives, in a stable order
    shareable: bool  # allowMultipleAllocations (only the render half of a GPU)
    source: str  # sysfs path of the hardware it stands for
    kind: str  # "render", "display", "i2c-dev", "drm-dp-aux-dev", "whole", "bluetooth", ...
    # Nodes a claim on it does not state because they are other devices' (Bluetooth only).
    left_out: tuple[LeftOut, ...] = ()

    @property
    def is_render(self) -> bool:
        return self.attributes.get("renderNode") is True


class Outcome(NamedTuple):
    """What became of one considered piece of hardware (``liken-devices explain``)."""

    path: str
    bus: str
    address: str
    driver: str | None
    devices: tuple[str, ...]  # names it was published as (empty when it was not)
    reason: Reason | None  # when it was not published
    detail: str = ""
    # What each of ``devices`` is, in the same order, when the hardware became several (a GPU:
    # "render node, shared", "card node, exclusive", ...); empty when nothing more is said.
    parts: tuple[str, ...] = ()


class Unclaimed(NamedTuple):
    """Hardware no driver drives, with the modules that could (Machine status, hardware report)."""

    path: str
    bus: str
    address: str
    modalias: str | None
    name: str | None
    class_: str | None
    candidates: tuple[str, ...]
    message: str

    def to_status(self) -> dict[str, object]:
        out: dict[str, object] = {"bus": self.bus, "candidates": list(self.candidates),
                                  "message": self.message}
        if self.modalias:
            out["modalias"] = self.modalias
        if self.name:
            out["name"] = self.name
        if self.class_:
            out["class"] = self.class_
        return out


class Inventory(NamedTuple):
    """The policy's whole answer for one snapshot."""

    devices: tuple[PublishedDevice, ...]  # sorted by name, at most MAX_DEVICES
    outcomes: tuple[Outcome, ...]
    unclaimed: tuple[Unclaimed, ...]
    overflow: tuple[str, ...] = ()  # names dropped past the cap
    facts: Facts = Facts(frozenset())
    # Present hardware that is not in the slice only because it is in use: a libusb program
    # holds its interface (rules: usb.held-by-program), or a claim prepared on this node holds
    # the device and keeps its shape (rules: usb.claimed-keeps-shape). Name -> the nodes its
    # claim keeps (the device's current usbfs node). The plugin resolves these as present, not
    # absent.
    held: Mapping[str, tuple[DevNode, ...]] = MappingProxyType({})
    # Why the module catalog could not be read (no module can be named for unclaimed hardware).
    catalog_error: str | None = None

    @property
    def total(self) -> int:
        """How many devices the node has before the cap."""
        return len(self.devices) + len(self.overflow)

    def by_name(self) -> dict[str, PublishedDevice]:
        return {d.name: d for d in self.devices}

    def lookup(self, name: str) -> tuple[DevNode, ...] | None:
        """The nodes a claim on ``name`` receives now, or None while the hardware is absent."""
        for d in self.devices:
            if d.name == name:
                return d.nodes
        return self.held.get(name)
