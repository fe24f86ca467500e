"""Module and ID catalogs: aliases matched as the kernel's globs, builtins left out."""

from __future__ import annotations

from pathlib import Path

from liken_devices.inventory.catalogs import Catalogs, IdNames, match_aliases


def test_alias_globs_match_like_modprobe() -> None:
    data = (
        b"# Aliases extracted from modules themselves.\n"
        b"alias pci:v00008086d000046A6sv*sd*bc*sc*i* i915\n"
        b"alias pci:v*d*sv*sd*bc03sc*i* vgaish\n"
        b"alias usb:v0BDAp2838d*dc*dsc*dp*ic*isc*ip*in* dvb_usb_rtl28xxu\n"
        b"alias acpi*:PNP0C0A:* battery\n"
        b"alias of:N*T*Cfoo,bar[12] foodrv\n"
        b"alias char-major-10-223 uinput\n")
    assert match_aliases(data, "pci:v00008086d000046A6sv00001028sd00000B1Abc03sc00i00") \
        == ("i915", "vgaish")
    assert match_aliases(data, "usb:v0BDAp2838d0100dc00dsc00dp00icFFiscFFipFFin00") == \
        ("dvb_usb_rtl28xxu",)
    assert match_aliases(data, "acpi:PNP0C0A:") == ("battery",)
    assert match_aliases(data, "of:NxTyCfoo,bar2") == ("foodrv",)
    assert match_aliases(data, "pci:v000010DEd00001234sv0sd0bc02sc00i00") == ()


def test_catalog_files_and_builtins(tmp_path: Path) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "modules.alias").write_text("alias hid:b0003g*v*p* hid_generic\n"
                                        "alias hid:b0003g*v*p* usbhid\n")
    (mods / "modules.builtin").write_text("kernel/drivers/hid/hid-generic.ko\n")
    (mods / "modules.dep").write_text("kernel/drivers/hid/usbhid/usbhid.ko: kernel/hid.ko\n")
    cat = Catalogs.load(mods, tmp_path / "absent")
    assert cat.candidates("hid:b0003g0001v0000046Dp0000C52B") == ("usbhid",)
    assert cat.modules.dependency_line("usbhid") == ("kernel/drivers/hid/usbhid/usbhid.ko",
                                                     ("kernel/hid.ko",))
    assert cat.modules.is_builtin("hid-generic") and not cat.modules.is_builtin("usbhid")
    assert cat.candidates(None) == ()


def test_id_names() -> None:
    ids = IdNames.parse("1d6b  Linux Foundation\n\t0002  2.0 root hub\n"
                        "C 09  Hub\n\t00  Unused\n")
    assert ids.name("1d6b", "0002") == "Linux Foundation 2.0 root hub"
    assert ids.name("1d6b", "0003") is None
    assert ids.name("0009", "0000") is None  # the class section is not a vendor
    assert IdNames.parse("8086  Intel\n\t1234  Thing\n\t\t1028 0001  Sub\n").name("8086", "1234") \
        == "Intel Thing"


def test_id_names_read_from_the_file_on_demand_and_follow_a_new_file(tmp_path: Path) -> None:
    ids = tmp_path / "usb.ids"
    ids.write_text("# comment\n0bda  Realtek\n\t2838  RTL2838 DVB-T\n"
                   "10c4  Silicon Labs\n\tea60  CP210x UART Bridge\n"
                   "C 09  Hub\n\t00  Unused\n")
    names = IdNames(ids)
    assert names.name("0bda", "2838") == "Realtek RTL2838 DVB-T"
    assert names.name("10c4", "2838") is None  # another vendor's product
    assert names.name("10C4", "EA60") == "Silicon Labs CP210x UART Bridge"
    ids.write_text("0bda  Realtek Semiconductor Corp.\n\t2838  RTL2838\n")
    assert names.name("0bda", "2838") == "Realtek Semiconductor Corp. RTL2838"
    assert names.name("0bd", "2838") is None and names.name("0bda", "28\n8") is None
    assert IdNames(tmp_path / "absent").name("0bda", "2838") is None


def test_module_tree_questions_treat_dash_and_underscore_alike(tmp_path: Path) -> None:
    (tmp_path / "modules.dep").write_text(
        "kernel/drivers/media/cec/usb/pulse8/pulse8-cec.ko.xz: kernel/drivers/media/cec.ko.xz\n"
        "kernel/drivers/media/cec.ko.xz:\n")
    (tmp_path / "modules.builtin").write_text("kernel/drivers/hid/uhid.ko\n")
    (tmp_path / "modules.alias").write_text("alias char-major-10-239 uhid\n"
                                            "alias serio:ty02pr40id*ex* pulse8_cec\n")
    cat = Catalogs.load(tmp_path, tmp_path).modules
    assert cat.dependency_line("pulse8_cec") == (
        "kernel/drivers/media/cec/usb/pulse8/pulse8-cec.ko.xz",
        ("kernel/drivers/media/cec.ko.xz",))
    assert cat.dependency_line("cec") == ("kernel/drivers/media/cec.ko.xz", ())
    assert cat.dependency_line("pulse8") is None and cat.dependency_line("c.c") is None
    assert cat.is_builtin("uhid") and not cat.is_builtin("uhi")
    assert cat.candidates("serio:ty02pr40id00ex00") == ("pulse8_cec",)
    assert cat.literal_aliases("char_major_10_239") == ("uhid",)


def test_id_files_fall_back_to_the_next_directory(tmp_path: Path) -> None:
    """A host's hwdata mounted into a container: Debian's ID files are relative symlinks into
    ../misc that lead nowhere when only hwdata/ is mounted, or the host has none at all. Each
    file then comes from the next directory (the image's copy); a readable host copy wins."""
    host, image = tmp_path / "host" / "hwdata", tmp_path / "image"
    host.mkdir(parents=True)
    image.mkdir()
    (host / "pci.ids").symlink_to("../misc/pci.ids")  # dangling, as a file mount leaves it
    (image / "pci.ids").write_text("8086  Intel Corporation\n\t1521  I350 Gigabit\n")
    (image / "usb.ids").write_text("1d6b  Linux Foundation\n\t0002  2.0 root hub\n")
    (host / "usb.ids").write_text("1d6b  Host Foundation\n\t0002  host hub\n")
    cat = Catalogs.load(tmp_path / "mods", (host, image))
    assert cat.pci.name("8086", "1521") == "Intel Corporation I350 Gigabit"
    assert cat.usb.name("1d6b", "0002") == "Host Foundation host hub"
    # Once the symlink leads to a file, the host's copy is read.
    (tmp_path / "host" / "misc").mkdir()
    (tmp_path / "host" / "misc" / "pci.ids").write_text("8086  Host Intel\n\t1521  NIC\n")
    assert Catalogs.load(tmp_path / "mods", (host, image)).pci.name("8086", "1521") == \
        "Host Intel NIC"
    # Readable nowhere: no names, as with one directory.
    assert Catalogs.load(tmp_path / "mods", (tmp_path / "a", tmp_path / "b")).pci.name(
        "8086", "1521") is None
