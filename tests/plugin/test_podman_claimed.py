"""With podman as the CDI consumer: a claimed USB interface keeps its shape while the pod's libusb
program holds it and after the program exits, so the restarted container starts
(rules: usb.claimed-keeps-shape).

The fixture tree is a Network UPS Tools set-up: a HID interface whose program detaches
``usbhid``. The inventory is the real one (``Sources.walk``, told the plugin's claims as the
agent does), the claim comes from the fake API and the test kubelet prepares it; each container
run stands for the kubelet restarting the pod's container.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakeapi import FakeApiServer
from tests.support.sysfs_builder import SysfsBuilder, bare_sources

from .conftest import new_claim
from .kubelet import TestKubelet
from .test_podman import CDI_DIR, podman, registered_plugin
from .test_podman import _podman_ready as podman_ready

pytestmark = [pytest.mark.root]

UPS = "usb-1-2-1-0"
STAT = ("stat -c '%n %t:%T' /dev/bus/usb/001/003 && "
        "if test -e /dev/hidraw2; then echo hidraw; else echo no-hidraw; fi")


@pytest.fixture(autouse=True)
def _need_podman() -> None:
    reason = podman_ready()
    if reason:
        pytest.skip(reason)


class Ups:
    def __init__(self, root: Path) -> None:
        self.b = SysfsBuilder(root / "sys")
        self.sources = bare_sources(root)
        usb = self.b.usb_device("1-2", devnum=3)
        self.iface = self.b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
        self.hidraw = self.b.node(self.iface, "hidraw", "hidraw2", 242, 2, subdir="hidraw")


@pytest.fixture
def ups(tmp_path: Path) -> Ups:
    return Ups(tmp_path)


@pytest.fixture
def e2e(make_plugin: Any, ups: Ups, tmp_path: Path) -> Iterator[tuple[Any, TestKubelet]]:
    yield from registered_plugin(make_plugin, ups.sources, tmp_path / "state")


def test_the_restarted_container_starts_after_its_libusb_program_left_the_interface(
        api: FakeApiServer, ups: Ups, e2e: tuple[Any, TestKubelet]) -> None:
    plugin, kubelet = e2e
    claim = new_claim(api, [UPS])
    uid = claim[1]
    ans = kubelet.prepare([claim])[uid]
    assert ans.error == ""
    (cid,) = ans.devices[0]["cdi"]

    def pass_() -> None:
        """The agent's walk (which knows the prepared claims) and the reconcile pass."""
        plugin.reconcile(ups.sources.walk(claimed=plugin.claimed()))

    try:
        r = podman(cid, cmd=STAT)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[:2] == ["/dev/bus/usb/001/003 bd:2", "hidraw"]

        # upsd's driver detaches usbhid and holds the interface: the container runs on usbfs.
        ups.b.remove(ups.hidraw)
        ups.b.set_driver(ups.iface, "usb", "usbfs")
        pass_()
        r = podman(cid, cmd=STAT)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[:2] == ["/dev/bus/usb/001/003 bd:2", "no-hidraw"]

        # The program crashes; the kubelet restarts the container while the interface has no
        # driver. The claim keeps its shape: the container starts with the usbfs node.
        ups.b.set_driver(ups.iface, "usb", None)
        pass_()
        spec = json.loads((CDI_DIR / f"liken.sh-{uid}.json").read_text())
        (device,) = spec["devices"]
        assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
            "/dev/bus/usb/001/003"]
        r = podman(cid, cmd=STAT)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[:2] == ["/dev/bus/usb/001/003 bd:2", "no-hidraw"]
    finally:
        assert kubelet.unprepare([claim]) == {uid: ""}
    assert not (CDI_DIR / f"liken.sh-{uid}.json").exists()
