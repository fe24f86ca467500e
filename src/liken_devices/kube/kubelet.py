"""Which kubelet runs beside the agent, read from the agent's own Node.

A seamless (surge) upgrade runs the old and the new plugin side by side, each registered under a
socket named after its pod's UID. Only a kubelet of 1.33 or later keeps both registrations and
the driver's when one of them goes (the kubelet plugin helper's ``RollingUpdate``, which
"requires kubelet >= 1.33"); an older kubelet de-registers the driver when the old pod's socket
goes, so after the rollout the node has no DRA plugin. Version skew lets a 1.34 control plane
run with 1.31 and 1.32 kubelets, so the agent asks: the Node's ``status.nodeInfo.kubeletVersion``
(the agent may ``get`` its Node, deploy/liken-devices/rbac.yaml).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from .client import Resources, as_dict, describe

log = logging.getLogger(__name__)

SURGE_MINIMUM = (1, 33)  # the first kubelet that keeps two instances of a plugin registered

_VERSION = re.compile(r"v?([0-9]{1,4})\.([0-9]{1,4})(?:[.+-].{0,120})?")


def parse_version(text: object) -> tuple[int, int] | None:
    """``(major, minor)`` of a kubelet version such as ``v1.33.2`` or ``v1.34.0-rc.1+abc``;
    None when it is not one."""
    if not isinstance(text, str):
        return None
    m = _VERSION.fullmatch(text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def kubelet_version(client: Any, node: str) -> tuple[str, tuple[int, int] | None]:
    """The version string the Node reports (``""`` when none) and its ``(major, minor)``.
    API errors propagate."""
    obj = as_dict(client.get(Resources.node(), node))
    info = (obj.get("status") or {}).get("nodeInfo") or {}
    raw = info.get("kubeletVersion") if isinstance(info, dict) else None
    text = raw if isinstance(raw, str) else ""
    return text[:64], parse_version(text)


def surge_supported(client: Any, node: str) -> tuple[bool, str]:
    """Whether this node's kubelet supports surge upgrades, and one line saying why not."""
    try:
        text, version = kubelet_version(client, node)
    except Exception as exc:
        return False, (f"the kubelet's version cannot be read from Node {node} "
                       f"({describe(exc)})")
    if version is None:
        return False, f"Node {node} reports no kubelet version this agent can read ({text!r})"
    if version < SURGE_MINIMUM:
        return False, (f"the kubelet of node {node} is {text}, older than "
                       f"{SURGE_MINIMUM[0]}.{SURGE_MINIMUM[1]}, which surge upgrades need")
    return True, ""
