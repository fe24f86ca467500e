"""Reading a ResourceClaim's allocation from the API, the way the kubelet plugin must.

dra-api.md §6.4: before preparing, the plugin GETs each claim by namespace/name and refuses a claim
that is gone, not allocated, or whose UID differs from the one the kubelet gave (the claim "got
replaced"). §4.2/§5.3: ``status.allocation.devices.results`` holds every driver's devices, so only
the results whose driver is ``liken.sh`` are ours, and only those of this node's pool (the pool is
named after the node: devices.txt, "What a node publishes"). A result's request may be
``<request>/<subrequest>``; the kubelet matches containers on the base name, so that is what is
returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .cdi import DRIVER


class ClaimError(Exception):
    """Why one claim cannot be prepared; reported in band for that claim only."""


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


def fetch_results(client: KubeClient, namespace: str, name: str, uid: str,
                  node: str) -> list[Result]:
    """This node's liken.sh devices in the claim's allocation, or :class:`ClaimError`."""
    from lightkube import ApiError
    from lightkube.resources.resource_v1 import ResourceClaim

    ref = f"ResourceClaim {namespace}/{name}"
    try:
        claim = client.get(ResourceClaim, name, namespace=namespace)
    except ApiError as e:
        code = getattr(e.status, "code", None)
        if code == 404:
            raise ClaimError(f"{ref} not found (deleted?)") from None
        raise ClaimError(f"reading {ref}: {code} {e.status.message}") from None
    except Exception as e:  # connection refused, timeouts, bad kubeconfig: the API is unreachable
        raise ClaimError(f"reading {ref}: {type(e).__name__}: {e}") from None
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
