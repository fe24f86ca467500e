"""``run --machine FILE``: a file that turns malformed keeps the last good spec, logs once, and
sets the ``SpecValid`` condition; the walks go on."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from liken_devices.agent.cli import run_options
from liken_devices.agent.run import assemble
from liken_devices.agent.runner import WalkReason
from liken_devices.cli import build_parser
from liken_devices.inventory.model import MachineSpec

from .node import FixtureNode


def spec_condition(status_out: Path) -> dict[str, str]:
    status = json.loads(status_out.read_text())
    return next(c for c in status["conditions"] if c["type"] == "SpecValid")


def test_a_malformed_file_keeps_the_last_good_spec(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    node = FixtureNode(tmp_path / "node")
    machine = tmp_path / "machine.yaml"
    machine.write_text("modules: [pulse8_cec]\n")
    status_out, slice_out = tmp_path / "status.json", tmp_path / "slice.json"
    args = build_parser().parse_args([
        "run", "--node", "offline", *node.args(), "--no-api", "--machine", str(machine),
        "--slice-out", str(slice_out), "--status-out", str(status_out),
        "--console", str(tmp_path / "console"), "--no-plugin", "--no-machine-side"])
    built = assemble(run_options(args))
    agent = built.agent
    try:
        agent._walk(WalkReason.START)
        assert spec_condition(status_out)["status"] == "True"
        good = MachineSpec(modules=("pulse8_cec",))
        assert agent.machine_spec() == good

        machine.write_text("serio: [{protocol: pulse8-cec, vendor: 0x2548, product: '1002'}]\n")
        usb = node.plug_usb(3)
        with caplog.at_level(logging.ERROR, logger="liken_devices.agent.runner"):
            for _ in range(5):
                agent._walk(WalkReason.UEVENT)  # no exception: the walks go on
        said = [r for r in caplog.records if "keeping the last good spec" in r.getMessage()]
        assert len(said) == 1 and "quote it" in said[0].getMessage()
        assert agent.machine_spec() == good
        cond = spec_condition(status_out)
        assert (cond["status"], cond["reason"]) == ("False", "SpecMalformed")
        assert "0x2548" in cond["message"] and "last good spec" in cond["message"]
        names = [d["name"] for d in json.loads(slice_out.read_text())["spec"]["devices"]]
        assert usb in names  # the slice still follows the hardware

        machine.unlink()  # unreadable is malformed too
        agent._walk(WalkReason.UEVENT)
        assert agent.machine_spec() == good
        assert "cannot read machine file" in spec_condition(status_out)["message"]

        machine.write_text("modules: [serport]\n")
        agent._walk(WalkReason.UEVENT)
        assert agent.machine_spec() == MachineSpec(modules=("serport",))
        assert spec_condition(status_out)["status"] == "True"
    finally:
        built.close()


def test_a_tree_that_stops_being_sysfs_fails_the_walk_in_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node = FixtureNode(tmp_path / "node")
    args = build_parser().parse_args([
        "run", "--node", "offline", *node.args(), "--no-api", "--status-out",
        str(tmp_path / "status.json"), "--console", str(tmp_path / "console"), "--no-plugin",
        "--no-machine-side"])
    built = assemble(run_options(args))
    try:
        built.agent._walk(WalkReason.START)
        (node.sysfs / "dev" / "char").rename(node.sysfs / "dev" / "gone")
        with caplog.at_level(logging.ERROR, logger="liken_devices.agent.runner"):
            built.agent._walk(WalkReason.UEVENT)
        [record] = [r for r in caplog.records if r.getMessage().startswith("walk failed")]
        assert "not a sysfs tree" in record.getMessage() and record.exc_info is None
        assert built.agent.metrics.walk_errors.get() == 1
    finally:
        built.close()
