"""The seamless-upgrade mode from the command line (``plugin`` and ``run``): the pod UID that
names this instance's sockets, and whether this node's kubelet can run two instances at all
(docs/plugin.md, "Upgrades"). The options themselves are :func:`.cli.upgrade_args`.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from ..errors import InputError
from ..inventory.limits import DRIVER
from ..kube.kubelet import surge_supported
from .claimref import UidError, parse_uid

log = logging.getLogger(__name__)


def plain_unless_kubelet_surges(args: argparse.Namespace, node: str, client: Any) -> None:
    """Turn ``--seamless-upgrade`` off, saying so once, when the node's kubelet cannot run two
    instances of a plugin (older than 1.33, or its version unknown: kube/kubelet.py). A plain
    instance beside a surge peer is refused by the state lock and restarted by the kubelet,
    which asks again: no node is left without its plugin."""
    if not getattr(args, "seamless_upgrade", False) or client is None:
        return
    ok, why = surge_supported(client, node)
    if not ok:
        log.warning("%s: running as a plain single instance, not --seamless-upgrade (sockets "
                    "dra.sock and %s-reg.sock, the state locked for this instance alone; "
                    "docs/plugin.md, \"Upgrades\")", why, DRIVER)
        args.seamless_upgrade = False


def pod_uid_from_args(args: argparse.Namespace) -> str | None:
    """The pod UID that names this instance's sockets, or None outside --seamless-upgrade."""
    if not getattr(args, "seamless_upgrade", False):
        return None
    uid = args.pod_uid if args.pod_uid is not None else os.environ.get("POD_UID", "")
    if not uid:
        raise InputError("--seamless-upgrade needs the pod's UID: --pod-uid or $POD_UID (the "
                         "downward API's metadata.uid)")
    try:
        return parse_uid(uid, "pod UID")
    except UidError as e:
        raise InputError(str(e)) from None
