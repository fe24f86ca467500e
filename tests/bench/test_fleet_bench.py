"""The fleet benchmark's code on a few hundred nodes: every request a list, one per page.

The 5,000-node figures in docs/performance.md come from ``python -m tests.bench.fleet_bench
--write``; this test keeps that script working and checks the request count it reports.
"""

from __future__ import annotations

from pathlib import Path

from tests.bench.fleet_bench import BEGIN, END, expected_requests, measure, section, write_section


def test_fleet_requests_are_one_list_per_page(tmp_path: Path) -> None:
    r = measure(260, rounds=1, page=100)
    assert r.devices == 260 * 12 + 130
    assert r.requests == expected_requests(260, page=100)
    assert set(r.by_resource) == {"resourceslices", "nodes", "machines", "resourceclaims"}
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\n## Another section\n\nkept\n")
    write_section(section(r), doc)
    write_section(section(r), doc)  # a second run replaces its own section only
    text = doc.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "## Another section\n\nkept" in text and "| 260 |" in text
