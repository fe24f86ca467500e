"""The Prometheus metrics both agents share (docs/agent.md and docs/media.md, "Metrics and health").

The node agent and the media agent each publish a ResourceSlice and serve their own metrics.
What they have in common lives here once: a registry of their own (not the process-wide
default, so tests and embedders do not collide) with the process's CPU, memory and descriptors,
``<prefix>_build_info``, the series of a slice publisher (the hooks ``kube.retry.ApiMetrics``
calls) and the exposition that :mod:`.endpoint` serves, in the text format of :mod:`.prometheus`.
No ``_created`` series: they would double every counter's series and say only when the process
started (``process_start_time_seconds`` does).
"""

from __future__ import annotations

import platform
import time

from .. import __version__
from .prometheus import CONTENT_TYPE, Counter, Gauge, ProcessCollector, Registry


class SliceMetrics:
    """A registry with the process's collector, the build and a slice publisher's series,
    named ``<prefix>_...``; ``slice_name`` is how their help texts call the published slice."""

    def __init__(self, registry: Registry | None, prefix: str, slice_name: str) -> None:
        self.registry = registry or Registry()
        r, p = self.registry, prefix
        ProcessCollector(registry=r)
        self.build = Gauge(f"{p}_build_info", "The running build (always 1)",
                           ["version", "python"], registry=r)
        self.build.labels(version=__version__, python=platform.python_version()).set(1)
        self.devices = Gauge(f"{p}_published_devices", f"Devices in the node's {slice_name}",
                             registry=r)
        self.generation = Gauge(f"{p}_pool_generation",
                                "The pool generation of the last written slice", registry=r)
        self.last_publish = Gauge(f"{p}_last_publish_timestamp_seconds",
                                  "When the slice was last written (Unix time)", registry=r)
        self.publishes = Counter(f"{p}_slice_writes", f"Writes of the node's {slice_name}",
                                 registry=r)
        self.api_errors = Counter(f"{p}_api_errors", "Failed API requests, by object and "
                                  "HTTP status (connection: no answer)", ["op", "code"],
                                  registry=r)

    # ---- kube.retry.ApiMetrics ---------------------------------------------------------------

    def api_error(self, op: str, code: int | None) -> None:
        self.api_errors.labels(op=op, code=str(code) if code is not None else "connection").inc()

    def published(self, devices: int, generation: int) -> None:
        self.publishes.inc()
        self.devices.set(devices)
        self.generation.set(generation)
        self.last_publish.set(time.time())

    # ---- the endpoint ------------------------------------------------------------------------

    def exposition(self) -> tuple[bytes, str]:
        return self.registry.exposition(), CONTENT_TYPE
