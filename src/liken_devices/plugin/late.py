"""A late Bluetooth registrant: a number a running container holds that another device took.

rules: bluetooth.late-registrant. A Bluetooth claim states the legacy
event numbers that were free of other devices when its spec was written, and the container
runtime creates those nodes when the container starts. A keyboard plugged in afterwards gets the
lowest free number, often one the running container already has; the next spec leaves it out,
but the running container keeps its node until it restarts. So the plugin remembers, per claim,
the numbers its running container started with (``PreparedClaim.started``), and a number among
them that a walk now leaves out (another device's node) makes the Bluetooth device unhealthy on
the kubelet's health stream, with one log line and a metric, until the container restarts with
the current set.

Whether the running container restarted with the current set is read from what the kubelet
recorded, never from a file's times: the pods the claim's ``status.reservedFor`` names, and in
each the ``state.running.startedAt`` of every container that uses the claim
(``spec.containers[].resources.claims`` through ``spec.resourceClaims`` or
``status.resourceClaimStatuses``). Only the kubelet of the pod's node writes a pod's status (the
API server's NodeRestriction admission and the node authorizer), and the claim's status only the
scheduler and the controllers; reading the spec, or touching any file, moves neither. A CDI spec's
access time moves for every reader (podman reads every spec whenever it creates any container
with a CDI device; relatime moves it once a day anyway), so it proves nothing. The container is
taken to hold the current set when it started :data:`START_AFTER` seconds or more after the
spec's content last changed (``startedAt`` has whole seconds, and the runtime reads the spec when
it creates the container, a moment before it starts it); a start closer to the write is not taken
as proof, and the device stays unhealthy until the next one: reported too long rather than too
short.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..inventory.bluetooth import UINPUT, is_legacy_event
from ..inventory.model import Inventory, LeftOut
from ..sysfs.model import DevNode

# Seconds between the write of a spec's content and a container start recorded as having
# read it (startedAt is in whole seconds; the runtime reads the spec a moment before the start).
START_AFTER = 2.0
MAX_PODS = 256  # the API server's bound on a claim's status.reservedFor


def started_events(nodes: Mapping[str, Iterable[DevNode]]) -> dict[str, list[int]]:
    """The legacy event minors each Bluetooth device of a claim states (a device delivering
    ``/dev/uinput`` is the adapter's), for the container that starts with this spec."""
    out: dict[str, list[int]] = {}
    for name, delivered in nodes.items():
        delivered = list(delivered)
        if UINPUT not in delivered:
            continue
        minors = sorted(n.minor for n in delivered if is_legacy_event(n))
        if minors:
            out[name] = minors
    return out


def late_registrants(started: Mapping[str, Iterable[int]], inv: Inventory
                     ) -> dict[str, list[LeftOut]]:
    """Per Bluetooth device, the numbers its running container holds that the walk now leaves
    out because another device registered them, each naming its owner's device: the published
    device that delivers the number, else the name the owner's device has (a board device the
    machine keeps: ``platform-i8042``)."""
    by_name = {d.name: d for d in inv.devices}
    delivers: dict[int, str] = {}
    for d in inv.devices:
        for n in d.nodes:
            if is_legacy_event(n) and UINPUT not in d.nodes:  # not a radio's fixed range
                delivers.setdefault(n.minor, d.name)
    out: dict[str, list[LeftOut]] = {}
    for name, minors in sorted(started.items()):
        device = by_name.get(name)
        held = set(minors)
        late = [x._replace(device=delivers.get(x.node.minor, x.device))
                for x in (device.left_out if device else ()) if x.node.minor in held]
        if late:
            out[name] = late
    return out


def owner_name(x: LeftOut) -> str:
    """A late registrant's owner as the health stream, the log and ``explain`` name it: its
    device's name, then the bus and address (``usb-1-2-1-0 (usb 1-2:1.0)``)."""
    return f"{x.device} ({x.owner})" if x.device and x.device not in x.owner else x.owner


def late_json(x: LeftOut) -> dict[str, object]:
    """A late registrant in ``claims -o json`` and ``explain -o json``."""
    return {**x.to_json(), "ownerDevice": x.device or None,
            "why": f"{x.node.major}:{x.node.minor} is /dev/{x.host_name}, the node of "
                   f"{owner_name(x)}"}


def health_message(x: LeftOut) -> str:
    """The health stream's message for a device unhealthy because of ``x``."""
    return (f"late Bluetooth registrant: {x.node.major}:{x.node.minor} (/dev/{x.host_name}) is "
            f"now the node of {owner_name(x)}, registered after its container started")


def merge_started(old: Mapping[str, Iterable[int]], new: Mapping[str, Iterable[int]]
                  ) -> dict[str, list[int]]:
    """The numbers held once a container starts with ``new`` beside those running with ``old``
    (a claim prepared again, as the kubelet does at its restart, leaves running containers as
    they are)."""
    out = {n: set(old.get(n, ())) | set(new.get(n, ())) for n in {*old, *new}}
    return {n: sorted(v) for n, v in sorted(out.items()) if v}


def _get(obj: Any, *keys: str) -> Any:
    for k in keys:
        obj = obj.get(k) if isinstance(obj, dict) else None
    return obj


def _list(obj: Any) -> list[Any]:
    return obj if isinstance(obj, list) else []


def parse_time(text: Any) -> float | None:
    """An RFC 3339 time as the API writes it (``2026-12-04T01:02:03Z``), None when it is not."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, OverflowError):
        return None


def reserved_pods(claim: Any) -> list[tuple[str, str]] | None:
    """The (name, UID) of the pods the claim's ``status.reservedFor`` names; None when it names a
    consumer that is not a pod (whose containers the plugin cannot see) or cannot be read."""
    reserved = _get(claim, "status", "reservedFor")
    if reserved is None:
        return []
    if not isinstance(reserved, list) or len(reserved) > MAX_PODS:
        return None
    out = []
    for r in reserved:
        name, uid = _get(r, "name"), _get(r, "uid")
        if _get(r, "resource") != "pods" or (_get(r, "apiGroup") or "") != "" \
                or not isinstance(name, str) or not isinstance(uid, str):
            return None
        out.append((name, uid))
    return out


def claim_starts(pod: Any, claim_name: str) -> list[float] | None:
    """When each running container of ``pod`` that uses the ResourceClaim ``claim_name`` started
    (every running container when the pod does not say which use it); None when a running one's
    start cannot be read."""
    names = {_get(r, "name") for r in _list(_get(pod, "spec", "resourceClaims"))
             if _get(r, "resourceClaimName") == claim_name}
    names |= {_get(r, "name") for r in _list(_get(pod, "status", "resourceClaimStatuses"))
              if _get(r, "resourceClaimName") == claim_name}
    names.discard(None)
    containers = [*_list(_get(pod, "spec", "initContainers")),
                  *_list(_get(pod, "spec", "containers"))]
    users = {_get(c, "name") for c in containers
             if any(_get(r, "name") in names for r in _list(_get(c, "resources", "claims")))}
    starts: list[float] = []
    for st in [*_list(_get(pod, "status", "initContainerStatuses")),
               *_list(_get(pod, "status", "containerStatuses"))]:
        if users and _get(st, "name") not in users:
            continue
        running = _get(st, "state", "running")
        if running is None:
            continue  # waiting or terminated: it holds no node now, and starts with the spec
        started = parse_time(_get(running, "startedAt"))
        if started is None:
            return None
        starts.append(started)
    return starts


def restarted_since(starts: Iterable[float], written: float) -> bool:
    """Whether every running container started after the spec's content was written."""
    return all(s >= written + START_AFTER for s in starts)


def late_line(namespace: str, name: str, device: str, x: LeftOut) -> str:
    """The log line (and the ``claims`` row) for one late registrant."""
    return (f"claim {namespace}/{name}: Bluetooth device {device} is unhealthy: "
            f"{x.node.major}:{x.node.minor} (/dev/{x.host_name}) is now the node of "
            f"{owner_name(x)}, "
            "registered after its container started; the container can read it until it "
            "restarts with the current set")
