"""Security invariants as properties, over generated machines and over every real recording.

No claim ever receives the console, /dev/rtc0, a TPM node, a serio-attached tty, or a block
device backing a storage role (any block device when the facts are unreadable); no node of one
published device is delivered by another device's claim, Bluetooth included (a Bluetooth claim
states an event number only when its node, if any, is under /devices/virtual/ or under the
adapter); names are unique DNS labels of at most 63 characters, each a bus device's (never a
class device's such as ``hiddev0``); no network card's PTP clock is delivered, on any bus; only
the render half of a GPU is shareable, and it delivers render nodes only; every slice passes the
validator.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.inventory import Context, Facts, Inventory, MachineSpec, SerioEntry
from liken_devices.inventory.attributes import usb_ids
from liken_devices.inventory.limits import DRIVER
from liken_devices.inventory.policy import build_inventory
from liken_devices.inventory.sources import read_facts
from liken_devices.slices import devices_json, make_slice, validate_slice
from liken_devices.sysfs.model import DevNode, Snapshot, SysDevice
from liken_devices.sysfs.reader import BUSES, read_sysfs
from liken_devices.sysfs.umockdev import load_recording
from liken_devices.sysfs.usbbus import usb_role
from tests.support.corpus import recording_params
from tests.support.sysfs_builder import SysfsBuilder

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TPM = re.compile(r"^tpm(rm)?\d+$")
WATCHDOG = re.compile(r"^watchdog\d*$")


def check_invariants(snap: Snapshot, ctx: Context, inv: Inventory) -> None:
    delivered = [(d, n) for d in inv.devices for n in d.nodes]
    check_machine_usb_devices(snap, ctx, inv)
    console = set(snap.console)
    roles = ctx.facts.role_partitions
    serio_ttys = serio_lines(snap, ctx.machine)
    for d, n in delivered:
        assert n.name not in console, f"{d.name} delivers the console {n.path}"
        assert n.name != "rtc0", f"{d.name} delivers /dev/rtc0"
        assert not TPM.match(n.name.rsplit("/", 1)[-1]), f"{d.name} delivers TPM {n.path}"
        assert not WATCHDOG.match(n.name), f"{d.name} delivers the watchdog {n.path}"
        # usbfs (char 189) gives the whole USB device: never to a device several claims share.
        assert not (d.shareable and n.major == 189), f"shared {d.name} delivers usbfs {n.path}"
        assert n.name not in serio_ttys, f"{d.name} delivers serio-attached {n.path}"
        if n.type == "b":
            assert roles is not None, f"{d.name} delivers {n.path} with unreadable facts"
            # By either name the kernel knows it by: its last component, or its /dev name
            # with "/" spelled "!" (/dev/cciss/c0d0p1 is the kernel's cciss!c0d0p1).
            assert not roles & kernel_names(n), f"{d.name} delivers role disk {n.path}"
    role_devs = set()
    if roles:
        by_name = {k: x for x in snap.devices.values() if x.node and x.node.type == "b"
                   for k in kernel_names(x.node)}
        for r in roles:
            if r in by_name:
                role_devs.add(by_name[r].path)
    for d in inv.devices:
        # A disk that contains a role partition is never delivered either.
        for n in d.nodes:
            if n.type == "b":
                disk = next((x for x in snap.devices.values() if x.node == n), None)
                assert disk is None or not any(p.startswith(disk.path + "/") for p in role_devs)
    check_exclusive(snap, inv)
    names = [d.name for d in inv.devices]
    assert len(names) == len(set(names)), "device names are not unique"
    for name in names:
        assert len(name) <= 63 and DNS_LABEL.match(name), name
    check_bus_names(snap, inv)
    check_network(snap, inv)
    for d in inv.devices:
        if d.shareable:
            assert d.attributes.get("renderNode") is True
            assert all(n.name.rsplit("/", 1)[-1].startswith("renderD") for n in d.nodes), d
    assert len(inv.devices) <= 128
    obj = make_slice("node-1", DRIVER, devices_json(inv))
    assert validate_slice(obj) == []


PCI_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def check_bus_names(snap: Snapshot, inv: Inventory) -> None:
    """rules: usb.bus-devices-only. Every device is named after a bus device's address: a USB
    one after a USB device or interface (never a class device such as ``hiddev0``), a PCI one
    after a function."""
    for d in inv.devices:
        src = snap.devices[d.source]
        bus = d.attributes["bus"]
        assert d.name.startswith(f"{bus}-"), d.name
        if bus == "usb":
            assert usb_role(src.name, src.devtype) is not None, f"{d.name} is no bus device"
        elif bus == "pci":
            assert PCI_ADDRESS.fullmatch(src.name.lower()), d.name


def check_network(snap: Snapshot, inv: Inventory) -> None:
    """rules: hardware.network-cards. On every bus, no claim gets a PTP clock of a network card:
    hardware with a network interface below it, or a PCI function of class network."""
    nets = [x.path for x in snap.devices.values() if x.subsystem == "net"]
    at = {(x.node.major, x.node.minor): x for x in snap.devices.values() if x.node}
    for d in inv.devices:
        src = snap.devices[d.source]
        code = src.props.get("PCI_CLASS", "") if src.subsystem == "pci" else ""
        card = (len(code) == 5 and code.startswith("2")) or any(
            p.startswith(d.source + "/") for p in nets)
        for n in d.nodes if card else ():
            x = at.get((n.major, n.minor))
            assert x is None or x.subsystem != "ptp", f"{d.name} delivers {n.path}"


def kernel_names(n: DevNode) -> set[str]:
    return {n.name.rsplit("/", 1)[-1], n.name.replace("/", "!")}


def check_exclusive(snap: Snapshot, inv: Inventory) -> None:
    """No node of one published device is delivered by another device's claim.

    A node is a device's own when sysfs shows it inside the hardware the device stands for. The
    usbfs node is the USB device's, which every driven interface delivers
    (rules: usb.usbfs-per-interface).
    """
    at: dict[tuple[str, int, int], SysDevice] = {}
    for x in snap.devices.values():
        if x.node is not None:
            at.setdefault((x.node.type, x.node.major, x.node.minor), x)
    own: dict[tuple[str, int, int], str] = {}
    for d in inv.devices:
        for n in d.nodes:
            x = at.get((n.type, n.major, n.minor))
            usbfs = x is not None and x.subsystem == "usb" and usb_role(x.name, x.devtype)
            if x is not None and not usbfs and x.path.startswith(d.source + "/"):
                own[(n.type, n.major, n.minor)] = d.name
    for d in inv.devices:
        for n in d.nodes:
            owner = own.get((n.type, n.major, n.minor))
            assert owner in (None, d.name), f"{d.name} delivers {n.path}, a node of {owner}"
            if d.kind == "bluetooth" and n.major == 13 and 64 <= n.minor < 96:
                check_bluetooth_event(snap, d.source, at.get(("c", 13, n.minor)))


def check_bluetooth_event(snap: Snapshot, radio: str, x: SysDevice | None) -> None:
    """rules: bluetooth.event-numbers-exclusive. A stated number's
    node, if the walk found one, is the Bluetooth stack's own or under the adapter."""
    if x is None or x.path.startswith("/devices/virtual/"):
        return
    usb = radio.rsplit("/", 1)[0]
    for anc in x.ancestors():
        dev = snap.devices.get(anc)
        if dev is None or dev.subsystem not in BUSES:
            continue
        # The nearest bus or board device above the node: the adapter's USB device or one of
        # its btusb interfaces.
        assert anc == usb or (anc.rsplit("/", 1)[0] == usb and dev.driver == "btusb"), \
            f"the Bluetooth claim of {radio} states {x.node}, a node of {anc}"
        return


def serio_lines(snap: Snapshot, machine: MachineSpec) -> set[str]:
    out = set()
    for dev in snap.devices.values():
        if dev.subsystem == "usb" and dev.devtype == "usb_device" and \
                any(usb_ids(dev) == (e.vendor, e.product) for e in machine.serio):
                for x in snap.devices.values():
                    # A line of the adapter's own interfaces, not of a device behind it.
                    rest = x.path[len(dev.path) + 1:] if x.path.startswith(dev.path + "/") else ""
                    if rest and ":" in rest.split("/")[0] and x.node and \
                            x.node.name.startswith("ttyACM"):
                        out.add(x.node.name)
    return out


def check_machine_usb_devices(snap: Snapshot, ctx: Context, inv: Inventory) -> None:
    """No usbfs node of a USB device the machine depends on reaches any claim, by any path (a
    published device or a held one): one with a role's partition (any block device while the
    facts are unreadable) or the console in its subtree, or an adapter a serio entry names."""
    reached = {(n.major, n.minor) for d in inv.devices for n in d.nodes if n.type == "c"}
    reached |= {(n.major, n.minor) for nodes in inv.held.values() for n in nodes}
    roles = ctx.facts.role_partitions
    console = set(snap.console)
    for usb in snap.devices.values():
        if usb.subsystem != "usb" or usb.devtype != "usb_device" or usb.node is None:
            continue
        below = [x for x in snap.devices.values()
                 if x.path.startswith(usb.path + "/") and x.node is not None]
        disk = any(x.node.type == "b" and (roles is None or
                                           x.node.name.rsplit("/", 1)[-1] in roles)
                   for x in below if x.node)
        tty = any(x.node.name in console for x in below if x.node)
        adapter = any(usb_ids(usb) == (e.vendor, e.product) and e.serial is None
                      for e in ctx.machine.serio)
        if disk or tty or adapter:
            assert (usb.node.major, usb.node.minor) not in reached, \
                f"{usb.path}'s usbfs node reaches a claim though the machine depends on it"
    for d in inv.devices:
        assert not any(n.name.startswith("usbmon") for n in d.nodes), f"{d.name} delivers usbmon"


# -- generated machines ---------------------------------------------------------------------------

NODE_KINDS = ["card", "render", "i2c-dev", "drm_dp_aux_dev", "graphics", "sound", "jack", "input",
              "tty", "block", "tpm", "tpmrm", "rtc", "hidraw", "misc", "cec", "video4linux",
              "watchdog", "usbclass", "ptp"]


def node_dev(parent: str, kind: str, i: int) -> SysDevice:
    table = {
        "card": ("drm", f"dri/card{i}", 226, i), "render": ("drm", f"dri/renderD{128 + i}", 226,
                                                           128 + i),
        "i2c-dev": ("i2c-dev", f"i2c-{i}", 89, i), "drm_dp_aux_dev": ("drm_dp_aux_dev",
                                                                      f"drm_dp_aux{i}", 237, i),
        "graphics": ("graphics", f"fb{i}", 29, i), "sound": ("sound", f"snd/pcmC{i}D0p", 116, i),
        "jack": ("input", f"input/event{i}", 13, 64 + i), "input": ("input", f"input/event{i}",
                                                                   13, 64 + i),
        "tty": ("tty", f"ttyS{i}" if i % 2 else f"ttyACM{i}", 4, 64 + i),
        "block": ("block", f"sd{'abcd'[i % 4]}{i % 3 or ''}", 8, i),
        "tpm": ("tpm", f"tpm{i}", 10, 224), "tpmrm": ("tpmrm", f"tpmrm{i}", 253, i),
        "rtc": ("rtc", f"rtc{i}", 250, i), "hidraw": ("hidraw", f"hidraw{i}", 240, i),
        "misc": ("misc", f"misc{i}", 10, 100 + i), "cec": ("cec", f"cec{i}", 242, i),
        "video4linux": ("video4linux", f"video{i}", 81, i),
        "watchdog": ("watchdog", f"watchdog{i}" if i else "watchdog", 247, i),
        # An older kernel's usb class: SUBSYSTEM=usb, no DEVTYPE, under its interface.
        "usbclass": ("usb", f"usb/hiddev{i}" if i % 2 else f"cdc-wdm{i}", 180, 96 + i),
        "ptp": ("ptp", f"ptp{i}", 246, i),
    }
    sub, name, major, minor = table[kind]
    short = name.rsplit("/", 1)[-1]
    where = f"{parent}/sound/card{i}/{short}" if kind in ("sound", "jack") else \
        f"{parent}/{sub}/{short}"
    return SysDevice(where, sub, None, {}, node=DevNode(name, "b" if sub == "block" else "c",
                                                        major, minor))


@st.composite
def machines(draw: st.DrawFn) -> tuple[Snapshot, Context]:
    devs: dict[str, SysDevice] = {}
    used: set[str] = set()

    def add(n: SysDevice) -> None:
        # A /dev name belongs to one device at a time.
        assert n.node is not None
        if n.node.name not in used and n.path not in devs:
            used.add(n.node.name)
            devs[n.path] = n

    nodes = st.lists(st.tuples(st.sampled_from(NODE_KINDS), st.integers(0, 3)), max_size=5)

    def maybe_net(path: str) -> None:
        # A network interface below some hardware, on any bus (rules: hardware.network-cards).
        if draw(st.integers(0, 3)) == 0:
            devs[f"{path}/net/eth0"] = SysDevice(f"{path}/net/eth0", "net", None, {})

    drivers = st.sampled_from([None, "drv", "drv"])
    for i in range(draw(st.integers(0, 5))):
        path = f"/devices/pci0000:00/0000:00:{i:02x}.0"
        cls = draw(st.sampled_from([0x030000, 0x040300, 0x060400, 0x010802, 0x0C0330, 0x020000]))
        devs[path] = SysDevice(path, "pci", draw(drivers), {"PCI_CLASS": f"{cls:X}",
                                                           "PCI_ID": "8086:1234"})
        maybe_net(path)
        for kind, idx in draw(nodes):
            add(node_dev(path, kind, idx))
    usb_serio: list[SerioEntry] = []
    for u in range(draw(st.integers(0, 3))):
        upath = f"/devices/pci0000:00/0000:00:14.0/usb1/1-{u + 1}"
        vendor, product = draw(st.sampled_from([("2548", "1002"), ("1234", "5678"),
                                                ("8087", "0026")]))
        devs[upath] = SysDevice(upath, "usb", "usb", {"DEVTYPE": "usb_device"},
                                {"idVendor": vendor.encode(), "idProduct": product.encode(),
                                 "bDeviceClass": draw(st.sampled_from([b"00", b"09"]))},
                                DevNode(f"bus/usb/001/{u + 2:03d}", "c", 189, u + 1))
        if draw(st.booleans()):
            usb_serio.append(SerioEntry("pulse8-cec", vendor, product))
        for k in range(draw(st.integers(0, 3))):
            ipath = f"{upath}/1-{u + 1}:1.{k}"
            drv = draw(st.sampled_from([None, "usbhid", "btusb", "usbfs", "cdc_acm", "hub"]))
            devs[ipath] = SysDevice(ipath, "usb", drv, {"DEVTYPE": "usb_interface",
                                                        "INTERFACE": "3/0/0"})
            if drv == "btusb" and draw(st.booleans()):
                hci = f"{ipath}/bluetooth/hci{k}"
                devs[hci] = SysDevice(hci, "bluetooth", None, {})
                add(node_dev(hci, "hidraw", k))
                for idx in draw(st.lists(st.integers(0, 6), max_size=2)):
                    add(node_dev(f"{hci}/{hci[-4:]}:1/0005:1234:5678.000{idx % 10}", "input",
                                 idx))  # a connected peripheral's input device
            maybe_net(ipath)
            for kind, idx in draw(nodes):
                add(node_dev(ipath, kind, idx))
    for p in range(draw(st.integers(0, 3))):
        path = f"/devices/platform/board.{p}"
        devs[path] = SysDevice(path, "platform", draw(drivers), {"MODALIAS": f"platform:b{p}"})
        maybe_net(path)
        for kind, idx in draw(nodes):
            add(node_dev(path, kind, idx))
    for idx in draw(st.lists(st.integers(0, 6), max_size=3)):
        # uinput's and uhid's devices: under /devices/virtual/, the Bluetooth stack's own.
        add(node_dev(f"/devices/virtual/input/input{idx}", "input", idx))
    ttys = sorted({d.node.name for d in devs.values() if d.node and d.subsystem == "tty"})
    console = tuple(draw(st.lists(st.sampled_from(ttys), max_size=2, unique=True))) if ttys \
        else ()
    blocks = sorted({d.node.name for d in devs.values() if d.node and d.node.type == "b"})
    roles: frozenset[str] | None
    if draw(st.booleans()) and blocks:
        roles = frozenset(draw(st.lists(st.sampled_from(blocks), max_size=3)))
    else:
        roles = draw(st.sampled_from([None, frozenset()]))
    modules = ("uhid",) if draw(st.booleans()) else ()
    ctx = Context(Facts(roles, None if roles is not None else "unreadable"),
                  MachineSpec(modules, tuple(usb_serio)))
    return Snapshot(devs, console), ctx


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines())
def test_invariants_hold_for_generated_machines(machine: tuple[Snapshot, Context]) -> None:
    snap, ctx = machine
    check_invariants(snap, ctx, build_inventory(snap, ctx))


@settings(max_examples=20, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["gpu", "hda", "hid", "bt", "tpm", "rtc", "disk", "wdt"]),
                max_size=6),
       st.booleans())
def test_invariants_hold_for_generated_trees_on_disk(tmp_path_factory: pytest.TempPathFactory,
                                                    parts: list[str], facts: bool) -> None:
    root = tmp_path_factory.mktemp("sys")
    b = SysfsBuilder(root)
    for i, part in enumerate(parts):
        b.part(part, i)
    snap = read_sysfs(root)
    roles = frozenset({"sda1", "sdc1"}) if facts else None
    ctx = Context(Facts(roles, None if facts else "unreadable"))
    check_invariants(snap, ctx, build_inventory(snap, ctx))


# Kernel block device names, plain and with the "!" the kernel's /dev name spells "/" (the
# Smart Array and DAC960 drivers' disks: cciss!c0d0 is /dev/cciss/c0d0, its partition
# cciss!c0d0p1 is /dev/cciss/c0d0p1). (disk's kernel name, partition's kernel name, major)
DISK_STYLES = {
    "sd": (lambda i: f"sd{'abcdefgh'[i]}", lambda i, p: f"sd{'abcdefgh'[i]}{p}", 8),
    "nvme": (lambda i: f"nvme{i}n1", lambda i, p: f"nvme{i}n1p{p}", 259),
    "cciss": (lambda i: f"cciss!c{i}d0", lambda i, p: f"cciss!c{i}d0p{p}", 104),
    "ida": (lambda i: f"ida!c{i}d0", lambda i, p: f"ida!c{i}d0p{p}", 72),
    "rd": (lambda i: f"rd!c{i}d0", lambda i, p: f"rd!c{i}d0p{p}", 48),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(DISK_STYLES)), min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(0, 3), st.integers(1, 2)), max_size=2),
       st.data())
def test_a_disk_backing_a_role_is_never_published_whatever_its_kernel_name(
        tmp_path_factory: pytest.TempPathFactory, styles: list[str],
        mapped: list[tuple[int, int]], data: st.DataObject) -> None:
    """rules: hardware.storage-role. Disks named as the kernel names them, plain (``sda1``)
    or with a ``!`` for the ``/`` of their /dev name (``cciss!c0d0p1``, /dev/cciss/c0d0p1),
    some under device-mapper devices built on a partition; init's facts tree on disk names
    roles by kernel name. A controller holding a role's disk or partition, or one beneath a
    role's mapped device, is the machine's and never published; every other one is offered."""
    root = tmp_path_factory.mktemp("m")
    b = SysfsBuilder(root / "sys")
    own: dict[str, set[str]] = {}  # controller's address -> kernel names of its disk, partitions
    parts: dict[str, Path] = {}
    for i, style in enumerate(styles):
        disk_name, part_name, major = DISK_STYLES[style]
        address = f"0000:0{i + 1}:00.0"
        ctrl = b.pci(address, driver=style, cls=0x010400)
        disk = b.node(ctrl, "block", disk_name(i), major, 16 * i, block=True,
                      devname=disk_name(i).replace("!", "/"), subdir="host0/block")
        own[address] = {disk_name(i)}
        for p in (1, 2):
            parts[part_name(i, p)] = b.dir(b.node(disk, "block", part_name(i, p), major,
                                                  16 * i + p, block=True,
                                                  devname=part_name(i, p).replace("!", "/")))
            own[address].add(part_name(i, p))
    slaves_of: dict[str, str] = {}
    for j, (i, p) in enumerate(mapped):
        if i >= len(styles):
            continue
        slave = DISK_STYLES[styles[i]][1](i, p)
        dm = b.node("/devices/virtual/block", "block", f"dm-{j}", 253, j, block=True)
        (b.dir(dm) / "slaves").mkdir()
        (b.dir(dm) / "slaves" / slave).symlink_to(parts[slave])
        slaves_of[f"dm-{j}"] = slave
    names = sorted(set().union(*own.values()) | set(slaves_of))
    roles = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=3))
    write_facts(root / "facts", roles, "none")
    facts = read_facts(root / "facts")
    assert facts.role_partitions == frozenset(roles)
    snap = read_sysfs(b.root)
    ctx = Context(facts)
    inv = build_inventory(snap, ctx)
    check_invariants(snap, ctx, inv)
    held = set(roles) | {slaves_of[r] for r in roles if r in slaves_of}
    published = {d.source.rsplit("/", 1)[-1] for d in inv.devices}
    for address, kernel in own.items():
        outcome = next(o for o in inv.outcomes if o.address == address)
        if held & kernel:
            assert address not in published, f"{address} holds a role in {held & kernel}"
            assert outcome.reason == "storage role", outcome
        else:
            assert address in published, outcome


# -- every real recording ------------------------------------------------------------------


@pytest.mark.parametrize("path", recording_params())
def test_invariants_hold_for_every_recording(path: Path) -> None:
    snap = load_recording(path)
    blocks = sorted(d.node.name for d in snap.devices.values() if d.node and d.node.type == "b")
    usbs = [d for d in snap.devices.values() if d.subsystem == "usb" and d.devtype == "usb_device"]
    serio = tuple(SerioEntry("pulse8-cec", *usb_ids(u)) for u in usbs[:2]  # type: ignore[arg-type]
                  if all(usb_ids(u)))
    for roles in (None, frozenset(), frozenset(blocks[::2])):
        ctx = Context(Facts(roles, None if roles is not None else "unreadable"),
                      MachineSpec(("uhid",), serio))
        check_invariants(snap, ctx, build_inventory(snap, ctx))


# -- hostile facts trees and composite USB devices -------------------------------------------

CORRUPTIONS = ["none", "dangling-storage", "looping-storage", "storage-file", "role-file",
               "role-without-device", "empty-device", "garbage-device", "dangling-device",
               "two-names"]


def write_facts(root: Path, roles: list[str], corruption: str) -> None:
    """A facts tree naming ``roles``, then broken as ``corruption`` says."""
    storage = root / "storage"
    if corruption in ("dangling-storage", "looping-storage", "storage-file"):
        root.mkdir(parents=True)
        if corruption == "storage-file":
            storage.write_text("\n".join(roles))
        else:
            storage.symlink_to(storage if corruption == "looping-storage" else root / "gone")
        return
    storage.mkdir(parents=True)
    for i, part in enumerate(roles):
        (storage / f"role{i}").mkdir()
        (storage / f"role{i}" / "device").write_text(part + "\n")
    bad = storage / "broken"
    if corruption == "role-file":
        bad.write_text("sda1\n")
    elif corruption == "role-without-device":
        bad.mkdir()
    elif corruption in ("empty-device", "garbage-device", "two-names"):
        bad.mkdir()
        (bad / "device").write_text({"empty-device": "", "garbage-device": "../sda\x00",
                                     "two-names": "sda1 sdb1"}[corruption])
    elif corruption == "dangling-device":
        bad.mkdir()
        (bad / "device").symlink_to(root / "gone")


@st.composite
def composite_usb_machines(draw: st.DrawFn) -> tuple[Snapshot, list[str], str]:
    """One or two composite USB devices whose interfaces hold disks, serial lines and HID."""
    devs: dict[str, SysDevice] = {}
    minor = 0
    for u in range(draw(st.integers(1, 2))):
        upath = f"/devices/pci0000:00/0000:00:14.0/usb1/1-{u + 1}"
        devs[upath] = SysDevice(upath, "usb", "usb", {"DEVTYPE": "usb_device"},
                                {"idVendor": b"0781", "idProduct": b"5581"},
                                DevNode(f"bus/usb/001/{u + 2:03d}", "c", 189, u + 1))
        kinds = draw(st.lists(st.sampled_from(["disk", "tty", "hid", "held", "none"]),
                              min_size=1, max_size=4))
        for k, kind in enumerate(kinds):
            ipath = f"{upath}/1-{u + 1}:1.{k}"
            driver = {"disk": "usb-storage", "tty": "cdc_acm", "hid": "usbhid",
                      "held": "usbfs", "none": None}[kind]
            devs[ipath] = SysDevice(ipath, "usb", driver, {"DEVTYPE": "usb_interface"})
            minor += 1
            if kind == "disk":
                letter = "abcdefgh"[minor % 8]
                disk = f"{ipath}/host0/block/sd{letter}"
                devs[disk] = SysDevice(disk, "block", None, {},
                                       node=DevNode(f"sd{letter}", "b", 8, 16 * minor))
                for p in (1, 2):
                    part = f"{disk}/sd{letter}{p}"
                    devs[part] = SysDevice(part, "block", None, {},
                                           node=DevNode(f"sd{letter}{p}", "b", 8, 16 * minor + p))
            elif kind == "tty":
                tty = f"{ipath}/tty/ttyACM{minor}"
                devs[tty] = SysDevice(tty, "tty", None, {},
                                      node=DevNode(f"ttyACM{minor}", "c", 166, minor))
            elif kind == "hid":
                raw = f"{ipath}/hidraw/hidraw{minor}"
                devs[raw] = SysDevice(raw, "hidraw", None, {},
                                      node=DevNode(f"hidraw{minor}", "c", 240, minor))
    parts = sorted(d.node.name for d in devs.values()
                   if d.node and d.node.type == "b" and d.node.name[-1].isdigit())
    ttys = sorted(d.node.name for d in devs.values() if d.subsystem == "tty" and d.node)
    console = tuple(draw(st.lists(st.sampled_from(ttys), max_size=1))) if ttys else ()
    roles = draw(st.lists(st.sampled_from(parts), unique=True)) if parts else []
    return Snapshot(devs, console), roles, draw(st.sampled_from(CORRUPTIONS))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(composite_usb_machines())
def test_no_claim_reaches_a_roles_disk_or_the_console_for_any_facts_tree_and_composite_device(
        machine: tuple[Snapshot, list[str], str]) -> None:
    """rules: hardware.facts-fail-closed, usb.machine-depends.
    whatever the facts tree on disk holds, and however a USB device's interfaces mix disks,
    serial lines, HID and programs, no claim reaches a role's disk or the console by any node
    (a published device's, or a held interface's usbfs)."""
    snap, roles, corruption = machine
    with tempfile.TemporaryDirectory() as tmp:
        write_facts(Path(tmp) / "facts", roles, corruption)
        facts = read_facts(Path(tmp) / "facts")
    if corruption != "none":
        assert not facts.readable, corruption
    else:
        assert facts.role_partitions == frozenset(roles)
    ctx = Context(facts)
    inv = build_inventory(snap, ctx)
    check_invariants(snap, ctx, inv)
    # The truth is the roles init meant, whatever the tree says.
    truth = Context(Facts(frozenset(roles)))
    check_machine_usb_devices(snap, truth if facts.readable else ctx, inv)
    reached = [n for d in inv.devices for n in d.nodes]
    reached += [n for nodes in inv.held.values() for n in nodes]
    for n in reached:
        assert n.name not in snap.console
        if n.type == "b":
            assert facts.readable and n.name not in roles
            assert not any(r.startswith(n.name) for r in roles)  # the disk holding a role
