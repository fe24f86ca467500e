"""Sharing (inventory/sharing.py), through the whole policy: one device per kind of node, the GPU
split, the render half the one shareable device, an unknown mix whole, a sound card with its
jacks, a serial line's -cec and -input.

rules: sharing.one-device-per-kind, sharing.gpu-split, sharing.render-shared
rules: sharing.display-only, sharing.unknown-mix, sharing.sound-card, serial.cec-and-input
rules: sharing.gpu-cec, sharing.gpu-unnamed-kind

Trees are built on disk with the builder and read through the real sysfs reader; each published
attribute written out is in test_sharing_rules.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from liken_devices.inventory import Context, Facts, MachineSpec, build_inventory
from liken_devices.sysfs.model import DevNode, Snapshot, SysDevice
from tests.support.sysfs_builder import SysfsBuilder

from .support import PULSE8, Scan, cec_adapter, dev, hid_interface, names, paths


def test_gpu_splits_render_shared_and_display_exclusive(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: the render node is the one shareable device; the card node is -display."""
    gpu = b.gpu()
    b.node(gpu, "i2c-dev", "i2c-3", 89, 3, subdir="i2c-3/i2c-dev")
    aux = b.device(gpu, "card0-DP-1", "drm", subdir="drm/card0")
    b.node(aux, "drm_dp_aux_dev", "drm_dp_aux0", 237, 0)
    fb = b.node(gpu, "graphics", "fb0", 29, 0, subdir="graphics")
    del fb
    inv = scan()
    assert names(inv) == ["pci-0000-00-02-0", "pci-0000-00-02-0-display",
                          "pci-0000-00-02-0-drm-dp-aux-dev", "pci-0000-00-02-0-i2c-dev"]
    render = dev(inv, "pci-0000-00-02-0")
    assert render.shareable and render.attributes["renderNode"] is True
    assert paths(inv, "pci-0000-00-02-0") == ["/dev/dri/renderD128"]
    display = dev(inv, "pci-0000-00-02-0-display")
    assert not display.shareable and display.attributes["displayNode"] is True
    assert paths(inv, "pci-0000-00-02-0-display") == ["/dev/dri/card0"]
    assert dev(inv, "pci-0000-00-02-0-i2c-dev").attributes["subsystem"] == "i2c-dev"
    assert dev(inv, "pci-0000-00-02-0-drm-dp-aux-dev").attributes["subsystem"] == \
        "drm_dp_aux_dev"
    # The framebuffer is not delivered by any device.
    assert all(n.name != "fb0" for d in inv.devices for n in d.nodes)
    # Every device of the card carries the card's address, so matchAttribute pairs them.
    assert {d.attributes["address"] for d in inv.devices} == {"0000:00:02.0"}


def test_gpu_without_render_node_publishes_only_display(b: SysfsBuilder, scan: Scan) -> None:
    """rules: sharing.display-only. A GPU with a card but no render node: only -display."""
    b.gpu(render=None)
    assert names(scan()) == ["pci-0000-00-02-0-display"]


def test_an_i915_with_a_dp_cec_adapter_keeps_its_shared_render_node(b: SysfsBuilder,
                                                                    scan: Scan) -> None:
    """rules: sharing.gpu-cec. i915's DP-CEC adapter (``.../0000:00:02.0/cec0``) is its own
    exclusive -cec device; the render half stays shared and alone, -display as without it, and
    the CEC remote's event node is -input (rules: sharing.gpu-unnamed-kind)."""
    gpu = b.gpu()
    b.dp_cec(gpu)
    inv = scan()
    assert names(inv) == ["pci-0000-00-02-0", "pci-0000-00-02-0-cec",
                          "pci-0000-00-02-0-display", "pci-0000-00-02-0-drm-dp-aux-dev",
                          "pci-0000-00-02-0-i2c-dev", "pci-0000-00-02-0-input"]
    render = dev(inv, "pci-0000-00-02-0")
    assert render.shareable and render.attributes["renderNode"] is True
    assert paths(inv, "pci-0000-00-02-0") == ["/dev/dri/renderD128"]
    cec = dev(inv, "pci-0000-00-02-0-cec")
    assert not cec.shareable and cec.attributes["subsystem"] == "cec"
    assert paths(inv, "pci-0000-00-02-0-cec") == ["/dev/cec0"]
    assert paths(inv, "pci-0000-00-02-0-display") == ["/dev/dri/card0"]
    assert paths(inv, "pci-0000-00-02-0-i2c-dev") == ["/dev/i2c-3", "/dev/i2c-6"]
    remote = dev(inv, "pci-0000-00-02-0-input")
    assert not remote.shareable and remote.attributes["subsystem"] == "input"
    assert paths(inv, "pci-0000-00-02-0-input") == ["/dev/input/event7"]
    assert [d.name for d in inv.devices if d.shareable] == ["pci-0000-00-02-0"]


def test_an_unnamed_kind_under_a_gpu_is_its_own_exclusive_device(b: SysfsBuilder,
                                                                  scan: Scan) -> None:
    """rules: sharing.gpu-unnamed-kind. A kind of node the split does not name goes to an
    exclusive device of its own, ``-<subsystem>``; the render node stays shared and alone. A
    node filed under no subsystem has no name to go by and is left out, and explain says so."""
    gpu = b.gpu()
    b.node(gpu, "accel", "accel0", 261, 0, devname="accel/accel0", subdir="accel")
    b.node(gpu, "mei", "mei1", 235, 1, subdir="i915.mei-gsc.768/mei")
    nameless = b.dir(gpu) / "mystery0"
    nameless.mkdir()
    (nameless / "uevent").write_text("MAJOR=250\nMINOR=9\nDEVNAME=mystery0\n")
    (nameless / "dev").write_text("250:9\n")
    (b.root / "dev" / "char" / "250:9").symlink_to("../../devices/pci0000:00/0000:00:02.0/"
                                                    "mystery0")
    inv = scan()
    assert names(inv) == ["pci-0000-00-02-0", "pci-0000-00-02-0-accel",
                          "pci-0000-00-02-0-display", "pci-0000-00-02-0-mei"]
    assert paths(inv, "pci-0000-00-02-0") == ["/dev/dri/renderD128"]
    assert dev(inv, "pci-0000-00-02-0").shareable
    for name, subsystem, node in (("pci-0000-00-02-0-accel", "accel", "/dev/accel/accel0"),
                                  ("pci-0000-00-02-0-mei", "mei", "/dev/mei1")):
        d = dev(inv, name)
        assert not d.shareable and d.attributes["subsystem"] == subsystem
        assert "renderNode" not in d.attributes and paths(inv, name) == [node]
    assert all(n.name != "mystery0" for d in inv.devices for n in d.nodes)
    [o] = [o for o in inv.outcomes if o.address == "0000:00:02.0"]
    assert "/dev/mystery0" in o.detail and "left out" in o.detail


def test_audio_controller_delivers_jack_inputs_and_is_exclusive(b: SysfsBuilder,
                                                                 scan: Scan) -> None:
    """Sharing: an audio controller's claim delivers the card's subtree, jack inputs included."""
    b.hda(jacks=3)
    inv = scan()
    d = dev(inv, "pci-0000-00-1f-3")
    assert not d.shareable
    assert d.attributes["subsystem"] == "sound"
    assert d.attributes["sound.liken.sh/supportsSound"] is True
    assert {"/dev/snd/controlC0", "/dev/snd/pcmC0D0p", "/dev/input/event20",
            "/dev/input/event22"} <= set(paths(inv, "pci-0000-00-1f-3"))


def test_unknown_mix_is_whole_exclusive_without_subsystem(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: a device that delivers a mix liken has no name for is published whole."""
    usb = b.usb_device("1-3")
    iface = b.usb_interface(usb, driver="uvcvideo", cls=0x0E)
    b.node(iface, "video4linux", "video0", 81, 0, subdir="video4linux")
    inp = b.device(iface, "input9", "input", subdir="input")
    b.node(inp, "input", "event9", 13, 73, devname="input/event9")
    inv = scan()
    d = dev(inv, "usb-1-3-1-0")
    assert "subsystem" not in d.attributes and not d.shareable
    assert paths(inv, "usb-1-3-1-0") == ["/dev/input/event9", "/dev/video0",
                                         "/dev/bus/usb/001/002"]


def test_one_kind_of_node_is_one_device_with_its_subsystem(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: a device that delivers one kind of node publishes as one device."""
    usb = b.usb_device("1-4")
    iface = b.usb_interface(usb, driver="cdc_acm", cls=2)
    b.node(iface, "tty", "ttyACM0", 166, 0, subdir="tty")
    inv = scan()
    assert dev(inv, "usb-1-4-1-0").attributes["subsystem"] == "tty"


def test_only_render_devices_are_shareable(b: SysfsBuilder, scan: Scan) -> None:
    """Sharing: liken publishes allowMultipleAllocations for one kind: the graphics half."""
    b.gpu()
    b.hda()
    hid_interface(b, b.usb_device("1-2"))
    inv = scan()
    assert [d.name for d in inv.devices if d.shareable] == ["pci-0000-00-02-0"]


def test_serial_line_after_attachment_publishes_cec_and_input(b: SysfsBuilder,
                                                               scan: Scan) -> None:
    """Serial-line adapters: -cec and -input, both exclusive, no usbfs, no bare name."""
    cec_adapter(b, attached=True)
    inv = scan(machine=MachineSpec(serio=(PULSE8,)))
    assert names(inv) == ["usb-1-5-1-0-cec", "usb-1-5-1-0-input", "usb-1-5-1-2"]
    assert paths(inv, "usb-1-5-1-0-cec") == ["/dev/cec0"]
    assert paths(inv, "usb-1-5-1-0-input") == ["/dev/input/event30"]
    assert dev(inv, "usb-1-5-1-0-cec").attributes["subsystem"] == "cec"
    assert dev(inv, "usb-1-5-1-0-input").attributes["subsystem"] == "input"
    # The adapter's other interfaces keep their devices, without the usbfs node.
    assert paths(inv, "usb-1-5-1-2") == ["/dev/hidraw4"]
    assert not any(d.shareable for d in inv.devices)
    assert {d.attributes["address"] for d in inv.devices} == {"1-5:1.0", "1-5:1.2"}



# Kinds of node a GPU's subtree may hold besides its DRM nodes: the named ones, real unnamed ones,
# and names that mimic the split's own words ("render", "card", "display", "i2c_dev").
EXTRA_SUBSYSTEMS = ["cec", "i2c-dev", "drm_dp_aux_dev", "input", "misc", "accel", "mei", "sound",
                    "video4linux", "hidraw", "ptp", "drm", "render", "card", "display", "i2c_dev",
                    "unknown", "mix", None]
GPU = "/devices/pci0000:00/0000:00:02.0"


@st.composite
def gpu_subtrees(draw: st.DrawFn) -> Snapshot:
    """An i915 with a render node, maybe a card node, and up to six nodes of drawn kinds, some
    named like render nodes, at drawn depths under the GPU."""
    devs = {GPU: SysDevice(GPU, "pci", "i915", {"PCI_CLASS": "30000", "PCI_ID": "8086:46A6"})}

    def add(path: str, subsystem: str | None, name: str, minor: int) -> None:
        devs[path] = SysDevice(path, subsystem, None, {}, node=DevNode(name, "c", 200, minor))

    add(f"{GPU}/drm/renderD128", "drm", "dri/renderD128", 128)
    if draw(st.booleans()):
        add(f"{GPU}/drm/card0", "drm", "dri/card0", 0)
    kinds = st.one_of(st.sampled_from(EXTRA_SUBSYSTEMS), st.from_regex(r"[a-z][a-z0-9_]{0,11}",
                                                                       fullmatch=True))
    for i in range(draw(st.integers(0, 6))):
        sub = draw(kinds)
        if sub in ("graphics", "usbmon", "tpm", "tpmrm", "rtc", "watchdog", "tty", "block"):
            sub = "misc"  # withheld or reserved kinds have rules of their own
        base = draw(st.sampled_from([f"renderD{129 + i}", f"card{1 + i}", f"node{i}"]))
        name = (f"dri/{base}" if sub == "drm" else base)
        where = draw(st.sampled_from(["", f"/{sub or 'x'}", f"/drm/card0/card0-DP-{i}",
                                      f"/rc/rc{i}/input{i}"]))
        add(f"{GPU}{where}/{base}", sub, name, 300 + i)
    return Snapshot(devs)


@settings(max_examples=300, deadline=None)
@given(gpu_subtrees())
def test_a_gpus_render_node_is_shared_and_alone_whatever_else_it_holds(snap: Snapshot) -> None:
    """rules: sharing.gpu-unnamed-kind, sharing.render-shared. Whatever other kinds of node a
    GPU holds, its render node is published, shared, alone in the bare-named device; every other
    node is in exactly one exclusive device named after the GPU's address, or left out and
    said so."""
    inv = build_inventory(snap, Context(Facts(frozenset())))
    [shared] = [d for d in inv.devices if d.shareable]
    assert shared.name == "pci-0000-00-02-0" and shared.attributes["renderNode"] is True
    render = {x.node for x in snap.devices.values() if x.subsystem == "drm" and x.node
              and x.node.name.startswith("dri/renderD")}
    assert set(shared.nodes) == render
    delivered = [n for d in inv.devices for n in d.nodes]
    assert len(delivered) == len(set(delivered)), "a node is in two devices"
    # Every other node is delivered by one device, or left out with explain saying so: one of
    # no subsystem, or one whose kind would take a name another part of the GPU has.
    nodes = {x.node for x in snap.devices.values() if x.node}
    assert set(delivered) <= nodes
    [o] = inv.outcomes
    for n in nodes - set(delivered):
        assert f"{n.path} (" in o.detail and "left out" in o.detail, (n, o.detail)
    spelled: dict[str, set[str]] = {}
    for x in snap.devices.values():
        if x.node and x.subsystem and x.subsystem != "drm":
            spelled.setdefault(x.subsystem.replace("_", "-"), set()).add(x.subsystem)
    for x in snap.devices.values():
        if x.node and x.subsystem and (x.subsystem == "drm" or (
                len(spelled[x.subsystem.replace("_", "-")]) == 1 and x.subsystem != "display")):
            assert x.node in delivered, f"{x.node} of a kind of its own is left out"
    for d in inv.devices:
        assert d.name == "pci-0000-00-02-0" or (d.name.startswith("pci-0000-00-02-0-")
                                                and not d.shareable), d.name
    assert len({d.name for d in inv.devices}) == len(inv.devices)
