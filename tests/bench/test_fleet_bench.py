"""Benchmark: ``liken-devices fleet`` over 5,000 nodes on the loopback API server.

Wall and CPU seconds of one pass (list, build, render), the requests it sends (one list per page,
checked against the count the page size implies) and the peak memory. With benchmarks disabled
(``./tasks test``) the same code runs once on 200 nodes. Figures: docs/performance.md, "Fleet
view".
"""

from __future__ import annotations

import resource
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .figures import record, timed
from .fleet_bench import Cluster, Pass, expected_requests

FULL = 5000
QUICK = 200


@pytest.fixture
def cluster(benchmark: Any, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(QUICK if benchmark.disabled else FULL, tmp_path)
    try:
        yield c
    finally:
        c.close()


@pytest.mark.benchmark(group="fleet")
def test_fleet_pass(benchmark: Any, cluster: Cluster) -> None:
    passes: list[Pass] = []
    benchmark.pedantic(lambda: passes.append(cluster.fleet_pass()), rounds=3, iterations=1,
                       warmup_rounds=0)
    last = passes[-1]
    assert last.requests == expected_requests(cluster.nodes)
    assert set(last.by_resource) == {"resourceslices", "nodes", "machines", "resourceclaims"}
    assert last.devices == cluster.nodes * 12 + (cluster.nodes + 1) // 2
    n = f"{cluster.nodes:,} nodes"
    record(benchmark, "fleet", f"fleet pass, {n} (wall)", timed(benchmark), "s")
    record(benchmark, "fleet", f"fleet pass, {n} (CPU, client and server)",
           [p.cpu for p in passes], "s")
    record(benchmark, "fleet", "build and render the table", [p.build_render for p in passes],
           "s")
    record(benchmark, "fleet", "requests per pass (all paginated lists)",
           [float(p.requests) for p in passes], "requests",
           note=", ".join(f"{k} {v}" for k, v in sorted(last.by_resource.items())))
    record(benchmark, "fleet", "peak resident memory, client and server",
           [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024], "MiB")
