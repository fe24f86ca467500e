"""The scheduler, for real: a differential suite between `match` and the real kube-scheduler.

Every machine becomes a node of the cluster (a Node object with no kubelet, which the scheduler
places pods on all the same) whose slices are the ones the agents publish for it:

* every real recording of the corpus (`scan -o json` is the agent's own slice), where the corpus
  is present;
* generated machines (sysfs trees built here from a fixed random mix of GPUs, sound cards, USB HID,
  serial and Bluetooth devices, TPMs, watchdogs, clocks and disks), always;
* a node with three GPUs and their media.liken.sh devices, answered by the fake VA driver
  through the real libva (tests/media), for the two-driver claims.

Then, in rounds of one pod per node:

* for a sample of each machine's devices, the class, template and pod that `claim-for` writes,
  and the same claim made impossible (a selector no device meets);
* every claim of docs/examples/, on every machine;
* generated claims: selectors of every shape `match` explains (guarded or not, so that some
  raise CEL runtime errors on devices the allocator reaches), counts, allocationMode All,
  firstAvailable and matchAttribute constraints.

For each pod, `match` (offline, on the same slices) predicts the allocation or that there is
none; the real scheduler then writes the claim's `status.allocation` (or leaves the pod
unschedulable, saying why). Each disagreement fails the test, with both answers.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from liken_devices.cli import main
from liken_devices.inventory import Sources
from liken_devices.media.devices import query_devices, render_devices
from liken_devices.slices import devices_json, make_slice
from tests.media.conftest import CAPS, FakeGPUs, build_va
from tests.media.test_scan import Machine as MediaMachine
from tests.support.corpus import recordings
from tests.support.sysfs_builder import SysfsBuilder

from .support import REPO, apply, get, kubectl, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(3600)]

NS = "sched"
LABEL = "liken-test/sched"
PER_MACHINE = 4
GENERATED_MACHINES = 12
GENERATED_CLAIMS = 4
EXAMPLES = sorted((REPO / "docs" / "examples").glob("*.yaml"))
DEPLOY_CLASSES = [d for d in yaml.safe_load_all((REPO / "deploy" / "media" / "deviceclass.yaml")
                                                .read_text()) if d]
# A pod the scheduler cannot place: no devices (Unschedulable), or a CEL runtime error on a device
# the allocator reached (SchedulerError: the claim is not allocated, whatever other devices offer).
REFUSED = ("Unschedulable", "SchedulerError")
Result = tuple[str, str, str, str]  # request, driver, pool, device


def cli(*args: str) -> tuple[int, str]:
    """liken-devices in this process (a process per call would cost the suite minutes)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    if code not in (0, 1):
        raise AssertionError(f"liken-devices {' '.join(args)} exited {code}: {err.getvalue()}")
    return code, out.getvalue()


@dataclass
class Node:
    name: str
    slices: list[dict[str, Any]]
    slice_file: Path
    devices: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, name: str, slices: list[dict[str, Any]], work: Path) -> Node:
        path = work / f"{name}.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": slices}))
        names = [d["name"] for s in slices if s["spec"]["driver"] == "liken.sh"
                 for d in s["spec"]["devices"]]
        return cls(name, slices, path, names)

    def sample(self) -> list[str]:
        rng = random.Random(self.name)
        return sorted(rng.sample(self.devices, min(PER_MACHINE, len(self.devices))))


def scanned(name: str, *source: str) -> dict[str, Any]:
    _, out = cli("scan", *source, "--node", name, "-o", "json")
    obj: dict[str, Any] = json.loads(out)
    return obj


def recorded(path: Path, work: Path) -> Node:
    name = "rec-" + re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-")[:50].strip("-")
    return Node.of(name, [scanned(name, "--recording", str(path))], work)


PARTS = ["gpu", "amdgpu", "hda", "hid", "bt", "serial", "tpm", "rtc", "disk", "wdt"]


def generated(number: int, work: Path) -> Node:
    """A machine built from a fixed random mix of hardware, as sysfs trees on disk."""
    rng = random.Random(number)
    root = work / f"gen-{number}"
    b = SysfsBuilder(root / "sys")
    parts = [rng.choice(PARTS) for _ in range(rng.randint(1, 7))]
    ids = {"hid": ("046d", rng.choice(["c52b", "c534"])), "bt": ("8087", "0026"),
           "serial": ("10c4", "ea60")}
    for i, part in enumerate(parts):
        vendor, product = ids.get(part, (None, None))
        b.part(part, i, vendor=vendor, product=product,
               serial=f"S{number}{i}" if part == "serial" else None)
    facts = root / "facts"
    (facts / "storage").mkdir(parents=True)
    name = f"gen-{number}"
    return Node.of(name, [scanned(name, "--sysfs", str(root / "sys"), "--facts", str(facts),
                                  "--modules-dir", str(root), "--hwdata-dir", str(root))], work)


def three_gpus(work: Path) -> Node:
    """Three GPUs with their media.liken.sh devices (the fake VA driver, the real libva)."""
    name = "media-three-gpus"
    gpus = FakeGPUs(work / "gpus", build_va(_mkdir(work / "va")))
    saved = dict(os.environ)
    os.environ.update(gpus.env)
    try:
        m = MediaMachine(work / "media", gpus)
        m.gpu("0000:00:02.0", 128, CAPS / "intel-dg2-ihd.txt")
        m.gpu("0000:03:00.0", 129, CAPS / "amd-polaris-mesa.txt", driver="amdgpu",
              vendor="1002", device="73bf")
        m.gpu("0000:04:00.0", 130, CAPS / "av1-8bit-only.txt", driver="amdgpu", vendor="1002",
              device="73bf")
        r = m.root
        inv = Sources(sysfs=r / "sys", facts=r / "facts", modules_dir=r / "modules",
                      hwdata_dir=r / "hwdata").walk()
        media = [d.to_api() for d in query_devices(render_devices(inv), gpus.dev, 5.0)]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert len(media) == 3, media
    return Node.of(name, [make_slice(name, "liken.sh", devices_json(inv)),
                          make_slice(name, "media.liken.sh", media)], work)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def labelled(doc: dict[str, Any]) -> dict[str, Any]:
    doc.setdefault("metadata", {}).setdefault("labels", {})[LABEL] = "true"
    return doc


@pytest.fixture(scope="module")
def nodes(k8s: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    work = tmp_path_factory.mktemp("machines")
    ns = [recorded(p, work) for p in recordings()]
    ns += [generated(k, work) for k in range(GENERATED_MACHINES)]
    ns.append(three_gpus(work))
    ns = [n for n in ns if n.devices]
    assert len(ns) >= GENERATED_MACHINES // 2, "the generator publishes next to nothing"
    kubectl("create", "namespace", NS, check=False)
    resources = {"pods": "250", "cpu": "4", "memory": "8Gi"}
    # A Node created with its status keeps it: the scheduler counts pods against allocatable.
    apply([labelled({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": n.name, "labels": {"kubernetes.io/hostname": n.name}},
                     "status": {"capacity": resources, "allocatable": resources}})
           for n in ns])
    for n in ns:
        if not get("node", n.name)["status"].get("allocatable"):
            kubectl("patch", "node", n.name, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"capacity": resources,
                                           "allocatable": resources}}))
    apply([labelled(s) for n in ns for s in n.slices] + DEPLOY_CLASSES)
    # `match` reads the slices as the API server stored them, as the scheduler does: a server
    # whose DRAConsumableCapacity gate is off drops allowMultipleAllocations (no device shared).
    stored: dict[str, list[dict[str, Any]]] = {}
    for s in get("resourceslices", "-l", LABEL)["items"]:
        stored.setdefault(s["spec"]["nodeName"], []).append(s)
    ns = [Node.of(n.name, stored[n.name], work) for n in ns]
    yield ns
    cleanup()
    kubectl("delete", "resourceslices,deviceclasses", "-l", LABEL, "--wait=false", check=False)
    kubectl("delete", "nodes", "-l", LABEL, check=False)
    kubectl("delete", "namespace", NS, "--wait=false", check=False)


def cleanup() -> None:
    """No pod, claim or template of the last round left: the next one starts with every device
    free, as `match` (offline) assumes."""
    kubectl("delete", "pods", "-n", NS, "--all", "--force", "--grace-period=0", timeout=300)
    kubectl("delete", "resourceclaims,resourceclaimtemplates", "-n", NS, "--all",
            "--wait=false", timeout=300)
    wait_for("the last round's claims gone",
             lambda: not get("resourceclaims", "-n", NS)["items"] or None, timeout=180)
    kubectl("delete", "deviceclasses", "-l", f"{LABEL}=round", "--wait=false", timeout=300)


def pinned(docs: list[dict[str, Any]], node: str, tag: str) -> list[dict[str, Any]]:
    """The documents with names unique to this case, the pod pinned to ``node``."""
    renames: dict[str, str] = {}
    for d in docs:
        if d["kind"] in ("DeviceClass", "ResourceClaimTemplate", "ResourceClaim"):
            renames[d["metadata"]["name"]] = f"{tag}-{d['metadata']['name']}"[:63].rstrip("-")
    out = []
    for d in docs:
        d = json.loads(json.dumps(d))
        d["metadata"]["name"] = renames.get(d["metadata"]["name"], d["metadata"]["name"])
        d["metadata"].setdefault("labels", {})[LABEL] = "round"
        if d["kind"] != "DeviceClass":
            d["metadata"]["namespace"] = NS
        if d["kind"] in ("ResourceClaimTemplate", "ResourceClaim"):
            spec = d["spec"]["spec"] if d["kind"] == "ResourceClaimTemplate" else d["spec"]
            for req in spec["devices"]["requests"]:
                for alt in [req.get("exactly"), *req.get("firstAvailable", [])]:
                    if alt and alt.get("deviceClassName") in renames:
                        alt["deviceClassName"] = renames[alt["deviceClassName"]]
        if d["kind"] == "Pod":
            d["metadata"]["name"] = f"p-{tag}"
            spec = d["spec"]
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
            spec["tolerations"] = [{"operator": "Exists"}]
            spec.pop("initContainers", None)
            for c in spec["containers"]:
                c["image"] = "localhost/liken-pause:ci"
            for ref in spec.get("resourceClaims", []):
                for key in ("resourceClaimTemplateName", "resourceClaimName"):
                    if ref.get(key) in renames:
                        ref[key] = renames[ref[key]]
        out.append(d)
    return out


def predicted(docs: list[dict[str, Any]], node: Node, work: Path) -> set[Result] | None:
    """`match`'s answer for the pod on that node: the allocation it predicts, or None."""
    f = work / "claim.json"
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs + DEPLOY_CLASSES}))
    _, out = cli("match", "--slices", str(node.slice_file), "--node", node.name, "-f", str(f),
                 "-o", "json")
    answer = json.loads(out)
    if not answer["allocatable"]:
        return None
    results: set[Result] = set()
    for n in answer["nodes"]:
        for asked in n["asked"]:
            for claim in asked["claims"]:
                for r in claim["allocation"]["devices"]["results"]:
                    results.add((r["request"], r["driver"], r["pool"], r["device"]))
    return results


def decisions(pods: set[str]) -> dict[str, set[Result] | str]:
    """What the real scheduler did with each pod: its claims' allocation, or why it could not."""
    def decided() -> dict[str, dict[str, Any]] | None:
        found = {p["metadata"]["name"]: p for p in get("pods", "-n", NS)["items"]}
        done = {}
        for name in pods:
            for cond in found.get(name, {}).get("status", {}).get("conditions", []):
                if cond["type"] == "PodScheduled" and (cond["status"] == "True" or
                                                      cond.get("reason") in REFUSED):
                    done[name] = found[name]
        return done if len(done) == len(pods) else None

    try:
        found = wait_for("the scheduler's decision on every pod of the round", decided,
                         timeout=180, every=1.0)
    except AssertionError:
        seen = {p["metadata"]["name"]: p for p in get("pods", "-n", NS)["items"]}
        events = get("events", "-n", NS)["items"]
        stuck = []
        for name in sorted(pods):
            conds = seen.get(name, {}).get("status", {}).get("conditions", [])
            if not any(c["type"] == "PodScheduled" and (c["status"] == "True" or
                       c.get("reason") in REFUSED) for c in conds):
                said = [e["message"] for e in events
                        if e["involvedObject"].get("name", "") == name or
                        e["involvedObject"].get("name", "").startswith((f"{name}-",
                                                                        f"{name[2:]}-"))]
                stuck.append(f"{name}: {conds} {said[-3:]}")
        raise AssertionError("no decision on:\n" + "\n".join(stuck)) from None
    claims = {c["metadata"]["name"]: c for c in get("resourceclaims", "-n", NS)["items"]}
    out: dict[str, set[Result] | str] = {}
    for name, p in found.items():
        cond = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
        if cond["status"] != "True":
            out[name] = cond.get("message", "unschedulable")
            continue
        results: set[Result] = set()
        for ref in p["status"].get("resourceClaimStatuses", []):
            alloc = claims[ref["resourceClaimName"]]["status"]["allocation"]
            results |= {(r["request"], r["driver"], r["pool"], r["device"])
                        for r in alloc["devices"]["results"]}
        out[name] = results
    return out


Case = tuple[Node, list[dict[str, Any]], str]


def run_round(cases: list[Case], work: Path) -> list[str]:
    """Apply one pod per case at once, then compare each with match's prediction."""
    expected: dict[str, tuple[Node, str, set[Result] | None]] = {}
    docs: list[dict[str, Any]] = []
    for i, (node, case_docs, what) in enumerate(cases):
        tag = f"c{i}"
        case_docs = pinned(case_docs, node.name, tag)
        expected[f"p-{tag}"] = (node, what, predicted(case_docs, node, work))
        docs += case_docs
    # Classes and templates first: a pod whose template is missing waits, but needlessly.
    docs.sort(key=lambda d: d["kind"] == "Pod")
    started = time.monotonic()
    apply(docs)
    applied = time.monotonic()
    got = decisions(set(expected))
    decided = time.monotonic()
    disagreements = []
    for pod, (node, what, want) in sorted(expected.items()):
        have = got[pod]
        if isinstance(have, str):
            if want is not None:
                disagreements.append(f"{node.name} {what}: match allocates {sorted(want)}, "
                                     f"the scheduler refuses: {have}")
        elif want != have:
            disagreements.append(f"{node.name} {what}: match says "
                                 f"{sorted(want) if want else 'unallocatable'}, the scheduler "
                                 f"allocated {sorted(have)}")
    cleanup()
    print(f"round of {len(cases)}: applied in {applied - started:.1f} s, decided in "
          f"{decided - applied:.1f} s, cleaned up in {time.monotonic() - decided:.1f} s")
    return disagreements


def rounds_of(cases: dict[str, list[Case]]) -> list[list[Case]]:
    """At most one pod per node per round (each round starts with every device free)."""
    out: list[list[Case]] = []
    for per_node in cases.values():
        for i, case in enumerate(per_node):
            if i == len(out):
                out.append([])
            out[i].append(case)
    return out


def run_all(cases: dict[str, list[Case]], work: Path) -> None:
    disagreements = []
    for r in rounds_of(cases):
        disagreements += run_round(r, work)
    assert not disagreements, f"{len(disagreements)} disagreements:\n" + "\n".join(disagreements)


# -- claim-for --------------------------------------------------------------------------------


def claim_for(node: Node, device: str) -> list[dict[str, Any]] | None:
    code, out = cli("claim-for", "--slices", str(node.slice_file), "--node", node.name, device,
                    "--namespace", NS)
    if code == 1:
        return None  # refused, saying why: nothing to schedule
    return [d for d in yaml.safe_load_all(out) if d]


def impossible(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    docs = json.loads(json.dumps(docs))
    for d in docs:
        if d["kind"] == "ResourceClaimTemplate":
            req = d["spec"]["spec"]["devices"]["requests"][0]["exactly"]
            req.setdefault("selectors", []).append(
                {"cel": {"expression": 'device.attributes["liken.sh"].bus == "nowhere"'}})
    return docs


def test_claim_for_claims_allocate_as_match_predicts(nodes: list[Node], tmp_path: Path) -> None:
    cases: dict[str, list[Case]] = {}
    checked = 0
    for n in nodes:
        for device in n.sample():
            docs = claim_for(n, device)
            if docs is None:
                continue
            checked += 1
            cases.setdefault(n.name, []).append((n, docs, f"claim-for {device}"))
            cases[n.name].append((n, impossible(docs), f"claim-for {device}, made impossible"))
    assert checked >= len(nodes)
    run_all(cases, tmp_path)


# -- docs/examples ----------------------------------------------------------------------------


def test_every_example_on_every_machine_as_match_predicts(nodes: list[Node],
                                                          tmp_path: Path) -> None:
    cases: dict[str, list[Case]] = {}
    for example in EXAMPLES:
        docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
        for n in nodes:
            cases.setdefault(n.name, []).append((n, docs, example.name))
    run_all(cases, tmp_path)


# -- generated claims -------------------------------------------------------------------------


def cel_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))


def attribute_path(key: str, driver: str) -> tuple[str, str, str]:
    """(domain, identifier, CEL path) of a slice attribute name."""
    domain, _, ident = key.rpartition("/")
    domain = domain or driver
    return domain, ident, f'device.attributes["{domain}"].{ident}'


def selector(rng: random.Random, device: dict[str, Any], driver: str) -> str:
    """One selector of a shape `match` explains, true for ``device`` or not, guarded or not."""
    key = rng.choice(sorted(device.get("attributes", {})))
    (kind, value), = device["attributes"][key].items()
    domain, ident, path = attribute_path(key, driver)
    other = {"string": '"zz-no-such"', "bool": "false" if value else "true",
             "int": str(value + 1) if kind == "int" else "0",
             "version": '"0.0.0"'}.get(kind, '"x"')
    lit = cel_literal(value) if kind != "version" else json.dumps(value)
    shapes = {
        "eq": f"{path} == {lit}",
        "ne": f"{path} != {other}",
        "neq-false": f"{path} == {other}",
        "lit-eq": f"{lit} == {path}",
        "has": f"has({path})",
        "in": f"{path} in [{lit}, {other}]",
        "guarded": f'"{ident}" in device.attributes["{domain}"] && {path} == {lit}',
        "optional": f'device.attributes["{domain}"].?{ident}.orValue({other}) == {lit}',
        "wrong-type": f"{path} > 3" if kind == "string" else f'{path} == "3"',
    }
    if kind == "string":
        shapes["prefix"] = f"{path}.startsWith({json.dumps(str(value)[:3])})"
    if kind == "version":
        shapes["semver"] = f"{path}.compareTo(semver({json.dumps(value)})) == 0"
    return shapes[rng.choice(sorted(shapes))]


def generated_claim(rng: random.Random, node: Node, k: int, *, later_all: bool = True
                    ) -> list[dict[str, Any]]:
    slc = rng.choice(node.slices)
    driver = slc["spec"]["driver"]
    devices = slc["spec"]["devices"]
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
           "metadata": {"name": f"any-{k}"},
           "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}

    def request(name: str) -> dict[str, Any]:
        target = rng.choice(devices)
        alt: dict[str, Any] = {"deviceClassName": f"any-{k}", "selectors": [
            {"cel": {"expression": selector(rng, target, driver)}}
            for _ in range(rng.randint(0, 2))]}
        mode = rng.random()
        if mode < 0.15:
            alt["allocationMode"] = "All"
        elif mode < 0.4:
            alt["allocationMode"] = "ExactCount"
            alt["count"] = rng.randint(1, 3)
        if not alt["selectors"]:
            del alt["selectors"]
        if rng.random() < 0.2:
            second = dict(alt, selectors=[{"cel": {"expression": selector(rng, target,
                                                                           driver)}}])
            if not later_all and second.get("allocationMode") == "All":
                second.pop("allocationMode")
            return {"name": name, "firstAvailable": [dict(alt, name="first"),
                                                     dict(second, name="second")]}
        return {"name": name, "exactly": alt}

    requests = [request(f"r{i}") for i in range(rng.randint(1, 2))]
    spec: dict[str, Any] = {"devices": {"requests": requests}}
    if len(requests) == 2 and rng.random() < 0.5:
        key = rng.choice(sorted({a for d in devices for a in d.get("attributes", {})}))
        domain, ident, _ = attribute_path(key, driver)
        spec["devices"]["constraints"] = [{"requests": ["r0", "r1"],
                                           "matchAttribute": f"{domain}/{ident}"}]
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"gen-{k}"}, "spec": {"spec": spec}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gen"},
           "spec": {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": f"gen-{k}"}],
                    "containers": [{"name": "c", "image": "x"}]}}
    return [cls, template, pod]


def test_generated_claims_as_match_predicts(nodes: list[Node], tmp_path: Path,
                                            k8s: dict[str, str]) -> None:
    # Kubernetes 1.34's allocator checks a later All subrequest of firstAvailable with the
    # earlier subrequest's cached answers (its key's subrequest index is set after the check;
    # 1.37 sets it before). `match` answers as 1.37 does (docs/claims.md), so on 1.34 a later
    # subrequest is never All.
    later_all = not k8s["kubernetes"].startswith("1.34.")
    cases: dict[str, list[Case]] = {}
    for n in nodes:
        rng = random.Random(f"claims-{n.name}")
        for k in range(GENERATED_CLAIMS):
            docs = generated_claim(rng, n, k, later_all=later_all)
            cases.setdefault(n.name, []).append(
                (n, docs, f"generated claim {k}: {json.dumps(docs[1]['spec']['spec'])}"))
    run_all(cases, tmp_path)


# -- the media agent's adminAccess claim --------------------------------------------------------


ADMIN_NS = "sched-admin"


def test_the_media_agents_admin_claim_beside_ordinary_claims(nodes: list[Node]) -> None:
    """deploy/media's claim (adminAccess, every render node) and workloads' render-node claims
    on one node: the admin claim gets every render node, the workloads get theirs all the same,
    and the admin claim holds none of them."""
    node = next(n for n in nodes if n.name == "media-three-gpus")
    renders = sorted(d["name"] for s in node.slices if s["spec"]["driver"] == "liken.sh"
                     for d in s["spec"]["devices"] if d.get("attributes", {}).get(
                         "renderNode", {}).get("bool"))
    assert len(renders) == 3, renders
    [template] = [d for d in yaml.safe_load_all(
        (REPO / "deploy" / "media" / "claimtemplate.yaml").read_text()) if d]
    template["metadata"]["namespace"] = ADMIN_NS
    example = [d for d in yaml.safe_load_all(
        (REPO / "docs" / "examples" / "render-node.yaml").read_text()) if d]

    def admin_pod(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ADMIN_NS},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": node.name},
                         "tolerations": [{"operator": "Exists"}],
                         "resourceClaims": [{"name": "render-nodes",
                                             "resourceClaimTemplateName": "media-render-all"}],
                         "containers": [{"name": "c", "image": "localhost/liken-pause:ci"}]}}

    kubectl("delete", "namespace", ADMIN_NS, "--ignore-not-found", "--wait=true", timeout=200)
    apply([{"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ADMIN_NS,
                         "labels": {"resource.kubernetes.io/admin-access": "true"}}}, template])
    try:
        apply([admin_pod("admin")])
        admin = wait_for("the admin claim allocated", lambda: next(
            (c for c in get("resourceclaims", "-n", ADMIN_NS)["items"]
             if c.get("status", {}).get("allocation")), None), timeout=120)
        # Then as many workloads as there are render nodes: each gets one, though the admin
        # claim was allocated every render node first.
        for i in range(len(renders)):
            apply(pinned(example, node.name, f"w{i}"))
        got = decisions({f"p-w{i}" for i in range(len(renders))})
    finally:
        kubectl("delete", "namespace", ADMIN_NS, "--wait=false", check=False)
        cleanup()
    results = admin["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == renders
    assert all(r.get("adminAccess") is True and r["driver"] == "liken.sh" for r in results)
    taken = []
    for pod, have in sorted(got.items()):
        assert isinstance(have, set), f"{pod}: {have}"
        [(_, driver, _, device)] = have
        assert driver == "liken.sh" and device in renders
        taken.append(device)
    # With allowMultipleAllocations dropped (the gate off) a render node is one claim's, and the
    # workloads took all three; with it kept they may share.
    shared = any(d.get("allowMultipleAllocations") for s in node.slices
                 for d in s["spec"]["devices"])
    assert shared or sorted(taken) == renders
