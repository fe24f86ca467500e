"""End to end: declaring a module publishes the hardware it drives on the next walk.

A sysfs tree on disk holds a PCI audio controller with no driver: the walk lists it as unclaimed,
naming the module that could drive it. The Machine declares that module; the loader double does
what the kernel would when modprobe inserts it: it binds the driver (the ``driver`` link) and the
driver registers its device node. The next walk publishes the controller and the unclaimed entry
is gone.
"""

from __future__ import annotations

import os
from pathlib import Path

from liken_devices.inventory import Sources
from liken_devices.inventory.model import MachineSpec
from liken_devices.machine.side import MachineSide

from .ktree import ModuleTreeBuilder

PCI = "/devices/pci0000:00/0000:00:1b.0"
MODALIAS = "pci:v00008086d0000293Esv00001AF4sd00001100bc04sc03i00"


def link(at: Path, target: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(os.path.relpath(target, at.parent))


def write_fixture(sysfs: Path) -> None:
    dev = sysfs / PCI.lstrip("/")
    dev.mkdir(parents=True)
    (dev / "uevent").write_text(f"PCI_CLASS=40300\nPCI_ID=8086:293E\nPCI_SUBSYS_ID=1AF4:1100\n"
                                f"PCI_SLOT_NAME=0000:00:1b.0\nMODALIAS={MODALIAS}\n")
    (dev / "modalias").write_text(MODALIAS + "\n")
    link(dev / "subsystem", sysfs / "bus" / "pci")
    link(sysfs / "bus" / "pci" / "devices" / "0000:00:1b.0", dev)
    (sysfs / "class" / "tty").mkdir(parents=True)
    (sysfs / "dev" / "char").mkdir(parents=True)  # the kernel's index of nodes, empty for now


class BindingLoader:
    """Stands in for modprobe + the kernel: loading snd_hda_intel binds it in the fixture."""

    def __init__(self, sysfs: Path) -> None:
        self.sysfs = sysfs
        self.calls: list[str] = []

    def load(self, name: str) -> str:
        self.calls.append(name)
        assert name.replace("-", "_") == "snd_hda_intel"
        dev = self.sysfs / PCI.lstrip("/")
        drivers = self.sysfs / "bus" / "pci" / "drivers" / "snd_hda_intel"
        drivers.mkdir(parents=True)
        link(dev / "driver", drivers)
        # As the kernel does on a bind: the device's uevent names its driver from then on.
        with (dev / "uevent").open("a") as f:
            f.write("DRIVER=snd_hda_intel\n")
        ctl = dev / "sound" / "card0" / "controlC0"
        ctl.mkdir(parents=True)
        (ctl / "uevent").write_text("MAJOR=116\nMINOR=0\nDEVNAME=snd/controlC0\n")
        (ctl / "dev").write_text("116:0\n")
        link(ctl / "subsystem", self.sysfs / "class" / "sound")
        link(self.sysfs / "dev" / "char" / "116:0", ctl)
        module = self.sysfs / "module" / "snd_hda_intel"
        module.mkdir(parents=True)
        (module / "initstate").write_text("live\n")
        return "insmod .../snd.ko; insmod .../snd-hda-intel.ko"


def test_declared_module_publishes_its_hardware_on_the_next_walk(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    write_fixture(sysfs)
    tree = ModuleTreeBuilder(tmp_path / "root")
    tree.module("kernel/sound/core/snd.ko")
    tree.module("kernel/sound/pci/hda/snd-hda-intel.ko", "kernel/sound/core/snd.ko")
    tree.aliases.append(("pci:v00008086d0000293Esv*sd*bc04sc03i*", "snd_hda_intel"))
    tree.build()
    hwdata = tmp_path / "hwdata"
    hwdata.mkdir()
    sources = Sources(sysfs=sysfs, facts=tmp_path / "facts", modules_dir=tree.dir,
                      hwdata_dir=hwdata)

    before = sources.walk(MachineSpec())
    assert [u.address for u in before.unclaimed] == ["0000:00:1b.0"]
    assert before.unclaimed[0].candidates == ("snd_hda_intel",)
    assert not [d for d in before.devices if d.source == PCI]

    loader = BindingLoader(sysfs)
    side = MachineSide(tree.dir, loader, sys_root=sysfs, proc_root=tmp_path / "proc")
    spec = MachineSpec(modules=("snd-hda-intel",))
    out = side.apply(spec, sources.snapshot())
    assert out["modules"][0]["state"] == "Loaded"
    assert out["conditions"][0]["status"] == "True"

    after = sources.walk(spec)
    assert after.unclaimed == ()
    published = [d for d in after.devices if d.source == PCI]
    assert [d.name for d in published] == ["pci-0000-00-1b-0"]
    assert published[0].attributes["driver"] == "snd_hda_intel"
    assert [n.path for n in published[0].nodes] == ["/dev/snd/controlC0"]

    # Later walks keep it Loaded without asking the tooling again.
    for _ in range(3):
        assert side.apply(spec, sources.snapshot())["modules"][0]["state"] == "Loaded"
    assert loader.calls == ["snd-hda-intel"]
    side.close()
