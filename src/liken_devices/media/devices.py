"""The media.liken.sh devices: one per liken.sh render node, and the slice that holds them.

rules: media.one-per-render-node, media.pairing. Every device has all eighteen booleans, plus
``resource.kubernetes.io/pciBusID`` (the pairing attribute), ``vaDriver`` (the vendor string cut
to 64 characters, absent when the query failed), and ``address``, ``driver``, ``vendor``,
``product``, ``name`` with the same values as the liken.sh render node. The device is named like
the render node, delivers no device node and can be allocated by any number of claims at once;
it lives in the ResourceSlice ``<node>-media.liken.sh``. The render nodes come from liken's own
inventory (``Sources.walk()``), so the agent sees exactly the GPUs liken publishes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..inventory.attributes import clean_string, pci_class
from ..inventory.limits import MEDIA_DRIVER
from ..inventory.model import Inventory, PublishedDevice
from ..slices import ensure_valid, make_slice
from ..sysfs.model import Snapshot
from .capabilities import capability_flags, log_line
from .probe import DEFAULT_TIMEOUT, ProbeResult, probe_nodes

log = logging.getLogger("liken_devices.media")

PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
# Copied from the liken.sh render node, so `kubectl get resourceslice` shows which GPU a device
# is about (rules: media.pairing); an attribute the render node lacks stays absent.
COPIED = ("address", "driver", "vendor", "product", "name", PCI_BUS_ID)
# rules: media.names-as-render-node. These come from the liken.sh render device
# of the same pciBusID in the node's liken.sh slice when the agent has it (its words are the
# host's hwdata, which the agent's image may not share).
NAMED = ("address", "driver", "vendor", "product", "name")
PCI_DISPLAY_BASE_CLASS = 0x03  # VGA, XGA, 3D and other display controllers


def render_devices(inventory: Inventory) -> list[PublishedDevice]:
    """The liken.sh render nodes of this walk, by name."""
    return sorted((d for d in inventory.devices if d.is_render), key=lambda d: d.name)


def without_media(inventory: Inventory, snapshot: Snapshot) -> list[str]:
    """One line for each GPU of the walk that has no liken.sh render node, so no media device,
    with the inventory's reason.

    rules: media.gpu-without-media. A GPU is a PCI function of base class display (``0x03``)
    or any considered hardware whose subtree holds a DRM node (a board's display controller).
    """
    drm = [(d.path, d.node.name.rsplit("/", 1)[-1]) for d in snapshot.devices.values()
           if d.subsystem == "drm" and d.node is not None]
    render = {d.name for d in inventory.devices if d.is_render}
    out: list[str] = []
    for o in inventory.outcomes:
        if any(name in render for name in o.devices):
            continue
        dev = snapshot.get(o.path)
        code = pci_class(dev) if dev is not None and o.bus == "pci" else None
        under = [base for path, base in drm if path.startswith(o.path + "/")]
        if not (under or (code is not None and code >> 16 == PCI_DISPLAY_BASE_CLASS)):
            continue
        head = f"no media device for {o.bus} {o.address} [{o.driver or 'no driver'}]: no render " \
            "node published for it: "
        if not o.devices:
            why = f"not published: {o.reason}" + (f" ({o.detail})" if o.detail else "")
        elif not any(base.startswith("renderD") for base in under):
            why = f"its driver made none (published as {', '.join(o.devices)} only)"
        else:
            why = (f"published as {', '.join(o.devices)} only"
                   + (f" ({o.detail})" if o.detail else ""))
        out.append(head + why)
    return out


def render_node_path(device: PublishedDevice, dev_root: Path = Path("/dev")) -> str | None:
    """Where the render node of a liken.sh render device is opened (``<dev>/dri/renderDN``)."""
    for node in device.nodes:
        if node.name.startswith("dri/renderD"):
            return str(dev_root / node.name)
    return None


@dataclass(frozen=True, slots=True)
class MediaDevice:
    """One media.liken.sh device: the render device it is about and its driver's answer."""

    render: PublishedDevice
    node: str  # the render node path that was queried
    result: ProbeResult

    @property
    def name(self) -> str:
        return self.render.name

    @property
    def flags(self) -> dict[str, bool]:
        return capability_flags(self.result.raw)

    @property
    def log_line(self) -> str:
        return log_line(self.name, self.node, self.result.raw, self.result.error)

    def attributes(self, names: Mapping[str, str] | None = None) -> dict[str, str | bool]:
        """The device's attributes; ``names``: the five :data:`NAMED` values as the liken.sh
        slice gives them (one absent there is absent here), else the agent's own walk's."""
        attrs: dict[str, str | bool] = dict(self.flags)
        raw = self.result.raw
        if raw is not None:
            # The same cleaning as every liken.sh string: printable, at most 64 bytes.
            vendor = clean_string(raw.vendor)
            if vendor:  # an attribute is absent, never empty (rules: attributes.domain)
                attrs["vaDriver"] = vendor
        for key in COPIED:
            value = self.render.attributes.get(key)
            if names is not None and key in NAMED:
                value = names.get(key)
            if isinstance(value, str) and value:
                attrs[key] = value
        return attrs

    def to_api(self, names: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The device in resource.k8s.io/v1 form (``names``: see :meth:`attributes`)."""
        attributes: dict[str, dict[str, Any]] = {}
        for key, value in self.attributes(names).items():
            attributes[key] = {"bool": value} if isinstance(value, bool) else {"string": value}
        # No device node: the render node comes from liken through the claim's other request.
        return {"name": self.name, "attributes": attributes, "allowMultipleAllocations": True}


def query_devices(renders: Iterable[PublishedDevice], dev_root: Path = Path("/dev"),
                  timeout: float = DEFAULT_TIMEOUT, env: Mapping[str, str] | None = None,
                  command: Sequence[str] | None = None) -> list[MediaDevice]:
    """Ask every render node's driver at once and log one line per render node."""
    renders = list(renders)
    paths = {d.name: render_node_path(d, dev_root) for d in renders}
    results = probe_nodes([p for p in paths.values() if p], timeout, env, command)
    out: list[MediaDevice] = []
    for d in renders:
        path = paths[d.name]
        if path is None:
            result = ProbeResult("", None, "the render device has no render node")
        else:
            result = results[path]
        media = MediaDevice(d, path or "-", result)
        log.info("%s", media.log_line)
        for message in result.messages:
            log.debug("%s: libva %s", d.name, message)
        if result.error and result.stderr:
            log.debug("%s: driver output: %s", d.name, result.stderr)  # a cleaned, short tail
        out.append(media)
    return out


def build_slice(node: str, devices: Sequence[MediaDevice], generation: int = 0) -> dict[str, Any]:
    """The ResourceSlice ``<node>-media.liken.sh``, checked with the project's validator."""
    listed = [d.to_api() for d in sorted(devices, key=lambda m: m.name)]
    obj = make_slice(node, MEDIA_DRIVER, listed, generation)
    ensure_valid(obj)
    return obj
