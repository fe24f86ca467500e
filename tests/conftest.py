"""Fixtures shared across the suite: the loopback API server and a client for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from liken_devices.kube.client import make_client
from tests.support.fakeapi import FakeApiServer


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
