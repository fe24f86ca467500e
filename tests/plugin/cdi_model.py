"""A second, deliberately plain reading of a claim's CDI spec on disk, for the fuzz suites.

It states the rules of docs/plugin.md, "Bad input" directly and never calls the plugin's reader
(``liken_devices.plugin.cdi.read_claim_spec``) or its helpers: a regular file of at most 4 MiB,
UTF-8 JSON, an object of kind ``liken.sh/device`` with a non-empty list of devices; each device
named ``<claim UID>-<DNS label>`` with a non-empty ``containerEdits.deviceNodes`` list; each
node either present (``/dev/<name>``, type ``c`` or ``b``, integer numbers in 0..2^32-1) or
absent (``/dev/.liken.sh-absent/<device>/<name>``), all of a device's nodes alike; every name
a relative path of the characters kernel device names use, without empty, ``.`` or ``..``
components, not in the absent root. The answer is the claim's devices (name, present) or None
when refused.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

ABSENT = "/dev/.liken.sh-absent/"
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:+@=,-")
DNS_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def node_name_ok(name: str) -> bool:
    if not 0 < len(name) <= 255:
        return False
    parts = name.split("/")
    if parts[0] == ".liken.sh-absent":  # the absent root holds no node
        return False
    return len(parts) <= 16 and all(
        p not in ("", ".", "..") and len(p) <= 255 and set(p) <= NAME_CHARS for p in parts)


def dns_label_ok(name: str) -> bool:
    return 0 < len(name) <= 63 and set(name) <= DNS_CHARS and name[0] != "-" and name[-1] != "-"


def read_spec(path: Path, uid: str) -> list[tuple[str, bool]] | None:
    """The devices the spec at ``path`` names, or None when the plugin must not trust it."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > 4 << 20:
        return None
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return read_doc(doc, uid)


def read_doc(doc: Any, uid: str) -> list[tuple[str, bool]] | None:
    if type(doc) is not dict or doc.get("kind") != "liken.sh/device":
        return None
    devices = doc.get("devices")
    if type(devices) is not list or not devices:
        return None
    out = []
    for d in devices:
        if type(d) is not dict or type(d.get("name")) is not str:
            return None
        name = d["name"]
        if not name.startswith(uid + "-") or not dns_label_ok(name[len(uid) + 1:]):
            return None
        device = name[len(uid) + 1:]
        edits = d.get("containerEdits")
        nodes = edits.get("deviceNodes") if type(edits) is dict else None
        if type(nodes) is not list or not nodes:
            return None
        states = set()
        for n in nodes:
            state = node_state(n, device)
            if state is None:
                return None
            states.add(state)
        if len(states) != 1:
            return None
        out.append((device, states.pop()))
    return out


def node_state(n: Any, device: str) -> bool | None:
    """True for a present node, False for an absent one, None for one to refuse."""
    if type(n) is not dict or type(n.get("path")) is not str:
        return None
    path = n["path"]
    if path.startswith(ABSENT + device + "/"):
        return False if node_name_ok(path[len(ABSENT + device + "/"):]) else None
    if not path.startswith("/dev/") or not node_name_ok(path[len("/dev/"):]):
        return None
    if n.get("type") not in ("c", "b"):
        return None
    for v in (n.get("major"), n.get("minor")):
        if type(v) is not int or not 0 <= v <= 0xFFFFFFFF:
            return None
    return True
