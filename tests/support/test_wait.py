"""The wait helper (tests/support/wait.py): it returns what satisfied it, and a wait that runs
out fails naming what it waited for."""

from __future__ import annotations

import time

import pytest

from tests.support.wait import wait_until


def test_returns_the_first_truthy_value() -> None:
    answers = iter([None, 0, [], "ready"])
    assert wait_until(lambda: next(answers), 5, "the fourth answer", every=0) == "ready"


def test_a_wait_that_runs_out_names_what_it_waited_for() -> None:
    asked: list[float] = []

    def why() -> str:
        asked.append(time.monotonic())
        return "the slice n1-liken.sh"

    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"^waited 0.2 s for the slice n1-liken.sh$"):
        wait_until(lambda: None, 0.2, why)
    assert len(asked) == 1 and asked[0] - start >= 0.2  # asked once, when the time ran out
