"""Fuzz: any command line of the views (scan, deliveries, explain, report) exits 0 or 2 with one
line, never a traceback, within a memory limit and a deadline (README, "Fuzzing")."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hostile import assert_fails_closed, examples, run_cli
from tests.support.sysfs_builder import SysfsBuilder

pytestmark = pytest.mark.fuzz

OPTIONS = ["--sysfs", "--recording", "--facts", "--machine", "--modules-dir", "--hwdata-dir",
           "--node", "-o", "--output", "-v", "--help", "--version", "--nope", "--"]
VALUES = st.one_of(st.text(max_size=20), st.sampled_from(
    ["/dev/zero", "/dev/null", "/proc/self/mem", "/", ".", "..", "/sys", "yaml", "json", "table",
     "text", "node-1", "Node_1", "-", "--sysfs", "\u2028", "x" * 300, "{tree}", "{tree}/dev"]))


@settings(max_examples=examples(12), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["scan", "deliveries", "explain", "report", "bogus", ""]),
       st.lists(st.tuples(st.sampled_from(OPTIONS), VALUES), max_size=5))
def test_any_command_line_fails_closed(command: str, options: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = SysfsBuilder(Path(tmp) / "sys")
        b.gpu()
        argv = [command] if command else []
        # Defaults that keep the run off this machine's real paths unless the options say so.
        argv += ["--sysfs", str(b.root), "--facts", tmp, "--modules-dir", tmp,
                 "--hwdata-dir", tmp, "--node", "n"]
        for option, value in options:
            argv += [option, value.replace("{tree}", str(b.root))]
        out = run_cli(argv, memory=512 << 20, deadline=60)
        assert_fails_closed(out)
