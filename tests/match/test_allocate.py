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


def test_match_attribute_pairs_by_numa_node_across_drivers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rules: attributes.topology. An int attribute pairs as the scheduler pairs it: the render
    node on the card's NUMA node; a card on no node a GPU is on leaves the claim pending."""
    numa = "resource_dot_kubernetes_dot_io__numaNode"
    liken = slice_("liken.sh", [
        dev("pci-0000-18-00-0", allow=True, renderNode=True, **{numa: 0}),
        dev("pci-0000-3b-00-0", allow=True, renderNode=True, **{numa: 1}),
        dev("usb-3-1-1-0", allow=True, renderNode=True)])
    nic = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "nic"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "dra.net"'}}]}}]
    pair = claim([req("gpu", "render"), req("nic", "nic")],
                 [{"requests": ["gpu", "nic"],
                   "matchAttribute": "resource.kubernetes.io/numaNode"}])
    rc, out = run(tmp_path, *nic, pair, capsys=capsys,
                  slices=[liken, slice_("dra.net", [dev("nic-0", **{numa: 1})])])
    assert rc == 0
    assert [r["devices"] for r in first_claim(out)["requests"]] == [["pci-0000-3b-00-0"],
                                                                     ["nic-0"]]
    rc, out = run(tmp_path, *nic, pair, capsys=capsys,
                  slices=[liken, slice_("dra.net", [dev("nic-0", **{numa: 2})])])
    assert rc == 1
    assert "matchAttribute resource.kubernetes.io/numaNode" in first_claim(out)["reason"]


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


# -- extended resources (rules: claims.extended-resource) --------------------------------------

SERIAL_ER = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
             "metadata": {"name": "serial-er"},
             "spec": {"extendedResourceName": "squat.ai/serial", "selectors": [{"cel": {
                 "expression": 'device.driver == "liken.sh" && '
                               'device.attributes["liken.sh"].subsystem == "tty"'}}]}}


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None,
        claims: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    if claims:
        spec["resourceClaims"] = claims
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": spec}


def container(name: str = "c", restart: str | None = None, **resources: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if restart:
        c["restartPolicy"] = restart
    return c


def er_claim(out: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in out["nodes"][0]["asked"][0]["claims"]
            if c["claim"] == "ResourceClaim default/p-extended-resources"]
    return c  # type: ignore[no-any-return]


def test_limits_naming_a_class_become_a_claim_on_it(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A device-plugin pod's ``limits: {squat.ai/serial: 2}`` is a claim of two devices of the
    class naming it, request ``container-<i>-request-<index of the name>``; requests alone
    count the same."""
    rc, out = run(tmp_path, SERIAL_ER, pod(container(
        limits={"squat.ai/serial": 2, "cpu": "500m", "memory": "64Mi"})), capsys=capsys)
    assert rc == 0
    c = er_claim(out)
    assert [r["name"] for r in c["requests"]] == ["container-0-request-2"]  # cpu, memory, ...
    assert sorted(c["requests"][0]["devices"]) == ["usb-1-2-1-0", "usb-1-3-1-0"]
    rc, out = run(tmp_path, SERIAL_ER, pod(container(requests={"squat.ai/serial": "1"})),
                  capsys=capsys)
    assert rc == 0 and len(er_claim(out)["requests"][0]["devices"]) == 1
    rc, out = run(tmp_path, SERIAL_ER, pod(container(limits={"squat.ai/serial": 3})),
                  capsys=capsys)
    assert rc == 1
    assert "needs 3 devices, 2 match" in er_claim(out)["reason"]


def test_every_class_answers_to_its_implicit_name(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """deviceclass.resource.kubernetes.io/<class> maps to the class without any field."""
    rc, out = run(tmp_path, pod(container(
        limits={"deviceclass.resource.kubernetes.io/serial": 1})), capsys=capsys)
    assert rc == 0
    assert er_claim(out)["requests"][0]["alternatives"][0]["deviceClassName"] == "serial"


def test_a_name_no_class_maps_is_left_to_a_device_plugin(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """smarter-device-manager's name, with no class mapping it: only a device plugin could give
    it, which match cannot see; not allocatable, and the reason names the resource."""
    rc, out = run(tmp_path, SERIAL_ER, pod(container(limits={"smarter-devices/ttyUSB0": 1})),
                  capsys=capsys)
    assert rc == 1
    reason = er_claim(out)["reason"]
    assert "smarter-devices/ttyUSB0" in reason and "device plugin" in reason


def test_init_containers_reuse_the_devices_of_the_containers_after_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An init container runs before the others and reuses their devices; a sidecar (an init
    container that keeps running) holds its own, as a regular container does."""
    def devices(p: dict[str, Any]) -> int:
        rc, out = run(tmp_path, SERIAL_ER, p, capsys=capsys)
        assert rc in (0, 1)
        c = er_claim(out)
        return sum(r["alternatives"][0]["count"] for r in c["requests"])

    one = {"limits": {"squat.ai/serial": 1}}
    two = {"limits": {"squat.ai/serial": 2}}
    assert devices(pod(container(**one), init=[container("i", **one)])) == 1
    assert devices(pod(container(**one), init=[container("i", **two)])) == 2
    assert devices(pod(container(**one), init=[container("i", **one),
                                               container("j", **two)])) == 2
    assert devices(pod(container(**one), init=[container("s", "Always", **one)])) == 2


def test_the_newest_class_naming_a_resource_wins(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Two classes naming one resource (a migration): the newer by creationTimestamp, the lower
    name between equals."""
    def cls(name: str, created: str | None, expression: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if created:
            meta["creationTimestamp"] = created
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta,
                "spec": {"extendedResourceName": "example.com/tty", "selectors": [
                    {"cel": {"expression": expression}}]}}

    first = 'device.attributes["liken.sh"].?serial.orValue("") == "A1"'
    second = 'device.attributes["liken.sh"].?serial.orValue("") == "B2"'
    want = pod(container(limits={"example.com/tty": 1}))
    for classes, device in (
            ([cls("b-new", "2026-02-01T00:00:00Z", second),
              cls("a-old", "2026-01-01T00:00:00Z", first)], "usb-1-3-1-0"),
            ([cls("b", None, second), cls("a", None, first)], "usb-1-2-1-0")):
        rc, out = run(tmp_path, *classes, want, capsys=capsys)
        assert rc == 0
        assert er_claim(out)["requests"][0]["devices"] == [device]


def test_extended_resources_and_claims_of_one_pod_are_allocated_together(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pod's claim takes one stick and its extended resource the other: one search."""
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [req("s", "serial")]}}}}
    p = pod(container(limits={"squat.ai/serial": 1}),
            claims=[{"name": "x", "resourceClaimTemplateName": "t"}])
    rc, out = run(tmp_path, SERIAL_ER, template, p, capsys=capsys)
    assert rc == 0
    got = [d for c in out["nodes"][0]["asked"][0]["claims"]
           for r in c["allocation"]["devices"]["results"] for d in [r["device"]]]
    assert sorted(got) == ["usb-1-2-1-0", "usb-1-3-1-0"]


@pytest.mark.parametrize(("obj", "needle"), [
    (pod(container(limits={"squat.ai/serial": "500m"})), "whole devices"),
    (pod(container(limits={"squat.ai/serial": 1.5})), "not a quantity"),
    (pod(container(requests={"squat.ai/serial": 1}, limits={"squat.ai/serial": 2})),
     "must equal the limit"),
    ({**SERIAL_ER, "spec": {**SERIAL_ER["spec"], "extendedResourceName": "kubernetes.io/x"}},
     "not a valid extended resource name"),
])
def test_what_the_api_server_refuses_is_bad_input(obj: dict[str, Any], needle: str,
                                                  tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    files = tmp_path / "in.yaml"
    files.write_text(yaml.safe_dump_all([*CLASSES, SERIAL_ER if obj["kind"] == "Pod" else obj,
                                         obj if obj["kind"] == "Pod" else pod(container())]))
    sl = tmp_path / "slices.yaml"
    sl.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": SLICES}))
    assert main(["match", "-f", str(files), "--slices", str(sl)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
