"""Prepare and unprepare through the test kubelet, against claims served by the fake API."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest

from liken_devices.plugin import Plugin
from tests.support.fakeapi import FakeApiServer

from .cdi_schema import check_claim_spec
from .conftest import BT_EVENTS, CATALOG, NODE, Hardware, cdi_files, new_claim
from .kubelet import TestKubelet


def spec_of(plugin: Plugin, uid: str) -> dict:
    return json.loads((plugin.config.cdi_dir / f"liken.sh-{uid}.json").read_text())


def nodes_of(spec: dict, uid: str, device: str) -> list[dict]:
    (dev,) = [d for d in spec["devices"] if d["name"] == f"{uid}-{device}"]
    return dev["containerEdits"]["deviceNodes"]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_device_kind_prepares_and_unprepares(name: str, api: FakeApiServer,
                                                   plugin: Plugin, kubelet: TestKubelet) -> None:
    claim = new_claim(api, [name])
    _, uid, _ = claim
    ans = kubelet.prepare([claim])[uid]
    assert ans.error == ""
    assert ans.devices == [{"requests": ["req"], "pool": NODE, "device": name,
                            "cdi": [f"liken.sh/device={uid}-{name}"]}]
    spec = spec_of(plugin, uid)
    check_claim_spec(spec, uid)
    # The fixture's /dev is empty: every node takes the stand-in (no /dev/uinput: root only).
    want = [{"path": x.path, "type": x.type, "major": x.major, "minor": x.minor,
             "fileMode": 0o600, "uid": 0, "gid": 0} for x in CATALOG[name][1]]
    assert nodes_of(spec, uid, name) == want
    assert kubelet.unprepare([claim]) == {uid: ""}
    assert cdi_files(plugin.config.cdi_dir) == []
    assert plugin.prepared() == {}


def test_bluetooth_claim_states_the_32_event_nodes_by_number(api: FakeApiServer, plugin: Plugin,
                                                             kubelet: TestKubelet) -> None:
    claim = new_claim(api, ["usb-1-8-1-0"])
    assert kubelet.prepare([claim])[claim[1]].error == ""
    got = nodes_of(spec_of(plugin, claim[1]), claim[1], "usb-1-8-1-0")
    events = [x for x in got if x["path"].startswith("/dev/input/event")]
    assert [(x["major"], x["minor"]) for x in events] == [(13, 64 + i) for i in range(32)]
    assert len(BT_EVENTS) == 32
    assert {"path": "/dev/uinput", "type": "c", "major": 10, "minor": 223, "fileMode": 0o600,
            "uid": 0, "gid": 0} in got
    assert got[0]["path"].startswith("/dev/bus/usb/")


def test_claim_with_several_devices_and_subrequests(api: FakeApiServer, plugin: Plugin,
                                                    kubelet: TestKubelet) -> None:
    claim = new_claim(api, [], results=[
        {"request": "gpu/render", "device": "pci-0000-00-02-0"},
        {"request": "display", "device": "pci-0000-00-02-0-display"},
        # Another driver's device in the same claim, and ours of another node: not ours.
        {"request": "nic", "device": "eth0", "driver": "net.example.com", "pool": NODE},
    ])
    _, uid, _ = claim
    ans = kubelet.prepare([claim])[uid]
    assert ans.error == ""
    assert sorted((d["requests"], d["device"]) for d in ans.devices) == [
        (["display"], "pci-0000-00-02-0-display"), (["gpu"], "pci-0000-00-02-0")]
    spec = spec_of(plugin, uid)
    check_claim_spec(spec, uid)
    assert [d["name"] for d in spec["devices"]] == [
        f"{uid}-pci-0000-00-02-0", f"{uid}-pci-0000-00-02-0-display"]


def test_errors_are_per_claim_in_band(api: FakeApiServer, plugin: Plugin,
                                      kubelet: TestKubelet, hardware: Hardware) -> None:
    good = new_claim(api, ["usb-1-3"])
    replaced = new_claim(api, ["pci-0000-00-1f-3"])
    api.set_claim_uid("default", replaced[2], str(uuid.uuid4()))
    unallocated = new_claim(api, ["pnp-00-01"])
    api.remove_allocation("default", unallocated[2])
    deleted = ("default", str(uuid.uuid4()), "gone")
    hardware.unplug("usb-1-2-1-0")
    unplugged = new_claim(api, ["usb-1-2-1-0"])
    foreign = new_claim(api, [], results=[{"request": "r", "device": "usb-1-3",
                                           "pool": "node-b"}])
    other_driver = new_claim(api, [], results=[{"request": "r", "device": "x",
                                                "driver": "gpu.example.com"}])
    bad_uid = ("default", "../../etc/passwd", "evil")
    claims = [good, replaced, unallocated, deleted, unplugged, foreign, other_driver, bad_uid]
    out = kubelet.prepare(claims)
    assert out[good[1]].error == "" and out[good[1]].devices
    assert "replaced" in out[replaced[1]].error
    assert "not allocated" in out[unallocated[1]].error
    assert "not found" in out[deleted[1]].error
    assert "usb-1-2-1-0 is not offered" in out[unplugged[1]].error
    assert "node-b" in out[foreign[1]].error
    assert "no device of liken.sh" in out[other_driver[1]].error
    assert "not a UID" in out[bad_uid[1]].error
    for c in claims[1:]:
        assert out[c[1]].devices == []
    # Only the good claim has a spec; nothing was written for the others.
    assert cdi_files(plugin.config.cdi_dir) == [f"liken.sh-{good[1]}.json"]
    assert set(plugin.prepared()) == {good[1]}


def test_a_uid_that_is_not_one_is_answered_by_it(api: FakeApiServer, plugin: Plugin,
                                                 kubelet: TestKubelet) -> None:
    """The claims whose UID does not parse where it enters (gRPC) are answered in band, named
    by the text the kubelet sent, beside the others of the call: prepare fails them, unprepare
    succeeds for them (no spec is named after them)."""
    good = new_claim(api, ["usb-1-3"])
    bad = [("default", uid, "evil") for uid in ("../../etc/passwd", "", f"{good[1]}\n")]
    out = kubelet.prepare([good, *bad])
    assert out[good[1]].error == "" and out[good[1]].devices
    for _, uid, _ in bad:
        assert out[uid].error == f"claim UID {uid!r} is not a UID (letters, digits and '-')"
        assert out[uid].devices == []
    assert cdi_files(plugin.config.cdi_dir) == [f"liken.sh-{good[1]}.json"]
    assert kubelet.unprepare([*bad, good]) == {uid: "" for _, uid, _ in [*bad, good]}
    assert cdi_files(plugin.config.cdi_dir) == [] and plugin.prepared() == {}


def test_disk_that_now_backs_a_role_is_not_delivered(api: FakeApiServer, plugin: Plugin,
                                                     kubelet: TestKubelet,
                                                     hardware: Hardware) -> None:
    # The claim was allocated from an older slice; the fresh walk (facts now name a partition
    # of this disk as a storage role) no longer publishes the disk (rules: delivery.fresh-walk).
    claim = new_claim(api, ["pci-0000-00-17-0"])
    hardware.unplug("pci-0000-00-17-0")
    out = kubelet.prepare([claim])[claim[1]]
    assert "storage role" in out.error
    assert cdi_files(plugin.config.cdi_dir) == []


def test_prepare_walks_fresh_once_per_call(api: FakeApiServer, plugin: Plugin,
                                           kubelet: TestKubelet, hardware: Hardware) -> None:
    claims = [new_claim(api, [name]) for name in ("usb-1-3", "pnp-00-01", "pci-0000-00-1f-3")]
    before = hardware.walks
    out = kubelet.prepare(claims)
    assert all(a.error == "" for a in out.values())
    assert hardware.walks == before + 1
    # The walk is fresh: a device plugged after the first call is seen by the next one.
    hardware.plug("usb-1-9", (CATALOG["usb-1-3"][1][0].__class__("bus/usb/001/009", "c", 189, 8),))
    c = new_claim(api, ["usb-1-9"])
    assert kubelet.prepare([c])[c[1]].error == ""


def test_repeated_prepare_is_idempotent(api: FakeApiServer, plugin: Plugin,
                                        kubelet: TestKubelet) -> None:
    claim = new_claim(api, ["pci-0000-00-02-0", "usb-1-2-1-0"])
    first = kubelet.prepare([claim])
    path = plugin.config.cdi_dir / f"liken.sh-{claim[1]}.json"
    st = path.stat()
    second = kubelet.prepare([claim])
    assert first == second
    assert path.stat().st_ino == st.st_ino  # not rewritten: same content
    assert cdi_files(plugin.config.cdi_dir) == [path.name]


def test_shareable_render_node_in_two_claims(api: FakeApiServer, plugin: Plugin,
                                             kubelet: TestKubelet) -> None:
    a = new_claim(api, ["pci-0000-00-02-0"])
    b = new_claim(api, ["pci-0000-00-02-0"])
    out = kubelet.prepare([a, b])
    assert out[a[1]].devices[0]["cdi"] != out[b[1]].devices[0]["cdi"]
    assert kubelet.unprepare([a]) == {a[1]: ""}
    assert cdi_files(plugin.config.cdi_dir) == [f"liken.sh-{b[1]}.json"]


def test_unprepare_succeeds_for_gone_deleted_and_unknown(api: FakeApiServer, plugin: Plugin,
                                                         kubelet: TestKubelet) -> None:
    claim = new_claim(api, ["usb-1-3"])
    assert kubelet.prepare([claim])[claim[1]].error == ""
    api.delete_object("resourceclaims", claim[2], "default")  # the claim is gone from the API
    (plugin.config.cdi_dir / f"liken.sh-{claim[1]}.json").unlink()  # and its spec too
    unknown = ("default", str(uuid.uuid4()), "never-seen")
    out = kubelet.unprepare([claim, unknown])
    assert out == {claim[1]: "", unknown[1]: ""}
    assert plugin.prepared() == {}
    assert kubelet.unprepare([claim]) == {claim[1]: ""}  # and again


def test_calls_are_serialized(api: FakeApiServer, make_plugin, hardware: Hardware) -> None:
    inside = threading.Semaphore(0)
    active = [0]
    peak = [0]
    guard = threading.Lock()

    def slow_walk(**_: object):
        with guard:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        inside.release()
        threading.Event().wait(0.05)
        with guard:
            active[0] -= 1
        return hardware.inventory()

    p = make_plugin(walk=slow_walk)
    claims = [new_claim(api, ["pci-0000-00-02-0"]) for _ in range(6)]
    kubelets = [TestKubelet(p.config.registration_socket) for _ in range(3)]
    for k in kubelets:
        k.register()
    errors: list[BaseException] = []

    def run(k: TestKubelet, cs) -> None:
        try:
            for c in cs:
                assert k.prepare([c])[c[1]].error == ""
                assert k.unprepare([c]) == {c[1]: ""}
                assert k.prepare([c])[c[1]].error == ""
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k, claims[i::3])) for i, k in enumerate(kubelets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for k in kubelets:
        k.close()
    assert not errors
    assert peak[0] == 1
    assert len(cdi_files(p.config.cdi_dir)) == 6


def test_api_unreachable_fails_in_band(api: FakeApiServer, plugin: Plugin,
                                       kubelet: TestKubelet) -> None:
    claim = new_claim(api, ["usb-1-3"])
    api.stop()
    out = kubelet.prepare([claim])[claim[1]]
    assert "reading ResourceClaim default/" in out.error
    api.start()
    assert kubelet.prepare([claim])[claim[1]].error == ""


def test_usb_interfaces_given_back_on_unprepare(api: FakeApiServer, make_plugin,
                                                tmp_path: Path) -> None:
    from .sysfs_usb import build_usb_device, probe_log

    sysfs = tmp_path / "sys"
    build_usb_device(sysfs, "1-2", busnum=1, devnum=4, interfaces={"1-2:1.0": "usbhid",
                                                                    "1-2:1.1": "usbhid"})
    p = make_plugin()
    k = TestKubelet(p.config.registration_socket)
    k.register()
    claim = new_claim(api, ["usb-1-2-1-0"])
    assert k.prepare([claim])[claim[1]].error == ""
    assert p.prepared()[claim[1]].usb_interfaces == ["1-2:1.0", "1-2:1.1"]
    # A libusb program in the pod detached the kernel driver of both interfaces; one is still
    # claimed through usbfs (drivers_probe leaves a bound interface alone), one has none.
    build_usb_device(sysfs, "1-2", busnum=1, devnum=4, interfaces={"1-2:1.0": "usbfs",
                                                                    "1-2:1.1": None})
    with probe_log(sysfs) as written:
        assert k.unprepare([claim]) == {claim[1]: ""}
    assert written == ["1-2:1.0", "1-2:1.1"]
    k.close()


def test_usb_interfaces_with_their_driver_are_left_alone(api: FakeApiServer, make_plugin,
                                                         tmp_path: Path) -> None:
    from .sysfs_usb import build_usb_device, probe_log

    sysfs = tmp_path / "sys"
    build_usb_device(sysfs, "1-2", busnum=1, devnum=4, interfaces={"1-2:1.0": "usbhid"})
    p = make_plugin()
    k = TestKubelet(p.config.registration_socket)
    k.register()
    claim = new_claim(api, ["usb-1-2-1-0"])
    assert k.prepare([claim])[claim[1]].error == ""
    with probe_log(sysfs) as written:
        assert k.unprepare([claim]) == {claim[1]: ""}
    assert written == []
    k.close()


def test_slow_api_fails_the_claim_in_band_within_the_budget(api: FakeApiServer, make_plugin,
                                                            hardware: Hardware) -> None:
    p = make_plugin(fetch_budget=0.3)
    k = TestKubelet(p.config.registration_socket)
    k.register()
    claim = new_claim(api, ["usb-1-3"])
    api.delay = 2.0  # the API would answer, but after the budget: the claim fails in band
    out = k.prepare([claim])[claim[1]]
    assert "no answer from the API within 0.3 s" in out.error
    api.delay = 0.0
    assert cdi_files(p.config.cdi_dir) == []
    k.close()
