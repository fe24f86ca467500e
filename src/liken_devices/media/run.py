"""``liken-media run``: the agent of the ``media-capabilities`` DaemonSet, assembled from its
command line and run until SIGTERM or SIGINT (rules: media.query-once). The command's options
are :mod:`.cli`'s, read once into :class:`.options.RunOptions`.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from ..cliargs import InputError
from ..inventory.limits import DRIVER as LIKEN_DRIVER
from ..inventory.limits import MEDIA_DRIVER
from ..kube import NoClusterConfig, ObjectWatch, Resources, SlicePublisher, make_client
from ..kube.endpoint import Endpoint, default_address
from ..kube.evict import PodEvictor
from .agent import MediaAgent
from .metrics import MediaMetrics
from .options import RunOptions

log = logging.getLogger("liken_devices.media")


def cmd_run(opts: RunOptions) -> int:
    return run_agent(opts)


def run_agent(opts: RunOptions, stop: threading.Event | None = None,
              ready: Callable[[MediaAgent], None] | None = None) -> int:
    """The DaemonSet's process: ``liken-media run --node NAME [--kubeconfig FILE]``; tests run
    it in a thread with their own ``stop`` and learn the agent through ``ready``."""
    node, sources = opts.node, opts.sources
    try:
        client = make_client(opts.kubeconfig)
    except NoClusterConfig as exc:
        log.error("liken-media run: %s (give --kubeconfig)", exc)
        return 2
    metrics = MediaMetrics()
    publisher = SlicePublisher(client, node, driver=MEDIA_DRIVER, metrics=metrics)
    evictor = None
    if opts.pod_name and opts.pod_namespace:
        evictor = PodEvictor(client, opts.pod_namespace, opts.pod_name)
    agent = MediaAgent(sources, publisher, opts.dev, opts.timeout, evictor=evictor,
                       metrics=metrics)
    endpoint = None
    if opts.metrics_port is not None:
        addr = opts.metrics_addr or default_address()
        try:
            endpoint = Endpoint(addr, opts.metrics_port, metrics.exposition,
                                health=agent.health, ready=agent.readiness)
        except InputError:
            client.close()
            raise
        log.info("metrics and probes on %s:%d (/metrics, /healthz, /readyz)", addr,
                 endpoint.port)
        agent.endpoint_port = endpoint.port
    stop = stop or threading.Event()
    watches = _watches(opts, agent)

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


def _watches(opts: RunOptions, agent: MediaAgent) -> list[ObjectWatch]:
    """liken's slice of this node (its render nodes) and the agent's own."""
    def factory() -> Any:
        return make_client(opts.kubeconfig)

    return [
        ObjectWatch(factory, Resources.slice(), {"spec.nodeName": opts.node,
                                                 "spec.driver": LIKEN_DRIVER},
                    agent.on_liken_slice, "liken-slice"),
        ObjectWatch(factory, Resources.slice(), {"spec.nodeName": opts.node,
                                                 "spec.driver": MEDIA_DRIVER},
                    agent.on_own_slice, "media-slice"),
    ]
