"""The agent in-process: real uevents wake walks of a fixture tree; the loopback API server sees
the slice and the Machine follow (``docs/agent.md``; rules: uevents.actions, limits.cap).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from liken_devices.agent.cli import run_options
from liken_devices.agent.run import Assembled, assemble
from liken_devices.cli import build_parser
from tests.support.fakeapi import FakeApiServer
from tests.support.wait import wait_until

from .node import FixtureNode, is_root, loop_device, synthetic_uevent, veth_pair, zram_device

pytestmark = [pytest.mark.root, pytest.mark.skipif(not is_root(), reason="real uevents")]


class Running:
    def __init__(self, built: Assembled, api: FakeApiServer, node: FixtureNode,
                 name: str) -> None:
        self.built = built
        self.agent = built.agent
        self.api = api
        self.node = node
        self.name = name
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.rc: int | None = None

    def _run(self) -> None:
        self.rc = self.agent.run()

    def slice_names(self) -> list[str]:
        obj = self.api.get_object("resourceslices", f"{self.name}-liken.sh")
        return [d["name"] for d in (obj or {}).get("spec", {}).get("devices") or []]

    def wait_names(self, want: list[str], timeout: float = 10.0) -> None:
        self.api.wait_for(lambda: self.slice_names() == sorted(want), timeout)

    def stop(self) -> None:
        self.agent.request_stop()
        self.thread.join(10)
        self.built.close()
        assert not self.thread.is_alive()


@pytest.fixture
def node(tmp_path: Path) -> FixtureNode:
    return FixtureNode(tmp_path / "node")


def start(api: FakeApiServer, node: FixtureNode, tmp_path: Path, *extra: str,
          name: str | None = None, machine: bool = True) -> Running:
    name = name or f"agent-{tmp_path.name[-12:].lower().strip('_-').replace('_', '-')}"
    if api.get_object("nodes", name) is None:
        api.add_node(name)
    if machine and api.get_object("machines", name) is None:
        api.add_machine(name, {})
    args = build_parser().parse_args([
        "run", "--node", name, *node.args(), "--kubeconfig",
        str(api.write_kubeconfig(tmp_path / "kubeconfig")), "--api-timeout", "2",
        "--console", str(tmp_path / "console"), "--no-plugin", *extra])
    running = Running(assemble(run_options(args)), api, node, name)
    running.thread.start()
    assert running.agent.ready.wait(15)
    return running


def test_follows_uevents_and_ignores_virtual_net(api: FakeApiServer, node: FixtureNode,
                                                 tmp_path: Path) -> None:
    run = start(api, node, tmp_path)
    try:
        run.wait_names(["pci-0000-00-02-0", "pci-0000-00-02-0-display"])
        assert run.agent.walks == 1
        usb = node.plug_usb(3)
        synthetic_uevent("add")
        run.wait_names([usb, "pci-0000-00-02-0", "pci-0000-00-02-0-display"], timeout=12)
        node.unplug_usb(3)
        synthetic_uevent("remove")
        run.wait_names(["pci-0000-00-02-0", "pci-0000-00-02-0-display"], timeout=12)
        gen = api.get_object("resourceslices", f"{run.name}-liken.sh")["spec"]["pool"]  # type: ignore[index]
        assert gen["generation"] == 3
        # A veth pair (many uevents under /devices/virtual/net/) wakes no walk.
        metrics = run.agent.metrics
        walks = run.agent.walks
        ignored = metrics.uevents_ignored.get()
        woke = metrics.uevents.get() - ignored
        late = node.plug_usb(4)  # would show up if anything walked
        with veth_pair():
            time.sleep(1.6)
        time.sleep(1.2)
        assert metrics.uevents_ignored.get() >= ignored + 4
        if metrics.uevents.get() - metrics.uevents_ignored.get() == woke:
            assert run.agent.walks == walks
            assert late not in run.slice_names()
        # else another test on this machine made real uevents meanwhile: a walk was right.
    finally:
        run.stop()
    assert run.rc == 0


def test_change_online_and_offline_wake_no_walk(api: FakeApiServer, node: FixtureNode,
                                                 tmp_path: Path) -> None:
    """rules: uevents.actions. A laptop's battery sends a change every minute; that and a CPU's
    online/offline are no hardware arriving, leaving or changing its driver."""
    run = start(api, node, tmp_path)
    try:
        gpu = ["pci-0000-00-02-0", "pci-0000-00-02-0-display"]
        run.wait_names(gpu)
        metrics = run.agent.metrics
        walks = run.agent.walks
        seen, ignored = metrics.uevents.get(), metrics.uevents_ignored.get()
        late = node.plug_usb(6)  # would show up if anything walked
        for action in ("change", "online", "offline", "change"):
            synthetic_uevent(action)
        api.wait_for(lambda: metrics.uevents.get() >= seen + 4)
        time.sleep(1.5)  # past the quiet second a woken burst would wait
        assert metrics.uevents_ignored.get() >= ignored + 4
        if metrics.uevents.get() - metrics.uevents_ignored.get() == seen - ignored:
            assert run.agent.walks == walks
            assert late not in run.slice_names()
        # else another test on this machine made waking uevents meanwhile: a walk was right.
        synthetic_uevent("bind")  # a driver change: the walk finds the dongle
        run.wait_names([*gpu, late], timeout=12)
    finally:
        run.stop()


def test_real_device_arrivals_wake_a_walk(api: FakeApiServer, node: FixtureNode,
                                           tmp_path: Path) -> None:
    """A loop device made through /dev/loop-control and a zram device from hot_add are real
    arrivals (add uevents for new block devices); each makes the walk that finds the fixture
    tree's new hardware."""
    run = start(api, node, tmp_path)
    try:
        gpu = ["pci-0000-00-02-0", "pci-0000-00-02-0-display"]
        run.wait_names(gpu)
        first = node.plug_usb(10)
        with loop_device():
            run.wait_names([*gpu, first], timeout=12)
        second = node.plug_usb(11)
        with zram_device():
            run.wait_names([*gpu, first, second], timeout=12)
    finally:
        run.stop()


def test_burst_makes_one_walk_within_five_seconds(api: FakeApiServer, node: FixtureNode,
                                                  tmp_path: Path) -> None:
    run = start(api, node, tmp_path)
    try:
        time.sleep(1.2)  # no burst pending
        metrics = run.agent.metrics
        walks, seen_before = run.agent.walks, metrics.uevents.get()
        usb = node.plug_usb(5)
        first = time.monotonic()
        writes = 0
        while time.monotonic() - first < 6.5:  # never quiet for a whole second
            synthetic_uevent("add")
            writes += 1
            if usb in run.slice_names():
                break
            time.sleep(0.3)
        seen = time.monotonic() - first
        assert usb in run.slice_names()
        assert seen <= 6.0, seen  # the five-second bound holds whatever else happens
        if metrics.uevents.get() - seen_before == writes:
            # Only our uevents arrived: exactly one walk, at the bound, not after a quiet second.
            assert seen >= 4.5, seen
            assert run.agent.walks == walks + 1
    finally:
        run.stop()


def test_machine_status_and_spec_changes(api: FakeApiServer, node: FixtureNode,
                                         tmp_path: Path) -> None:
    # Unclaimed hardware: a PCI function with no driver.
    node.builder.pci("0000:00:1f.3", vendor="8086", device="a170", cls=0x040300)
    run = start(api, node, tmp_path)
    try:
        def status() -> dict[str, Any]:
            return (api.get_object("machines", run.name) or {}).get("status") or {}

        api.wait_for(lambda: status().get("conditions"))
        got = status()
        assert [u["bus"] for u in got["hardware"]["unclaimed"]] == ["pci"]
        facts = next(c for c in got["conditions"] if c["type"] == "FactsPublished")
        assert (facts["status"], facts["reason"]) == ("True", "FactsRead")
        assert {c["type"] for c in got["conditions"]} >= {"ModulesLoaded", "SerioAttached"}
        # The facts become unreadable: the condition turns False at the next walk.
        (node.facts / "storage").rename(node.facts / "storage.bak")
        node.facts.rename(node.root / "facts.gone")
        synthetic_uevent("add")
        api.wait_for(lambda: next(c for c in status()["conditions"]
                                  if c["type"] == "FactsPublished")["status"] == "False")
        facts = next(c for c in status()["conditions"] if c["type"] == "FactsPublished")
        assert facts["reason"] == "FactsUnreadable" and "does not exist" in facts["message"]
        # A spec change arrives through the watch and makes a walk at once.
        walks = run.agent.walks
        api.set_machine_spec(run.name, {"modules": ["snd_hda_intel"]})
        api.wait_for(lambda: run.agent.walks > walks, timeout=12)
        assert run.agent.machine_spec().modules == ("snd_hda_intel",)
        # The machine side's fragment reaches the status (the CRD's schema accepts it).
        api.wait_for(lambda: [m["name"] for m in status().get("modules", [])]
                     == ["snd_hda_intel"], timeout=12)
        assert status()["modules"][0]["state"]
    finally:
        run.stop()


def test_a_server_that_drops_sharing_is_said_once_and_on_the_machine(
        api: FakeApiServer, node: FixtureNode, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """The render node asks allowMultipleAllocations; a server with DRAConsumableCapacity off
    drops it. The agent logs it once and the Machine says SharingAvailable=False."""
    api.gate_consumable_capacity = False
    run = start(api, node, tmp_path)
    try:
        def sharing() -> dict[str, Any] | None:
            status = (api.get_object("machines", run.name) or {}).get("status") or {}
            return next((c for c in status.get("conditions", [])
                         if c["type"] == "SharingAvailable"), None)

        api.wait_for(lambda: sharing() is not None)
        cond = sharing()
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("False", "SharingDropped")
        assert "DRAConsumableCapacity" in cond["message"]
        synthetic_uevent("add")  # another walk: nothing new is said
        time.sleep(1.5)
        said = [r for r in caplog.records if "dropped allowMultipleAllocations" in r.getMessage()]
        assert len(said) == 1
    finally:
        run.stop()


def test_machine_created_later_and_status_edits_undone(api: FakeApiServer, node: FixtureNode,
                                                       tmp_path: Path) -> None:
    run = start(api, node, tmp_path, machine=False)
    try:
        run.wait_names(["pci-0000-00-02-0", "pci-0000-00-02-0-display"])
        api.wait_for(lambda: all(w.connected.is_set() for w in run.agent._watches))
        api.add_machine(run.name, {})  # same (empty) spec: no walk needed, a status to write

        def conditions() -> list[str]:
            status = (api.get_object("machines", run.name) or {}).get("status") or {}
            return [c["type"] for c in status.get("conditions", [])]

        api.wait_for(lambda: "FactsPublished" in conditions(), 5)
        # Someone else rewrites the status: the agent puts its own back.
        obj = api.get_object("machines", run.name)
        assert obj is not None
        obj["status"] = {"conditions": [{"type": "Other", "status": "True"}]}
        api.put_object("machines", obj)
        api.wait_for(lambda: "FactsPublished" in conditions() and "Other" not in conditions(),
                     5)
    finally:
        run.stop()


def test_slice_deleted_by_kubelet_comes_back(api: FakeApiServer, node: FixtureNode,
                                             tmp_path: Path) -> None:
    run = start(api, node, tmp_path)
    try:
        run.wait_names(["pci-0000-00-02-0", "pci-0000-00-02-0-display"])
        api.wait_for(lambda: any(w.connected.is_set() for w in run.agent._watches))
        api.kubelet_restart_wipe(run.name)
        run.wait_names(["pci-0000-00-02-0", "pci-0000-00-02-0-display"], timeout=12)
        obj = api.get_object("resourceslices", f"{run.name}-liken.sh")
        assert obj is not None and obj["spec"]["pool"]["generation"] == 2
    finally:
        run.stop()


def test_outage_then_convergence(api: FakeApiServer, node: FixtureNode, tmp_path: Path) -> None:
    run = start(api, node, tmp_path)
    try:
        run.wait_names(["pci-0000-00-02-0", "pci-0000-00-02-0-display"])
        api.stop()
        usb = node.plug_usb(6)
        synthetic_uevent("add")
        errors = run.agent.metrics.api_errors.labels(op="slice", code="connection")
        # The walk runs while the server is down (within 1 s, or 5 s if other tests on this
        # machine keep the burst going), and its publish fails.
        api.wait_for(lambda: errors.get() >= 1, 10)
        api.start()
        run.wait_names([usb, "pci-0000-00-02-0", "pci-0000-00-02-0-display"], timeout=20)
    finally:
        run.stop()


def test_api_down_at_start_then_spec_and_slice_arrive(api: FakeApiServer, node: FixtureNode,
                                                      tmp_path: Path) -> None:
    name = "agent-down-at-start"
    api.add_node(name)
    api.add_machine(name, {"modules": ["snd_hda_intel"]})
    api.stop()
    run = start(api, node, tmp_path, name=name)
    try:
        assert run.agent.machine_spec().modules == ()  # nothing could be read yet
        api.start()
        run.wait_names(["pci-0000-00-02-0", "pci-0000-00-02-0-display"], timeout=20)
        api.wait_for(lambda: run.agent._walked_spec is not None
                     and run.agent._walked_spec.modules == ("snd_hda_intel",), 20)
        api.wait_for(lambda: (api.get_object("machines", name) or {}).get("status"), 10)
    finally:
        run.stop()


def test_overflow_printed_once_on_the_console(api: FakeApiServer, node: FixtureNode,
                                              tmp_path: Path) -> None:
    for port in range(1, 131):  # 130 dongles + the GPU's two devices: past the cap
        dev = node.builder.usb_device(f"3-{port}", busnum=3, devnum=port + 1)
        iface = node.builder.usb_interface(dev, "1.0", driver="usbhid", cls=3)
        node.builder.node(iface, "hidraw", f"hidraw{port}", 242, port, subdir="hidraw")
    run = start(api, node, tmp_path)
    try:
        api.wait_for(lambda: len(run.slice_names()) == 128)
        console = tmp_path / "console"
        synthetic_uevent("add")
        time.sleep(1.5)
        text = console.read_text()
        assert text.count("\n") == 1
        assert f"node {run.name} has 132 devices" in text and "4 cannot be claimed" in text
        assert run.agent.metrics.overflow.get() == 4
    finally:
        run.stop()


def test_metrics_and_probe_endpoint(api: FakeApiServer, node: FixtureNode,
                                    tmp_path: Path) -> None:
    run = start(api, node, tmp_path, "--metrics-port", "0", "--metrics-addr", "127.0.0.1")
    try:
        run.wait_names(["pci-0000-00-02-0", "pci-0000-00-02-0-display"])
        port = run.built.metrics_server.port
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        body = text.decode()
        assert "liken_devices_published_devices 2.0" in body
        assert 'liken_devices_walks_total{reason="start"} 1.0' in body
        assert "liken_devices_last_publish_timestamp_seconds" in body
        assert 'liken_devices_build_info{python="' in body
        assert "process_resident_memory_bytes" in body
        assert "_created" not in body
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert health.status == 200 and health.read().startswith(b"ok")
        # No plugin in this run (--no-plugin): ready once the slice is written.
        ready = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert ready.status == 200
    finally:
        run.stop()


def test_offline_with_machine_file(node: FixtureNode, tmp_path: Path) -> None:
    machine = tmp_path / "machine.yaml"
    machine.write_text("modules: []\n")
    args = build_parser().parse_args([
        "run", "--node", "offline", *node.args(), "--no-api", "--machine", str(machine),
        "--slice-out", str(tmp_path / "slice.json"), "--status-out", str(tmp_path / "status.json"),
        "--console", str(tmp_path / "console"), "--no-plugin"])
    built = assemble(run_options(args))
    t = threading.Thread(target=built.agent.run, daemon=True)
    t.start()
    try:
        assert built.agent.ready.wait(10)
        import json

        obj = json.loads((tmp_path / "slice.json").read_text())
        assert obj["metadata"]["name"] == "offline-liken.sh"
        assert [d["name"] for d in obj["spec"]["devices"]] == ["pci-0000-00-02-0",
                                                             "pci-0000-00-02-0-display"]
        status = json.loads((tmp_path / "status.json").read_text())
        assert status["conditions"][0]["type"] == "FactsPublished"
        usb = node.plug_usb(7)
        synthetic_uevent("add")
        # Other tests' uevents can stretch the burst to its 5 s cap (rules: uevents.quiet-second).
        def published() -> Any:
            obj = json.loads((tmp_path / "slice.json").read_text())
            return obj if usb in [d["name"] for d in obj["spec"]["devices"]] else None

        obj = wait_until(published, 12, f"{usb} in --slice-out", every=0.05)
        assert obj["spec"]["pool"]["generation"] == 2
    finally:
        built.agent.request_stop()
        t.join(10)
        built.close()


class _Broken:
    """A publisher with a bug: every call raises."""

    def set_devices(self, devices: list[dict[str, Any]]) -> None:
        raise RuntimeError("a bug in publishing")

    def sync(self) -> bool:
        raise RuntimeError("a bug in publishing")

    def retry_in(self, now: float | None = None) -> float | None:
        return None

    def observe(self, kind: str, obj: Any) -> bool:
        return False


def test_a_failing_part_does_not_end_the_agent(node: FixtureNode, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    import json

    from liken_devices.agent.runner import Agent, AgentConfig
    from liken_devices.slices.publish import SliceFile

    out = tmp_path / "slice.json"
    agent = Agent(AgentConfig(node="broken", sources=node.sources(), console=None),
                  publishers=[_Broken(), SliceFile("broken", out)])
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    try:
        assert agent.ready.wait(10)
        usb = node.plug_usb(8)
        synthetic_uevent("add")
        wait_until(lambda: usb in out.read_text(), 12, f"{usb} in --slice-out", every=0.05)
        assert usb in [d["name"] for d in json.loads(out.read_text())["spec"]["devices"]]
        assert t.is_alive()
        assert "publishing failed" in caplog.text
    finally:
        agent.request_stop()
        t.join(10)
    assert not t.is_alive()


class _Recording:
    """A publisher that keeps what it is handed."""

    def __init__(self) -> None:
        self.handed: list[list[dict[str, Any]]] = []
        self.synced = 0
        self.seen: list[str] = []
        self.writes = 0

    @property
    def converged(self) -> bool:
        return self.synced > 0

    def set_devices(self, devices: list[dict[str, Any]]) -> None:
        self.handed.append(devices)

    def sync(self) -> bool:
        self.synced += 1
        return True

    def retry_in(self, now: float | None = None) -> float | None:
        return None

    def observe(self, kind: str, obj: Any) -> bool:
        self.seen.append(kind)
        return False


def test_each_walk_goes_to_every_publisher(node: FixtureNode,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """The same walk reaches every publisher, and one that fails (first or last) keeps it from
    none of the others; each publisher sees the slice's watch events."""
    from liken_devices.agent.runner import Agent, AgentConfig
    from liken_devices.slices import devices_json

    first, second = _Recording(), _Recording()
    agent = Agent(AgentConfig(node="two", sources=node.sources(), console=None),
                  publishers=[_Broken(), first, second, _Broken()])
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    try:
        assert agent.ready.wait(10)
        assert agent.inventory is not None
        walk = devices_json(agent.inventory)
        assert [d["name"] for d in walk] == ["pci-0000-00-02-0", "pci-0000-00-02-0-display"]
        assert first.handed == second.handed == [walk]
        assert first.synced == second.synced == 1
        assert caplog.text.count("publishing failed") == 2
        agent.on_slice_event("MODIFIED", {"metadata": {"name": "two-liken.sh"}})
        assert first.seen == second.seen == ["MODIFIED"]
    finally:
        agent.request_stop()
        t.join(10)
    assert not t.is_alive()


class _Overdue(_Recording):
    """A publisher whose retry is always due (an API server that keeps failing)."""

    def retry_in(self, now: float | None = None) -> float | None:
        return 0.0


class _Superseded:
    """The plugin of an instance beside which a newer one of a surge upgrade runs (or not)."""

    def __init__(self) -> None:
        self.newer: str | None = "pid 2 (pod new)"
        self.registered = True
        self.reconciled = 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def claimed(self) -> Any:
        from liken_devices.inventory.model import NO_CLAIMS

        return NO_CLAIMS

    def reconcile(self, inv: Any) -> None:
        self.reconciled += 1

    def superseded(self) -> str | None:
        return self.newer


def test_an_instance_a_newer_one_supersedes_stands_by_then_writes_again(
        node: FixtureNode, caplog: pytest.LogCaptureFixture) -> None:
    """docs/plugin.md, "Upgrades": while a newer instance runs, this one walks and hands its
    devices on but writes nothing (no slice, no reconcile pass over the CDI specs), and a retry
    that is due does not spin its loop; once the newer one is gone, it writes within its standby
    check."""
    from liken_devices.agent.runner import STANDBY_CHECK, Agent, AgentConfig

    caplog.set_level(logging.INFO, logger="liken_devices")
    publisher = _Overdue()
    plugin = _Superseded()
    agent = Agent(AgentConfig(node="old", sources=node.sources(), console=None),
                  publishers=[publisher], plugin=plugin)
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    try:
        assert agent.ready.wait(10)
        assert len(publisher.handed) == 1 and publisher.synced == 0
        assert plugin.reconciled == 0
        turns = agent.turns
        time.sleep(2 * STANDBY_CHECK + 0.5)
        # Other tests' uevents may wake it a few times; a spinning loop turns 100,000s of times.
        assert agent.turns - turns <= 100, "the loop spins while it stands by"
        assert publisher.synced == 0
        assert "pid 2 (pod new)" in caplog.text and "this one stands by" in caplog.text
        plugin.newer = None
        wait_until(lambda: publisher.synced, STANDBY_CHECK + 3, "a publish after the newer "
                   "instance ended", every=0.05)
        assert publisher.synced >= 1
        assert plugin.reconciled >= 1  # the walk it made meanwhile, now its specs too
        assert "the claims' CDI specs again" in caplog.text
    finally:
        agent.request_stop()
        t.join(10)
    assert not t.is_alive()


class _Blind(_Superseded):
    """The plugin of an instance that cannot tell whether it is the newest: its holder file
    cannot be made (a full state filesystem), so no other instance knows it runs."""

    def __init__(self) -> None:
        super().__init__()
        from liken_devices.plugin.state import HolderMissing

        self.error: OSError | None = HolderMissing(
            28, "this instance's holder file cannot be made in /state (No space left on "
            "device), so the other instance cannot know it runs")

    def superseded(self) -> str | None:
        if self.error is not None:
            raise self.error
        return None


def test_an_instance_that_cannot_tell_it_is_the_one_writer_writes_nothing_and_is_not_ready(
        node: FixtureNode, caplog: pytest.LogCaptureFixture) -> None:
    """rules: limits.one-writer: an instance whose holder file cannot be written is invisible to
    the other instance, which goes on writing; so this one writes nothing (no slice, no
    Machine status, no reconcile pass), says why in /readyz, and asks again every standby
    check: once it can tell, it writes."""
    from liken_devices.agent.runner import STANDBY_CHECK, Agent, AgentConfig

    caplog.set_level(logging.INFO, logger="liken_devices")
    publisher = _Overdue()
    plugin = _Blind()
    agent = Agent(AgentConfig(node="new", sources=node.sources(), console=None),
                  publishers=[publisher], plugin=plugin)
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    try:
        assert agent.ready.wait(10)
        time.sleep(STANDBY_CHECK + 0.5)
        assert publisher.synced == 0, "an instance nobody can see writes the slice"
        assert plugin.reconciled == 0
        ready, why = agent.readiness()
        assert not ready and "No space left on device" in why and "holder" in why, why
        assert "No space left on device" in caplog.text
        plugin.error = None
        wait_until(lambda: publisher.synced, STANDBY_CHECK + 3, "a publish after the holder "
                   "file could be written", every=0.05)
        assert publisher.synced >= 1 and plugin.reconciled >= 1
        assert agent.readiness()[0]
    finally:
        agent.request_stop()
        t.join(10)
    assert not t.is_alive()
