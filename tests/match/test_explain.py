"""``match`` explains a failing selector by the comparison that failed and the value CEL read for
its PATH, and evaluates as the scheduler's allocator does, errors included.

The explanation property: selectors of the forms the explanations know (``PATH OP LITERAL``,
``LITERAL OP PATH``, ``startsWith``, ``in [...]``, ``has()``, ``compareTo(semver())``), with PATH
spelled three ways, over real recordings' slices; for every device they are false on, the
explanation names PATH and the value the device carries, as a deliberately simple model reads
it from the slice's JSON (the attribute in the driver's domain, or absent); for every device
they fail on, the same plus the value's type.

The allocator: devices in the allocator's order (pool by pool, a slice's devices in order),
class selectors before the request's, a device in use skipped before its selectors run, and a
runtime error on a device the search reaches stops the claim (and the pod's other claims) with
an answer naming the selector, the device, the attribute, its value and its type.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("cel_expr_python")

from liken_devices.cli import main
from liken_devices.inventory.limits import DRIVER
from liken_devices.match.allocate import Evaluator
from liken_devices.match.cel import DeviceInput, Outcome, environment
from liken_devices.match.model import DeviceClass, Subrequest, slice_devices
from tests.match.test_allocate import CLASSES, SLICES, claim, dev, req, slice_
from tests.match.test_claimfor import slice_of
from tests.support.corpus import SYSFS

RECORDINGS = ["thinkpad-t60p-systemd-sys-script.umockdev", "mir-standard-drm-devices.umockdev",
              "udevdb-only/checkbox-dell-latitudee6430-udevdb.umockdev"]


def model_value(device: dict[str, Any], name: str) -> str | None:
    """The attribute ``name`` of the driver's domain as a selector would write it, from the
    slice's JSON; None when the device lacks it."""
    attr = device["attributes"].get(name) or device["attributes"].get(f"{DRIVER}/{name}")
    if attr is None:
        return None
    ((kind, value),) = attr.items()
    if kind == "string":
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if kind == "bool":
        return "true" if value else "false"
    if kind == "int":
        return str(value)
    return f'semver("{value}")'


def model_type(device: dict[str, Any], name: str) -> str:
    attr = device["attributes"].get(name) or device["attributes"].get(f"{DRIVER}/{name}")
    ((kind, _),) = attr.items()
    return {"version": "semver"}.get(kind, kind)


def cel_literal(kind: str, value: Any) -> str:
    if kind == "string":
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if kind == "bool":
        return "true" if value else "false"
    if kind == "int":
        return str(value)
    return f'semver("{value}")'


SPELLINGS = ('device.attributes["liken.sh"].{n}', 'device.attributes["liken.sh"]["{n}"]',
             "device.attributes[device.driver].{n}")


@st.composite
def selectors(draw: Any, slice_obj: dict[str, Any]) -> tuple[str, str, str]:
    """(selector, PATH, attribute name) of one of the explained forms."""
    devices = slice_obj["spec"]["devices"]
    values = sorted({(n, k, str(v)) for d in devices for n, a in d["attributes"].items()
                     if "/" not in n for k, v in a.items()})
    name, kind, _ = draw(st.sampled_from(values))
    path = draw(st.sampled_from(SPELLINGS)).format(n=name)
    same = [v for n, k, v in values if n == name and k == kind]
    raw = draw(st.sampled_from(same))
    value: Any = {"int": int, "bool": lambda t: t == "True"}.get(kind, str)(raw)
    lit = cel_literal(kind, value)
    forms = [f"{path} == {lit}", f"{lit} == {path}", f"{path} != {lit}", f"{path} in [{lit}]"]
    if not path.endswith('"]'):  # has() takes a field selection only
        forms += [f"has({path})", f"!has({path})"]
    if kind == "string":
        forms.append(f"{path}.startsWith({cel_literal('string', value[:2])})")
    if kind == "int":
        forms += [f"{path} > {value}", f"{value} <= {path}"]
    if kind == "version":
        forms.append(f"{path}.compareTo(semver({cel_literal('string', value)})) > 0")
    selector = draw(st.sampled_from(forms))
    if draw(st.booleans()):
        selector = f'device.driver == "{DRIVER}" && ' + selector
    return selector, path, name


@pytest.mark.parametrize("recording", RECORDINGS)
@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_value_shown_is_the_value_the_device_carries(recording: str, data: Any) -> None:
    path_file = SYSFS / recording
    if not path_file.is_file():
        pytest.skip(f"{path_file} is absent")
    slice_obj = slice_of(path_file)
    selector, path, name = data.draw(selectors(slice_obj))
    evaluator = Evaluator(environment(), {"c": DeviceClass("c", ())})
    sub = Subrequest("r", "c", (selector,), False, 1, False)
    by_name = {d["name"]: d for d in slice_obj["spec"]["devices"]}
    for device in slice_devices([slice_obj]):
        rejection = evaluator.first_failure(sub, device)
        if rejection is None:
            continue
        raw = by_name[device.name]
        want = model_value(raw, name)
        if want is None:
            assert f"{path} is absent" in rejection.message, (selector, rejection.message)
        elif rejection.error:
            assert f"{path} is {want} ({model_type(raw, name)})" in rejection.message, \
                (selector, rejection.message)
        else:
            assert f"{path} is {want}" in rejection.message, (selector, rejection.message)
            assert "is false" not in rejection.message, (selector, rejection.message)


def explain(selector: str, **attrs: Any) -> tuple[str, bool]:
    device = slice_devices([slice_("liken.sh", [dev("d", **attrs)])])[0]
    evaluator = Evaluator(environment(), {"c": DeviceClass("c", ())})
    rejection = evaluator.first_failure(Subrequest("r", "c", (selector,), False, 1, False),
                                        device)
    assert rejection is not None
    return rejection.message, rejection.error


def test_the_operand_that_failed_not_the_first_one_mentioned() -> None:
    """The issue's case: the vendor failed, not device.driver."""
    msg, error = explain('device.attributes[device.driver].vendor == "10de"', vendor="1002")
    assert not error
    assert msg == 'device.attributes[device.driver].vendor is "1002", the selector wants "10de"'


@pytest.mark.parametrize(("selector", "expected"), [
    ('"10de" == device.attributes["liken.sh"].vendor',
     'device.attributes["liken.sh"].vendor is "1002", the selector wants "10de"'),
    ('device.attributes["liken.sh"].n > 4', 'device.attributes["liken.sh"].n is 3, '
                                            'the selector wants > 4'),
    ('4 < device.attributes["liken.sh"].n', 'device.attributes["liken.sh"].n is 3, '
                                            'the selector wants > 4'),
    ('device.attributes["liken.sh"].vendor.startsWith("8")',
     'device.attributes["liken.sh"].vendor is "1002", the selector wants it to start with "8"'),
    ('device.attributes["liken.sh"].vendor in ["10de", "8086"]',
     'device.attributes["liken.sh"].vendor is "1002", the selector wants one of '
     '["10de", "8086"]'),
    ('has(device.attributes["liken.sh"].serial)',
     'device.attributes["liken.sh"].serial is absent, the selector wants it present'),
    ('!has(device.attributes["liken.sh"].vendor)',
     'device.attributes["liken.sh"].vendor is "1002", the selector wants it absent'),
])
def test_each_form_names_its_comparison(selector: str, expected: str) -> None:
    msg, error = explain(selector, vendor="1002", n=3)
    assert not error
    assert msg == expected


def test_compare_to_a_version() -> None:
    device = slice_devices([slice_("liken.sh", [{"name": "d", "attributes": {
        "fw": {"version": "1.2.3"}}}])])[0]
    evaluator = Evaluator(environment(), {"c": DeviceClass("c", ())})
    rejection = evaluator.first_failure(Subrequest("r", "c", (
        'device.attributes["liken.sh"].fw.compareTo(semver("2.0.0")) >= 0',), False, 1, False),
        device)
    assert rejection is not None
    assert rejection.message.startswith('device.attributes["liken.sh"].fw is semver("1.2.3"), '
                                        "the selector wants ")
    assert 'compareTo(semver("2.0.0")) >= 0' in rejection.message


def test_a_runtime_error_names_the_attribute_its_value_and_type() -> None:
    msg, error = explain('device.attributes["liken.sh"].vendor > 5', vendor="10de")
    assert error
    assert "CEL runtime error" in msg
    assert 'device.attributes["liken.sh"].vendor is "10de" (string)' in msg
    msg, error = explain('device.driver == "liken.sh" && device.attributes["liken.sh"].serial '
                         '== "x"', vendor="10de")
    assert error
    assert "no such key: serial" in msg
    assert 'device.attributes["liken.sh"].serial is absent' in msg


# -- the allocator's order and its errors -----------------------------------------------------


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *objs: Any,
        slices: list[dict[str, Any]] | None = None, output: str = "json") -> tuple[int, Any]:
    files = tmp_path / "c.yaml"
    files.write_text(yaml.safe_dump_all([*CLASSES, *objs]))
    sl = tmp_path / "s.yaml"
    sl.write_text(yaml.safe_dump_all(slices if slices is not None else SLICES))
    rc = main(["match", "-f", str(files), "--slices", str(sl), "-o", output])
    out = capsys.readouterr().out
    return rc, (yaml.safe_load(out) if output != "text" else out)


def test_an_error_on_a_device_the_allocator_reaches_stops_the_claim(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The serial class's selector fails on the first stick (it has no `speed`), which the
    allocator reaches before the second: the claim cannot be allocated, though the second
    stick would match."""
    slices = [slice_("liken.sh", [
        dev("usb-1-2-1-0", bus="usb", vendor="10c4", subsystem="tty"),
        dev("usb-1-3-1-0", bus="usb", vendor="0403", subsystem="tty", speed=12)])]
    rc, out = run(tmp_path, capsys, claim([req("s", "serial",
                                              'device.attributes["liken.sh"].speed == 12')]),
                  slices=slices)
    assert rc == 1
    c = out["nodes"][0]["asked"][0]["claims"][0]
    assert c["allocatable"] is False
    reason = c["reason"]
    assert "request s selector 1 on usb-1-2-1-0" in reason
    assert "no such key: speed" in reason
    assert 'device.attributes["liken.sh"].speed is absent' in reason
    assert c["stop"]["device"] == {"driver": "liken.sh", "pool": "n1", "device": "usb-1-2-1-0"}


def test_an_error_past_the_device_chosen_is_not_reached(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slices = [slice_("liken.sh", [
        dev("usb-1-3-1-0", bus="usb", vendor="0403", subsystem="tty", speed=12),
        dev("usb-1-2-1-0", bus="usb", vendor="10c4", subsystem="tty")])]
    rc, out = run(tmp_path, capsys, claim([req("s", "serial",
                                              'device.attributes["liken.sh"].speed == 12')]),
                  slices=slices)
    assert rc == 0
    c = out["nodes"][0]["asked"][0]["claims"][0]
    assert c["requests"][0]["devices"] == ["usb-1-3-1-0"]
    assert c["warnings"]


def test_a_device_in_use_is_skipped_before_its_selectors_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The erring stick is held by another claim: the allocator never evaluates it."""
    slices = [slice_("liken.sh", [
        dev("usb-1-2-1-0", bus="usb", vendor="10c4", subsystem="tty"),
        dev("usb-1-3-1-0", bus="usb", vendor="0403", subsystem="tty", speed=12)])]
    held = claim([req("h", "serial")], name="holder", allocated=[
        {"request": "h", "driver": "liken.sh", "pool": "n1", "device": "usb-1-2-1-0"}])
    rc, _out = run(tmp_path, capsys, held,
                  claim([req("s", "serial", 'device.attributes["liken.sh"].speed == 12')]),
                  slices=slices)
    assert rc == 0


def test_allocation_mode_all_evaluates_every_device(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slices = [slice_("liken.sh", [
        dev("usb-1-3-1-0", bus="usb", vendor="0403", subsystem="tty", speed=12),
        dev("usb-1-2-1-0", bus="usb", vendor="10c4", subsystem="tty")])]
    every = req("s", "serial", 'device.attributes["liken.sh"].speed == 12')
    every["exactly"]["allocationMode"] = "All"
    every["exactly"].pop("count", None)
    rc, out = run(tmp_path, capsys, claim([every]), slices=slices)
    assert rc == 1
    assert "usb-1-2-1-0" in out["nodes"][0]["asked"][0]["claims"][0]["reason"]


def test_a_missing_class_stops_the_pods_other_claims_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def template(name: str, cls: str) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [req("s", cls)]}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"resourceClaims": [{"name": "a", "resourceClaimTemplateName": "good"},
                                       {"name": "b", "resourceClaimTemplateName": "bad"}],
                    "containers": [{"name": "c", "image": "x"}]}}
    rc, out = run(tmp_path, capsys, template("good", "serial"), template("bad", "nosuch"), pod)
    assert rc == 1
    claims = out["nodes"][0]["asked"][0]["claims"]
    assert [c["allocatable"] for c in claims] == [False, False]
    assert "DeviceClass nosuch not found" in claims[0]["reason"]
    assert "ResourceClaimTemplate default/bad" in claims[0]["reason"]


# -- names as the API names them, and constraints' values ---------------------------------------


def test_devices_of_two_drivers_are_named_driver_pool_device(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pair = [req("gpu", "render"), req("media", "media")]
    constraint = [{"requests": ["gpu", "media"],
                   "matchAttribute": "resource.kubernetes.io/pciBusID"}]
    rc, text = run(tmp_path, capsys, claim(pair, constraint), output="text")
    assert rc == 0
    assert "gpu gets liken.sh/n1/pci-0000-00-02-0; media gets " \
           "media.liken.sh/n1/pci-0000-00-02-0" in text
    assert 'matchAttribute resource.kubernetes.io/pciBusID: liken.sh/n1/pci-0000-00-02-0 ' \
           '"0000:00:02.0", media.liken.sh/n1/pci-0000-00-02-0 "0000:00:02.0"' in text
    rc, out = run(tmp_path, capsys, claim(pair, constraint))
    c = out["nodes"][0]["asked"][0]["claims"][0]
    assert c["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": "liken.sh", "pool": "n1", "device": "pci-0000-00-02-0"},
        {"request": "media", "driver": "media.liken.sh", "pool": "n1",
         "device": "pci-0000-00-02-0"}]
    (con,) = c["constraints"]
    assert con["satisfied"] is True
    assert [v["value"] for v in con["values"]] == [{"string": "0000:00:02.0"}] * 2


def test_a_failed_constraint_shows_the_devices_that_disagree(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pair = [req("gpu", "render"),
            req("media", "media", 'device.attributes["resource.kubernetes.io"].pciBusID'
                                  ' == "0000:03:00.0"')]
    constraint = [{"requests": ["gpu", "media"],
                   "matchAttribute": "resource.kubernetes.io/pciBusID"}]
    rc, out = run(tmp_path, capsys, claim(pair, constraint))
    assert rc == 1
    c = out["nodes"][0]["asked"][0]["claims"][0]
    assert 'liken.sh/n1/pci-0000-00-02-0="0000:00:02.0"' in c["reason"]
    assert 'media.liken.sh/n1/pci-0000-03-00-0="0000:03:00.0"' in c["reason"]
    (con,) = c["constraints"]
    assert con["satisfied"] is False
    assert {(v["driver"], v["device"], v["value"]["string"]) for v in con["values"]} == {
        ("liken.sh", "pci-0000-00-02-0", "0000:00:02.0"),
        ("media.liken.sh", "pci-0000-03-00-0", "0000:03:00.0")}


def test_one_pool_keeps_plain_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    only = [SLICES[0]]
    rc, text = run(tmp_path, capsys, claim([req("s", "serial",
                                               'device.attributes["liken.sh"].vendor == "0403"')]),
                   slices=only, output="text")
    assert rc == 0
    assert re.search(r"=> allocatable: s gets usb-1-3-1-0\b", text)


def test_an_optional_operand_is_explained_not_a_traceback() -> None:
    # A generated claim on the real cluster: `.?name.orValue(…)` read as a PATH gave the CEL
    # binding an optional it cannot convert, and `match` ended in a traceback.
    env = environment()
    device = DeviceInput("liken.sh", {"address": {"string": "LNXPWRBN:00"}}, {})
    data = env.device_data(device)
    value, error = env.evaluate(
        env.compile_value('device.attributes["liken.sh"].?address'), data)
    assert error is None and env.show(value) == "a value of type optional"
    expression = 'device.attributes["liken.sh"].?address.orValue("zz") == "x"'
    assert env.matches(env.compile(expression), data) == Outcome(False, None)
