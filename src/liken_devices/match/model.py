"""The API objects ``match`` reads, parsed from YAML/JSON into plain typed values.

Inputs are files a user hands over (``-f``, ``--slices``) or lists from the cluster; every one is
hostile until parsed: bounded in bytes and count, every field type-checked, and a problem is an
:class:`InputError` naming the object and field (exit 2, one line). The shapes are those of
``resource.k8s.io/v1`` (DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice) and a
Pod's ``spec.resourceClaims``; the older ``v1beta1`` request shape (fields directly on the
request instead of under ``exactly``) is read too, since kubectl may still print it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..apischema import check_object
from ..documents import STDIN, Limits, load_file
from ..errors import InputError

# What a user hands ``match`` and ``claim-for`` (docs/claims.md, "Bad input"): claims and pods
# by hand are kilobytes; a fleet's slices from kubectl are tens of megabytes.
# A field written twice is refused, as strict field validation refuses it (the last one would
# win in silence; rules: limits.strict-inputs).
CLAIM_LIMITS = Limits(bytes=4 * 1024 * 1024, values=1_000_000, unique_keys=True)
SLICE_LIMITS = Limits(bytes=32 * 1024 * 1024, values=4_000_000, unique_keys=True)
MAX_OBJECTS = 200_000
# API limits on a claim (resource.k8s.io/v1): requests, subrequests, selectors, constraints.
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_SELECTORS = 32
MAX_CONSTRAINTS = 32
MAX_COUNT = 128  # a request cannot get more devices than one slice holds


def load_documents(path: Path | str, limits: Limits = CLAIM_LIMITS) -> list[dict[str, Any]]:
    """Every object in a YAML or JSON file, or standard input (``-``), read by the one bounded
    reader (:mod:`..documents`); a ``List`` (kubectl's ``-o yaml``) is unpacked. Each object is
    read as the API server's strict field validation reads it (rules: limits.strict-inputs): a
    served apiVersion (:data:`API_VERSIONS`), a kind of that version, every field known."""
    where = "standard input" if str(path) == STDIN else str(path)
    docs = load_file(path, limits, "file")
    out: list[dict[str, Any]] = []
    for doc in _unpack(docs, where):
        out.append(doc)
        if len(out) > MAX_OBJECTS:
            raise InputError(f"{where}: more than {MAX_OBJECTS} objects")
    return out


# The versions of resource.k8s.io that a cluster serves (v1 since Kubernetes 1.34; v1beta2 and
# v1beta1 still served, and printed by older kubectl), and the core v1 Pod
# (rules: limits.strict-inputs).
API_VERSIONS: dict[str, tuple[str, ...]] = {
    **{f"resource.k8s.io/{v}": ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate",
                                "ResourceSlice") for v in ("v1", "v1beta2", "v1beta1")},
    "v1": ("Pod",),
}


def _unpack(docs: Iterable[Any], where: str) -> Iterator[dict[str, Any]]:
    stack: list[tuple[Any, str, dict[str, Any] | None]] = [
        (doc, f"document {i + 1}", None) for i, doc in enumerate(docs)]
    stack.reverse()
    while stack:
        doc, label, inherit = stack.pop()
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(f"{where}: {label}: not an object")
        if inherit is not None:  # an item of a DeviceClassList may leave out its type
            doc = {**inherit, **doc}
        kind = doc.get("kind")
        meta = doc.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if isinstance(kind, str) and isinstance(name, str):
            label = f"{label} ({kind[:40]} {name[:80]})"
        try:
            check_object(doc, API_VERSIONS)
        except InputError as exc:
            raise InputError(f"{where}: {label}: {exc}") from None
        if isinstance(kind, str) and kind.endswith("List"):
            typed = None if kind == "List" else {"apiVersion": doc["apiVersion"],
                                                 "kind": kind.removesuffix("List")}
            items = doc.get("items") or []
            stack.extend((item, f"{label}: items[{i}]", typed)
                         for i, item in reversed(list(enumerate(items))))
        else:
            yield doc


def _name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise InputError(f"{obj.get('kind', 'object')}: no metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(f"{obj.get('kind', 'object')}: no metadata.name")
    ns = meta.get("namespace")
    return (ns if isinstance(ns, str) and ns else "default"), name


def _list(value: Any, where: str, limit: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{where}: not a list")
    if len(value) > limit:
        raise InputError(f"{where}: more than {limit} entries")
    return value


def _selectors(value: Any, where: str) -> list[str]:
    out = []
    for i, sel in enumerate(_list(value, where, MAX_SELECTORS)):
        expr = sel.get("cel", {}).get("expression") if isinstance(sel, dict) else None
        if not isinstance(expr, str):
            raise InputError(f"{where}[{i}]: no cel.expression")
        out.append(expr)
    return out


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]

    @classmethod
    def parse(cls, obj: dict[str, Any]) -> DeviceClass:
        _, name = _name(obj)
        spec = obj.get("spec") or {}
        if not isinstance(spec, dict):
            raise InputError(f"DeviceClass {name}: spec is not an object")
        return cls(name, tuple(_selectors(spec.get("selectors"),
                                          f"DeviceClass {name}: spec.selectors")))


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: dict[str, Any]) -> bool:
        if self.effect and self.effect != taint.get("effect"):
            return False
        if self.key and self.key != taint.get("key"):
            return False
        if self.operator == "Exists":
            return True
        return self.value == (taint.get("value") or "")


@dataclass(frozen=True)
class Subrequest:
    """What one request (or one ``firstAvailable`` alternative) asks for."""

    name: str  # "req" or "req/sub"
    class_name: str
    selectors: tuple[str, ...]
    all_devices: bool
    count: int
    admin_access: bool
    tolerations: tuple[Toleration, ...] = ()

    @classmethod
    def parse(cls, name: str, spec: Any, where: str) -> Subrequest:
        if not isinstance(spec, dict):
            raise InputError(f"{where}: not an object")
        class_name = spec.get("deviceClassName")
        if not isinstance(class_name, str) or not class_name:
            raise InputError(f"{where}: deviceClassName is required")
        mode = spec.get("allocationMode") or "ExactCount"
        if mode not in ("ExactCount", "All"):
            raise InputError(f"{where}: allocationMode {mode!r} is neither ExactCount nor All")
        count = spec.get("count")
        if mode == "All":
            if count not in (None, 0):
                raise InputError(f"{where}: count must be unset with allocationMode All")
            count = 0
        else:
            count = 1 if count is None else count
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise InputError(f"{where}: count must be a positive integer")
            if count > MAX_COUNT:
                raise InputError(f"{where}: count {count} is more than a slice holds "
                                 f"({MAX_COUNT})")
        admin = spec.get("adminAccess")
        if admin is not None and not isinstance(admin, bool):
            raise InputError(f"{where}: adminAccess is not a boolean")
        tolerations = []
        for i, t in enumerate(_list(spec.get("tolerations"), f"{where}.tolerations", 16)):
            if not isinstance(t, dict):
                raise InputError(f"{where}.tolerations[{i}]: not an object")
            tolerations.append(Toleration(str(t.get("key") or ""),
                                          str(t.get("operator") or "Equal"),
                                          str(t.get("value") or ""), str(t.get("effect") or "")))
        return cls(name, class_name, tuple(_selectors(spec.get("selectors"),
                                                      f"{where}.selectors")),
                   mode == "All", count, bool(admin), tuple(tolerations))


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[Subrequest, ...]  # one for `exactly`, in order for `firstAvailable`
    first_available: bool


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...]  # empty: every request
    match_attribute: str | None
    distinct_attribute: str | None


@dataclass
class Claim:
    """A ResourceClaim, or the claim a ResourceClaimTemplate makes (``kind`` says which)."""

    kind: str
    namespace: str
    name: str
    requests: list[Request]
    constraints: list[Constraint]
    allocation: list[dict[str, Any]] | None = None  # status.allocation.devices.results
    reserved_for: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @classmethod
    def parse(cls, obj: dict[str, Any]) -> Claim:
        kind = str(obj.get("kind"))
        ns, name = _name(obj)
        where = f"{kind} {ns}/{name}"
        spec = obj.get("spec")
        if kind == "ResourceClaimTemplate":
            spec = spec.get("spec") if isinstance(spec, dict) else None
            where += ": spec.spec"
        else:
            where += ": spec"
        if not isinstance(spec, dict):
            raise InputError(f"{where}: missing")
        devices = spec.get("devices") or {}
        if not isinstance(devices, dict):
            raise InputError(f"{where}.devices: not an object")
        requests: list[Request] = []
        seen: set[str] = set()
        for i, r in enumerate(_list(devices.get("requests"), f"{where}.devices.requests",
                                    MAX_REQUESTS)):
            rw = f"{where}.devices.requests[{i}]"
            if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not r["name"]:
                raise InputError(f"{rw}: a request needs a name")
            rname = r["name"]
            if rname in seen:
                raise InputError(f"{rw}: duplicate request name {rname!r}")
            seen.add(rname)
            if "firstAvailable" in r:
                if "exactly" in r:
                    raise InputError(f"{rw}: exactly one of exactly and firstAvailable")
                subs = []
                for j, s in enumerate(_list(r["firstAvailable"], f"{rw}.firstAvailable",
                                            MAX_SUBREQUESTS)):
                    sname = s.get("name") if isinstance(s, dict) else None
                    if not isinstance(sname, str) or not sname:
                        raise InputError(f"{rw}.firstAvailable[{j}]: a subrequest needs a name")
                    subs.append(Subrequest.parse(f"{rname}/{sname}", s,
                                                 f"{rw}.firstAvailable[{j}]"))
                if not subs:
                    raise InputError(f"{rw}.firstAvailable: empty")
                requests.append(Request(rname, tuple(subs), True))
            elif "exactly" in r:
                requests.append(Request(rname, (Subrequest.parse(rname, r["exactly"],
                                                                 f"{rw}.exactly"),), False))
            elif "deviceClassName" in r:  # v1beta1 shape
                requests.append(Request(rname, (Subrequest.parse(rname, r, rw),), False))
            else:
                raise InputError(f"{rw}: one of exactly and firstAvailable is required")
        constraints = []
        for i, c in enumerate(_list(devices.get("constraints"), f"{where}.devices.constraints",
                                    MAX_CONSTRAINTS)):
            cw = f"{where}.devices.constraints[{i}]"
            if not isinstance(c, dict):
                raise InputError(f"{cw}: not an object")
            names = tuple(str(x) for x in _list(c.get("requests"), f"{cw}.requests",
                                                 MAX_REQUESTS))
            for n in names:
                if n.split("/", 1)[0] not in seen:
                    raise InputError(f"{cw}: no request named {n!r}")
            match, distinct = c.get("matchAttribute"), c.get("distinctAttribute")
            if (match is None) == (distinct is None):
                raise InputError(f"{cw}: exactly one of matchAttribute and distinctAttribute")
            for attr in (match, distinct):
                if attr is not None and (not isinstance(attr, str) or "/" not in attr):
                    raise InputError(f"{cw}: the attribute must be fully qualified "
                                     f"(domain/name): {attr!r}")
            constraints.append(Constraint(names, match, distinct))
        claim = cls("ResourceClaim" if kind == "ResourceClaim" else "ResourceClaimTemplate",
                    ns, name, requests, constraints)
        if kind == "ResourceClaim":
            claim.allocation, claim.reserved_for = allocation_of(obj)
        return claim

    @classmethod
    def held(cls, obj: dict[str, Any]) -> Claim | None:
        """What an allocated ResourceClaim holds, even when its spec cannot be read (a field
        of a later API version): the devices stay held whatever the request said."""
        ns, name = _name(obj)
        results, reserved = allocation_of(obj)
        if results is None:
            return None
        return cls("ResourceClaim", ns, name, [], [], results, reserved)


def allocation_of(obj: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, list[str]]:
    """A ResourceClaim's ``status.allocation.devices.results`` (None: not allocated) and the
    consumers in ``status.reservedFor`` as ``resource/name``."""
    status = obj.get("status")
    if not isinstance(status, dict):
        return None, []
    where = "ResourceClaim status"
    results = None
    alloc = status.get("allocation")
    if isinstance(alloc, dict):
        devices = alloc.get("devices")
        raw = devices.get("results") if isinstance(devices, dict) else None
        results = [r for r in _list(raw, f"{where}: results", 4096) if isinstance(r, dict)]
    reserved = []
    for ref in _list(status.get("reservedFor"), f"{where}: reservedFor", 256):
        if isinstance(ref, dict) and isinstance(ref.get("name"), str):
            reserved.append(f"{ref.get('resource', 'pods')}/{ref['name']}")
    return results, reserved


@dataclass(frozen=True)
class PodClaims:
    """A Pod's ``spec.resourceClaims``: entry name -> (claim name or None, template name)."""

    namespace: str
    name: str
    entries: tuple[tuple[str, str | None, str | None], ...]

    @classmethod
    def parse(cls, obj: dict[str, Any]) -> PodClaims:
        ns, name = _name(obj)
        spec = obj.get("spec") or {}
        entries = []
        for i, rc in enumerate(_list(spec.get("resourceClaims") if isinstance(spec, dict)
                                     else None, f"Pod {ns}/{name}: spec.resourceClaims", 32)):
            if not isinstance(rc, dict) or not isinstance(rc.get("name"), str):
                raise InputError(f"Pod {ns}/{name}: spec.resourceClaims[{i}]: no name")
            claim, template = rc.get("resourceClaimName"), rc.get("resourceClaimTemplateName")
            if (claim is None) == (template is None):
                raise InputError(f"Pod {ns}/{name}: spec.resourceClaims[{i}]: exactly one of "
                                 "resourceClaimName and resourceClaimTemplateName")
            entries.append((rc["name"], claim, template))
        return cls(ns, name, tuple(entries))


@dataclass(frozen=True)
class Device:
    """One device of a slice, with where it lives."""

    driver: str
    pool: str
    name: str
    node: str | None  # None: a slice for all nodes
    attributes: dict[str, Any]
    capacity: dict[str, Any]
    allow_multiple: bool
    taints: tuple[dict[str, Any], ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    def attribute(self, qualified: str) -> Any:
        """The one value of a fully qualified attribute, or None when the device lacks it."""
        domain, _, ident = qualified.partition("/")
        attr = self.attributes.get(qualified)
        if attr is None and domain == self.driver:
            attr = self.attributes.get(ident)
        if not isinstance(attr, dict) or len(attr) != 1:
            return None
        kind, value = next(iter(attr.items()))
        return (kind, tuple(value) if isinstance(value, list) else value)


def slice_devices(slices: Iterable[dict[str, Any]]) -> list[Device]:
    """The devices of the newest generation of every pool, in slice order.

    Consumers use only the slices of a pool that carry its highest ``pool.generation``
    (resource.k8s.io/v1 ResourcePool); older ones are left over from a replaced publication.
    """
    parsed: list[tuple[str, str, int, dict[str, Any]]] = []
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s.get("spec") if isinstance(s, dict) else None
        if not isinstance(spec, dict):
            raise InputError("a ResourceSlice has no spec")
        driver, pool = spec.get("driver"), spec.get("pool")
        if not isinstance(driver, str) or not isinstance(pool, dict) \
                or not isinstance(pool.get("name"), str):
            raise InputError("a ResourceSlice lacks spec.driver or spec.pool.name")
        gen = pool.get("generation", 0)
        gen = gen if isinstance(gen, int) else 0
        key = (driver, pool["name"])
        newest[key] = max(newest.get(key, gen), gen)
        parsed.append((driver, pool["name"], gen, spec))
    out: list[Device] = []
    for driver, pool, gen, spec in parsed:
        if gen != newest[(driver, pool)]:
            continue
        node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None
        if node is None and spec.get("allNodes") is not True:
            continue  # a nodeSelector slice: which nodes it reaches needs the Nodes' labels
        for d in _list(spec.get("devices"), f"ResourceSlice {driver}/{pool}: devices", 1024):
            if not isinstance(d, dict) or not isinstance(d.get("name"), str):
                raise InputError(f"ResourceSlice {driver}/{pool}: a device has no name")
            # resource.k8s.io/v1beta1 wraps a device's fields in `basic`.
            fields = d["basic"] if isinstance(d.get("basic"), dict) else d
            attrs = fields.get("attributes") or {}
            caps = fields.get("capacity") or {}
            if not isinstance(attrs, dict) or not isinstance(caps, dict):
                raise InputError(f"device {d['name']}: attributes/capacity not objects")
            taints = tuple(t for t in (fields.get("taints") or []) if isinstance(t, dict))
            out.append(Device(driver, pool, d["name"], node, attrs, caps,
                              fields.get("allowMultipleAllocations") is True, taints))
    return out
