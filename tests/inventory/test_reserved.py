"""The machine's own nodes and disks, through the whole policy (inventory/reserved.py): the
console (tty0 followed), /dev/rtc0, the TPM, the watchdogs, and a storage role on a mapped device.

rules: hardware.reserved-nodes, hardware.watchdogs, hardware.storage-role

Trees are built on disk with the builder and read through the real sysfs reader; the case by case
answers are in test_reserved_rules.py.
"""

from __future__ import annotations

from pathlib import Path

from liken_devices.inventory import Context, Facts
from liken_devices.inventory.model import Reason
from liken_devices.inventory.names import device_name
from liken_devices.inventory.policy import build_inventory
from liken_devices.sysfs.model import DevNode, Snapshot, SysDevice
from liken_devices.sysfs.reader import read_sysfs
from tests.support.sysfs_builder import SysfsBuilder

from .support import Scan, names, paths, reason


def test_storage_role_on_dm_follows_slaves(tmp_path: Path) -> None:
    """What a node publishes, 3: a role on a mapped device reaches the partition beneath it."""
    disk = SysDevice("/devices/pci0000:00/0000:00:17.0/ata1/host0/block/sda", "block", None, {},
                     node=DevNode("sda", "b", 8, 0))
    part = SysDevice(disk.path + "/sda2", "block", None, {}, node=DevNode("sda2", "b", 8, 2))
    dm = SysDevice("/devices/virtual/block/dm-0", "block", None, {},
                   node=DevNode("dm-0", "b", 253, 0), slaves=("sda2",))
    ahci = SysDevice("/devices/pci0000:00/0000:00:17.0", "pci", "ahci", {"PCI_CLASS": "10601"})
    snap = Snapshot({d.path: d for d in (disk, part, dm, ahci)})
    inv = build_inventory(snap, Context(Facts(frozenset({"dm-0"}))))
    assert reason(inv, "0000:00:17.0") == Reason.STORAGE_ROLE


def test_console_is_reserved_and_tty0_is_followed(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: the console (class/tty/console/active, tty0 followed) is held."""
    b.console("tty0", "ttyS0", tty0_active="tty1")
    serial = b.board("platform", "serial8250", driver="serial8250")
    b.node(serial, "tty", "ttyS0", 4, 64, subdir="tty")
    b.node(serial, "tty", "ttyS1", 4, 65, subdir="tty")
    inv = scan()
    assert paths(inv, "platform-serial8250") == ["/dev/ttyS1"]
    assert read_sysfs(b.root).console == ("tty0", "tty1", "ttyS0")


def test_rtc0_only_device_does_not_appear(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: /dev/rtc0 is the clock init writes; a device with only it is gone."""
    rtc = b.board("pnp", "00:04", driver="rtc_cmos")
    b.node(rtc, "rtc", "rtc0", 250, 0, subdir="rtc")
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "00:04") == Reason.ONLY_RESERVED


def test_tpm_nodes_are_never_delivered(b: SysfsBuilder, scan: Scan) -> None:
    """What a node publishes: /dev/tpm* and /dev/tpmrm* give the TPM itself to any process."""
    tpm = b.board("platform", "MSFT0101:00", driver="tpm_crb")
    b.node(tpm, "tpm", "tpm0", 10, 224, subdir="tpm")
    b.node(tpm, "tpmrm", "tpmrm0", 253, 65536, subdir="tpmrm")
    inv = scan()
    assert names(inv) == []
    assert reason(inv, "MSFT0101:00") == Reason.ONLY_RESERVED
    assert device_name("platform", "MSFT0101:00") == "platform-msft0101-00"


def test_watchdogs_are_the_machines(b: SysfsBuilder, scan: Scan) -> None:
    """rules: hardware.watchdogs. /dev/watchdog* is reserved like the console; a
    device whose only nodes are watchdogs is not published, another keeps its other nodes."""
    tco = b.board("platform", "iTCO_wdt", driver="iTCO_wdt")
    b.node(tco, "watchdog", "watchdog0", 247, 0, subdir="watchdog")
    b.node(tco, "misc", "watchdog", 10, 130, subdir="misc")
    ipmi = b.pci("0000:00:1f.4", driver="ipmi_si", cls=0x0C0700)
    b.node(ipmi, "watchdog", "watchdog1", 247, 1, subdir="watchdog")
    b.node(ipmi, "ipmi", "ipmi0", 239, 0, subdir="ipmi")
    inv = scan()
    assert names(inv) == ["pci-0000-00-1f-4"]
    assert reason(inv, "iTCO_wdt") == Reason.ONLY_RESERVED
    assert paths(inv, "pci-0000-00-1f-4") == ["/dev/ipmi0"]


def test_reserved_node_dropped_rest_published(b: SysfsBuilder, scan: Scan) -> None:
    """rules: hardware.reserved-nodes. Dropped; the device keeps the rest of its own nodes."""
    lpc = b.pci("0000:00:16.3", driver="serial", cls=0x070002)
    b.node(lpc, "tty", "ttyS4", 4, 68, subdir="tty")
    b.node(lpc, "tty", "ttyS5", 4, 69, subdir="tty")
    b.console("ttyS4")
    inv = scan()
    assert paths(inv, "pci-0000-00-16-3") == ["/dev/ttyS5"]

