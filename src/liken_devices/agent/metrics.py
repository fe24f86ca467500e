"""The agent's Prometheus metrics (docs/agent.md, "Metrics and health").

What the node's device layer does, named with its unit and with what it counts: devices
published, slice writes, walks and their duration, uevents seen and ignored, failed API
requests, claims prepared and unprepared (claims, not calls: one kubelet request carries
several) and how long the kubelet's requests took, whether the kubelet registered the plugin,
the build, and the process's own CPU, memory and descriptors. The registry, the build, the
slice publisher's series and the exposition are :mod:`..kube.metrics`'s, shared with the media
agent; the HTTP side is :mod:`..kube.endpoint`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ..kube.endpoint import Check, Endpoint
from ..kube.metrics import SliceMetrics
from ..kube.prometheus import Counter, Gauge, Histogram, Registry

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class AgentMetrics(SliceMetrics):
    """The metrics, and the hooks the kube side (``ApiMetrics``) and the plugin
    (``plugin.core.PluginMetrics``) call."""

    def __init__(self, registry: Registry | None = None,
                 prefix: str = "liken_devices") -> None:
        super().__init__(registry, prefix, "ResourceSlice")
        r, p = self.registry, prefix
        self.overflow = Gauge(f"{p}_overflow_devices",
                              "Devices left out past the slice's device cap", registry=r)
        self.walks = Counter(f"{p}_walks", "Walks of sysfs, by what caused them", ["reason"],
                             registry=r)
        self.walk_seconds = Histogram(f"{p}_walk_duration_seconds",
                                      "Time to walk sysfs and decide the inventory",
                                      buckets=_DURATION_BUCKETS, registry=r)
        self.walk_errors = Counter(f"{p}_walk_errors", "Walks that failed", registry=r)
        self.uevents = Counter(f"{p}_uevents", "Kernel uevents received", registry=r)
        self.uevents_ignored = Counter(
            f"{p}_uevents_ignored", "Uevents that wake no walk", registry=r)
        self.claims_prepared = Counter(f"{p}_claims_prepared",
                                       "Claims the kubelet asked to prepare, by outcome",
                                       ["result"], registry=r)
        self.claims_unprepared = Counter(f"{p}_claims_unprepared",
                                         "Claims the kubelet asked to unprepare, by outcome",
                                         ["result"], registry=r)
        self.prepare_seconds = Histogram(f"{p}_prepare_request_duration_seconds",
                                         "Duration of the kubelet's NodePrepareResources "
                                         "requests", buckets=_DURATION_BUCKETS, registry=r)
        self.unprepare_seconds = Histogram(f"{p}_unprepare_request_duration_seconds",
                                           "Duration of the kubelet's NodeUnprepareResources "
                                           "requests", buckets=_DURATION_BUCKETS, registry=r)
        self.registered = Gauge(f"{p}_registered",
                                "1 when the kubelet registered the plugin, else 0", registry=r)
        self.late = Gauge(f"{p}_bluetooth_late_registrants",
                          "Event numbers running Bluetooth containers hold that another device "
                          "registered after they started", registry=r)

    # ---- plugin.core.PluginMetrics -----------------------------------------------------------

    def prepared(self, errors: Mapping[str, str], seconds: float) -> None:
        """One NodePrepareResources request: claim UID -> error ("" = prepared)."""
        self._claims(self.claims_prepared, errors)
        self.prepare_seconds.observe(seconds)

    def unprepared(self, errors: Mapping[str, str], seconds: float) -> None:
        self._claims(self.claims_unprepared, errors)
        self.unprepare_seconds.observe(seconds)

    def late_registrants(self, count: int) -> None:
        self.late.set(count)

    @staticmethod
    def _claims(counter: Counter, errors: Mapping[str, str]) -> None:
        failed = sum(1 for e in errors.values() if e)
        if failed:
            counter.labels(result="error").inc(failed)
        if len(errors) - failed:
            counter.labels(result="ok").inc(len(errors) - failed)

    def track_registration(self, registered: Callable[[], bool]) -> None:
        """``registered`` is read at every scrape."""
        self.registered.set_function(lambda: 1.0 if registered() else 0.0)

    # ---- the endpoint ------------------------------------------------------------------------

    def serve(self, port: int, addr: str = "127.0.0.1", health: Check | None = None,
              ready: Check | None = None, reuse_port: bool = False,
              probe_socket: Path | None = None) -> Endpoint:
        """Serve /metrics, /healthz and /readyz on ``addr:port`` (0: any free port), and on
        ``probe_socket`` too when given; ``kube.endpoint.EndpointError`` when it cannot
        listen."""
        return Endpoint(addr, port, self.exposition, health=health, ready=ready,
                        reuse_port=reuse_port, probe_socket=probe_socket)
