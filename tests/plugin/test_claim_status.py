"""The claim's status says what was delivered (rules: delivery.claim-status).

Over real gRPC (the test kubelet) and the loopback API server, which merges ``status.devices``
as the list-map the API server keeps: a prepare writes liken.sh's entries with the delivered
paths and the stable attributes, a reconcile pass that changes the nodes rewrites them, an
unprepare removes them and leaves other drivers' entries, and an API server that is down or
drops the field never fails a prepare.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from liken_devices.plugin import Plugin
from liken_devices.plugin.claimstatus import DATA_MAX_BYTES, ClaimStatusWriter, device_entries
from liken_devices.plugin.state import PreparedClaim, PreparedDevice
from liken_devices.sysfs.model import DevNode
from tests.support.fakeapi import FakeApiServer

from .conftest import NODE, Hardware, new_claim
from .kubelet import TestKubelet


def status_devices(api: FakeApiServer, ns: str, name: str) -> list[dict[str, Any]]:
    obj = api.get_object("resourceclaims", name, ns)
    assert obj is not None
    return list((obj.get("status") or {}).get("devices") or [])


def settled(plugin: Plugin, timeout: float = 10.0) -> None:
    """Wait until the background writer has nothing waiting nor on its way."""
    writer = plugin.status
    assert writer is not None
    deadline = time.monotonic() + timeout
    while not writer.idle():
        assert time.monotonic() < deadline, f"still waiting: {writer.pending()}"
        time.sleep(0.01)


def test_a_prepared_claim_says_its_paths_and_the_devices_address(
        api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet) -> None:
    ns, uid, name = new_claim(api, ["usb-1-2-1-0", "pnp-00-01"])
    assert kubelet.prepare([(ns, uid, name)])[uid].error == ""
    devices = api.wait_for(lambda: status_devices(api, ns, name))
    assert devices == [
        {"driver": "liken.sh", "pool": NODE, "device": "pnp-00-01",
         "data": {"present": True, "paths": ["/dev/ttyS1"], "address": "00:01"}},
        {"driver": "liken.sh", "pool": NODE, "device": "usb-1-2-1-0",
         "data": {"present": True, "paths": ["/dev/hidraw0", "/dev/bus/usb/001/004"],
                  "address": "1-2:1.0"}},
    ]


def test_a_serial_number_is_said_where_the_device_has_one(
        api: FakeApiServer, make_plugin: Any, hardware: Hardware) -> None:
    d = hardware.devices["usb-1-3"]
    hardware.devices["usb-1-3"] = d._replace(
        attributes={"bus": "usb", "address": "1-3", "serial": "A10KZ9", "vendor": "0403"})
    plugin = make_plugin()
    kubelet = TestKubelet(plugin.config.registration_socket)
    kubelet.register()
    try:
        ns, uid, name = new_claim(api, ["usb-1-3"])
        assert kubelet.prepare([(ns, uid, name)])[uid].error == ""
        [entry] = api.wait_for(lambda: status_devices(api, ns, name))
        # the stable attributes only: nothing a replug or a driver change would rewrite
        assert entry["data"] == {"present": True, "paths": ["/dev/bus/usb/001/005"],
                                 "bus": "usb", "address": "1-3", "serial": "A10KZ9"}
    finally:
        kubelet.close()


def test_a_reconcile_that_changes_the_nodes_rewrites_the_entries(
        api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet, hardware: Hardware) -> None:
    ns, uid, name = new_claim(api, ["usb-1-2-1-0"])
    assert kubelet.prepare([(ns, uid, name)])[uid].error == ""
    api.wait_for(lambda: status_devices(api, ns, name))

    hardware.unplug("usb-1-2-1-0")
    plugin.reconcile(hardware.walk())
    settled(plugin)
    [entry] = status_devices(api, ns, name)
    # away: nothing usable is delivered; what it was stays said
    assert entry["data"] == {"present": False, "paths": [], "address": "1-2:1.0"}

    hardware.plug("usb-1-2-1-0", (DevNode("hidraw1", "c", 242, 1),
                                  DevNode("bus/usb/001/011", "c", 189, 10)))
    plugin.reconcile(hardware.walk())
    settled(plugin)
    [entry] = status_devices(api, ns, name)
    assert entry["data"]["paths"] == ["/dev/hidraw1", "/dev/bus/usb/001/011"]
    assert entry["data"]["present"] is True


def test_a_pass_that_changes_nothing_writes_nothing(
        api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet, hardware: Hardware) -> None:
    ns, uid, name = new_claim(api, ["pnp-00-01"])
    assert kubelet.prepare([(ns, uid, name)])[uid].error == ""
    api.wait_for(lambda: status_devices(api, ns, name))
    settled(plugin)
    assert plugin.status is not None
    writes = plugin.status.writes
    for _ in range(5):
        plugin.reconcile(hardware.walk())
    settled(plugin)
    assert plugin.status.writes == writes


def test_unprepare_removes_only_this_drivers_entries(
        api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet, kube: Any) -> None:
    ns, uid, name = new_claim(api, [], results=[
        {"request": "serial", "device": "pnp-00-01"},
        {"request": "nic", "device": "eth0", "driver": "net.example.com", "pool": NODE}])
    # another driver's entry on the same claim, under its own manager
    other = {"driver": "net.example.com", "pool": NODE, "device": "eth0",
             "data": {"mac": "02:00:00:00:00:01"}}
    api.handle("PATCH", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}/status"
               "?fieldManager=net.example.com&force=true",
               {"content-type": "application/apply-patch+yaml"},
               _apply_body(ns, name, [other]))
    assert kubelet.prepare([(ns, uid, name)])[uid].error == ""
    api.wait_for(lambda: len(status_devices(api, ns, name)) == 2)

    assert kubelet.unprepare([(ns, uid, name)])[uid] == ""
    api.wait_for(lambda: len(status_devices(api, ns, name)) == 1)
    settled(plugin)
    assert status_devices(api, ns, name) == [other]


def _apply_body(ns: str, name: str, devices: list[dict[str, Any]]) -> bytes:
    import json

    return json.dumps({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                       "metadata": {"name": name, "namespace": ns},
                       "status": {"devices": devices}}).encode()


def test_an_api_server_that_is_down_does_not_fail_the_prepare_and_is_written_when_back(
        api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet) -> None:
    ns, uid, name = new_claim(api, ["pnp-00-01"])
    api.fail_next(503, count=3, methods=("PATCH",))
    started = time.perf_counter()
    assert kubelet.prepare([(ns, uid, name)])[uid].error == ""
    assert time.perf_counter() - started < 2.0  # the retries' backoff is not the kubelet's wait
    devices = api.wait_for(lambda: status_devices(api, ns, name), timeout=20)
    assert devices[0]["data"]["paths"] == ["/dev/ttyS1"]


def test_a_server_without_the_field_is_said_once_and_the_prepare_goes_on(
        api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet,
        caplog: pytest.LogCaptureFixture) -> None:
    api.claim_device_status = False
    caplog.set_level(logging.WARNING, "liken_devices.plugin.claimstatus")
    claims = [new_claim(api, ["pnp-00-01"]), new_claim(api, ["usb-1-3"])]
    for c in claims:
        assert kubelet.prepare([c])[c[1]].error == ""
        settled(plugin)
    assert plugin.status is not None and plugin.status.unsupported
    said = [r for r in caplog.records if "DRAResourceClaimDeviceStatus" in r.getMessage()]
    assert len(said) == 1
    # and nothing more is asked of a server that dropped it
    patches = [r for r in api.requests if r[0] == "PATCH"]
    assert len(patches) == 1


def test_a_replaced_claim_is_not_written(api: FakeApiServer, kube: Any) -> None:
    """The apply carries the claim's UID: a claim deleted and made again under the same name
    is another pod's, and its status is not ours to write."""
    ns, uid, name = new_claim(api, ["pnp-00-01"])
    api.set_claim_uid(ns, name, "00000000-0000-4000-8000-000000000000")
    writer = ClaimStatusWriter(kube)
    writer.want(uid, ns, name, [{"driver": "liken.sh", "pool": NODE, "device": "pnp-00-01",
                                 "data": {"present": True, "paths": ["/dev/ttyS1"]}}])
    writer.flush()
    assert status_devices(api, ns, name) == []
    assert writer.idle() and writer._retry.retry_in() is None  # not asked again
    assert writer.writes == 0


def test_the_queue_is_bounded_and_keeps_the_newest_wish_of_each_claim() -> None:
    writer = ClaimStatusWriter(client=None, max_pending=3)
    for i in range(5):
        writer.want(f"u{i}", "default", f"c{i}", [])
    writer.want("u4", "default", "c4", [{"driver": "liken.sh"}])
    assert writer.pending() == ["u2", "u3", "u4"]
    assert writer.dropped == 2
    assert writer._pending["u4"].devices == [{"driver": "liken.sh"}]


def test_an_entry_never_outgrows_the_apis_data_limit() -> None:
    nodes = [DevNode(f"input/event{i}", "c", 13, 64 + i) for i in range(600)]
    claim = PreparedClaim(uid="u", namespace="d", name="c", pool=NODE,
                          devices=[PreparedDevice("usb-1-8-1-0", ["r"], None)],
                          nodes={"usb-1-8-1-0": nodes}, present={"usb-1-8-1-0": True})
    [entry] = device_entries(claim, {})
    import json

    assert len(json.dumps(entry["data"])) <= DATA_MAX_BYTES
    assert entry["data"]["truncated"] is True
    assert entry["data"]["paths"] == [n.path for n in nodes[:len(entry["data"]["paths"])]]


def test_a_shared_device_has_one_entry_per_share() -> None:
    claim = PreparedClaim(uid="u", namespace="d", name="c", pool=NODE,
                          devices=[PreparedDevice("pci-0000-00-02-0", ["a"], "s2"),
                                   PreparedDevice("pci-0000-00-02-0", ["b"], "s1")],
                          nodes={"pci-0000-00-02-0": [DevNode("dri/renderD128", "c", 226, 128)]},
                          present={"pci-0000-00-02-0": True})
    got = device_entries(claim, {"pci-0000-00-02-0": {"address": "0000:00:02.0"}})
    assert [(e["device"], e["shareID"]) for e in got] == [("pci-0000-00-02-0", "s1"),
                                                          ("pci-0000-00-02-0", "s2")]
    assert all(e["data"]["address"] == "0000:00:02.0" for e in got)

