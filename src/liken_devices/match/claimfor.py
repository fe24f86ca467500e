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

``--extended-resource NAME`` writes the class with ``spec.extendedResourceName: NAME`` and every
selector in the class, since the claim the scheduler makes for a pod's ``resources.limits:
{NAME: 1}`` names only the class; the pod stub then asks that way, as a pod written for a device
plugin does, and needs no change (rules: claims.extended-resource).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..cliargs import yaml_text
from ..errors import InputError
from ..inventory.limits import DRIVER
from .allocate import Evaluator
from .cel import Env, environment
from .extended import extended_name_problem
from .model import Device, slice_devices
from .values import ValueError_, parse_semver

STANDARD = "resource.kubernetes.io"


class Ambiguous(Exception):
    """The device cannot be told apart from others by what identifies it."""


@dataclass(frozen=True)
class Generated:
    objects: list[dict[str, Any]]
    selectors: list[str]
    warnings: list[str]


_INT64 = range(-(2**63), 2**63)


def cel_string(text: str) -> str:
    """``text`` as a CEL string literal, in ASCII: a printable ASCII character as itself (a
    quote and a backslash escaped), every other code point as ``\\uXXXX`` or, beyond the Basic
    Multilingual Plane, ``\\UXXXXXXXX`` (CEL's escapes name code points, never UTF-16 halves).
    A lone surrogate is no character at all, and NUL cannot be checked here (the CEL runtime's
    strings end at it): :class:`ValueError`, and the attribute is left out."""
    out = ['"']
    for ch in text:
        cp = ord(ch)
        if 0xD800 <= cp <= 0xDFFF or cp == 0:
            raise ValueError(f"U+{cp:04X} cannot be stated and checked")
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= cp < 0x7F:
            out.append(ch)
        elif cp <= 0xFFFF:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


def _value(attrs: dict[str, Any], name: str) -> tuple[str, Any] | None:
    """The attribute's kind and value when CEL can state it as a literal, else None: a value
    from a slice file is hostile (an ``int`` that is text, a version that is no semver)."""
    attr = attrs.get(name)
    if not isinstance(attr, dict) or len(attr) != 1:
        return None
    kind, value = next(iter(attr.items()))
    if kind == "string" and isinstance(value, str):
        try:
            cel_string(value)
        except ValueError:
            return None
        return kind, value
    if kind == "bool" and isinstance(value, bool):
        return kind, value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool) \
            and value in _INT64:
        return kind, value
    if kind == "version" and isinstance(value, str):
        try:
            parse_semver(value)
        except ValueError_:
            return None
        return kind, value
    return None


def _ref(name: str) -> str:
    domain, sep, ident = name.partition("/")
    if not sep:
        domain, ident = DRIVER, name
    return f"device.attributes[{cel_string(domain)}].{ident}"


def _literal(kind: str, value: Any) -> str:
    if kind == "string":
        return cel_string(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "int":
        # -2**63 has no positive literal in CEL: written as an expression of two in range.
        return str(value) if value != -(2**63) else f"({value + 1} - 1)"
    return f"semver({cel_string(value)})"


def _equals(attrs: dict[str, Any], name: str) -> str | None:
    """``has(REF) && REF == LITERAL``: a device that lacks the attribute (another kind of
    device, another driver's) reads false instead of an evaluation error, which would stop
    the scheduler's allocation of the whole claim (KEP-4381). ``==`` between values of two
    types is false in CEL, never an error."""
    v = _value(attrs, name)
    if v is None:
        return None
    kind, value = v
    return f"has({_ref(name)}) && {_ref(name)} == {_literal(kind, value)}"


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
            try:
                literal = cel_string(suffix)
            except ValueError:
                literal = None
            if literal is not None:
                # endsWith() on a value that is not a string is an error. The driver writes
                # the address as a string; another driver could publish one in this domain,
                # so the selector names the driver first. Not `type(x) == string`: Kubernetes
                # estimates comparing two type values beyond the cost limit and refuses it.
                ref = _ref("address")
                sel.append(f'device.driver == "{DRIVER}" && has({ref}) && '
                           f"{ref}.endsWith({literal})")
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
             env: Env | None = None, extended_resource: str | None = None) -> Generated:
    """The DeviceClass, ResourceClaimTemplate and Pod stub for device ``name`` of a slice; with
    ``extended_resource``, the class that maps that name and a pod that asks for it."""
    if extended_resource is not None:
        problem = extended_name_problem(extended_resource)
        if problem is not None:
            raise InputError(f"--extended-resource {extended_resource!r} is not a valid extended "
                             f"resource name: {problem}")
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
    if name not in [d.name for d in chosen]:
        # A value CEL cannot state (a lone surrogate, a malformed version) was left out, and
        # what remains does not describe the device: refuse rather than write a wrong claim.
        raise InputError(f"the selectors written for {name} do not select it; its attributes "
                         "cannot be stated in CEL")
    if not any_of_kind and len(chosen) > 1:
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
    if extended_resource is not None:
        return _extended(name, class_name, [*class_sel, *claim_sel], extended_resource,
                         namespace, what, len(chosen), warnings)
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


def _extended(name: str, class_name: str, selectors: list[str], resource: str, namespace: str,
              what: str, chosen: int, warnings: list[str]) -> Generated:
    """The class that maps ``resource`` to the device (all its selectors: the scheduler's claim
    names only the class) and a pod that asks for one, as a pod for a device plugin does."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": class_name,
                      "annotations": {"liken.sh/generated-by":
                                      f"liken-devices claim-for {name} "
                                      f"--extended-resource {resource}"}},
         "spec": {"selectors": [{"cel": {"expression": e}} for e in selectors],
                  "extendedResourceName": resource}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"{name}-user", "namespace": namespace},
         "spec": {"containers": [{"name": "main", "image": "busybox",
                                  "command": ["sleep", "infinity"],
                                  "resources": {"limits": {resource: 1}}}]}},
    ]
    warnings.insert(0, f"selects {what} ({chosen} in this slice) for pods that ask for "
                       f"{resource} in resources.limits (Kubernetes 1.36 and later: "
                       "DRAExtendedResource, GA in 1.37; an older API server drops the field)")
    return Generated(objects, selectors, warnings)


def select(devices: Sequence[Device], selectors: Sequence[str], env: Env | None = None
           ) -> list[Device]:
    """The devices every one of ``selectors`` is true for (the allocator's own test). Each
    selector is evaluated on every device on its own: one that errs on any device is a defect
    of this module (the scheduler would stop the claim there), never a refusal to select."""
    evaluator = Evaluator(env or environment(), {})
    chosen = []
    for d in devices:
        data = evaluator.data(d)
        if isinstance(data, str):
            # The API server holds no such slice: it is a file someone wrote.
            raise InputError(f"the slice is not valid: device {d.name}: {data}")
        ok = True
        for expression in selectors:
            outcome = evaluator.outcome(expression, d)
            if outcome.error is not None:
                raise RuntimeError(f"claim-for wrote a selector that errs on {d.name}: "
                                   f"{expression}: {outcome.error}")
            ok = ok and outcome.matched
        if ok:
            chosen.append(d)
    return chosen


def render(generated: Generated) -> str:
    """The objects as one YAML stream, ready for ``kubectl apply -f -``."""
    head = "".join(f"# {w}\n" for w in generated.warnings)
    return head + "---\n".join(yaml_text(o) for o in generated.objects)
