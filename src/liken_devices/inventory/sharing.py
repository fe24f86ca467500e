"""Sharing (rules: sharing.one-device-per-kind, sharing.gpu-split, sharing.render-shared).

A device's subtree may deliver nodes of several kinds: one device is published per kind, a GPU
splits into its render node (the one shareable device), its card node (``-display``), its i2c
buses and its DP AUX channels, and a mix with no name is published whole and exclusive.
"""

from __future__ import annotations

from typing import NamedTuple

from ..sysfs.model import DevNode, SysDevice
from .model import AttrValue

GPU_KINDS = frozenset({"render", "card", "i2c-dev", "drm_dp_aux_dev"})


class Split(NamedTuple):
    """One device to publish for a piece of hardware."""

    suffix: str
    kind: str
    nodes: list[DevNode]
    extra: dict[str, AttrValue]  # attributes besides the hardware's own
    shareable: bool


def split(nodes: list[SysDevice], serial_line: bool) -> list[Split]:
    """One device per kind of node; a GPU splits; an unknown mix stays whole.

    rules: sharing.one-device-per-kind, sharing.gpu-split, sharing.display-only
    rules: sharing.unknown-mix
    """
    kinds: dict[str, list[DevNode]] = {}
    for n in sorted(nodes, key=lambda d: d.node or DevNode("", "c", 0, 0)):
        assert n.node is not None
        kinds.setdefault(node_kind(n), []).append(n.node)
    if serial_line:
        # The CEC bus and the remote, never the bare name (rules: serial.cec-and-input).
        return [Split("-" + kind.replace("_", "-"), kind, ns, {"subsystem": kind}, False)
                for kind, ns in sorted(kinds.items())]
    if {"render", "card", "drm"} & kinds.keys():
        if kinds.keys() <= GPU_KINDS:
            return _gpu(kinds)
        return [Split("", "mix", [n for ns in kinds.values() for n in ns], {}, False)]
    if len(kinds) == 1:
        kind, ns = next(iter(kinds.items()))
        extra: dict[str, AttrValue] = {"subsystem": kind}
        if kind == "sound":
            extra["sound.liken.sh/supportsSound"] = True
        return [Split("", kind, ns, extra, False)]
    # An unknown mix: published whole, exclusive, without subsystem.
    return [Split("", "mix", sorted(n for ns in kinds.values() for n in ns), {}, False)]


def _gpu(kinds: dict[str, list[DevNode]]) -> list[Split]:
    out: list[Split] = []
    if "render" in kinds:
        # The driver arbitrates between clients of a render node: the one shared device.
        # rules: attributes.gpu-halves (renderNode, displayNode), sharing.render-shared
        out.append(Split("", "render", kinds["render"],
                         {"subsystem": "drm", "renderNode": True}, True))
    if "card" in kinds:
        # DRM master is one per card: the display half is exclusive.
        out.append(Split("-display", "display", kinds["card"],
                         {"subsystem": "drm", "displayNode": True}, False))
    for kind in ("i2c-dev", "drm_dp_aux_dev"):
        if kind in kinds:
            out.append(Split("-" + kind.replace("_", "-"), kind, kinds[kind],
                             {"subsystem": kind}, False))
    return out


def node_kind(dev: SysDevice) -> str:
    """The kind of a node for splitting: its subsystem, with two refinements.

    rules: attributes.subsystem
    """
    if dev.subsystem == "sound" or "/sound/card" in dev.path:
        return "sound"  # its jack inputs are part of the card (rules: sharing.sound-card)
    if dev.subsystem == "drm" and dev.node is not None:
        base = dev.node.name.rsplit("/", 1)[-1]
        if base.startswith("renderD"):
            return "render"
        if base.startswith(("card", "controlD")):
            # controlD* is the legacy (pre-4.x) control node of the same card: display authority.
            return "card"
        return "drm"
    return dev.subsystem or "unknown"
