"""Sharing (rules: sharing.one-device-per-kind, sharing.gpu-split, sharing.render-shared).

A device's subtree may deliver nodes of several kinds: one device is published per kind, a GPU
splits into its render node (the one shareable device), its card node (``-display``), its i2c
buses, its DP AUX channels, its CEC adapter and one exclusive device for each other kind of node
it holds, and a mix with no name is published whole and exclusive.
"""

from __future__ import annotations

from typing import NamedTuple

from ..sysfs.model import DevNode, SysDevice
from ..sysfs.usbbus import LEGACY_CLASS
from .model import AttrValue

# The kinds of node the GPU split names besides the DRM nodes, with what explain calls each.
GPU_NAMED = {"i2c-dev": "i2c buses", "drm_dp_aux_dev": "DP AUX channels",
             "cec": "CEC adapter"}


class Split(NamedTuple):
    """One device to publish for a piece of hardware."""

    suffix: str
    kind: str
    nodes: list[DevNode]
    extra: dict[str, AttrValue]  # attributes besides the hardware's own
    shareable: bool
    why: str = ""  # what explain says this device is, when the hardware became several


class Splits(NamedTuple):
    """The devices of one piece of hardware, and the nodes none of them delivers (with why)."""

    devices: list[Split]
    left_out: list[str]


def split(nodes: list[SysDevice], serial_line: bool) -> Splits:
    """One device per kind of node; a GPU splits by every kind; an unknown mix stays whole.

    rules: sharing.one-device-per-kind, sharing.gpu-split, sharing.display-only
    rules: sharing.unknown-mix, sharing.gpu-cec, sharing.gpu-unnamed-kind
    """
    ordered = sorted(nodes, key=lambda d: d.node or DevNode("", "c", 0, 0))
    if any(n.subsystem == "drm" for n in ordered) and not serial_line:
        return _gpu(ordered)
    kinds: dict[str, list[DevNode]] = {}
    for n in ordered:
        assert n.node is not None
        kinds.setdefault(node_kind(n), []).append(n.node)
    if serial_line:
        # The CEC bus and the remote, never the bare name (rules: serial.cec-and-input).
        return Splits([Split(suffix_of(kind), kind, ns, {"subsystem": kind}, False)
                       for kind, ns in sorted(kinds.items())], [])
    if len(kinds) == 1:
        kind, ns = next(iter(kinds.items()))
        return Splits([Split("", kind, ns, _kind_attributes(kind), False)], [])
    # An unknown mix: published whole, exclusive, without subsystem.
    return Splits([Split("", "mix", sorted(n for ns in kinds.values() for n in ns), {}, False)],
                  [])


def suffix_of(kind: str) -> str:
    """``-`` and the subsystem, ``_`` as ``-`` (rules: names.suffix)."""
    return "-" + kind.replace("_", "-")


def _kind_attributes(kind: str) -> dict[str, AttrValue]:
    extra: dict[str, AttrValue] = {"subsystem": kind}
    if kind == "sound":
        extra["sound.liken.sh/supportsSound"] = True
    return extra


def _gpu(nodes: list[SysDevice]) -> Splits:
    """A GPU: the render node shared and alone, every other kind of node exclusive.

    Only a DRM node named ``renderD*`` is a render node, whatever else a node's subsystem is
    called: a kind of node the rules do not name never joins the shared device, and never takes
    the render node from it (rules: sharing.gpu-unnamed-kind).
    """
    render: list[DevNode] = []
    card: list[DevNode] = []
    others: dict[str, list[DevNode]] = {}
    left_out: list[str] = []
    for n in nodes:
        assert n.node is not None
        role = drm_role(n)
        if role == "render":
            render.append(n.node)
        elif role == "card":
            card.append(n.node)
        elif not n.subsystem:
            # The suffix of an unnamed kind is its subsystem (rules: names.suffix); a node filed
            # under none has no name to be published by.
            left_out.append(f"{n.node.path} (a node of no subsystem)")
        else:
            others.setdefault(node_kind(n), []).append(n.node)
    out: list[Split] = []
    if render:
        # The driver arbitrates between clients of a render node: the one shared device.
        # rules: attributes.gpu-halves (renderNode, displayNode), sharing.render-shared
        out.append(Split("", "render", render, {"subsystem": "drm", "renderNode": True}, True,
                         "render node, shared"))
    if card:
        # DRM master is one per card: the display half is exclusive.
        out.append(Split("-display", "display", card, {"subsystem": "drm", "displayNode": True},
                         False, "card node, exclusive"))
    taken = {s.suffix: s.why.split(",")[0] for s in out}
    # The named kinds first, so that a kind whose subsystem is spelled like one of theirs
    # ("i2c_dev") never takes a named part's name.
    for kind, ns in sorted(others.items(), key=lambda kv: (kv[0] not in GPU_NAMED, kv[0])):
        suffix = suffix_of(kind)
        if suffix in taken:
            left_out.extend(f"{n.path} ({kind}: its name {suffix} is taken by the "
                            f"{taken[suffix]})" for n in ns)
            continue
        # One initiator per CEC adapter, one writer of raw i2c or AUX traffic: each named kind
        # is exclusive (rules: sharing.gpu-cec). Any other kind is exclusive too, since
        # nothing says it may be shared (rules: sharing.gpu-unnamed-kind).
        what = GPU_NAMED.get(kind) or f"{kind} nodes, a kind the GPU split does not name"
        taken[suffix] = what.split(",")[0]
        out.append(Split(suffix, kind, ns, _kind_attributes(kind), False, what + ", exclusive"))
    return Splits(out, left_out)


def drm_role(dev: SysDevice) -> str | None:
    """``render`` for a DRM render node, ``card`` for a card node (with the legacy
    ``controlD*``), None for every other node."""
    if dev.subsystem != "drm" or dev.node is None:
        return None
    base = dev.node.name.rsplit("/", 1)[-1]
    if base.startswith("renderD"):
        return "render"
    if base.startswith(("card", "controlD")):
        # controlD* is the legacy (pre-4.x) control node of the same card: display authority.
        return "card"
    return None


def node_kind(dev: SysDevice) -> str:
    """The kind of a node for splitting: its subsystem, a sound card's jacks with the card, the
    legacy usb class as usbmisc.

    rules: attributes.subsystem
    """
    if dev.subsystem == "sound" or "/sound/card" in dev.path:
        return "sound"  # its jack inputs are part of the card (rules: sharing.sound-card)
    if dev.subsystem == "usb":
        # A node of the usb class of older kernels (a usbfs node is no interface's): the class
        # current kernels call usbmisc, so one selector finds it on both.
        # rules: usb.bus-devices-only
        return LEGACY_CLASS
    return dev.subsystem or "unknown"
