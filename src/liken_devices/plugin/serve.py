"""``liken-devices plugin``: the kubelet plugin on its own, until SIGTERM or SIGINT.

It walks once at start, on SIGHUP and after an unprepare ended a claim, reconciles the prepared
claims' specs after each walk, and serves the kubelet (docs/plugin.md, "Command line"). The
command's options are :mod:`.cli`'s.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from .. import heap, signals
from ..cliargs import node_from_args, sources_from_args
from ..kube.client import make_client
from ..terminal import clean
from .core import Plugin, PluginConfig
from .upgrade import plain_unless_kubelet_surges, pod_uid_from_args

log = logging.getLogger(__name__)


def run_plugin(args: argparse.Namespace) -> int:
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
