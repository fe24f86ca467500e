"""Machine files: UTF-8, bounded, no aliases, no YAML 1.1 surprises; refused in one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from liken_devices.errors import InputError
from liken_devices.inventory import machinefile
from liken_devices.inventory.machinefile import parse_machine, read_machine_file
from liken_devices.inventory.model import SerioEntry
from tests.support.hostile import assert_fails_closed, run_cli
from tests.support.sysfs_builder import SysfsBuilder

GOOD = """apiVersion: liken.sh/v1alpha1
kind: Machine
metadata:
  name: mini-1
  generation: 3
spec:
  modules: [pulse8_cec, "serport"]
  serio:
  - protocol: pulse8-cec
    vendor: "2548"
    product: '1002'
    serial: "0123"
"""

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}]\n" for i in range(8))


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "machine.yaml"
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    return path


def test_a_good_file(tmp_path: Path) -> None:
    spec = read_machine_file(write(tmp_path, GOOD))
    assert spec.modules == ("pulse8_cec", "serport")
    assert spec.serio == (SerioEntry("pulse8-cec", "2548", "1002", "0123"),)


@pytest.mark.parametrize(("line", "text", "kind"), [
    ("    vendor: 0x2548", "0x2548", "a number"),
    ("    vendor: 2548", "2548", "a number"),
    ("    serial: 0123", "0123", "a number"),
    ("    serial: 1.5", "1.5", "a number"),
    ("    serial: on", "on", "a boolean"),
    ("    product: 2024-01-02", "2024-01-02", "a date"),
])
def test_an_unquoted_id_that_yaml_turns_into_a_number_is_refused(
        tmp_path: Path, line: str, text: str, kind: str) -> None:
    key = line.split(":")[0]
    doc = "\n".join(line if ln.startswith(key + ":") else ln for ln in GOOD.splitlines())
    if key not in GOOD:
        doc += "\n" + line
    with pytest.raises(InputError) as err:
        read_machine_file(write(tmp_path, doc))
    message = str(err.value)
    assert f"{text!r} is read by YAML as {kind}" in message and f'quote it: "{text}"' in message
    assert "9544" not in message


def test_an_unquoted_module_name_that_is_a_bool_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="'on' is read by YAML as a boolean"):
        read_machine_file(write(tmp_path, "modules: [pulse8_cec, on]\n"))


def test_ids_from_the_api_must_be_strings_too() -> None:
    with pytest.raises(InputError, match="vendor must be a string"):
        parse_machine({"serio": [{"protocol": "pulse8-cec", "vendor": 9544, "product": "1002"}]})
    with pytest.raises(InputError, match="serial must be a string"):
        parse_machine({"serio": [{"protocol": "pulse8-cec", "vendor": "2548", "product": "1002",
                                  "serial": 123}]})


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="anchors and aliases"):
        read_machine_file(write(tmp_path, BOMB))
    with pytest.raises(InputError, match="anchors and aliases"):
        read_machine_file(write(tmp_path, "spec: &s {modules: [x]}\n"))
    # In a child bounded to 256 MiB and 20 s: before, this took 33 s and 3 GB.
    out = run_cli(["report", "--sysfs", str(_tree(tmp_path)), "--machine",
                   str(write(tmp_path, BOMB)), "--node", "n"], memory=256 << 20, deadline=20)
    assert_fails_closed(out, allowed=(2,))
    assert "anchors and aliases" in out.stderr


@pytest.mark.parametrize("text", ["[" * 100 + "]" * 100, "a:\n" + "".join(
    " " * i + "b:\n" for i in range(1, 200)), "- " * 500 + "x\n"])
def test_deep_nesting_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(InputError, match="nested deeper than 32"):
        read_machine_file(write(tmp_path, text))


def test_very_deep_nesting_is_refused_without_a_recursion_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nested deeper"):
        read_machine_file(write(tmp_path, "[" * 100000 + "]" * 100000))


@pytest.mark.parametrize(("data", "says"), [
    (b"modules: [caf\xe9]\n", "is not UTF-8 (byte 13)"),
    (b"modules: [a]\nmodules: [b]\n", "'modules' appears twice"),
    (b"modules: [a]\n---\nmodules: [b]\n", "found another document"),
    (b"modules: [\x07]\n", "not valid YAML"),
    (b"modules:\n\t- a\n", "not valid YAML at line 2"),
    (b"kind: Pod\n", "kind is 'Pod', expected Machine"),
    (b"modules: [pulse8_cec\n", "not valid YAML"),
    (b"modules: ['pulse8_cec\\n']\n", "is not a module name"),
    (b"modules: \"pulse8_cec\\n\"\n", "must be a list"),
    (b"serio: [{protocol: pulse8-cec, vendor: '2548', product: '1002', serial: '"
     + b"x" * 300 + b"'}]\n", "at most 255 characters"),
])
def test_malformed_files_name_the_problem_in_one_line(tmp_path: Path, data: bytes,
                                                      says: str) -> None:
    with pytest.raises(InputError) as err:
        read_machine_file(write(tmp_path, data))
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_counts_and_sizes_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    many = "modules:\n" + "".join(f"- m{i}\n" for i in range(machinefile.MAX_MODULES + 1))
    with pytest.raises(InputError, match="more than 1024 names"):
        read_machine_file(write(tmp_path, many))
    monkeypatch.setattr(machinefile, "MAX_FILE", 100)
    with pytest.raises(InputError, match="larger than 100 bytes"):
        read_machine_file(write(tmp_path, "modules: []\n" + "#" * 200))


def test_a_fifo_or_a_device_is_not_a_machine_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(InputError):
            read_machine_file(path)


def _tree(tmp_path: Path) -> Path:
    b = SysfsBuilder(tmp_path / "sys")
    b.gpu()
    return b.root


def test_every_command_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = write(tmp_path, b"serio: [{protocol: pulse8-cec, vendor: 0x2548, product: '1002'}]\n")
    for command in (["scan"], ["report"], ["explain"], ["machine", "apply", "--dry-run"]):
        out = run_cli([*command, "--sysfs", str(_tree(tmp_path)), "--machine", str(bad),
                       "--node", "n", "--modules-dir", str(tmp_path)])
        assert_fails_closed(out, allowed=(2,))
        assert "quote it" in out.stderr


@pytest.mark.parametrize(("text", "says"), [
    # A serial mistyped: the entry would attach every adapter of that model, not the one.
    (GOOD.replace('    serial: "0123"', '    serail: "0123"'),
     'unknown field "spec.serio[0].serail"'),
    (GOOD.replace("  modules:", "  module:"), 'unknown field "spec.module"'),
    (GOOD.replace("  generation: 3", "  generation: 3\n  nmae: x"),
     'unknown field "metadata.nmae"'),
    (GOOD + "specs: {}\n", 'unknown field "specs"'),
    (GOOD.replace("liken.sh/v1alpha1", "liken.sh/v1"),
     "apiVersion 'liken.sh/v1' is not read here (read: liken.sh/v1alpha1)"),
    (GOOD.replace("apiVersion: liken.sh/v1alpha1\n", ""), "the Machine has no apiVersion"),
    ("modules: [serport]\nserio: []\nmodule: [x]\n", 'unknown field "module"'),
    ("metadata: {name: n}\nspec: {modules: [serport]}\nstatus: {hardwar: {}}\n",
     'unknown field "status.hardwar"'),
])
def test_unknown_fields_versions_and_kinds_are_refused_with_the_path(tmp_path: Path, text: str,
                                                                     says: str) -> None:
    """rules: limits.strict-inputs: the Machine read as the API server reads it under strict
    field validation (the CRD's fields), from a file as from the cluster."""
    with pytest.raises(InputError) as err:
        read_machine_file(write(tmp_path, text))
    assert says in str(err.value) and "\n" not in str(err.value)
    out = run_cli(["report", "--sysfs", str(_tree(tmp_path)), "--machine",
                   str(write(tmp_path, text)), "--node", "n", "--modules-dir", str(tmp_path)])
    assert_fails_closed(out, allowed=(2,))
    assert says in out.stderr


def test_a_machine_as_kubectl_prints_it_is_read(tmp_path: Path) -> None:
    """``kubectl get machine -o yaml``: server-set metadata and the agent's own status."""
    text = GOOD.replace("  generation: 3", "  generation: 3\n  uid: 6f1c\n  resourceVersion: "
                        "'42'\n  creationTimestamp: '2026-01-01T00:00:00Z'\n  managedFields:\n"
                        "  - {manager: kubectl, operation: Apply, fieldsV1: {f:spec: {}}}") + \
        "status:\n  hardware: {unclaimed: []}\n  serio: [{protocol: pulse8-cec, tty: ttyACM0, " \
        "lines: 1}]\n  conditions: [{type: FactsPublished, status: 'True'}]\n"
    spec = read_machine_file(write(tmp_path, text))
    assert spec.modules == ("pulse8_cec", "serport")
