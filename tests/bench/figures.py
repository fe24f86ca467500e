"""How a benchmark hands its figures to docs/performance.md.

Every number in docs/performance.md comes from a run of ``./tasks bench``: each benchmark records
its figures here (into pytest-benchmark's ``extra_info``), ``tests/bench/report.py`` collects
them from the run's JSON into ``docs/performance.json`` and writes the document's tables, and
``tests/bench/test_report.py`` fails when a table in the document differs from what the script
renders from that file. A figure is min/median/max over repeated runs, beside its budget and,
where a user would run another tool for the same answer, the ratio to that tool measured in the
same run, pair by pair (A B A B ...), so a drift of the machine's speed cancels out.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "MiB": 1.0, "%": 1.0, "x": 1.0, "requests": 1.0,
         "count": 1.0, "MB": 1.0}


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def record(benchmark: Any, group: str, figure: str, values: Sequence[float], unit: str, *,
           budget: str = "", vs: str = "", ratios: Sequence[float] = (), note: str = "") -> None:
    """Add one figure (already in ``unit``) to the benchmark's report."""
    if not values:
        return
    entry: dict[str, Any] = {"group": group, "figure": figure, "unit": unit, **spread(values),
                             "runs": len(values), "budget": budget, "note": note}
    if vs and ratios:
        entry["vs"] = vs
        entry["ratio"] = spread(ratios)
    benchmark.extra_info.setdefault("figures", []).append(entry)


def timed(benchmark: Any) -> list[float]:
    """The per-round seconds pytest-benchmark measured (empty when benchmarks are disabled)."""
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    return list(getattr(stats, "data", None) or [])


def percentile(values: Sequence[float], p: float) -> float:
    data = sorted(values)
    return data[min(len(data) - 1, round(p * (len(data) - 1)))]


@dataclass(frozen=True)
class Run:
    """One whole process: wall seconds, CPU seconds (user + system), and its ``ru_maxrss`` in MiB
    (which counts the forking parent's pages too: not the command's own peak)."""

    wall: float
    cpu: float
    peak_mib: float
    code: int


def run_process(argv: Sequence[str], env: dict[str, str] | None = None,
                cwd: str | None = None, timeout: float = 120.0) -> Run:
    """Run ``argv`` to its end with output discarded, accounted by the kernel (wait4).

    Python's bytecode cache is allowed (a developer's shell may turn it off): an installed
    program runs from compiled modules, and the first, untimed run of each pair writes them."""
    env = dict(os.environ if env is None else env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    deadline = started + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.0005)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode)


def paired(a: Callable[[], Run], b: Callable[[], Run], runs: int,
           warmup: int = 1) -> tuple[list[Run], list[Run]]:
    """A and B in turn, ``runs`` times each after ``warmup`` untimed pairs."""
    for _ in range(warmup):
        a()
        b()
    out_a: list[Run] = []
    out_b: list[Run] = []
    for _ in range(runs):
        out_a.append(a())
        out_b.append(b())
    return out_a, out_b


def ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True) if y > 0]


def self_cpu() -> float:
    """CPU seconds this process has used so far."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
