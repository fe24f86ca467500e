"""Building ``resource.k8s.io/v1`` ResourceSlices.

One slice per node and driver, named ``<node>-<driver>`` (rules: limits.one-slice), pool =
the node's name, ``nodeName`` set, devices sorted by name. Attributes become the API's one-of
value objects; ``allowMultipleAllocations`` is set only where the policy says a device is shared.
A device has nothing else: no capacity, taints, counters or node selection of its own
(rules: limits.plain-devices).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..inventory.limits import slice_name
from ..inventory.model import AttrValue, Inventory, PublishedDevice

API_VERSION = "resource.k8s.io/v1"


def attribute_value(value: AttrValue | int) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def device_json(name: str, attributes: Mapping[str, AttrValue | int],
                shareable: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "attributes": {k: attribute_value(v) for k, v in sorted(attributes.items())},
    }
    if shareable:
        out["allowMultipleAllocations"] = True
    return out


def devices_json(inventory: Inventory | Iterable[PublishedDevice]) -> list[dict[str, Any]]:
    devices = inventory.devices if isinstance(inventory, Inventory) else inventory
    return [device_json(d.name, d.attributes, d.shareable)
            for d in sorted(devices, key=lambda d: d.name)]


def make_slice(node: str, driver: str, devices: list[dict[str, Any]], generation: int = 0,
               owner_uid: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": slice_name(node, driver)}
    if owner_uid:
        # Owned by the Node, so the garbage collector deletes the slice with its Node.
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node,
                                        "uid": owner_uid, "controller": True}]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": sorted(devices, key=lambda d: str(d.get("name", ""))),
        },
    }
