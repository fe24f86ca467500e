"""Benchmark of ``liken-devices fleet`` on a large cluster: time and number of requests.

The cluster is the loopback API server (tests/support/fakeapi.py) holding ``NODES`` synthetic
nodes, each with a Node, a ``liken.sh`` slice of 12 devices (a laptop's worth: GPU render and
display halves, audio, a USB hub's peripherals, board devices), a Machine with its status, and
for every second node a ``media.liken.sh`` slice; one device in fifty is held by a claim. The
fleet view is read exactly as the command reads it (paginated list calls, lightkube, page size
500) and built and rendered as a table. The fake server runs in the same process, on the same
two cores, and serializes every page from its store: a real API server answers from its watch
cache, so the times here are an upper bound for the client.

``./tasks bench -k fleet`` measures it (tests/bench/test_fleet_bench.py) and writes the figures
into docs/performance.md; ``python -m tests.bench.fleet_bench [--nodes N] [--rounds R]`` prints
them for a quick look.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from liken_devices.inventory.limits import DRIVER
from liken_devices.kube.client import make_client
from liken_devices.match.fleet import PAGE, build, read_cluster, to_text
from liken_devices.slices import make_slice
from tests.bench.figures import self_cpu
from tests.support.fakeapi import FakeApiServer


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
class Pass:
    """One fleet pass: wall and CPU seconds (client and in-process server), requests by kind."""

    wall: float
    cpu: float
    build_render: float
    devices: int
    by_resource: dict[str, int]

    @property
    def requests(self) -> int:
        return sum(self.by_resource.values())


class Cluster:
    """The loopback API server with ``nodes`` synthetic nodes, and a client for it."""

    def __init__(self, nodes: int, directory: Path) -> None:
        self.nodes = nodes
        self.api = FakeApiServer().start()
        self.objects = populate(self.api, nodes)
        self.client = make_client(self.api.write_kubeconfig(directory / "kubeconfig"),
                                  timeout=300.0)

    def fleet_pass(self, page: int = PAGE) -> Pass:
        """``liken-devices fleet`` as the command runs it: list, build, render."""
        self.api.verbs.clear()
        cpu0, t0 = self_cpu(), time.perf_counter()
        snap = read_cluster(self.client, page=page)
        t1 = time.perf_counter()
        fleet = build(snap)
        to_text(fleet)
        t2 = time.perf_counter()
        by_resource: dict[str, int] = {}
        for verb, res in self.api.verbs:
            if verb != "list":
                raise AssertionError(f"fleet made a {verb} request on {res}")
            by_resource[res] = by_resource.get(res, 0) + 1
        return Pass(t2 - t0, self_cpu() - cpu0, t2 - t1, len(fleet.rows), by_resource)

    def close(self) -> None:
        self.client.close()
        self.api.stop()


def expected_requests(nodes: int, page: int = PAGE) -> int:
    """What paginated list calls must cost: one request per page of every list."""
    return (math.ceil(nodes / page) + math.ceil(math.ceil(nodes / 2) / page)  # two drivers
            + math.ceil(nodes / page) * 2  # Nodes, Machines
            + max(1, math.ceil(math.ceil(nodes / 50) / page)))  # ResourceClaims


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(args.nodes, Path(tmp))
        try:
            for _ in range(args.rounds):
                r = cluster.fleet_pass()
                print(f"{args.nodes} nodes, {r.devices} devices: {r.wall:.2f} s wall, "
                      f"{r.cpu:.2f} s CPU, {r.build_render:.2f} s build+render, "
                      f"{r.requests} requests {r.by_resource}")
        finally:
            cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
