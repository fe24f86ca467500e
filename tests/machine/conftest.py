"""The machine side's ptys: each test's ptys are closed when it ends."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tests.machine.test_machine_serio import Pty, new_pty


@pytest.fixture
def ptys() -> Iterator[list[Pty]]:
    made: list[Pty] = []
    yield made
    for p in made:
        for fd in (p.master, p.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def pty(ptys: list[Pty]) -> Pty:
    """One pty standing in for an adapter's ttyACM."""
    return new_pty(ptys)
