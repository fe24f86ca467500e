"""Watching one kind of object and handing its events to the agent's loop.

The slice must come back when someone deletes it (the kubelet deletes every slice of its node
when it starts, KEP-4381), and the Machine's spec.modules/spec.serio must take effect at
the next pass (rules: machine.declare-module). Both are learnt from watches,
not by polling: a thread blocks on the watch stream (no CPU while nothing happens) and calls
``on_event``. Each (re)connection lists first and watches from the list's resourceVersion, and
reports ``("RESYNC", None)`` so the owner reads the object afresh: what changed while the watch
was down is not replayed.

A watch the server ends early (an API server shedding load, a proxy with a short idle timeout,
one that ends every watch at once) is re-opened with exponential backoff and jitter, never at
once: a node that re-lists in a tight loop is thousands of requests a second, and a fleet of them
is an outage of the API server. Only a connection that stayed open ``healthy_after`` seconds
resets the backoff (an event on a connection proves nothing: a server may send one and hang up).

lightkube's ``Client.watch`` re-issues the watch request itself, at once and without telling
its caller, whenever the server ends the stream; that loop is what hammered the API server. A
request hook on the client's HTTP connection pool (:func:`_guard`) refuses a second watch request
within one pass of this thread, so the end of every stream comes back here and goes through the
backoff.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from .client import ApiError, as_dict
from .retry import Backoff

log = logging.getLogger(__name__)

OnEvent = Callable[[str, dict[str, Any] | None], None]


class Watch(Protocol):
    """What the agents' loops need of a watch (an :class:`ObjectWatch`): the node agent stops
    the ones it started, the media agent starts and stops its own."""

    def start(self) -> Watch: ...

    def stop(self) -> None: ...


_pass = threading.local()  # per watch thread: armed for one pass, and whether it opened a watch


class WatchEnded(Exception):
    """The server ended the watch stream (the client library was about to re-open it)."""


def _refuse_second_watch(request: Any) -> None:
    if not getattr(_pass, "armed", False) or request.url.params.get("watch") not in ("true", "1"):
        return
    if _pass.opened:
        raise WatchEnded("the server ended the watch")
    _pass.opened = True


def _guard(client: Any) -> None:
    """Install :func:`_refuse_second_watch` on a lightkube client's httpx client (once)."""
    pool: Any = getattr(getattr(client, "_client", None), "_client", None)
    hooks = getattr(pool, "event_hooks", None)
    if not isinstance(hooks, dict):
        return  # not a lightkube client over httpx (a test double): nothing to guard
    request_hooks = list(hooks.get("request") or [])
    if _refuse_second_watch not in request_hooks:
        pool.event_hooks = {**hooks, "request": [*request_hooks, _refuse_second_watch]}


class ObjectWatch:
    """A daemon thread watching ``resource`` (with field selectors) until :meth:`stop`."""

    def __init__(self, client_factory: Callable[[], Any], resource: Any, fields: dict[str, str],
                 on_event: OnEvent, name: str, server_timeout: int = 300,
                 owns_client: bool = True, backoff: Backoff | None = None,
                 healthy_after: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], bool] | None = None) -> None:
        """``owns_client`` False: the factory hands out a client shared with others (lightkube
        clients are thread-safe, and each costs an SSL context), which is then never closed
        here; a stopped watch's thread may then linger until the stream's next event.

        ``backoff`` (1 s doubling to 30 s, jittered), ``clock`` and ``sleep`` (waits the delay;
        True when the watch was stopped meanwhile) are seams for tests."""
        self._factory = client_factory
        self._owns = owns_client
        self._resource = resource
        self._fields = fields
        self._on_event = on_event
        self._server_timeout = server_timeout
        self._stop = threading.Event()
        self._backoff = backoff or Backoff(initial=1.0, maximum=30.0)
        self._healthy_after = healthy_after
        self._clock = clock
        self._sleep = sleep or self._stop.wait
        self.reconnects = 0
        self._client: Any = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)
        self.connected = threading.Event()

    def start(self) -> ObjectWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._owns:
            with contextlib.suppress(Exception):
                client.close()  # ends the blocking read of the stream
        # A read blocked on the stream may not notice the close until the next event or the
        # server's timeout; the thread is a daemon and reports nothing once stopped.
        self._thread.join(0.5)

    def _run(self) -> None:
        while not self._stop.is_set():
            opened = self._clock()
            why = "the server ended it"  # an end with no error is a WatchEnded (or a stop)
            try:
                if self._once():
                    return
            except Exception as exc:
                why = str(ApiError.of(exc))
            finally:
                self.connected.clear()
                with self._lock:
                    client, self._client = self._client, None
                if client is not None and self._owns:
                    with contextlib.suppress(Exception):
                        client.close()
            if self._stop.is_set():
                return
            if self._clock() - opened >= self._healthy_after:
                self._backoff.reset()  # a long-lived watch that timed out, as it should
            delay = self._backoff.next()
            self.reconnects += 1
            log.debug("watch of %s ended (%s); again in %.1f s", self._resource.__name__, why,
                      delay)
            if self._sleep(delay):
                return

    def _once(self) -> bool:
        """One list and watch, until the stream ends; True when stopped meanwhile."""
        client = self._factory()
        with self._lock:
            if self._stop.is_set():
                if self._owns:
                    client.close()
                return True
            self._client = client
        # List, then watch from the list's resourceVersion: nothing that happens after the list
        # is missed, and whatever happened before it is read fresh (RESYNC).
        _guard(client)
        listing = client.list(self._resource, fields=self._fields)
        for _ in listing:
            pass
        version = listing.resourceVersion
        self._on_event("RESYNC", None)
        self.connected.set()
        _pass.armed, _pass.opened = True, False
        try:
            stream = client.watch(self._resource, fields=self._fields,
                                  server_timeout=self._server_timeout, resource_version=version)
            for event, obj in stream:
                if self._stop.is_set():
                    return True
                self._on_event(str(event), as_dict(obj))
        except WatchEnded:
            pass
        finally:
            _pass.armed = False
        return self._stop.is_set()
