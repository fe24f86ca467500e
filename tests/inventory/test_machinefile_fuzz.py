"""Fuzz: generated Machine files are read into a valid spec or refused in one line.

The property (README, "Fuzzing"): :func:`read_machine_file` returns a spec whose every module
name, ID and serial passed its check, or raises :class:`InputError` with one line; the command
given the file exits 0 or 2 with one line, no traceback, within a memory limit and a deadline.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.errors import InputError
from liken_devices.inventory.machinefile import read_machine_file
from tests.support.hostile import assert_fails_closed, examples, mappings, run_cli
from tests.support.sysfs_builder import SysfsBuilder

pytestmark = pytest.mark.fuzz

# YAML's surprises: numbers in many spellings, booleans, nulls, tags, anchors, merges, documents.
SURPRISES = ["0x2548", "2548", "0123", "1.5", "1e3", "on", "off", "yes", "~", "null", ".inf",
             "2024-01-02", "!!binary aGk=", "&a x", "*a", "<<: *a", "---", "...", "!!python/none",
             "\t", "'", '"', "[", "{", "&a [*a]", "? x", "|\n  x", ">\n  x", "é", "\u2028",
             "\x85", "\ufeff"]
scalar = st.one_of(st.text(max_size=12), st.integers(), st.booleans(), st.none(),
                   st.floats(allow_nan=False), st.sampled_from(["pulse8_cec", "pulse8-cec",
                                                                "rainshadow-cec", "2548", "1d50"]))
value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.sampled_from(["modules", "serio", "protocol", "vendor",
                                                        "product", "serial", "spec", "kind"]),
                                       inner, max_size=4), max_leaves=20)


@st.composite
def machine_text(draw: st.DrawFn) -> str:
    doc: Any = draw(value)
    try:
        text = yaml.safe_dump(doc, default_flow_style=draw(st.booleans()), allow_unicode=True)
    except yaml.YAMLError:
        text = ""
    lines = text.splitlines()
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(lines)))
        piece = draw(st.sampled_from(SURPRISES)) if draw(st.booleans()) else draw(
            st.text(max_size=20))
        key = draw(st.sampled_from(["vendor: ", "serial: ", "- ", "modules: ", "", "  "]))
        lines.insert(at, key + piece)
    return "\n".join(lines) + "\n"


def check(path: Path) -> None:
    try:
        spec = read_machine_file(path)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    # The rules as docs/machine.md states them, not the reader's own helpers: a module is named
    # as modprobe takes it (letters, digits, "_" and "-", no leading "-", at most 64), and the
    # serio protocols are the two it names (rules: machine.object).
    for m in spec.modules:
        assert isinstance(m, str) and 1 <= len(m) <= 64 and m[0] != "-", m
        assert all(c.isascii() and (c.isalnum() or c in "_-") for c in m), m
    for entry in spec.serio:
        assert entry.protocol in ("pulse8-cec", "rainshadow-cec")
        assert len(entry.vendor) == 4 and len(entry.product) == 4
        assert all(c in "0123456789abcdef" for c in entry.vendor + entry.product), entry
        assert entry.serial is None or isinstance(entry.serial, str)


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(machine_text() | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_generated_machine_files_are_read_or_refused(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "machine.yaml"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        check(path)


@settings(max_examples=examples(8), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(machine_text())
def test_the_command_on_a_generated_machine_file_fails_closed(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = SysfsBuilder(Path(tmp) / "sys")
        b.gpu()
        path = Path(tmp) / "machine.yaml"
        path.write_text(text)
        out = run_cli(["report", "--sysfs", str(b.root), "--machine", str(path), "--node", "n",
                       "--facts", tmp, "--modules-dir", tmp, "--hwdata-dir", tmp],
                      memory=384 << 20, deadline=30)
        assert_fails_closed(out)


# ---- strict fields (rules: limits.strict-inputs) ----------------------------------------------

GOOD_MACHINE: dict[str, Any] = {
    "apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
    "metadata": {"name": "n1", "labels": {"a": "b"}, "generation": 2},
    "spec": {"modules": ["serport", "pulse8_cec"],
             "serio": [{"protocol": "pulse8-cec", "vendor": "2548", "product": "1002",
                        "serial": "P8-1"}]},
    "status": {"hardware": {"unclaimed": [{"bus": "pci", "candidates": ["x"],
                                           "message": "m"}]},
               "conditions": [{"type": "FactsPublished", "status": "True"}]},
}
# The CRD's free-form places: the labels' and annotations' maps, and status.serio's items
# (x-kubernetes-preserve-unknown-fields); every other mapping has a fixed set of fields.
FREE = ("metadata.labels",)



@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(key=st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789", min_size=1, max_size=10),
       data=st.data())
def test_an_unknown_key_at_any_depth_is_refused_naming_its_path(key: str,
                                                                data: st.DataObject) -> None:
    import copy

    doc = copy.deepcopy(GOOD_MACHINE)
    target, where = data.draw(st.sampled_from(mappings(doc)))
    if key in target:
        return
    target[key] = "x"
    path = f"{where}.{key}" if where else key
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "m.yaml"
        file.write_text(yaml.safe_dump(doc))
        if where in FREE:
            read_machine_file(file)  # a label is anyone's
            return
        with pytest.raises(InputError) as err:
            read_machine_file(file)
    assert f'unknown field "{path}"' in str(err.value) and "\n" not in str(err.value)


def test_the_valid_machine_is_read() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "m.yaml"
        file.write_text(yaml.safe_dump(GOOD_MACHINE))
        assert read_machine_file(file).modules == ("serport", "pulse8_cec")
