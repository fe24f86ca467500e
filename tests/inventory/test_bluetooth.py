"""Bluetooth event numbers stay exclusive to their owners, on a built laptop tree and on a real
laptop's recording (rules: bluetooth.event-numbers-exclusive).

The claim states every number 13:64..13:95 except those whose event node the walk finds in the
subtree of a bus or board device other than the adapter; nodes under /devices/virtual/ and under
the adapter stay in; ``explain`` names the numbers left out and whose they are.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from liken_devices.inventory import Context, Facts, MachineSpec, build_inventory
from liken_devices.inventory.bluetooth import LEGACY_EVENTS, UHID, UINPUT
from liken_devices.inventory.model import Inventory
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import load_recording
from liken_devices.views import explain_json
from tests.support.corpus import recording
from tests.support.sysfs_builder import Dev, SysfsBuilder

RADIO = "usb-1-8-1-0"


def event(b: SysfsBuilder, parent: Dev | str, n: int, name: str, subdir: str = "input") -> Dev:
    """An input device with its event node ``event<n>`` (13:64+n), as the input core makes it."""
    inp = b.device(parent, f"input{100 + n}", "input", {"NAME": f'"{name}"'}, subdir=subdir)
    return b.node(inp, "input", f"event{n}", 13, 64 + n, devname=f"input/event{n}")


class Laptop:
    """A laptop whose input devices hold event numbers all over the tree."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.b = b = SysfsBuilder(root)
        i8042 = b.board("platform", "i8042", driver="i8042")
        serio = b.device(i8042, "serio0", "serio", driver="atkbd")
        event(b, serio, 0, "AT Translated Set 2 keyboard")  # 13:64
        button = b.board("acpi", "LNXPWRBN:00", driver="button")
        event(b, button, 1, "Power Button")  # 13:65
        b.hda(jacks=1)  # its jack is event20: 13:84
        # uinput's and uhid's devices: the Bluetooth stack's own, under /devices/virtual/.
        event(b, "/devices/virtual/input", 2, "virtual gamepad", subdir=None)  # 13:66
        event(b, "/devices/virtual/misc/uhid/0005:054C:09CC.0001", 3, "BLE remote")  # 13:67
        # The radio: two btusb interfaces, the hci under the first, a connected peripheral below.
        usb = b.usb_device("1-8", devnum=3, vendor="8087", product="0026")
        self.radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
        self.other = b.usb_interface(usb, "1.1", driver="btusb", cls=0xE0)
        hci = b.device(self.radio, "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
        event(b, f"{hci.path}/hci0:256/0005:057E:2009.0002", 4, "Pro Controller")  # 13:68
        # A USB keyboard on another port.
        kbd = b.usb_device("1-2", devnum=4)
        iface = b.usb_interface(kbd, "1.0", driver="usbhid", cls=3)
        self.keyboard = event(b, f"{iface.path}/0003:1234:5678.0003", 5, "USB keyboard")  # 13:69

    def inventory(self, modules: tuple[str, ...] = ()) -> Inventory:
        ctx = Context(Facts(frozenset()), MachineSpec(modules))
        return build_inventory(read_sysfs(self.root), ctx)


@pytest.fixture
def laptop(tmp_path: Path) -> Laptop:
    return Laptop(tmp_path / "sys")


def events(inv: Inventory, name: str = RADIO) -> list[int]:
    return [n.minor - 64 for n in inv.by_name()[name].nodes if n.major == 13]


def test_a_bluetooth_claim_leaves_out_the_event_numbers_of_other_devices(
        laptop: Laptop) -> None:
    inv = laptop.inventory(("uhid",))
    radio = inv.by_name()[RADIO]
    # The keyboard, the power button, the jack and the USB keyboard are theirs.
    assert events(inv) == [2, 3, 4, *range(6, 20), *range(21, 32)]
    assert radio.nodes[:2] == (laptop_usbfs(inv), UINPUT) and radio.nodes[-1] == UHID
    assert [(x.node.minor, x.host_name, x.owner) for x in radio.left_out] == [
        (64, "input/event0", "platform i8042"),  # the keyboard behind the i8042 controller
        (65, "input/event1", "acpi LNXPWRBN:00"),  # the power button
        (69, "input/event5", "usb 1-2:1.0"),  # the USB keyboard
        (84, "input/event20", "pci 0000:00:1f.3"),  # the sound card's jack
    ]
    assert radio.left_out[0].why() == "13:64 is /dev/input/event0, the node of platform i8042"
    # The owners still deliver their own nodes, each to its own claim alone.
    assert any(n.minor == 69 for n in inv.by_name()["usb-1-2-1-0"].nodes)
    assert any(n.minor == 84 for n in inv.by_name()["pci-0000-00-1f-3"].nodes)


def laptop_usbfs(inv: Inventory) -> object:
    return inv.by_name()["usb-1-8-1-0"].nodes[0]


def test_virtual_nodes_and_the_adapters_own_peripherals_stay_in(laptop: Laptop) -> None:
    left = {x.node.minor for x in laptop.inventory().by_name()[RADIO].left_out}
    assert not {66, 67, 68} & left  # uinput's and uhid's devices, the connected controller
    assert {66, 67, 68} <= {n.minor for n in laptop.inventory().by_name()[RADIO].nodes}


def test_a_number_its_owner_gives_up_returns(laptop: Laptop) -> None:
    """Each walk states the current set: the plugin's reconcile pass writes it."""
    assert 5 not in events(laptop.inventory())
    laptop.b.remove(laptop.keyboard)  # the keyboard is unplugged: event5 is free again
    assert 5 in events(laptop.inventory())
    assert all(x.node.minor != 69 for x in laptop.inventory().by_name()[RADIO].left_out)


def test_a_second_adapters_peripheral_is_that_adapters(laptop: Laptop) -> None:
    b = laptop.b
    usb = b.usb_device("1-9", devnum=5)
    radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    hci = b.device(radio, "hci1", "bluetooth", subdir="bluetooth")
    event(b, f"{hci.path}/hci1:1/0005:046D:B33A.0004", 7, "Mouse")  # 13:71
    inv = laptop.inventory()
    assert 7 not in events(inv, RADIO) and 7 in events(inv, "usb-1-9-1-0")
    assert 4 not in events(inv, "usb-1-9-1-0") and 4 in events(inv, RADIO)
    (mouse,) = [x for x in inv.by_name()[RADIO].left_out if x.node.minor == 71]
    assert mouse.owner == "usb 1-9:1.0"


def test_explain_names_the_numbers_left_out(laptop: Laptop) -> None:
    inv = laptop.inventory()
    (o,) = [o for o in inv.outcomes if o.devices == (RADIO,)]
    assert "13:64 is /dev/input/event0, the node of platform i8042" in o.detail
    assert "13:84 is /dev/input/event20, the node of pci 0000:00:1f.3" in o.detail
    got = explain_json(inv)["leftOut"]
    assert list(got) == [RADIO]
    assert [x["minor"] for x in got[RADIO]] == [64, 65, 69, 84]
    assert got[RADIO][2]["owner"] == "usb 1-2:1.0" and got[RADIO][2]["path"] == "/dev/input/event5"


def test_a_laptop_recording_keeps_its_keyboard_buttons_jacks_and_camera() -> None:
    snap = load_recording(recording(
        "udevdb-only/checkbox-hp-envy-15-mediatek-bt-udevdb.umockdev"))
    inv = build_inventory(snap, Context(Facts(frozenset()), MachineSpec(("uhid",))))
    radio = inv.by_name()["usb-1-1-1-1-0"]
    owners = {x.node.minor - 64: x.owner for x in radio.left_out}
    assert owners == {
        0: "acpi PNP0C0D:00",  # the lid switch
        1: "acpi PNP0C0C:00", 2: "acpi LNXPWRBN:00",  # the power buttons
        3: "platform i8042",  # the keyboard
        4: "usb 1-1.3:1.0",  # the camera's button
        6: "acpi LNXVIDEO:00", 7: "acpi LNXVIDEO:01",  # the video bus's brightness keys
        8: "pci 0000:00:1b.0", 9: "pci 0000:00:1b.0", 10: "pci 0000:00:1b.0",  # the jacks
    }
    # HP's WMI hotkeys are a virtual input device: the number stays in.
    assert 5 in [n.minor - 64 for n in radio.nodes if n.major == 13]
    assert len([n for n in radio.nodes if n.major == 13]) == 32 - len(owners)
    assert not [n for n in radio.nodes if n in LEGACY_EVENTS and n.minor - 64 in owners]


def test_the_explain_command_says_which_numbers_and_whose(
        laptop: Laptop, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The text names the numbers in lines that fit the terminal; -o json names each owner."""
    from liken_devices.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    for d in ("facts/storage", "mods", "hw"):
        (tmp_path / d).mkdir(parents=True)
    args = ["--sysfs", str(laptop.root), "--facts", str(tmp_path / "facts"), "--modules-dir",
            str(tmp_path / "mods"), "--hwdata-dir", str(tmp_path / "hw"), "--node", "laptop-1"]
    assert main(["explain", *args]) == 0
    text = capsys.readouterr().out
    assert max(len(x) for x in text.splitlines()) <= 78
    entries = text.replace("\n    ", " ").splitlines()  # continuation lines are indented
    (line,) = [x for x in entries if f"published as {RADIO}" in x]
    assert ("4 of its 32 event numbers left out as other devices' own: 13:64, 13:65, 13:69, "
            "13:84 (-o json: leftOut names each owner)") in line
    assert main(["explain", "-o", "json", *args]) == 0
    got = json.loads(capsys.readouterr().out)["leftOut"][RADIO]
    assert [x["hostPath"] for x in got] == ["/dev/input/event0", "/dev/input/event1",
                                            "/dev/input/event5", "/dev/input/event20"]
    assert [x["why"] for x in got] == [
        "13:64 is /dev/input/event0, the node of platform i8042",
        "13:65 is /dev/input/event1, the node of acpi LNXPWRBN:00",
        "13:69 is /dev/input/event5, the node of usb 1-2:1.0",
        "13:84 is /dev/input/event20, the node of pci 0000:00:1f.3"]


# -- virtual event nodes belong to the adapter they name (rules: bluetooth.virtual-nodes) ---------

RADIO_ADDR = "00:1a:7d:da:71:13"
SECOND_ADDR = "5c:f3:70:8a:11:22"
SECOND = "usb-1-9-1-0"


def two_radios(laptop: Laptop) -> None:
    """Two adapters with their addresses; BlueZ's uhid devices name each in ``phys``."""
    b = laptop.b
    hci0 = laptop.b.dir(laptop.radio) / "bluetooth" / "hci0"
    (hci0 / "address").write_text(RADIO_ADDR.upper() + "\n")  # as older kernels list it
    usb = b.usb_device("1-9", devnum=5)
    radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    b.device(radio, "hci1", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth",
             attrs={"address": SECOND_ADDR})
    uhid = "/devices/virtual/misc/uhid"
    for n, addr, name in ((8, RADIO_ADDR, "first's keyboard"), (9, SECOND_ADDR, "second's mouse")):
        inp = b.device(f"{uhid}/0005:046D:B01A.000{n}", f"input{100 + n}", "input",
                       {"NAME": f'"{name}"', "PHYS": f'"{addr}"'}, subdir="input")
        b.node(inp, "input", f"event{n}", 13, 64 + n, devname=f"input/event{n}")


def claimed_inventory(laptop: Laptop, *names: str) -> Inventory:
    from liken_devices.inventory.model import Claimed

    ctx = Context(Facts(frozenset()), MachineSpec())
    return build_inventory(read_sysfs(laptop.root), ctx, claimed=Claimed(frozenset(names)))


def test_a_virtual_node_naming_an_adapter_is_that_adapters_alone(laptop: Laptop) -> None:
    two_radios(laptop)
    for inv in (laptop.inventory(), claimed_inventory(laptop, RADIO, SECOND)):
        assert 8 in events(inv, RADIO) and 8 not in events(inv, SECOND)
        assert 9 in events(inv, SECOND) and 9 not in events(inv, RADIO)
        (theirs,) = [x for x in inv.by_name()[RADIO].left_out if x.node.minor == 73]
        assert theirs.owner.startswith(f"Bluetooth adapter {SECOND} ")
        assert "phys is its address" in theirs.why()


def test_a_virtual_node_naming_no_adapter_stays_in_for_one_claim_only(laptop: Laptop) -> None:
    """The key remapper's uinput device (event2) and the uhid device with no phys (event3)."""
    two_radios(laptop)
    for inv in (laptop.inventory(), claimed_inventory(laptop, RADIO),
                claimed_inventory(laptop, "usb-1-2-1-0", SECOND)):
        assert {2, 3} <= set(events(inv, RADIO)) and {2, 3} <= set(events(inv, SECOND))
    inv = claimed_inventory(laptop, RADIO, SECOND)  # two tenants: in neither
    for radio in (RADIO, SECOND):
        assert not {2, 3} & set(events(inv, radio))
        why = {x.node.minor: x.why() for x in inv.by_name()[radio].left_out}
        assert "names no adapter" in why[66] and "2 Bluetooth claims" in why[67]
    (o,) = [o for o in inv.outcomes if o.devices == (RADIO,)]
    assert "13:66 is /dev/input/event2" in o.detail


def test_the_kernels_answer_for_an_adapters_address() -> None:
    """HCIGETDEVINFO's struct hci_dev_info: dev_id, name[8], then bdaddr least significant first."""
    from liken_devices.sysfs.hci import HCIGETDEVINFO, hci_address, parse_dev_info

    assert HCIGETDEVINFO == 0x800448D3
    info = b"\x00\x00hci0\x00\x00\x00\x00" + bytes([0x13, 0x71, 0xDA, 0x7D, 0x1A, 0x00]) + \
        bytes(76)
    assert parse_dev_info(info) == RADIO_ADDR
    assert parse_dev_info(bytes(92)) is None and parse_dev_info(b"short") is None
    assert hci_address(99) is None  # no such adapter (or no Bluetooth here): none named


# -- which address a radio has, and which radio a virtual input device names ---------------------
# rules: bluetooth.virtual-nodes


def test_a_radios_address_is_its_hcis_and_an_unknown_one_names_none(tmp_path: Path) -> None:
    """Only an hci (``DEVTYPE=host``, in the bluetooth class) names its radio's address, read
    from its ``address`` attribute and lowercased. An hci without the attribute, or with the
    all-zero address of a controller not yet set up, names none; a connection below a radio
    (``DEVTYPE=link``) or another class's device there names nothing either."""
    from liken_devices.inventory.bluetooth import adapter_addresses
    from liken_devices.sysfs.model import SysDevice

    b = SysfsBuilder(tmp_path / "sys")
    radios = []
    for n in range(5):
        usb = b.usb_device(f"1-{n + 1}", devnum=n + 2)
        radios.append(b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0))
    b.device(radios[0], "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth",
             attrs={"address": RADIO_ADDR.upper()})
    b.device(radios[1], "hci1", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
    b.device(radios[2], "hci2", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth",
             attrs={"address": "00:00:00:00:00:00"})
    devs = dict(read_sysfs(b.root).devices)
    # A walk of /sys reads ``address`` of an hci only; a recording keeps every attribute.
    for radio, subsystem, name, devtype in ((radios[3], "bluetooth", "hci3:256", "link"),
                                            (radios[4], "rfkill", "rfkill4", "host")):
        path = f"{radio.path}/bluetooth/{name}"
        devs[path] = SysDevice(path, subsystem, None, {"DEVTYPE": devtype},
                               {"address": SECOND_ADDR.encode()})
    assert adapter_addresses(devs.values()) == {radios[0].path: RADIO_ADDR}


def test_only_the_input_devices_phys_names_a_radio(tmp_path: Path) -> None:
    """The ``phys`` an event node points at is its input device's: the uevent's ``PHYS``
    (quoted), else the ``phys`` attribute; a device of another class above the node (a hid
    device carrying a ``PHYS``) names nothing."""
    from liken_devices.inventory.bluetooth import phys_of

    b = SysfsBuilder(tmp_path / "sys")
    uhid = "/devices/virtual/misc/uhid"
    by_uevent = b.device(f"{uhid}/0005:046D:B01A.0008", "input108", "input",
                         {"PHYS": f'"{RADIO_ADDR.upper()}"'}, subdir="input")
    by_attr = b.device(f"{uhid}/0005:046D:B01A.0009", "input109", "input", subdir="input")
    hid = b.device(uhid, "0005:046D:B01A.000A", "hid", {"PHYS": f'"{SECOND_ADDR}"'})
    nodes = [b.node(by_uevent, "input", "event8", 13, 72, devname="input/event8"),
             b.node(by_attr, "input", "event9", 13, 73, devname="input/event9"),
             b.node(hid, "input", "event10", 13, 74, devname="input/event10")]
    devs = dict(read_sysfs(b.root).devices)
    # A recording keeps every attribute (a walk of /sys reads no ``phys``): the attribute only.
    devs[by_attr.path] = devs[by_attr.path]._replace(attrs={"phys": SECOND_ADDR.upper().encode()})
    assert [phys_of(devs[n.path], devs) for n in nodes] == [RADIO_ADDR, SECOND_ADDR, ""]
