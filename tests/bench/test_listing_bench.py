"""Benchmark: one list answer at the bounds (kube/listing.py), a real page of the largest
ResourceSlices against the worst a hostile API server can send within the bounds.

Time and peak memory of a fresh reader for each case of tests/bench/listing_bench.py, and each
hostile case's peak as a multiple of the real page's: the bound docs/claims.md states (at most
2.5 times) is asserted here. With benchmarks disabled (``./tasks test``) only the cheap case
runs. Figures: docs/performance.md, "Hostile list answers".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from liken_devices.kube.listing import ASKED, MAX_SLICE_BYTES

from .figures import record
from .listing_bench import CASES, Reading, read

MULTIPLE = 2.5  # a hostile answer costs at most this many times a real page's peak memory
REFUSED = {
    "tiny values": "a page of more than",
    "short strings": "too large",
    "short non-ASCII strings": "too large",
    "long strings": "a page past",
    "more objects than asked": "more objects than the 500 asked",
}


@pytest.mark.benchmark(group="listing")
def test_hostile_list_answers(benchmark: Any, tmp_path: Path) -> None:
    if benchmark.disabled:
        r = read("more objects than asked", tmp_path)
        assert REFUSED[r.case] in r.outcome, r.outcome
        return
    readings: dict[str, Reading] = {}

    def run() -> None:
        for case in CASES:
            readings[case] = read(case, tmp_path)

    benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)
    real = readings["real"]
    assert real.outcome == "read 500 objects", real.outcome
    record(benchmark, "listing", "real page: its JSON body",
           [ASKED * MAX_SLICE_BYTES / (1 << 20)], "MiB")
    record(benchmark, "listing", "real page: 500 of the largest slices, read (wall)",
           [real.wall], "s")
    record(benchmark, "listing", "real page: peak resident memory of the reader",
           [real.peak_mib], "MiB", note=f"the reader's baseline: {real.baseline_mib:.0f} MiB")
    for case, r in readings.items():
        if case == "real":
            continue
        assert REFUSED[case] in r.outcome, (case, r.outcome)
        ratio = r.peak_mib / real.peak_mib
        assert ratio <= MULTIPLE, (case, r.peak_mib, real.peak_mib)
        record(benchmark, "listing", f"{case}: refused (wall)", [r.wall], "s",
               note=f"{case}: {r.outcome}")
        record(benchmark, "listing", f"{case}: peak resident memory", [r.peak_mib], "MiB")
        record(benchmark, "listing", f"{case}: peak memory over the real page's", [ratio], "x",
               budget=f"≤ {MULTIPLE:g} x")
