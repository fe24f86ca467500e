"""Reading the YAML or JSON documents a user hands a command: the one bounded reader.

``match -f``, ``--slices`` and ``--machine`` read files written by hand or by kubectl, and every
one is hostile until parsed (docs/inventory.md, "Bad input"). A YAML parser left to itself is not
bounded by the size of its input: a few hundred bytes of anchors and aliases ("billion laughs")
expand into billions of values, nesting tens of thousands deep overflows a recursive composer's
stack, a FIFO blocks the read for ever, and a composed node graph costs a hundred times the
file's bytes. This reader:

- reads a regular file (:func:`..inputfiles.read_input`: no FIFO, no device node) or standard
  input (``-``), at most the caller's bound in bytes, in UTF-8;
- builds Python values straight from the parser's events, so no node graph is held, with
  nesting at most :attr:`Limits.depth` deep, at most :attr:`Limits.documents` documents, and at
  most :attr:`Limits.values` values counted with every alias expanded (an alias is the object
  its anchor made, not a copy, so memory stays with the text; the count bounds what a consumer
  that walks the values will walk);
- can refuse anchors and aliases altogether, and a key written twice in one mapping.

A refusal is an :class:`~.errors.InputError` of one line (exit 2).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import InputError
from .inputfiles import read_input

STDIN = "-"


@dataclass(frozen=True)
class Limits:
    """The bounds of one kind of input."""

    bytes: int
    depth: int = 64  # a Kubernetes object nests about ten deep; a List of them one more
    documents: int = 10_000
    values: int = 4_000_000  # scalars and collections, aliases expanded
    aliases: bool = True
    unique_keys: bool = False


# A hook that sees each scalar with the mapping key it sits under (directly, or as an item of
# the sequence under that key: the bool says which) and its resolved tag: the Machine reader
# uses it to refuse IDs that YAML 1.1 turns into numbers.
ScalarCheck = Callable[[str | None, bool, yaml.ScalarEvent, str], None]

try:  # libyaml's parser: many times faster, and iterative (its events, not its composer)
    _Parser: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Parser = yaml.SafeLoader

_STR = "tag:yaml.org,2002:str"
_SCALAR_TAGS = {"tag:yaml.org,2002:" + t for t in
                ("str", "int", "float", "bool", "null", "timestamp", "binary")}
_CONSTRUCT = yaml.constructor.SafeConstructor()
_RESOLVER = yaml.resolver.Resolver()


def read_source(path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of ``path`` (``-``: standard input), at most ``limit``; InputError otherwise."""
    if str(path) == STDIN:
        stream = sys.stdin.buffer
        data = stream.read(limit + 1)
        if len(data) > limit:
            raise InputError(f"{what} on standard input is larger than {limit} bytes")
        return bytes(data)
    return read_input(path, limit, what)


def load_file(path: Path | str, limits: Limits, what: str = "file",
              check: ScalarCheck | None = None) -> list[Any]:
    """Every document of the file (or standard input) ``path``, within ``limits``."""
    raw = read_source(path, limits.bytes, what)
    name = "standard input" if str(path) == STDIN else f"{what} {path}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name} is not UTF-8 (byte {exc.start})") from None
    return parse(text, limits, name, check)


def parse(text: str, limits: Limits, origin: str = "input",
          check: ScalarCheck | None = None) -> list[Any]:
    """Every document of ``text`` as Python values, refusing what the module says."""
    if len(text.encode("utf-8", "surrogatepass")) > limits.bytes:
        raise InputError(f"{origin} is larger than {limits.bytes} bytes")
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") and check is None:
        try:
            value = json.loads(text, object_pairs_hook=_unique if limits.unique_keys else None)
        except (ValueError, RecursionError):
            pass  # YAML flow style, or JSON nested too deep: the event reader says which
        else:
            _measure(value, limits, origin)
            return [value]
    try:
        return _Builder(limits, origin, check).run(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise InputError(f"{origin} is not valid YAML{where}: {problem}") from None


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different; a key written twice is left to the event
    reader, which names it and its line."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key written twice")
    return out


def _measure(value: Any, limits: Limits, origin: str) -> None:
    """Depth and count of a JSON document (which has no aliases), without recursion."""
    count = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        count += 1
        if count > limits.values:
            raise InputError(f"{origin}: more than {limits.values} values")
        if depth > limits.depth:
            raise InputError(f"{origin}: nested deeper than {limits.depth} levels")
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)


def line(event: yaml.Event) -> int:
    """The 1-based line an event starts on (0 when the parser gave no mark)."""
    mark = event.start_mark
    return mark.line + 1 if mark is not None else 0


class _Builder:
    """Python values from the parser's events, bounded as the module says."""

    def __init__(self, limits: Limits, origin: str, check: ScalarCheck | None) -> None:
        self.limits = limits
        self.origin = origin
        self.check = check
        self.total = 0

    def fail(self, event: yaml.Event, what: str) -> InputError:
        return InputError(f"{self.origin}: line {line(event)}: {what}")

    def run(self, text: str) -> list[Any]:
        limits = self.limits
        parser = _Parser(text)
        documents: list[Any] = []
        # Each open collection: [value, pending key (mappings), size, anchor, merges]
        stack: list[list[Any]] = []
        anchors: dict[str, tuple[Any, int]] = {}
        try:
            while parser.check_event():
                event = parser.get_event()
                if isinstance(event, yaml.DocumentStartEvent):
                    if len(documents) >= limits.documents:
                        raise self.fail(event, "found another document (at most "
                                        f"{limits.documents})")
                    anchors = {}
                    continue
                if isinstance(event, (yaml.StreamStartEvent, yaml.StreamEndEvent,
                                      yaml.DocumentEndEvent)):
                    continue
                anchor = getattr(event, "anchor", None)
                if not limits.aliases and (anchor is not None
                                           or isinstance(event, yaml.AliasEvent)):
                    raise self.fail(event, "anchors and aliases (& and *) are not accepted")
                if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                    if len(stack) >= limits.depth:
                        raise self.fail(event, f"nested deeper than {limits.depth} levels")
                    tag = event.tag
                    if tag not in (None, "!", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"):
                        raise self.fail(event, f"the tag {tag[:40]!r} is not accepted")
                    container: Any = [] if isinstance(event, yaml.SequenceStartEvent) else {}
                    stack.append([container, _NO_KEY, 1, anchor, []])
                    continue
                if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                    container, _, size, anchor, merges = stack.pop()
                    for merged in merges:  # explicit keys win over merged ones
                        for k, v in merged.items():
                            container.setdefault(k, v)
                    if anchor is not None:
                        anchors[anchor] = (container, size)
                    # Its values are counted already: the collection adds itself.
                    self.add(event, container, size, stack, documents, counted=size - 1)
                    continue
                if isinstance(event, yaml.AliasEvent):
                    if event.anchor not in anchors:
                        raise self.fail(event, f"the alias *{str(event.anchor)[:40]} names no "
                                        "anchor")
                    value, size = anchors[event.anchor]
                    self.add(event, value, size, stack, documents)
                    continue
                assert isinstance(event, yaml.ScalarEvent)
                value = self.scalar(event, stack)
                if anchor is not None:
                    anchors[anchor] = (value, 1)
                self.add(event, value, 1, stack, documents)
        finally:
            parser.dispose()
        return documents

    def scalar(self, event: yaml.ScalarEvent, stack: list[list[Any]]) -> Any:
        if event.tag in (None, "!"):
            tag = _RESOLVER.resolve(  # type: ignore[no-untyped-call]
                yaml.ScalarNode, event.value, event.implicit)
        else:
            tag = event.tag
        if tag not in _SCALAR_TAGS and tag != "tag:yaml.org,2002:merge":
            raise self.fail(event, f"the tag {tag[:40]!r} is not accepted")
        if self.check is not None:
            key, item = None, False
            if stack and isinstance(stack[-1][0], dict) and stack[-1][1] is not _NO_KEY:
                key = stack[-1][1]
            elif len(stack) > 1 and isinstance(stack[-1][0], list) \
                    and isinstance(stack[-2][0], dict):
                key, item = stack[-2][1], True
            self.check(key if isinstance(key, str) else None, item, event, tag)
        if tag in (_STR, "tag:yaml.org,2002:timestamp"):
            return event.value  # a timestamp stays the text it is (as in JSON)
        if tag == "tag:yaml.org,2002:merge":
            return _MERGE
        node = yaml.ScalarNode(tag, event.value)
        return _CONSTRUCT.construct_object(node, deep=True)

    def add(self, event: yaml.Event, value: Any, size: int, stack: list[list[Any]],
            documents: list[Any], counted: int = 0) -> None:
        """Put ``value`` (``size`` values once expanded, ``counted`` of them counted already)
        where it belongs: a document, a sequence's item, a mapping's key or value."""
        self.total += size - counted
        if self.total > self.limits.values:
            raise self.fail(event, f"more than {self.limits.values} values (aliases expanded)")
        if not stack:
            documents.append(value)
            return
        top = stack[-1]
        top[2] += size
        container = top[0]
        if isinstance(container, list):
            container.append(value)
            return
        if top[1] is _NO_KEY:
            if isinstance(value, (dict, list)):
                raise self.fail(event, "a mapping key that is a collection is not accepted")
            top[1] = value
            return
        key = top[1]
        top[1] = _NO_KEY
        if key is _MERGE:
            merged = value if isinstance(value, list) else [value]
            if not all(isinstance(m, dict) for m in merged):
                raise self.fail(event, "a merge key (<<) takes mappings only")
            top[4].extend(merged)
            return
        try:
            if self.limits.unique_keys and key in container:
                raise self.fail(event, f"the key {str(key)[:40]!r} appears twice in one "
                                "mapping")
            container[key] = value
        except TypeError:  # an unhashable key (a merged mapping's alias)
            raise self.fail(event, "a mapping key that is a collection is not accepted") \
                from None


class _Marker:
    def __repr__(self) -> str:
        return "<marker>"


_NO_KEY = _Marker()
_MERGE = _Marker()
