"""docs/quality.md holds only what tests/mutation/run.py wrote, and every survivor is explained.

The document's tables are generated blocks rendered from docs/quality.json and
tests/mutation/equivalent.json: this test renders them again and fails when the document differs
(a figure typed by hand), when a target has no block, when the last full run left a survivor
without a reason, or when a reason names a mutant the module no longer has.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .mutants import Mutant, in_scope, mutants
from .run import BLOCK, DATA, DOC, load_equivalent, rewrite, target_mutants
from .targets import BY_NAME, TARGETS


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return json.loads(DATA.read_text()) if DATA.exists() else {"targets": {}}


def test_the_generated_blocks_are_what_the_script_renders(data: dict[str, Any]) -> None:
    doc = DOC.read_text()
    assert rewrite(doc, data, load_equivalent()) == doc, \
        "run ./tasks mutate --render (or ./tasks mutate) to regenerate docs/quality.md"


def test_every_target_has_a_block_and_a_full_run() -> None:
    shown = {m.group(1) for m in BLOCK.finditer(DOC.read_text())}
    assert shown == set(BY_NAME)


def test_every_survivor_of_the_last_run_is_explained(data: dict[str, Any]) -> None:
    equivalent = load_equivalent()
    missing = [f"{name}: {r['key']}" for name, entry in data["targets"].items()
               for r in entry["results"]
               if r["status"] == "survived" and r["key"] not in equivalent.get(name, {})]
    assert missing == [], "kill these with a test, or explain them in equivalent.json"


def test_every_reason_names_a_mutant_that_exists() -> None:
    equivalent = load_equivalent()
    assert set(equivalent) <= set(BY_NAME)
    for name, reasons in equivalent.items():
        keys = {m.key for m in target_mutants(BY_NAME[name])}
        stale = sorted(set(reasons) - keys)
        assert stale == [], f"{name}: reasons for mutants that no longer exist: {stale}"
        assert all(len(why) > 10 for why in reasons.values())


def test_the_results_are_of_the_current_mutants(data: dict[str, Any]) -> None:
    """A full run covers every mutant of its target (rerun ./tasks mutate after a change)."""
    for t in TARGETS:
        entry = data["targets"].get(t.name)
        if entry is None:
            continue
        ran = {r["key"] for r in entry["results"]}
        assert {m.key for m in target_mutants(t)} <= ran, f"{t.name}: mutants never run"


# -- the mutator itself --------------------------------------------------------------------------

SOURCE = '''"""doc"""
import os
LIMIT = 32
MODE = 0o644


def rule(x: int, name: str) -> str | None:
    """doc"""
    if x < LIMIT and name in ("a", "b"):
        raise ValueError(f"bad {x}")
    if not name:
        os.remove(name)
    return "ok"
'''


def keys(ms: list[Mutant]) -> list[str]:
    return [m.key for m in ms]


def test_the_operators_and_what_they_leave_alone() -> None:
    ms = mutants("m", SOURCE)
    got = keys(ms)
    assert "<module>: number: 32 -> 33" in got and "<module>: number: 32 -> 31" in got
    assert "<module>: number: 0o644 -> 0o645" in got  # a mode stays octal
    assert "rule: compare: x < LIMIT -> (x <= LIMIT)" in got
    # Each edit is written from the source text: the rest of the expression reads as written.
    assert "rule: negate: x < LIMIT and name in (\"a\", \"b\") -> not (x < LIMIT and name in " \
           "(\"a\", \"b\"))" in got
    assert "rule: boolop: x < LIMIT and name in (\"a\", \"b\") -> (x < LIMIT or name in " \
           "(\"a\", \"b\"))" in got
    assert "rule: compare: name in (\"a\", \"b\") -> (name not in (\"a\", \"b\"))" in got
    assert "rule: remove: raise ValueError(f\"bad {x}\") -> pass" in got
    assert "rule: not: not name -> (name)" in got
    assert "rule: remove: os.remove(name) -> pass" in got
    assert "rule: string: \"ok\" -> ''" in got
    # Docstrings, imports, the message of a raise and annotations are left alone.
    assert not any("doc" in k or "import" in k or "bad" in k.split("->")[-1] for k in got)
    assert not any("int" in k or "str | None" in k for k in got)
    # Each mutant still parses and changes the program.
    for m in ms:
        compile(m.apply(SOURCE), "m", "exec")
        assert m.apply(SOURCE) != SOURCE


def test_keys_are_stable_when_other_code_moves() -> None:
    before = keys(mutants("m", SOURCE))
    after = keys(mutants("m", "X = 1\n\n\n" + SOURCE))
    assert set(before) <= set(after)


def test_a_repeated_mutant_is_numbered_and_scope_limits() -> None:
    src = "def f(a):\n    return a + 1 + 1\n\ndef g(a):\n    return a + 1\n"
    got = keys(mutants("m", src, in_scope(("f",))))
    assert "f: number: 1 -> 2" in got and "f: number: 1 -> 2 #2" in got
    assert not any(k.startswith("g:") for k in got)


def test_a_kept_result_takes_its_mutants_current_line() -> None:
    """A rerun of survivors keeps the earlier results; their lines follow the code."""
    from .run import merge

    t = BY_NAME["reserved"]
    first, second = target_mutants(t)[:2]
    old = {"results": [{"key": first.key, "line": first.line + 40, "status": "killed",
                        "security": True, "seconds": 1.0}]}
    new = {"results": [{"key": second.key, "line": second.line, "status": "killed",
                        "security": True, "seconds": 1.0}]}
    got = merge(old, new, t)["results"]
    assert [(r["key"], r["line"]) for r in got] == [(first.key, first.line),
                                                    (second.key, second.line)]
