"""``liken-media scan``: the inventory's render nodes, asked through libva, as a validated slice.

The render nodes come from a real sysfs tree (tests/support/sysfs_builder.py) walked by the
inventory; their /dev is a directory of fake nodes answered by the fake VA driver.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from liken_devices.media.capabilities import NAMES
from liken_devices.media.cli import main
from liken_devices.slices import validate_slice
from tests.support.sysfs_builder import Dev, SysfsBuilder

from .conftest import CAPS, FakeGPUs


class Machine:
    """A sysfs tree with GPUs, and the options that point ``liken-media scan`` at it."""

    def __init__(self, root: Path, gpus: FakeGPUs) -> None:
        self.root = root
        self.sys = SysfsBuilder(root / "sys")
        self.gpus = gpus
        for d in ("facts", "modules", "hwdata"):
            (root / d).mkdir()
        (root / "hwdata" / "pci.ids").write_text(
            "8086  Intel Corporation\n\t56a0  DG2 [Arc A770]\n"
            "1002  Advanced Micro Devices, Inc. [AMD/ATI]\n\t73bf  Navi 21 [Radeon RX 6800]\n")

    def gpu(self, address: str, render: int, caps: str | Path, *, driver: str = "i915",
            vendor: str = "8086", device: str = "56a0") -> None:
        self.sys.gpu(address, card=render - 128, render=render, driver=driver, vendor=vendor,
                     device=device)
        self.gpus.add(render, caps)

    def args(self, *extra: str) -> list[str]:
        r = self.root
        return ["scan", "--sysfs", str(r / "sys"), "--facts", str(r / "facts"), "--modules-dir",
                str(r / "modules"), "--hwdata-dir", str(r / "hwdata"), "--dev",
                str(self.gpus.dev), "--node", "node-a", *extra]


@pytest.fixture
def machine(tmp_path: Path, fake_env: FakeGPUs) -> Machine:
    return Machine(tmp_path / "m", fake_env)


def scan(machine: Machine, *extra: str) -> dict[str, Any]:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(machine.args(*extra)) == 0
    obj: dict[str, Any] = yaml.safe_load(out.getvalue())
    assert validate_slice(obj) == []
    return obj


def attrs(device: dict[str, Any]) -> dict[str, Any]:
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


def test_one_gpu(machine: Machine, caplog: pytest.LogCaptureFixture) -> None:
    machine.gpu("0000:03:00.0", 128, CAPS / "intel-dg2-ihd.txt")
    caplog.set_level("INFO", logger="liken_devices.media")
    obj = scan(machine)
    assert obj["metadata"]["name"] == "node-a-media.liken.sh"
    assert obj["spec"]["driver"] == "media.liken.sh"
    assert obj["spec"]["nodeName"] == "node-a"
    [dev] = obj["spec"]["devices"]
    assert dev["name"] == "pci-0000-03-00-0"  # the liken.sh render node's name
    assert dev["allowMultipleAllocations"] is True
    assert set(dev) == {"name", "attributes", "allowMultipleAllocations"}  # no device node
    a = attrs(dev)
    assert a["vaDriver"] == "Intel iHD driver for Intel(R) Gen Graphics - 25.3.4 ()"
    assert a["resource.kubernetes.io/pciBusID"] == "0000:03:00.0"
    assert (a["address"], a["driver"], a["vendor"], a["product"], a["name"]) == (
        "0000:03:00.0", "i915", "8086", "56a0", "Intel Corporation DG2 [Arc A770]")
    assert all(isinstance(a[n], bool) for n in NAMES)
    assert a["encodeH264LowPower"] is True and a["encodeH264"] is False
    assert len(a) == 18 + 7
    node = str(machine.gpus.dev / "dri/renderD128")
    line = (f"capabilities: pci-0000-03-00-0 ({node}, Intel iHD driver for Intel(R) Gen Graphics"
            " - 25.3.4 ()): decodeH264=true decodeHEVCMain=true decodeHEVCMain10=true"
            " decodeAV1Main=true decodeAV1Main10=true decodeVP9=true decodeVP9Profile2=true"
            " decodeVP8=false decodeVC1=false decodeMPEG2=true encodeH264=false"
            " encodeHEVCMain=false encodeHEVCMain10=false encodeH264LowPower=true"
            " encodeHEVCMainLowPower=true encodeHEVCMain10LowPower=true scale8bit=true"
            " scale10bit=true")
    assert caplog.messages == [line]


def test_same_attributes_as_the_render_node(machine: Machine) -> None:
    machine.gpu("0000:03:00.0", 128, CAPS / "amd-rdna2-mesa.txt", driver="amdgpu",
                vendor="1002", device="73bf")
    from liken_devices.inventory import Sources

    r = machine.root
    inv = Sources(sysfs=r / "sys", facts=r / "facts", modules_dir=r / "modules",
                  hwdata_dir=r / "hwdata").walk()
    render = inv.by_name()["pci-0000-03-00-0"]
    a = attrs(scan(machine)["spec"]["devices"][0])
    for key in ("address", "driver", "vendor", "product", "name",
                "resource.kubernetes.io/pciBusID"):
        assert a[key] == render.attributes[key]


def test_four_gpus_one_hanging(machine: Machine, caplog: pytest.LogCaptureFixture) -> None:
    machine.gpu("0000:00:02.0", 128, CAPS / "intel-dg2-ihd.txt")
    machine.gpu("0000:03:00.0", 129, CAPS / "amd-rdna2-mesa.txt", driver="amdgpu",
                vendor="1002", device="73bf")
    machine.gpu("0000:04:00.0", 130, "vendor hung\nVAProfileH264High VAEntrypointVLD\n"
                                     "hang vaQueryConfigProfiles\n")
    machine.gpu("0000:05:00.0", 131, CAPS / "no-video-processor.txt")
    caplog.set_level("INFO", logger="liken_devices.media")
    obj = scan(machine, "--timeout", "2", "-o", "json")
    devices = {d["name"]: attrs(d) for d in obj["spec"]["devices"]}
    assert sorted(devices) == ["pci-0000-00-02-0", "pci-0000-03-00-0", "pci-0000-04-00-0",
                               "pci-0000-05-00-0"]
    hung = devices["pci-0000-04-00-0"]
    assert "vaDriver" not in hung
    assert [hung[n] for n in NAMES] == [False] * 18
    assert hung["resource.kubernetes.io/pciBusID"] == "0000:04:00.0"
    assert devices["pci-0000-03-00-0"]["decodeAV1Main10"] is True
    assert devices["pci-0000-05-00-0"]["scale8bit"] is False
    node = machine.gpus.dev / "dri/renderD130"
    assert f"capabilities: pci-0000-04-00-0 ({node}): timed out after 2 s" in caplog.messages
    assert len(caplog.messages) == 4


def test_crash_publishes_all_false(machine: Machine, caplog: pytest.LogCaptureFixture) -> None:
    machine.gpu("0000:00:02.0", 128, (CAPS / "intel-dg2-ihd.txt").read_text()
                + "crash vaQuerySurfaceAttributes\n")
    caplog.set_level("INFO", logger="liken_devices.media")
    a = attrs(scan(machine)["spec"]["devices"][0])
    assert [a[n] for n in NAMES] == [False] * 18 and "vaDriver" not in a
    assert caplog.messages[0].endswith("): crashed: signal 6")


def test_no_render_node_prints_an_empty_slice(machine: Machine) -> None:
    machine.sys.gpu("0000:00:02.0", render=None)  # a card node only: no render node
    obj = scan(machine)
    assert obj["spec"]["devices"] == []
    assert obj["metadata"]["name"] == "node-a-media.liken.sh"


def test_a_gpu_without_a_media_device_is_said_with_its_reason(
        machine: Machine, caplog: pytest.LogCaptureFixture) -> None:
    """rules: media.gpu-without-media. Each GPU that gets no media device is named in one line
    with why: no render node published for it, and the inventory's reason. An i915 whose
    DP-CEC adapter sits under it keeps its render node and so its media device
    (rules: sharing.gpu-cec)."""
    machine.sys.gpu("0000:00:02.0", card=1, render=None)  # a display-only controller
    machine.sys.pci("0000:01:00.0", vendor="10de", device="2504", cls=0x030000)  # no driver
    machine.gpu("0000:03:00.0", 128, CAPS / "intel-dg2-ihd.txt")
    machine.sys.dp_cec(Dev("/devices/pci0000:03/0000:03:00.0"))
    caplog.set_level("INFO", logger="liken_devices.media")
    for output in ("yaml", "table"):
        caplog.clear()
        out = io.StringIO()
        with redirect_stdout(out):
            assert main(machine.args("-o", output)) == 0
        if output == "yaml":
            obj = yaml.safe_load(out.getvalue())
            assert [d["name"] for d in obj["spec"]["devices"]] == ["pci-0000-03-00-0"]
        else:
            assert [x.split()[0] for x in out.getvalue().splitlines()] == ["NAME",
                                                                          "pci-0000-03-00-0"]
        assert [m for m in caplog.messages if m.startswith("no media device")] == [
            "no media device for pci 0000:00:02.0 [i915]: no render node published for it: its "
            "driver made none (published as pci-0000-00-02-0-display only)",
            "no media device for pci 0000:01:00.0 [no driver]: no render node published for it: "
            "not published: no driver"]


def test_a_render_node_kept_out_of_the_slice_is_said_with_what_kept_it() -> None:
    """rules: media.gpu-without-media. A GPU whose render node is in sysfs but whose render
    device the slice dropped (the cap): the line says so, from the inventory's outcome; hardware
    that is no GPU gets no line."""
    from liken_devices.inventory.model import Inventory, Outcome, Reason
    from liken_devices.media.devices import without_media
    from liken_devices.sysfs.model import DevNode, Snapshot, SysDevice

    gpu = "/devices/pci0000:00/0000:00:02.0"
    hda = "/devices/pci0000:00/0000:00:1f.3"
    snap = Snapshot({
        gpu: SysDevice(gpu, "pci", "i915", {"PCI_CLASS": "30000"}),
        f"{gpu}/drm/renderD128": SysDevice(f"{gpu}/drm/renderD128", "drm", None, {},
                                           node=DevNode("dri/renderD128", "c", 226, 128)),
        f"{gpu}/drm/card0": SysDevice(f"{gpu}/drm/card0", "drm", None, {},
                                      node=DevNode("dri/card0", "c", 226, 0)),
        hda: SysDevice(hda, "pci", None, {"PCI_CLASS": "40300"})})
    inv = Inventory((), (
        Outcome(gpu, "pci", "0000:00:02.0", "i915", ("pci-0000-00-02-0-display",), None,
                f"{Reason.OVER_CAP}: pci-0000-00-02-0"),
        Outcome(hda, "pci", "0000:00:1f.3", None, (), Reason.NO_DRIVER)), ())
    assert without_media(inv, snap) == [
        "no media device for pci 0000:00:02.0 [i915]: no render node published for it: "
        "published as pci-0000-00-02-0-display only (past the 128 cap: pci-0000-00-02-0)"]


def test_absent_node_in_dev(machine: Machine, caplog: pytest.LogCaptureFixture) -> None:
    # sysfs has the render node, /dev does not (no GPU passed to the pod): the query fails.
    machine.sys.gpu("0000:00:02.0")
    caplog.set_level("INFO", logger="liken_devices.media")
    a = attrs(scan(machine)["spec"]["devices"][0])
    assert not any(a[n] for n in NAMES)
    assert caplog.messages[0].endswith("renderD128: No such file or directory")


def test_long_vendor_string_is_cut(machine: Machine) -> None:
    vendor = "Intel iHD driver for Intel(R) Gen Graphics – " + "é" * 40
    machine.gpu("0000:00:02.0", 128, f"vendor {vendor}\nVAProfileH264High VAEntrypointVLD\n")
    a = attrs(scan(machine)["spec"]["devices"][0])
    cut = a["vaDriver"]
    assert len(cut.encode()) <= 64 and vendor.startswith(cut)
    assert len(cut.encode()) >= 63  # cut at a character boundary, not earlier


def test_bad_sysfs_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", "--sysfs", str(tmp_path / "nowhere")]) == 2
    assert "has no devices/ directory" in capsys.readouterr().err


def test_console_script(machine: Machine) -> None:
    # The installed `liken-media` entry point, as an operator runs it.
    machine.gpu("0000:00:02.0", 128, CAPS / "amd-polaris-mesa.txt")
    exe = shutil.which("liken-media") or str(Path(sys.executable).parent / "liken-media")
    proc = subprocess.run([exe, *machine.args("-o", "json")], capture_output=True, text=True,
                          env=machine.gpus.env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert validate_slice(obj) == []
    assert attrs(obj["spec"]["devices"][0])["encodeH264"] is True
    # Each log line: time, level, logger, then the message.
    lines = [x.split(": ", 1)[1] for x in proc.stderr.splitlines() if ": capabilities: " in x]
    assert len(lines) == 1 and lines[0].startswith("capabilities: pci-0000-00-02-0 (")
    stamp, level = proc.stderr.splitlines()[0].split()[:2]
    assert stamp.endswith("Z") and "T" in stamp and level in ("INFO", "WARNING")


def test_verbose_logs_libva_messages(machine: Machine, caplog: pytest.LogCaptureFixture) -> None:
    machine.gpu("0000:00:02.0", 128, CAPS / "amd-polaris-mesa.txt")
    caplog.set_level("DEBUG", logger="liken_devices.media")
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["-v", *machine.args()]) == 0
    assert any(m.startswith("pci-0000-00-02-0: libva info: Trying to open")
               for m in caplog.messages)
    assert sum(m.startswith("capabilities: ") for m in caplog.messages) == 1


def test_console_script_table_version_and_json_logs(machine: Machine) -> None:
    machine.gpu("0000:00:02.0", 128, CAPS / "amd-polaris-mesa.txt")
    exe = shutil.which("liken-media") or str(Path(sys.executable).parent / "liken-media")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.split()[0] == "liken-media"
    proc = subprocess.run([exe, "--log-format", "json", *machine.args("-o", "table")],
                          capture_output=True, text=True, env=machine.gpus.env, timeout=60,
                          check=True)
    head, row = proc.stdout.splitlines()
    assert head.split() == ["NAME", "PCI", "VA", "DRIVER", "DECODE", "ENCODE"]
    name, pci, *_, decode, encode = row.split()
    assert (name, pci) == ("pci-0000-00-02-0", "0000:00:02.0")
    assert "H264" in encode.split(",") and "H264" in decode.split(",")
    records = [json.loads(x) for x in proc.stderr.splitlines()]
    assert sum(r["msg"].startswith("capabilities: pci-0000-00-02-0 (") for r in records) == 1
    assert all(r["level"] in ("INFO", "WARNING") and r["time"].endswith("Z") for r in records)


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_after_the_command_as_in_liken_devices(machine: Machine, where: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """``liken-media scan -v`` is accepted as ``liken-devices scan -v`` is."""
    machine.gpu("0000:00:02.0", 128, CAPS / "amd-polaris-mesa.txt")
    caplog.set_level("DEBUG", logger="liken_devices.media")
    argv = ["-v", *machine.args()] if where == "before" else [*machine.args(), "-v"]
    with redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    assert any("libva info" in m for m in caplog.messages)


def test_both_programs_share_the_help_conventions() -> None:
    """Every sub-command has a description, -v/--verbose and --log-format, and the options both
    programs take have the same names and metavars."""
    from liken_devices.cli import build_parser as devices_parser
    from liken_devices.media.cli import build_parser as media_parser

    def subcommands(parser: Any) -> dict[str, Any]:
        [action] = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        return dict(action.choices)

    def options(p: Any) -> dict[str, Any]:
        return {s: a.metavar for a in p._actions for s in a.option_strings if s.startswith("--")}

    devices_scan = subcommands(devices_parser("scan"))["scan"]
    for name, p in subcommands(media_parser()).items():
        assert p.description, name
        mine = options(p)
        assert {"--verbose", "--log-format"} <= set(mine), name
        for opt in ("--sysfs", "--recording", "--hwdata-dir", "--node"):
            assert mine[opt] == options(devices_scan)[opt], (name, opt)
    assert "COMMAND" in media_parser().format_usage()
