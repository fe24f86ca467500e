"""The API server's rules for a ResourceSlice (``resource.k8s.io/v1``), checked locally.

Structure (known fields, value types, required fields) and the server-side limits that no
OpenAPI schema carries. Every violation is reported, not just the first, each with its field path.
"""

from __future__ import annotations

import re
from typing import Any

from ..inventory.limits import DNS_LABEL_MAX, MAX_ATTRIBUTES, MAX_DEVICES
from ..inventory.limits import VALUE_MAX as MAX_VALUE

MAX_DEVICES_ADVANCED = 64  # when any device uses taints or consumesCounters (1.35+)
MAX_DOMAIN = DNS_LABEL_MAX
MAX_ID = 32
MAX_DRIVER = DNS_LABEL_MAX

# Every pattern is used with fullmatch: "$" would let a trailing newline through.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Compiled at its first use (re keeps it): most slices hold no version.
SEMVER = (
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?")
VALUE_KINDS = ("int", "bool", "string", "version")
SPEC_FIELDS = {"driver", "pool", "nodeName", "nodeSelector", "allNodes", "devices",
               "perDeviceNodeSelection", "sharedCounters"}
DEVICE_FIELDS = {"name", "attributes", "capacity", "consumesCounters", "nodeName", "nodeSelector",
                 "allNodes", "taints", "bindsToNode", "bindingConditions",
                 "bindingFailureConditions", "allowMultipleAllocations"}
POOL_FIELDS = {"name", "generation", "resourceSliceCount"}


class SliceInvalid(ValueError):
    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def is_dns_subdomain(value: str, limit: int = 253) -> bool:
    return 0 < len(value) <= limit and all(DNS_LABEL.fullmatch(p) for p in value.split("."))


def check_qualified_name(key: str) -> str | None:
    """An attribute name: a C identifier ≤32, optionally behind ``<domain>/`` (the API's
    qualified-name rule)."""
    if key.count("/") > 1:
        return "must not contain more than one slash"
    domain, _, ident = key.rpartition("/")
    if "/" in key and (not domain or len(domain) > MAX_DOMAIN
                       or not is_dns_subdomain(domain.lower())):
            return f"domain {domain!r} must be a DNS subdomain of at most {MAX_DOMAIN} characters"
    if not ident or len(ident) > MAX_ID or not C_IDENT.fullmatch(ident):
        return f"name {ident!r} must be a C identifier of at most {MAX_ID} characters"
    return None


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_device(i: int, dev: Any, errors: list[str]) -> None:
    where = f"spec.devices[{i}]"
    if not isinstance(dev, dict):
        errors.append(f"{where}: must be an object")
        return
    for key in dev:
        if key not in DEVICE_FIELDS:
            errors.append(f"{where}.{key}: unknown field")
    name = dev.get("name")
    if not isinstance(name, str) or not DNS_LABEL.fullmatch(name) or len(name) > DNS_LABEL_MAX:
        errors.append(f"{where}.name: {name!r} must be a DNS label "
                      f"(at most {DNS_LABEL_MAX} characters)")
    attrs = dev.get("attributes") or {}
    capacity = dev.get("capacity") or {}
    if not isinstance(attrs, dict) or not isinstance(capacity, dict):
        errors.append(f"{where}: attributes and capacity must be maps")
        return
    if len(attrs) + len(capacity) > MAX_ATTRIBUTES:
        errors.append(f"{where}: {len(attrs) + len(capacity)} attributes and capacities; "
                      f"at most {MAX_ATTRIBUTES}")
    for key, value in attrs.items():
        at = f"{where}.attributes[{key}]"
        problem = check_qualified_name(key) if isinstance(key, str) else "must be a string"
        if problem:
            errors.append(f"{at}: {problem}")
        if not isinstance(value, dict):
            errors.append(f"{at}: must be an object with one value")
            continue
        unknown = [k for k in value if k not in VALUE_KINDS]
        if unknown:
            errors.append(f"{at}: unknown value field {unknown[0]!r}")
        set_kinds = [k for k in VALUE_KINDS if value.get(k) is not None]
        if len(set_kinds) != 1:
            errors.append(f"{at}: exactly one of int, bool, string, version must be set")
            continue
        kind = set_kinds[0]
        v = value[kind]
        if kind == "int" and not _is_int(v):
            errors.append(f"{at}.int: must be an integer")
        elif kind == "bool" and not isinstance(v, bool):
            errors.append(f"{at}.bool: must be a boolean")
        elif kind in ("string", "version"):
            if not isinstance(v, str):
                errors.append(f"{at}.{kind}: must be a string")
            elif len(v.encode("utf-8")) > MAX_VALUE:
                errors.append(f"{at}.{kind}: {len(v.encode())} bytes; at most {MAX_VALUE}")
            elif kind == "version" and not re.fullmatch(SEMVER, v, re.ASCII):
                errors.append(f"{at}.version: {v!r} is not a semantic version")
    for key in capacity:
        problem = check_qualified_name(key) if isinstance(key, str) else "must be a string"
        if problem:
            errors.append(f"{where}.capacity[{key}]: {problem}")
    amm = dev.get("allowMultipleAllocations")
    if amm is not None and not isinstance(amm, bool):
        errors.append(f"{where}.allowMultipleAllocations: must be a boolean")
    for key in ("nodeName", "nodeSelector", "allNodes"):
        if key in dev:
            errors.append(f"{where}.{key}: only allowed with spec.perDeviceNodeSelection")


def validate_slice(obj: Any) -> list[str]:
    """Every way ``obj`` breaks the API server's rules for a v1 ResourceSlice; [] when valid."""
    errors: list[str] = []
    if not isinstance(obj, dict):
        return ["the slice must be an object"]
    if obj.get("apiVersion") != "resource.k8s.io/v1":
        errors.append(f"apiVersion: {obj.get('apiVersion')!r}, expected resource.k8s.io/v1")
    if obj.get("kind") != "ResourceSlice":
        errors.append(f"kind: {obj.get('kind')!r}, expected ResourceSlice")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        errors.append("metadata: required")
    else:
        name = meta.get("name")
        if not (isinstance(name, str) and is_dns_subdomain(name)) and not meta.get("generateName"):
            errors.append(f"metadata.name: {name!r} must be a DNS subdomain")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [*errors, "spec: required"]
    for key in spec:
        if key not in SPEC_FIELDS:
            errors.append(f"spec.{key}: unknown field")
    driver = spec.get("driver")
    if not isinstance(driver, str) or not driver or len(driver) > MAX_DRIVER \
            or not is_dns_subdomain(driver.lower()):
        errors.append(f"spec.driver: {driver!r} must be a DNS subdomain of at most {MAX_DRIVER} "
                      "characters")
    pool = spec.get("pool")
    if not isinstance(pool, dict):
        errors.append("spec.pool: required")
    else:
        for key in pool:
            if key not in POOL_FIELDS:
                errors.append(f"spec.pool.{key}: unknown field")
        pname = pool.get("name")
        if not isinstance(pname, str) or len(pname) > 253 or not all(
                is_dns_subdomain(p) for p in pname.split("/")):
            errors.append(f"spec.pool.name: {pname!r} must be DNS subdomains joined by '/'")
        gen = pool.get("generation")
        if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
            errors.append("spec.pool.generation: must be an integer >= 0")
        count = pool.get("resourceSliceCount")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            errors.append("spec.pool.resourceSliceCount: must be an integer >= 1")
    selectors = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
                 if spec.get(k) not in (None, "", False)]
    if len(selectors) != 1:
        errors.append("spec: exactly one of nodeName, nodeSelector, allNodes, "
                      "perDeviceNodeSelection is required")
    node = spec.get("nodeName")
    if node is not None and not (isinstance(node, str) and is_dns_subdomain(node)):
        errors.append(f"spec.nodeName: {node!r} must be a DNS subdomain")
    for key in ("allNodes", "perDeviceNodeSelection"):
        if key in spec and spec[key] is not True:
            errors.append(f"spec.{key}: must be true when set")
    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        return [*errors, "spec.devices: must be a list"]
    advanced = any(isinstance(d, dict) and (d.get("taints") or d.get("consumesCounters"))
                   for d in devices)
    limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
    if len(devices) > limit:
        errors.append(f"spec.devices: {len(devices)} devices; at most {limit}")
    seen: set[str] = set()
    for i, dev in enumerate(devices):
        _check_device(i, dev, errors)
        name = dev.get("name") if isinstance(dev, dict) else None
        if isinstance(name, str):
            if name in seen:
                errors.append(f"spec.devices[{i}].name: duplicate {name!r}")
            seen.add(name)
    return errors


def ensure_valid(obj: Any) -> None:
    errors = validate_slice(obj)
    if errors:
        raise SliceInvalid(errors)
