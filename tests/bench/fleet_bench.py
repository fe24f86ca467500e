"""Benchmark of ``liken-devices fleet`` on a large cluster: time and number of requests.

The cluster is the loopback API server (tests/support/fakeapi.py) holding ``NODES`` synthetic
nodes, each with a Node, a ``liken.sh`` slice of 12 devices (a laptop's worth: GPU render and
display halves, audio, a USB hub's peripherals, board devices), a Machine with its status, and
for every second node a ``media.liken.sh`` slice; one device in fifty is held by a claim. The
fleet view is read exactly as the command reads it (paginated list calls, lightkube, page size
500) and built and rendered as a table. The fake server runs in the same process, on the same
two cores, and serializes every page from its store: a real API server answers from its watch
cache, so the times here are an upper bound for the client.

Run ``python -m tests.bench.fleet_bench [--nodes N] [--rounds R] [--write]``; ``--write``
replaces this benchmark's own section of docs/performance.md (between its BEGIN/END markers)
with the measured figures. tests/bench/test_fleet_bench.py runs the same code on fewer nodes.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from liken_devices import DRIVER
from liken_devices.kube.client import make_client
from liken_devices.match.fleet import PAGE, build, read_cluster, to_text
from liken_devices.slices import make_slice
from tests.support.fakeapi import FakeApiServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "performance.md"
BEGIN = "<!-- BEGIN fleet-bench (written by tests/bench/fleet_bench.py --write) -->"
END = "<!-- END fleet-bench -->"


def _dev(name: str, allow: bool = False, **attrs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "attributes": {
        k: {"bool": v} if isinstance(v, bool) else {"string": v} for k, v in attrs.items()}}
    if allow:
        out["allowMultipleAllocations"] = True
    return out


def node_devices(i: int) -> list[dict[str, Any]]:
    gpu = {"bus": "pci", "vendor": "8086", "product": "a7a0", "class": "display",
           "address": "0000:00:02.0", "resource.kubernetes.io/pciBusID": "0000:00:02.0"}
    devs = [_dev("pci-0000-00-02-0", True, subsystem="drm", renderNode=True, **gpu),
            _dev("pci-0000-00-02-0-display", subsystem="drm", displayNode=True, **gpu),
            _dev("pci-0000-00-1f-3", bus="pci", vendor="8086", product="51c8",
                 subsystem="sound", address="0000:00:1f.3")]
    for p in range(5):
        devs.append(_dev(f"usb-3-{p + 1}-1-0", bus="usb", vendor="046d", product=f"c0{p}a",
                         serial=f"N{i}P{p}", subsystem="input", address=f"3-{p + 1}:1.0"))
    for b in ("i8042", "pcspkr", "serial8250", "acpi-lnxpwrbn-00"):
        devs.append(_dev(f"platform-{b}", bus="platform", subsystem="input", address=b))
    return devs


def populate(api: FakeApiServer, nodes: int) -> int:
    """Store the synthetic cluster; returns the number of objects."""
    count = 0
    for i in range(nodes):
        node = f"node-{i:05d}"
        uid = api.add_node(node)["metadata"]["uid"]
        api.put_object("resourceslices", make_slice(node, DRIVER, node_devices(i),
                                                    owner_uid=uid))
        count += 2
        if i % 2 == 0:
            api.put_object("resourceslices", make_slice(node, "media.liken.sh", [
                _dev("pci-0000-00-02-0", decodeH264=True, encodeH264=True,
                     **{"resource.kubernetes.io/pciBusID": "0000:00:02.0"})]))
            count += 1
        unclaimed = [{"bus": "pci", "name": "Wi-Fi 6E AX211", "candidates": ["iwlwifi"],
                      "message": "no driver bound"}] if i % 10 == 0 else []
        api.put_object("machines", {
            "apiVersion": "liken.sh/v1alpha1", "kind": "Machine", "metadata": {"name": node},
            "spec": {}, "status": {"hardware": {"unclaimed": unclaimed}, "conditions": [
                {"type": "FactsPublished", "status": "True", "reason": "FactsRead"}]}})
        count += 1
        if i % 50 == 0:
            api.add_claim("team", f"c{i}", results=[{"device": "usb-3-1-1-0"}], node=node)
            count += 1
    return count


@dataclass
class Result:
    nodes: int
    objects: int
    devices: int
    requests: int
    by_resource: dict[str, int]
    times: list[float]
    build_render: list[float]
    peak_rss_mib: float


def measure(nodes: int, rounds: int = 3, page: int = PAGE) -> Result:
    api = FakeApiServer().start()
    try:
        objects = populate(api, nodes)
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
            client = make_client(kubeconfig, timeout=120.0)
            times, rest = [], []
            requests = 0
            by_resource: dict[str, int] = {}
            devices = 0
            for _ in range(rounds):
                api.verbs.clear()
                t0 = time.perf_counter()
                snap = read_cluster(client, page=page)
                t1 = time.perf_counter()
                fleet = build(snap)
                to_text(fleet)
                t2 = time.perf_counter()
                times.append(t2 - t0)
                rest.append(t2 - t1)
                requests = len(api.verbs)
                by_resource = {}
                for verb, res in api.verbs:
                    assert verb == "list", f"fleet made a {verb} request"
                    by_resource[res] = by_resource.get(res, 0) + 1
                devices = len(fleet.rows)
            client.close()
    finally:
        api.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return Result(nodes, objects, devices, requests, by_resource, times, rest, rss)


def expected_requests(nodes: int, page: int = PAGE) -> int:
    """What paginated list calls must cost: one request per page of every list."""
    return (math.ceil(nodes / page) + math.ceil(math.ceil(nodes / 2) / page)  # two drivers
            + math.ceil(nodes / page) * 2  # Nodes, Machines
            + max(1, math.ceil(math.ceil(nodes / 50) / page)))  # ResourceClaims


def section(r: Result) -> str:
    pages = ", ".join(f"{k} {v}" for k, v in sorted(r.by_resource.items()))
    return "\n".join([
        BEGIN,
        "## Fleet view (`liken-devices fleet`)",
        "",
        "`tests/bench/fleet_bench.py`: the loopback API server holds "
        f"{r.nodes:,} synthetic nodes ({r.objects:,} objects: Nodes, 12-device `liken.sh` "
        "slices, `media.liken.sh` slices for half of them, Machines with status, claims), and "
        "`fleet` reads them with paginated list calls (page size 500), builds the view and "
        "renders the table. The fake server shares the process and the two cores and "
        "serializes every page, so the times are an upper bound for the client.",
        "",
        "| nodes | devices | requests | min | median | build + render |",
        "|---|---|---|---|---|---|",
        f"| {r.nodes:,} | {r.devices:,} | {r.requests} ({pages}) | {min(r.times):.2f} s | "
        f"{statistics.median(r.times):.2f} s | {statistics.median(r.build_render):.2f} s |",
        "",
        f"Every request is a list (no watch, no get); peak resident memory {r.peak_rss_mib:.0f} "
        "MiB for the server and the client together.",
        END,
    ])


def write_section(text: str, doc: Path = DOC) -> None:
    body = doc.read_text() if doc.exists() else "# Performance\n"
    if BEGIN in body and END in body:
        head, _, rest = body.partition(BEGIN)
        _, _, tail = rest.partition(END)
        body = head + text + tail
    else:
        body = body.rstrip("\n") + "\n\n" + text + "\n"
    tmp = doc.with_suffix(".md.tmp")
    tmp.write_text(body)
    tmp.replace(doc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--write", action="store_true",
                   help="replace this benchmark's section of docs/performance.md")
    args = p.parse_args(argv)
    r = measure(args.nodes, args.rounds)
    text = section(r)
    print(text)
    if args.write:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
