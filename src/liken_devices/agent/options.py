"""The options of ``liken-devices run``: what :mod:`.cli` reads from the command line, once, and
:mod:`.run` assembles the agent from.

Immutable and typed (``NamedTuple``, as the inventory's records: no dataclass machinery at a
parser's start-up, docs/performance.md, "Start-up"); nothing reads the parsed options again.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ..inventory.sources import Sources
from ..plugin.options import PluginDirs, Upgrade


class RunOptions(NamedTuple):
    """``liken-devices run``."""

    node: str
    sources: Sources  # checked: a missing --sysfs/--recording was the operator's error
    kubeconfig: Path | None
    no_api: bool  # --no-api: offline, the Machine's spec from --machine
    api_timeout: float
    metrics_port: int | None  # None: no endpoint
    metrics_addr: str | None  # None: $POD_IP, else 127.0.0.1
    probe_socket: Path | None
    console: Path
    slice_out: Path | None
    status_out: Path | None
    plugin: bool  # not --no-plugin
    machine_side: bool  # not --no-machine-side
    quiet_seconds: float | None  # None: the agent's own
    dirs: PluginDirs
    upgrade: Upgrade  # as the command line said; the kubelet may turn it off (run.py)
