"""The media agent's Prometheus metrics (docs/media.md, "Metrics and health").

Named with their unit and with what they count: render nodes asked and how each query ended,
how long queries took, the devices published and the slice's writes, failed API requests, render
nodes that liken publishes and this pod lacks, the build, and the process's own CPU, memory and
descriptors. No ``_created`` series. Served by :mod:`..kube.endpoint`, as the node agent's are.
"""

from __future__ import annotations

import platform
import time

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .. import __version__

disable_created_metrics()

_QUERY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0)


class MediaMetrics:
    """The metrics, and the hooks the publisher (``kube.retry.ApiMetrics``) calls."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r, p = self.registry, "liken_media"
        ProcessCollector(registry=r)
        build = Gauge(f"{p}_build_info", "The running build (always 1)", ["version", "python"],
                      registry=r)
        build.labels(version=__version__, python=platform.python_version()).set(1)
        self.queries = Counter(f"{p}_render_node_queries", "Render nodes asked, by outcome "
                               "(ok, failed, or missing: not in this pod)", ["result"],
                               registry=r)
        self.query_seconds = Histogram(f"{p}_query_duration_seconds",
                                       "Time one render node's query took",
                                       buckets=_QUERY_BUCKETS, registry=r)
        self.missing = Gauge(f"{p}_missing_render_nodes",
                             "Render nodes liken publishes that this pod's claim lacks",
                             registry=r)
        self.devices = Gauge(f"{p}_published_devices", "Devices in the node's media slice",
                             registry=r)
        self.generation = Gauge(f"{p}_pool_generation",
                                "The pool generation of the last written slice", registry=r)
        self.last_publish = Gauge(f"{p}_last_publish_timestamp_seconds",
                                  "When the slice was last written (Unix time)", registry=r)
        self.publishes = Counter(f"{p}_slice_writes", "Writes of the node's media slice",
                                 registry=r)
        self.api_errors = Counter(f"{p}_api_errors", "Failed API requests, by object and "
                                  "HTTP status (connection: no answer)", ["op", "code"],
                                  registry=r)

    def set_missing(self, count: int) -> None:
        self.missing.set(count)

    def queried(self, result: str, seconds: float | None = None) -> None:
        self.queries.labels(result=result).inc()
        if seconds is not None:
            self.query_seconds.observe(seconds)

    # ---- kube.retry.ApiMetrics ---------------------------------------------------------------

    def api_error(self, op: str, code: int | None) -> None:
        self.api_errors.labels(op=op, code=str(code) if code is not None else "connection").inc()

    def published(self, devices: int, generation: int) -> None:
        self.publishes.inc()
        self.devices.set(devices)
        self.generation.set(generation)
        self.last_publish.set(time.time())

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
