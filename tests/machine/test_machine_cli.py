"""``liken-devices machine apply``: the machine side offline, through the real parser."""

from __future__ import annotations

import json
import os
import shutil
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


@pytest.mark.skipif(not shutil.which("modprobe") and not os.path.exists("/usr/sbin/modprobe"),
                    reason="modprobe (kmod) is not installed")
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


def test_apply_reports_and_returns_without_holding(machine: dict[str, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing attaches here (the fixture's /dev/ttyACM0 is not this machine's), so the command
    prints the status and returns at once instead of holding."""
    spec = {"modules": ["uhid"], "serio": SPEC["serio"]}
    code = main(args(machine, spec))
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["modules"] == [{"name": "uhid", "state": "Builtin",
                               "message": "built into the kernel"}]
    row = out["serio"][0]
    assert (row["tty"], row["state"]) == ("ttyACM0", "Failed")
    assert row["message"].startswith("open /dev/ttyACM0 failed: [Errno ")
    assert out["conditions"][1]["reason"] == "AttachFailed"
    assert code == 1


def test_empty_spec_is_fine(machine: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args(machine, {})) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["modules"] == [] and out["serio"] == []
    assert [c["reason"] for c in out["conditions"]] == ["NoneDeclared", "NoneDeclared"]


def test_bad_machine_file_is_exit_2(machine: dict[str, Path],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args(machine, {"modules": ["../../evil"]})) == 2
    assert "is not a module name" in capsys.readouterr().err
