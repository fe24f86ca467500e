"""``fleet`` and ``match --kubeconfig`` against the loopback API server with many nodes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from liken_devices.cli import main
from liken_devices.inventory.limits import DRIVER
from liken_devices.match.cli import kubectl_main
from liken_devices.slices import make_slice
from tests.support.fakeapi import FakeApiServer

NODES = 60


def device(name: str, **attrs: str) -> dict[str, Any]:
    return {"name": name, "attributes": {k: {"string": v} for k, v in attrs.items()}}


def populate(api: FakeApiServer, nodes: int = NODES) -> dict[str, str]:
    """``nodes`` nodes with a reader, a serial stick and a GPU; a few of them in trouble."""
    uids = {}
    for i in range(nodes):
        node = f"node-{i:04d}"
        uids[node] = api.add_node(node)["metadata"]["uid"]
        devs = [device("usb-1-2", bus="usb", vendor="04e6", product="5116", serial=f"R{i}",
                       **{"class": "smart-card"}),
                device("usb-1-3-1-0", bus="usb", vendor="10c4", product="ea60",
                       subsystem="tty", serial=f"S{i}"),
                {**device("pci-0000-00-02-0", bus="pci", vendor="8086", subsystem="drm"),
                 "allowMultipleAllocations": True}]
        api.put_object("resourceslices", make_slice(node, DRIVER, devs, owner_uid=uids[node]))
        if i % 2 == 0:
            api.put_object("resourceslices", make_slice(node, "media.liken.sh", [
                {"name": "pci-0000-00-02-0", "attributes": {
                    "decodeH264": {"bool": True},
                    "resource.kubernetes.io/pciBusID": {"string": "0000:00:02.0"}}}]))
        status: dict[str, Any] = {
            "hardware": {"unclaimed": [{"bus": "pci", "name": "Wi-Fi 6 AX200",
                                        "candidates": ["iwlwifi"], "message": "no driver"}]}
            if i % 10 == 0 else {"unclaimed": []},
            "conditions": [{"type": "FactsPublished",
                            "status": "False" if i == 3 else "True",
                            "reason": "FactsUnreadable" if i == 3 else "FactsRead",
                            "message": "facts root missing" if i == 3 else ""}]}
        api.put_object("machines", {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                                    "metadata": {"name": node}, "spec": {}, "status": status})
    # Trouble: node 1 is gone, node 2 is NotReady, node 4 was recreated under its name.
    api.delete_object("nodes", "node-0001")
    n2 = api.get_object("nodes", "node-0002")
    assert n2 is not None
    n2["status"] = {"conditions": [{"type": "Ready", "status": "Unknown",
                                    "reason": "NodeStatusUnknown"}]}
    api.put_object("nodes", n2)
    api.delete_object("nodes", "node-0004")
    api.add_node("node-0004")
    # A Machine without a slice: an agent that never published.
    api.put_object("machines", {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                                "metadata": {"name": "node-new"}, "spec": {}})
    api.add_claim("team-a", "reader", results=[{"device": "usb-1-2"}], node="node-0005")
    claim = api.get_object("resourceclaims", "reader", "team-a")
    assert claim is not None
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "scanner-0", "uid": "u1"}]
    api.put_object("resourceclaims", claim)
    return uids


def fleet(api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
          *args: str) -> tuple[int, str]:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    rc = main(["fleet", "--kubeconfig", str(kubeconfig), *args])
    return rc, capsys.readouterr().out


def _claim_file(tmp_path: Path, device_class: str) -> Path:
    """A claim file asking for one device of ``device_class``."""
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": "team-b"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {
            "deviceClassName": device_class}}]}}}))
    return claim


def test_fleet_lists_every_node_with_paginated_lists(api: FakeApiServer, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    populate(api)
    api.requests.clear()
    api.verbs.clear()
    rc, out = fleet(api, tmp_path, capsys, "-o", "json", "--page-size", "7")
    assert rc == 0
    data = json.loads(out)
    assert data["nodes"] == NODES
    liken = [d for d in data["devices"] if d["driver"] == DRIVER]
    media = [d for d in data["devices"] if d["driver"] == "media.liken.sh"]
    assert len(liken) == 3 * NODES and len(media) == NODES // 2
    # Only list calls, each a page of at most 7.
    assert {v for v, _ in api.verbs} == {"list"}
    slice_pages = sum(1 for _, r in api.verbs if r == "resourceslices")
    # One slice per node and driver: the liken.sh list and the media.liken.sh list, paged.
    assert slice_pages == math.ceil(NODES / 7) + math.ceil(NODES / 2 / 7)
    held = {(d["node"], d["device"]): d["heldBy"] for d in liken if d["heldBy"]}
    assert held == {("node-0005", "usb-1-2"): ["team-a/reader (scanner-0)"]}
    problems = {(p["node"], p["problem"]): p["detail"] for p in data["problems"]}
    assert "outlived" in problems[("node-0001", "stale slice")]
    assert "Ready is Unknown" in problems[("node-0002", "stale slice")]
    assert "earlier Node" in problems[("node-0004", "stale slice")]
    assert problems[("node-0003", "facts unreadable")] == "facts root missing"
    assert ("node-new", "no slice") in problems
    assert len([p for p in data["problems"] if p["problem"] == "stale slice"]) == 3
    unclaimed = data["unclaimed"]
    assert len(unclaimed) == NODES // 10
    assert unclaimed[0]["candidates"] == ["iwlwifi"]
    stale = {d["node"] for d in liken if d["staleSlice"]}
    assert stale == {"node-0001", "node-0002", "node-0004"}


def test_fleet_table_and_filters(api: FakeApiServer, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    populate(api, 12)
    rc, out = fleet(api, tmp_path, capsys)
    assert rc == 0
    assert out.splitlines()[0].split() == ["NODE", "DRIVER", "DEVICE", "CLASS", "SUBSYSTEM",
                                           "SHARED", "HELD-BY"]
    assert "node-0001 (stale)" in out
    assert "Unclaimed hardware" in out and "iwlwifi" in out
    assert "facts unreadable" in out
    rc, out = fleet(api, tmp_path, capsys, "-o", "wide", "--node", "node-0005")
    assert rc == 0
    rows = [line for line in out.splitlines() if line.startswith("node-")]
    assert {r.split()[0] for r in rows} == {"node-0005"}
    assert "SERIAL" in out and "R5" in out and "team-a/reader (scanner-0)" in out
    rc, out = fleet(api, tmp_path, capsys, "-o", "json", "--attribute", "class=smart-card")
    devices = json.loads(out)["devices"]
    assert len(devices) == 12 and {d["device"] for d in devices} == {"usb-1-2"}
    rc, out = fleet(api, tmp_path, capsys, "-o", "yaml", "--selector",
                    'device.attributes["liken.sh"].vendor == "10c4" && '
                    'device.attributes["liken.sh"].serial in ["S3", "S7"]')
    devices = yaml.safe_load(out)["devices"]
    assert sorted(d["node"] for d in devices) == ["node-0003", "node-0007"]
    assert fleet(api, tmp_path, capsys, "--selector", "device.")[0] == 2
    assert fleet(api, tmp_path, capsys, "--attribute", "novalue")[0] == 2


def test_fleet_reports_an_unreachable_api_server(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApiServer().start()
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.stop()
    assert main(["fleet", "--kubeconfig", str(kubeconfig)]) == 2
    assert "the API server" in capsys.readouterr().err


CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": "serial"},
         "spec": {"selectors": [{"cel": {"expression":
                                         'device.attributes["liken.sh"].subsystem == "tty"'}}]}}


def test_match_against_the_cluster(api: FakeApiServer, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Which nodes can allocate a reader: every one but the node whose reader is held (the
    class guards the attribute other devices lack: unguarded, the scheduler stops at them)."""
    populate(api, 8)
    api.put_object("deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "reader"},
        "spec": {"selectors": [{"cel": {"expression":
                                        'has(device.attributes["liken.sh"].class) && '
                                        'device.attributes["liken.sh"].class == "smart-card"'}}]}})
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    claim = _claim_file(tmp_path, "reader")
    rc = main(["match", "-f", str(claim), "--kubeconfig", str(kubeconfig), "-o", "json",
               "--page-size", "3"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    ok = {n["node"]: n["allocatable"] for n in data["nodes"]}
    assert ok["node-0005"] is False and sum(ok.values()) == 7
    assert data["summary"].startswith("allocatable on 7 of 8 nodes")
    # The kubectl plugin reads $KUBECONFIG and defaults to the cluster.
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    rc = kubectl_main(["match", "-f", str(claim), "--node", "node-0005"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "held by ResourceClaim team-a/reader (reserved for pods/scanner-0)" in out
    rc = kubectl_main(["claim-for", "usb-1-3-1-0", "--node", "node-0006"])
    assert rc == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    selectors = objects[1]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    assert {"cel": {"expression": 'has(device.attributes["liken.sh"].serial) && '
                                  'device.attributes["liken.sh"].serial == "S6"'}} in selectors
    rc = kubectl_main(["fleet", "--node", "node-0006"])
    assert rc == 0 and "node-0006" in capsys.readouterr().out


def test_kubectl_plugin_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        kubectl_main(["match"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kubectl liken match: ")


def test_a_claim_of_a_later_api_shape_still_holds_its_device(
        api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A request shape this version cannot read does not hide what the claim holds."""
    populate(api, 3)
    api.add_claim("team-c", "future", results=[{"device": "usb-1-3-1-0"}], node="node-0000")
    future = api.get_object("resourceclaims", "future", "team-c")
    assert future is not None
    future["spec"] = {"devices": {"requests": [{"name": "r", "somethingNew": {}}]}}
    api.put_object("resourceclaims", future)
    rc, out = fleet(api, tmp_path, capsys, "-o", "json", "--node", "node-0000")
    held = {d["device"]: d["heldBy"] for d in json.loads(out)["devices"] if d["heldBy"]}
    assert held == {"usb-1-3-1-0": ["team-c/future"]}
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    claim = _claim_file(tmp_path, "serial")
    classes = tmp_path / "class.yaml"
    classes.write_text(yaml.safe_dump(CLASS))
    rc = main(["match", "-f", str(claim), "-f", str(classes), "--kubeconfig", str(kubeconfig),
               "--node", "node-0000"])
    assert rc == 1
    assert "held by ResourceClaim team-c/future" in capsys.readouterr().out
