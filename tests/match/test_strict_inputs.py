"""``match -f`` and ``--slices`` (and ``claim-for --slices``) read their files as the API server's
strict field validation reads them (rules: limits.strict-inputs): an unknown field, apiVersion or
kind is one line on stderr naming it, and exit 2, never an answer about a document the API
server would refuse. The versions that a cluster still serves keep working."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("cel_expr_python")

from liken_devices.cli import main
from tests.match.test_allocate import SLICES
from tests.support.hostile import examples, mappings

RENDER = 'device.driver == "liken.sh" && "renderNode" in device.attributes["liken.sh"] && ' \
    'device.attributes["liken.sh"].renderNode'


def gpu_class(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": spec or {"selectors": [{"cel": {"expression": RENDER}}]}}


def claim(api_version: str = "resource.k8s.io/v1", **request: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", **(request or {"exactly": {"deviceClassName": "gpu"}})}]}}}


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: list[dict[str, Any]],
        slices: list[dict[str, Any]] | None = None, command: str = "match"
        ) -> tuple[int, str, str]:
    files = tmp_path / "c.yaml"
    files.write_text(yaml.safe_dump_all(docs))
    sl = tmp_path / "s.yaml"
    sl.write_text(yaml.safe_dump_all(SLICES if slices is None else slices))
    argv = ["match", "-f", str(files), "--slices", str(sl)] if command == "match" else \
        ["claim-for", "usb-1-2-1-0", "--slices", str(sl)]
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_class_with_selector_for_selectors_is_refused(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """Read leniently, the class has no selector and matches the first device of the node (the
    serial adapter here, the power button on a laptop): ``allocatable``, exit 0."""
    bad = gpu_class(selector=[{"cel": {"expression": RENDER}}])
    rc, out, err = run(tmp_path, capsys, [bad, claim()])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert 'DeviceClass gpu): strict decoding error: unknown field "spec.selector"' in err
    rc, out, _ = run(tmp_path, capsys, [gpu_class(), claim()])  # spelled right: the render node
    assert rc == 0 and "pci-0000-00-02-0" in out


@pytest.mark.parametrize(("path", "field"), [
    (("spec", "devices", "requests", 0, "exactly"), "selector"),
    (("spec", "devices", "requests", 0), "deviceClass"),
    (("spec", "devices"), "constraint"),
    (("metadata",), "label"),
])
def test_an_unknown_field_of_a_claim_is_named_by_its_full_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], path: tuple[Any, ...], field: str
) -> None:
    doc = claim()
    target: Any = doc
    for step in path:
        target = target[step]
    target[field] = "x"
    rc, _, err = run(tmp_path, capsys, [gpu_class(), doc])
    full = ".".join(str(s) for s in path).replace(".0", "[0]") + "." + field
    assert rc == 2 and err.count("\n") == 1
    assert f'unknown field "{full}"' in err, err


def test_an_unknown_field_in_a_pod_is_refused(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": "default"},
                "spec": {"spec": claim()["spec"]}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}],
                    "containers": [{"name": "main", "image": "busybox",
                                    "resources": {"claims": [{"name": "g"}]}}]}}
    rc, out, _ = run(tmp_path, capsys, [gpu_class(), template, pod])
    assert rc == 0, out
    pod["spec"]["containers"][0]["resources"]["claim"] = [{"name": "g"}]
    rc, _, err = run(tmp_path, capsys, [gpu_class(), template, pod])
    assert rc == 2
    assert 'unknown field "spec.containers[0].resources.claim"' in err


@pytest.mark.parametrize(("api_version", "kind", "says"), [
    ("resource.k8s.io/v2", "DeviceClass", "apiVersion 'resource.k8s.io/v2' is not read here"),
    ("resource.k8s.io/v1", "DeviceClas", "no kind 'DeviceClas' in resource.k8s.io/v1"),
    ("apps/v1", "Deployment", "apiVersion 'apps/v1' is not read here"),
])
def test_an_unknown_api_version_or_kind_is_refused(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   api_version: str, kind: str, says: str
                                                   ) -> None:
    doc = gpu_class()
    doc["apiVersion"], doc["kind"] = api_version, kind
    rc, out, err = run(tmp_path, capsys, [doc, claim()])
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert says in err


def test_the_served_beta_versions_are_read(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """v1beta1 (the request's fields on the request itself, a device's under ``basic``) and
    v1beta2 (the v1 shape) are what kubectl prints from a cluster that still serves them."""
    v1beta1 = claim("resource.k8s.io/v1beta1", deviceClassName="gpu")
    beta_slices = copy.deepcopy(SLICES)
    for s in beta_slices:
        s["apiVersion"] = "resource.k8s.io/v1beta1"
        s["spec"]["devices"] = [{"name": d["name"], "basic": {k: v for k, v in d.items()
                                                              if k != "name"}}
                                for d in s["spec"]["devices"]]
    rc, out, err = run(tmp_path, capsys, [gpu_class(), v1beta1], beta_slices)
    assert rc == 0, err
    assert "pci-0000-00-02-0" in out
    klass = gpu_class()
    klass["apiVersion"] = "resource.k8s.io/v1beta2"
    rc, out, err = run(tmp_path, capsys, [klass, claim("resource.k8s.io/v1beta2")])
    assert rc == 0, err
    # Each version has its own fields: `exactly` is no v1beta1 field.
    rc, _, err = run(tmp_path, capsys, [gpu_class(), claim("resource.k8s.io/v1beta1")])
    assert rc == 2 and 'unknown field "spec.devices.requests[0].exactly"' in err


def test_a_list_names_the_item(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = gpu_class(selector=[])
    rc, _, err = run(tmp_path, capsys, [{"apiVersion": "v1", "kind": "List",
                                         "items": [claim(), bad]}])
    assert rc == 2
    assert 'document 1: items[1] (DeviceClass gpu): strict decoding error: unknown field ' \
           '"spec.selector"' in err


@pytest.mark.parametrize("command", ["match", "claim-for"])
def test_a_slice_file_is_read_strictly(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       command: str) -> None:
    """A typo in a hand-edited slice (``atributes``) would publish a device with no attribute,
    which no selector that names one matches, and claim-for would write a claim for nothing."""
    slices = copy.deepcopy(SLICES)
    device = slices[0]["spec"]["devices"][0]
    device["atributes"] = device.pop("attributes")
    rc, out, err = run(tmp_path, capsys, [gpu_class(), claim()], slices, command)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert 'unknown field "spec.devices[0].atributes"' in err
    slices[0]["apiVersion"] = "resource.k8s.io/v1alpha3"
    rc, _, err = run(tmp_path, capsys, [gpu_class(), claim()], slices, command)
    assert rc == 2 and "apiVersion 'resource.k8s.io/v1alpha3' is not read here" in err


# ---- fuzz: a key at a random depth of a valid file ---------------------------------------------

EXAMPLE_FILES = sorted(Path(__file__).resolve().parents[2].joinpath("docs", "examples")
                       .glob("*.yaml"))



def _unknown(doc: dict[str, Any]) -> bool:
    """Whether the Kubernetes project's strict schema finds a property it does not know."""
    kv = pytest.importorskip("kubernetes_validate")
    try:
        kv.validate(doc, "1.37", strict=True)
    except kv.ValidationError as exc:
        return "Additional properties are not allowed" in str(exc).splitlines()[0]
    return False


@pytest.mark.fuzz
@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(example=st.sampled_from(EXAMPLE_FILES),
       key=st.text("abcdefghijklmnopqrstuvwxyzXYZ0123456789", min_size=1, max_size=10),
       data=st.data())
def test_a_key_at_any_depth_of_a_cookbook_file_is_refused_naming_its_path(
        tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
        example: Path, key: str, data: st.DataObject) -> None:
    """The cookbook's files, each with one key added where the draw puts it: refused (exit 2,
    one line naming the field's path) exactly when the API server refuses the field; a key in a
    map (labels, an annotation) leaves the file valid and ``match`` answers (exit 0 or 1)."""
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    i = data.draw(st.integers(0, len(docs) - 1))
    target, where = data.draw(st.sampled_from(mappings(docs[i])))
    if key in target:
        return
    target[key] = "x"
    path = f"{where}.{key}" if where else key
    unknown = _unknown(docs[i])
    tmp = tmp_path_factory.mktemp("f")
    (tmp / "c.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp / "s.yaml").write_text(yaml.safe_dump_all(SLICES))
    rc = main(["match", "-f", str(tmp / "c.yaml"), "--slices", str(tmp / "s.yaml")])
    _, err = capsys.readouterr()
    if unknown:
        assert rc == 2 and err.count("\n") == 1, err
        assert f'unknown field "{path}"' in err, err
    else:
        assert 'unknown field' not in err, err


@pytest.mark.parametrize("style", ["yaml", "json"])
def test_a_field_written_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          style: str) -> None:
    """Strict field validation refuses a duplicate field too: read leniently, the last
    ``selectors`` wins and the first one's expressions are silently dropped."""
    sel = '[{"cel": {"expression": "true"}}]'
    text = ('{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": '
            f'{{"name": "gpu"}}, "spec": {{"selectors": {sel}, "selectors": {sel}}}}}')
    if style == "yaml":
        text = ("apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu}\n"
                "spec:\n  selectors: []\n  selectors: []\n")
    files = tmp_path / "c.yaml"
    files.write_text(text)
    sl = tmp_path / "s.yaml"
    sl.write_text(yaml.safe_dump_all(SLICES))
    assert main(["match", "-f", str(files), "--slices", str(sl)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'selectors' appears twice in one mapping" in err, err
