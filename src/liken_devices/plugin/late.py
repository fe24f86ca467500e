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

The container's start is seen on the node as the runtime's read of the claim's CDI spec: a spec
read at least :data:`READ_AFTER` seconds after it was written (its access time; the plugin's own
reads do not move it) was read for a container started with that content. A runtime that reads
every spec the moment it changes (a cache refreshed on write) reads within that second, and a
later start is then not seen: the device stays unhealthy until the claim ends or the number's
owner leaves — reported too long rather than hidden.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..inventory.bluetooth import LEGACY_EVENT_COUNT, LEGACY_EVENT_FIRST, UINPUT, is_legacy_event
from ..inventory.model import Inventory, LeftOut
from ..sysfs.model import DevNode

READ_AFTER = 1.0  # seconds between a spec's write and a read that is a container's start


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


def valid_minor(minor: int) -> bool:
    return LEGACY_EVENT_FIRST <= minor < LEGACY_EVENT_FIRST + LEGACY_EVENT_COUNT


def late_registrants(started: Mapping[str, Iterable[int]], inv: Inventory
                     ) -> dict[str, list[LeftOut]]:
    """Per Bluetooth device, the numbers its running container holds that the walk now leaves
    out because another device registered them."""
    by_name = {d.name: d for d in inv.devices}
    out: dict[str, list[LeftOut]] = {}
    for name, minors in sorted(started.items()):
        device = by_name.get(name)
        held = set(minors)
        late = [x for x in (device.left_out if device else ()) if x.node.minor in held]
        if late:
            out[name] = late
    return out


def read_since_written(path: Path) -> bool:
    """Whether the runtime read the spec at ``path`` for a container started after its write."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_atime_ns > st.st_mtime_ns + int(READ_AFTER * 1e9)


def late_line(namespace: str, name: str, device: str, x: LeftOut) -> str:
    """The log line (and the ``claims`` row) for one late registrant."""
    return (f"claim {namespace}/{name}: Bluetooth device {device} is unhealthy: "
            f"{x.node.major}:{x.node.minor} (/dev/{x.host_name}) is now the node of {x.owner}, "
            "registered after its container started; the container can read it until it "
            "restarts with the current set")
