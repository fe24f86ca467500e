"""CDI spec files and the state file: names, atomic writes, restarts with damaged state."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path

import pytest

from liken_devices.plugin import cdi
from liken_devices.plugin.cdi import Delivery, SpecError
from liken_devices.sysfs.model import DevNode
from tests.support.fakeapi import FakeApiServer

from .cdi_schema import check_claim_spec
from .conftest import Hardware, cdi_files, new_claim
from .kubelet import TestKubelet

UID = "0f8fad5b-d9cb-469f-a165-70867728950e"  # starts with a digit: needs cdiVersion 0.5.0


def test_spec_shape_and_names(tmp_path: Path) -> None:
    spec = cdi.build_spec(UID, [
        Delivery("usb-1-3", (DevNode("bus/usb/001/005", "c", 189, 4),), True),
        Delivery("pci-0000-00-02-0", (DevNode("dri/renderD128", "c", 226, 128),), True),
        Delivery("pnp-00-01", (DevNode("ttyS1", "c", 4, 65),), False),
    ], tmp_path)
    check_claim_spec(spec, UID)
    assert spec["cdiVersion"] == "0.5.0" and spec["kind"] == "liken.sh/device"
    assert [d["name"] for d in spec["devices"]] == [
        f"{UID}-pci-0000-00-02-0", f"{UID}-pnp-00-01", f"{UID}-usb-1-3"]
    assert spec["devices"][1]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/.liken.sh-absent/pnp-00-01/ttyS1"}]
    assert cdi.cdi_id(UID, "usb-1-3") == f"liken.sh/device={UID}-usb-1-3"
    assert cdi.spec_path(Path("/var/run/cdi"), UID) == Path(f"/var/run/cdi/liken.sh-{UID}.json")


@pytest.mark.parametrize("uid", ["", "../x", "a/b", "-lead", "trail-", "x" * 80, "a b"])
def test_bad_uids_are_refused(uid: str) -> None:
    with pytest.raises(SpecError):
        cdi.spec_path(Path("/tmp"), uid)


def test_device_without_nodes_is_refused(tmp_path: Path) -> None:
    # The CDI specification refuses a device with empty edits; never write one.
    with pytest.raises(SpecError, match="no node"):
        cdi.build_spec(UID, [Delivery("usb-1-3", (), True)], tmp_path)
    with pytest.raises(SpecError, match="not a DNS label"):
        cdi.build_spec(UID, [Delivery("Bad_Name", (DevNode("x", "c", 1, 1),), True)], tmp_path)


def test_orphan_specs_are_swept_at_start(make_plugin, tmp_path: Path) -> None:
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    orphan = str(uuid.uuid4())
    (cdi_dir / f"liken.sh-{orphan}.json").write_text("{}")
    (cdi_dir / "other-vendor.json").write_text("{}")  # not ours: left alone
    make_plugin()
    assert cdi_files(cdi_dir) == ["other-vendor.json"]


def test_share_id_is_returned_on_v1(api: FakeApiServer, plugin, kubelet: TestKubelet) -> None:
    ns, uid, name = new_claim(api, ["pci-0000-00-02-0"])
    obj = api.get_object("resourceclaims", name, ns)
    assert obj is not None
    share = str(uuid.uuid4())
    obj["status"]["allocation"]["devices"]["results"][0]["shareID"] = share
    api.put_object("resourceclaims", obj)
    ans = kubelet.prepare([(ns, uid, name)])[uid]
    assert ans.error == ""
    assert ans.devices[0]["share_id"] == share


def test_claims_view(api: FakeApiServer, plugin, kubelet: TestKubelet,
                     hardware: Hardware) -> None:
    from liken_devices.plugin import prepared

    a = new_claim(api, ["pnp-00-01", "usb-1-3"])
    kubelet.prepare([a])
    hardware.unplug("usb-1-3")
    view = prepared.claims_view(plugin.config.state_dir, hardware.walk())
    assert [(d["name"], d["present"]) for d in view[0]["devices"]] == [
        ("pnp-00-01", True), ("usb-1-3", False)]
    assert view[0]["devices"][1]["lastNodes"] == [
        {"path": "/dev/bus/usb/001/005", "type": "c", "major": 189, "minor": 4}]
    json.dumps(view)


def test_spec_write_failure_fails_the_claim_and_forgets_it(api: FakeApiServer, make_plugin,
                                                           tmp_path: Path) -> None:
    p = make_plugin(cdi_dir=tmp_path / "cdi-is-a-file")
    (tmp_path / "cdi-is-a-file").write_text("")  # the CDI dir cannot be created
    k = TestKubelet(p.config.registration_socket)
    k.register()
    claim = new_claim(api, ["usb-1-3"])
    out = k.prepare([claim])[claim[1]]
    assert out.error.startswith("writing the CDI spec:")
    assert out.devices == []
    assert p.prepared() == {}
    state = json.loads((p.config.state_dir / "claims.json").read_text())
    assert state["claims"] == {}
    k.close()


def test_state_write_failure_on_unprepare_is_retried(api: FakeApiServer, make_plugin,
                                                     tmp_path: Path) -> None:
    p = make_plugin()
    k = TestKubelet(p.config.registration_socket)
    k.register()
    claim = new_claim(api, ["usb-1-3"])
    assert k.prepare([claim])[claim[1]].error == ""
    state = p.config.state_dir / "claims.json"
    saved = state.read_bytes()
    state.unlink()
    state.mkdir()  # the next state write fails (rename onto a directory)
    out = k.unprepare([claim])
    assert out[claim[1]].startswith(f"unpreparing claim {claim[1]}:")
    assert claim[1] in p.prepared()  # not forgotten: the retry must save again
    assert cdi_files(p.config.cdi_dir) == []  # the spec is gone already
    state.rmdir()
    state.write_bytes(saved)
    assert k.unprepare([claim]) == {claim[1]: ""}
    assert json.loads(state.read_text())["claims"] == {}
    k.close()


# rules: delivery.mode-and-owner

needs_mknod = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def make_node(dev_dir: Path, name: str, rdev: tuple[int, int], mode: int, gid: int,
              uid: int = 0) -> Path:
    path = dev_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(*rdev))
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


def owner_of(spec: dict[str, object], path: str) -> tuple[int, int, int]:
    for d in spec["devices"]:  # type: ignore[attr-defined]
        for n in d["containerEdits"]["deviceNodes"]:
            if n["path"] == path:
                return n["fileMode"], n["uid"], n["gid"]
    raise AssertionError(f"{path} not in the spec")


def test_a_node_carries_the_host_nodes_mode_and_owner() -> None:
    """The host's own /dev/null, stated with its numbers: its real mode and owner travel."""
    st = os.stat("/dev/null")
    if not stat.S_ISCHR(st.st_mode) or st.st_rdev != os.makedev(1, 3):
        pytest.skip("this machine's /dev/null is not the 1:3 node")
    spec = cdi.build_spec(UID, [Delivery("pci-0000-00-02-0", (DevNode("null", "c", 1, 3),),
                                         True)], Path("/dev"))
    check_claim_spec(spec, UID)
    assert owner_of(spec, "/dev/null") == (stat.S_IMODE(st.st_mode) & 0o777, st.st_uid,
                                           st.st_gid)


@needs_mknod
def test_nodes_the_host_lacks_take_uinputs_mode_and_owner(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    make_node(dev, "hidraw0", (1, 3), 0o640, gid=4242)
    make_node(dev, "uinput", (10, 223), 0o660, gid=4243)
    make_node(dev, "ttyS1", (1, 5), 0o666, gid=5)  # the name, but another device's numbers
    (dev / "input").mkdir()
    os.symlink(dev / "hidraw0", dev / "input" / "event1")  # a link is not the node
    nodes = (DevNode("hidraw0", "c", 1, 3), DevNode("uinput", "c", 10, 223),
             DevNode("input/event0", "c", 13, 64), DevNode("input/event1", "c", 13, 65),
             DevNode("ttyS1", "c", 4, 65), DevNode("hidraw0", "b", 1, 3))
    spec = cdi.build_spec(UID, [Delivery("usb-1-8-1-0", nodes, True)], dev)
    check_claim_spec(spec, UID)
    edits = spec["devices"][0]["containerEdits"]["deviceNodes"]  # type: ignore[index]
    assert [(n["path"], n["fileMode"], n["uid"], n["gid"]) for n in edits] == [
        ("/dev/hidraw0", 0o640, 0, 4242),  # the host's node
        ("/dev/uinput", 0o660, 0, 4243),
        ("/dev/input/event0", 0o660, 0, 4243),  # stated by number, absent: uinput's
        ("/dev/input/event1", 0o660, 0, 4243),
        ("/dev/ttyS1", 0o660, 0, 4243),
        ("/dev/hidraw0", 0o660, 0, 4243),  # a block node of those numbers is not there
    ]
    # Without /dev/uinput nothing is opened up: root only.
    (dev / "uinput").unlink()
    spec = cdi.build_spec(UID, [Delivery("usb-1-8-1-0", nodes[2:3], True)], dev)
    assert owner_of(spec, "/dev/input/event0") == (0o600, 0, 0)


@needs_mknod
def test_special_bits_do_not_travel_and_names_stay_inside_dev(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    make_node(dev, "ttyUSB0", (188, 0), 0o6660, gid=20, uid=1000)
    make_node(tmp_path, "outside", (188, 1), 0o666, gid=0)
    spec = cdi.build_spec(UID, [Delivery("usb-1-2-1-0", (
        DevNode("ttyUSB0", "c", 188, 0), DevNode("../outside", "c", 188, 1)), True)], dev)
    assert owner_of(spec, "/dev/ttyUSB0") == (0o660, 1000, 20)
    assert owner_of(spec, "/dev/../outside") == (0o600, 0, 0)
