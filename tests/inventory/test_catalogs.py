"""Module and ID catalogs: aliases matched as the kernel's globs, builtins left out."""

from __future__ import annotations

from pathlib import Path

from liken_devices.inventory.catalogs import AliasIndex, Catalogs, IdNames


def test_alias_globs_match_like_modprobe() -> None:
    idx = AliasIndex.parse(
        "# Aliases extracted from modules themselves.\n"
        "alias pci:v00008086d000046A6sv*sd*bc*sc*i* i915\n"
        "alias pci:v*d*sv*sd*bc03sc*i* vgaish\n"
        "alias usb:v0BDAp2838d*dc*dsc*dp*ic*isc*ip*in* dvb_usb_rtl28xxu\n"
        "alias acpi*:PNP0C0A:* battery\n"
        "alias of:N*T*Cfoo,bar[12] foodrv\n"
        "alias char-major-10-223 uinput\n")
    assert idx.match("pci:v00008086d000046A6sv00001028sd00000B1Abc03sc00i00") == ("i915",
                                                                                  "vgaish")
    assert idx.match("usb:v0BDAp2838d0100dc00dsc00dp00icFFiscFFipFFin00") == \
        ("dvb_usb_rtl28xxu",)
    assert idx.match("acpi:PNP0C0A:") == ("battery",)
    assert idx.match("of:NxTyCfoo,bar2") == ("foodrv",)
    assert idx.match("pci:v000010DEd00001234sv0sd0bc02sc00i00") == ()


def test_catalog_files_and_builtins(tmp_path: Path) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "modules.alias").write_text("alias hid:b0003g*v*p* hid_generic\n"
                                        "alias hid:b0003g*v*p* usbhid\n")
    (mods / "modules.builtin").write_text("kernel/drivers/hid/hid-generic.ko\n")
    (mods / "modules.dep").write_text("kernel/drivers/hid/usbhid/usbhid.ko: kernel/hid.ko\n")
    cat = Catalogs.load(mods, tmp_path / "absent")
    assert cat.candidates("hid:b0003g0001v0000046Dp0000C52B") == ("usbhid",)
    assert "usbhid" in cat.carried and "hid_generic" in cat.builtin
    assert cat.candidates(None) == ()


def test_id_names() -> None:
    ids = IdNames.parse("1d6b  Linux Foundation\n\t0002  2.0 root hub\n"
                        "C 09  Hub\n\t00  Unused\n")
    assert ids.name("1d6b", "0002") == "Linux Foundation 2.0 root hub"
    assert ids.name("1d6b", "0003") is None
    assert ids.name("0009", "0000") is None  # the class section is not a vendor
    assert IdNames.parse("8086  Intel\n\t1234  Thing\n\t\t1028 0001  Sub\n").name("8086", "1234") \
        == "Intel Thing"
