"""MachineReporter against the loopback API server: spec in, status out, only on change
(docs/agent.md, "The Machine"; rules: machine.object, machine.facts-condition)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from liken_devices.inventory import Facts, Inventory, Unclaimed
from liken_devices.inventory.model import MachineSpec, SerioEntry
from liken_devices.kube import MachineReporter
from tests.support.fakeapi import FakeApiServer

NODE = "node-m"


def inventory(readable: bool = True, unclaimed: int = 1) -> Inventory:
    items = tuple(Unclaimed(path=f"/sys/devices/pci0000:00/0000:00:1f.{i}", bus="pci",
                            address=f"0000:00:1f.{i}", modalias=f"pci:v00008086d0000A170sv{i}",
                            name="Sunrise Point-LP HD Audio", class_="multimedia",
                            candidates=("snd_hda_intel", "snd_soc_skl"),
                            message="no driver bound; declare one of its modules in spec.modules")
                  for i in range(unclaimed))
    facts = Facts(frozenset({"vda1"})) if readable else Facts(
        None, "facts root /run/liken/facts does not exist")
    return Inventory(devices=(), outcomes=(), unclaimed=items, facts=facts)


def status(api: FakeApiServer) -> dict[str, Any]:
    obj = api.get_object("machines", NODE)
    assert obj is not None
    return obj.get("status") or {}


def test_reads_the_spec(api: FakeApiServer, client: Any) -> None:
    api.add_machine(NODE, {"modules": ["uhid", "snd_hda_intel"], "serio": [
        {"protocol": "pulse8-cec", "vendor": "2548", "product": "1002", "serial": "A1"}]})
    rep = MachineReporter(client, NODE)
    spec = rep.refresh()
    assert spec == MachineSpec(("uhid", "snd_hda_intel"),
                               (SerioEntry("pulse8-cec", "2548", "1002", "A1"),))


def test_missing_machine_means_empty_spec_and_no_status(api: FakeApiServer, client: Any,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    rep = MachineReporter(client, NODE)
    assert rep.refresh() == MachineSpec()
    rep.set_status(inventory())
    assert rep.sync()
    assert rep.sync()
    assert caplog.text.count("no Machine named node-m") == 1
    assert rep.writes == 0


def test_status_written_through_subresource_only_on_change(api: FakeApiServer,
                                                           client: Any) -> None:
    api.add_machine(NODE, {"modules": ["uhid"]})
    rep = MachineReporter(client, NODE)
    rep.refresh()
    rep.set_status(inventory())
    assert rep.sync()
    got = status(api)
    assert got["hardware"]["unclaimed"] == [{
        "bus": "pci", "candidates": ["snd_hda_intel", "snd_soc_skl"],
        "message": "no driver bound; declare one of its modules in spec.modules",
        "modalias": "pci:v00008086d0000A170sv0", "name": "Sunrise Point-LP HD Audio",
        "class": "multimedia"}]
    (cond,) = got["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("FactsPublished", "True",
                                                              "FactsRead")
    assert cond["observedGeneration"] == 1
    assert ("PATCH", f"/apis/liken.sh/v1alpha1/machines/{NODE}/status",
            "application/merge-patch+json") in api.requests
    rv = api.get_object("machines", NODE)["metadata"]["resourceVersion"]  # type: ignore[index]
    rep.set_status(inventory())
    assert rep.sync() and rep.writes == 1
    assert api.get_object("machines", NODE)["metadata"]["resourceVersion"] == rv  # type: ignore[index]


def test_facts_unreadable_condition_and_transition_time(api: FakeApiServer, client: Any) -> None:
    api.add_machine(NODE)
    rep = MachineReporter(client, NODE)
    rep.refresh()
    rep.set_status(inventory(readable=False, unclaimed=0))
    rep.sync()
    (cond,) = status(api)["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "FactsUnreadable")
    assert cond["message"] == "facts root /run/liken/facts does not exist"
    first_time = cond["lastTransitionTime"]
    # Another walk with a different unclaimed list keeps the condition's transition time.
    rep.set_status(inventory(readable=False, unclaimed=2))
    rep.sync()
    assert status(api)["conditions"][0]["lastTransitionTime"] == first_time
    assert len(status(api)["hardware"]["unclaimed"]) == 2
    rep.set_status(inventory(readable=True, unclaimed=0))
    rep.sync()
    assert status(api)["conditions"][0]["status"] == "True"


def test_machine_side_fragment_is_merged_and_removed(api: FakeApiServer, client: Any) -> None:
    api.add_machine(NODE, {"modules": ["uhid"]})
    rep = MachineReporter(client, NODE)
    rep.refresh()
    fragment = {"modules": [{"name": "uhid", "state": "Builtin", "message": "built in"}],
                "serio": [], "conditions": [{"type": "ModulesLoaded", "status": "True",
                                             "reason": "AllLoaded", "message": ""}]}
    rep.set_status(inventory(), fragment)
    rep.sync()
    got = status(api)
    assert got["modules"] == fragment["modules"] and got["serio"] == []
    assert [c["type"] for c in got["conditions"]] == ["FactsPublished", "ModulesLoaded"]
    rep.set_status(inventory(), {"modules": fragment["modules"]})
    rep.sync()
    got = status(api)
    assert "serio" not in got
    assert [c["type"] for c in got["conditions"]] == ["FactsPublished"]


def test_spec_change_from_watch_asks_for_a_walk(api: FakeApiServer, client: Any,
                                                caplog: pytest.LogCaptureFixture) -> None:
    api.add_machine(NODE, {"modules": ["uhid"]})
    rep = MachineReporter(client, NODE)
    rep.refresh()
    changed = api.set_machine_spec(NODE, {"modules": ["uhid", "btusb"]})
    assert rep.observe("MODIFIED", changed) is True
    assert rep.spec.modules == ("uhid", "btusb")
    same = api.set_machine_spec(NODE, {"modules": ["uhid", "btusb"]})
    assert rep.observe("MODIFIED", same) is False
    # A spec the parser refuses keeps the previous one and says why.
    bad = dict(same, spec={"modules": ["no/slashes"]})
    assert rep.observe("MODIFIED", bad) is False
    assert rep.spec.modules == ("uhid", "btusb")
    assert "not a module name" in caplog.text
    assert rep.observe("DELETED", same) is True
    assert rep.spec == MachineSpec()


def test_outage_retries_with_backoff(api: FakeApiServer, client: Any,
                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    api.add_machine(NODE)
    rep = MachineReporter(client, NODE)
    rep.refresh()
    api.stop()
    rep.set_status(inventory())
    assert not rep.sync()
    assert not rep.sync()
    assert rep.retry_in() is not None
    assert caplog.text.count("retrying with backoff") == 1
    api.start()
    assert rep.sync()
    assert status(api)["conditions"][0]["reason"] == "FactsRead"
    assert "recovered" in caplog.text


def test_sharing_condition_follows_what_the_server_keeps(api: FakeApiServer,
                                                         client: Any) -> None:
    api.add_machine(NODE, {})
    rep = MachineReporter(client, NODE)
    rep.refresh()
    assert rep.set_sharing(False) is False  # no walk reported yet: the next status carries it
    rep.set_status(inventory())
    assert rep.sync()

    def sharing() -> dict[str, Any]:
        return next(c for c in status(api)["conditions"] if c["type"] == "SharingAvailable")

    assert (sharing()["status"], sharing()["reason"]) == ("False", "SharingDropped")
    assert rep.set_sharing(False) is False  # unchanged: nothing to write
    assert rep.set_sharing(True) is True  # the gate turned on: a new status is due at once
    assert rep.sync()
    assert (sharing()["status"], sharing()["reason"]) == ("True", "SharingKept")


def test_a_cluster_machine_with_an_unknown_field_keeps_the_previous_spec(
        api: FakeApiServer, client: Any, caplog: pytest.LogCaptureFixture) -> None:
    """rules: limits.strict-inputs: the Machine the watch delivers is read as strictly as a
    file (a newer CRD's field, or one that a schema without pruning let through)."""
    api.add_machine(NODE, {"modules": ["uhid"]})
    rep = MachineReporter(client, NODE)
    assert rep.refresh() == MachineSpec(("uhid",))
    changed = rep.observe("MODIFIED", {
        "apiVersion": "liken.sh/v1alpha1", "kind": "Machine", "metadata": {"name": NODE},
        "spec": {"modules": ["serport"], "serio": [{"protocol": "pulse8-cec", "vendor": "2548",
                                                     "product": "1002", "serail": "A1"}]}})
    assert not changed and rep.spec == MachineSpec(("uhid",))
    assert rep.spec_error is not None
    assert 'unknown field "spec.serio[0].serail"' in rep.spec_error
    assert "keeping the previous spec" in caplog.text
