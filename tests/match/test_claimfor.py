"""``claim-for`` on every real recording: each published device's generated claim, evaluated by
``match`` against the same slice, selects exactly that device, and still does after a USB device
is replugged at another port and enumerated with another device number (same serial).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("cel_expr_python")

from liken_devices.cli import main
from liken_devices.inventory import Context, Facts, MachineSpec
from liken_devices.inventory.limits import DRIVER
from liken_devices.inventory.policy import build_inventory
from liken_devices.match.cel import environment
from liken_devices.match.claimfor import Ambiguous, generate
from liken_devices.match.matching import Question, answer
from liken_devices.slices import devices_json, make_slice
from liken_devices.sysfs.umockdev import load_recording
from tests.inventory.support import OLD_KERNEL_USB
from tests.support.corpus import recording_params

NODE = "n1"


def slice_of(path: Path) -> dict[str, Any]:
    snap = load_recording(path)
    inv = build_inventory(snap, Context(Facts(frozenset()), MachineSpec()))
    return make_slice(NODE, DRIVER, devices_json(inv))


def chosen_by_match(objects: list[dict[str, Any]], slice_obj: dict[str, Any]) -> list[str]:
    """What ``match`` allocates for the generated Pod on ``slice_obj`` (empty: nothing)."""
    q = Question()
    for o in objects:
        q.add(o, "generated")
    (node,) = answer(environment(), q, [slice_obj], NODE)
    ((_, (result,)),) = node.results
    if not result.allocatable:
        return []
    return [d.name for rr in result.requests for d in rr.devices]


def claim_for(slice_obj: dict[str, Any], name: str) -> tuple[list[dict[str, Any]], bool]:
    try:
        return generate(slice_obj, name).objects, False
    except Ambiguous:
        return generate(slice_obj, name, by_address=True).objects, True


def usb_port(device: dict[str, Any]) -> str | None:
    attrs = device["attributes"]
    if attrs.get("bus", {}).get("string") != "usb":
        return None
    return str(attrs["address"]["string"]).split(":")[0]


def replug(text: str, port: str) -> tuple[str, str]:
    """The recording with the USB device at ``port`` moved to a free port on the same bus, and
    enumerated with a new device number; its serial and everything else stay."""
    bus, _, path = port.partition("-")
    head, _, last = path.rpartition(".")
    taken = set(re.findall(r"/(\d+-[\d.]+)(?=[/:]|$)", text, re.M))
    for n in range(int(last) + 1, int(last) + 40):
        new = f"{bus}-{head + '.' if head else ''}{n}"
        if new not in taken:
            break
    moved = re.sub(rf"(?<=/){re.escape(port)}(?=[/:.\s]|$)", new, text, flags=re.M)
    # The usbfs number changes at every enumeration (rules: delivery.reconcile).
    lines = []
    in_device = False
    for line in moved.splitlines():
        if line.startswith("P: "):
            in_device = line.rstrip().endswith("/" + new)
        if in_device:
            line = re.sub(r"^(N: bus/usb/\d{3}/)(\d{3})", lambda m: m.group(1) + "077", line)
            line = re.sub(r"^(E: DEVNUM=)\d+", r"\g<1>077", line)
            line = re.sub(r"^(A: devnum=)\d+", r"\g<1>77", line)
        lines.append(line)
    return "\n".join(lines) + "\n", new


@pytest.mark.parametrize("path", recording_params())
def test_claim_for_every_device_selects_it(path: Path, tmp_path: Path) -> None:
    slice_obj = slice_of(path)
    devices = slice_obj["spec"]["devices"]
    text = path.read_text(errors="surrogateescape")
    for device in devices:
        objects, by_address = claim_for(slice_obj, device["name"])
        assert chosen_by_match(objects, slice_obj) == [device["name"]], device["name"]
        selectors = " ".join(sel["cel"]["expression"] for o in objects[:2]
                             for sel in (o["spec"].get("selectors") or o["spec"].get(
                                 "spec", {}).get("devices", {}).get("requests", [{}])[0].get(
                                 "exactly", {}).get("selectors") or []))
        assert device["name"] not in selectors and "/dev/" not in selectors
        bus = device["attributes"]["bus"]["string"]
        if bus in ("usb", "pci") and not by_address:
            # Never the slot or port: the unit's own identity (a USB interface keeps only the
            # part of its address after the port path).
            assert '.address ==' not in selectors, selectors
        port = usb_port(device)
        if port is None or by_address:
            continue
        moved_text, new_port = replug(text, port)
        moved_file = tmp_path / "moved.umockdev"
        moved_file.write_text(moved_text, errors="surrogateescape")
        moved = slice_of(moved_file)
        serial = device["attributes"].get("serial")
        (same,) = [d for d in moved["spec"]["devices"]
                   if d["attributes"].get("serial") == serial
                   and d["attributes"].get("vendor") == device["attributes"].get("vendor")
                   and d["attributes"].get("product") == device["attributes"].get("product")
                   and d["attributes"].get("subsystem") == device["attributes"].get("subsystem")
                   and str(d["attributes"]["address"]["string"]).partition(":")[2]
                   == str(device["attributes"]["address"]["string"]).partition(":")[2]]
        assert same["name"] != device["name"], "the replug did not move the device"
        assert str(same["attributes"]["address"]["string"]).startswith(new_port)
        assert chosen_by_match(objects, moved) == [same["name"]], device["name"]


def twin_slice() -> dict[str, Any]:
    def stick(port: str) -> dict[str, Any]:
        return {"name": f"usb-{port.replace(':', '-').replace('.', '-')}", "attributes": {
            "bus": {"string": "usb"}, "vendor": {"string": "1a86"},
            "product": {"string": "7523"}, "subsystem": {"string": "tty"},
            "driver": {"string": "ch341"}, "address": {"string": port}}}
    return make_slice(NODE, DRIVER, [stick("1-2:1.0"), stick("1-3:1.0")])


def test_identical_sticks_without_serial_are_refused(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    slices = tmp_path / "s.yaml"
    slices.write_text(yaml.safe_dump(twin_slice()))
    rc = main(["claim-for", "usb-1-2-1-0", "--slices", str(slices)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "cannot be told apart from usb-1-3-1-0" in err
    assert "no serial number" in err and "--by-address" in err and "'1-2:1.0'" in err
    rc = main(["claim-for", "usb-1-2-1-0", "--slices", str(slices), "--by-address"])
    assert rc == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert chosen_by_match(objects, twin_slice()) == ["usb-1-2-1-0"]


def test_any_selects_every_device_of_its_kind(capsys: pytest.CaptureFixture[str]) -> None:
    generated = generate(twin_slice(), "usb-1-2-1-0", any_of_kind=True)
    q = Question()
    for o in generated.objects:
        q.add(o, "generated")
    (node,) = answer(environment(), q, [twin_slice()], NODE)
    ((_, (result,)),) = node.results
    (alt,) = result.requests[0].alternatives
    assert sorted(c.device.name for c in alt.matching) == ["usb-1-2-1-0", "usb-1-3-1-0"]


def test_selectors_never_use_the_name_or_usbfs_number() -> None:
    generated = generate(twin_slice(), "usb-1-2-1-0", any_of_kind=True)
    joined = " ".join(generated.selectors)
    assert "usb-1-2" not in joined and "1-2:" not in joined and "/dev/bus/usb" not in joined


def test_unknown_device_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slices = tmp_path / "s.yaml"
    slices.write_text(yaml.safe_dump(twin_slice()))
    assert main(["claim-for", "usb-9-9", "--slices", str(slices)]) == 2
    assert "no published device named 'usb-9-9'" in capsys.readouterr().err


def test_scan_to_claim_to_match_on_this_machine(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The user's path with the local inputs: claim-for a device, then match the claim."""
    from tests.support.corpus import recording

    rec = recording("thinkpad-t60p-systemd-sys-script.umockdev")
    inputs = ["--recording", str(rec), "--facts", str(tmp_path / "nofacts"), "--node", NODE]
    assert main(["claim-for", "usb-5-2-1-0", *inputs]) == 0
    claim = tmp_path / "claim.yaml"
    claim.write_text(capsys.readouterr().out)
    assert main(["match", "-f", str(claim), *inputs]) == 0
    out = capsys.readouterr().out
    assert "      request device (DeviceClass liken-usb-5-2-1-0, 1 device):" in out
    assert "=> allocatable: device gets usb-5-2-1-0" in out


def test_claim_for_an_interface_holding_a_usb_class_node(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rules: usb.bus-devices-only. On an older kernel's recording whose cdc-wdm and hiddev
    nodes sit in the usb class, claim-for the modem's interface gives a claim that match
    allocates, and delivers the node; no device is named after the node itself."""
    rec = tmp_path / "old.umockdev"
    rec.write_text(OLD_KERNEL_USB)
    inputs = ["--recording", str(rec), "--facts", str(tmp_path / "nofacts"), "--node", NODE]
    assert main(["claim-for", "usb-1-2-1-3", *inputs]) == 0
    claim = tmp_path / "claim.yaml"
    claim.write_text(capsys.readouterr().out)
    assert main(["match", "-f", str(claim), *inputs]) == 0
    assert "=> allocatable: device gets usb-1-2-1-3" in capsys.readouterr().out
    for bogus in ("usb-hiddev0", "usb-cdc-wdm1"):
        assert main(["claim-for", bogus, *inputs]) == 2
        err = capsys.readouterr().err
        assert f"no published device named {bogus!r}" in err and len(err.splitlines()) == 1


def test_generated_objects_are_valid_kubernetes_objects() -> None:
    """What claim-for prints passes the API's schema (strict: no unknown field)."""
    import kubernetes_validate

    for any_of_kind in (False, True):
        for obj in generate(twin_slice(), "usb-1-2-1-0", any_of_kind=any_of_kind,
                            by_address=not any_of_kind).objects:
            kubernetes_validate.validate(obj, "1.34.0", strict=True)


def serial_slice() -> dict[str, Any]:
    """Two USB serial sticks of one model, told apart by their serials."""
    def stick(port: str, serial: str) -> dict[str, Any]:
        return {"name": f"usb-{port.replace(':', '-').replace('.', '-')}", "attributes": {
            "bus": {"string": "usb"}, "vendor": {"string": "10c4"},
            "product": {"string": "ea60"}, "serial": {"string": serial},
            "subsystem": {"string": "tty"}, "driver": {"string": "cp210x"},
            "address": {"string": port}}}
    return make_slice(NODE, DRIVER, [stick("1-2:1.0", "A1"), stick("1-3:1.0", "B2")])


def test_extended_resource_class_gives_a_device_plugin_pod_its_device(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rules: claims.extended-resource. The class maps the name and holds every selector (the
    scheduler's claim names only the class); the pod asks as a device-plugin pod does, and
    ``match`` gives it the one stick, never its twin."""
    slices = tmp_path / "s.yaml"
    slices.write_text(yaml.safe_dump(serial_slice()))
    rc = main(["claim-for", "usb-1-3-1-0", "--slices", str(slices),
               "--extended-resource", "squat.ai/serial"])
    assert rc == 0
    written = capsys.readouterr().out
    objects = [o for o in yaml.safe_load_all(written) if o]
    assert [o["kind"] for o in objects] == ["DeviceClass", "Pod"]
    cls, pod = objects
    assert cls["spec"]["extendedResourceName"] == "squat.ai/serial"
    assert any('"B2"' in s["cel"]["expression"] for s in cls["spec"]["selectors"])
    assert "resourceClaims" not in pod["spec"]
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"squat.ai/serial": 1}}
    assert chosen_by_match(objects, serial_slice()) == ["usb-1-3-1-0"]
    # The same through the command line, reading what claim-for wrote on standard input.
    generated = tmp_path / "gen.yaml"
    generated.write_text(written)
    assert main(["match", "-f", str(generated), "--slices", str(slices), "-o", "json"]) == 0
    import json
    out = json.loads(capsys.readouterr().out)
    (claim,) = out["nodes"][0]["asked"][0]["claims"]
    assert claim["claim"] == "ResourceClaim default/usb-1-3-1-0-user-extended-resources"
    assert claim["allocation"]["devices"]["results"] == [
        {"request": "container-0-request-0", "driver": DRIVER, "pool": NODE,
         "device": "usb-1-3-1-0"}]


@pytest.mark.parametrize("name", [
    "serial", "kubernetes.io/serial", "squat.kubernetes.io/serial",
    "deviceclass.resource.kubernetes.io/serial", "requests.squat.ai/serial",
    "squat.ai/a/b", "Squat.ai/serial", "squat.ai/-serial", "squat.ai/" + "x" * 64,
    "/serial", "squat.ai/"])
def test_claim_for_refuses_a_name_the_api_server_refuses(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rules: claims.extended-resource. extendedResourceName must be an extended resource name:
    a domain outside kubernetes.io, no quota prefix, a qualified name after ``requests.``."""
    slices = tmp_path / "s.yaml"
    slices.write_text(yaml.safe_dump(serial_slice()))
    assert main(["claim-for", "usb-1-3-1-0", "--slices", str(slices),
                 "--extended-resource", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a valid extended resource name" in err
    assert "Traceback" not in err


def test_extended_resource_objects_are_valid_from_1_34() -> None:
    """The field is in the v1 DeviceClass of every supported minor (an API server without the
    DRAExtendedResource gate drops it)."""
    kv = pytest.importorskip("kubernetes_validate")
    from tests.deploy.support import MINORS

    for obj in generate(serial_slice(), "usb-1-2-1-0",
                        extended_resource="smarter-devices/ttyUSB0").objects:
        for minor in MINORS:
            kv.validate(obj, minor, strict=True)


def test_a_cluster_class_maps_the_name_of_a_pod_in_a_file(
        tmp_path: Path, api: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """rules: claims.extended-resource. ``kubectl liken match -f pod.yaml``: the class that maps
    the name is the cluster's, the pod the user's file."""
    from liken_devices.match.cli import kubectl_main

    objects = generate(serial_slice(), "usb-1-2-1-0",
                       extended_resource="squat.ai/serial").objects
    api.add_node(NODE)
    api.put_object("resourceslices", serial_slice())
    api.put_object("deviceclasses", objects[0])
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(objects[1]))
    monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    assert kubectl_main(["match", "-f", str(pod_file), "-o", "json"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    (claim,) = out["nodes"][0]["asked"][0]["claims"]
    assert [r["device"] for r in claim["allocation"]["devices"]["results"]] == ["usb-1-2-1-0"]
