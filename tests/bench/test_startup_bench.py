"""Start-up: the commands a user runs once, timed as whole processes against what they would run
otherwise.

* ``liken-devices scan`` on this machine's own sysfs with the system's hwdata (the README's main
  job), CPU time (user + system, the kernel's account of the finished process), budget ≤ 60 ms;
  beside it, paired run by run, ``udevadm info --export-db`` (udev's whole database), a pyudev
  enumeration of every device with its properties, and ``lspci -vmm -k`` (PCI devices and their
  drivers), where installed.
* one media probe child (the interpreter the media agent starts per render node) against the
  test VA driver, budget ≤ 15 ms of CPU, beside ``vainfo --all`` on the same driver and node and
  beside the floor: the same interpreter started with the child's flags, doing nothing.

Nothing here asserts a time; the figures go to docs/performance.md through tests/bench/report.py.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from liken_devices.media.probe import child_command
from tests.media.conftest import CAPS, FakeGPUs, VaBuild, build_va

from .figures import Run, paired, ratios, record, run_process

RUNS = 10
BIN = Path(sys.executable).parent


def _scan_command() -> list[str]:
    script = BIN / "liken-devices"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "liken_devices.entry"]
    return [*head, "scan", "-o", "json"]


def _others() -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    if shutil.which("udevadm"):
        out.append(("udevadm info --export-db", ["udevadm", "info", "--export-db"]))
    try:
        import pyudev  # noqa: F401
    except ImportError:
        pass
    else:
        out.append(("pyudev: every device and its properties", [
            sys.executable, "-c",
            "import pyudev\nfor d in pyudev.Context().list_devices(): dict(d.properties)"]))
    if shutil.which("lspci"):
        out.append(("lspci -vmm -k", ["lspci", "-vmm", "-k"]))
    return out


def _runner(argv: list[str], env: dict[str, str] | None = None) -> Callable[[], Run]:
    return lambda: run_process(argv, env=env)


def _measure(benchmark: Any, command: Callable[[], Run], fails: str) -> list[Run]:
    """One warm-up run that must succeed (else ``fails``), then ``command`` RUNS times (3 when
    benchmarks are off) under the benchmark, every run exiting 0."""
    first = command()
    assert first.code == 0, fails
    runs: list[Run] = []

    def measure() -> None:
        runs.extend(command() for _ in range(3 if benchmark.disabled else RUNS))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    assert runs and all(r.code == 0 for r in runs)
    return runs


@pytest.mark.benchmark(group="startup")
def test_scan_cpu_against_what_users_run(benchmark: Any) -> None:
    scan = _runner(_scan_command())
    runs = _measure(benchmark, scan, "liken-devices scan failed on this machine")
    if benchmark.disabled:
        return
    record(benchmark, "startup", "`liken-devices scan`, CPU", [r.cpu * 1e3 for r in runs], "ms",
           budget="≤ 60 ms")
    for label, argv in _others():
        a, b = paired(scan, _runner(argv), RUNS)
        if any(r.code != 0 for r in b):
            continue
        record(benchmark, "startup", "`liken-devices scan`, CPU", [r.cpu * 1e3 for r in a],
               "ms", budget="≤ 60 ms", vs=label,
               ratios=ratios([r.cpu for r in a], [r.cpu for r in b]))


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> VaBuild:
    return build_va(tmp_path_factory.mktemp("vabuild-startup"))


@pytest.mark.benchmark(group="startup")
def test_media_child_against_vainfo(benchmark: Any, tmp_path: Path, build: VaBuild) -> None:
    gpus = FakeGPUs(tmp_path, build)
    node = gpus.add(128, CAPS / "intel-dg2-ihd.txt")
    env = gpus.env
    child = _runner([*child_command(), node], env)
    runs = _measure(benchmark, child, "the probe child failed against the test driver")
    if benchmark.disabled:
        return
    figure = "media probe child, one render node, CPU"
    recorded = False
    vainfo = shutil.which("vainfo")
    if vainfo:
        argv = [vainfo, "--display", "drm", "--device", node, "--all"]
        if run_process(argv, env=env).code == 0:
            a, b = paired(child, _runner(argv, env), RUNS)
            record(benchmark, "startup", figure, [r.cpu * 1e3 for r in a], "ms",
                   budget="≤ 15 ms", vs="vainfo --all",
                   ratios=ratios([r.cpu for r in a], [r.cpu for r in b]))
            recorded = True
    # The floor: the same interpreter started as the child is, doing nothing.
    a, b = paired(child, _runner([sys.executable, "-I", "-S", "-c", "pass"], env), RUNS)
    record(benchmark, "startup", figure, [r.cpu * 1e3 for r in a], "ms", budget="≤ 15 ms",
           vs="python -I -S -c pass", ratios=ratios([r.cpu for r in a], [r.cpu for r in b]))
    if not recorded:
        record(benchmark, "startup", figure, [r.cpu * 1e3 for r in runs], "ms",
               budget="≤ 15 ms")


def test_the_commands_compared_exist() -> None:
    """The scan comparison has at least udev's own dump on a machine with udev."""
    if shutil.which("udevadm") is None:
        pytest.skip("no udevadm here")
    assert any(label.startswith("udevadm") for label, _ in _others())
    assert os.access(_scan_command()[0], os.X_OK) or _scan_command()[0] == sys.executable
