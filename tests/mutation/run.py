"""``./tasks mutate [TARGET...]``: mutation testing of the rules that protect the machine.

For each target (tests/mutation/targets.py: reserved nodes, storage roles, sharing, Bluetooth
numbers, usbfs, CDI specs, the state file) every mutant of its rules (tests/mutation/mutants.py)
is written into a private copy of ``src/`` and the module's own test files are run against it
(``pytest -x -n 0``, with a deadline per mutant, the copy first on ``PYTHONPATH`` so that the
processes the tests start run the mutant too). A mutant the tests fail on is killed; one they
pass survives. The results go to ``docs/quality.json`` and the generated blocks of
``docs/quality.md``::

    <!-- mutate:TARGET -->
    ...the score and the surviving mutants, written by this script...
    <!-- /mutate -->

A survivor is either killed by a new test or explained: ``tests/mutation/equivalent.json`` maps
its key (stable across edits elsewhere in the file) to the reason it changes no behaviour, and
the table shows that reason. ``tests/mutation/test_quality_doc.py`` fails when the document is
not what this script renders, and when a survivor is unexplained; ``tests/mutation/
test_floor.py`` runs a seeded sample of the security rules' mutants inside ``./tasks test``.

Why not mutmut or cosmic-ray: both need a whole-suite run first (mutmut 3 records which tests
cover which function by running everything under its trampolines; cosmic-ray baselines the
configured test command and edits the module in the work tree), and this suite's 1,400 tests
include podman, kind and the Go build. Here each module names its own few test files, and the
mutant lives in a copy, never in the work tree another process may be reading.

``python -m tests.mutation.run --render`` only rewrites the document from the JSON;
``--sample N --seed S`` runs N mutants per target chosen by the seed (what the floor does).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .mutants import Mutant, in_scope, mutants
from .targets import BY_NAME, TARGETS, Target

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "quality.md"
DATA = REPO / "docs" / "quality.json"
EQUIVALENT = Path(__file__).resolve().parent / "equivalent.json"
BLOCK = re.compile(r"<!-- mutate:([a-z0-9-]+) -->\n(.*?)<!-- /mutate -->\n", re.DOTALL)


def target_mutants(t: Target) -> list[Mutant]:
    return mutants(t.module, (REPO / t.path).read_text(), in_scope(t.functions))


def is_security(t: Target, m: Mutant) -> bool:
    return in_scope(t.security)(m.qualname)


def load_equivalent() -> dict[str, dict[str, str]]:
    if not EQUIVALENT.exists():
        return {}
    data = json.loads(EQUIVALENT.read_text())
    assert isinstance(data, dict)
    return data


# -- running ------------------------------------------------------------------------------------


@dataclass
class Workspace:
    """A private copy of ``src/``: each mutant is written there and put back after its run."""

    root: Path

    @property
    def src(self) -> Path:
        return self.root / "src"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.src), str(REPO),
                                             *filter(None, [env.get("PYTHONPATH")])])
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant of equal size and mtime: no stale .pyc
        env.setdefault("LIKEN_SHARED", str(REPO.parent / "shared"))
        return env

    @contextmanager
    def mutant(self, t: Target, m: Mutant | None) -> Iterator[None]:
        path = self.src / t.path.removeprefix("src/")
        original = (REPO / t.path).read_text()
        path.write_text(m.apply(original) if m else original)
        try:
            yield
        finally:
            path.write_text(original)


@contextmanager
def workspace() -> Iterator[Workspace]:
    root = Path(tempfile.mkdtemp(prefix="liken-mutate-"))
    try:
        shutil.copytree(REPO / "src" / "liken_devices", root / "src" / "liken_devices",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        ws = Workspace(root)
        where = subprocess.run([sys.executable, "-c",
                                "import liken_devices; print(liken_devices.__file__)"],
                               env=ws.env(), capture_output=True, text=True, check=True)
        if not where.stdout.strip().startswith(str(ws.src)):
            raise RuntimeError(f"the copy is not what imports: {where.stdout.strip()}")
        yield ws
    finally:
        shutil.rmtree(root, ignore_errors=True)


# Imported once by this process and inherited by every forked run: pytest's plugins and the
# libraries the tests use, never liken_devices (each run imports the mutant from the copy).
PRELOAD = ("pytest", "_pytest.python", "_pytest.fixtures", "hypothesis", "hypothesis.strategies",
           "xdist.plugin", "pytest_timeout", "pytest_benchmark.plugin", "grpc", "yaml",
           "google.protobuf.message", "lightkube", "jsonschema")


def preload() -> None:
    if any(m == "liken_devices" or m.startswith("liken_devices.") for m in sys.modules):
        raise RuntimeError("the runner must not import liken_devices: a fork would keep it")
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def pytest_args(t: Target, per_test: float) -> list[str]:
    return [*t.tests, "-x", "-q", "-n", "0", "-p", "no:cacheprovider", "--benchmark-disable",
            "--timeout", str(int(per_test)), "-o", "addopts=", "--no-header", "-W", "ignore"]


def _child(ws: Workspace, t: Target, per_test: float) -> None:
    """In the forked child: the copy first on the path, then pytest; never returns."""
    rc = 3
    try:
        os.setsid()
        os.chdir(REPO)
        os.environ.clear()
        os.environ.update(ws.env())
        sys.path[:0] = [str(ws.src), str(REPO)]
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        import pytest
        rc = int(pytest.main(pytest_args(t, per_test)))
    finally:
        os._exit(rc)


def run_tests(ws: Workspace, t: Target, deadline: float) -> tuple[str, float]:
    """``killed``, ``survived`` or ``timeout`` (a killed mutant too), and the seconds taken.

    The tests run in a fork of this process (its imports already made), in a session of their
    own so that a deadline ends them and every process they started.
    """
    start = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(ws, t, deadline)
    while True:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            break
        if time.monotonic() - start > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - start
        time.sleep(0.05)
    took = time.monotonic() - start
    rc = os.waitstatus_to_exitcode(status)
    if rc == 0:
        return "survived", took
    if rc == 5:
        raise RuntimeError(f"{t.name}: its tests {t.tests} collect nothing")
    return "killed", took


def baseline(ws: Workspace, t: Target) -> float:
    status, took = run_tests(ws, t, 900)
    if status != "survived":
        raise RuntimeError(f"{t.name}: its tests fail on the unmutated code")
    return took


def run_target(ws: Workspace, t: Target, chosen: list[Mutant], log: Any = sys.stderr,
               check_baseline: bool = True,
               progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    base = 0.0
    if check_baseline:
        with ws.mutant(t, None):
            base = baseline(ws, t)
    deadline = max(60.0, base * 3 + 10)
    results: list[dict[str, Any]] = []
    for i, m in enumerate(chosen, 1):
        with ws.mutant(t, m):
            status, took = run_tests(ws, t, deadline)
        results.append({"key": m.key, "line": m.line, "status": status,
                        "security": is_security(t, m), "seconds": round(took, 1)})
        print(f"mutate {t.name} [{i}/{len(chosen)}] {status:8} {took:5.1f}s {m.key}",
              file=log, flush=True)
        if progress is not None:
            progress({"module": t.module, "tests": list(t.tests), "baseline": round(base, 1),
                      "results": results, "left": len(chosen) - i})
    return {"module": t.module, "tests": list(t.tests), "baseline": round(base, 1),
            "results": results}


def choose(t: Target, sample: int | None, seed: int, security_only: bool,
           only: set[str] | None = None) -> list[Mutant]:
    ms = target_mutants(t)
    if security_only:
        ms = [m for m in ms if is_security(t, m)]
    if only is not None:
        ms = [m for m in ms if m.key in only]
    if sample is not None and sample < len(ms):
        rng = random.Random(f"{seed}:{t.name}")
        ms = sorted(rng.sample(ms, sample), key=lambda m: m.start)
    return ms


def floor(targets: list[Target], per_target: int, seed: int) -> int:
    """The floor ``./tasks test`` runs: ``per_target`` mutants of each target's security rules
    chosen by ``seed``; exit 1 when one survives that tests/mutation/equivalent.json does not
    explain. No baseline run (the suite itself runs these tests unmutated)."""
    equivalent = load_equivalent()
    report: dict[str, Any] = {"seed": seed, "targets": {}}
    bad = []
    with workspace() as ws:
        for t in targets:
            entry = run_target(ws, t, choose(t, per_target, seed, True), check_baseline=False)
            report["targets"][t.name] = entry["results"]
            for r in entry["results"]:
                if r["status"] == "survived" and r["key"] not in equivalent.get(t.name, {}):
                    bad.append(f"{t.name}: {r['key']}")
    report["unexplained"] = bad
    print(json.dumps(report, indent=1))
    return 1 if bad else 0


def survivors_of(data: dict[str, Any], t: Target) -> set[str] | None:
    """The keys to run again: the last full run's unexplained survivors and the mutants it
    never saw (an explained survivor keeps its result)."""
    entry = data.get("targets", {}).get(t.name)
    if entry is None:
        return None
    seen = {r["key"]: r["status"] for r in entry["results"]}
    explained = load_equivalent().get(t.name, {})
    return {m.key for m in target_mutants(t)
            if seen.get(m.key, "survived") == "survived" and not (
                m.key in seen and m.key in explained)}


def merge(old: dict[str, Any] | None, new: dict[str, Any], t: Target) -> dict[str, Any]:
    """The last full run's killed mutants (tests are only ever added, so they stay killed) with
    this run's results; mutants that no longer exist drop out, and a kept result takes its
    mutant's current line (the key is stable when code above it moves; the line is not)."""
    lines = {m.key: m.line for m in target_mutants(t)}
    fresh = {r["key"] for r in new["results"]}
    kept = [{**r, "line": lines[r["key"]]} for r in (old or {}).get("results", [])
            if r["key"] in lines and r["key"] not in fresh]
    new["results"] = sorted(kept + new["results"], key=lambda r: (r["line"], r["key"]))
    return new


# -- the document -------------------------------------------------------------------------------


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def summary(entry: dict[str, Any]) -> tuple[int, int, list[dict[str, Any]]]:
    results = entry["results"]
    survivors = [r for r in results if r["status"] == "survived"]
    return len(results), len(results) - len(survivors), survivors


def render(name: str, entry: dict[str, Any] | None,
           equivalent: dict[str, dict[str, str]]) -> str:
    if entry is None:
        return "Not run yet: `./tasks mutate " + name + "`.\n"
    total, killed, survivors = summary(entry)
    reasons = equivalent.get(name, {})
    explained = sum(1 for s in survivors if s["key"] in reasons)
    meta = entry["meta"]
    score = 100.0 * killed / total if total else 0.0
    left = entry.get("left", 0)
    partial = f" **Partial: {left} mutants not run yet.**" if left else ""
    lines = [f"`{entry['module']}`, {meta['date']}, commit `{meta['commit']}`, "
             f"tests {', '.join('`' + x + '`' for x in entry['tests'])}.{partial}", "",
             "| mutants | killed | score | survivors explained | unexplained |",
             "| ---: | ---: | ---: | ---: | ---: |",
             f"| {total} | {killed} | {score:.1f} % | {explained} | "
             f"{len(survivors) - explained} |", ""]
    if survivors:
        lines += ["| line | mutant | rule | why it is no gap: no behaviour a rule states changes |",
                  "| ---: | --- | :---: | --- |"]
        for s in sorted(survivors, key=lambda s: (s["line"], s["key"])):
            why = reasons.get(s["key"], "**unexplained**")
            key = s["key"].replace("|", "\\|")
            lines.append(f"| {s['line']} | `{key}` | {'security' if s['security'] else ''} | "
                         f"{why.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


def rewrite(doc: str, data: dict[str, Any], equivalent: dict[str, dict[str, str]]) -> str:
    def block(m: re.Match[str]) -> str:
        name = m.group(1)
        body = render(name, data.get("targets", {}).get(name), equivalent)
        return f"<!-- mutate:{name} -->\n{body}<!-- /mutate -->\n"
    return BLOCK.sub(block, doc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="./tasks mutate", description=__doc__.split("\n")[0])
    ap.add_argument("targets", nargs="*", metavar="TARGET",
                    help=f"of {', '.join(BY_NAME)} (default: all)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite docs/quality.md from docs/quality.json")
    ap.add_argument("--sample", type=int, help="run this many mutants per target, not all")
    ap.add_argument("--seed", type=int, default=0, help="which sample (with --sample)")
    ap.add_argument("--list", action="store_true", help="print the mutants' keys and stop")
    ap.add_argument("--survivors", action="store_true",
                    help="run again only the last run's unexplained survivors and new "
                         "mutants, keeping the rest of its results (after adding a test)")
    ap.add_argument("--data", type=Path, default=DATA,
                    help="where the results go (default docs/quality.json)")
    ap.add_argument("--floor", type=int, metavar="N",
                    help="the CI floor: N mutants of each target's security rules (with "
                         "--seed); exit 1 on an unexplained survivor; writes nothing")
    args = ap.parse_args(argv)
    unknown = [n for n in args.targets if n not in BY_NAME]
    if unknown:
        print(f"mutate: no target {unknown[0]!r} (of {', '.join(BY_NAME)})", file=sys.stderr)
        return 2
    chosen = [BY_NAME[n] for n in args.targets] or list(TARGETS)
    if args.floor is not None:
        preload()
        return floor(chosen, args.floor, args.seed)
    data: dict[str, Any] = json.loads(args.data.read_text()) if args.data.exists() else {}
    data.setdefault("targets", {})
    if args.list:
        for t in chosen:
            for m in target_mutants(t):
                print(f"{t.name}\t{m.line}\t{m.key}")
        return 0
    if not args.render:
        preload()
        meta = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": commit(),
                "sample": args.sample, "seed": args.seed if args.sample else None}
        with workspace() as ws:
            for t in chosen:
                only = survivors_of(data, t) if args.survivors else None
                previous = data["targets"].get(t.name)

                def save(entry: dict[str, Any], t: Target = t,
                         previous: dict[str, Any] | None = previous) -> None:
                    """After each mutant: a run stopped half-way keeps what it found (the
                    table says how many were left)."""
                    entry["meta"] = meta
                    if args.survivors:
                        entry = merge(previous, entry, t)
                    data["targets"][t.name] = entry
                    args.data.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")

                entry = run_target(ws, t, choose(t, args.sample, args.seed, False, only),
                                   progress=save if args.sample is None else None)
                entry["meta"] = meta
                if args.survivors:
                    entry = merge(data["targets"].get(t.name), entry, t)
                if args.sample is None:  # a sample never replaces the table's full run
                    data["targets"][t.name] = entry
                    args.data.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
                    DOC.write_text(rewrite(DOC.read_text(), data, load_equivalent()))
                total, killed, survivors = summary(entry)
                print(f"mutate {t.name}: {killed}/{total} killed, "
                      f"{len(survivors)} survived", file=sys.stderr)
    DOC.write_text(rewrite(DOC.read_text(), data, load_equivalent()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
