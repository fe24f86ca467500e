"""Topology attributes (inventory/attributes.py): the PCIe root and the NUMA node of every device
of a PCI function, and none on USB devices.

rules: attributes.topology, attributes.usb-no-topology

Trees are built on disk with the builder and read through the real sysfs reader; the corpus's
recordings with several PCI roots are read as recordings; generated trees state the rule.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.inventory import Context, Facts, Inventory, MachineSpec
from liken_devices.inventory.limits import DRIVER, MAX_ATTRIBUTES
from liken_devices.inventory.policy import build_inventory
from liken_devices.slices import devices_json, make_slice, validate_slice
from liken_devices.sysfs.model import Snapshot
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import load_recording
from tests.support.corpus import recording, recordings
from tests.support.sysfs_builder import SysfsBuilder

from .support import Scan, dev, hid_interface

ROOT = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"


def test_every_device_of_a_pci_function_carries_its_root_and_numa_node(
        b: SysfsBuilder, scan: Scan) -> None:
    """The render, -display and -i2c-dev halves of a GPU behind a bridge on root pci0000:3a all
    carry that root and the function's NUMA node, as an int."""
    bridge = b.pci("0000:3a:00.0", driver="pcieport", cls=0x060400)
    gpu = b.gpu("0000:3b:00.0", parent=bridge, numa_node="1")
    b.node(gpu, "i2c-dev", "i2c-3", 89, 3, subdir="i2c-3/i2c-dev")
    inv = scan()
    names = ["pci-0000-3b-00-0", "pci-0000-3b-00-0-display", "pci-0000-3b-00-0-i2c-dev"]
    assert sorted(d.name for d in inv.devices) == names
    for name in names:
        a = dev(inv, name).attributes
        assert a[ROOT] == "pci0000:3a", name
        assert a[NUMA] == 1 and not isinstance(a[NUMA], bool), name


def test_numa_node_minus_one_or_unreadable_is_absent(b: SysfsBuilder, scan: Scan) -> None:
    """The kernel's -1 (no NUMA), a missing file and garbage leave numaNode out; the root stays."""
    b.gpu("0000:00:02.0", card=0, render=128, numa_node="-1")
    b.gpu("0000:01:00.0", card=1, render=129)  # no numa_node file
    b.gpu("0000:02:00.0", card=2, render=130, numa_node="zero")
    b.gpu("0000:03:00.0", card=3, render=131, numa_node="4096")  # more nodes than Linux has
    b.gpu("0000:04:00.0", card=4, render=132, numa_node="0")
    inv = scan()
    for d in inv.devices:
        assert d.attributes[ROOT] == "pci0000:" + d.attributes["address"][5:7], d.name
        if d.name.startswith("pci-0000-04-"):
            assert d.attributes[NUMA] == 0, d.name
        else:
            assert NUMA not in d.attributes, d.name


def test_usb_devices_behind_a_pci_controller_carry_no_topology(b: SysfsBuilder,
                                                               scan: Scan) -> None:
    """An interface and a whole device on the xHCI controller of root pci0000:00 (NUMA node 0)
    carry neither attribute: they are no PCIe function (rules: attributes.usb-no-topology)."""
    b.pci("0000:00:14.0", driver="xhci_hcd", cls=0x0C0330, numa_node="0")
    usb = b.usb_device("1-2")
    hid_interface(b, usb)
    b.usb_device("1-3", devnum=3)  # no interface driven: published whole
    inv = scan()
    assert sorted(d.name for d in inv.devices) == ["usb-1-2-1-0", "usb-1-3"]
    for d in inv.devices:
        assert ROOT not in d.attributes and NUMA not in d.attributes, d


def test_a_pci_function_outside_a_pci_root_directory_has_no_root(b: SysfsBuilder,
                                                                 scan: Scan) -> None:
    """A function whose path does not start at a ``pci<domain>:<bus>`` directory under /devices
    (a host bridge that is a platform device, as on many ARM boards) gets no pcieRoot, as the
    peers' Go helper gives none; its NUMA node is still stated."""
    host = b.device(None, "platform", None)
    soc = b.device(host, "fd500000.pcie", "platform", driver="brcm-pcie")
    root = b.device(soc, "pci0000:00", None)
    b.gpu("0000:00:02.0", parent=root, numa_node="0")  # type: ignore[arg-type]
    inv = scan()
    d = dev(inv, "pci-0000-00-02-0")
    assert ROOT not in d.attributes and d.attributes[NUMA] == 0


# -- generated trees -------------------------------------------------------------------------

NUMA_TEXTS = st.one_of(st.none(), st.integers(-1, 1023).map(str),
                       st.sampled_from(["-2", "1024", "x", "", "0x1", " 1", "01",
                                        "99999999999999999999"]))


def expected_numa(text: str | None) -> int | None:
    """The rule read plainly: a decimal number from 0 to 1023 (the most nodes Linux has)."""
    if text is None or not re.fullmatch(r"0|[1-9][0-9]*", text.strip()):
        return None
    n = int(text)
    return n if n < 1024 else None


def check_topology(snap: Snapshot, inv: Inventory) -> None:
    for d in inv.devices:
        a = d.attributes
        assert len(a) <= MAX_ATTRIBUTES, d
        if a.get("bus") != "pci":
            assert ROOT not in a and NUMA not in a, d
            continue
        first = d.source.split("/")[2]
        assert a.get(ROOT) == (first if first.startswith("pci") else None), d
        text = snap.devices[d.source].attr("numa_node")
        assert a.get(NUMA) == expected_numa(text), (d, text)
    assert validate_slice(make_slice("node-1", DRIVER, devices_json(inv))) == []


@st.composite
def pci_trees(draw: st.DrawFn) -> list[tuple[str, str, str | None, bool]]:
    """(root, function address, numa_node text, behind a bridge) for a few GPUs, and a USB
    controller with a HID device on the first root."""
    roots = draw(st.lists(st.tuples(st.sampled_from(["0000", "0001", "10000"]),
                                    st.sampled_from(["00", "17", "3a", "80", "d7"])),
                          min_size=1, max_size=3, unique=True))
    out = []
    for i in range(draw(st.integers(1, 4))):
        domain, bus = draw(st.sampled_from(roots))
        out.append((f"pci{domain}:{bus}", f"{domain}:{int(bus, 16) + i + 1:02x}:00.0",
                    draw(NUMA_TEXTS), draw(st.booleans())))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pci_trees(), NUMA_TEXTS)
def test_generated_trees_state_root_and_numa_node_from_the_path_and_numa_node(
        tree: list[tuple[str, str, str | None, bool]], hc_numa: str | None) -> None:
    """Property: every device of a PCI function has pcieRoot equal to the first component under
    /devices and numaNode exactly when numa_node is a node number; no USB device has either."""
    with tempfile.TemporaryDirectory() as tmp:
        b = SysfsBuilder(Path(tmp) / "sys")
        first_root = tree[0][0]
        hc = b.pci(first_root[3:] + ":00.1", driver="xhci_hcd", cls=0x0C0330,
                   parent=b.device(None, first_root, None), numa_node=hc_numa)  # type: ignore
        hid_interface(b, b.usb_device("1-2", parent=hc))
        for i, (root, address, numa, bridged) in enumerate(tree):
            parent = b.device(None, root, None)
            if bridged:
                parent = b.pci(f"{root[3:]}:{i:02x}.0", driver="pcieport", cls=0x060400,
                               parent=parent)  # type: ignore[arg-type]
            b.gpu(address, card=i, render=128 + i, parent=parent,  # type: ignore[arg-type]
                  numa_node=numa)
        snap = read_sysfs(b.root)
        inv = build_inventory(snap, Context(Facts(frozenset()), MachineSpec()))
        assert any(d.attributes.get("bus") == "usb" for d in inv.devices)
        assert sum(d.attributes.get("bus") == "pci" for d in inv.devices) >= 2 * len(tree)
        check_topology(snap, inv)


# -- the corpus ------------------------------------------------------------------------------


def corpus_inventory(path: Path) -> tuple[Snapshot, Inventory]:
    snap = load_recording(path)
    return snap, build_inventory(snap, Context(Facts(frozenset()), MachineSpec()))


def test_every_recording_states_topology_by_the_rule() -> None:
    found = recordings()
    if not found:
        recording("hwloc-32intel64-2p8co2t+8ve.umockdev")  # skips, naming the folder
    for path in found:
        check_topology(*corpus_inventory(path))


def test_recordings_with_several_pci_roots() -> None:
    """The eight VE cards of a two-socket server sit on two roots, all on NUMA node 0; the
    coprocessor of the dual-node machine is on root pci0000:80, node 1, and its USB devices
    (behind a controller with a NUMA node) carry neither attribute."""
    _, inv = corpus_inventory(recording("hwloc-32intel64-2p8co2t+8ve.umockdev"))
    roots = {d.name: d.attributes[ROOT] for d in inv.devices}
    assert roots == {**{f"pci-0000-{b}-00-0": "pci0000:17" for b in ("1b", "1c", "1d", "1e")},
                     **{f"pci-0000-{b}-00-0": "pci0000:3a" for b in ("3d", "3f", "40", "41")}}
    assert {d.attributes[NUMA] for d in inv.devices} == {0}
    _, inv = corpus_inventory(recording("hwloc-32em64t-2n8c+dax+nvme+mic+dimms.umockdev"))
    by = inv.by_name()
    assert by["pci-0000-83-00-0"].attributes[ROOT] == "pci0000:80"
    assert by["pci-0000-83-00-0"].attributes[NUMA] == 1
    usb = [d for d in inv.devices if d.attributes["bus"] == "usb"]
    assert usb and all(ROOT not in d.attributes and NUMA not in d.attributes for d in usb)
