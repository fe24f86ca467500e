"""The plugin as a process (``liken-devices plugin``): killed, restarted, signalled.

The plugin may die at any point (docs/plugin.md, "State"); what unprepare needs is on disk, so
after a restart prepare and unprepare still behave and no spec outlives its claim.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from tests.support.fakeapi import FakeApiServer

from .conftest import cdi_files, new_claim
from .process import LIKEN, Node
from .sysfs_usb import probe_log


def test_kill_between_prepare_and_unprepare(api: FakeApiServer, node: Node) -> None:
    node.start()
    claim = new_claim(api, ["usb-1-2-1-0"])
    k = node.kubelet()
    ans = k.prepare([claim])[claim[1]]
    assert ans.error == ""
    k.close()
    node.kill()  # SIGKILL: no cleanup at all; the sockets stay behind
    assert node.registration.exists()

    # The pod's libusb program detached the kernel driver; the claim itself is deleted.
    node.b.set_driver(node.intf, "usb", None)
    api.delete_object("resourceclaims", claim[2], "default")

    node.start()  # replaces the stale sockets
    k = node.kubelet()
    with probe_log(node.root / "sys") as written:
        assert k.unprepare([claim]) == {claim[1]: ""}
    assert written == ["1-2:1.0"]
    assert cdi_files(node.cdi) == []
    assert node.claims() == []
    k.close()
    assert node.terminate() == 0
    assert not node.registration.exists()
    assert not (node.sockdir / "plugins" / "liken.sh" / "dra.sock").exists()


def test_prepare_twice_across_a_restart_and_unprepare_unknown(api: FakeApiServer,
                                                              node: Node) -> None:
    node.start()
    claim = new_claim(api, ["usb-1-2-1-0", "pci-0000-00-1e-0"])
    k = node.kubelet()
    first = k.prepare([claim])
    spec = (node.cdi / f"liken.sh-{claim[1]}.json").read_bytes()
    k.close()
    node.kill()
    node.start()
    k = node.kubelet()
    assert k.prepare([claim]) == first  # the restarted kubelet prepares again
    assert (node.cdi / f"liken.sh-{claim[1]}.json").read_bytes() == spec
    unknown = ("default", "5d1c3c9e-0000-4000-8000-000000000001", "never")
    assert k.unprepare([unknown]) == {unknown[1]: ""}
    view = node.claims()
    assert [(c["uid"], [d["name"] for d in c["devices"]]) for c in view] == [
        (claim[1], ["pci-0000-00-1e-0", "usb-1-2-1-0"])]
    assert view[0]["devices"][0]["nodes"] == [{"path": "/dev/ttyS4", "type": "c", "major": 4,
                                               "minor": 68}]
    assert k.unprepare([claim]) == {claim[1]: ""}
    assert cdi_files(node.cdi) == []
    k.close()


def test_reboot_wipes_the_cdi_tmpfs(api: FakeApiServer, node: Node) -> None:
    node.start()
    claim = new_claim(api, ["pci-0000-00-1e-0"])
    k = node.kubelet()
    assert k.prepare([claim])[claim[1]].error == ""
    k.close()
    node.kill()
    for f in node.cdi.iterdir():  # /var/run/cdi is a tmpfs: gone after a reboot
        f.unlink()
    node.start()  # the walk at start reconciles: the prepared claim's spec is back
    assert cdi_files(node.cdi) == [f"liken.sh-{claim[1]}.json"]
    k = node.kubelet()
    assert k.unprepare([claim]) == {claim[1]: ""}
    assert cdi_files(node.cdi) == []
    k.close()


def test_sighup_walks_and_reconciles(api: FakeApiServer, node: Node) -> None:
    node.start()
    claim = new_claim(api, ["usb-1-2-1-0"])
    k = node.kubelet()
    assert k.prepare([claim])[claim[1]].error == ""
    spec_path = node.cdi / f"liken.sh-{claim[1]}.json"
    node.b.remove(node.intf)  # unplugged
    assert node.proc is not None
    node.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while ".liken.sh-absent" not in spec_path.read_text():
        assert time.monotonic() < deadline, spec_path.read_text()
        time.sleep(0.05)
    view = node.claims()
    assert view[0]["devices"][0]["present"] is False
    table = [r["line"].split() for r in node.claims("table")]
    assert table[0] == ["CLAIM", "UID", "DEVICE", "NODES"]
    assert table[1] == [f"default/{claim[2]}", claim[1], "usb-1-2-1-0", "absent"]
    assert k.unprepare([claim]) == {claim[1]: ""}
    k.close()


def test_bad_sysfs_is_a_clear_error(node: Node, tmp_path: Path) -> None:
    out = subprocess.run([*LIKEN, "plugin", "--sysfs", str(tmp_path / "nope"), "--kubeconfig",
                          str(node.kubeconfig)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "has no devices/ directory" in out.stderr
    assert not node.registration.exists()
