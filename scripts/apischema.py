"""Write src/liken_devices/apischema.json: the fields of every kind the strict readers read.

The Kubernetes kinds come from the lightkube-models package (its generated dataclasses list
every field of each API type, with its JSON name); the Machine from the Machine CRD in
deploy/liken-devices/machine-crd.yaml. tests/test_apischema.py regenerates the schema and fails
when the committed file differs, so the file is never edited by hand.

    .venv/bin/python scripts/apischema.py          # rewrite the file
    .venv/bin/python scripts/apischema.py --check  # exit 1 when it is out of date

The format (read by src/liken_devices/apischema.py): ``kinds`` maps an apiVersion to its kinds,
each to the name of its type; ``types`` maps a type's name to its fields, each to a reference:
``""`` a scalar, ``"*"`` anything (free-form JSON), ``"[R"`` a list of R, ``"{R"`` a map of
string to R, any other string the name of a type.
"""

from __future__ import annotations

import json
import sys
from importlib import import_module, metadata
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "liken_devices" / "apischema.json"
CRD = ROOT / "deploy" / "liken-devices" / "machine-crd.yaml"

RESOURCE_KINDS = ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
RESOURCE_VERSIONS = ("v1", "v1beta2", "v1beta1")
# lightkube-models types every map as a plain ``dict``; the values of the DRA maps are objects
# whose fields count too (the OpenAPI schema's additionalProperties).
MAP_VALUES = {
    ("Device", "attributes"): "DeviceAttribute",
    ("BasicDevice", "attributes"): "DeviceAttribute",
    ("Device", "capacity"): "DeviceCapacity",
    ("BasicDevice", "capacity"): "DeviceCapacity",
    ("Device", "nodeAllocatableResources"): "NodeAllocatableResource",
    ("BasicDevice", "nodeAllocatableResources"): "NodeAllocatableResource",
    ("CounterSet", "counters"): "Counter",
    ("DeviceCounterConsumption", "counters"): "Counter",
}
FREE_FORM = ("RawExtension", "FieldsV1")  # JSON of any shape inside


SCALARS = {"str", "int", "float", "bool", "datetime", "date", "Time", "MicroTime", "Quantity",
           "IntOrString"}


def _name(cls: type) -> str:
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


def _strip(note: str) -> str:
    while note.startswith("Optional["):
        note = note[len("Optional["):-1]
    return note


class Walker:
    """The fields of lightkube-models' dataclasses, read from their annotations (strings such
    as ``'Optional[List[meta_v1.Condition]]'``) and JSON names (``__struct_encode_fields__``)."""

    def __init__(self) -> None:
        self.types: dict[str, dict[str, str]] = {}

    def struct(self, cls: type) -> str:
        name = _name(cls)
        if name in self.types:
            return name
        fields: dict[str, str] = {}
        self.types[name] = fields
        notes: dict[str, str] = cls.__annotations__
        module = import_module(cls.__module__)
        for attr, json_name in zip(cls.__struct_fields__,  # type: ignore[attr-defined]
                                   cls.__struct_encode_fields__, strict=True):
            value = MAP_VALUES.get((cls.__name__, json_name))
            if value is not None:
                fields[json_name] = "{" + self.struct(getattr(module, value))
            else:
                fields[json_name] = self.ref(_strip(str(notes[attr])), module)
        return name

    def ref(self, note: str, module: Any) -> str:
        if note.startswith("List["):
            return "[" + self.ref(_strip(note[len("List["):-1]), module)
        if note.startswith(("Dict[", "dict")):
            return "{*"
        base = note.rsplit(".", 1)[-1]
        if base in FREE_FORM:
            return "*"
        if base in SCALARS:
            return ""
        if "." in note:
            prefix, _, cls_name = note.rpartition(".")
            module = import_module(f"lightkube.models.{prefix}")
            note = cls_name
        target = getattr(module, note)
        if not hasattr(target, "__struct_fields__"):
            raise SystemExit(f"no rule for the annotation {note!r}")
        return self.struct(target)

    def crd(self, name: str, schema: dict[str, Any]) -> str:
        """A type from an OpenAPI v3 schema of the CRD (properties, items)."""
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return "*"
        kind = schema.get("type")
        if kind == "array":
            return "[" + self.crd(name + ".item", schema.get("items") or {})
        if kind != "object":
            return ""
        props = schema.get("properties")
        if props is None:
            return "{*"
        fields: dict[str, str] = {}
        self.types[name] = fields
        for key, sub in props.items():
            fields[key] = self.crd(f"{name}.{key}", sub)
        return name


def generate() -> str:
    walker = Walker()
    kinds: dict[str, dict[str, str]] = {}
    for version in RESOURCE_VERSIONS:
        module = import_module(f"lightkube.models.resource_{version}")
        kinds[f"resource.k8s.io/{version}"] = {
            k: walker.struct(getattr(module, k)) for k in RESOURCE_KINDS}
    core = import_module("lightkube.models.core_v1")
    meta = import_module("lightkube.models.meta_v1")
    kinds["v1"] = {"Pod": walker.struct(core.Pod)}
    walker.struct(meta.ListMeta)
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    machine = walker.crd("liken.Machine", schema)
    walker.types[machine]["metadata"] = _name(meta.ObjectMeta)
    kinds[f"{crd['spec']['group']}/{version['name']}"] = {crd["spec"]["names"]["kind"]: machine}
    doc = {
        "source": f"lightkube-models {metadata.version('lightkube-models')} and "
                  "deploy/liken-devices/machine-crd.yaml, by scripts/apischema.py",
        "kinds": kinds,
        "types": dict(sorted(walker.types.items())),
    }
    return json.dumps(doc, indent=0, sort_keys=False, separators=(",", ":")) + "\n"


def main() -> int:
    text = generate()
    if "--check" in sys.argv[1:]:
        if OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run scripts/apischema.py",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
