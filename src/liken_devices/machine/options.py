"""The options of ``liken-devices machine apply``: what :mod:`.cli` reads from the command line,
once, and :mod:`.apply` runs with (immutable and typed, a ``NamedTuple`` as the inventory's
records; nothing reads the parsed options again).
"""

from __future__ import annotations

from typing import NamedTuple

from ..cliargs import Inputs


class ApplyOptions(NamedTuple):
    """``machine apply``."""

    inputs: Inputs  # the machine read; refused unless it is this host or the run is dry
    dry_run: bool
    output: str  # yaml or json
