"""A virtual input node goes to a radio's claim only when the tree proves it is that radio's
(rules: bluetooth.virtual-nodes).

The nodes BlueZ makes through uhid (a BLE keyboard) and uinput (a remote's keys) sit under
``/devices/virtual/``: nothing in sysfs links them to an hci, and their ``phys`` is a string the
creating process wrote (BlueZ writes the adapter's address). An address is not an identity:
clone CSR8510 dongles all report ``00:1a:7d:da:71:13``. So ``phys`` names an adapter only when
exactly one adapter of the node reports that address and every adapter's address is known; a
node whose ``phys`` names an address it cannot tie to one radio goes to no claim.

The unit cases on built trees, then hypothesis properties over generated trees with up to four
radios whose addresses collide or are unknown, and virtual devices with arbitrary ``phys``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.inventory import Context, Facts, MachineSpec, build_inventory
from liken_devices.inventory.model import Claimed, Inventory
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.views import explain_json
from tests.support.sysfs_builder import SysfsBuilder

CLONE = "00:1a:7d:da:71:13"  # every clone CSR8510's BD_ADDR
OTHER = "5c:f3:70:8a:11:22"
FIRST, SECOND = "usb-1-1-1-0", "usb-1-2-1-0"


def radio(b: SysfsBuilder, i: int, address: str | None) -> str:
    """Radio ``i`` on port 1-(i+1), its hci listing ``address`` (None: the attribute is absent,
    as on a recording of a kernel that no longer lists it)."""
    usb = b.usb_device(f"1-{i + 1}", devnum=i + 2, vendor="0a12", product="0001")
    iface = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    b.device(iface, f"hci{i}", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth",
             attrs={} if address is None else {"address": address})
    return f"usb-1-{i + 1}-1-0"


def virtual(b: SysfsBuilder, n: int, phys: str | None, *, uhid: bool = True) -> None:
    """A virtual input device holding event<n> (13:64+n): uhid's (a BLE peripheral) or
    uinput's, with ``PHYS`` as its uevent carries it (quoted), or none."""
    props = {"NAME": f'"virtual {n}"'}
    if phys is not None:
        props["PHYS"] = f'"{phys}"'
    if uhid:
        parent, subdir = f"/devices/virtual/misc/uhid/0005:04E8:7021.{n + 1:04X}", "input"
    else:
        parent, subdir = "/devices/virtual/input", None
    inp = b.device(parent, f"input{100 + n}", "input", props, subdir=subdir)
    b.node(inp, "input", f"event{n}", 13, 64 + n, devname=f"input/event{n}")


def inventory(root: Path, claimed: frozenset[str] = frozenset(),
              preparing: frozenset[str] = frozenset()) -> Inventory:
    return build_inventory(read_sysfs(root), Context(Facts(frozenset()), MachineSpec()),
                           claimed=Claimed(claimed, preparing))


def events(inv: Inventory, name: str) -> set[int]:
    return {n.minor for n in inv.by_name()[name].nodes if n.major == 13}


def test_a_shared_address_names_no_radio(tmp_path: Path) -> None:
    """Two clones at one address, tenant B's BLE keyboard at event8: in no claim, with two
    tenants, one, or none (offline), and explain says why."""
    b = SysfsBuilder(tmp_path)
    radio(b, 0, CLONE.upper())
    radio(b, 1, CLONE)
    virtual(b, 8, CLONE)
    for claimed in (frozenset({FIRST, SECOND}), frozenset({FIRST}), frozenset()):
        inv = inventory(tmp_path, claimed)
        assert 72 not in events(inv, FIRST) and 72 not in events(inv, SECOND)
        assert 73 in events(inv, FIRST) and 73 in events(inv, SECOND)
    (x,) = [x for x in inv.by_name()[FIRST].left_out if x.node.minor == 72]
    assert x.why() == (
        f"13:72 is /dev/input/event8, the node of a virtual input device whose phys {CLONE} is "
        f"the address of 2 Bluetooth adapters ({FIRST}, {SECOND}), so no claim gets it: which "
        "radio it came through cannot be proved")
    (o,) = [o for o in inv.outcomes if o.devices == (FIRST,)]
    assert "13:72 is /dev/input/event8" in o.detail
    assert [y["minor"] for y in explain_json(inv)["leftOut"][SECOND]] == [72]


def test_a_radio_of_unknown_address_leaves_no_proof(tmp_path: Path) -> None:
    """A second radio whose address the tree does not say may be a clone of the first: the
    node naming the first's address is proved the first's only once the second's is known."""
    b = SysfsBuilder(tmp_path)
    radio(b, 0, CLONE)
    radio(b, 1, None)
    virtual(b, 8, CLONE)
    inv = inventory(tmp_path, frozenset({FIRST, SECOND}))
    assert 72 not in events(inv, FIRST) and 72 not in events(inv, SECOND)
    (x,) = [x for x in inv.by_name()[FIRST].left_out if x.node.minor == 72]
    assert x.owner == (f"a virtual input device whose phys {CLONE} is this adapter's address, "
                       f"but the address of Bluetooth adapter {SECOND} is unknown, so no claim "
                       "gets it: which radio it came through cannot be proved")
    third = radio(b, 2, "00:00:00:00:00:00")  # a controller not set up yet: unknown too
    (x,) = [x for x in inventory(tmp_path).by_name()[FIRST].left_out if x.node.minor == 72]
    assert f"the address of Bluetooth adapters {SECOND}, {third} is unknown" in x.owner
    for i, address in ((1, OTHER), (2, "00:02:72:c1:d0:9e")):
        hci = next(tmp_path.glob(f"devices/**/hci{i}"))
        (hci / "address").write_text(address + "\n")
    inv = inventory(tmp_path, frozenset({FIRST, SECOND}))
    assert 72 in events(inv, FIRST) and 72 not in events(inv, SECOND)


# -- the class: ownership by address, over generated trees ---------------------------------------

POOL = (CLONE, OTHER, "00:02:72:c1:d0:9e")


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[str | None], list[tuple[int, str | None, bool]],
                                    frozenset[int], frozenset[int]]:
    """Radios (their hci's address: one of a small pool, so they collide; absent; all-zero),
    virtual devices (event number, phys, uhid or uinput) and which radios are claimed and which
    are being prepared."""
    radios = draw(st.lists(st.one_of(st.sampled_from(POOL), st.sampled_from(POOL).map(str.upper),
                                     st.none(), st.just("00:00:00:00:00:00")),
                           min_size=1, max_size=4))
    numbers = draw(st.lists(st.integers(0, 31), unique=True, max_size=6))
    phys = st.one_of(st.none(), st.just(""), st.sampled_from(POOL),
                     st.sampled_from(POOL).map(str.upper),
                     st.sampled_from(POOL).map(lambda a: f" {a} "),
                     st.from_regex(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}", fullmatch=True),
                     st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E,
                                           exclude_characters='"\\'), max_size=20))
    devices = [(n, draw(phys), draw(st.booleans())) for n in numbers]
    indexes = st.sets(st.integers(0, len(radios) - 1))
    return radios, devices, frozenset(draw(indexes)), frozenset(draw(indexes))


def known(address: str | None) -> str | None:
    """The oracle's reading of an hci's address: lowercase, the all-zero one unknown."""
    if address is None or address == "00:00:00:00:00:00":
        return None
    return address.lower()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_no_virtual_number_goes_to_two_claims_nor_to_a_radio_not_proved_its_owner(
        tree: tuple[list[str | None], list[tuple[int, str | None, bool]], frozenset[int],
                    frozenset[int]]) -> None:
    addresses, devices, held, preparing = tree
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        b = SysfsBuilder(root)
        names = [radio(b, i, a) for i, a in enumerate(addresses)]
        for n, phys, uhid in devices:
            virtual(b, n, phys, uhid=uhid)
        claimed = frozenset(names[i] for i in held)
        counted = claimed | frozenset(names[i] for i in preparing)
        inv = inventory(root, claimed, frozenset(names[i] for i in preparing) - claimed)
    address_of = [known(a) for a in addresses]
    all_known = all(a is not None for a in address_of)
    for n, phys, _ in devices:
        minor = 64 + n
        to = {name for name in names if minor in events(inv, name)}
        # No virtual event number is ever delivered to two claims.
        assert len(to & counted) <= 1, (n, phys, to, counted)
        p = (phys or "").strip().lower()
        holders = [names[i] for i, a in enumerate(address_of) if p and a == p]
        if holders:
            # It names an address: only the one radio the tree proves its owner gets it.
            proved = holders[0] if len(holders) == 1 and all_known else None
            assert to <= {proved}, (n, phys, to, holders, address_of)
            if proved is not None:
                assert to == {proved}  # and that radio keeps it
        elif len(counted) >= 2:
            # It names none: in no claim once two tenants are on the node.
            assert not to & counted, (n, phys, to, counted)
