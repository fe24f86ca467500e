"""A late Bluetooth registrant is reported, not hidden (rules: bluetooth.late-registrant).

The real inventory over a built tree, the real plugin over gRPC (the kubelet's health stream),
real CDI specs on disk, the pod's status in the loopback API server. A keyboard plugged in after
the Bluetooth claim's container started takes the lowest free event number, which the container
already holds: the Bluetooth device turns unhealthy on the health stream, one log line and the
metric name the number and its owner, and ``claims`` shows it. It is healthy again only once the
kubelet records that the claim's container restarted after the spec without the number was
written (the pod's ``status.containerStatuses[].state.running.startedAt``, a pod the claim's
``status.reservedFor`` names); a read of the spec, or any other file time, changes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def spec_read(cdi_dir: Path, uid: str) -> None:
    """Someone reads the claim's spec, as podman does for every CDI spec whenever it creates any
    container: its access time moves, two seconds and more after the write."""
    path = spec_path(cdi_dir, uid)
    path.read_bytes()
    st = os.stat(path)
    os.utime(path, ns=(st.st_mtime_ns + 2_000_000_000, st.st_mtime_ns))


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def run_pod(api: FakeApiServer, claim: tuple[str, str, str], started: float,
            restarts: int = 0, pod: str = "bt-pod") -> None:
    """The claim's pod as the scheduler and the kubelet record it: the claim reserved for the
    pod, the pod's container (which uses the claim) running since ``started``."""
    namespace, _, name = claim
    obj = api.get_object("pods", pod, namespace)
    if obj is None:
        obj = api.add_pod(namespace, pod, node=NODE)
        obj["spec"]["resourceClaims"] = [{"name": "radio", "resourceClaimName": name}]
        obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "radio"}]}
        obj["spec"]["containers"].append({"name": "sidecar", "image": "x"})
    obj["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "c", "restartCount": restarts, "ready": True, "image": "x", "imageID": "",
         "state": {"running": {"startedAt": rfc3339(started)}}},
        # A container that does not use the claim holds none of its nodes.
        {"name": "sidecar", "restartCount": 0, "ready": True, "image": "x", "imageID": "",
         "state": {"running": {"startedAt": rfc3339(started - 3600)}}}]}
    api.put_object("pods", obj)
    rc = api.get_object("resourceclaims", name, namespace)
    assert rc is not None
    rc["status"]["reservedFor"] = [{"resource": "pods", "name": pod,
                                    "uid": obj["metadata"]["uid"]}]
    api.put_object("resourceclaims", rc)


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

    said: list[str] = []  # the health stream's message for the radio

    def watch() -> None:
        for msg in k.watch_health_messages(timeout=60):
            with seen:
                messages.append([(p, d, h) for p, d, h, _ in msg])
                said.append(msg[0][3])
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
        got = [(x["minor"], x["ownerDevice"], x["claim"])
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
        run_pod(api, claim, time.time())
        threading.Thread(target=watch, daemon=True).start()
        health_becomes(1)
        spec_read(config.cdi_dir, uid)
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
            "(/dev/input/event5) is now the node of usb-1-2-1-0 (usb 1-2:1.0), registered after "
            "its container started; the container can read it until it restarts with the "
            "current set"]
        # The health stream says the same, naming the owner by its device name.
        assert said[-1] == ("late Bluetooth registrant: 13:69 (/dev/input/event5) is now the "
                            "node of usb-1-2-1-0 (usb 1-2:1.0), registered after its container "
                            "started")
        assert late_metric(metrics) == 1
        device = claims()
        assert [(x["minor"], x["owner"], x["ownerDevice"])
                for x in device["lateRegistrants"]] == [(69, "usb 1-2:1.0", "usb-1-2-1-0")]
        assert device["healthy"] is False
        # explain shows it as well: the number, its owner and the claim.
        late, text = explain()
        assert late == [(69, "usb-1-2-1-0", f"default/{claim[2]}")]
        assert text == (f"  {RADIO} UNHEALTHY in claim default/{claim[2]}: 13:69 is "
                        "/dev/input/event5, the node of usb-1-2-1-0 (usb 1-2:1.0), registered "
                        "after the container started (it can read it until it restarts)")
        assert main(["claims", "--state-dir", str(config.state_dir), *machine_args]) == 0
        assert [line.strip() for line in capsys.readouterr().out.splitlines()
                if "UNHEALTHY" in line] == [
            "UNHEALTHY, late registrant: 13:69 is /dev/input/event5, the node of usb-1-2-1-0 "
            "(usb 1-2:1.0), registered after the container started (it can read it until it "
            "restarts)"]
        # The next container gets the current set: 13:69 is out of the rewritten spec.
        spec = json.loads(spec_path(config.cdi_dir, uid).read_text())
        minors = {n["minor"] for d in spec["devices"]
                  for n in d["containerEdits"]["deviceNodes"] if n.get("major") == 13}
        assert 69 not in minors and 70 in minors

        # Podman creates another container with a CDI device and reads every spec; relatime
        # moves the access time once a day anyway: nothing the kubelet or the runtime did for
        # this claim's container. The device stays unhealthy through walks and heartbeats.
        written = time.time()
        spec_read(config.cdi_dir, uid)
        for _ in range(2):
            plugin.reconcile(m.walk(claimed=plugin.claimed()))
            plugin.recheck_late()
        health_becomes(2)
        assert late_metric(metrics) == 1
        # A restart the kubelet records too soon after the write proves nothing either (the
        # runtime may have created the container from the old spec a moment before).
        run_pod(api, claim, written, restarts=1)
        plugin.recheck_late()
        health_becomes(2)
        # The kubelet records the container's restart after the spec without 13:69 was
        # written; a restart sends no uevent, so no walk comes: the health stream's next
        # message sees it.
        run_pod(api, claim, written + 3, restarts=2)
        health_becomes(1)
        assert said[-1] == "present"
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


# -- the class: no file time is a signal -----------------------------------------------------------

# Every file and directory of the plugin's a reader or a clock could touch.
TOUCHED = ("spec", "cdi-dir", "state", "state-dir", "names")
FILE_TIMES = st.lists(st.tuples(st.sampled_from(TOUCHED), st.booleans(),
                                st.integers(-(2**33), 2**33), st.integers(-(2**33), 2**33)),
                      min_size=1, max_size=6)


def touch(config: Any, uid: str, ops: list[tuple[str, bool, int, int]]) -> None:
    """Read each file (a reader's atime), then set its access and modification times to any
    offset (seconds) from now, past or future: what relatime, podman, a backup or ``touch``
    may leave."""
    paths = {"spec": spec_path(config.cdi_dir, uid), "cdi-dir": config.cdi_dir,
             "state": config.state_dir / "claims.json", "state-dir": config.state_dir,
             "names": config.state_dir / "names" / uid}
    now = time.time_ns()
    for what, read, atime, mtime in ops:
        path = paths[what]
        if read and path.is_file():
            path.read_bytes()
        os.utime(path, ns=(max(now + atime * 10**9, 0), max(now + mtime * 10**9, 0)))


def test_no_file_time_changes_the_verdict(
        api: FakeApiServer, kube: Any, tmp_path: Path, sockdir: Path) -> None:
    """rules: bluetooth.late-registrant. Over generated reads and times of the spec, the CDI
    dir, the state and its directory, with walks and health messages between: a late
    registrant stays unhealthy until the kubelet records the restart, and healthy after it."""
    m = Machine(tmp_path / "m")
    config = make_config(tmp_path, sockdir, sysfs=m.sources.sysfs)
    plugin = Plugin(config, m.walk, kube)
    plugin.start()
    k = TestKubelet(config.registration_socket)
    k.register()

    def verdict(ops: list[tuple[str, bool, int, int]]) -> bool:
        touch(config, uid, ops)
        plugin.reconcile(m.walk(claimed=plugin.claimed()))
        plugin.recheck_late()
        (state,) = plugin.health()[1]
        return state.healthy

    try:
        claim = new_claim(api, [RADIO])
        uid = claim[1]
        assert k.prepare([claim])[uid].error == ""
        run_pod(api, claim, time.time())
        m.plug_keyboard()
        plugin.reconcile(m.walk(claimed=plugin.claimed()))
        written = time.time()

        @settings(max_examples=60, deadline=None, database=None)
        @given(FILE_TIMES)
        def stays_unhealthy(ops: list[tuple[str, bool, int, int]]) -> None:
            assert verdict(ops) is False

        stays_unhealthy()
        run_pod(api, claim, written + 3, restarts=1)
        assert verdict([("spec", False, 0, 0)]) is True

        @settings(max_examples=60, deadline=None, database=None)
        @given(FILE_TIMES)
        def stays_healthy(ops: list[tuple[str, bool, int, int]]) -> None:
            assert verdict(ops) is True

        stays_healthy()
    finally:
        k.close()
        plugin.stop()


def test_a_claim_prepared_again_keeps_what_its_running_container_holds(
        api: FakeApiServer, kube: Any, tmp_path: Path, sockdir: Path) -> None:
    """rules: bluetooth.late-registrant. The kubelet prepares a prepared claim again when it
    restarts; the running container still holds the number, so the device stays unhealthy."""
    m = Machine(tmp_path / "m")
    config = make_config(tmp_path, sockdir, sysfs=m.sources.sysfs)
    plugin = Plugin(config, m.walk, kube)
    plugin.start()
    k = TestKubelet(config.registration_socket)
    k.register()
    try:
        claim = new_claim(api, [RADIO])
        assert k.prepare([claim])[claim[1]].error == ""
        run_pod(api, claim, time.time())
        m.plug_keyboard()
        plugin.reconcile(m.walk(claimed=plugin.claimed()))
        assert plugin.health()[1][0].healthy is False
        assert k.prepare([claim])[claim[1]].error == ""  # the kubelet restarted
        plugin.reconcile(m.walk(claimed=plugin.claimed()))
        assert plugin.health()[1][0].healthy is False
        assert 69 in plugin.prepared()[claim[1]].started[RADIO]
    finally:
        k.close()
        plugin.stop()


POD_CLAIM = {"spec": {"resourceClaims": [{"name": "radio", "resourceClaimName": "bt"}],
                      "initContainers": [{"name": "sidecar", "restartPolicy": "Always",
                                          "resources": {"claims": [{"name": "radio"}]}}],
                      "containers": [{"name": "app", "resources": {"claims": [{"name": "radio"}]}},
                                     {"name": "other"}]}}


def status(**states: Any) -> dict[str, Any]:
    def st_(name: str, state: Any) -> dict[str, Any]:
        return {"name": name, "state": state}
    init = [st_("sidecar", states.pop("sidecar"))] if "sidecar" in states else []
    return {"initContainerStatuses": init,
            "containerStatuses": [st_(n, s) for n, s in states.items()]}


def test_the_running_containers_that_use_the_claim_decide() -> None:
    """rules: bluetooth.late-registrant. The containers that name the claim (through the pod's
    claim name), init sidecars among them; a waiting or terminated one holds no node; a running
    one whose start cannot be read gives no verdict; a claim reserved for anything but pods
    gives none either."""
    from liken_devices.plugin.late import claim_starts, reserved_pods, restarted_since

    running = {"running": {"startedAt": "2026-12-04T01:00:10Z"}}
    old = {"running": {"startedAt": "2026-12-04T00:00:00Z"}}
    pod = {**POD_CLAIM, "status": status(sidecar=running, app=running, other=old)}
    starts = claim_starts(pod, "bt")
    assert starts is not None and len(starts) == 2  # "other" does not use the claim
    t = 1_796_346_000.0  # 2026-12-04T01:00:00Z
    assert restarted_since(starts, t) and not restarted_since(starts, t + 9)
    pod = {**POD_CLAIM, "status": status(sidecar=running, app={"waiting": {}},
                                         other={"terminated": {}})}
    assert claim_starts(pod, "bt") == [t + 10]
    pod = {**POD_CLAIM, "status": status(app={"running": {"startedAt": "yesterday"}})}
    assert claim_starts(pod, "bt") is None
    # A pod that does not say which containers use it: all of its running ones.
    assert claim_starts({"status": status(a=running, b=old)}, "bt") == [t + 10, t - 3600]
    assert reserved_pods({"status": {}}) == []
    assert reserved_pods({"status": {"reservedFor": [
        {"resource": "pods", "name": "p", "uid": "u"}]}}) == [("p", "u")]
    assert reserved_pods({"status": {"reservedFor": [
        {"apiGroup": "batch", "resource": "jobs", "name": "j", "uid": "u"}]}}) is None
    assert reserved_pods({"status": {"reservedFor": "x"}}) is None


def test_a_late_registrant_is_named_by_its_owners_device(tmp_path: Path) -> None:
    """The published device that delivers the number (the USB keyboard's interface), or, for a
    board device the machine keeps, the name its device would have (rules: names.form)."""
    from liken_devices.plugin.late import late_json, late_registrants

    m = Machine(tmp_path / "m")
    before = m.walk()
    started = {RADIO: [n.minor for n in before.by_name()[RADIO].nodes if n.major == 13]}
    assert started[RADIO] == list(range(69, 96))  # event0..4 are the laptop's keyboard's
    assert late_registrants(started, before) == {}
    m.plug_keyboard()
    i8042 = "/devices/platform/i8042"
    serio = m.b.device(i8042, "serio5", "serio", driver="atkbd")
    inp = m.b.device(serio, "input10", "input", subdir="input")
    m.b.node(inp, "input", "event6", 13, 70, devname="input/event6")
    inv = m.walk()
    got = {x.node.minor: late_json(x) for x in late_registrants(started, inv)[RADIO]}
    assert {k: v["ownerDevice"] for k, v in got.items()} == {
        69: "usb-1-2-1-0", 70: "platform-i8042"}
    assert any(n.minor == 69 for n in inv.by_name()["usb-1-2-1-0"].nodes)
    assert got[70]["why"] == ("13:70 is /dev/input/event6, the node of platform-i8042 "
                              "(platform i8042)")


def test_the_pods_are_read_within_a_budget(api: FakeApiServer, kube: Any) -> None:
    """rules: bluetooth.late-registrant. A claim reserved for pods the API is slow to give
    answers no verdict past its budget (the health stream's heartbeat waits for it); a pod that
    is gone runs no container; a claim replaced under another UID gives no verdict."""
    from liken_devices.plugin.claims import container_starts

    claim = new_claim(api, [RADIO])
    namespace, uid, name = claim
    run_pod(api, claim, 1_796_346_000.0)
    assert container_starts(kube, namespace, name, uid) == [1_796_346_000.0]
    assert container_starts(kube, namespace, name, uid, budget=-1) is None
    assert container_starts(kube, namespace, name, "0" * 8 + uid[8:]) is None
    api.delete_object("pods", "bt-pod", namespace)
    assert container_starts(kube, namespace, name, uid) == []
