"""The reconcile pass and the health stream (rules: delivery.reconcile, delivery.health)."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from liken_devices.plugin import Plugin
from liken_devices.sysfs.model import DevNode
from tests.support.fakeapi import FakeApiServer

from .cdi_schema import check_claim_spec
from .conftest import CATALOG, NODE, Hardware, new_claim
from .kubelet import TestKubelet


def spec_file(plugin: Plugin, uid: str) -> Path:
    return plugin.config.cdi_dir / f"liken.sh-{uid}.json"


def paths(plugin: Plugin, uid: str) -> list[str]:
    spec = json.loads(spec_file(plugin, uid).read_text())
    check_claim_spec(spec, uid)
    return [x["path"] for d in spec["devices"] for x in d["containerEdits"]["deviceNodes"]]


def test_absent_then_back(api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet,
                          hardware: Hardware) -> None:
    claim = new_claim(api, ["usb-1-2-1-0"])
    uid = claim[1]
    assert kubelet.prepare([claim])[uid].error == ""
    assert paths(plugin, uid) == ["/dev/hidraw0", "/dev/bus/usb/001/004"]

    hardware.unplug("usb-1-2-1-0")
    assert plugin.reconcile(hardware.walk()) == [uid]
    spec = json.loads(spec_file(plugin, uid).read_text())
    check_claim_spec(spec, uid)
    got = spec["devices"][0]["containerEdits"]["deviceNodes"]
    # One nonexistent path per node, with no type or numbers so the runtime's stat fails.
    assert got == [{"path": "/dev/.liken.sh-absent/usb-1-2-1-0/hidraw0"},
                   {"path": "/dev/.liken.sh-absent/usb-1-2-1-0/bus/usb/001/004"}]
    assert not Path("/dev/.liken.sh-absent").exists()

    # A prepare of the same claim while it is away keeps the nonexistent path (idempotent).
    assert kubelet.prepare([claim])[uid].error == ""
    assert paths(plugin, uid)[0].startswith("/dev/.liken.sh-absent/")

    # Replugged in the same port: a new usbfs device number; the pass writes the current nodes.
    new_usbfs = DevNode("bus/usb/001/011", "c", 189, 10)
    hardware.plug("usb-1-2-1-0", (DevNode("hidraw0", "c", 242, 0), new_usbfs))
    assert plugin.reconcile(hardware.walk()) == [uid]
    assert paths(plugin, uid) == ["/dev/hidraw0", "/dev/bus/usb/001/011"]


def test_only_files_that_differ_are_rewritten(api: FakeApiServer, plugin: Plugin,
                                              kubelet: TestKubelet, hardware: Hardware) -> None:
    a = new_claim(api, ["usb-1-3"])
    b = new_claim(api, ["pci-0000-00-1f-3"])
    kubelet.prepare([a, b])
    inodes = {u: spec_file(plugin, u).stat().st_ino for u in (a[1], b[1])}
    assert plugin.reconcile(hardware.walk()) == []
    assert {u: spec_file(plugin, u).stat().st_ino for u in inodes} == inodes
    hardware.unplug("usb-1-3")
    assert plugin.reconcile(hardware.walk()) == [a[1]]
    assert spec_file(plugin, b[1]).stat().st_ino == inodes[b[1]]
    assert spec_file(plugin, a[1]).stat().st_ino != inodes[a[1]]


def test_bare_name_reserved_by_serio_gets_the_nonexistent_node(api: FakeApiServer,
                                                               plugin: Plugin,
                                                               kubelet: TestKubelet,
                                                               hardware: Hardware) -> None:
    # Before a spec.serio entry, the adapter's interface published under its bare name with the
    # tty and the usbfs node; after it, only -cec and -input exist (rules: serial.bare-name-claim).
    hardware.plug("usb-1-4-1-0", (DevNode("ttyACM0", "c", 166, 0),
                                  DevNode("bus/usb/001/007", "c", 189, 6)))
    claim = new_claim(api, ["usb-1-4-1-0"])
    assert kubelet.prepare([claim])[claim[1]].error == ""
    hardware.unplug("usb-1-4-1-0")
    assert plugin.reconcile(hardware.walk()) == [claim[1]]
    assert all(p.startswith("/dev/.liken.sh-absent/usb-1-4-1-0/")
               for p in paths(plugin, claim[1]))


def test_held_device_keeps_its_nodes(api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet,
                                     hardware: Hardware) -> None:
    # While the pod's libusb program holds the interface the device leaves the slice, but the
    # hardware is there: the claim's spec keeps the usbfs node (Inventory.held).
    claim = new_claim(api, ["usb-1-3"])
    kubelet.prepare([claim])
    nodes = CATALOG["usb-1-3"][1]
    hardware.unplug("usb-1-3")
    hardware.held["usb-1-3"] = nodes
    assert plugin.reconcile(hardware.walk()) == []
    assert paths(plugin, claim[1]) == ["/dev/bus/usb/001/005"]


def test_reconcile_recreates_specs_lost_with_the_tmpfs(api: FakeApiServer, plugin: Plugin,
                                                       kubelet: TestKubelet,
                                                       hardware: Hardware) -> None:
    claim = new_claim(api, ["pnp-00-01"])
    kubelet.prepare([claim])
    spec_file(plugin, claim[1]).unlink()
    assert plugin.reconcile(hardware.walk()) == [claim[1]]
    assert paths(plugin, claim[1]) == ["/dev/ttyS1"]


def test_health_stream_follows_presence(api: FakeApiServer, plugin: Plugin,
                                        kubelet: TestKubelet, hardware: Hardware) -> None:
    a = new_claim(api, ["usb-1-3"])
    b = new_claim(api, ["pci-0000-00-02-0", "pnp-00-01"])
    kubelet.prepare([a, b])
    messages: list[list[tuple[str, str, int]]] = []
    seen = threading.Condition()

    def watch() -> None:
        for msg in kubelet.watch_health(timeout=20):
            with seen:
                messages.append(msg)
                seen.notify_all()

    def wait_for(pred) -> list[tuple[str, str, int]]:
        with seen:
            assert seen.wait_for(lambda: messages and pred(messages[-1]), timeout=10), messages
            return messages[-1]

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    healthy = [(NODE, d, 1) for d in ("pci-0000-00-02-0", "pnp-00-01", "usb-1-3")]
    assert wait_for(lambda m: m == healthy) == healthy
    hardware.unplug("usb-1-3")
    plugin.reconcile(hardware.walk())
    wait_for(lambda m: (NODE, "usb-1-3", 2) in m)
    hardware.plug("usb-1-3")
    plugin.reconcile(hardware.walk())
    wait_for(lambda m: m == healthy)
    kubelet.unprepare([a])
    wait_for(lambda m: [d for _, d, _ in m] == ["pci-0000-00-02-0", "pnp-00-01"])
    # Without changes a full message still comes every health_interval (a heartbeat).
    with seen:
        count = len(messages)
        assert seen.wait_for(lambda: len(messages) > count, timeout=5)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_reconcile_rewrites_when_the_host_nodes_mode_or_owner_changes(
        api: FakeApiServer, plugin: Plugin, kubelet: TestKubelet, hardware: Hardware) -> None:
    """rules: delivery.mode-and-owner. Read whenever the spec is
    written, so a reconcile pass after the host node's mode or group changed writes them."""
    node = plugin.config.dev_dir / "ttyS1"
    node.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(4, 65))
    os.chown(node, 0, 4242)
    os.chmod(node, 0o640)
    claim = new_claim(api, ["pnp-00-01"])
    uid = claim[1]
    assert kubelet.prepare([claim])[uid].error == ""

    def owner() -> tuple[int, int, int]:
        spec = json.loads(spec_file(plugin, uid).read_text())
        check_claim_spec(spec, uid)
        (n,) = spec["devices"][0]["containerEdits"]["deviceNodes"]
        return n["fileMode"], n["uid"], n["gid"]

    assert owner() == (0o640, 0, 4242)
    assert plugin.reconcile(hardware.walk()) == []  # nothing changed: the file is not touched
    os.chown(node, 1000, 20)
    os.chmod(node, 0o660)
    assert plugin.reconcile(hardware.walk()) == [uid]
    assert owner() == (0o660, 1000, 20)
    node.unlink()  # gone from the host (the device stays published): the stand-in, root only
    assert plugin.reconcile(hardware.walk()) == [uid]
    assert owner() == (0o600, 0, 0)
    assert kubelet.unprepare([claim]) == {uid: ""}
