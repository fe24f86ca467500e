"""Conditions 1 to 3 of what a node publishes, for one piece of hardware.

rules: hardware.driver-bound, hardware.has-nodes, hardware.storage-role.

A driver is bound (else the hardware is unclaimed), a claim on it supplies nodes (after the
reserved ones are dropped and framebuffers withheld), and the machine does not depend on it (no
disk backing a storage role; no disk at all while the facts cannot be read). What passes is
split by kind of node (rules: sharing.one-device-per-kind) into candidates of the slice.
"""

from __future__ import annotations

from ..sysfs.model import DevNode, Snapshot, SysDevice
from .hardware import Hardware
from .ledger import Candidate, Ledger
from .model import Facts, Reason
from .network import NEVER_DELIVERED_CLASSES, host_network_node, is_network_card
from .reserved import backing, reserved_kind, role_partitions
from .sharing import split


class NodePublisher:
    """Publishes a piece of hardware's own nodes, for every rule module of one walk."""

    def __init__(self, ledger: Ledger, snap: Snapshot, facts: Facts) -> None:
        self.ledger = ledger
        self.console = frozenset(snap.console)
        self.bluetooth = [d.path for d in snap.devices.values() if d.subsystem == "bluetooth"]
        self.roles = role_partitions(snap.devices, facts)
        self.facts_error = facts.error or ""

    def if_driven(self, hw: Hardware) -> None:
        """Condition 1: hardware with no driver supplies nothing; it is unclaimed instead."""
        if not hw.dev.driver:
            self.ledger.outcome(hw, Reason.NO_DRIVER)
            self.ledger.add_unclaimed(hw)
            return
        self.nodes(hw)

    def deliverable(self, hw: Hardware, serio_ttys: frozenset[str]) -> tuple[
            list[SysDevice], list[str], list[str]]:
        """The nodes a claim may receive, the reserved ones dropped, and the kinds withheld."""
        keep: list[SysDevice] = []
        reserved: list[str] = []
        withheld: list[str] = []
        card = is_network_card(hw)
        for n in hw.nodes:
            assert n.node is not None
            if any(n.path.startswith(b + "/") for b in self.bluetooth):
                continue  # the walk stops at a bluetooth subtree (rules: bluetooth.walk-stops)
            why = reserved_kind(n.node, self.console, serio_ttys)
            if why:
                reserved.append(f"{n.node.path} ({why})")
            elif n.subsystem == "graphics":
                withheld.append("a framebuffer")  # never delivered (rules: sharing.framebuffers)
            elif n.subsystem in NEVER_DELIVERED_CLASSES:
                withheld.append("a usbmon node")  # it reads every packet on a USB bus
            elif card and host_network_node(n):
                withheld.append("the host network's")  # PTP clocks and RDMA nodes
            else:
                keep.append(n)
        return keep, reserved, withheld

    def machine_holds_disk(self, hw: Hardware) -> bool:
        """Condition 3: a disk belongs to the machine or to a claim, never both; unreadable
        facts mean no disk at all. Records the outcome when the machine holds it."""
        if not any(n.node and n.node.type == "b" for n in hw.nodes):
            return False
        if self.roles is None:
            self.ledger.outcome(hw, Reason.FACTS_UNREADABLE, self.facts_error)
            return True
        roles = backing(hw.nodes, self.roles)
        if roles:
            self.ledger.outcome(hw, Reason.STORAGE_ROLE,
                                "backs a storage role: " + ", ".join(roles))
            return True
        return False

    def nodes(self, hw: Hardware, *, usbfs: DevNode | None = None,
              serio_ttys: frozenset[str] = frozenset()) -> None:
        """Conditions 2 and 3, then one candidate per kind of node, each with the usbfs node of
        an interface's USB device; usbfs alone keeps nothing in the slice.

        rules: usb.usbfs-per-interface, usb.usbfs-alone
        """
        if self.machine_holds_disk(hw):
            return
        keep, reserved, withheld = self.deliverable(hw, serio_ttys)
        serial_line = any(n.node and n.node.name in serio_ttys for n in hw.nodes)
        if not keep:
            self._nothing_left(hw, serial_line, reserved, withheld)
            return
        base = self.ledger.attributes(hw)
        published: list[Candidate] = []
        parts = split(keep, serial_line)
        for s in parts.devices:
            attrs = dict(base)
            attrs.update(s.extra)
            # The shared render half delivers its render node only: usbfs has no arbitration
            # contract, so it never reaches a device several claims hold.
            # rules: sharing.usb-render-no-usbfs
            extra_usbfs = (usbfs,) if usbfs is not None and not s.shareable else ()
            published.append(self.ledger.candidate(hw, s.suffix, s.kind,
                                                   tuple(s.nodes) + extra_usbfs, attrs,
                                                   s.shareable, why=s.why))
        # A GPU's split always publishes its DRM node, so something is left beside what is left
        # out (rules: sharing.gpu-unnamed-kind).
        said = []
        if reserved:
            said.append("dropped " + "; ".join(reserved))
        if parts.left_out:
            said.append("left out " + "; ".join(parts.left_out))
        self.ledger.outcome(hw, None, "; ".join(said), published)

    def _nothing_left(self, hw: Hardware, serial_line: bool, reserved: list[str],
                      withheld: list[str]) -> None:
        if serial_line:
            self.ledger.outcome(hw, Reason.ONLY_RESERVED, "serial line reserved by spec.serio; "
                                "publishes -cec and -input once attached")
        elif reserved:
            self.ledger.outcome(hw, Reason.ONLY_RESERVED, "; ".join(reserved))
        elif is_network_card(hw):
            # rules: hardware.network-cards (on every bus: a board's port says which bus)
            where = f"a network device on the {hw.bus} bus: " if hw.kind == "board" else ""
            self.ledger.outcome(hw, Reason.NETWORK_CARD, f"{where}its nodes (PTP clocks, RDMA) "
                                "serve the host's network; it has nothing to give a pod")
        elif withheld:
            self.ledger.outcome(hw, Reason.ONLY_WITHHELD, "only " + ", ".join(sorted(set(withheld)))
                                + ", which is never delivered")
        else:
            self.ledger.outcome(hw, Reason.NO_NODE)
