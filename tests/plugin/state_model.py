"""A second, deliberately plain reading of the plugin's state file, for the fuzz suites.

It states docs/plugin.md's rules for ``claims.json`` directly and never calls the plugin's
parser (``liken_devices.plugin.state.parse_state``) or its helpers: UTF-8 JSON, an object with
``version`` 1 and an object ``claims`` of claim UID to claim. A claim UID is letters, digits and
``-`` (2 to 64, starting and ending with a letter or digit). A claim is an object with
``namespace`` and ``name`` (and optionally ``pool``): printable strings of at most 253
characters; ``devices``: objects with a DNS-label ``name``, a list of such strings as
``requests`` and maybe such a string as ``shareID``; ``nodes``: DNS label to a list of
``[name, "c"|"b", major, minor]`` with a name under /dev and 32-bit numbers; ``present``: DNS
label to a boolean; ``usbInterfaces``: USB interface names (``1-2.3:1.0``); ``preparedAt``: a
finite number; ``rebuilt``: a boolean. Absent lists and objects are empty. The answer is the
set of claim UIDs, or None when the file must be refused.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .cdi_model import dns_label_ok, node_name_ok

UID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def uid_ok(uid: str) -> bool:
    return 2 <= len(uid) <= 64 and set(uid) <= UID_CHARS and "-" not in (uid[0], uid[-1])


def text_ok(v: Any) -> bool:
    return type(v) is str and len(v) <= 253 and v.isprintable()


def number_ok(v: Any) -> bool:
    return type(v) is int and 0 <= v <= 0xFFFFFFFF


def usb_interface_ok(v: str) -> bool:
    """``<bus>-<port>[.<port>...]:<config>.<interface>``, each a number of 1 to 3 digits."""
    device, colon, iface = v.partition(":")
    if not colon:
        return False
    bus, dash, ports = device.partition("-")
    numbers = [bus, *ports.split("."), *iface.split(".")]
    return (bool(dash) and len(ports.split(".")) <= 7 and len(iface.split(".")) == 2
            and all(1 <= len(n) <= 3 and n.isascii() and n.isdigit() for n in numbers))


def read_state(raw: bytes) -> set[str] | None:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    # The version is the integer 1: JSON's true and 1.0 are other values.
    if type(doc) is not dict or type(doc.get("version")) is not int or doc.get("version") != 1 \
            or type(doc.get("claims")) is not dict:
        return None
    for uid, claim in doc["claims"].items():
        if not uid_ok(uid) or not claim_ok(claim):
            return None
    return set(doc["claims"])


def claim_ok(c: Any) -> bool:
    if type(c) is not dict:
        return False
    if not (text_ok(c.get("namespace")) and text_ok(c.get("name"))
            and text_ok(c.get("pool", ""))):
        return False
    devices = c.get("devices", [])
    if type(devices) is not list:
        return False
    for d in devices:
        if type(d) is not dict or not text_ok(d.get("name")) or not dns_label_ok(d["name"]):
            return False
        requests = d.get("requests", [])
        if type(requests) is not list or not all(text_ok(r) for r in requests):
            return False
        if d.get("shareID") is not None and not text_ok(d["shareID"]):
            return False
    nodes = c.get("nodes", {})
    if type(nodes) is not dict:
        return False
    for device, lst in nodes.items():
        if type(lst) is not list:
            return False
        for n in lst:
            if type(n) is not list or len(n) != 4:
                return False
            name, typ, major, minor = n
            if typ not in ("c", "b") or not text_ok(name) or not node_name_ok(name):
                return False
            if not (number_ok(major) and number_ok(minor)):
                return False
        if not dns_label_ok(device):
            return False
    present = c.get("present", {})
    if type(present) is not dict or not all(
            dns_label_ok(k) and type(v) is bool for k, v in present.items()):
        return False
    interfaces = c.get("usbInterfaces", [])
    if type(interfaces) is not list or not all(
            text_ok(i) and usb_interface_ok(i) for i in interfaces):
        return False
    at = c.get("preparedAt", 0.0)
    if type(at) not in (int, float) or not math.isfinite(at):
        return False
    return type(c.get("rebuilt", False)) is bool
