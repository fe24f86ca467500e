"""``liken-devices machine apply``: the machine side offline, through the real parser."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from liken_devices.cli import main

from .ktree import ModuleTreeBuilder

USB = "devices/pci0000:00/0000:00:14.0/usb1/1-2"


def link(at: Path, target: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(os.path.relpath(target, at.parent))


def write_adapter(sysfs: Path) -> None:
    """A Pulse-Eight USB-CEC adapter (2548:1002) as sysfs shows it: cdc_acm made ttyACM0."""
    dev = sysfs / USB
    dev.mkdir(parents=True)
    (dev / "uevent").write_text("MAJOR=189\nMINOR=4\nDEVNAME=bus/usb/001/005\n"
                                "DEVTYPE=usb_device\nPRODUCT=2548/1002/101\nBUSNUM=001\n"
                                "DEVNUM=005\n")
    for attr, value in (("idVendor", "2548"), ("idProduct", "1002"), ("busnum", "1"),
                        ("devnum", "5"), ("serial", "P8-0001"), ("bDeviceClass", "02")):
        (dev / attr).write_text(value + "\n")
    link(dev / "subsystem", sysfs / "bus" / "usb")
    link(dev / "driver", sysfs / "bus" / "usb" / "drivers" / "usb")
    link(sysfs / "bus" / "usb" / "devices" / "1-2", dev)
    link(sysfs / "dev" / "char" / "189:4", dev)
    iface = dev / "1-2:1.0"
    iface.mkdir()
    (iface / "uevent").write_text("DEVTYPE=usb_interface\nINTERFACE=2/2/1\n"
                                  "MODALIAS=usb:v2548p1002d0101dc02dsc00dp00ic02isc02ip01in00\n")
    (iface / "bInterfaceClass").write_text("02\n")
    link(iface / "subsystem", sysfs / "bus" / "usb")
    link(iface / "driver", sysfs / "bus" / "usb" / "drivers" / "cdc_acm")
    link(sysfs / "bus" / "usb" / "devices" / "1-2:1.0", iface)
    tty = iface / "tty" / "ttyACM0"
    tty.mkdir(parents=True)
    (tty / "uevent").write_text("MAJOR=166\nMINOR=0\nDEVNAME=ttyACM0\n")
    (tty / "dev").write_text("166:0\n")
    link(tty / "subsystem", sysfs / "class" / "tty")
    link(sysfs / "dev" / "char" / "166:0", tty)


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, Path]:
    sysfs = tmp_path / "sys"
    write_adapter(sysfs)
    tree = ModuleTreeBuilder(tmp_path / "root")
    tree.module("kernel/drivers/media/cec/core/cec.ko")
    tree.module("kernel/drivers/media/cec/usb/pulse8/pulse8-cec.ko",
                "kernel/drivers/media/cec/core/cec.ko")
    tree.builtin.append("kernel/drivers/hid/uhid.ko")
    tree.build()
    return {"sysfs": sysfs, "modules": tree.dir, "tmp": tmp_path}


def args(m: dict[str, Path], spec: dict[str, object], *extra: str) -> list[str]:
    f = m["tmp"] / "machine.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                                 "metadata": {"name": "node-a"}, "spec": spec}))
    return ["machine", "apply", "--machine", str(f), "--sysfs", str(m["sysfs"]),
            "--modules-dir", str(m["modules"]), "--facts", str(m["tmp"] / "facts"), *extra]


SPEC = {"modules": ["pulse8-cec", "uhid", "nosuch"],
        "serio": [{"protocol": "pulse8-cec", "vendor": "2548", "product": "1002"}]}


def test_dry_run_prints_the_plan(machine: dict[str, Path],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = main(args(machine, SPEC, "--dry-run", "-o", "json"))
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # nosuch is Missing
    states = {r["name"]: r["state"] for r in out["modules"]}
    assert states == {"pulse8-cec": "WouldLoad", "uhid": "Builtin", "nosuch": "Missing"}
    plan = out["modules"][0]["message"]
    assert "cec/core/cec.ko" in plan and plan.index("cec/core/cec.ko") < plan.index("pulse8-cec.ko")
    assert out["serio"] == [{"protocol": "pulse8-cec", "vendor": "2548", "product": "1002",
                             "tty": "ttyACM0", "state": "WouldAttach",
                             "message": "dry run: would attach /dev/ttyACM0 as pulse8-cec"}]
    assert [(c["type"], c["status"]) for c in out["conditions"]] == [
        ("ModulesLoaded", "False"), ("SerioAttached", "False")]


def test_empty_spec_is_fine(machine: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args(machine, {}, "--dry-run")) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["modules"] == [] and out["serio"] == []
    assert [c["reason"] for c in out["conditions"]] == ["NoneDeclared", "NoneDeclared"]


def test_bad_machine_file_is_exit_2(machine: dict[str, Path],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args(machine, {"modules": ["../../evil"]}, "--dry-run")) == 2
    assert "is not a module name" in capsys.readouterr().err


# ---- another machine, and what a dry run touches (rules: machine.apply-this-host) -------------

RECORDING = """P: /devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0/tty/ttyACM0
N: ttyACM0
E: DEVNAME=/dev/ttyACM0
E: MAJOR=166
E: MINOR=0
E: SUBSYSTEM=tty
A: dev=166:0
L: device=../../../1-2:1.0

P: /devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0
E: DEVTYPE=usb_interface
E: DRIVER=cdc_acm
E: INTERFACE=2/2/1
E: SUBSYSTEM=usb
A: bInterfaceClass=02
L: driver=../../../../../../bus/usb/drivers/cdc_acm

P: /devices/pci0000:00/0000:00:14.0/usb1/1-2
N: bus/usb/001/005
E: BUSNUM=001
E: DEVNUM=005
E: DEVTYPE=usb_device
E: DRIVER=usb
E: MAJOR=189
E: MINOR=4
E: PRODUCT=2548/1002/101
E: SUBSYSTEM=usb
A: idProduct=1002
A: idVendor=2548
L: driver=../../../../../bus/usb/drivers/usb

P: /devices/pci0000:00/0000:00:14.0/usb1
E: DEVTYPE=usb_device
E: SUBSYSTEM=usb
A: idVendor=1d6b

P: /devices/pci0000:00/0000:00:14.0
E: SUBSYSTEM=pci
A: vendor=0x8086
"""


@pytest.fixture
def watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """A modprobe first on PATH that writes down each call, and every open of a path under
    /dev by this process written down too."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "modprobe-calls"
    stub = bin_dir / "modprobe"
    stub.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")
    opened: list[str] = []
    real_open = os.open

    def watching_open(path: object, *rest: object, **kw: object) -> int:
        if str(path).startswith("/dev/"):
            opened.append(str(path))
        return real_open(path, *rest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", watching_open)
    return {"opened": opened, "calls_file": [str(calls)]}


def _modprobe_calls(seen: dict[str, list[str]]) -> list[str]:
    path = Path(seen["calls_file"][0])
    return path.read_text().splitlines() if path.exists() else []


def _inputs(machine: dict[str, Path], how: str) -> list[str]:
    argv = args(machine, SPEC)
    if how == "recording":
        rec = machine["tmp"] / "other.umockdev"
        rec.write_text(RECORDING)
        i = argv.index("--sysfs")
        argv[i:i + 2] = ["--recording", str(rec)]
    return argv


@pytest.mark.parametrize("how", ["sysfs", "recording"])
def test_another_machine_is_refused_without_dry_run(machine: dict[str, Path],
                                                   watched: dict[str, list[str]], how: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the recording's (or tree's) adapter was attached through this host's
    /dev/ttyACM0 and its modules loaded into this host's kernel."""
    assert main(_inputs(machine, how)) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "machine apply loads modules and attaches lines on this host" in err
    assert ("is another machine" if how == "recording" else "is not this host's /sys") in err
    assert "add --dry-run" in err
    assert _modprobe_calls(watched) == [] and watched["opened"] == []


@pytest.mark.parametrize("how", ["sysfs", "recording"])
def test_a_dry_run_runs_no_modprobe_and_opens_no_tty(machine: dict[str, Path],
                                                     watched: dict[str, list[str]], how: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a dry run ran 'modprobe -n -v' for every module to load."""
    code = main([*_inputs(machine, how), "--dry-run", "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # nosuch is Missing
    states = {r["name"]: r["state"] for r in out["modules"]}
    assert states == {"pulse8-cec": "WouldLoad", "uhid": "Builtin", "nosuch": "Missing"}
    assert [(r["tty"], r["state"]) for r in out["serio"]] == [("ttyACM0", "WouldAttach")]
    assert _modprobe_calls(watched) == []
    assert watched["opened"] == []
