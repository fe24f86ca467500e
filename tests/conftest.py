"""Fixtures shared across the suite: the loopback API server and a client for it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from liken_devices.kube.client import make_client
from tests.support.fakeapi import FakeApiServer


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/cluster is a tier of its own (./tasks e2e; ./tasks test runs it after the rest):
    it needs the real cluster, and one pytest session that owns it."""
    if collection_path == Path(__file__).parent / "cluster" and \
            not os.environ.get("LIKEN_CLUSTER_TIER"):
        return True
    return None


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    """A fresh loopback API server (tests/support/fakeapi.py), stopped afterwards."""
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(api: FakeApiServer, tmp_path: Path) -> Iterator[Any]:
    """The project's own client (liken_devices.kube) against ``api``."""
    c = make_client(api.write_kubeconfig(tmp_path / "kubeconfig"), timeout=2.0)
    yield c
    c.close()
