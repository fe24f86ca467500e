"""``claim-for``: from one published device to a DeviceClass and a claim that select it.

A device's name is its slot, the bus and the address (rules: names.slot-not-unit), and a USB
device's address is the port path it was plugged into, so a claim that names it breaks when the
stick moves to another port, and the usbfs number changes at every enumeration
(rules: delivery.reconcile). What identifies a unit across reboots and replugs is what the hardware
says about itself:

- USB: ``vendor``, ``product`` and ``serial`` (one physical unit is selected by its serial;
  rules: names.slot-not-unit); an interface's device also keeps its
  configuration and interface number, the part of ``address`` after ``:``, which does not
  depend on the port;
- PCI: ``resource.kubernetes.io/pciBusID`` with ``vendor`` and ``product`` (a card stays in its
  slot; the bus ID is the standard attribute other drivers pair on);
- a board device: its firmware name, which is its ``address`` (rules: names.form).

Every selector also pins what kind of published device it is (``subsystem``, ``renderNode``,
``displayNode``), because one piece of hardware can publish several devices
(rules: sharing.one-device-per-kind).
The generated selectors are checked against the slice they came from: when they select more
than this device (two identical sticks without a serial), the command refuses and says what
would tell them apart (``--by-address``: the port path). ``--any`` selects every device of the
kind (same vendor, product and class).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..inventory.limits import DRIVER
from .allocate import Evaluator
from .cel import Env
from .model import Device, DeviceClass, Subrequest, slice_devices

STANDARD = "resource.kubernetes.io"


class Ambiguous(Exception):
    """The device cannot be told apart from others by what identifies it."""


@dataclass(frozen=True)
class Generated:
    objects: list[dict[str, Any]]
    selectors: list[str]
    warnings: list[str]


def _value(attrs: dict[str, Any], name: str) -> tuple[str, Any] | None:
    attr = attrs.get(name)
    if not isinstance(attr, dict) or len(attr) != 1:
        return None
    kind, value = next(iter(attr.items()))
    return kind, value


def _ref(name: str) -> str:
    domain, sep, ident = name.partition("/")
    if not sep:
        domain, ident = DRIVER, name
    return f"device.attributes[{json.dumps(domain)}].{ident}"


def _equals(attrs: dict[str, Any], name: str) -> str | None:
    v = _value(attrs, name)
    if v is None:
        return None
    kind, value = v
    if kind == "string":
        return f"{_ref(name)} == {json.dumps(value)}"
    if kind == "bool":
        return f"{_ref(name)} == {'true' if value else 'false'}"
    if kind == "int":
        return f"{_ref(name)} == {value}"
    if kind == "version":
        return f"{_ref(name)} == semver({json.dumps(value)})"
    return None


def _kind_selectors(attrs: dict[str, Any]) -> list[str]:
    """What kind of published device it is, so its sibling devices are not selected."""
    out = []
    if _value(attrs, "subsystem") is not None:
        out.append(str(_equals(attrs, "subsystem")))
    else:
        out.append(f'!has({_ref("subsystem")})')
    for flag in ("renderNode", "displayNode"):
        if _value(attrs, flag) is not None:
            out.append(str(_equals(attrs, flag)))
        else:
            out.append(f"!has({_ref(flag)})")
    return out


def identity_selectors(device: dict[str, Any], *, any_of_kind: bool = False,
                       by_address: bool = False) -> tuple[list[str], list[str]]:
    """The selectors for ``device`` (a slice's device JSON), and warnings about them."""
    attrs = device.get("attributes") or {}
    bus_v = _value(attrs, "bus")
    bus = bus_v[1] if bus_v else ""
    address_v = _value(attrs, "address")
    address = str(address_v[1]) if address_v else ""
    sel: list[str] = []
    warnings: list[str] = []

    def add(name: str) -> bool:
        s = _equals(attrs, name)
        if s is not None:
            sel.append(s)
        return s is not None

    add("bus")
    if by_address:
        if not add("address"):
            raise InputError(f"device {device.get('name')} has no address attribute")
        warnings.append("selected by address: the claim follows the slot or port, not the unit")
    elif any_of_kind:
        has_model = [add(n) for n in ("vendor", "product")]
        add("class")
        if not any(has_model):
            add("driver")
    elif bus == "usb":
        add("vendor")
        add("product")
        if not add("serial"):
            warnings.append("this device has no serial number: an identical device would match "
                            "the claim too (--by-address pins it to its port instead)")
        if ":" in address:  # an interface: <port path>:<configuration>.<interface>
            suffix = address[address.index(":"):]
            sel.append(f"{_ref('address')}.endsWith({json.dumps(suffix)})")
    elif bus == "pci":
        if not add(f"{STANDARD}/pciBusID"):
            add("address")
        add("vendor")
        add("product")
    else:
        # A board device's address is the name the firmware gives it, which no replug changes.
        add("address")
    return sel + _kind_selectors(attrs), warnings


def generate(slice_obj: dict[str, Any], name: str, *, any_of_kind: bool = False,
             by_address: bool = False, namespace: str = "default",
             env: Env | None = None) -> Generated:
    """The DeviceClass, ResourceClaimTemplate and Pod stub for device ``name`` of a slice."""
    spec = slice_obj.get("spec") or {}
    found = [d for d in spec.get("devices") or [] if isinstance(d, dict) and d.get("name") == name]
    if not found:
        known = ", ".join(str(d.get("name")) for d in spec.get("devices") or [])
        raise InputError(f"no published device named {name!r} (the slice has: {known or 'none'})")
    device = found[0]
    selectors, warnings = identity_selectors(device, any_of_kind=any_of_kind,
                                             by_address=by_address)
    devices = slice_devices([slice_obj])
    chosen = select(devices, selectors, env)
    if not any_of_kind and [d.name for d in chosen] != [name]:
        others = [d.name for d in chosen if d.name != name]
        attrs = device.get("attributes") or {}
        address = (_value(attrs, "address") or ("", ""))[1]
        raise Ambiguous(
            f"{name} cannot be told apart from {', '.join(others)}: they have the same "
            + ("vendor, product and no serial number" if _value(attrs, "serial") is None
               else "identifying attributes")
            + f". Its port path (address {address!r}) would tell them apart: rerun with "
            "--by-address (the claim then follows the port, not the unit), or give the "
            "device a serial number.")
    class_name = f"liken-{name}" + ("-any" if any_of_kind else "")
    # The class states what kind of device this is; the claim states which one.
    kind_count = 3
    class_sel = [f'device.driver == "{DRIVER}"', *selectors[-kind_count:]]
    claim_sel = selectors[:-kind_count]
    what = f"every {name}-like device" if any_of_kind else f"the device published as {name}"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": class_name,
                      "annotations": {"liken.sh/generated-by": f"liken-devices claim-for {name}"}},
         "spec": {"selectors": [{"cel": {"expression": e}} for e in class_sel]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": class_name, "namespace": namespace},
         "spec": {"spec": {"devices": {"requests": [
             {"name": "device", "exactly": {
                 "deviceClassName": class_name,
                 **({"selectors": [{"cel": {"expression": e}} for e in claim_sel]}
                    if claim_sel else {})}}]}}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"{name}-user", "namespace": namespace},
         "spec": {"resourceClaims": [{"name": "device",
                                      "resourceClaimTemplateName": class_name}],
                  "containers": [{"name": "main", "image": "busybox",
                                  "command": ["sleep", "infinity"],
                                  "resources": {"claims": [{"name": "device"}]}}]}},
    ]
    warnings.insert(0, f"selects {what} ({len(chosen)} in this slice)")
    return Generated(objects, class_sel + claim_sel, warnings)


def select(devices: Sequence[Device], selectors: Sequence[str], env: Env | None = None
           ) -> list[Device]:
    """The devices every one of ``selectors`` is true for (the allocator's own test)."""
    # lazy: the CEL runtime loads only when a selector is evaluated
    from .cel import environment

    evaluator = Evaluator(env or environment(), {"c": DeviceClass("c", tuple(selectors))})
    sub = Subrequest("r", "c", (), False, 1, False)
    return [d for d in devices if evaluator.first_failure(sub, d) is None]


def render(generated: Generated) -> str:
    """The objects as one YAML stream, ready for ``kubectl apply -f -``."""
    import yaml

    head = "".join(f"# {w}\n" for w in generated.warnings)
    return head + "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in generated.objects)
