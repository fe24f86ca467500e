"""The API server's strict field validation, for the objects a user hands a command.

rules: limits.strict-inputs. ``kubectl apply`` sends an object with strict field validation, and
the API server refuses it when a field is unknown (``strict decoding error: unknown field
"spec.selector"``), when its apiVersion is not served or its kind is not in that version. A
command that reads the same file must refuse it too: read leniently, a DeviceClass with
``selector:`` for ``selectors:`` has no selector and matches every device, and ``match`` would
answer "allocatable" for a class the API server never accepts.

The fields of each kind are those of ``apischema.json``, which ``scripts/apischema.py`` writes from
the lightkube-models package (every field of each Kubernetes API type, by its JSON name) and from
the Machine CRD (``deploy/liken-devices/machine-crd.yaml``); ``tests/test_apischema.py`` holds the
file to them. What is checked is the decoder's part: every key is a field of its type (the full
path is named), an object is a mapping and a list a sequence; ``null`` stands for an unset field,
as in the API. The values themselves (a name's syntax, a count's range) are each reader's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from .errors import InputError

SCALAR, ANY, LIST, MAP = "", "*", "[", "{"
_KEYS_SHOWN = 40  # characters of an unknown key in a message


@cache
def _schema() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("apischema.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def versions() -> dict[str, tuple[str, ...]]:
    """Each apiVersion the strict readers know, with its kinds."""
    return {v: tuple(kinds) for v, kinds in _schema()["kinds"].items()}


def type_of(api_version: str, kind: str) -> str | None:
    """The schema's type for ``kind`` of ``api_version``, or None."""
    kinds = _schema()["kinds"].get(api_version)
    return kinds.get(kind) if kinds else None


def fields_of(type_name: str) -> Mapping[str, str]:
    """The fields of a type of the schema (name -> reference)."""
    fields: dict[str, str] = _schema()["types"][type_name]
    return fields


def _key(key: Any) -> str:
    text = str(key)
    return json.dumps(text[:_KEYS_SHOWN] + ("..." if len(text) > _KEYS_SHOWN else ""))[1:-1]


def check(value: Any, ref: str, path: str = "") -> None:
    """Raise :class:`InputError` naming the first field of ``value`` that the type ``ref``
    lacks, or a value of the wrong shape, by its full path (``spec.devices.requests[0].name``).
    Iterative: a document nested to the reader's limit costs no stack."""
    types = _schema()["types"]
    stack: list[tuple[Any, str, str]] = [(value, ref, path)]
    while stack:
        v, r, where = stack.pop()
        if v is None or r == ANY:
            continue
        if r == SCALAR:
            if isinstance(v, (dict, list)):
                raise InputError(f'{where or "the document"}: not valid: must be a value, '
                                 f'not {"an object" if isinstance(v, dict) else "a list"}')
            continue
        if r.startswith(LIST):
            if not isinstance(v, list):
                raise InputError(f"{where or 'the document'}: not valid: must be a list")
            stack.extend((item, r[1:], f"{where}[{i}]") for i, item in
                         reversed(list(enumerate(v))))
            continue
        if not isinstance(v, dict):
            raise InputError(f"{where or 'the document'}: not valid: must be an object")
        if r.startswith(MAP):
            stack.extend((item, r[1:], f"{where}.{_key(k)}" if where else _key(k))
                         for k, item in reversed(list(v.items())))
            continue
        fields = types[r]
        for k in v:
            if k not in fields:
                full = f"{where}.{_key(k)}" if where else _key(k)
                raise InputError(f'strict decoding error: unknown field "{full}"')
        stack.extend((v[k], fields[k], f"{where}.{k}" if where else str(k))
                     for k in reversed(list(v)))


def check_object(obj: Mapping[str, Any], allowed: Mapping[str, tuple[str, ...]] | None = None,
                 ) -> None:
    """An object as the API server decodes it: its apiVersion served, its kind one of that
    version's (``allowed``: the versions and kinds a reader takes, by default every one the
    schema knows), every field known. A ``List`` (``v1 List``, or a kind's own list such as
    ``DeviceClassList``) is checked with each of its items."""
    allowed = versions() if allowed is None else allowed
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InputError("the object has no kind")
    if not isinstance(api_version, str) or not api_version:
        raise InputError(f"the {kind[:_KEYS_SHOWN]} has no apiVersion")
    if api_version not in allowed:
        raise InputError(f"apiVersion {api_version[:_KEYS_SHOWN]!r} is not read here (read: "
                         f"{', '.join(allowed)})")
    kinds = allowed[api_version]
    base = kind.removesuffix("List")
    if kind.endswith("List") and ((kind == "List" and api_version == "v1") or base in kinds):
        for k in obj:
            if k not in ("apiVersion", "kind", "metadata", "items"):
                raise InputError(f'strict decoding error: unknown field "{_key(k)}"')
        check(obj.get("metadata"), "meta_v1.ListMeta", "metadata")
        items = obj.get("items")
        if items is not None and not isinstance(items, list):
            raise InputError("items: not valid: must be a list")
        return
    if kind not in kinds:
        raise InputError(f"no kind {kind[:_KEYS_SHOWN]!r} in {api_version} (read: "
                         f"{', '.join(kinds)})")
    type_name = type_of(api_version, kind)
    assert type_name is not None
    check(obj, type_name)
