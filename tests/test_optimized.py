"""The node agent's DaemonSet runs Python with ``PYTHONOPTIMIZE=2`` (docstrings and asserts
dropped, for memory): every command must work so, its ``--help`` included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.sysfs_builder import SysfsBuilder

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONOPTIMIZE="2", PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


def test_the_daemonset_sets_it() -> None:
    ds = yaml.safe_load((REPO / "deploy/liken-devices/daemonset.yaml").read_text())
    [container] = [c for c in ds["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "liken-devices"]
    assert {"name": "PYTHONOPTIMIZE", "value": "2"} in container["env"]


@pytest.mark.parametrize("command", [
    ("-m", "liken_devices.cli", "--help"),
    ("-m", "liken_devices.cli", "run", "--help"),
    ("-m", "liken_devices.cli", "plugin", "--help"),
    ("-m", "liken_devices.cli", "machine", "apply", "--help"),
    ("-m", "liken_devices.media.cli", "--help"),
])
def test_help_without_docstrings(command: tuple[str, ...]) -> None:
    out = _run(*command)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout


def test_scan_without_docstrings_is_the_same_slice(tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path / "sys")
    b.gpu()
    args = ("-m", "liken_devices.cli", "scan", "-o", "json", "--node", "n",
            "--sysfs", str(tmp_path / "sys"), "--facts", str(tmp_path / "facts"))
    optimized = _run(*args)
    plain = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO / "src")), timeout=120,
                           check=False)
    assert optimized.returncode == plain.returncode == 0, optimized.stderr
    assert optimized.stdout == plain.stdout and '"pci-0000-00-02-0"' in plain.stdout
