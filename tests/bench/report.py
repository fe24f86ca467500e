"""Writes the tables of docs/performance.md from a benchmark run, so its figures cannot go stale.

``./tasks bench [PYTEST ARGS]`` runs the benchmarks in tests/bench under pytest-benchmark, then
this script collects every figure they recorded (tests/bench/figures.py) into
``docs/performance.json`` and rewrites each generated block of ``docs/performance.md``::

    <!-- bench:GROUP -->
    ...the table, written by this script...
    <!-- /bench -->

The prose around the blocks is written by hand and holds no figure. A run that measured only
some groups (``./tasks bench -k prepare``) replaces those groups and keeps the others with their
own date and commit. ``tests/bench/test_report.py`` renders the blocks again from the JSON and
fails when the document differs, or when a table stands outside a generated block.

``python -m tests.bench.report --render`` only rewrites the document from the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "performance.md"
DATA = REPO / "docs" / "performance.json"
BLOCK = re.compile(r"<!-- bench:([a-z0-9-]+) -->\n(.*?)<!-- /bench -->\n", re.DOTALL)


def machine_kind() -> str:
    """The machine in words: cores, memory, processor, kernel, virtualisation."""
    cpu = "unknown processor"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    virt = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        virt = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True,
                              timeout=5).stdout.strip()
    kind = f"{os.cpu_count()} cores, {mem:.0f} GiB, {cpu}, Linux {platform.release()}"
    return kind + (f", {virt}" if virt and virt != "none" else "")


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--",
                                "src", "tests"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def collect(bench_json: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Figures by group, in the order the benchmarks recorded them."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for bench in bench_json.get("benchmarks", []):
        for fig in (bench.get("extra_info") or {}).get("figures", []):
            groups.setdefault(fig["group"], []).append(fig)
    return groups


def merge(old: dict[str, Any], groups: dict[str, list[dict[str, Any]]],
          meta: dict[str, str]) -> dict[str, Any]:
    """The old figures with this run's in their place: a figure is replaced by one of the same
    name (and comparison), so a run of one benchmark keeps the other figures of its group."""
    out = {"groups": dict(old.get("groups", {}))}
    for name, figures in groups.items():
        kept = _figures(out["groups"].get(name))
        fresh = [{**f, "meta": meta} for f in figures]
        keys = {_key(f) for f in fresh}
        merged = fresh + [f for f in kept if _key(f) not in keys]
        order = {_key(f): i for i, f in enumerate(kept)}
        merged.sort(key=lambda f: order.get(_key(f), len(order)))
        out["groups"][name] = {"figures": merged}
    return out


def _key(figure: dict[str, Any]) -> tuple[str, str]:
    return (figure["figure"], figure.get("vs", ""))


def _figures(group: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A group's figures, each with the run that measured it (older files kept one per group)."""
    if not group:
        return []
    shared = group.get("meta")
    return [{**f, "meta": f.get("meta", shared)} for f in group.get("figures", [])]


def number(value: float) -> str:
    """Three significant digits, no exponent."""
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    digits = 2 - int(f"{magnitude:e}".split("e")[1])
    return f"{value:.{min(digits, 6)}f}"


def render(group: dict[str, Any]) -> str:
    figures = _figures(group)
    with_vs = any("vs" in f for f in figures)
    head = ["figure", "min", "median", "max", "budget"]
    if with_vs:
        head += ["compared with", "ratio (median, min–max)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in figures:
        unit = f["unit"]
        cells = [f["figure"] + (f" ({f['runs']} runs)" if f.get("runs", 1) > 1 else ""),
                 f"{number(f['min'])} {unit}", f"{number(f['median'])} {unit}",
                 f"{number(f['max'])} {unit}", f.get("budget") or "—"]
        if with_vs:
            if "vs" in f:
                r = f["ratio"]
                cells += [f"`{f['vs']}`",
                          f"{number(r['median'])}× ({number(r['min'])}–{number(r['max'])})"]
            else:
                cells += ["—", "—"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {f['figure']}: {f['note']}" for f in figures if f.get("note")]
    lines.append("")
    runs = []
    for f in figures:
        m = f["meta"]
        run = (f"{m['date']} at commit `{m['commit']}` on {m['machine']}, "
               f"Python {m['python']}")
        if run not in runs:
            runs.append(run)
    lines.append("Measured " + "; and ".join(runs) + ".")
    if notes:
        lines.append("")
        lines.extend(notes)
    return "\n".join(lines) + "\n"


def rewrite(doc: str, data: dict[str, Any]) -> str:
    groups = data.get("groups", {})

    def block(m: re.Match[str]) -> str:
        name = m.group(1)
        body = render(groups[name]) if name in groups else "Not measured yet.\n"
        return f"<!-- bench:{name} -->\n{body}<!-- /bench -->\n"

    return BLOCK.sub(block, doc)


def run_benchmarks(pytest_args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lkbench-") as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
               str(REPO / "tests" / "bench"), f"--benchmark-json={out}", *pytest_args]
        code = subprocess.call(cmd, cwd=REPO)
        if code not in (0, 5):
            raise SystemExit(f"report: the benchmarks failed (pytest exit {code})")
        return json.loads(out.read_text()) if out.exists() else {}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--render", action="store_true",
                   help="only rewrite docs/performance.md from docs/performance.json")
    p.add_argument("--from-json", type=Path, default=None,
                   help="take a pytest-benchmark JSON file instead of running the benchmarks")
    a, rest = p.parse_known_args(argv)
    data = json.loads(DATA.read_text()) if DATA.exists() else {"groups": {}}
    if not a.render:
        bench = json.loads(a.from_json.read_text()) if a.from_json else run_benchmarks(rest)
        meta = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit(),
                "machine": machine_kind(), "python": platform.python_version()}
        data = merge(data, collect(bench), meta)
        DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    DOC.write_text(rewrite(DOC.read_text(), data))
    missing = [m.group(1) for m in BLOCK.finditer(DOC.read_text())
               if m.group(1) not in data["groups"]]
    print(f"report: {DOC.relative_to(REPO)} written from {len(data['groups'])} groups"
          + (f"; not measured: {', '.join(missing)}" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
