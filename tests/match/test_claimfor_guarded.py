"""What ``claim-for`` writes never stops the scheduler: every selector it generates, of the class
and of the request, evaluates without a CEL error on every device of every recording's slice
(and on devices of another driver whose attributes of the same names have other types), and
together they select exactly the device in its own slice.

The scheduler's allocator stops the whole claim at the first selector that fails with an error
on a device it reaches (KEP-4381), so a selector reading an attribute some device lacks, or
calling a string method on a value of another type, makes the claim unallocatable on a node
that has such a device. The oracle is the CEL runtime's own answer on each device, taken one
selector at a time.

Also: values from a slice file are hostile. Any Unicode string (astral-plane characters
included), any 64-bit integer and any version becomes a literal that parses, compiles and
selects the device; a value CEL cannot state is left out, never pasted.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
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
from liken_devices.match.cel import environment
from liken_devices.match.claimfor import Ambiguous, generate
from liken_devices.match.model import Device, slice_devices
from liken_devices.slices import make_slice
from tests.match.test_claimfor import slice_of
from tests.support.corpus import recordings

NODE = "n1"

# Another driver's devices whose attributes share liken.sh's names with other types: a guard
# that only tests presence would still fail on them (endsWith on an int).
STRANGERS = [
    Device("other.example.com", "n1", f"odd-{i}", NODE, attrs, {}, False)
    for i, attrs in enumerate([
        {"liken.sh/address": {"int": 3}, "liken.sh/subsystem": {"bool": True},
         "liken.sh/vendor": {"int": 4302}, "liken.sh/serial": {"version": "1.0.0"},
         "liken.sh/bus": {"string": "usb"}, "liken.sh/renderNode": {"string": "yes"}},
        {"address": {"bool": False}, "subsystem": {"int": 1}},
        {},
    ])
]


@cache
def corpus() -> list[tuple[str, dict[str, Any]]]:
    return [(str(p.name), slice_of(p)) for p in recordings()]


@cache
def every_device() -> list[Device]:
    """One device per distinct attribute set across the corpus, and the strangers."""
    seen: dict[str, Device] = {}
    for i, (_, s) in enumerate(corpus()):
        for d in slice_devices([s]):
            # Every recording's node is n1: a pool of its own keeps the devices apart.
            seen.setdefault(json.dumps(d.attributes, sort_keys=True), replace(d, pool=f"r{i}"))
    return [*seen.values(), *STRANGERS]


def generated(slice_obj: dict[str, Any], name: str, **kw: Any) -> tuple[list[str], list[str]]:
    """The class's and the request's selectors for ``name``."""
    try:
        objects = generate(slice_obj, name, **kw).objects
    except Ambiguous:
        objects = generate(slice_obj, name, by_address=True).objects
    cls = [s["cel"]["expression"] for s in objects[0]["spec"]["selectors"]]
    (request,) = objects[1]["spec"]["spec"]["devices"]["requests"]
    return cls, [s["cel"]["expression"] for s in request["exactly"].get("selectors", [])]


def test_every_generated_selector_is_safe_on_every_device_of_the_corpus() -> None:
    if not recordings():
        pytest.skip("the recordings are absent")
    everyone = every_device()
    expressions: dict[str, tuple[str, str]] = {}
    for where, slice_obj in corpus():
        evaluator = Evaluator(environment(), {})
        own = slice_devices([slice_obj])
        for device in slice_obj["spec"]["devices"]:
            for kw in ({}, {"any_of_kind": True}):
                cls, req = generated(slice_obj, device["name"], **kw)
                for expression in [*cls, *req]:
                    expressions.setdefault(expression, (where, device["name"]))
                    for d in own:
                        outcome = evaluator.outcome(expression, d)
                        assert outcome.error is None, (where, device["name"], expression,
                                                       d.name, outcome.error)
                chosen = [d.name for d in own
                          if all(evaluator.outcome(e, d).matched for e in [*cls, *req])]
                if kw:
                    assert device["name"] in chosen
                else:
                    assert chosen == [device["name"]], (where, device["name"], chosen)
    evaluator = Evaluator(environment(), {})
    for expression, origin in expressions.items():
        for d in everyone:
            outcome = evaluator.outcome(expression, d)
            assert outcome.error is None, (origin, expression, d.name, outcome.error)
    assert len(expressions) * len(everyone) > 10_000


def test_the_class_of_a_render_node_does_not_err_on_the_display_half() -> None:
    """The issue's case: renderNode exists on one half of a GPU only."""
    gpu = make_slice(NODE, DRIVER, [
        {"name": "pci-0000-00-02-0", "attributes": {
            "bus": {"string": "pci"}, "vendor": {"string": "8086"},
            "product": {"string": "46a6"}, "subsystem": {"string": "drm"},
            "renderNode": {"bool": True}, "address": {"string": "0000:00:02.0"}}},
        {"name": "pci-0000-00-02-0-display", "attributes": {
            "bus": {"string": "pci"}, "vendor": {"string": "8086"},
            "product": {"string": "46a6"}, "subsystem": {"string": "drm"},
            "displayNode": {"bool": True}, "address": {"string": "0000:00:02.0"}}},
        {"name": "usb-1-2", "attributes": {"bus": {"string": "usb"},
                                           "vendor": {"string": "1a86"}}},
    ])
    cls, req = generated(gpu, "pci-0000-00-02-0")
    evaluator = Evaluator(environment(), {})
    for d in slice_devices([gpu]):
        for e in [*cls, *req]:
            assert evaluator.outcome(e, d).error is None, (e, d.name)
    assert 'has(device.attributes["liken.sh"].renderNode) && ' \
           'device.attributes["liken.sh"].renderNode == true' in cls


def stick(serial: Any, kind: str = "string", **extra: Any) -> dict[str, Any]:
    attrs = {"bus": {"string": "usb"}, "vendor": {"string": "10c4"},
             "product": {"string": "ea60"}, "subsystem": {"string": "tty"},
             "address": {"string": "1-2:1.0"}, "serial": {kind: serial}, **extra}
    return {"name": "usb-1-2-1-0", "attributes": attrs}


def twin(serial: Any, kind: str = "string") -> dict[str, Any]:
    d = stick(serial, kind)
    d["name"] = "usb-1-3-1-0"
    d["attributes"]["address"] = {"string": "1-3:1.0"}
    return d


def selects_only_the_stick(slice_obj: dict[str, Any]) -> list[str]:
    cls, req = generated(slice_obj, "usb-1-2-1-0")
    env = environment()
    for e in [*cls, *req]:
        env.compile(e)  # parses and compiles in the DRA environment
    evaluator = Evaluator(env, {})
    return [d.name for d in slice_devices([slice_obj])
            if all(evaluator.outcome(e, d).matched for e in [*cls, *req])]


@pytest.mark.fuzz
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(serial=st.text(min_size=1, max_size=40), other=st.text(min_size=1, max_size=40))
def test_any_unicode_serial_becomes_a_literal_that_selects_the_device(serial: str,
                                                                      other: str) -> None:
    """Arbitrary strings (hypothesis draws astral-plane characters, quotes, backslashes and
    control characters): the class and claim compile and select the stick, not its twin."""
    if other == serial:
        other += "x"
    assert selects_only_the_stick(make_slice(NODE, DRIVER, [stick(serial), twin(other)])) == \
        ["usb-1-2-1-0"]


def test_an_emoji_serial_is_written_as_one_code_point() -> None:
    _cls, req = generated(make_slice(NODE, DRIVER, [stick("\U0001f600A1")]), "usb-1-2-1-0")
    joined = " ".join(req)
    assert "\\U0001f600A1" in joined and "\\ud83d" not in joined.lower()


@pytest.mark.fuzz
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(serial=st.integers(-(2**63), 2**63 - 1), other=st.integers(-(2**63), 2**63 - 1))
def test_any_int64_value_becomes_a_literal_that_selects_the_device(serial: int,
                                                                   other: int) -> None:
    if other == serial:
        other = serial - 1 if serial > -(2**63) else serial + 1
    assert selects_only_the_stick(make_slice(NODE, DRIVER, [stick(serial, "int"),
                                                            twin(other, "int")])) == \
        ["usb-1-2-1-0"]


SEMVER = st.builds(
    lambda a, b, c, pre: f"{a}.{b}.{c}" + (f"-{pre}" if pre else ""),
    st.integers(0, 2**40), st.integers(0, 999), st.integers(0, 999),
    st.one_of(st.just(""), st.from_regex(r"(?:0|[1-9][0-9]{0,3}|[a-zA-Z-][0-9a-zA-Z-]{0,6})"
                                         r"(?:\.(?:0|[1-9][0-9]{0,3}|[a-zA-Z-][0-9a-zA-Z-]{0,6}))"
                                         r"{0,2}", fullmatch=True)))


@pytest.mark.fuzz
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=SEMVER, other=SEMVER)
def test_any_version_becomes_a_literal_that_selects_the_device(version: str,
                                                               other: str) -> None:
    if other == version:
        other = "99999999." + other.split(".", 1)[1]
    assert selects_only_the_stick(make_slice(NODE, DRIVER, [stick(version, "version"),
                                                            twin(other, "version")])) == \
        ["usb-1-2-1-0"]


@pytest.mark.fuzz
@pytest.mark.parametrize("value", [
    "1) || true || (1", "0x10", "1e3", True, 2**63, -(2**63) - 1, None, [1], {"a": 1}])
def test_an_int_that_is_not_an_int64_is_never_pasted(value: Any, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile --slices file: an ``int`` attribute that is text, a bool, out of range or no
    scalar is never pasted into a selector."""
    slices = tmp_path / "s.yaml"
    slices.write_text(yaml.safe_dump(make_slice(NODE, DRIVER, [stick(value, "int"),
                                                               twin(value, "int")])))
    rc = main(["claim-for", "usb-1-2-1-0", "--slices", str(slices)])
    out, err = capsys.readouterr()
    # Refused (exit 1) when the value is left out, bad input (exit 2) when the value is no
    # DeviceAttribute the API would hold; either way nothing is written.
    assert rc in (1, 2), err
    assert ("cannot be told apart from usb-1-3-1-0" in err) if rc == 1 else ("not valid" in err)
    assert len(err.strip().splitlines()) == 1
    assert out == ""


def test_a_refusal_never_prints_an_empty_list(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A device that its own selectors cannot select (a version CEL cannot read, which the
    API server would not hold either) is bad input, said in one line; never "cannot be told
    apart from :"."""
    bad = stick("A1")
    bad["attributes"]["firmware"] = {"version": "not-a-version"}
    slices = tmp_path / "s.yaml"
    slices.write_text(yaml.safe_dump(make_slice(NODE, DRIVER, [bad, twin("B2")])))
    rc = main(["claim-for", "usb-1-2-1-0", "--slices", str(slices)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "apart from :" not in err and "not valid" in err
    assert len(err.strip().splitlines()) == 1
