"""The loopback API server enforces what the real one does for the objects we write.

If the fake accepted what the API server refuses, every publishing test above it would prove
nothing; these tests pin the rules it must keep (resource.k8s.io/v1 and its validation, the
kubelet's slice wipe at start, fields a disabled feature gate drops, list chunking).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakeapi import FakeApiServer

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
MACHINES = "/apis/liken.sh/v1alpha1/machines"


def call(api: FakeApiServer, method: str, path: str, body: Any = None,
         ctype: str = "application/json") -> tuple[int, dict[str, Any], dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": ctype} if data else {})
    resp = conn.getresponse()
    payload = json.loads(resp.read() or b"{}")
    headers = {k.lower(): v for k, v in resp.getheaders()}
    conn.close()
    return resp.status, payload, headers


def a_slice(node: str = "n1", devices: list[dict[str, Any]] | None = None,
            generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-liken.sh"},
            "spec": {"driver": "liken.sh", "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                     "devices": devices if devices is not None else [
                         {"name": "pci-0000-00-02-0", "attributes": {"bus": {"string": "pci"}}}]}}


def test_create_get_list_by_field_selector(api: FakeApiServer) -> None:
    code, made, _ = call(api, "POST", SLICES, a_slice("n1"))
    assert code == 201
    assert made["metadata"]["generation"] == 1 and made["metadata"]["uid"]
    assert call(api, "POST", SLICES, a_slice("n2"))[0] == 201
    code, got, _ = call(api, "GET", f"{SLICES}/n1-liken.sh")
    assert code == 200 and got == made
    _, listed, _ = call(api, "GET", f"{SLICES}?fieldSelector=spec.nodeName%3Dn2")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["n2-liken.sh"]
    _, listed, _ = call(api, "GET", f"{SLICES}?fieldSelector=spec.driver%3Dother.example")
    assert listed["items"] == []
    assert call(api, "POST", SLICES, a_slice("n1"))[0] == 409  # AlreadyExists
    assert call(api, "GET", f"{SLICES}/nope")[0] == 404


def test_update_conflicts_on_stale_resource_version(api: FakeApiServer) -> None:
    _, made, _ = call(api, "POST", SLICES, a_slice())
    newer = json.loads(json.dumps(made))
    newer["spec"]["devices"].append({"name": "usb-1-2"})
    code, updated, _ = call(api, "PUT", f"{SLICES}/n1-liken.sh", newer)
    assert code == 200
    assert updated["metadata"]["generation"] == 2
    assert int(updated["metadata"]["resourceVersion"]) > int(made["metadata"]["resourceVersion"])
    stale = json.loads(json.dumps(made))
    stale["spec"]["devices"] = []
    code, status, _ = call(api, "PUT", f"{SLICES}/n1-liken.sh", stale)
    assert code == 409 and status["kind"] == "Status" and status["reason"] == "Conflict"
    # An update that changes nothing keeps resourceVersion and generation.
    code, same, _ = call(api, "PUT", f"{SLICES}/n1-liken.sh", updated)
    assert same["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]


def test_schema_is_enforced_strictly(api: FakeApiServer) -> None:
    obj = a_slice()
    obj["spec"]["devices"][0]["colour"] = "blue"  # unknown field: strict schema says no
    code, status, _ = call(api, "POST", SLICES, obj)
    assert code == 422 and "colour" in status["message"]
    obj = a_slice()
    obj["spec"]["pool"]["generation"] = "1"
    assert call(api, "POST", SLICES, obj)[0] == 422


@pytest.mark.parametrize("mutate, words", [
    (lambda s: s["spec"].update(devices=[{"name": f"d{i}"} for i in range(129)]), "128"),
    (lambda s: s["spec"]["devices"][0].update(name="Upper"), "Upper"),
    (lambda s: s["spec"]["devices"][0]["attributes"].update(long={"string": "x" * 65}), "64"),
    (lambda s: s["spec"]["devices"][0]["attributes"].update(
        two={"string": "a", "bool": True}), "two"),
    (lambda s: s["spec"]["devices"][0].update(
        attributes={f"a{i}": {"bool": True} for i in range(33)}), "32"),
    (lambda s: s["spec"].update(allNodes=True), "nodeName"),
    (lambda s: s["spec"]["devices"].append({"name": "pci-0000-00-02-0"}), "pci-0000-00-02-0"),
])
def test_api_server_limits_are_enforced(api: FakeApiServer, mutate: Any, words: str) -> None:
    obj = a_slice()
    mutate(obj)
    code, status, _ = call(api, "POST", SLICES, obj)
    assert code == 422, status
    assert status["reason"] == "Invalid" and words in status["message"]
    assert api.slices() == []


def test_immutable_fields(api: FakeApiServer) -> None:
    _, made, _ = call(api, "POST", SLICES, a_slice())
    made["spec"]["nodeName"] = "elsewhere"
    code, status, _ = call(api, "PUT", f"{SLICES}/n1-liken.sh", made)
    assert code == 422 and "immutable" in status["message"]


def test_gate_off_drops_allow_multiple_allocations(api: FakeApiServer) -> None:
    obj = a_slice(devices=[{"name": "pci-0000-00-02-0", "allowMultipleAllocations": True}])
    _, stored, _ = call(api, "POST", SLICES, obj)
    assert stored["spec"]["devices"][0]["allowMultipleAllocations"] is True
    api.gate_consumable_capacity = False
    obj["metadata"]["name"] = "n2-liken.sh"
    obj["spec"]["nodeName"] = obj["spec"]["pool"]["name"] = "n2"
    _, stored, _ = call(api, "POST", SLICES, obj)
    assert "allowMultipleAllocations" not in stored["spec"]["devices"][0]


def test_server_side_apply_owns_fields(api: FakeApiServer) -> None:
    path = f"{SLICES}/n1-liken.sh?fieldManager=liken-devices"
    apply = "application/apply-patch+yaml"
    code, made, _ = call(api, "PATCH", path, a_slice(), apply)
    assert code == 200 and made["metadata"]["generation"] == 1
    # A second manager changing a field the first owns conflicts unless it forces.
    other = a_slice(generation=7)
    code, status, _ = call(api, "PATCH", f"{SLICES}/n1-liken.sh?fieldManager=intruder",
                           other, apply)
    assert code == 409 and "liken-devices" in status["message"]
    code, forced, _ = call(api, "PATCH",
                           f"{SLICES}/n1-liken.sh?fieldManager=intruder&force=true", other, apply)
    assert code == 200 and forced["spec"]["pool"]["generation"] == 7
    # Without a field manager an apply is a bad request.
    assert call(api, "PATCH", f"{SLICES}/n1-liken.sh", a_slice(), apply)[0] == 400
    # The owner dropping a field it alone owns removes it.
    mine = a_slice(generation=8)
    mine["metadata"]["labels"] = {"a": "b"}
    _, with_label, _ = call(api, "PATCH", path + "&force=true", mine, apply)
    assert with_label["metadata"]["labels"] == {"a": "b"}
    _, without, _ = call(api, "PATCH", path + "&force=true", a_slice(generation=8), apply)
    assert "labels" not in without["metadata"]
    # Apply against a stale resourceVersion is a conflict.
    stale = a_slice(generation=9)
    stale["metadata"]["resourceVersion"] = made["metadata"]["resourceVersion"]
    assert call(api, "PATCH", path, stale, apply)[0] == 409


def test_injected_failures_and_slowness(api: FakeApiServer) -> None:
    api.fail_next(429, count=2, methods=("GET",), retry_after=1)
    code, status, headers = call(api, "GET", SLICES)
    assert code == 429 and headers["retry-after"] == "1" and status["code"] == 429
    assert call(api, "GET", SLICES)[0] == 429
    assert call(api, "GET", SLICES)[0] == 200
    api.fail_next(500, path_contains="machines")
    assert call(api, "GET", SLICES)[0] == 200
    assert call(api, "GET", MACHINES)[0] == 500
    api.delay = 0.3
    started = time.monotonic()
    call(api, "GET", SLICES)
    assert time.monotonic() - started >= 0.3


def test_outage_keeps_port_and_store(api: FakeApiServer) -> None:
    call(api, "POST", SLICES, a_slice())
    port = api.port
    api.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    api.start()
    assert api.port == port
    assert call(api, "GET", f"{SLICES}/n1-liken.sh")[0] == 200


def test_outage_ends_kept_alive_connections(api: FakeApiServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
    conn.request("GET", SLICES)
    conn.getresponse().read()
    api.stop()
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn.request("GET", SLICES)
        conn.getresponse().read()
    api.start()


def test_watch_streams_events_and_replays_from_resource_version(api: FakeApiServer) -> None:
    _, first, _ = call(api, "POST", SLICES, a_slice("n1"))
    seen: list[tuple[str, str]] = []

    def watch() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
        conn.request("GET", f"{SLICES}?watch=true&fieldSelector=spec.nodeName%3Dn1"
                            f"&resourceVersion={first['metadata']['resourceVersion']}"
                            "&timeoutSeconds=2")
        resp = conn.getresponse()
        for line in resp:
            event = json.loads(line)
            seen.append((event["type"], event["object"]["metadata"]["name"]))
        conn.close()

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(0.2)
    call(api, "POST", SLICES, a_slice("n2"))  # not selected
    api.kubelet_restart_wipe("n1")
    t.join(5)
    assert seen == [("DELETED", "n1-liken.sh")]
    # A watch without resourceVersion starts with the current objects.
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    conn.request("GET", f"{SLICES}?watch=true&timeoutSeconds=1")
    lines = [json.loads(x) for x in conn.getresponse()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [
        ("ADDED", "n2-liken.sh")]


def test_delete_with_preconditions_and_collection(api: FakeApiServer) -> None:
    _, made, _ = call(api, "POST", SLICES, a_slice("n1"))
    code, _, _ = call(api, "DELETE", f"{SLICES}/n1-liken.sh",
                      {"preconditions": {"uid": "someone-else"}})
    assert code == 409
    assert call(api, "DELETE", f"{SLICES}/n1-liken.sh",
                {"preconditions": {"uid": made["metadata"]["uid"]}})[0] == 200
    assert call(api, "DELETE", f"{SLICES}/n1-liken.sh")[0] == 404
    call(api, "POST", SLICES, a_slice("n1"))
    call(api, "POST", SLICES, a_slice("n2"))
    code, gone, _ = call(api, "DELETE", f"{SLICES}?fieldSelector=spec.nodeName%3Dn1")
    assert code == 200 and [s["metadata"]["name"] for s in gone["items"]] == ["n1-liken.sh"]
    assert [s["metadata"]["name"] for s in api.slices()] == ["n2-liken.sh"]


def test_claims_nodes_read_only(api: FakeApiServer) -> None:
    api.add_node("n1", uid="node-uid-1")
    api.add_claim("ns", "c1", uid="u1", results=[{"device": "pci-0000-00-02-0"}], node="n1")
    claims = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
    code, claim, _ = call(api, "GET", f"{claims}/c1")
    assert code == 200 and claim["metadata"]["uid"] == "u1"
    assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == "n1"
    api.remove_allocation("ns", "c1")
    assert "allocation" not in call(api, "GET", f"{claims}/c1")[1]["status"]
    api.set_claim_uid("ns", "c1", "u2")
    assert call(api, "GET", f"{claims}/c1")[1]["metadata"]["uid"] == "u2"
    api.delete_object("resourceclaims", "c1", "ns")
    assert call(api, "GET", f"{claims}/c1")[0] == 404
    assert call(api, "POST", claims, {"metadata": {"name": "x"}})[0] == 405
    assert call(api, "GET", "/api/v1/nodes/n1")[1]["metadata"]["uid"] == "node-uid-1"


def test_machine_status_subresource(api: FakeApiServer) -> None:
    api.add_machine("n1", {"modules": ["uhid"]})
    status = {"status": {"hardware": {"unclaimed": [
        {"bus": "pci", "candidates": ["snd_hda_intel"], "message": "no driver"}]},
        "conditions": [{"type": "FactsPublished", "status": "True", "reason": "FactsRead"}]},
        "spec": {"modules": ["ignored"]}}
    code, got, _ = call(api, "PATCH", f"{MACHINES}/n1/status", status,
                        "application/merge-patch+json")
    assert code == 200
    assert got["spec"] == {"modules": ["uhid"]}  # the status subresource never writes spec
    assert got["status"]["conditions"][0]["reason"] == "FactsRead"
    assert got["metadata"]["generation"] == 1  # status changes do not bump generation
    # The main resource ignores status.
    _, main, _ = call(api, "PATCH", f"{MACHINES}/n1", {"status": {"hardware": None},
                                                       "spec": {"modules": ["uhid", "btusb"]}},
                      "application/merge-patch+json")
    assert main["status"]["hardware"]["unclaimed"][0]["candidates"] == ["snd_hda_intel"]
    assert main["metadata"]["generation"] == 2
    # The CRD's schema is enforced.
    bad = {"status": {"conditions": [{"type": "FactsPublished", "status": "Maybe"}]}}
    code, err, _ = call(api, "PATCH", f"{MACHINES}/n1/status", bad, "application/merge-patch+json")
    assert code == 422 and "Maybe" in err["message"]
    bad_spec = {"spec": {"serio": [{"protocol": "lirc", "vendor": "2548", "product": "1002"}]}}
    assert call(api, "PATCH", f"{MACHINES}/n1", bad_spec, "application/merge-patch+json")[0] == 422
    # Apply on the status subresource.
    code, applied, _ = call(api, "PATCH", f"{MACHINES}/n1/status?fieldManager=liken-devices",
                            {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                             "metadata": {"name": "n1"},
                             "status": {"modules": [{"name": "uhid", "state": "Loaded"}]}},
                            "application/apply-patch+yaml")
    assert code == 200 and applied["status"]["modules"][0]["state"] == "Loaded"


def test_kubeconfig_works_with_lightkube(api: FakeApiServer, tmp_path: Path) -> None:
    from lightkube import Client, KubeConfig
    from lightkube.core.exceptions import ApiError
    from lightkube.generic_resource import create_global_resource

    slice_res = create_global_resource("resource.k8s.io", "v1", "ResourceSlice", "resourceslices")
    client = Client(KubeConfig.from_file(api.write_kubeconfig(tmp_path / "kubeconfig")))
    created = client.create(slice_res.from_dict(a_slice()))
    assert created["spec"]["nodeName"] == "n1"
    with pytest.raises(ApiError) as info:
        client.create(slice_res.from_dict(a_slice()))
    assert info.value.status.code == 409
    client.close()


def test_apply_with_resource_version_does_not_create(api: FakeApiServer) -> None:
    obj = a_slice()
    obj["metadata"]["resourceVersion"] = "1234"
    code, status, _ = call(api, "PATCH", f"{SLICES}/n1-liken.sh?fieldManager=m", obj,
                           "application/apply-patch+yaml")
    assert code == 404 and status["reason"] == "NotFound"
    assert api.slices() == []


def _page(api: FakeApiServer, query: str) -> tuple[int, dict[str, Any]]:
    status, body, _ = call(api, "GET", f"{SLICES}?{query}")
    return status, body


def test_list_pages_with_limit_and_continue(api: FakeApiServer) -> None:
    for i in range(7):
        api.put_object("resourceslices", a_slice(f"n{i}"))
    status, first = _page(api, "limit=3")
    assert status == 200
    assert [o["metadata"]["name"] for o in first["items"]] == \
        ["n0-liken.sh", "n1-liken.sh", "n2-liken.sh"]
    assert first["metadata"]["remainingItemCount"] == 4
    token = first["metadata"]["continue"]
    # Changes after the first page do not show in later pages: they read the first page's
    # resourceVersion, as a consistent list does.
    api.delete_object("resourceslices", "n4-liken.sh")
    api.put_object("resourceslices", a_slice("n9"))
    changed = api.get_object("resourceslices", "n5-liken.sh")
    assert changed is not None
    changed["spec"]["pool"]["generation"] = 7
    api.put_object("resourceslices", changed)
    names, pages = [], 0
    while token:
        status, page = _page(api, f"limit=3&continue={token}")
        assert status == 200 and page["metadata"]["resourceVersion"] == \
            first["metadata"]["resourceVersion"]
        names += [o["metadata"]["name"] for o in page["items"]]
        n5 = [o for o in page["items"] if o["metadata"]["name"] == "n5-liken.sh"]
        assert all(o["spec"]["pool"]["generation"] == 1 for o in n5)
        token = page["metadata"].get("continue")
        pages += 1
    assert names == ["n3-liken.sh", "n4-liken.sh", "n5-liken.sh", "n6-liken.sh"]
    assert pages == 2
    # A fresh list sees the changes; a selector drops remainingItemCount.
    status, fresh = _page(api, "limit=100")
    assert "n9-liken.sh" in [o["metadata"]["name"] for o in fresh["items"]]
    assert "continue" not in fresh["metadata"]
    status, sel = _page(api, "limit=1&fieldSelector=spec.driver%3Dliken.sh")
    assert "continue" in sel["metadata"] and "remainingItemCount" not in sel["metadata"]


def test_list_paging_errors(api: FakeApiServer) -> None:
    for i in range(3):
        api.put_object("resourceslices", a_slice(f"n{i}"))
    assert _page(api, "limit=-1")[0] == 400
    assert _page(api, "limit=ten")[0] == 400
    assert _page(api, "continue=bm90LWEtdG9rZW4")[0] == 400
    status, first = _page(api, "limit=1")
    token = first["metadata"]["continue"]
    assert _page(api, f"limit=1&continue={token}&resourceVersion=5")[0] == 400
    # Enough history later, the token's resourceVersion is compacted away: 410 Expired.
    for i in range(2100):
        api.put_object("nodes", {"metadata": {"name": f"x{i % 5}"}})
    api.delete_object("resourceslices", "n2-liken.sh")
    status, body = _page(api, f"limit=1&continue={token}")
    assert status == 410 and body["reason"] == "Expired"


def test_lightkube_follows_pages(api: FakeApiServer, tmp_path: Path) -> None:
    from liken_devices.kube.client import Resources, make_client

    for i in range(11):
        api.put_object("resourceslices", a_slice(f"n{i}"))
    client = make_client(api.write_kubeconfig(tmp_path / "kc"), timeout=5.0)
    api.verbs.clear()
    got = [o["metadata"]["name"] for o in client.list(Resources.slice(), chunk_size=4)]
    assert len(got) == 11 and len(set(got)) == 11
    assert [v for v in api.verbs] == [("list", "resourceslices")] * 3
    client.close()
