"""A Machine's spec, from a Machine object or a ``--machine FILE``, checked before it is used.

rules: machine.object. The Machine gives ``spec.modules`` (module
names) and ``spec.serio`` (``protocol``, ``vendor``, ``product``, optional ``serial``). A file
is YAML written by hand, so it is hostile until parsed (docs/inventory.md, "Bad input"):

- at most :data:`MAX_FILE` bytes of a regular file, in UTF-8;
- no anchors or aliases (a "billion laughs" document expands a few hundred bytes into gigabytes;
  a Machine has nothing to repeat), nesting at most :data:`MAX_DEPTH` deep, one document, no key
  written twice in a mapping;
- YAML 1.1 reads unquoted ``0x2548`` as the number 9544, ``0123`` as 83 and ``on`` as true: the
  adapter's IDs and serial must be strings, and a plain scalar that YAML turned into something
  else is refused with the text as written and the advice to quote it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError
from ..inputfiles import read_input
from .model import MachineSpec, SerioEntry
from .modname import is_module_name

SERIO_PROTOCOLS = ("pulse8-cec", "rainshadow-cec")
MAX_FILE = 1 << 20  # bytes; a Machine is a few hundred
MAX_DEPTH = 32
MAX_MODULES = 1024
MAX_SERIO = 64
MAX_SERIAL = 255  # a USB string descriptor holds at most 126 UTF-16 characters
_HEX4 = re.compile(r"[0-9a-f]{4}")  # fullmatch
_STR = "tag:yaml.org,2002:str"
_STRING_KEYS = ("vendor", "product", "serial")
_KINDS = {"int": "a number", "float": "a number", "bool": "a boolean", "null": "null",
          "timestamp": "a date", "binary": "binary data"}


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors, aliases and deep nesting while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise InputError(f"line {event.start_mark.line + 1}: anchors and aliases (& and *) "
                             "are not accepted in a Machine")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise InputError(f"line {event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} "
                             "levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_nodes(node: yaml.Node) -> None:
    """No key twice in a mapping; IDs, serials and module names written as strings."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in n.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        raise InputError(f"line {key.start_mark.line + 1}: the key "
                                         f"{key.value[:40]!r} appears twice in one mapping")
                    seen.add(key.value)
                    if key.value in _STRING_KEYS:
                        _check_string(key.value, value)
                    elif key.value == "modules" and isinstance(value, yaml.SequenceNode):
                        for item in value.value:
                            _check_string("a module name", item)
                stack.append(value)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def _check_string(what: str, node: yaml.Node) -> None:
    if isinstance(node, yaml.ScalarNode) and node.tag != _STR and node.value != "" \
            and node.style is None:
        kind = _KINDS.get(node.tag.rsplit(":", 1)[-1], "something else")
        raise InputError(
            f"line {node.start_mark.line + 1}: {what} {node.value[:40]!r} is read by YAML as "
            f"{kind}, not text; quote it: \"{node.value[:40]}\"")


def load_machine_yaml(text: str, origin: str = "machine") -> Any:
    """The document in ``text`` as Python objects, refusing what :mod:`this module <.>` says."""
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # its reader refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node)
        return loader.construct_document(node)
    except InputError as exc:
        raise InputError(f"{origin}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise InputError(f"{origin} is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise InputError(f"{origin}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_machine_file(path: Path) -> MachineSpec:
    """A ``--machine FILE``: a Machine manifest or just its spec. :class:`InputError` if bad."""
    raw = read_input(path, MAX_FILE, "machine file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"machine file {path} is not UTF-8 (byte {exc.start})") from None
    return parse_machine(load_machine_yaml(text, f"machine file {path}"), str(path))


def parse_machine(doc: Any, origin: str = "machine") -> MachineSpec:
    """A Machine object (or just its spec) as a :class:`MachineSpec`; InputError when malformed."""
    if doc is None:
        return MachineSpec()
    if not isinstance(doc, dict):
        kind = type(doc).__name__
        raise InputError(f"{origin}: expected a Machine object or its spec, got {kind}")
    if "kind" in doc or "apiVersion" in doc:
        if doc.get("kind") != "Machine":
            raise InputError(f"{origin}: kind is {str(doc.get('kind'))[:40]!r}, expected Machine")
        spec = doc.get("spec") or {}
    elif "spec" in doc and not {"modules", "serio"} & doc.keys():
        spec = doc.get("spec") or {}  # a Machine without its type header
    else:
        spec = doc  # just the spec
    if not isinstance(spec, dict):
        raise InputError(f"{origin}: spec must be a mapping")
    return MachineSpec(_modules(spec.get("modules") or [], origin),
                       _serio(spec.get("serio") or [], origin))


def _modules(raw: Any, origin: str) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise InputError(f"{origin}: spec.modules must be a list of module names")
    if len(raw) > MAX_MODULES:
        raise InputError(f"{origin}: spec.modules lists more than {MAX_MODULES} names")
    for m in raw:
        if not is_module_name(m):
            raise InputError(f"{origin}: spec.modules: {str(m)[:80]!r} is not a module name")
    return tuple(raw)


def _serio(raw: Any, origin: str) -> tuple[SerioEntry, ...]:
    if not isinstance(raw, list):
        raise InputError(f"{origin}: spec.serio must be a list")
    if len(raw) > MAX_SERIO:
        raise InputError(f"{origin}: spec.serio lists more than {MAX_SERIO} entries")
    serio: list[SerioEntry] = []
    for i, entry in enumerate(raw):
        where = f"{origin}: spec.serio[{i}]"
        if not isinstance(entry, dict):
            raise InputError(f"{where} must be a mapping")
        protocol = entry.get("protocol")
        if protocol not in SERIO_PROTOCOLS:
            raise InputError(f"{where}.protocol must be one of {', '.join(SERIO_PROTOCOLS)}")
        ids = []
        for key in ("vendor", "product"):
            value = entry.get(key)
            if not isinstance(value, str):
                raise InputError(f"{where}.{key} must be a string of 4 hex digits (the "
                                 f"adapter's USB ID), quoted in YAML: \"2548\"")
            value = value.lower().removeprefix("0x")
            if not _HEX4.fullmatch(value):
                raise InputError(f"{where}.{key} must be 4 hex digits (the adapter's USB ID)")
            ids.append(value)
        serial = entry.get("serial")
        if serial is not None and (not isinstance(serial, str) or len(serial) > MAX_SERIAL):
            raise InputError(f"{where}.serial must be a string of at most {MAX_SERIAL} "
                             "characters")
        serio.append(SerioEntry(str(protocol), ids[0], ids[1], serial))
    return tuple(serio)
