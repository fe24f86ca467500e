"""Sharing (inventory/sharing.py), through the whole policy: one device per kind of node, the GPU
split, the render half the one shareable device, an unknown mix whole, a sound card with its
jacks, a serial line's -cec and -input.

rules: sharing.one-device-per-kind, sharing.gpu-split, sharing.render-shared
rules: sharing.display-only, sharing.unknown-mix, sharing.sound-card, serial.cec-and-input

Trees are built on disk with the builder and read through the real sysfs reader; each published
attribute written out is in test_sharing_rules.py.
"""

from __future__ import annotations

from liken_devices.inventory import MachineSpec
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


def test_gpu_with_unknown_mix_is_whole_and_exclusive(b: SysfsBuilder, scan: Scan) -> None:
    """rules: sharing.unknown-mix. A GPU that also holds another kind of node is an unknown mix."""
    gpu = b.gpu()
    b.node(gpu, "misc", "accel0", 10, 99, subdir="misc")
    inv = scan()
    assert names(inv) == ["pci-0000-00-02-0"]
    d = dev(inv, "pci-0000-00-02-0")
    assert not d.shareable and "subsystem" not in d.attributes
    assert "renderNode" not in d.attributes and "displayNode" not in d.attributes
    assert len(d.nodes) == 3


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

