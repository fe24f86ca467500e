"""The plugin's memory of prepared claims, kept on disk so a restart forgets nothing.

The plugin, the kubelet or the machine may restart at any point (issue 3, "State across
restarts"), and the kubelet may call Unprepare long after Prepare, when the ResourceClaim is
already deleted (dra-api.md §5.3: only namespace/name/uid are given). So everything Unprepare and
the reconcile pass need is here: per claim UID its namespace/name, the devices with their request
names, the nodes each delivered last (so an absent device still gets one nonexistent path per
node), and the USB interfaces to give back to the kernel. The CDI directory is a tmpfs on a real
node, so the state lives elsewhere (default ``/var/lib/liken-devices/plugin``), written
atomically like the specs. A state file that cannot be parsed is kept aside, not overwritten.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sysfs.model import DevNode
from .cdi import write_atomic

log = logging.getLogger(__name__)

STATE_FILE = "claims.json"
VERSION = 1


@dataclass(slots=True)
class PreparedDevice:
    """One allocated device of a prepared claim."""

    name: str
    requests: list[str]  # base request names (dra-api.md §5.3)
    share_id: str | None = None


@dataclass(slots=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    pool: str
    devices: list[PreparedDevice]
    # device name -> the nodes it delivered when last present (stays when it goes away)
    nodes: dict[str, list[DevNode]] = field(default_factory=dict)
    # device name -> present at the last prepare/reconcile
    present: dict[str, bool] = field(default_factory=dict)
    usb_interfaces: list[str] = field(default_factory=list)  # "1-2:1.0", ...
    prepared_at: float = field(default_factory=time.time)

    def device_names(self) -> list[str]:
        return sorted({d.name for d in self.devices})

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "pool": self.pool,
            "devices": [
                {"name": d.name, "requests": d.requests}
                | ({"shareID": d.share_id} if d.share_id else {})
                for d in self.devices
            ],
            "nodes": {k: [[n.name, n.type, n.major, n.minor] for n in v]
                      for k, v in sorted(self.nodes.items())},
            "present": dict(sorted(self.present.items())),
            "usbInterfaces": self.usb_interfaces,
            "preparedAt": self.prepared_at,
        }

    @classmethod
    def from_json(cls, uid: str, obj: dict[str, Any]) -> PreparedClaim:
        nodes: dict[str, list[DevNode]] = {}
        for dev, lst in obj.get("nodes", {}).items():
            out = []
            for name, typ, major, minor in lst:
                if typ not in ("c", "b"):
                    raise ValueError(f"node type {typ!r}")
                out.append(DevNode(str(name), typ, int(major), int(minor)))
            nodes[str(dev)] = out
        return cls(
            uid=uid,
            namespace=str(obj["namespace"]),
            name=str(obj["name"]),
            pool=str(obj.get("pool", "")),
            devices=[PreparedDevice(str(d["name"]), [str(r) for r in d.get("requests", [])],
                                    d.get("shareID")) for d in obj.get("devices", [])],
            nodes=nodes,
            present={str(k): bool(v) for k, v in obj.get("present", {}).items()},
            usb_interfaces=[str(i) for i in obj.get("usbInterfaces", [])],
            prepared_at=float(obj.get("preparedAt", 0.0)),
        )


class StateStore:
    """Claim UID -> :class:`PreparedClaim`, mirrored to ``<dir>/claims.json`` on every change."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE
        self.claims: dict[str, PreparedClaim] = {}

    def load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self.claims = {}
            return
        try:
            obj = json.loads(raw)
            if obj.get("version") != VERSION:
                raise ValueError(f"state version {obj.get('version')!r}, want {VERSION}")
            self.claims = {str(uid): PreparedClaim.from_json(str(uid), c)
                           for uid, c in obj["claims"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # Keep the bad file for a human; start empty rather than refuse to run.
            aside = self.path.with_name(f"{STATE_FILE}.bad-{int(time.time())}")
            os.replace(self.path, aside)
            log.error("plugin state %s is unreadable (%s); moved to %s", self.path, e, aside)
            self.claims = {}

    def save(self) -> None:
        obj = {"version": VERSION,
               "claims": {uid: c.to_json() for uid, c in sorted(self.claims.items())}}
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(self.path, (json.dumps(obj, indent=1) + "\n").encode(), mode=0o600)


def read_state(directory: Path) -> dict[str, PreparedClaim]:
    """The prepared claims as a running plugin last saved them (for ``liken-devices claims``)."""
    path = directory / STATE_FILE
    obj = json.loads(path.read_bytes())
    if obj.get("version") != VERSION:
        raise ValueError(f"{path}: state version {obj.get('version')!r}, want {VERSION}")
    return {str(u): PreparedClaim.from_json(str(u), c) for u, c in obj["claims"].items()}
