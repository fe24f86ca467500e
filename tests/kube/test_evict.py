"""PodEvictor against the loopback API server's Eviction API: accepted, refused by a disruption
budget (429, retried later, said once), a pod already gone; and the server checks the object."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

import pytest

from liken_devices.kube.evict import PodEvictor
from tests.support.fakeapi import FakeApiServer

NS = "liken-system"
POD = "media-capabilities-x7k2p"


def test_an_eviction_removes_the_pod(api: FakeApiServer, client: Any) -> None:
    api.add_pod(NS, POD)
    ev = PodEvictor(client, NS, POD)
    assert not ev.due()  # nothing asked yet
    ev.request()
    assert ev.due()
    assert ev.attempt()
    assert ev.done and not ev.due()
    assert api.evictions == [(NS, POD)]
    assert api.get_object("pods", POD, NS) is None
    assert ("create", "pods/eviction") in api.verbs


def test_a_disruption_budget_is_honoured_and_said_once(api: FakeApiServer, client: Any,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="liken_devices.kube")
    api.add_pod(NS, POD)
    api.evictions_blocked = 3
    ev = PodEvictor(client, NS, POD)
    ev.request()
    delays = []
    for _ in range(3):
        assert not ev.attempt()
        delay = ev.retry_in()
        assert delay is not None and delay > 0
        delays.append(delay)
        assert not ev.done and api.get_object("pods", POD, NS) is not None
    assert delays[-1] > delays[0]  # backing off
    refusals = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(refusals) == 1 and "disruption budget" in refusals[0]
    assert ev.attempt()
    assert api.evictions == [(NS, POD)]
    assert any("recovered" in r.getMessage() for r in caplog.records)


def test_a_pod_already_gone_is_done(api: FakeApiServer, client: Any) -> None:
    ev = PodEvictor(client, NS, "gone")
    ev.request()
    assert ev.attempt() and ev.done
    assert api.evictions == []


def _post(api: FakeApiServer, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(f"{api.url}/api/v1/namespaces/{NS}/pods/{name}/eviction",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_server_checks_the_eviction_object(api: FakeApiServer) -> None:
    api.add_pod(NS, POD)
    good = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": POD, "namespace": NS}}
    code, status = _post(api, POD, {**good, "metadata": {"name": "other", "namespace": NS}})
    assert code == 400 and "does not match" in status["message"]
    code, status = _post(api, POD, {**good, "deleteOptions": {"gracePeriodSeconds": "soon"}})
    assert code == 422 and "gracePeriodSeconds" in status["message"]
    code, status = _post(api, POD, {**good, "apiVersion": "policy/v1beta1"})
    assert code == 422 and "apiVersion" in status["message"]
    assert api.get_object("pods", POD, NS) is not None  # nothing was evicted by bad requests
    code, _ = _post(api, POD, good)
    assert code == 201 and api.get_object("pods", POD, NS) is None
