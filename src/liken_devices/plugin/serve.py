"""``liken-devices plugin``: the kubelet plugin on its own, until SIGTERM or SIGINT.

It walks once at start, on SIGHUP and after an unprepare ended a claim, reconciles the prepared
claims' specs after each walk, and serves the kubelet (docs/plugin.md, "Command line"). The
command's options are :mod:`.cli`'s, read once into :class:`.options.PluginOptions`.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

from .. import heap, signals
from ..kube.client import make_client
from ..terminal import clean
from .core import Plugin, PluginConfig
from .options import PluginOptions
from .upgrade import surge_or_plain

log = logging.getLogger(__name__)


def run_plugin(opts: PluginOptions) -> int:
    sources = opts.sources
    try:
        client = make_client(opts.kubeconfig, timeout=opts.api_timeout)
    except Exception as e:
        print(f"liken-devices plugin: no API access: {clean(e)}", file=sys.stderr)
        return 2
    upgrade = surge_or_plain(opts.upgrade, opts.node, client)
    dirs = opts.dirs
    config = PluginConfig(node=opts.node, cdi_dir=dirs.cdi_dir, state_dir=dirs.state_dir,
                          plugin_dir=dirs.plugin_dir, registry_dir=dirs.registry_dir,
                          sysfs=None if sources.recording else sources.sysfs,
                          pod_uid=upgrade.pod_uid)
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
