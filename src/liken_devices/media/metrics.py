"""The media agent's Prometheus metrics (docs/media.md, "Metrics and health").

Named with their unit and with what they count: render nodes asked and how each query ended,
how long queries took, the devices published and the slice's writes, failed API requests, render
nodes that liken publishes and this pod lacks, the build, and the process's own CPU, memory and
descriptors. The registry, the build, the slice publisher's series and the exposition are
:mod:`..kube.metrics`'s, shared with the node agent; served by :mod:`..kube.endpoint`.
"""

from __future__ import annotations

from ..kube.metrics import SliceMetrics
from ..kube.prometheus import Counter, Gauge, Histogram, Registry

_QUERY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0)


class MediaMetrics(SliceMetrics):
    """The metrics, and the hooks the publisher (``kube.retry.ApiMetrics``) calls."""

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__(registry, "liken_media", "media slice")
        r, p = self.registry, "liken_media"
        self.queries = Counter(f"{p}_render_node_queries", "Render nodes asked, by outcome "
                               "(ok, failed, or missing: not in this pod)", ["result"],
                               registry=r)
        self.query_seconds = Histogram(f"{p}_query_duration_seconds",
                                       "Time one render node's query took",
                                       buckets=_QUERY_BUCKETS, registry=r)
        self.missing = Gauge(f"{p}_missing_render_nodes",
                             "Render nodes liken publishes that this pod's claim lacks",
                             registry=r)

    def set_missing(self, count: int) -> None:
        self.missing.set(count)

    def queried(self, result: str, seconds: float | None = None) -> None:
        self.queries.labels(result=result).inc()
        if seconds is not None:
            self.query_seconds.observe(seconds)
