"""Sharing (rules: sharing.gpu-split, sharing.unknown-mix, sharing.gpu-unnamed-kind), each
published attribute literally.

A GPU splits into its render node (the one shareable device, ``subsystem: "drm"``,
``renderNode: true``), its card node (``-display``, exclusive, ``subsystem: "drm"``,
``displayNode: true``), its i2c buses and DP AUX channels (each with its own subsystem); a
device with one kind of node publishes it with that subsystem; a GPU's CEC adapter and every
other kind of node it holds are exclusive devices of their own (``-<subsystem>``); any other mix
is published whole, exclusive and without subsystem. A device a matcher selects by
``subsystem`` must carry it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from liken_devices.inventory import Context, Facts, Inventory, MachineSpec, build_inventory
from liken_devices.inventory.sharing import split
from liken_devices.sysfs.model import DevNode, SysDevice
from liken_devices.sysfs.reader import read_sysfs
from tests.support.sysfs_builder import SysfsBuilder


@pytest.fixture
def b(tmp_path: Path) -> SysfsBuilder:
    return SysfsBuilder(tmp_path / "sys")


def scan(b: SysfsBuilder) -> Inventory:
    return build_inventory(read_sysfs(b.root), Context(Facts(frozenset()), MachineSpec()))


def published(inv: Inventory) -> dict[str, tuple[bool, dict[str, object], list[str]]]:
    """name -> (shareable, the sharing attributes, node paths)."""
    keys = ("subsystem", "renderNode", "displayNode", "sound.liken.sh/supportsSound")
    return {d.name: (d.shareable, {k: d.attributes[k] for k in keys if k in d.attributes},
                     [n.path for n in d.nodes]) for d in inv.devices}


def test_the_display_half_is_drm_exclusive_and_a_display_node(b: SysfsBuilder) -> None:
    b.gpu()
    assert published(scan(b)) == {
        "pci-0000-00-02-0": (True, {"subsystem": "drm", "renderNode": True},
                             ["/dev/dri/renderD128"]),
        "pci-0000-00-02-0-display": (False, {"subsystem": "drm", "displayNode": True},
                                     ["/dev/dri/card0"]),
    }


def test_a_gpu_with_only_a_render_node_is_still_the_shared_render_device(
        b: SysfsBuilder) -> None:
    gpu = b.pci("0000:00:02.0", driver="i915", cls=0x030000)
    b.node(gpu, "drm", "renderD128", 226, 128, devname="dri/renderD128", subdir="drm")
    assert published(scan(b)) == {
        "pci-0000-00-02-0": (True, {"subsystem": "drm", "renderNode": True},
                             ["/dev/dri/renderD128"]),
    }


def test_a_gpus_legacy_control_node_is_display_authority(b: SysfsBuilder) -> None:
    gpu = b.gpu(render=None)
    b.node(gpu, "drm", "controlD64", 226, 64, devname="dri/controlD64", subdir="drm")
    assert published(scan(b)) == {
        "pci-0000-00-02-0-display": (False, {"subsystem": "drm", "displayNode": True},
                                     ["/dev/dri/card0", "/dev/dri/controlD64"]),
    }


def test_i2c_and_dp_aux_publish_with_their_own_subsystem(b: SysfsBuilder) -> None:
    gpu = b.gpu(render=None)
    b.node(gpu, "i2c-dev", "i2c-3", 89, 3, subdir="i2c-3/i2c-dev")
    aux = b.device(gpu, "card0-DP-1", "drm", subdir="drm/card0")
    b.node(aux, "drm_dp_aux_dev", "drm_dp_aux0", 237, 0)
    got = published(scan(b))
    assert got["pci-0000-00-02-0-i2c-dev"] == (False, {"subsystem": "i2c-dev"}, ["/dev/i2c-3"])
    assert got["pci-0000-00-02-0-drm-dp-aux-dev"] == (False, {"subsystem": "drm_dp_aux_dev"},
                                                      ["/dev/drm_dp_aux0"])
    assert got["pci-0000-00-02-0-display"][:2] == (False, {"subsystem": "drm",
                                                           "displayNode": True})


def test_a_sound_card_is_one_exclusive_sound_device(b: SysfsBuilder) -> None:
    b.hda(jacks=1)
    assert published(scan(b)) == {
        "pci-0000-00-1f-3": (False, {"subsystem": "sound", "sound.liken.sh/supportsSound": True},
                             ["/dev/input/event20", "/dev/snd/controlC0", "/dev/snd/pcmC0D0p"]),
    }


def _dev(path: str, subsystem: str | None, name: str, major: int, minor: int) -> SysDevice:
    return SysDevice(path=path, subsystem=subsystem, driver=None, props={},
                     node=DevNode(name, "c", major, minor))


def test_split_by_literal_cases() -> None:
    """The function itself, on hand-made devices: one case per branch."""
    gpu = "/devices/pci0000:00/0000:00:02.0/drm"
    render = _dev(f"{gpu}/renderD128", "drm", "dri/renderD128", 226, 128)
    card = _dev(f"{gpu}/card0", "drm", "dri/card0", 226, 0)
    other = _dev(f"{gpu}/x", "drm", "dri/by-path", 226, 200)  # drm, neither render nor card
    misc = _dev("/devices/pci0000:00/0000:00:02.0/misc/accel0", "misc", "accel0", 10, 99)
    cec = _dev("/devices/pci0000:00/0000:00:02.0/cec0", "cec", "cec0", 242, 0)
    tty = _dev("/devices/platform/serial8250/tty/ttyS0", "tty", "ttyS0", 4, 64)
    nameless = _dev("/devices/platform/x/y", None, "y", 240, 0)

    def shape(parts: list[SysDevice], serial: bool = False) -> list[tuple[object, ...]]:
        got = split(parts, serial)
        return [(s.suffix, s.kind, s.extra, s.shareable) for s in got.devices]

    assert shape([card, render]) == [
        ("", "render", {"subsystem": "drm", "renderNode": True}, True),
        ("-display", "display", {"subsystem": "drm", "displayNode": True}, False)]
    # A GPU's CEC adapter and any kind the split does not name: exclusive, of their own; a
    # bare drm node too (rules: sharing.gpu-cec, sharing.gpu-unnamed-kind).
    assert shape([render, misc, cec]) == [
        ("", "render", {"subsystem": "drm", "renderNode": True}, True),
        ("-cec", "cec", {"subsystem": "cec"}, False),
        ("-misc", "misc", {"subsystem": "misc"}, False)]
    assert shape([card, other]) == [
        ("-display", "display", {"subsystem": "drm", "displayNode": True}, False),
        ("-drm", "drm", {"subsystem": "drm"}, False)]
    got = split([render, _dev(f"{gpu}/y", None, "y", 240, 1)], False)
    assert [s.kind for s in got.devices] == ["render"]
    assert got.left_out == ["/dev/y (a node of no subsystem)"]
    i2c = _dev("/devices/pci0000:00/0000:00:02.0/i2c-3/i2c-dev/i2c-3", "i2c-dev", "i2c-3", 89, 3)
    aux = _dev(f"{gpu}/card0/card0-DP-1/drm_dp_aux0", "drm_dp_aux_dev", "drm_dp_aux0", 237, 0)
    # explain's words for each part, the named kinds before the others whatever their names.
    assert [(s.suffix, s.why) for s in split([render, card, cec, i2c, aux, misc],
                                             False).devices] == [
        ("", "render node, shared"), ("-display", "card node, exclusive"),
        ("-cec", "CEC adapter, exclusive"), ("-drm-dp-aux-dev", "DP AUX channels, exclusive"),
        ("-i2c-dev", "i2c buses, exclusive"),
        ("-misc", "misc nodes, a kind the GPU split does not name, exclusive")]
    # A kind whose suffix a part already has is left out, named after that part, never merged.
    twin = _dev("/devices/pci0000:00/0000:00:02.0/i2c_dev0", "i2c_dev", "i2c_dev0", 240, 2)
    fake = _dev("/devices/pci0000:00/0000:00:02.0/d0", "display", "d0", 240, 3)
    # "drm-dp-aux-dev" sorts before "drm_dp_aux_dev": the named kind still keeps its name.
    dashed = _dev("/devices/pci0000:00/0000:00:02.0/x1", "drm-dp-aux-dev", "x1", 240, 4)
    got = split([render, card, i2c, twin, fake, dashed, aux], False)
    assert [(s.suffix, [n.name for n in s.nodes]) for s in got.devices] == [
        ("", ["dri/renderD128"]), ("-display", ["dri/card0"]),
        ("-drm-dp-aux-dev", ["drm_dp_aux0"]), ("-i2c-dev", ["i2c-3"])]
    assert got.left_out == ["/dev/d0 (display: its name -display is taken by the card node)",
                            "/dev/x1 (drm-dp-aux-dev: its name -drm-dp-aux-dev is taken by the "
                            "DP AUX channels)",
                            "/dev/i2c_dev0 (i2c_dev: its name -i2c-dev is taken by the i2c "
                            "buses)"]
    # Hardware that is one device, or no GPU, says nothing more of it.
    assert [s.why for s in split([tty], False).devices] == [""]
    assert [s.why for s in split([tty, misc], True).devices] == ["", ""]
    (s,) = split([tty], False).devices
    assert (s.suffix, s.kind, s.extra, s.shareable) == ("", "tty", {"subsystem": "tty"}, False)
    (s,) = split([nameless], False).devices
    assert (s.kind, s.extra) == ("unknown", {"subsystem": "unknown"})
    (s,) = split([tty, misc], False).devices
    assert (s.suffix, s.kind, s.extra, s.shareable) == ("", "mix", {}, False)
    assert [n.name for n in s.nodes] == ["accel0", "ttyS0"]
    # A serial-line adapter: one device per kind, suffixed, each exclusive.
    assert shape([tty, misc], True) == [("-misc", "misc", {"subsystem": "misc"}, False),
                                        ("-tty", "tty", {"subsystem": "tty"}, False)]
    # A suffix is part of a DNS label: a kind's "_" becomes "-" (rules: names.suffix).
    aux = _dev("/devices/platform/x/aux0", "drm_dp_aux_dev", "drm_dp_aux0", 237, 0)
    assert [(s.suffix, s.kind) for s in split([aux, tty], True).devices] == [
        ("-drm-dp-aux-dev", "drm_dp_aux_dev"), ("-tty", "tty")]
