"""Benchmark: how long the media agent takes to ask one and four render nodes.

Each query is the production path (a fresh interpreter per node running
``liken_devices.media.child``, ctypes' core, the real libva.so.2/libva-drm.so.2) against the test
VA driver (tests/media/native/vafake.c), so the figure is the agent's own overhead: interpreter
start, libva's driver loading and the queries. A real driver adds its own init time. The four
nodes are asked in parallel. Run with `./tasks bench`; figures are in docs/performance.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from liken_devices.media.probe import probe_nodes
from tests.media.conftest import CAPS, FakeGPUs, VaBuild, build_va

from .figures import record, timed

GENERATIONS = ("intel-dg2-ihd.txt", "amd-rdna2-mesa.txt", "nvidia-ampere-nvdec.txt",
               "amd-polaris-mesa.txt")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> VaBuild:
    return build_va(tmp_path_factory.mktemp("vabuild-bench"))


def machine(root: Path, build: VaBuild, count: int) -> tuple[FakeGPUs, list[str]]:
    gpus = FakeGPUs(root, build)
    nodes = [gpus.add(128 + i, CAPS / GENERATIONS[i % len(GENERATIONS)]) for i in range(count)]
    return gpus, nodes


@pytest.mark.benchmark(group="media-probe")
@pytest.mark.parametrize("count", [1, 4])
def test_probe_time(benchmark: Any, tmp_path: Path, build: VaBuild, count: int) -> None:
    gpus, nodes = machine(tmp_path, build, count)
    env = gpus.env
    results = benchmark.pedantic(probe_nodes, args=(nodes, 20.0, env), rounds=10, iterations=1,
                                 warmup_rounds=1)
    assert [results[n].error for n in nodes] == [None] * count
    record(benchmark, "media-probe", f"{count} render node{'s' if count > 1 else ''}, wall",
           [t * 1e3 for t in timed(benchmark)], "ms")
