"""The options of ``liken-devices plugin`` and ``claims``, and the seamless-upgrade mode that
``run`` shares: what :mod:`.cli` reads from the command line, once, and the commands run with.

Immutable and typed (``NamedTuple``, as the inventory's records: no dataclass machinery at a
parser's start-up, docs/performance.md, "Start-up"); nothing reads the parsed options again.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ..inventory.sources import Sources


class PluginDirs(NamedTuple):
    """Where the plugin writes: the claims' CDI specs, its state, its sockets."""

    cdi_dir: Path
    state_dir: Path
    plugin_dir: Path  # holds dra.sock
    registry_dir: Path  # the kubelet's plugin registry


class Upgrade(NamedTuple):
    """``--seamless-upgrade`` and the pod UID that names this instance's sockets (None outside
    the mode). The command line decides it; the node's kubelet can only turn it off
    (:func:`.upgrade.surge_or_plain`: a new value, the options stay as they were read)."""

    seamless: bool
    pod_uid: str | None

    @classmethod
    def plain(cls) -> Upgrade:
        """A plain single instance: sockets dra.sock and <driver>-reg.sock."""
        return cls(seamless=False, pod_uid=None)


class PluginOptions(NamedTuple):
    """``liken-devices plugin``."""

    node: str
    sources: Sources  # checked: a missing --sysfs/--recording was the operator's error
    kubeconfig: Path | None
    api_timeout: float
    dirs: PluginDirs
    upgrade: Upgrade


class ClaimsOptions(NamedTuple):
    """``liken-devices claims``."""

    sources: Sources
    state_dir: Path
    output: str  # table, json or yaml
