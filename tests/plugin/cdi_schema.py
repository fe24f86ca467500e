"""Checks of a claim's CDI spec: a draft-07 JSON schema and the project's delivery rules.

The schema is written here from the CDI specification (its own JSON schema is draft-07 with
required ``cdiVersion``/``kind``/``devices``, each device requiring ``name`` and
``containerEdits``, a device node requiring ``path``), tightened with the rules the
Go validation adds (name patterns, non-empty device edits, no unknown fields: runtimes decode
strictly). :func:`check_claim_spec` adds the delivery rules (rules: delivery.cdi-spec).
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema

NAME_CHARS = r"[A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9]|[A-Za-z0-9]"

CDI_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["cdiVersion", "kind", "devices"],
    "additionalProperties": False,
    "properties": {
        "cdiVersion": {"type": "string", "enum": ["0.3.0", "0.4.0", "0.5.0"]},  # podman 4.3
        "kind": {"type": "string",
                 "pattern": r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?/[A-Za-z]([A-Za-z0-9_-]*"
                            r"[A-Za-z0-9])?$"},
        "devices": {"type": "array", "minItems": 1, "items": {"$ref": "#/definitions/device"}},
        "containerEdits": {"$ref": "#/definitions/containerEdits"},
    },
    "definitions": {
        "device": {
            "type": "object",
            "required": ["name", "containerEdits"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": f"^({NAME_CHARS})$"},
                "containerEdits": {"$ref": "#/definitions/containerEdits", "minProperties": 1},
            },
        },
        "containerEdits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "env": {"type": "array", "items": {"type": "string"}},
                "deviceNodes": {"type": "array", "minItems": 1,
                                "items": {"$ref": "#/definitions/deviceNode"}},
                "mounts": {"type": "array"},
                "hooks": {"type": "array"},
            },
        },
        "deviceNode": {
            "type": "object",
            "required": ["path"],
            "additionalProperties": False,
            "properties": {
                "path": {"type": "string", "pattern": "^/"},
                "hostPath": {"type": "string", "pattern": "^/"},
                "type": {"type": "string", "enum": ["b", "c", "u", "p"]},
                "major": {"type": "integer", "minimum": 0},
                "minor": {"type": "integer", "minimum": 0},
                "fileMode": {"type": "integer"},
                "permissions": {"type": "string", "pattern": "^[rwm]*$"},
                "uid": {"type": "integer", "minimum": 0},
                "gid": {"type": "integer", "minimum": 0},
            },
        },
    },
}


def check_claim_spec(spec: dict[str, Any], uid: str) -> None:
    """Raise AssertionError / ValidationError unless ``spec`` is a valid liken.sh claim spec."""
    jsonschema.Draft7Validator.check_schema(CDI_SCHEMA)
    jsonschema.validate(spec, CDI_SCHEMA, cls=jsonschema.Draft7Validator)
    assert spec["cdiVersion"] == "0.5.0", spec["cdiVersion"]
    assert spec["kind"] == "liken.sh/device"
    names = [d["name"] for d in spec["devices"]]
    assert len(names) == len(set(names)), f"duplicate device names {names}"
    for d in spec["devices"]:
        assert d["name"].startswith(uid + "-"), d["name"]
        assert re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", d["name"][len(uid) + 1:])
        for n in d["containerEdits"]["deviceNodes"]:
            if n["path"].startswith("/dev/.liken.sh-absent/"):
                # Absent: no numbers, so the runtime must stat the path and fail (a node that is
                # not minimally specified must exist on the host: the CDI specification).
                assert set(n) == {"path"}, n
            else:
                # Minimally specified, with the host node's mode and owner
                # (rules: delivery.mode-and-owner).
                assert set(n) == {"path", "type", "major", "minor", "fileMode", "uid", "gid"}, n
                assert n["path"].startswith("/dev/")
                assert n["type"] in ("c", "b")
                assert 0 <= n["fileMode"] <= 0o777, n
