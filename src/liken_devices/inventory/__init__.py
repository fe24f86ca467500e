"""The policy: which hardware is published as which device, and why the rest is not.

``build_inventory(snapshot, context)`` is a pure function from what a walk saw (and the facts,
the Machine's spec and the module/ID catalogs) to the :class:`~.model.Inventory`: the slice's
devices, what each delivers, an outcome for every considered piece of hardware, and the
unclaimed hardware. Every rule cites its statement in ``docs/rules/`` by the rule's id.
"""

from .catalogs import Catalogs
from .context import Context
from .limits import MAX_DEVICES
from .model import Facts, Inventory, MachineSpec, Outcome, PublishedDevice, SerioEntry, Unclaimed
from .policy import build_inventory
from .sources import Sources

__all__ = [
    "MAX_DEVICES",
    "Catalogs",
    "Context",
    "Facts",
    "Inventory",
    "MachineSpec",
    "Outcome",
    "PublishedDevice",
    "SerioEntry",
    "Sources",
    "Unclaimed",
    "build_inventory",
]
