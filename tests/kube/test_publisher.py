"""SlicePublisher against the loopback API server: it writes only changes, survives outages,
conflicts and throttling, recreates a deleted slice, and notices a server that drops
allowMultipleAllocations (docs/agent.md, "Publishing")."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from liken_devices.kube import GATE_MESSAGE, ObjectWatch, Resources, SlicePublisher
from tests.support.fakeapi import FakeApiServer

NODE = "node-a"


def render(name: str = "pci-0000-00-02-0") -> dict[str, Any]:
    return {"name": name, "allowMultipleAllocations": True,
            "attributes": {"bus": {"string": "pci"}, "renderNode": {"bool": True}}}


def plain(name: str) -> dict[str, Any]:
    return {"name": name, "attributes": {"bus": {"string": "usb"}}}


@pytest.fixture
def api(api: FakeApiServer) -> FakeApiServer:
    """The suite's loopback API server (tests/conftest.py), with this node's Node."""
    api.add_node(NODE, uid="uid-node-a")
    return api


def stored(api: FakeApiServer) -> dict[str, Any]:
    obj = api.get_object("resourceslices", f"{NODE}-liken.sh")
    assert obj is not None
    return obj


def test_publishes_owned_slice_and_writes_only_changes(api: FakeApiServer, client: Any,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="liken_devices.kube")
    pub = SlicePublisher(client, NODE)
    pub.set_devices([plain("usb-1-2-1-0"), render()])
    assert pub.sync()
    obj = stored(api)
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "uid-node-a",
         "controller": True}]
    assert obj["spec"]["nodeName"] == NODE and obj["spec"]["pool"]["name"] == NODE
    assert obj["spec"]["pool"]["generation"] == 1
    assert [d["name"] for d in obj["spec"]["devices"]] == ["pci-0000-00-02-0", "usb-1-2-1-0"]
    assert "published ResourceSlice node-a-liken.sh: 2 devices, generation 1" in caplog.text
    rv = obj["metadata"]["resourceVersion"]
    writes_before = [r for r in api.requests if r[0] == "PATCH"]
    # Same devices again (in another order): nothing is written.
    pub.set_devices([render(), plain("usb-1-2-1-0")])
    assert pub.sync()
    assert stored(api)["metadata"]["resourceVersion"] == rv
    assert [r for r in api.requests if r[0] == "PATCH"] == writes_before
    # A change raises the pool generation.
    pub.set_devices([render()])
    assert pub.sync()
    assert stored(api)["spec"]["pool"]["generation"] == 2
    assert [d["name"] for d in stored(api)["spec"]["devices"]] == ["pci-0000-00-02-0"]
    assert pub.writes == 2


def test_a_new_publisher_adopts_the_stored_generation(api: FakeApiServer, client: Any) -> None:
    first = SlicePublisher(client, NODE)
    first.set_devices([render()])
    first.sync()
    first.set_devices([render(), plain("usb-1-1-1-0")])
    first.sync()
    assert stored(api)["spec"]["pool"]["generation"] == 2
    again = SlicePublisher(client, NODE)  # the agent restarted
    again.set_devices([render(), plain("usb-1-1-1-0")])
    assert again.sync() and again.writes == 0 and again.generation == 2
    again.set_devices([render()])
    again.sync()
    assert stored(api)["spec"]["pool"]["generation"] == 3


def test_recreates_a_deleted_slice(api: FakeApiServer, client: Any) -> None:
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    pub.sync()
    events: list[str] = []

    def on_event(kind: str, obj: dict[str, Any] | None) -> None:
        events.append(kind)
        pub.observe(kind, obj)

    watch = ObjectWatch(lambda: client, Resources.slice(),
                        {"spec.nodeName": NODE, "spec.driver": "liken.sh"}, on_event, "slices")
    watch.start()
    try:
        assert watch.connected.wait(5)
        assert api.kubelet_restart_wipe(NODE) == 1
        api.wait_for(lambda: "DELETED" in events)
        assert not pub.converged
        assert pub.sync()
        obj = stored(api)
        assert obj["spec"]["pool"]["generation"] == 2
        assert obj["spec"]["devices"][0]["name"] == "pci-0000-00-02-0"
    finally:
        watch.stop()


def test_node_recreated_with_a_new_uid(api: FakeApiServer, client: Any) -> None:
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    pub.sync()
    api.delete_object("nodes", NODE)
    api.add_node(NODE, uid="uid-node-a-again")
    gone = stored(api)
    api.delete_object("resourceslices", gone["metadata"]["name"])  # the garbage collector
    assert pub.observe("DELETED", gone) is True
    assert pub.sync()
    assert stored(api)["metadata"]["ownerReferences"][0]["uid"] == "uid-node-a-again"


def test_deleted_between_read_and_write(api: FakeApiServer, client: Any) -> None:
    """The cached copy says the slice exists; it was deleted meanwhile, unseen (no watch).
    The apply carries a resourceVersion, so the server answers 404; the publisher re-reads and
    creates it."""
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    pub.sync()
    api.delete_object("resourceslices", f"{NODE}-liken.sh")
    pub.set_devices([render(), plain("usb-1-1-1-0")])
    assert pub.sync()
    assert len(stored(api)["spec"]["devices"]) == 2
    assert stored(api)["spec"]["pool"]["generation"] == 2


def test_someone_elses_edit_is_undone(api: FakeApiServer, client: Any) -> None:
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    pub.sync()
    edited = stored(api)
    edited["spec"]["devices"].append(plain("usb-9-9-1-0"))
    edited = api.put_object("resourceslices", edited)
    assert pub.observe("MODIFIED", edited) is True
    assert pub.sync()
    assert [d["name"] for d in stored(api)["spec"]["devices"]] == ["pci-0000-00-02-0"]


def test_outage_is_logged_once_and_converges(api: FakeApiServer, client: Any,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="liken_devices.kube")
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    pub.sync()
    api.stop()
    pub.set_devices([render(), plain("usb-1-1-1-0")])
    delays = []
    for _ in range(4):
        assert not pub.sync()
        delay = pub.retry_in()
        assert delay is not None
        delays.append(delay)
    assert delays == sorted(delays) and delays[-1] > delays[0]  # backing off
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "retrying with backoff" in warnings[0].getMessage()
    api.start()
    assert pub.sync()
    assert pub.retry_in() is None
    assert len(stored(api)["spec"]["devices"]) == 2
    recovered = [r.getMessage() for r in caplog.records if "recovered" in r.getMessage()]
    assert len(recovered) == 1 and "4 failed attempts" in recovered[0]


def test_conflict_is_retried_at_once(api: FakeApiServer, client: Any) -> None:
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    pub.sync()
    api.fail_next(409, count=2, methods=("PATCH",))
    pub.set_devices([plain("usb-1-1-1-0")])
    assert pub.sync()
    assert stored(api)["spec"]["devices"][0]["name"] == "usb-1-1-1-0"


def test_a_concurrent_write_makes_a_real_conflict(api: FakeApiServer, client: Any) -> None:
    """The apply carries the resourceVersion read; a write in between answers 409."""
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    pub.sync()
    other = stored(api)
    other["metadata"]["labels"] = {"touched": "yes"}
    api.put_object("resourceslices", other)  # the publisher's cached copy is now stale
    pub.set_devices([plain("usb-1-1-1-0")])
    assert pub.sync()
    conflicts = [r for r in api.requests if r[0] == "PATCH"]
    assert len(conflicts) == 3  # first write, the stale one (409), the retry
    assert stored(api)["spec"]["devices"][0]["name"] == "usb-1-1-1-0"


@pytest.mark.parametrize("code", [429, 500, 503])
def test_throttling_and_server_errors_back_off(api: FakeApiServer, client: Any,
                                               code: int) -> None:
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    api.fail_next(code, retry_after=3 if code == 429 else None)
    assert not pub.sync()
    delay = pub.retry_in()
    assert delay is not None and (delay > 2.5 if code == 429 else delay > 0)
    assert pub.sync()
    assert stored(api)["spec"]["devices"][0]["name"] == "pci-0000-00-02-0"


def test_slow_server_still_converges(api: FakeApiServer, client: Any) -> None:
    api.delay = 0.4
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    assert pub.sync()
    assert stored(api)["spec"]["pool"]["generation"] == 1


def test_too_slow_server_is_an_outage(api: FakeApiServer, client: Any) -> None:
    api.delay = 2.5  # beyond the client's 2 s timeout
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    assert not pub.sync()
    assert pub.retry_in() is not None
    api.delay = 0
    assert pub.sync()


def test_gate_off_is_said_once_and_does_not_loop(api: FakeApiServer, client: Any,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    api.gate_consumable_capacity = False
    pub = SlicePublisher(client, NODE)
    pub.set_devices([render()])
    assert pub.sync()
    assert "allowMultipleAllocations" not in stored(api)["spec"]["devices"][0]
    assert pub.gate_off
    msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert msgs == [GATE_MESSAGE]
    assert "render nodes cannot be shared" in GATE_MESSAGE
    for _ in range(3):
        pub.set_devices([render()])
        assert pub.sync()
    assert pub.writes == 1  # the dropped field is not a difference to write again
    # A real change is still written, and the message is not repeated.
    pub.set_devices([render(), plain("usb-1-1-1-0")])
    assert pub.sync() and pub.writes == 2
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == msgs
    # The gate turned on: the field sticks again.
    api.gate_consumable_capacity = True
    pub.set_devices([render()])
    assert pub.sync()
    assert stored(api)["spec"]["devices"][0]["allowMultipleAllocations"] is True
    assert not pub.gate_off


def test_invalid_devices_are_not_sent(api: FakeApiServer, client: Any,
                                      caplog: pytest.LogCaptureFixture) -> None:
    pub = SlicePublisher(client, NODE)
    pub.set_devices([{"name": "Not_A_Label"}])
    assert pub.sync()
    assert api.get_object("resourceslices", f"{NODE}-liken.sh") is None
    assert "would be invalid" in caplog.text


def test_server_refusal_is_reported_and_retried_slowly(api: FakeApiServer, client: Any,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    pub = SlicePublisher(client, NODE, validate=False)
    pub.set_devices([{"name": "x", "attributes": {"a": {"string": "y" * 70}}}])
    assert not pub.sync()
    assert "refused ResourceSlice" in caplog.text and "64" in caplog.text
    delay = pub.retry_in()
    assert delay is not None and delay > 10


def test_missing_node_is_retried(api: FakeApiServer, client: Any) -> None:
    pub = SlicePublisher(client, "node-b")
    pub.set_devices([])
    assert not pub.sync()
    api.add_node("node-b", uid="uid-b")
    time.sleep(0.01)
    assert pub.sync()
    obj = api.get_object("resourceslices", "node-b-liken.sh")
    assert obj is not None and obj["spec"].get("devices", []) == []
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-b"


class _DeletedDuringApply:
    """The real client, except that the kubelet wipes the slice, and the watch reports it,
    while our apply's answer is still on its way (the answer then describes a deleted slice)."""

    def __init__(self, client: Any, api: FakeApiServer, pub: SlicePublisher) -> None:
        self._client, self._api, self._pub = client, api, pub
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        answer = self._client.apply(*args, **kwargs)
        if self.armed:
            self.armed = False
            gone = self._api.get_object("resourceslices", f"{NODE}-liken.sh")
            assert self._api.kubelet_restart_wipe(NODE) == 1
            assert self._pub.observe("DELETED", gone) is True
        return answer


def test_a_deletion_seen_during_a_write_is_not_forgotten(api: FakeApiServer,
                                                         client: Any) -> None:
    pub = SlicePublisher(client, NODE)
    racy = _DeletedDuringApply(client, api, pub)
    pub._client = racy
    pub.set_devices([render()])
    assert pub.sync()
    racy.armed = True
    pub.set_devices([render(), plain("usb-1-1-1-0")])
    assert pub.sync()  # the write succeeded, and then the slice was deleted
    assert api.get_object("resourceslices", f"{NODE}-liken.sh") is None
    assert not pub.converged  # the deletion the watch reported is still known
    assert pub.sync()
    assert len(stored(api)["spec"]["devices"]) == 2
    assert pub.converged
