"""The strict readers' schema (rules: limits.strict-inputs), held to its sources and to a second
reading.

``apischema.json`` is what scripts/apischema.py writes from lightkube-models and the Machine CRD:
the test regenerates it. The property compares :func:`check_object` with the Kubernetes project's
own OpenAPI schemas in their strict form (kubernetes-validate, a test dependency): a valid
document (each cookbook example, a slice the driver writes) with a key added at a random depth is
refused by both when the schema has no such field, with the key's full path in one line, and
accepted by both when it lands in a map (labels, attributes, opaque parameters)."""

from __future__ import annotations

import copy
import importlib.util
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.apischema import check_object
from liken_devices.errors import InputError
from liken_devices.inventory.limits import DRIVER
from liken_devices.slices import make_slice
from tests.support.hostile import mappings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.yaml"))


def test_the_schema_is_what_the_models_and_the_crd_say() -> None:
    spec = importlib.util.spec_from_file_location("apischema_script",
                                                  ROOT / "scripts" / "apischema.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert (ROOT / "src" / "liken_devices" / "apischema.json").read_text() == script.generate()


def _slice() -> dict[str, Any]:
    obj = make_slice("n1", DRIVER, [
        {"name": "usb-1-2-1-0", "attributes": {"bus": {"string": "usb"},
                                               "vendor": {"string": "10c4"}},
         "capacity": {"liken.sh/x": {"value": "1"}}},
        {"name": "pci-0000-00-02-0", "allowMultipleAllocations": True,
         "attributes": {"renderNode": {"bool": True}}}])
    obj["metadata"]["labels"] = {"app": "liken"}
    return obj


def _opaque_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "c", "annotations": {"a": "b"}},
            "spec": {"config": [{"opaque": {"driver": DRIVER, "parameters": {"k": {"v": 1}}}}],
                     "selectors": [{"cel": {"expression": "true"}}]}}


BASES: list[dict[str, Any]] = [
    *(doc for path in EXAMPLES for doc in yaml.safe_load_all(path.read_text()) if doc),
    _slice(), _opaque_class(),
    {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine", "metadata": {"name": "n1"},
     "spec": {"modules": ["serport"], "serio": [{"protocol": "pulse8-cec", "vendor": "2548",
                                                 "product": "1002"}]}},
]


def _oracle(doc: dict[str, Any]) -> str | None:
    """Why the Kubernetes project's strict schema refuses ``doc`` (None: it accepts it)."""
    kv = pytest.importorskip("kubernetes_validate")
    if doc.get("kind") == "Machine":  # no CRD in that package: its schema, by hand, is ours
        return None
    try:
        kv.validate(doc, "1.37", strict=True)
    except kv.ValidationError as exc:
        return str(exc).splitlines()[0]
    return None


@pytest.mark.parametrize("doc", BASES, ids=lambda d: f"{d['kind']}-{d['metadata']['name']}")
def test_every_valid_document_is_accepted(doc: dict[str, Any]) -> None:
    assert _oracle(doc) is None
    check_object(doc)



KEYS = st.text(string.ascii_letters + string.digits, min_size=1, max_size=12)


@pytest.mark.fuzz
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(BASES), key=KEYS, data=st.data())
def test_an_unknown_key_at_any_depth_is_refused_with_its_path(base: dict[str, Any], key: str,
                                                              data: st.DataObject) -> None:
    doc = copy.deepcopy(base)
    targets = mappings(doc)
    target, where = data.draw(st.sampled_from(targets))
    if key in target:
        return
    target[key] = {}  # an empty object: a valid value of any object-typed map (attributes)
    path = f"{where}.{key}" if where else key
    said = _oracle(doc)
    # The decoder's part: an unknown field. A required field left out or a string map given an
    # object is the API server's validation, which the readers leave to their own checks.
    unknown = said is not None and "Additional properties are not allowed" in said
    if doc.get("kind") == "Machine":  # the CRD: free-form only under metadata's maps
        unknown = not where.startswith(("metadata.labels", "metadata.annotations"))
    try:
        check_object(doc)
    except InputError as exc:
        message = str(exc)
        assert said is not None or unknown, f"refused what the API server accepts: {message}"
        assert "\n" not in message
        if unknown:
            assert f'unknown field "{path}"' in message, (message, said)
    else:
        assert not unknown, f"accepted {path}, which the API server refuses: {said}"


@pytest.mark.parametrize(("api_version", "kind", "says"), [
    ("resource.k8s.io/v2", "DeviceClass", "apiVersion 'resource.k8s.io/v2' is not read"),
    ("resource.k8s.io/v1alpha3", "DeviceClass", "is not read"),
    ("resource.k8s.io/v1", "DeviceClas", "no kind 'DeviceClas' in resource.k8s.io/v1"),
    ("v1", "DeviceClass", "no kind 'DeviceClass' in v1"),
    (None, "DeviceClass", "the DeviceClass has no apiVersion"),
    ("resource.k8s.io/v1", None, "the object has no kind"),
])
def test_an_unknown_version_or_kind_is_refused(api_version: str | None, kind: str | None,
                                               says: str) -> None:
    doc: dict[str, Any] = {"metadata": {"name": "x"}, "spec": {}}
    if api_version is not None:
        doc["apiVersion"] = api_version
    if kind is not None:
        doc["kind"] = kind
    with pytest.raises(InputError, match=says.replace("(", r"\(").replace(".", r"\.")):
        check_object(doc)


def test_a_list_keeps_only_its_own_fields() -> None:
    check_object({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                  "items": []})
    with pytest.raises(InputError, match='unknown field "item"'):
        check_object({"apiVersion": "v1", "kind": "List", "item": []})
    with pytest.raises(InputError, match=r'unknown field "metadata\.name"'):
        check_object({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClassList",
                      "metadata": {"name": "x"}, "items": []})


def test_a_value_of_the_wrong_shape_is_refused_with_its_path() -> None:
    doc = copy.deepcopy(_slice())
    doc["spec"]["devices"][0]["attributes"]["bus"] = {"string": ["usb"]}
    with pytest.raises(InputError, match=r"spec\.devices\[0\]\.attributes\.bus\.string: not "
                                         "valid: must be a value, not a list"):
        check_object(doc)
    doc = copy.deepcopy(_slice())
    doc["spec"]["devices"] = {"name": "x"}
    with pytest.raises(InputError, match=r"spec\.devices: not valid: must be a list"):
        check_object(doc)
