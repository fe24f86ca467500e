"""Reading a ResourceClaim's allocation from the API, the way the kubelet plugin must.

Before preparing, the plugin GETs each claim by namespace/name and refuses a claim that is gone,
not allocated, or whose UID differs from the one the kubelet gave (the claim "got replaced"), as
the kubelet plugin helper of Kubernetes does (docs/plugin.md, "Prepare").
``status.allocation.devices.results`` holds every driver's devices, so only the results whose
driver is ``liken.sh`` are ours, and only those of this node's pool (the pool is named after the
node: rules: limits.one-slice). A result's request may be ``<request>/<subrequest>``;
the kubelet matches containers on the base name, so that is what is returned.

For a late Bluetooth registrant the plugin also reads, by name, the pods a prepared claim's
``status.reservedFor`` names, for when the kubelet recorded their containers' start
(:func:`container_starts`; :mod:`.late` judges what it reads).

The namespace and name come from the gRPC request, hostile until checked: a namespace is a
DNS-1123 label and a claim's name a DNS-1123 subdomain (Kubernetes' object name rules), so
nothing else ever reaches the API server's URL path.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

from ..inventory.limits import DRIVER
from .late import claim_starts, reserved_pods


class ClaimError(Exception):
    """Why one claim cannot be prepared; reported in band for that claim only. ``transient``:
    the API could not say (unreachable, a server error), not that the claim is not ours."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True, slots=True)
class Result:
    request: str  # base request name
    pool: str
    device: str
    share_id: str | None


class KubeClient(Protocol):
    """What the plugin needs of a lightkube ``Client``."""

    def get(self, res: Any, name: str, *, namespace: str | None = None) -> Any: ...


def base_request(request: str) -> str:
    return request.split("/", 1)[0]


def _field(obj: Any, name: str) -> Any:
    """A field of a lightkube model or of a plain dict (a generic resource)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def check_ref(namespace: str, name: str) -> None:
    """:class:`ClaimError` unless ``namespace`` is a DNS label and ``name`` a DNS subdomain."""
    if not _LABEL.fullmatch(namespace):
        raise ClaimError(f"namespace {namespace[:80]!r} is not a DNS-1123 label")
    if len(name) > 253 or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        raise ClaimError(f"claim name {name[:80]!r} is not a DNS-1123 subdomain")


def fetch_results(client: KubeClient, namespace: str, name: str, uid: str,
                  node: str) -> list[Result]:
    """This node's liken.sh devices in the claim's allocation, or :class:`ClaimError`."""
    # deferred: lightkube (90-190 ms) and the API client (21 ms) load only for what talks to
    # the API server; `claims` reads the state, which imports this module
    # (tests/test_layers.py). The claim is read as a generic (dict) resource: no typed model to
    # build per GET.
    from lightkube import ApiError

    from ..kube.client import Resources

    check_ref(namespace, name)
    ref = f"ResourceClaim {namespace}/{name}"
    try:
        claim = client.get(Resources.claim(), name, namespace=namespace)
    except ApiError as e:
        code = getattr(e.status, "code", None)
        if code == 404:
            raise ClaimError(f"{ref} not found (deleted?)") from None
        raise ClaimError(f"reading {ref}: {code} {e.status.message}", transient=True) from None
    except Exception as e:  # connection refused, timeouts, bad kubeconfig: the API is unreachable
        raise ClaimError(f"reading {ref}: {type(e).__name__}: {e}", transient=True) from None
    got_uid = _field(_field(claim, "metadata"), "uid")
    if got_uid != uid:
        raise ClaimError(f"{ref} has UID {got_uid}, the kubelet asked for {uid}: "
                         "the claim was replaced")
    allocation = _field(_field(claim, "status"), "allocation")
    if allocation is None:
        raise ClaimError(f"{ref} is not allocated")
    results = _field(_field(allocation, "devices"), "results") or []
    ours = [r for r in results if _field(r, "driver") == DRIVER]
    mine = [r for r in ours if _field(r, "pool") == node]
    if not mine:
        if ours:
            pools = sorted({str(_field(r, "pool")) for r in ours})
            raise ClaimError(f"{ref} holds {DRIVER} devices of pool {', '.join(pools)}, "
                             f"not of this node {node}")
        raise ClaimError(f"{ref} has no device of {DRIVER}")
    return [Result(base_request(str(_field(r, "request") or "")), node, str(_field(r, "device")),
                   _field(r, "shareID")) for r in mine]


def container_starts(client: KubeClient, namespace: str, name: str, uid: str,
                     budget: float = 20.0) -> list[float] | None:
    """When each running container that uses the claim started, as the kubelet recorded it in
    the status of the pods the claim is reserved for (rules: bluetooth.late-registrant;
    :mod:`.late`); None when the API cannot say (unreachable, the claim replaced, a consumer
    that is not a pod, a start that does not parse, or no answer within ``budget`` seconds: the
    health stream's heartbeat waits for it). A pod that is gone, or replaced under another UID,
    runs no container of the claim."""
    deadline = time.monotonic() + budget
    # deferred: lightkube and the API client, as in fetch_results (tests/test_layers.py)
    from lightkube import ApiError

    from ..kube.client import Resources

    try:
        check_ref(namespace, name)
        claim = client.get(Resources.claim(), name, namespace=namespace)
        if _field(_field(claim, "metadata"), "uid") != uid:
            return None
        pods = reserved_pods(dict(claim))
        if pods is None:
            return None
        starts: list[float] = []
        for pod_name, pod_uid in pods:
            if time.monotonic() > deadline:
                return None
            check_ref(namespace, pod_name)
            try:
                pod = client.get(Resources.pod(), pod_name, namespace=namespace)
            except ApiError as e:
                if getattr(e.status, "code", None) == 404:
                    continue
                raise
            if _field(_field(pod, "metadata"), "uid") != pod_uid:
                continue
            got = claim_starts(dict(pod), name)
            if got is None:
                return None
            starts.extend(got)
        return starts
    except Exception:  # unreachable, an error, a name that is not one, nonsense: no verdict
        return None
