"""The options of ``liken-media scan`` and ``run``: what :mod:`.cli` reads from the command
line, once, and :mod:`.scan` and :mod:`.run` run with (immutable and typed, a ``NamedTuple`` as
the inventory's records; nothing reads the parsed options again).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ..inventory.sources import Sources


class ScanOptions(NamedTuple):
    """``liken-media scan``."""

    node: str
    sources: Sources  # checked
    dev: Path  # where the render nodes are opened
    timeout: float  # seconds one render node's query may take
    output: str  # yaml, json or table


class RunOptions(NamedTuple):
    """``liken-media run``."""

    node: str
    sources: Sources  # checked
    dev: Path
    timeout: float
    kubeconfig: Path | None
    metrics_port: int | None  # None: no endpoint
    metrics_addr: str | None  # None: $POD_IP, else 127.0.0.1
    pod_name: str | None  # this pod, evicted when liken publishes a render node it lacks
    pod_namespace: str | None
