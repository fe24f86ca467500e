"""The options of ``claim-for``, ``match`` and ``fleet`` (and ``kubectl liken``'s): what
:mod:`.cli` reads from the command line, once, and :mod:`.commands` and :mod:`.cluster` run
with (immutable and typed, a ``NamedTuple`` as the inventory's records; nothing reads the parsed
options again).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ..cliargs import Inputs


class ClusterRead(NamedTuple):
    """How the cluster is read: its kubeconfig (None: kubectl's choice), and the list calls'
    page size and budget."""

    kubeconfig: Path | None
    page_size: int
    timeout: float  # seconds for every list call together


class DeviceSource(NamedTuple):
    """Where ``claim-for``'s and ``match``'s devices come from: ``--slices FILE``, the cluster,
    else the local walk (the shared inputs)."""

    slices: Path | None
    cluster: bool  # --kubeconfig, or kubectl liken's default when no local source is named
    read: ClusterRead


class ClaimForOptions(NamedTuple):
    """``claim-for``."""

    inputs: Inputs
    source: DeviceSource
    device: str
    any_of_kind: bool  # --any
    by_address: bool
    namespace: str
    extended_resource: str | None


class MatchOptions(NamedTuple):
    """``match``."""

    inputs: Inputs
    source: DeviceSource
    filenames: tuple[Path, ...]  # -f, in order ("-": standard input)
    output: str  # text, json or yaml
    details: bool


class FleetOptions(NamedTuple):
    """``fleet``."""

    read: ClusterRead
    nodes: tuple[str, ...]  # --node, repeated: only these
    attributes: tuple[str, ...]  # --attribute NAME=VALUE, repeated: all must hold
    selector: str | None  # --selector CEL
    output: str  # table, wide, json or yaml
