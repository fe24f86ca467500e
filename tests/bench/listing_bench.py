"""Benchmark of one list answer at the bounds: a real page of the largest slices against the
worst a hostile API server can send within them.

Each case is served by the loopback API server (tests/support/fakeapi.py) and read in a fresh
Python process exactly as ``fleet`` reads a list (``kube/listing.py``, ``limit`` 500, every
object kept, as the command keeps them), so the peak resident memory (the process's own
high-water mark, ``VmHWM``) is the reader's alone. The cases:

- ``real``: a page of 500 ResourceSlices at the API's maximum (128 devices, 32 attributes of
  64-byte strings each; tests/kube/test_listing.py builds it), the largest page a real cluster
  can answer; it is read whole;
- ``tiny values``: objects holding nothing but empty objects (``{}`` costs 64 bytes of memory
  for 3 of JSON), refused at the page's value bound;
- ``short strings``: objects holding lists of 24-byte strings (the most memory per value and per
  byte together), refused at the value or the byte bound;
- ``short non-ASCII strings``: the same with eight euro signs (three bytes of JSON, two of
  memory each);
- ``long strings``: objects of one 3.9 MiB string each, refused at the page's byte bound;
- ``more objects than asked``: a page that goes on past the 500 objects asked.

``./tasks bench -k listing`` measures them (tests/bench/test_listing_bench.py) and writes the
figures into docs/performance.md; ``python -m tests.bench.listing_bench`` prints them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.fakeapi import FakeApiServer

REPO = Path(__file__).resolve().parents[2]


def maximal_page() -> bytes:
    """500 of the largest slices, as the API server writes a list (compact JSON)."""
    from tests.kube.test_listing import maximal_slice

    items = [json.dumps(maximal_slice(f"node-{i:03d}"), separators=(",", ":")).encode()
             for i in range(500)]
    return (b'{"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","metadata":'
            b'{"resourceVersion":"1"},"items":[' + b",".join(items) + b"]}")


def _flood(item: bytes, page_bytes: int) -> Callable[[FakeApiServer], None]:
    def setup(api: FakeApiServer) -> None:
        api.hostile_list = "flood"
        api.hostile_item = item
        api.hostile_page_bytes = page_bytes
    return setup


def _raw(body: bytes) -> Callable[[FakeApiServer], None]:
    def setup(api: FakeApiServer) -> None:
        api.hostile_list = "raw"
        api.hostile_body = body
        api.raw_chunk = 1 << 16
    return setup


CASES: dict[str, Callable[[], Callable[[FakeApiServer], None]]] = {
    "real": lambda: _raw(maximal_page()),
    "tiny values": lambda: _flood(b'{"a":[' + b"{}," * 40_000 + b"{}]}", 600 << 20),
    "short strings": lambda: _flood(
        b'{"a":[' + b",".join([b'"' + b"s" * 24 + b'"'] * 40_000) + b"]}", 600 << 20),
    "short non-ASCII strings": lambda: _flood(
        b'{"a":[' + b",".join([b'"' + "\u20ac".encode() * 8 + b'"'] * 40_000) + b"]}",
        600 << 20),
    "long strings": lambda: _flood(b'{"a":"' + b"x" * ((39 << 20) // 10) + b'"}', 600 << 20),
    "more objects than asked": lambda: _flood(b'{"metadata":{"name":"n"}}', 600 << 20),
}


@dataclass(frozen=True)
class Reading:
    case: str
    wall: float
    peak_mib: float
    baseline_mib: float
    outcome: str


# The reader reports its own high-water mark (VmHWM, in KiB): the kernel's ru_maxrss of a child
# also counts the pages of the parent it was forked from, which here holds the page it serves.
READER = """
import sys, time
from liken_devices.kube.client import ApiError, Resources, make_client
from liken_devices.kube.listing import Budget, list_pages
def hwm():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
client = make_client(sys.argv[1], timeout=300.0)
base = hwm()
t = time.perf_counter()
try:
    objects = list(list_pages(client, Resources.node(), Budget(), page=500))
    outcome = f"read {len(objects)} objects"
except ApiError as exc:
    outcome = exc.message
print(f"{time.perf_counter() - t}\\t{base}\\t{hwm()}\\t{outcome}")
"""


def read(case: str, directory: Path) -> Reading:
    """Serve ``case`` and read it in a fresh process."""
    api = FakeApiServer().start()
    try:
        CASES[case]()(api)
        kubeconfig = api.write_kubeconfig(directory / "kubeconfig")
        env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO}"}
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen([sys.executable, "-c", READER, str(kubeconfig)],
                                    stdout=subprocess.PIPE, stderr=err, env=env)
            assert proc.stdout is not None
            out = proc.stdout.read()
            proc.stdout.close()
            _, status = os.waitpid(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            if proc.returncode != 0:
                raise AssertionError(f"{case}: the reader failed: {err.read()[-2000:]!r}")
    finally:
        api.stop()
    wall, base, peak, outcome = out.decode().strip().split("\t", 3)
    return Reading(case, float(wall), int(peak) / 1024, int(base) / 1024, outcome)


def main(argv: list[str] | None = None) -> int:
    cases = (argv if argv else None) or list(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            t = time.perf_counter()
            r = read(case, Path(tmp))
            print(f"{case}: {r.wall:.2f} s, peak {r.peak_mib:.0f} MiB (baseline "
                  f"{r.baseline_mib:.0f} MiB), {r.outcome} [{time.perf_counter() - t:.1f} s]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
