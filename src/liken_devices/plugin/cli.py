"""``liken-devices plugin`` and ``liken-devices claims``: the kubelet plugin from the command line.

``plugin`` runs the plugin on its own (docs/plugin.md, "Command line"): it walks once at start,
on SIGHUP and after an unprepare ended a claim, reconciles the prepared claims' specs after each
walk, and serves until SIGTERM or SIGINT. The node agent (``liken-devices run``) embeds the same
:class:`~.core.Plugin` and walks on uevents instead. ``claims`` lists the prepared claims from the
state file with the nodes each delivers now, walking with those claims as the plugin does; it
only reads, so it works beside a running plugin, and a state it cannot read is one line and exit
2. ``--seamless-upgrade`` (``plugin`` and ``run``) is the mode in which two instances serve the
node during a surge upgrade (docs/plugin.md, "Upgrades").
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from .. import heap, signals
from ..errors import InputError
from ..inventory.limits import DRIVER
from ..terminal import clean, clean_row
from .claimref import UidError, parse_uid
from .paths import DEFAULT_CDI_DIR, DEFAULT_PLUGIN_DIR, DEFAULT_REGISTRY_DIR, DEFAULT_STATE_DIR

log = logging.getLogger(__name__)


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "plugin", parents=[common_parent],
        help="serve the kubelet DRA plugin (walk at start and on SIGHUP, stop on SIGTERM)")
    p.add_argument("--kubeconfig", type=Path, default=None,
                   help="kubeconfig for reading ResourceClaims (default: in-cluster, then "
                        "$KUBECONFIG)")
    p.add_argument("--api-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="timeout of one API request (default 10)")
    _dirs(p)
    p.add_argument("--plugin-dir", type=Path, default=DEFAULT_PLUGIN_DIR,
                   help=f"directory of dra.sock (default {DEFAULT_PLUGIN_DIR})")
    p.add_argument("--registry-dir", type=Path, default=DEFAULT_REGISTRY_DIR,
                   help=f"kubelet plugin registry (default {DEFAULT_REGISTRY_DIR})")
    upgrade_args(p)
    p.set_defaults(func=run_plugin)

    c = subparsers.add_parser(
        "claims", parents=[common_parent],
        help="list the prepared claims and the nodes each delivers now")
    _dirs(c)
    c.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    c.set_defaults(func=run_claims)


def _dirs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cdi-dir", type=Path, default=DEFAULT_CDI_DIR,
                   help=f"where claim CDI specs are written (default {DEFAULT_CDI_DIR})")
    p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                   help=f"persistent plugin state (default {DEFAULT_STATE_DIR})")


def upgrade_args(p: Any) -> None:
    """The seamless-upgrade options, shared by ``plugin`` and ``run``."""
    p.add_argument("--seamless-upgrade", action="store_true",
                   help="run beside the other instance of a surge upgrade: sockets named after "
                        "the pod's UID, the state locked per write (docs/plugin.md, "
                        "\"Upgrades\"); only where the node's kubelet is 1.33 or later, else "
                        "the agent runs as a plain single instance and says so")
    p.add_argument("--pod-uid", default=None, metavar="UID",
                   help="the pod's UID for --seamless-upgrade (default $POD_UID, from the "
                        "downward API's metadata.uid)")


def plain_unless_kubelet_surges(args: argparse.Namespace, node: str, client: Any) -> None:
    """Turn ``--seamless-upgrade`` off, saying so once, when the node's kubelet cannot run two
    instances of a plugin (older than 1.33, or its version unknown: kube/kubelet.py). A plain
    instance beside a surge peer is refused by the state lock and restarted by the kubelet,
    which asks again: no node is left without its plugin."""
    if not getattr(args, "seamless_upgrade", False) or client is None:
        return
    # lazy: loaded when this sub-command runs; the other commands start without it
    from ..kube.kubelet import surge_supported

    ok, why = surge_supported(client, node)
    if not ok:
        log.warning("%s: running as a plain single instance, not --seamless-upgrade (sockets "
                    "dra.sock and %s-reg.sock, the state locked for this instance alone; "
                    "docs/guide.md, \"Upgrades\")", why, DRIVER)
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


def run_plugin(args: argparse.Namespace) -> int:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from ..cliargs import node_from_args, sources_from_args
    from ..kube.client import make_client
    from .core import Plugin, PluginConfig

    sources = sources_from_args(args)
    sources.check()  # a missing --sysfs/--recording is the operator's error: exit 2
    node = node_from_args(args)
    pod_uid_from_args(args)  # a bad --pod-uid is the operator's error before anything else
    try:
        client = make_client(args.kubeconfig, timeout=args.api_timeout)
    except Exception as e:
        print(f"liken-devices plugin: no API access: {clean(e)}", file=sys.stderr)
        return 2
    plain_unless_kubelet_surges(args, node, client)
    pod_uid = pod_uid_from_args(args)
    config = PluginConfig(node=node, cdi_dir=args.cdi_dir, state_dir=args.state_dir,
                          plugin_dir=args.plugin_dir, registry_dir=args.registry_dir,
                          sysfs=None if args.recording else sources.sysfs, pod_uid=pod_uid)
    stop = threading.Event()
    rewalk = threading.Event()
    plugin = Plugin(config, walk=sources.walk, kube_client=client, on_release=rewalk.set)

    def on_term(signum: int, frame: object) -> None:
        stop.set()
        rewalk.set()

    def on_hup(signum: int, frame: object) -> None:
        rewalk.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_hup)
    plugin.start()
    heap.settle()
    try:
        rewalk.set()
        while not stop.is_set():
            signals.wait(rewalk)
            rewalk.clear()
            if stop.is_set():
                break
            try:
                plugin.reconcile(sources.walk(claimed=plugin.claimed()))
            except Exception:
                log.exception("walk or reconcile failed")
    finally:
        plugin.stop()
    return 0


def claims_view(plugin_state_dir: Path, inv: Any | None) -> list[dict[str, Any]]:
    """The prepared claims with the nodes each device delivers now (None: absent)."""
    # lazy: loaded when this sub-command runs; the other commands start without it
    from .late import late_registrants
    from .state import read_state

    claims = read_state(plugin_state_dir)  # reads only: beside a running plugin too
    out = []
    for uid, c in sorted(claims.items()):
        devices = []
        published = inv.by_name() if inv is not None else {}
        late = late_registrants(c.started, inv) if inv is not None else {}
        for n in c.device_names():
            now = inv.lookup(n) if inv is not None else None
            requests = sorted({r for d in c.devices if d.name == n for r in d.requests})
            device = published.get(n)
            devices.append({
                "name": n,
                "requests": requests,
                "present": bool(now),
                "nodes": [x.to_json() for x in now] if now else None,
                "lastNodes": [x.to_json() for x in c.nodes.get(n, [])],
                # rules: bluetooth.event-numbers-exclusive
                "leftOut": [x.to_json() for x in device.left_out] if device else [],
                # rules: bluetooth.late-registrant. Numbers its running container holds that
                # another device registered after it started.
                "lateRegistrants": [x.to_json() for x in late.get(n, [])],
                "healthy": bool(now) and not late.get(n),
            })
        out.append({"uid": uid, "namespace": c.namespace, "name": c.name, "pool": c.pool,
                    "devices": devices, "usbInterfaces": c.usb_interfaces,
                    "rebuilt": c.rebuilt})
    return out


def run_claims(args: argparse.Namespace) -> int:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from ..cliargs import sources_from_args
    from .state import StateError, claimed_in

    try:
        # The walk knows the prepared claims, as the plugin's does (docs/plugin.md).
        inv = sources_from_args(args).walk(claimed=claimed_in(args.state_dir))
        view = claims_view(args.state_dir, inv)
    except StateError as e:
        print(f"liken-devices claims: {e} (a plugin rebuilds it from the CDI specs at its "
              "next start)", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"liken-devices claims: {clean(e)}", file=sys.stderr)
        return 2
    if args.output in ("json", "yaml"):
        # lazy: loaded when this sub-command runs; the other commands start without it
        from ..cliargs import dump

        sys.stdout.write(dump(view, args.output))
        return 0
    rows: list[tuple[str, ...]] = [("CLAIM", "UID", "DEVICE", "NODES")]
    for c in view:
        for d in c["devices"]:
            nodes = (" ".join(f"{x['path']}({x['type']}{x['major']}:{x['minor']})"
                              for x in d["nodes"]) if d["nodes"] else "absent")
            # A claim rebuilt from its CDI spec has no name until the kubelet prepares it again.
            claim = "(rebuilt)" if c["rebuilt"] else f"{c['namespace']}/{c['name']}"
            rows.append(clean_row((claim, c["uid"], d["name"], nodes)))
            late = {x["minor"] for x in d["lateRegistrants"]}
            rows.extend(clean_row(("", "", "", f"left out: {x['why']}")) for x in d["leftOut"]
                        if x["minor"] not in late)
            rows.extend(clean_row(("", "", "", f"UNHEALTHY, late registrant: {x['why']}, "
                                   "registered after the container started (it can read it "
                                   "until it restarts)"))
                        for x in d["lateRegistrants"])
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
    if len(rows) == 1:
        print("(no prepared claims)")
    return 0
