"""The agent's Prometheus metrics (issue 4, "Observability").

Devices published, walks and their duration, uevents seen and ignored, API errors, the plugin's
prepare/unprepare counts and durations, and the time of the last publish. One registry per
agent (not the process-wide default) so tests and embedders do not collide; the HTTP endpoint is
prometheus_client's own server thread, which blocks in accept and costs nothing while idle.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class AgentMetrics:
    """The metrics, plus the hooks the kube side (``ApiMetrics``) and the plugin call."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.devices = Gauge("liken_devices_published", "Devices in the node's ResourceSlice",
                             registry=r)
        self.overflow = Gauge("liken_devices_overflow",
                              "Devices dropped past the slice's 128-device cap", registry=r)
        self.generation = Gauge("liken_devices_pool_generation",
                                "The pool generation of the last written slice", registry=r)
        self.last_publish = Gauge("liken_devices_last_publish_timestamp_seconds",
                                  "When the slice was last written (Unix time)", registry=r)
        self.publishes = Counter("liken_devices_publishes", "Slice writes", registry=r)
        self.walks = Counter("liken_devices_walks", "Walks of sysfs", ["reason"], registry=r)
        self.walk_seconds = Histogram("liken_devices_walk_duration_seconds",
                                      "Time to walk sysfs and decide the inventory",
                                      buckets=_DURATION_BUCKETS, registry=r)
        self.walk_errors = Counter("liken_devices_walk_errors", "Walks that failed", registry=r)
        self.uevents = Counter("liken_devices_uevents", "Kernel uevents received", registry=r)
        self.uevents_ignored = Counter(
            "liken_devices_uevents_ignored",
            "Uevents that wake no walk (change, online, offline; virtual network devices)",
            registry=r)
        self.api_errors = Counter("liken_devices_api_errors", "Failed API requests",
                                  ["op", "code"], registry=r)
        self.prepares = Counter("liken_devices_prepare", "NodePrepareResources calls",
                                ["result"], registry=r)
        self.prepare_seconds = Histogram("liken_devices_prepare_duration_seconds",
                                         "Duration of NodePrepareResources",
                                         buckets=_DURATION_BUCKETS, registry=r)
        self.unprepares = Counter("liken_devices_unprepare", "NodeUnprepareResources calls",
                                  ["result"], registry=r)
        self.unprepare_seconds = Histogram("liken_devices_unprepare_duration_seconds",
                                           "Duration of NodeUnprepareResources",
                                           buckets=_DURATION_BUCKETS, registry=r)

    # ---- kube.retry.ApiMetrics ---------------------------------------------------------------

    def api_error(self, op: str, code: int | None) -> None:
        self.api_errors.labels(op=op, code=str(code) if code is not None else "connection").inc()

    def published(self, devices: int, generation: int) -> None:
        self.publishes.inc()
        self.devices.set(devices)
        self.generation.set(generation)
        self.last_publish.set(time.time())

    # ---- the plugin's calls ------------------------------------------------------------------

    @contextmanager
    def timed_prepare(self) -> Iterator[None]:
        with self._timed(self.prepare_seconds, self.prepares):
            yield

    @contextmanager
    def timed_unprepare(self) -> Iterator[None]:
        with self._timed(self.unprepare_seconds, self.unprepares):
            yield

    @contextmanager
    def _timed(self, hist: Histogram, count: Counter) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        except BaseException:
            count.labels(result="error").inc()
            raise
        else:
            count.labels(result="ok").inc()
        finally:
            hist.observe(time.perf_counter() - started)

    def instrument_plugin(self, plugin: Any) -> None:
        """Time the plugin's prepare/unprepare (what its gRPC servicers call), counting a call
        whose answer carries any per-claim error as "error"."""
        for attr, hist, count in (("prepare", self.prepare_seconds, self.prepares),
                                  ("unprepare", self.unprepare_seconds, self.unprepares)):
            inner: Callable[..., Any] = getattr(plugin, attr)
            setattr(plugin, attr, _wrap(inner, hist, count))

    def serve(self, port: int, addr: str = "0.0.0.0") -> MetricsServer:
        """Serve /metrics on ``port`` (0: any free port)."""
        return MetricsServer(self.registry, port, addr)


class MetricsServer:
    """/metrics over HTTP in a thread that blocks in select with no timeout.

    prometheus_client's ``start_http_server`` wakes twice a second to look for a shutdown
    request; an idle node should cost nothing (issue 4), so this one sleeps until a scrape and
    is woken for shutdown by a connection of its own.
    """

    def __init__(self, registry: CollectorRegistry, port: int, addr: str) -> None:
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from prometheus_client import make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer

        class _Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

        class _Server(ThreadingWSGIServer):  # type: ignore[misc]
            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], OSError):  # a scraper that went away
                    super().handle_error(request, client_address)

        self._httpd = make_server(addr, port, make_wsgi_app(registry), _Server,
                                  handler_class=_Quiet)
        self.port: int = self._httpd.server_port
        self._addr = "127.0.0.1" if addr in ("0.0.0.0", "") else addr
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": None}, name="metrics",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        import socket

        stopper = threading.Thread(target=self._httpd.shutdown, daemon=True)
        stopper.start()
        with contextlib.suppress(OSError), socket.create_connection((self._addr, self.port), 1):
            pass
        stopper.join(2)
        self._httpd.server_close()


def _wrap(inner: Callable[..., Any], hist: Histogram, count: Counter) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            result = inner(*args, **kwargs)
        except BaseException:
            count.labels(result="error").inc()
            raise
        finally:
            hist.observe(time.perf_counter() - started)
        failed = isinstance(result, dict) and any(
            (v if isinstance(v, str) else getattr(v, "error", "")) for v in result.values())
        count.labels(result="error" if failed else "ok").inc()
        return result

    return timed
