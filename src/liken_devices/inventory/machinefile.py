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
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from ..apischema import check, check_object, fields_of, type_of
from ..documents import Limits, line, load_file
from ..errors import InputError
from .model import MachineSpec, SerioEntry
from .modname import is_module_name

SERIO_PROTOCOLS = ("pulse8-cec", "rainshadow-cec")
MACHINE_API_VERSION = "liken.sh/v1alpha1"
MAX_FILE = 1 << 20  # bytes; a Machine is a few hundred
MAX_DEPTH = 32
MAX_MODULES = 1024
MAX_SERIO = 64
MAX_SERIAL = 255  # a USB string descriptor holds at most 126 UTF-16 characters
_HEX4 = re.compile(r"[0-9a-f]{4}")  # fullmatch
_STR = "tag:yaml.org,2002:str"
_STRING_KEYS = ("vendor", "product", "serial")
# One document, no anchors or aliases, no key twice, 32 levels at most.
LIMITS = Limits(bytes=MAX_FILE, depth=MAX_DEPTH, documents=1, values=100_000, aliases=False,
                unique_keys=True)
_KINDS = {"int": "a number", "float": "a number", "bool": "a boolean", "null": "null",
          "timestamp": "a date", "binary": "binary data"}


def _check(key: str | None, item: bool, event: yaml.ScalarEvent, tag: str) -> None:
    """IDs, serials and module names written as strings."""
    if key in _STRING_KEYS and not item:
        _check_string(key, event, tag)
    elif key == "modules" and item:
        _check_string("a module name", event, tag)


def _check_string(what: str, event: yaml.ScalarEvent, tag: str) -> None:
    if tag != _STR and event.value != "" and not event.style:  # plain, not quoted
        kind = _KINDS.get(tag.rsplit(":", 1)[-1], "something else")
        raise InputError(
            f"line {line(event)}: {what} {event.value[:40]!r} is read by YAML as "
            f"{kind}, not text; quote it: \"{event.value[:40]}\"")


def read_machine_file(path: Path) -> MachineSpec:
    """A ``--machine FILE``: a Machine manifest or just its spec. :class:`InputError` if bad."""
    docs = load_file(path, replace(LIMITS, bytes=MAX_FILE), "machine file", _check)
    return parse_machine(docs[0] if docs else None, str(path))


def parse_machine(doc: Any, origin: str = "machine") -> MachineSpec:
    """A Machine object (or just its spec) as a :class:`MachineSpec`; InputError when malformed."""
    if doc is None:
        return MachineSpec()
    if not isinstance(doc, dict):
        kind = type(doc).__name__
        raise InputError(f"{origin}: expected a Machine object or its spec, got {kind}")
    # Read as the API server reads a Machine under strict field validation: its apiVersion and
    # kind, every field one of the CRD's (rules: limits.strict-inputs). A key mistyped in
    # spec.serio would otherwise leave an entry that attaches nothing, with no word said.
    machine = type_of(MACHINE_API_VERSION, "Machine")
    assert machine is not None
    try:
        if "kind" in doc or "apiVersion" in doc:
            if doc.get("kind") != "Machine":
                raise InputError(f"kind is {str(doc.get('kind'))[:40]!r}, expected Machine")
            check_object(doc, {MACHINE_API_VERSION: ("Machine",)})
            spec = doc.get("spec") or {}
        elif "spec" in doc and not {"modules", "serio"} & doc.keys():
            check(doc, machine)  # a Machine without its type header
            spec = doc.get("spec") or {}
        else:
            check(doc, fields_of(machine)["spec"])  # just the spec
            spec = doc
    except InputError as exc:
        raise InputError(f"{origin}: {exc}") from None
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
