"""What real recordings publish: answers pinned on machines of the corpus (skipped without it)."""

from __future__ import annotations

from liken_devices.inventory import Context, Facts, Inventory, MachineSpec
from liken_devices.inventory.model import Reason
from liken_devices.inventory.policy import build_inventory
from liken_devices.sysfs.umockdev import load_recording
from tests.support.corpus import recording


def inventory(name: str, *, facts: bool = True, machine: MachineSpec | None = None) -> Inventory:
    snap = load_recording(recording(name))
    ctx = Context(Facts(frozenset() if facts else None, None if facts else "unreadable"),
                  machine or MachineSpec())
    return build_inventory(snap, ctx)


def outcome(inv: Inventory, address: str) -> tuple[tuple[str, ...], str | None]:
    [o] = [o for o in inv.outcomes if o.address == address]
    return o.devices, o.reason


def test_two_gpus_split_render_and_display() -> None:
    inv = inventory("mir-standard-drm-devices.umockdev")
    by = inv.by_name()
    assert sorted(by) == ["pci-0000-00-02-0", "pci-0000-00-02-0-display", "pci-0000-01-00-0",
                          "pci-0000-01-00-0-display"]
    assert by["pci-0000-01-00-0"].shareable and by["pci-0000-01-00-0"].attributes["driver"] == \
        "amdgpu"
    assert [n.path for n in by["pci-0000-00-02-0"].nodes] == ["/dev/dri/renderD128"]
    assert outcome(inv, "0000:00:01.0")[1] == Reason.BUS_STRUCTURE


def test_fingerprint_reader_without_kernel_driver_publishes_whole() -> None:
    inv = inventory("libfprint-aes2501.umockdev")
    [d] = inv.devices
    assert d.name == "usb-1-10" and "driver" not in d.attributes
    assert [n.path for n in d.nodes] == ["/dev/bus/usb/001/044"]


def test_thinkpad_t60p() -> None:
    inv = inventory("thinkpad-t60p-systemd-sys-script.umockdev")
    by = inv.by_name()
    assert outcome(inv, "00:07") == ((), Reason.ONLY_RESERVED)  # rtc_cmos: only /dev/rtc0
    hda = by["pci-0000-00-1b-0"]
    assert hda.attributes["subsystem"] == "sound"
    assert {"/dev/snd/controlC0", "/dev/dsp"} <= {n.path for n in hda.nodes}
    # The BCM2045B radio has no driver bound on any interface: whole, usbfs only.
    assert [n.path for n in by["usb-4-1"].nodes] == ["/dev/bus/usb/004/002"]
    assert by["usb-4-1"].attributes["name"] == "Broadcom Corp BCM2045B"
    # The ATI FireGL has no driver: unclaimed.
    assert outcome(inv, "0000:01:00.0")[1] == Reason.NO_DRIVER
    assert "0000:01:00.0" in [u.address for u in inv.unclaimed]
    assert all(n.name != "rtc0" for d in inv.devices for n in d.nodes)


def test_thinkpad_without_facts_offers_no_disk() -> None:
    inv = inventory("thinkpad-t60p-systemd-sys-script.umockdev", facts=False)
    assert outcome(inv, "0000:00:1f.2") == ((), Reason.FACTS_UNREADABLE)
    assert all(n.type != "b" for d in inv.devices for n in d.nodes)


def test_tpm_of_the_composite_tree_is_never_delivered() -> None:
    inv = inventory("curated/fwupd-selftest-composite-sysfs.umockdev")
    assert outcome(inv, "STM0125:00") == ((), Reason.ONLY_RESERVED)


def test_btusb_adapter_of_a_laptop() -> None:
    inv = inventory("udevdb-only/checkbox-hp-envy-15-mediatek-bt-udevdb.umockdev",
                    machine=MachineSpec(modules=("uhid",)))
    radio = inv.by_name()["usb-1-1-1-1-0"]
    assert radio.kind == "bluetooth" and radio.attributes["driver"] == "btusb"
    paths = [n.path for n in radio.nodes]
    assert paths[:2] == ["/dev/bus/usb/001/012", "/dev/uinput"] and paths[-1] == "/dev/uhid"
    # The 32 legacy event numbers but the 10 whose nodes the laptop's own devices hold
    # (rules: bluetooth.event-numbers-exclusive; the full list is in
    # tests/inventory/test_bluetooth.py).
    assert len([p for p in paths if p.startswith("/dev/input/event")]) == 22


def test_hdmi_jacks_stay_with_the_audio_controller() -> None:
    inv = inventory("udevdb-only/checkbox-dell-latitudee6430-udevdb.umockdev")
    hda = inv.by_name()["pci-0000-00-1b-0"]
    assert hda.attributes["subsystem"] == "sound"
    assert any(n.path.startswith("/dev/input/event") for n in hda.nodes)
