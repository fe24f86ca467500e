"""Everything the policy reads besides sysfs, as plain values: facts, the Machine's spec, catalogs.

rules: hardware.storage-role, machine.object, machine.catalogs. Storage roles come from init's
facts tree (``storage/<role>/device``); the Machine gives ``spec.modules`` and ``spec.serio``; the
module and ID catalogs name the hardware and the modules that could drive it. :class:`Context` holds
them for one policy run; reading them from files is :mod:`.sources`' job, and checking a Machine
document :mod:`.machinefile`'s.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import InputError as InputError  # re-exported: its home for the layers above
from .catalogs import Catalogs
from .model import Facts, MachineSpec


class Context(NamedTuple):
    """The non-sysfs inputs of one policy run (by default: no role, no Machine, no catalogs)."""

    facts: Facts = Facts(frozenset())
    machine: MachineSpec = MachineSpec()
    catalogs: Catalogs = Catalogs()
