"""Paginated list calls whose answers are bounded: an API server is hostile input too.

``fleet`` and ``kubectl liken`` read whole clusters with ``limit``/``continue`` list calls. A
server that is broken or not the one the operator meant (a stolen kubeconfig's endpoint, a
proxy gone wrong) could otherwise make them grow without end: pages that never end, a
``continue`` token handed back again (the same pages forever), a body that never ends, or one
trickled a byte at a time (each read arrives before the read timeout, so it never fires), or a
page whose few megabytes of JSON are millions of tiny values (``[[],[],...]`` costs twenty times
its bytes in memory). The API's own rules give the bounds: a page holds at most the ``limit``
asked, each object of at most 1.5 MiB in etcd, and a list ends when a page carries no
``continue`` token, each token new (rules: limits.list-page).

A page's bounds are those of the largest real page times :data:`PAGE_FACTOR`: 500 ResourceSlices
(the ``limit`` asked) of 128 devices, each with 32 attributes of 64-byte strings, are
:data:`MAX_SLICE_BYTES` bytes of JSON and :data:`MAX_SLICE_VALUES` values each
(tests/kube/test_listing.py builds that page and holds the constants to it;
docs/performance.md, "Hostile list answers", has what it costs). What :func:`list_pages` holds
every answer to, with one :class:`Budget` per command:

* objects: a page with more objects than the ``limit`` asked is refused, and so is one object
  past ``object_bytes`` characters (bytes, for the ASCII the API server writes);
* bytes and values: a page's body at most ``page_bytes`` and ``page_values`` (a value is counted
  at each ``,``, ``:``, ``[`` and ``{`` of the body, strings included: an upper bound found
  without parsing), all pages of the command at most ``total_bytes`` and ``total_values``. The
  body is parsed as it streams in, one object at a time, so it is never held whole;
* count: at most ``pages`` pages in the command; a ``continue`` token seen before is an error;
* time: each request at most ``request_seconds`` (the body included: the clock is read after
  every chunk, and no read waits longer than that), the command at most ``seconds``.

Any breach raises :class:`ApiError` (no status code) saying which bound, so the command exits 2
with one line and nothing is printed from a partial picture.
"""

from __future__ import annotations

import codecs
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
from lightkube import ALL_NS
from lightkube.core.selector import build_selector

from .client import ApiError

ASKED = 500  # the limit fleet asks for: the page the bounds are derived from
# One maximal ResourceSlice as the API server writes it (compact JSON): 128 devices of 63-character
# names, each with 32 attributes of 32-character names holding 64-byte strings.
MAX_SLICE_BYTES = 474_949
MAX_SLICE_VALUES = 17_061  # its ``,``, ``:``, ``[`` and ``{``
# Room for what a real page carries beside the spec (managedFields of server-side apply repeat
# every attribute's name, metadata, longer qualified names).
PAGE_FACTOR = 2
PAGE_BYTES = PAGE_FACTOR * ASKED * MAX_SLICE_BYTES  # 475 MB: one page of the largest real slices
PAGE_VALUES = PAGE_FACTOR * ASKED * MAX_SLICE_VALUES  # 17 million
# Every page of one command together: no more than one page may hold. The command keeps every
# object it reads, so this is what bounds its memory.
TOTAL_BYTES = PAGE_BYTES
TOTAL_VALUES = PAGE_VALUES
OBJECT_BYTES = 4 << 20  # one object: etcd stores at most 1.5 MiB, JSON is larger than protobuf
HEAD_BYTES = 1 << 20  # a list's own fields (kind, apiVersion, metadata)
ERROR_BYTES = 64 << 10  # the body of an error answer (a Status)
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
    page_values: int = PAGE_VALUES
    total_values: int = TOTAL_VALUES
    object_bytes: int = OBJECT_BYTES
    pages: int = PAGES
    started: float = field(default_factory=time.monotonic)
    bytes_read: int = 0
    values_read: int = 0
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


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\r\n]*")
NOT_JSON = "the API server's list answer is not JSON"
NOT_A_LIST = "the API server's list answer is not a list of objects"


class _Page:
    """One list answer, parsed as its body streams in: the list's own fields whole, its items
    one object at a time; every chunk counted against the budget before it is parsed."""

    def __init__(self, response: Any, budget: Budget, deadline: float, too_slow: str,
                 asked: int) -> None:
        self.chunks = iter(response.iter_bytes())
        self.budget, self.deadline, self.too_slow, self.asked = budget, deadline, too_slow, asked
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.done = "", 0, False
        self.bytes = self.values = 0

    def _count(self, chunk: bytes) -> None:
        b = self.budget
        self.bytes += len(chunk)
        self.values += (chunk.count(b",") + chunk.count(b":") + chunk.count(b"[")
                        + chunk.count(b"{"))
        if self.bytes > b.page_bytes:
            raise ApiError(None, f"the API server's answer is too large: a page past "
                                 f"{b.page_bytes} bytes")
        if b.bytes_read + self.bytes > b.total_bytes:
            raise ApiError(None, f"the API server's answer is too large: the answers in all "
                                 f"past {b.total_bytes} bytes")
        if self.values > b.page_values:
            raise ApiError(None, f"the API server's answer is too large: a page of more than "
                                 f"{b.page_values} values")
        if b.values_read + self.values > b.total_values:
            raise ApiError(None, f"the API server's answer is too large: the answers in all "
                                 f"hold more than {b.total_values} values")

    def _more(self) -> bool:
        """The next chunk of the body into the text; False at its end."""
        if self.done:
            return False
        for chunk in self.chunks:
            self._count(chunk)
            if time.monotonic() > self.deadline:
                raise ApiError(None, self.too_slow)
            try:
                text = self.utf8.decode(chunk)
            except UnicodeDecodeError:
                raise ApiError(None, NOT_JSON) from None
            if text:
                self.text = self.text[self.pos:] + text  # what is parsed is dropped
                self.pos = 0
                return True
        try:
            self.utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            raise ApiError(None, NOT_JSON) from None
        self.done = True
        return False

    def _next(self) -> str:
        """The next character that is not white space, not consumed; "" at the end."""
        while True:
            self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self._more():
                return ""

    def _take(self, chars: str) -> str:
        c = self._next()
        if not c or c not in chars:
            raise ApiError(None, NOT_A_LIST if chars in ("{", "[") else NOT_JSON)
        self.pos += 1
        return c

    def _value(self, bound: int, what: str) -> Any:
        """The next JSON value, read until it is whole; more than ``bound`` characters of it
        unparsed is refused. Each attempt waits for twice the text of the one before, so the
        parse is linear in the body however it is cut into chunks."""
        self._next()
        want = 0
        while True:
            if len(self.text) - self.pos >= want or self.done:
                try:
                    value, end = _DECODER.raw_decode(self.text, self.pos)
                except RecursionError:
                    raise ApiError(None, f"{NOT_JSON} (nested too deep)") from None
                except ValueError:
                    if self.done:
                        raise ApiError(None, NOT_JSON) from None
                else:
                    # a number at the end of the text may go on in the next chunk
                    if self.done or end < len(self.text) \
                            or not isinstance(value, int | float):
                        self.pos = end
                        return value
            have = len(self.text) - self.pos
            if have > bound:
                raise ApiError(None, f"the API server's answer is too large: {what} past "
                                     f"{bound} characters")
            want = max(2 * have, 1)
            while len(self.text) - self.pos < want and self._more():
                pass

    def _items(self) -> list[dict[str, Any]]:
        self._take("[")
        items: list[dict[str, Any]] = []
        if self._next() == "]":
            self.pos += 1
            return items
        while True:
            obj = self._value(self.budget.object_bytes, "an object")
            if not isinstance(obj, dict):
                raise ApiError(None, NOT_A_LIST)
            items.append(obj)
            if len(items) > self.asked:
                raise ApiError(None, f"the API server's answer holds more objects than the "
                                     f"{self.asked} asked")
            if self._take(",]") == "]":
                return items

    def read(self) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] | None = None
        meta: Any = None
        self._take("{")
        if self._next() == "}":
            self.pos += 1
        else:
            while True:
                key = self._value(HEAD_BYTES, "a list's field")
                if not isinstance(key, str):
                    raise ApiError(None, NOT_JSON)
                self._take(":")
                if key == "items":
                    items = self._items()
                else:
                    value = self._value(HEAD_BYTES, "a list's field")
                    if key == "metadata":
                        meta = value
                if self._take(",}") == "}":
                    break
        if self._next():
            raise ApiError(None, NOT_JSON)
        self.budget.bytes_read += self.bytes
        self.budget.values_read += self.values
        if items is None or not isinstance(meta, dict):
            raise ApiError(None, NOT_A_LIST)
        token = meta.get("continue") or ""
        if not isinstance(token, str):
            raise ApiError(None, "the API server's continue token is not a string")
        return items, token


def _read_error(response: Any, budget: Budget, deadline: float, too_slow: str) -> bytes:
    """An error answer's body (a Status), streamed and cut at :data:`ERROR_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= ERROR_BYTES or time.monotonic() > deadline:
            break
    budget.bytes_read += size
    return b"".join(chunks)[:ERROR_BYTES]


def _status_message(body: bytes) -> str:
    try:
        status = json.loads(body[:65536])
        message = status.get("message") if isinstance(status, dict) else None
    except (ValueError, RecursionError):
        message = None
    return message if isinstance(message, str) and message else "no message"


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
                if response.status_code >= 400:
                    raise ApiError(response.status_code, _status_message(
                        _read_error(response, budget, deadline, too_slow)))
                items, token = _Page(response, budget, deadline, too_slow, page).read()
            finally:
                response.close()
        except httpx2.TimeoutException:
            raise ApiError(None, too_slow) from None
        except MemoryError:  # what the bounds above leave to the machine: still one line
            raise ApiError(None, "the API server's answers do not fit in memory") from None
        yield from items
        if not token:
            return
        if token in seen:
            raise ApiError(None, "the API server handed back a continue token it had given "
                                 "before: its list would never end")
        seen.add(token)
        request.params["continue"] = token
