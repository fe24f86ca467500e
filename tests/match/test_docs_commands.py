"""Each docs/examples/ file is answered by the one command the guide prints above it, run as
printed (``kubectl liken match -f docs/examples/NAME.yaml``) against a cluster (the loopback API
server) whose node publishes what the example is for, with the classes the deployment brings
(``deploy/media/``); and ``match -f -`` reads what ``claim-for`` writes on standard input.
"""

from __future__ import annotations

import io
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("cel_expr_python")

from liken_devices.cli import main
from liken_devices.inventory import MachineSpec
from liken_devices.inventory.limits import DRIVER
from liken_devices.match.cli import kubectl_main
from liken_devices.slices import devices_json, make_slice
from tests.deploy.test_guide import (
    DRANET,
    PULSE8,
    WANTED,
    built,
    cec_adapter,
    real,
    serial_stick,
    two_root_machine,
)
from tests.support.fakeapi import FakeApiServer

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guide.md"
EXAMPLES = sorted(p.name for p in (REPO / "docs" / "examples").glob("*.yaml"))


def printed_command(name: str) -> list[str]:
    """The one command in the ``sh`` block right above the example's link in the guide."""
    text = GUIDE.read_text()
    link = f"[`examples/{name}`](examples/{name})"
    at = text.index(link)
    section = text[text.rindex("\n### ", 0, at):at]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 1, f"{name}: one sh block above the example, found {len(blocks)}"
    lines = [ln for ln in blocks[0].splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    argv = shlex.split(lines[0])
    assert argv[:3] == ["kubectl", "liken", "match"] and f"docs/examples/{name}" in argv
    return argv[2:]


def test_every_example_has_its_command() -> None:
    assert EXAMPLES
    for name in EXAMPLES:
        printed_command(name)


def gpu_with_media() -> list[dict[str, Any]]:
    """A node with two GPUs, each a render and a display device (liken.sh) and a capability
    device (media.liken.sh); only the second decodes 10-bit HEVC."""
    liken, media = [], []
    for bus, slot, hevc in (("0000:00:02.0", "00-02-0", False), ("0000:03:00.0", "03-00-0", True)):
        pci = {"resource.kubernetes.io/pciBusID": {"string": bus}}
        base = {"bus": {"string": "pci"}, "subsystem": {"string": "drm"},
                "address": {"string": bus}, **pci}
        liken += [{"name": f"pci-0000-{slot}", "attributes": {**base,
                                                              "renderNode": {"bool": True}}},
                  {"name": f"pci-0000-{slot}-display",
                   "attributes": {**base, "displayNode": {"bool": True}}}]
        media.append({"name": f"pci-0000-{slot}", "attributes": {
            **pci, "decodeH264": {"bool": True}, "decodeHEVCMain10": {"bool": hevc}}})
    return [make_slice("n1", DRIVER, liken), make_slice("n1", "media.liken.sh", media)]


def node_for(name: str, tmp_path: Path) -> tuple[list[dict[str, Any]], str]:
    """The slices of a node the example is for, and the device it should get."""
    def liken(inv: Any) -> list[dict[str, Any]]:
        return [make_slice("n1", DRIVER, devices_json(inv))]

    if name == "zigbee-stick.yaml":
        return liken(built(tmp_path, a=lambda b: serial_stick(b, "1-2", 3, WANTED, 0),
                           twin=lambda b: serial_stick(b, "1-3", 4, "0000beef", 1))), \
            "usb-1-2-1-0"
    if name == "render-node.yaml":
        return liken(real("mir-standard-drm-devices.umockdev")), "pci-0000-0"
    if name == "cec-remote.yaml":
        return liken(built(tmp_path, MachineSpec(serio=(PULSE8,)),
                           a=lambda b: cec_adapter(b, "1-5", 6, 0, 0, 30))), "usb-1-5-1-0"
    if name == "bluetooth.yaml":
        return liken(real("udevdb-only/checkbox-dell-latitudee6430-udevdb.umockdev")), \
            "usb-1-1-4-1-0"
    if name == "smart-card-reader.yaml":
        def reader(b: Any) -> None:
            usb = b.usb_device("2-3", busnum=2, devnum=4, vendor="076b", product="3031")
            b.usb_interface(usb, "1.0", cls=0x0B)
        return liken(built(tmp_path, r=reader)), "usb-2-3"
    if name == "ups.yaml":
        def ups(b: Any) -> None:
            usb = b.usb_device("1-9", devnum=10, vendor="051d", product="0002",
                               serial="3B1234X")
            iface = b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
            hid = b.device(iface, "0003:051D:0002.0001", "hid")
            b.node(hid, "hidraw", "hidraw0", 240, 0, subdir="hidraw")
        return liken(built(tmp_path, u=ups)), "usb-1-9"
    if name == "gpu-decode.yaml":
        return gpu_with_media(), "pci-0000-03-00-0"
    if name == "render-nic-one-root.yaml":
        return [*liken(built(tmp_path, m=two_root_machine)),
                make_slice("n1", "dra.net", DRANET)], "pci-0000-3b-00-0"
    raise AssertionError(f"a new example, {name}: give it a node here")


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_printed_command_answers_the_example(
        name: str, tmp_path: Path, api: FakeApiServer, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = printed_command(name)
    slices, wanted = node_for(name, tmp_path)
    api.add_node("n1")
    for s in slices:
        api.put_object("resourceslices", s)
    # What the deployment brings to the cluster: the media agent's class.
    for doc in yaml.safe_load_all((REPO / "deploy" / "media" / "deviceclass.yaml").read_text()):
        if doc and doc.get("kind") == "DeviceClass":
            api.put_object("deviceclasses", doc)
    monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    monkeypatch.chdir(REPO)
    rc = kubectl_main([*argv, "-o", "json"])
    out = capsys.readouterr()
    assert rc == 0, out.err or out.out
    answer = yaml.safe_load(out.out)
    assert answer["allocatable"] is True
    results = [r for claim in answer["nodes"][0]["asked"][0]["claims"]
               for r in claim["allocation"]["devices"]["results"]]
    assert any(r["device"].startswith(wanted) for r in results), results


def test_match_reads_what_claim_for_writes_on_standard_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``liken-devices claim-for DEVICE --slices S | liken-devices match -f - --slices S``:
    three documents on standard input (class, template, pod)."""
    slices = tmp_path / "s.yaml"
    slices.write_text(yaml.safe_dump_all(gpu_with_media()))
    assert main(["claim-for", "pci-0000-03-00-0", "--slices", str(slices), "--node", "n1"]) == 0
    written = capsys.readouterr().out
    assert written.count("\n---\n") == 2

    class In:
        buffer = io.BytesIO(written.encode())

    monkeypatch.setattr(sys, "stdin", In)
    assert main(["match", "-f", "-", "--slices", str(slices)]) == 0
    text = capsys.readouterr().out
    assert "device gets liken.sh/n1/pci-0000-03-00-0" in text
    monkeypatch.setattr(sys, "stdin", In)
    assert main(["match", "-f", "-", "--slices", "-"]) == 2
    assert "standard input (-) can be read once" in capsys.readouterr().err
