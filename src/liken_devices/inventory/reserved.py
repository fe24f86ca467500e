"""What the machine holds: the disks that back its storage roles and the reserved nodes.

rules: hardware.storage-role, hardware.facts-fail-closed. A device whose subtree holds a storage
role belongs to the machine, and when the facts cannot be read no disk is offered at all.
rules: hardware.reserved-nodes, hardware.watchdogs. The console, the system clock ``/dev/rtc0``,
the TPM's nodes, a serio-attached tty and the watchdogs are never delivered: they are dropped
from a device's deliveries (docs/inventory.md, "Where each rule lives": "only reserved nodes").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from ..sysfs.model import DevNode, SysDevice
from .model import Facts

_TPM = re.compile(r"tpm(rm)?[0-9]+")  # fullmatch
# The kernel's watchdog core names its nodes /dev/watchdog (the legacy misc node of the first
# watchdog) and /dev/watchdogN (Documentation/watchdog/watchdog-api.rst).
_WATCHDOG = re.compile(r"watchdog[0-9]*")  # fullmatch


def reserved_kind(node: DevNode, console: Collection[str],
                  serio_ttys: Collection[str]) -> str | None:
    """The kinds of node the machine holds (rules: hardware.reserved-nodes, hardware.watchdogs):
    the console, rtc0, the TPM, a serio-attached tty, and the watchdogs (a process that opens a
    watchdog and stops writing to it resets the node)."""
    name = node.name
    if name in console:
        return "the console"
    if name == "rtc0":
        return "the system clock"
    if _TPM.fullmatch(name.rsplit("/", 1)[-1]):
        return "the TPM"
    if name in serio_ttys:
        return "a serio-attached serial line"
    if _WATCHDOG.fullmatch(name):
        return "a watchdog (it resets the machine)"
    return None


def block_names(node: DevNode) -> tuple[str, str]:
    """The names a block node goes by in the facts and in sysfs: the last component of its /dev
    name (``mapper/dm-3`` is ``dm-3``), and the kernel's name, its /dev name with each ``/``
    spelled ``!``: the kernel names a device ``cciss!c0d0`` (its sysfs directory, a ``slaves``
    entry, the facts) and makes its node /dev/cciss/c0d0 (``device_get_devnode`` turns ``!``
    into ``/``), so its partition ``cciss!c0d0p1`` is /dev/cciss/c0d0p1, whose last component
    alone would name no role. rules: hardware.storage-role"""
    return node.name.rsplit("/", 1)[-1], node.name.replace("/", "!")


def role_partitions(devs: Mapping[str, SysDevice], facts: Facts) -> frozenset[str] | None:
    """Block device names that back a storage role, following dm/md slaves down.

    None when the facts cannot be read: then no block device may be published.

    rules: hardware.storage-role, hardware.facts-fail-closed
    """
    parts = facts.role_partitions
    if parts is None:
        return None
    by_name = {name: d for d in devs.values() if d.node is not None and d.node.type == "b"
               for name in block_names(d.node)}
    found: set[str] = set()
    todo = list(parts)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        dev = by_name.get(name)
        if dev is not None:
            todo.extend(dev.slaves)
    return frozenset(found)


# The console, rtc0, the TPM and a serio-attached tty are kept from every claim by
# reserved_kind (rules: hardware.reserved-nodes).
def backing(nodes: list[SysDevice], roles: frozenset[str]) -> list[str]:
    """The block nodes among ``nodes`` that back a storage role, sorted."""
    return sorted(n.node.name for n in nodes
                  if n.node and n.node.type == "b" and not roles.isdisjoint(block_names(n.node)))
