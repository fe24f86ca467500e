"""What a walk records besides the slice (inventory/ledger.py): hardware no driver drives, with
the modules that could, until one is declared and the hardware is published.

rules: machine.unclaimed, machine.declare-module

Trees are built on disk with the builder and read through the real sysfs reader.
"""

from __future__ import annotations

from liken_devices.inventory.catalogs import Catalogs, ModuleCatalog
from tests.support.sysfs_builder import SysfsBuilder

from .support import Scan, names


def test_unclaimed_lists_candidate_modules_without_builtins(b: SysfsBuilder, scan: Scan) -> None:
    """Hardware that is not published: unclaimed, with the modules that could drive it."""
    b.pci("0000:00:1f.3", vendor="8086", device="51c8", cls=0x040300)
    modules = ModuleCatalog(
        None,
        alias=b"alias pci:v00008086d000051C8sv*sd*bc*sc*i* snd_hda_intel\n"
              b"alias pci:v00008086d000051C8sv*sd*bc*sc*i* snd_sof_pci_intel_tgl\n"
              b"alias pci:v*d*sv*sd*bc04sc03i* builtin_hda\n"
              b"alias usb:v1234p*d*dc*dsc*dp*ic*isc*ip*in* unrelated\n",
        builtin=b"kernel/sound/builtin-hda.ko\n")
    catalogs = Catalogs(modules)
    inv = scan(catalogs=catalogs)
    [u] = inv.unclaimed
    assert u.candidates == ("snd_hda_intel", "snd_sof_pci_intel_tgl")
    assert "spec.modules" in u.message and "snd_hda_intel" in u.message
    assert u.to_status()["class"] == "multimedia"


def test_declaring_the_module_moves_hardware_to_the_slice(b: SysfsBuilder, scan: Scan) -> None:
    """Hardware that is not published: the device appears at the next pass once driven."""
    hda = b.pci("0000:00:1f.3", vendor="8086", device="51c8", cls=0x040300)
    assert scan().unclaimed
    b.set_driver(hda, "pci", "snd_hda_intel")
    c = b.device(hda, "card0", "sound", subdir="sound")
    b.node(c, "sound", "controlC0", 116, 2, devname="snd/controlC0")
    inv = scan()
    assert not inv.unclaimed
    assert names(inv) == ["pci-0000-00-1f-3"]

