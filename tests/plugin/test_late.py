"""A late Bluetooth registrant is reported, not hidden (rules: bluetooth.late-registrant).

The real inventory over a built tree, the real plugin over gRPC (the kubelet's health stream),
real CDI specs on disk. A keyboard plugged in after the Bluetooth claim's container started takes
the lowest free event number, which the container already holds: the Bluetooth device turns
unhealthy on the health stream, one log line and the metric name the number and its owner, and
``claims`` shows it; once the container restarts with the current set (the runtime reads the
rewritten spec for it) the device is healthy again. The runtime's read of a spec at a container's
start is stood in for by the access time it leaves (``os.utime``, a second or more after the
write).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from liken_devices.agent.metrics import AgentMetrics
from liken_devices.cli import main
from liken_devices.inventory.model import NO_CLAIMS, Claimed, Inventory
from liken_devices.plugin import Plugin
from liken_devices.plugin.cdi import spec_path
from tests.support.fakeapi import FakeApiServer
from tests.support.sysfs_builder import SysfsBuilder, bare_sources

from .conftest import NODE, make_config, new_claim
from .kubelet import TestKubelet

RADIO = "usb-1-8-1-0"


class Machine:
    """A Bluetooth adapter, and event0..4 held by the laptop's own devices."""

    def __init__(self, root: Path) -> None:
        self.b = b = SysfsBuilder(root / "sys")
        self.sources = bare_sources(root)
        usb = b.usb_device("1-8", devnum=3)
        radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
        b.device(radio, "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
        i8042 = b.board("platform", "i8042", driver="i8042")
        for n in range(5):
            serio = b.device(i8042, f"serio{n}", "serio", driver="atkbd")
            inp = b.device(serio, f"input{n}", "input", subdir="input")
            b.node(inp, "input", f"event{n}", 13, 64 + n, devname=f"input/event{n}")
        self.keyboard: Any = None

    def plug_keyboard(self) -> None:
        """The kernel hands the new keyboard the lowest free number: event5 (13:69)."""
        kbd = self.b.usb_device("1-2", devnum=4)
        iface = self.b.usb_interface(kbd, "1.0", driver="usbhid", cls=3)
        inp = self.b.device(iface, "input9", "input", subdir="0003:1234:5678.0001/input")
        self.b.node(inp, "input", "event5", 13, 69, devname="input/event5")
        self.keyboard = kbd

    def walk(self, *, claimed: Claimed = NO_CLAIMS) -> Inventory:
        return self.sources.walk(claimed=claimed)


def container_starts(cdi_dir: Path, uid: str) -> None:
    """The runtime reads the claim's spec to start its container, two seconds after the write."""
    st = os.stat(spec_path(cdi_dir, uid))
    os.utime(spec_path(cdi_dir, uid), ns=(st.st_mtime_ns + 2_000_000_000, st.st_mtime_ns))


def late_metric(metrics: AgentMetrics) -> float:
    body, _ = metrics.exposition()
    for line in body.decode().splitlines():
        if line.startswith("liken_devices_bluetooth_late_registrants "):
            return float(line.split()[1])
    raise AssertionError("no late-registrant metric")


def test_a_late_registrant_is_reported_until_the_container_restarts(
        api: FakeApiServer, kube: Any, tmp_path: Path, sockdir: Path,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    m = Machine(tmp_path / "m")
    metrics = AgentMetrics()
    config = make_config(tmp_path, sockdir, sysfs=m.sources.sysfs)
    plugin = Plugin(config, m.walk, kube, metrics)
    plugin.start()
    k = TestKubelet(config.registration_socket)
    k.register()
    messages: list[list[tuple[str, str, int]]] = []
    seen = threading.Condition()

    def watch() -> None:
        for msg in k.watch_health(timeout=60):
            with seen:
                messages.append(msg)
                seen.notify_all()

    def health_becomes(value: int) -> None:
        with seen:
            assert seen.wait_for(lambda: messages and messages[-1] == [(NODE, RADIO, value)],
                                 timeout=10), messages

    def claims() -> dict[str, Any]:
        assert main(["claims", "--state-dir", str(config.state_dir), "--sysfs",
                     str(m.sources.sysfs), "--facts", str(tmp_path), "--modules-dir",
                     str(tmp_path), "--hwdata-dir", str(tmp_path), "-o", "json"]) == 0
        (claim,) = json.loads(capsys.readouterr().out)
        (device,) = claim["devices"]
        return dict(device)

    machine_args = ["--sysfs", str(m.sources.sysfs), "--facts", str(tmp_path), "--modules-dir",
                    str(tmp_path), "--hwdata-dir", str(tmp_path)]

    def explain() -> tuple[list[tuple[int, str, str]], str]:
        """explain's late registrants of the radio (minor, owner, claim) in -o json, and its
        text's line for them."""
        assert main(["explain", "--state-dir", str(config.state_dir), *machine_args,
                     "-o", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["pluginState"] == {"read": True, "error": None}
        got = [(x["minor"], x["owner"], x["claim"])
               for x in doc["lateRegistrants"].get(RADIO, [])]
        assert set(doc["lateRegistrants"]) <= {RADIO}
        monkeypatch.setenv("COLUMNS", "400")  # one line each, whatever the terminal
        assert main(["explain", "--state-dir", str(config.state_dir), *machine_args]) == 0
        text = [line for line in capsys.readouterr().out.splitlines() if "UNHEALTHY" in line]
        return got, "\n".join(text)

    try:
        claim = new_claim(api, [RADIO])
        uid = claim[1]
        assert k.prepare([claim])[uid].error == ""
        threading.Thread(target=watch, daemon=True).start()
        health_becomes(1)
        container_starts(config.cdi_dir, uid)
        plugin.reconcile(m.walk(claimed=plugin.claimed()))
        health_becomes(1)
        assert late_metric(metrics) == 0

        caplog.set_level(logging.INFO, logger="liken_devices.plugin")
        m.plug_keyboard()
        for _ in range(3):  # every walk until the restart: unhealthy, said once
            plugin.reconcile(m.walk(claimed=plugin.claimed()))
        health_becomes(2)
        lines = [r.getMessage() for r in caplog.records if "registered after" in r.getMessage()]
        assert lines == [
            f"claim default/{claim[2]}: Bluetooth device {RADIO} is unhealthy: 13:69 "
            "(/dev/input/event5) is now the node of usb 1-2:1.0, registered after its container "
            "started; the container can read it until it restarts with the current set"]
        assert late_metric(metrics) == 1
        device = claims()
        assert [(x["minor"], x["owner"]) for x in device["lateRegistrants"]] == [
            (69, "usb 1-2:1.0")]
        assert device["healthy"] is False
        # explain shows it as well: the number, its owner and the claim.
        late, text = explain()
        assert late == [(69, "usb 1-2:1.0", f"default/{claim[2]}")]
        assert text == (f"  {RADIO} UNHEALTHY in claim default/{claim[2]}: 13:69 is "
                        "/dev/input/event5, the node of usb 1-2:1.0, registered after the "
                        "container started (it can read it until it restarts)")
        assert main(["claims", "--state-dir", str(config.state_dir), *machine_args]) == 0
        assert [line.strip() for line in capsys.readouterr().out.splitlines()
                if "UNHEALTHY" in line] == [
            "UNHEALTHY, late registrant: 13:69 is /dev/input/event5, the node of usb 1-2:1.0, "
            "registered after the container started (it can read it until it restarts)"]
        # The next container gets the current set: 13:69 is out of the rewritten spec.
        spec = json.loads(spec_path(config.cdi_dir, uid).read_text())
        minors = {n["minor"] for d in spec["devices"]
                  for n in d["containerEdits"]["deviceNodes"] if n.get("major") == 13}
        assert 69 not in minors and 70 in minors

        # The container restarts with the current set; a restart sends no uevent, so no walk
        # comes: the health stream's next message sees it.
        container_starts(config.cdi_dir, uid)
        health_becomes(1)
        assert late_metric(metrics) == 0
        device = claims()
        assert device["lateRegistrants"] == [] and device["healthy"] is True
        assert explain() == ([], "")
        assert any(x["minor"] == 69 for x in device["leftOut"])  # still the keyboard's
    finally:
        k.close()
        plugin.stop()


def test_explain_reads_the_plugins_state_only_when_it_may(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another machine's walk reads no plugin state unless ``--state-dir`` names one (this
    host's claims are not that machine's); a state that cannot be read is one line in the text
    and ``pluginState`` in JSON, and the rest of ``explain`` still answers."""
    m = Machine(tmp_path / "m")
    args = ["--sysfs", str(m.sources.sysfs), "--facts", str(tmp_path), "--modules-dir",
            str(tmp_path), "--hwdata-dir", str(tmp_path)]
    state = tmp_path / "state"
    state.mkdir()
    (state / "claims.json").write_text('{"version": true, "claims": {}}')
    assert main(["explain", *args, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pluginState"] == {"read": True, "error": None}
    assert doc["lateRegistrants"] == {}
    assert main(["explain", *args, "--state-dir", str(state), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pluginState"]["read"] is False
    assert doc["pluginState"]["error"].startswith(f"{state}/claims.json: state version True")
    assert any(RADIO in h["devices"] for h in doc["hardware"])  # the rest still answers
    assert main(["explain", *args, "--state-dir", str(state)]) == 0
    text = capsys.readouterr().out
    assert "usb 1-8:1.0 [btusb]: published as usb-1-8-1-0" in text
    assert "The kubelet plugin's state cannot be read" in " ".join(text.split())
