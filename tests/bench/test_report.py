"""docs/performance.md holds only figures that tests/bench/report.py wrote from a benchmark run.

The document's tables are generated blocks; this test renders each block again from
docs/performance.json and fails when the document differs (a figure typed or edited by hand), when
a table stands outside a generated block, or when a measured group has no block.
"""

from __future__ import annotations

import json

import pytest

from .report import BLOCK, DATA, DOC, merge, render, rewrite


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text()


@pytest.fixture(scope="module")
def data() -> dict[str, object]:
    return json.loads(DATA.read_text()) if DATA.exists() else {"groups": {}}


def test_every_table_is_a_generated_block(doc: str) -> None:
    outside = BLOCK.sub("", doc)
    stray = [line for line in outside.splitlines() if line.lstrip().startswith("|")]
    assert not stray, f"tables typed by hand in {DOC.name}: {stray[:3]}"


def test_generated_blocks_are_what_the_script_renders(doc: str, data: dict[str, object]) -> None:
    assert BLOCK.search(doc), "docs/performance.md has no generated block"
    assert rewrite(doc, data) == doc, "run ./tasks bench (or report.py --render) to regenerate"


def test_every_measured_group_is_shown(doc: str, data: dict[str, object]) -> None:
    shown = {m.group(1) for m in BLOCK.finditer(doc)}
    groups = data.get("groups", {})
    assert isinstance(groups, dict)
    assert set(groups) <= shown, f"measured but not shown: {sorted(set(groups) - shown)}"


def test_render_shows_budget_and_ratio() -> None:
    group = {"meta": {"date": "2026-12-01", "commit": "abc", "machine": "2 cores",
                      "python": "3.11.7"},
             "figures": [{"group": "g", "figure": "scan CPU", "unit": "ms", "min": 41.0,
                          "median": 45.25, "max": 60.0, "runs": 5, "budget": "≤ 60 ms",
                          "vs": "udevadm info --export-db",
                          "ratio": {"min": 1.5, "median": 2.0, "max": 2.5}}]}
    text = render(group)
    assert "| scan CPU (5 runs) | 41.0 ms | 45.2 ms | 60.0 ms | ≤ 60 ms |" in text
    assert "`udevadm info --export-db` | 2.00× (1.50–2.50) |" in text
    assert "commit `abc`" in text


def test_a_partial_run_replaces_only_its_own_figures() -> None:
    old_meta = {"date": "2026-11-30", "commit": "old", "machine": "2 cores", "python": "3.11.7"}
    new_meta = {**old_meta, "date": "2026-12-01", "commit": "new"}
    fig = {"group": "agent", "unit": "s", "min": 1.0, "median": 1.0, "max": 1.0, "runs": 1}
    old = {"groups": {"agent": {"meta": old_meta, "figures": [
        {**fig, "figure": "latency"}, {**fig, "figure": "memory"}]}}}
    data = merge(old, {"agent": [{**fig, "figure": "memory", "median": 2.0}]}, new_meta)
    figures = data["groups"]["agent"]["figures"]
    assert [(f["figure"], f["meta"]["commit"]) for f in figures] == [("latency", "old"),
                                                                     ("memory", "new")]
    text = render(data["groups"]["agent"])
    assert "commit `new`" in text and "commit `old`" in text
