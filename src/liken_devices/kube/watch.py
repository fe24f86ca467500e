"""Watching one kind of object and handing its events to the agent's loop.

The slice must come back when someone deletes it (the kubelet deletes every slice of its node
when it starts, dra-api.md §6.3), and the Machine's spec.modules/spec.serio must take effect at
the next pass (devices.txt, "Hardware that is not published"). Both are learnt from watches,
not by polling: a thread blocks on the watch stream (no CPU while nothing happens) and calls
``on_event``. Each (re)connection lists first and watches from the list's resourceVersion, and
reports ``("RESYNC", None)`` so the owner reads the object afresh: what changed while the watch
was down is not replayed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from .client import as_dict, describe
from .retry import Backoff

log = logging.getLogger(__name__)

OnEvent = Callable[[str, dict[str, Any] | None], None]


class ObjectWatch:
    """A daemon thread watching ``resource`` (with field selectors) until :meth:`stop`."""

    def __init__(self, client_factory: Callable[[], Any], resource: Any, fields: dict[str, str],
                 on_event: OnEvent, name: str, server_timeout: int = 300,
                 owns_client: bool = True) -> None:
        """``owns_client`` False: the factory hands out a client shared with others (lightkube
        clients are thread-safe, and each costs an SSL context), which is then never closed
        here; a stopped watch's thread may then linger until the stream's next event."""
        self._factory = client_factory
        self._owns = owns_client
        self._resource = resource
        self._fields = fields
        self._on_event = on_event
        self._server_timeout = server_timeout
        self._stop = threading.Event()
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
        backoff = Backoff(initial=1.0, maximum=30.0)
        while not self._stop.is_set():
            try:
                client = self._factory()
                with self._lock:
                    if self._stop.is_set():
                        if self._owns:
                            client.close()
                        return
                    self._client = client
                # List, then watch from the list's resourceVersion: nothing that happens after
                # the list is missed, and whatever happened before it is read fresh (RESYNC).
                listing = client.list(self._resource, fields=self._fields)
                for _ in listing:
                    pass
                version = listing.resourceVersion
                self._on_event("RESYNC", None)
                self.connected.set()
                stream = client.watch(self._resource, fields=self._fields,
                                      server_timeout=self._server_timeout,
                                      resource_version=version)
                for event, obj in stream:
                    if self._stop.is_set():
                        return
                    backoff.reset()
                    self._on_event(str(event), as_dict(obj))
            except Exception as exc:
                self.connected.clear()
                if self._stop.is_set():
                    return
                delay = backoff.next()
                log.debug("watch of %s ended (%s); again in %.1f s", self._resource.__name__,
                          describe(exc), delay)
                self._stop.wait(delay)
            finally:
                with self._lock:
                    client, self._client = self._client, None
                if client is not None and self._owns:
                    with contextlib.suppress(Exception):
                        client.close()
