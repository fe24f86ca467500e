"""The seamless-upgrade mode from the command line (``plugin`` and ``run``): the pod UID that
names this instance's sockets, and whether this node's kubelet can run two instances at all
(docs/plugin.md, "Upgrades"). The options themselves are :func:`.cli.upgrade_args`, read once
into an :class:`.options.Upgrade`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..errors import InputError
from ..inventory.limits import DRIVER
from ..kube.kubelet import surge_supported
from .claimref import UidError, parse_uid
from .options import Upgrade

log = logging.getLogger(__name__)


def surge_or_plain(upgrade: Upgrade, node: str, client: Any) -> Upgrade:
    """``upgrade``, or a plain single instance, said once, when the node's kubelet cannot run
    two instances of a plugin (older than 1.33, or its version unknown: kube/kubelet.py). A
    plain instance beside a surge peer is refused by the state lock and restarted by the
    kubelet, which asks again: no node is left without its plugin."""
    if not upgrade.seamless or client is None:
        return upgrade
    ok, why = surge_supported(client, node)
    if ok:
        return upgrade
    log.warning("%s: running as a plain single instance, not --seamless-upgrade (sockets "
                "dra.sock and %s-reg.sock, the state locked for this instance alone; "
                "docs/plugin.md, \"Upgrades\")", why, DRIVER)
    return Upgrade.plain()


def pod_uid(given: str | None) -> str:
    """The pod UID that names this instance's sockets under --seamless-upgrade: ``--pod-uid``,
    else ``$POD_UID``; :class:`InputError` when neither is a UID."""
    uid = given if given is not None else os.environ.get("POD_UID", "")
    if not uid:
        raise InputError("--seamless-upgrade needs the pod's UID: --pod-uid or $POD_UID (the "
                         "downward API's metadata.uid)")
    try:
        return parse_uid(uid, "pod UID")
    except UidError as e:
        raise InputError(str(e)) from None
