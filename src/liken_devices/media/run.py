"""``liken-media run``: the agent of the ``media-capabilities`` DaemonSet, assembled from its
command line and run until SIGTERM or SIGINT (rules: media.query-once). The command's options
are :mod:`.cli`'s.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from ..cliargs import InputError, node_from_args, sources_from_args
from ..inventory.limits import DRIVER as LIKEN_DRIVER
from ..inventory.limits import MEDIA_DRIVER
from ..kube import NoClusterConfig, ObjectWatch, Resources, SlicePublisher, make_client
from ..kube.endpoint import Endpoint, default_address
from ..kube.evict import PodEvictor
from .agent import MediaAgent
from .metrics import MediaMetrics

log = logging.getLogger("liken_devices.media")


def cmd_run(args: argparse.Namespace) -> int:
    return run_agent(args)


def run_agent(args: argparse.Namespace, stop: threading.Event | None = None,
              ready: Callable[[MediaAgent], None] | None = None) -> int:
    """The DaemonSet's process: ``liken-media run --node NAME [--kubeconfig FILE]``; tests run
    it in a thread with their own ``stop`` and learn the agent through ``ready``."""
    node = node_from_args(args, MEDIA_DRIVER)
    sources = sources_from_args(args)
    sources.check()
    try:
        client = make_client(args.kubeconfig)
    except NoClusterConfig as exc:
        log.error("liken-media run: %s (give --kubeconfig)", exc)
        return 2
    metrics = MediaMetrics()
    publisher = SlicePublisher(client, node, driver=MEDIA_DRIVER, metrics=metrics)
    evictor = None
    if args.pod_name and args.pod_namespace:
        evictor = PodEvictor(client, args.pod_namespace, args.pod_name)
    agent = MediaAgent(sources, publisher, args.dev, args.timeout, evictor=evictor,
                       metrics=metrics)
    endpoint = None
    if args.metrics_port is not None:
        addr = args.metrics_addr or default_address()
        try:
            endpoint = Endpoint(addr, args.metrics_port, metrics.exposition,
                                health=agent.health, ready=agent.readiness)
        except InputError:
            client.close()
            raise
        log.info("metrics and probes on %s:%d (/metrics, /healthz, /readyz)", addr,
                 endpoint.port)
        agent.endpoint_port = endpoint.port
    stop = stop or threading.Event()

    def factory() -> Any:
        return make_client(args.kubeconfig)

    watches = [
        ObjectWatch(factory, Resources.slice(), {"spec.nodeName": node,
                                                 "spec.driver": LIKEN_DRIVER},
                    agent.on_liken_slice, "liken-slice"),
        ObjectWatch(factory, Resources.slice(), {"spec.nodeName": node,
                                                 "spec.driver": MEDIA_DRIVER},
                    agent.on_own_slice, "media-slice"),
    ]

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("liken-media: signal %d, stopping", signum)
        stop.set()
        agent.wake()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    if ready is not None:
        ready(agent)
    try:
        agent.run(stop, watches)
    finally:
        if endpoint is not None:
            endpoint.stop()
        client.close()
    return 0
