"""Paginated list calls whose answers are bounded: an API server is hostile input too.

``fleet`` and ``kubectl liken`` read whole clusters with ``limit``/``continue`` list calls. A
server that is broken or not the one the operator meant (a stolen kubeconfig's endpoint, a
proxy gone wrong) could otherwise make them grow without end: pages that never end, a
``continue`` token handed back again (the same pages forever), a body that never ends, or one
trickled a byte at a time (each read arrives before the read timeout, so it never fires). The
API's own rules give the bounds: a page is at most ``limit`` objects of at most 1.5 MiB each (etcd's
request limit), and a list ends when a page carries no ``continue`` token, each token new.

What :func:`list_pages` holds every answer to, with one :class:`Budget` per command:

* bytes: a page's body at most ``page_bytes`` (read as a stream and cut there, never held
  whole), all pages of the command at most ``total_bytes``;
* count: at most ``pages`` pages in the command; a ``continue`` token seen before is an error;
* time: each request at most ``request_seconds`` (the body included: the clock is read after
  every chunk, and no read waits longer than that), the command at most ``seconds``.

Any breach raises :class:`ApiError` (no status code) saying which bound, so the command exits 2
with one line and nothing is printed from a partial picture.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
from lightkube import ALL_NS
from lightkube.core.selector import build_selector

from .client import ApiError

PAGE_BYTES = 64 << 20  # one page: 500 objects of ~130 KiB, far above a liken slice's size
TOTAL_BYTES = 512 << 20  # every page of one command
PAGES = 20_000  # pages of one command (--page-size 1 on a fleet of thousands still fits)
REQUEST_SECONDS = 30.0
COMMAND_SECONDS = 300.0


@dataclass
class Budget:
    """What one command may still spend on the API server's answers."""

    seconds: float = COMMAND_SECONDS
    request_seconds: float = REQUEST_SECONDS
    page_bytes: int = PAGE_BYTES
    total_bytes: int = TOTAL_BYTES
    pages: int = PAGES
    started: float = field(default_factory=time.monotonic)
    bytes_read: int = 0
    pages_read: int = 0

    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def request_deadline(self) -> tuple[float, str]:
        """The monotonic time the next request must be done by, and what to say when not."""
        left = self.remaining()
        if left <= 0:
            raise ApiError(None, self.too_slow(True))
        last = left <= self.request_seconds
        return time.monotonic() + min(self.request_seconds, left), self.too_slow(last)

    def too_slow(self, in_all: bool) -> str:
        if in_all:
            return f"the API server's answers took longer than {self.seconds:g} s in all"
        return f"the API server's answer took longer than {self.request_seconds:g} s"

    def take_page(self) -> None:
        self.pages_read += 1
        if self.pages_read > self.pages:
            raise ApiError(None, f"the API server's lists ran past {self.pages} pages")


def _read_body(response: Any, budget: Budget, deadline: float, too_slow: str) -> bytes:
    """The body, streamed: cut at the page's and the command's byte bounds and the deadline."""
    limit = min(budget.page_bytes, budget.total_bytes - budget.bytes_read)
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > limit:
            which = "a page" if limit == budget.page_bytes else "the answers in all"
            raise ApiError(None, f"the API server's answer is too large: {which} past "
                                 f"{limit} bytes")
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise ApiError(None, too_slow)
    budget.bytes_read += size
    return b"".join(chunks)


def _status_message(body: bytes) -> str:
    try:
        status = json.loads(body[:65536])
        message = status.get("message") if isinstance(status, dict) else None
    except (ValueError, RecursionError):
        message = None
    return message if isinstance(message, str) and message else "no message"


def _page(body: bytes) -> tuple[list[dict[str, Any]], str]:
    try:
        page = json.loads(body)
    except (ValueError, RecursionError):
        raise ApiError(None, "the API server's list answer is not JSON") from None
    items = page.get("items") if isinstance(page, dict) else None
    meta = page.get("metadata") if isinstance(page, dict) else None
    if not isinstance(items, list) or not isinstance(meta, dict) \
            or not all(isinstance(i, dict) for i in items):
        raise ApiError(None, "the API server's list answer is not a list of objects")
    token = meta.get("continue") or ""
    if not isinstance(token, str):
        raise ApiError(None, "the API server's continue token is not a string")
    return items, token


def list_pages(client: Any, resource: Any, budget: Budget, *, page: int,
               namespaced: bool = False, fields: dict[str, str] | None = None
               ) -> Iterator[dict[str, Any]]:
    """Every object of ``resource`` as a plain dict, page by page (``limit``/``continue``),
    each answer within ``budget`` (module docstring)."""
    generic = client._client  # lightkube's HTTP side: its requests carry the kubeconfig's auth
    params: dict[str, Any] = {"limit": page}
    if fields:
        params["fieldSelector"] = build_selector(fields, for_fields=True)
    request = generic.prepare_request("list", res=resource,
                                      namespace=ALL_NS if namespaced else None, params=params)
    seen: set[str] = set()
    while True:
        budget.take_page()
        deadline, too_slow = budget.request_deadline()
        request.timeout = httpx2.Timeout(max(deadline - time.monotonic(), 0.001))
        try:
            response = generic.send(generic.build_adapter_request(request), stream=True)
            try:
                body = _read_body(response, budget, deadline, too_slow)
            finally:
                response.close()
        except httpx2.TimeoutException:
            raise ApiError(None, too_slow) from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, _status_message(body))
        items, token = _page(body)
        yield from items
        if not token:
            return
        if token in seen:
            raise ApiError(None, "the API server handed back a continue token it had given "
                                 "before: its list would never end")
        seen.add(token)
        request.params["continue"] = token
