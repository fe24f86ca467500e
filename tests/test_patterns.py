"""Every validation pattern is anchored at the end: no name is accepted with a trailing newline.

Python's ``$`` matches before a final ``\\n``, so ``re.match(r"^[a-z]+$", "abc\\n")`` succeeds;
``fullmatch`` (or ``\\Z``) does not. ``\\d`` matches any Unicode digit (``²``); the patterns use
``[0-9]`` or ``re.ASCII``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from liken_devices.cliargs import check_node_name
from liken_devices.inventory.modname import is_module_name
from liken_devices.plugin.cdi import SpecError, check_device, check_uid
from liken_devices.slices.validate import check_qualified_name, is_dns_subdomain, validate_slice

SRC = Path(__file__).resolve().parents[1] / "src" / "liken_devices"


def test_a_trailing_newline_is_refused_everywhere() -> None:
    with pytest.raises(SpecError):
        check_uid("0e3c5a36-6b7d-4c4e-9a3b-1f2e3d4c5b6a\n")
    check_uid("0e3c5a36-6b7d-4c4e-9a3b-1f2e3d4c5b6a")
    with pytest.raises(SpecError):
        check_device("pci-0000-00-02-0\n")
    assert not is_module_name("pulse8_cec\n") and is_module_name("pulse8_cec")
    assert not is_dns_subdomain("node\n") and is_dns_subdomain("node")
    assert check_qualified_name("liken.sh/name\n") is not None
    assert check_node_name("node\n") is not None


def test_a_version_with_a_newline_or_unicode_digits_is_invalid() -> None:
    def one(version: str) -> dict[str, object]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": "n-liken.sh"},
                "spec": {"driver": "liken.sh", "nodeName": "n",
                         "pool": {"name": "n", "generation": 0, "resourceSliceCount": 1},
                         "devices": [{"name": "d", "attributes": {
                             "v": {"version": version}}}]}}
    assert validate_slice(one("1.2.3")) == []
    assert validate_slice(one("1.2.3\n")) != []
    assert validate_slice(one("1.2.\u00b3")) != []


def _string_arg(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value,
                                                                            str):
        return call.args[0].value
    return None


def test_no_pattern_in_the_source_ends_in_a_bare_dollar() -> None:
    """Pins the rule: a pattern ending in ``$`` is used only line by line (``re.MULTILINE``)."""
    offenders = []
    for path in SRC.rglob("*.py"):
        if "gen" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                    and node.func.attr in ("compile", "match", "search")):
                continue
            pattern = _string_arg(node)
            if pattern is None or not pattern.endswith("$"):
                continue
            flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            flags += " ".join(ast.unparse(k.value) for k in node.keywords)
            if "MULTILINE" not in flags:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: {pattern!r}")
    assert offenders == []
