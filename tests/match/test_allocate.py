"""``match`` on hand-written claims whose answers are known, through the command line.

The node: two USB serial adapters (exclusive), a GPU's render node (shareable) and card node
(exclusive) from liken.sh, and a media.liken.sh device for that GPU plus one for a GPU that is
not on the node, all as a node would publish them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("cel_expr_python")

from liken_devices.cli import main

NODE = "n1"
BUS = "0000:00:02.0"


def dev(name: str, allow: bool = False, **attrs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "attributes": {
        k.replace("__", "/").replace("_dot_", "."): (
            {"bool": v} if isinstance(v, bool) else {"int": v} if isinstance(v, int)
            else {"string": v})
        for k, v in attrs.items()}}
    if allow:
        out["allowMultipleAllocations"] = True
    return out


def slice_(driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-{driver}"},
            "spec": {"driver": driver, "nodeName": NODE,
                     "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


PCI = {"resource_dot_kubernetes_dot_io__pciBusID": BUS}
SLICES = [
    slice_("liken.sh", [
        dev("usb-1-2-1-0", bus="usb", vendor="10c4", product="ea60", serial="A1",
            subsystem="tty", address="1-2:1.0"),
        dev("usb-1-3-1-0", bus="usb", vendor="0403", product="6001", serial="B2",
            subsystem="tty", address="1-3:1.0"),
        dev("pci-0000-00-02-0", allow=True, bus="pci", vendor="8086", subsystem="drm",
            renderNode=True, address=BUS, **PCI),
        dev("pci-0000-00-02-0-display", bus="pci", vendor="8086", subsystem="drm",
            displayNode=True, address=BUS, **PCI),
    ]),
    slice_("media.liken.sh", [
        dev("pci-0000-00-02-0", decodeH264=True, **PCI),
        dev("pci-0000-03-00-0", decodeH264=True,
            resource_dot_kubernetes_dot_io__pciBusID="0000:03:00.0"),
    ]),
]

CLASSES = [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "serial"},
     "spec": {"selectors": [{"cel": {"expression":
         'device.driver == "liken.sh" && device.attributes["liken.sh"].subsystem == "tty"'}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "render"},
     "spec": {"selectors": [{"cel": {"expression":
         'device.driver == "liken.sh" && has(device.attributes["liken.sh"].renderNode)'}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "media"},
     "spec": {"selectors": [{"cel": {"expression": 'device.driver == "media.liken.sh"'}}]}},
]


def claim(requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None,
          name: str = "c", allocated: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": requests, **(
            {"constraints": constraints} if constraints else {})}}}
    if allocated is not None:
        obj["status"] = {"allocation": {"devices": {"results": allocated}},
                         "reservedFor": [{"resource": "pods", "name": f"{name}-pod",
                                          "uid": "u"}]}
    return obj


def req(name: str, cls: str, *selectors: str, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, **extra}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def run(tmp_path: Path, *objs: dict[str, Any], capsys: pytest.CaptureFixture[str],
        slices: list[dict[str, Any]] | None = None) -> tuple[int, dict[str, Any]]:
    files = tmp_path / "in.yaml"
    files.write_text(yaml.safe_dump_all([*CLASSES, *objs]))
    sl = tmp_path / "slices.yaml"
    sl.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                  "items": slices if slices is not None else SLICES}))
    rc = main(["match", "-f", str(files), "--slices", str(sl), "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    return rc, out


def first_claim(out: dict[str, Any]) -> dict[str, Any]:
    return out["nodes"][0]["asked"][0]["claims"][0]  # type: ignore[no-any-return]


def alternative(out: dict[str, Any], request: int = 0) -> dict[str, Any]:
    return first_claim(out)["requests"][request]["alternatives"][0]  # type: ignore[no-any-return]


def test_wrong_vendor_names_the_value_and_the_wish(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(tmp_path, claim([req("s", "serial",
                                       'device.attributes["liken.sh"].vendor == "0403"')]),
                  capsys=capsys)
    assert rc == 0
    alt = alternative(out)
    assert [m["device"] for m in alt["matching"]] == ["usb-1-3-1-0"]
    rejected = {r["device"]: r for r in alt["notMatching"]}
    assert rejected["usb-1-2-1-0"]["reason"] == (
        'device.attributes["liken.sh"].vendor is "10c4", the selector wants "0403"')
    assert rejected["usb-1-2-1-0"]["selector"] == "request s selector 1"
    # The GPU fails the class first, and the explanation says so.
    assert rejected["pci-0000-00-02-0"]["selector"] == "DeviceClass serial selector 1"
    assert first_claim(out)["requests"][0]["devices"] == ["usb-1-3-1-0"]


def test_no_vendor_matches_is_not_allocatable(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(tmp_path, claim([req("s", "serial",
                                       'device.attributes["liken.sh"].vendor == "1a86"')]),
                  capsys=capsys)
    assert rc == 1
    assert out["allocatable"] is False
    assert "needs 1 device, 0 match" in first_claim(out)["reason"]


def test_missing_attribute_is_an_error_on_that_device(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(tmp_path, claim([req("g", "render",
                                       'device.attributes["liken.sh"].serial == "x"')]),
                  capsys=capsys)
    assert rc == 1
    (rej,) = [r for r in alternative(out)["notMatching"]
            if r["device"] == "pci-0000-00-02-0" and r["driver"] == "liken.sh"]
    assert rej["error"] is True
    assert "no such key: serial" in rej["reason"]
    assert first_claim(out)["warnings"]


def test_guarded_missing_attribute_is_a_plain_mismatch(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(tmp_path, claim([req("g", "render",
                                       'has(device.attributes["liken.sh"].serial)')]),
                  capsys=capsys)
    assert rc == 1
    (rej,) = [r for r in alternative(out)["notMatching"]
            if r["device"] == "pci-0000-00-02-0" and r["driver"] == "liken.sh"]
    assert rej["error"] is False
    assert 'device.attributes["liken.sh"].serial is absent' in rej["reason"]


PAIR = [req("gpu", "render"), req("media", "media")]


def test_match_attribute_pairs_render_and_media(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(tmp_path, claim(PAIR, [{"requests": ["gpu", "media"],
                                          "matchAttribute": "resource.kubernetes.io/pciBusID"}]),
                  capsys=capsys)
    assert rc == 0
    requests = first_claim(out)["requests"]
    assert requests[0]["devices"] == ["pci-0000-00-02-0"]
    # The media device of the card that is on the node, though the other one comes first in
    # no particular order: the pairing decides.
    assert requests[1]["devices"] == ["pci-0000-00-02-0"]


def test_match_attribute_that_cannot_hold(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    only_other = [req("gpu", "render"),
                  req("media", "media", 'device.attributes["resource.kubernetes.io"].pciBusID'
                                        ' == "0000:03:00.0"')]
    rc, out = run(tmp_path, claim(only_other, [{"requests": ["gpu", "media"], "matchAttribute":
                                                "resource.kubernetes.io/pciBusID"}]),
                  capsys=capsys)
    assert rc == 1
    reason = first_claim(out)["reason"]
    assert "matchAttribute resource.kubernetes.io/pciBusID" in reason
    assert '"0000:00:02.0"' in reason and '"0000:03:00.0"' in reason


def test_match_attribute_on_an_attribute_one_side_lacks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(tmp_path, claim(PAIR, [{"matchAttribute": "liken.sh/address"}]),
                  capsys=capsys)
    assert rc == 1  # media devices have no liken.sh/address: no choice can satisfy it
    assert "media.pci-0000-00-02-0=absent" not in first_claim(out)["reason"]
    assert "pci-0000-00-02-0=absent" in first_claim(out)["reason"]


def test_count_two_with_one_free(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    held = claim([req("s", "serial")], name="other", allocated=[
        {"request": "s", "driver": "liken.sh", "pool": NODE, "device": "usb-1-2-1-0"}])
    rc, out = run(tmp_path, held, claim([req("s", "serial", count=2)]), capsys=capsys)
    assert rc == 1
    assert "needs 2 devices, 2 match and 1 of them is free" in first_claim(out)["reason"]
    matching = {m["device"]: m for m in alternative(out)["matching"]}
    assert matching["usb-1-2-1-0"]["free"] is False
    assert matching["usb-1-2-1-0"]["heldBy"] == \
        "ResourceClaim default/other (reserved for pods/other-pod)"


def test_exclusive_device_taken_by_another_claim(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    held = claim([req("s", "serial")], name="other", allocated=[
        {"request": "s", "driver": "liken.sh", "pool": NODE, "device": "usb-1-3-1-0"}])
    mine = claim([req("s", "serial", 'device.attributes["liken.sh"].serial == "B2"')])
    rc, out = run(tmp_path, held, mine, capsys=capsys)
    assert rc == 1
    assert alternative(out)["matching"][0]["free"] is False


def test_shareable_device_held_by_another_claim_is_still_free(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    held = claim([req("g", "render")], name="other", allocated=[
        {"request": "g", "driver": "liken.sh", "pool": NODE, "device": "pci-0000-00-02-0"}])
    rc, out = run(tmp_path, held, claim([req("g", "render")]), capsys=capsys)
    assert rc == 0
    assert alternative(out)["matching"][0]["free"] is True


def test_admin_access_reaches_a_taken_device(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    held = claim([req("s", "serial")], name="other", allocated=[
        {"request": "s", "driver": "liken.sh", "pool": NODE, "device": "usb-1-3-1-0"}])
    mine = claim([req("s", "serial", 'device.attributes["liken.sh"].serial == "B2"',
                      adminAccess=True)])
    rc, _ = run(tmp_path, held, mine, capsys=capsys)
    assert rc == 0


def test_admin_access_allocation_takes_nothing(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    held = claim([req("s", "serial")], name="admin", allocated=[
        {"request": "s", "driver": "liken.sh", "pool": NODE, "device": "usb-1-3-1-0",
         "adminAccess": True}])
    mine = claim([req("s", "serial", 'device.attributes["liken.sh"].serial == "B2"')])
    rc, _ = run(tmp_path, held, mine, capsys=capsys)
    assert rc == 0


def test_first_available_falls_through(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    r = {"name": "s", "firstAvailable": [
        {"name": "ftdi2", "deviceClassName": "serial", "count": 2, "selectors": [
            {"cel": {"expression": 'device.attributes["liken.sh"].vendor == "0403"'}}]},
        {"name": "any", "deviceClassName": "serial"}]}
    rc, out = run(tmp_path, claim([r]), capsys=capsys)
    assert rc == 0
    assert first_claim(out)["requests"][0]["chosen"] == "s/any"


def test_allocation_mode_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(tmp_path, claim([req("s", "serial", allocationMode="All")]), capsys=capsys)
    assert rc == 0
    assert sorted(first_claim(out)["requests"][0]["devices"]) == ["usb-1-2-1-0", "usb-1-3-1-0"]
    held = claim([req("s", "serial")], name="other", allocated=[
        {"request": "s", "driver": "liken.sh", "pool": NODE, "device": "usb-1-3-1-0"}])
    rc, out = run(tmp_path, held, claim([req("s", "serial", allocationMode="All")]),
                  capsys=capsys)
    assert rc == 1
    assert "held by other claims" in first_claim(out)["reason"]


def test_missing_class_and_bad_selector(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(tmp_path, claim([req("s", "nosuchclass")]), capsys=capsys)
    assert rc == 1
    assert "DeviceClass nosuchclass not found" in first_claim(out)["reason"]
    rc, out = run(tmp_path, claim([req("s", "serial", "device.attributes[")]), capsys=capsys)
    assert rc == 1
    assert "does not compile" in first_claim(out)["reason"]


def test_pod_claims_compete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two templates of one pod cannot both get the one exclusive device they both want."""
    def template(name: str) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [
                    req("s", "serial", 'device.attributes["liken.sh"].serial == "A1"')]}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"resourceClaims": [{"name": "a", "resourceClaimTemplateName": "t1"},
                                       {"name": "b", "resourceClaimTemplateName": "t2"}],
                    "containers": [{"name": "c", "image": "x"}]}}
    rc, out = run(tmp_path, template("t1"), template("t2"), pod, capsys=capsys)
    assert rc == 1
    claims = out["nodes"][0]["asked"][0]["claims"]
    assert [c["allocatable"] for c in claims] == [True, False]
    assert "ResourceClaimTemplate default/t1" in \
        claims[1]["requests"][0]["alternatives"][0]["matching"][0]["heldBy"]


def test_text_output_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = tmp_path / "c.yaml"
    files.write_text(yaml.safe_dump_all([*CLASSES, claim([req(
        "s", "serial", 'device.attributes["liken.sh"].vendor == "0403"')])]))
    sl = tmp_path / "s.yaml"
    sl.write_text(yaml.safe_dump_all(SLICES))
    assert main(["match", "-f", str(files), "--slices", str(sl)]) == 0
    text = capsys.readouterr().out
    assert 'usb-1-2-1-0: request s selector 1: device.attributes["liken.sh"].vendor is "10c4", ' \
           'the selector wants "0403"' in text
    assert text.rstrip().endswith("allocatable on node n1")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: x}\n"
                   "spec: {devices: {requests: "
                   "[{name: r, exactly: {count: 1}}]}}\n")
    assert main(["match", "-f", str(bad), "--slices", str(sl)]) == 2
    err = capsys.readouterr().err
    assert "deviceClassName is required" in err and len(err.strip().splitlines()) == 1
    assert main(["match", "-f", str(tmp_path / "absent.yaml"), "--slices", str(sl)]) == 2


def test_generation_and_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only a pool's newest generation counts; several nodes are answered one by one."""
    old = slice_("liken.sh", [dev("usb-9-9", bus="usb", vendor="0403", subsystem="tty")])
    old["spec"]["pool"]["generation"] = 0
    other = slice_("liken.sh", [dev("usb-1-1-1-0", bus="usb", vendor="0403", subsystem="tty")])
    other["spec"]["nodeName"] = other["spec"]["pool"]["name"] = "n2"
    rc, out = run(tmp_path, claim([req("s", "serial", 'device.attributes["liken.sh"].vendor'
                                                      ' == "0403"', count=2)]),
                  capsys=capsys, slices=[*SLICES, old, other])
    assert rc == 1
    assert [n["node"] for n in out["nodes"]] == ["n1", "n2"]
    names = [m["device"] for m in out["nodes"][0]["asked"][0]["claims"][0]["requests"][0][
        "alternatives"][0]["matching"]]
    assert "usb-9-9" not in names


def test_a_node_without_devices_and_an_unknown_node(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    empty = slice_("liken.sh", [])
    rc, out = run(tmp_path, claim([req("s", "serial")]), capsys=capsys, slices=[empty])
    assert rc == 1 and out["nodes"][0]["node"] == NODE
    files = tmp_path / "c.yaml"
    files.write_text(yaml.safe_dump_all([*CLASSES, claim([req("s", "serial")])]))
    sl = tmp_path / "s.yaml"
    sl.write_text(yaml.safe_dump_all(SLICES))
    assert main(["match", "-f", str(files), "--slices", str(sl), "--node", "n9"]) == 2
    assert "no ResourceSlice of node n9 among the slices read (nodes: n1)" in \
        capsys.readouterr().err


def test_pod_naming_an_allocated_claim_is_asked_without_its_own_hold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = claim([req("s", "serial", 'device.attributes["liken.sh"].serial == "B2"')],
                 name="shared", allocated=[{"request": "s", "driver": "liken.sh", "pool": NODE,
                                            "device": "usb-1-3-1-0"}])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p2", "namespace": "default"},
           "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "shared"}],
                    "containers": [{"name": "c", "image": "x"}]}}
    rc, out = run(tmp_path, mine, pod, capsys=capsys)
    assert rc == 0
    assert first_claim(out)["requests"][0]["devices"] == ["usb-1-3-1-0"]


def test_pod_claims_are_allocated_jointly(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The first claim would take the stick the second needs if it chose greedily."""
    def template(name: str, *selectors: str) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [req("s", "serial", *selectors)]}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"resourceClaims": [{"name": "a", "resourceClaimTemplateName": "any"},
                                       {"name": "b", "resourceClaimTemplateName": "a1"}],
                    "containers": [{"name": "c", "image": "x"}]}}
    rc, out = run(tmp_path, template("any"),
                  template("a1", 'device.attributes["liken.sh"].serial == "A1"'), pod,
                  capsys=capsys)
    assert rc == 0
    claims = out["nodes"][0]["asked"][0]["claims"]
    assert [c["requests"][0]["devices"] for c in claims] == [["usb-1-3-1-0"], ["usb-1-2-1-0"]]


def test_a_bound_selector_is_explained_through_its_alias(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(tmp_path, claim([req(
        "s", "serial", 'cel.bind(l, device.attributes["liken.sh"], '
                       'l.subsystem == "tty" && l.vendor == "0403")')]), capsys=capsys)
    assert rc == 0
    rejected = {r["device"]: r for r in alternative(out)["notMatching"]}
    assert rejected["usb-1-2-1-0"]["reason"] == (
        'device.attributes["liken.sh"].vendor is "10c4", the selector wants "0403"')


def test_v1beta1_slices_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kubectl on a 1.32/1.33 cluster prints v1beta1 slices, whose devices wrap in `basic`."""
    beta = []
    for s in SLICES:
        b = {**s, "apiVersion": "resource.k8s.io/v1beta1",
             "spec": {**s["spec"], "devices": [
                 {"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
                 for d in s["spec"]["devices"]]}}
        beta.append(b)
    rc, out = run(tmp_path, claim([req("s", "serial",
                                       'device.attributes["liken.sh"].vendor == "0403"')]),
                  capsys=capsys, slices=beta)
    assert rc == 0
    assert first_claim(out)["requests"][0]["devices"] == ["usb-1-3-1-0"]
