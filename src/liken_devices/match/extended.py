"""Extended resources backed by DRA: a pod written for a device plugin, evaluated as the scheduler
of Kubernetes 1.37 evaluates it (KEP-5004, ``DRAExtendedResource``: beta in 1.36, GA in 1.37).

A pod that asks ``resources.limits: {squat.ai/serial: 1}`` names no claim. A DeviceClass whose
``spec.extendedResourceName`` is that name (or the name ``deviceclass.resource.kubernetes.io/
<class>`` every class has) turns it into a claim the scheduler makes for the pod, named
``<pod>-extended-resources-...``: one request per container that asks for the resource, on that
class, its count the container's quantity (an init container that runs before the others reuses
their requests and adds only what it needs beyond them). A name no class maps can come only from
a device plugin on the node; ``match`` reads slices, not the nodes' device plugins, so it says
so instead of allocating. rules: claims.extended-resource

What the API server enforces is enforced here too, so a file it would refuse is refused (exit 2):
a class's ``extendedResourceName`` must be a valid extended resource name (a domain that is not
``kubernetes.io`` or below it, no ``requests.`` prefix, and ``requests.<name>`` a qualified
name), and a container's quantity of an extended resource must be an integer, its request equal
to its limit when both are given (the limit is the request when only it is given).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from .model import Claim, Request, Subrequest
from .values import ValueError_, parse_quantity

DEVICECLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
NATIVE_DOMAIN = "kubernetes.io/"  # a name containing it is a native resource
QUOTA_PREFIX = "requests."
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
MAX_CONTAINERS = 1000
MAX_QUANTITY = 1 << 31  # a container asks for a few devices; beyond, the file is not a pod


def _qualified_name_problem(name: str) -> str | None:
    """The API's qualified-name rule: ``[prefix/]name``, the prefix a DNS subdomain of at most
    253 characters, the name at most 63 alphanumerics with ``-_.`` inside."""
    parts = name.split("/")
    if len(parts) > 2:
        return "a qualified name has at most one '/'"
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not all(_DNS_LABEL.fullmatch(p)
                                                      for p in prefix.split(".")):
            return f"the prefix {prefix!r} must be a DNS subdomain of at most 253 characters"
    last = parts[-1]
    if not last or len(last) > 63 or not _NAME_PART.fullmatch(last):
        return (f"the name {last!r} must be at most 63 characters: alphanumerics, and '-', '_' "
                "or '.' between them")
    return None


def extended_name_problem(name: str) -> str | None:
    """Why ``name`` is not an extended resource name, as the API server's check says it
    (core/v1 helper ``IsExtendedResourceName``), or None when it is one."""
    if "/" not in name or NATIVE_DOMAIN in name:
        return "it is a native resource name (no domain, or the kubernetes.io domain)"
    if name.startswith(QUOTA_PREFIX):
        return f"it starts with the quota prefix {QUOTA_PREFIX!r}"
    problem = _qualified_name_problem(QUOTA_PREFIX + name)
    return None if problem is None else f"{QUOTA_PREFIX}{name} is not a qualified name: {problem}"


def is_dra_extended(name: str) -> bool:
    """A name the scheduler may map to a DeviceClass: an extended resource name, or a class's
    implicit ``deviceclass.resource.kubernetes.io/<class>``."""
    return name.startswith(DEVICECLASS_PREFIX) or extended_name_problem(name) is None


@dataclass(frozen=True)
class ContainerNeeds:
    index: int  # in init containers followed by containers
    name: str
    long_lived: bool  # a regular container or a sidecar (an init container that keeps running)
    keys: tuple[str, ...]  # every resource the container requests, sorted
    needs: dict[str, int]  # extended resources the scheduler may map: name -> count


def _quantity(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InputError(f"{where}: not a quantity")
    try:
        q = parse_quantity(str(value))
    except ValueError_ as exc:
        raise InputError(f"{where}: {exc}") from None
    if q.denominator != 1 or q < 0:
        raise InputError(f"{where}: {value!r}: an extended resource is counted in whole "
                         "devices (the API server refuses a fraction)")
    if q > MAX_QUANTITY:
        raise InputError(f"{where}: {value!r}: more than {MAX_QUANTITY}")
    return int(q)


def _resource_map(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InputError(f"{where}: not a map of resource names to quantities")
    return value


@dataclass(frozen=True)
class PodNeeds:
    """The extended resources a Pod's containers ask for, as the scheduler reads them."""

    namespace: str
    name: str
    containers: tuple[ContainerNeeds, ...]

    @classmethod
    def parse(cls, obj: dict[str, Any], namespace: str, name: str) -> PodNeeds:
        spec = obj.get("spec") or {}
        if not isinstance(spec, dict):
            raise InputError(f"Pod {namespace}/{name}: spec is not an object")
        out: list[ContainerNeeds] = []
        index = 0
        for field in ("initContainers", "containers"):
            items = spec.get(field) or []
            if not isinstance(items, list) or len(items) > MAX_CONTAINERS:
                raise InputError(f"Pod {namespace}/{name}: spec.{field}: not a list of at most "
                                 f"{MAX_CONTAINERS} containers")
            for i, c in enumerate(items):
                where = f"Pod {namespace}/{name}: spec.{field}[{i}]"
                if not isinstance(c, dict):
                    raise InputError(f"{where}: not an object")
                res = c.get("resources") or {}
                if not isinstance(res, dict):
                    raise InputError(f"{where}.resources: not an object")
                requests = _resource_map(res.get("requests"), f"{where}.resources.requests")
                limits = _resource_map(res.get("limits"), f"{where}.resources.limits")
                needs: dict[str, int] = {}
                for key in sorted(set(requests) | set(limits)):
                    if not is_dra_extended(key):
                        continue
                    req = _quantity(requests[key], f"{where}.resources.requests[{key}]") \
                        if key in requests else None
                    lim = _quantity(limits[key], f"{where}.resources.limits[{key}]") \
                        if key in limits else None
                    if req is not None and lim is not None and req != lim:
                        raise InputError(f"{where}: {key}: the request ({req}) must equal the "
                                         f"limit ({lim}) for an extended resource")
                    count = req if req is not None else lim
                    if count:
                        needs[key] = count
                sidecar = field == "initContainers" and c.get("restartPolicy") == "Always"
                out.append(ContainerNeeds(index, str(c.get("name") or f"#{index}"),
                                          field == "containers" or sidecar,
                                          tuple(sorted(set(requests) | set(limits))), needs))
                index += 1
        return cls(namespace, name, tuple(out))

    def names(self) -> list[str]:
        return sorted({n for c in self.containers for n in c.needs})


class ExtendedClasses:
    """Which DeviceClass each extended resource name maps to. Two classes naming one resource
    (a migration from one class to another): the newer one by ``creationTimestamp``, the lower
    name between equals, as the scheduler picks."""

    def __init__(self) -> None:
        self.by_class: dict[str, tuple[str, str]] = {}  # class -> (resource name, created)

    def add(self, obj: dict[str, Any], class_name: str) -> None:
        self.by_class.pop(class_name, None)  # a class read again replaces what it said
        spec = obj.get("spec") or {}
        value = spec.get("extendedResourceName") if isinstance(spec, dict) else None
        if value is None:
            return
        where = f"DeviceClass {class_name}: spec.extendedResourceName"
        if not isinstance(value, str):
            raise InputError(f"{where}: not a string")
        problem = extended_name_problem(value)
        if problem is not None:
            raise InputError(f"{where}: {value!r} is not a valid extended resource name: "
                             f"{problem}")
        meta = obj.get("metadata") or {}
        created = meta.get("creationTimestamp") if isinstance(meta, dict) else None
        self.by_class[class_name] = (value, str(created or ""))

    def overlaid(self, files: ExtendedClasses) -> ExtendedClasses:
        """These (the cluster's) with ``files`` read over them: a class in the files wins."""
        out = ExtendedClasses()
        out.by_class = {**self.by_class, **files.by_class}
        return out

    def resolve(self, name: str, classes: dict[str, Any]) -> str | None:
        # RFC 3339 times in UTC, as the API server writes them, order as strings.
        named = [(created, cls) for cls, (res, created) in self.by_class.items()
                 if res == name and cls in classes]
        if named:
            newest = max(created for created, _ in named)
            return min(cls for created, cls in named if created == newest)
        if name.startswith(DEVICECLASS_PREFIX) and name[len(DEVICECLASS_PREFIX):] in classes:
            return name[len(DEVICECLASS_PREFIX):]
        return None


def _requests_for(pod: PodNeeds, resource: str, class_name: str) -> list[tuple[str, int]]:
    """The scheduler's requests for one resource: one per long-lived container that asks for
    it; an init container that runs first reuses the requests of the long-lived containers
    after it, and only the largest remainder of those becomes a request of its own."""
    def request_name(c: ContainerNeeds) -> str:
        return f"container-{c.index}-request-{c.keys.index(resource)}"

    long_lived = {c.index: (request_name(c), c.needs[resource]) for c in pod.containers
                  if c.long_lived and resource in c.needs}
    largest: tuple[str, int] | None = None
    for c in pod.containers:
        if c.long_lived or resource not in c.needs:
            continue
        want, have = c.needs[resource], 0
        for index in sorted(i for i in long_lived if i >= c.index):
            have += long_lived[index][1]
            if have >= want:
                break
        if have < want and (largest is None or want - have > largest[1]):
            largest = (request_name(c), want - have)
    return [*([largest] if largest else []), *long_lived.values()]


def implicit_claim(pod: PodNeeds, resolve: Callable[[str], str | None]
                   ) -> tuple[Claim | None, list[str]]:
    """The claim the scheduler makes for ``pod``'s extended resources (None: it asks for none
    that a class maps) and the names no class maps."""
    requests: list[tuple[str, int, str]] = []
    unmapped: list[str] = []
    for resource in pod.names():
        class_name = resolve(resource)
        if class_name is None:
            unmapped.append(resource)
            continue
        requests += [(n, count, class_name) for n, count in
                     _requests_for(pod, resource, class_name)]
    if not requests:
        return None, unmapped
    made = [Request(n, (Subrequest(n, cls, (), False, count, False),), False)
            for n, count, cls in sorted(requests)]
    return Claim("ResourceClaim", pod.namespace, f"{pod.name}-extended-resources", made,
                 []), unmapped


def unmapped_reason(names: list[str]) -> str:
    shown = ", ".join(names)
    return (f"extended resource {shown}: no DeviceClass names it in spec.extendedResourceName "
            f"(nor is it {DEVICECLASS_PREFIX}<class>), so only a device plugin on the node "
            "could provide it, and match reads slices, not device plugins")
