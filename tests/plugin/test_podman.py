"""End to end with a real CDI consumer: podman 4.3 (runc) injects what the plugin prepared.

The fixture sysfs tree's device nodes are real nodes of this machine (/dev/tty5 = 4:5,
/dev/loop1 = 7:1), the inventory is the real one (``Sources.walk`` over the tree), the claims come
from the fake API, the test kubelet prepares them over the real sockets, and podman runs a
container with the CDI IDs the plugin returned (setup.d/30-podman.sh sets podman 4.3 up).
Specs go to /var/run/cdi, the only dynamic directory podman 4.3 reads; each test removes its own.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from liken_devices.inventory import Sources
from liken_devices.plugin import Plugin
from liken_devices.plugin.state import STATE_FILE, render_state
from tests.support.fakeapi import FakeApiServer
from tests.support.sysfs_builder import SysfsBuilder

from .conftest import new_claim
from .kubelet import TestKubelet

IMAGE = "localhost/liken-bbox:latest"
CDI_DIR = Path("/var/run/cdi")

pytestmark = [pytest.mark.root]


def _podman_ready() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("podman") is None:
        return "podman is not installed (setup.d/30-podman.sh)"
    if subprocess.run(["podman", "image", "exists", IMAGE]).returncode != 0:
        return f"image {IMAGE} missing (setup.d/30-podman.sh)"
    for node, want in (("/dev/tty5", (4, 5)), ("/dev/loop1", (7, 1))):
        try:
            st = os.stat(node)
        except FileNotFoundError:
            return f"{node} does not exist on this machine"
        if (os.major(st.st_rdev), os.minor(st.st_rdev)) != want:
            return f"{node} is not {want}"
    return None


@pytest.fixture(autouse=True)
def _need_podman() -> None:
    reason = _podman_ready()
    if reason:
        pytest.skip(reason)


def podman(*ids: str, cmd: str, user: str | None = None,
           groups: tuple[str, ...] | list[str] = ()) -> subprocess.CompletedProcess[str]:
    args = ["podman", "run", "--rm", "--network", "none"]
    if user is not None:
        args += ["--user", user]
    for g in groups:
        args += ["--group-add", g]
    for i in ids:
        args += ["--device", i]
    return subprocess.run([*args, IMAGE, "sh", "-c", cmd], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)


class Machine:
    """A fixture machine: a serial card whose tty is /dev/tty5, a disk that is /dev/loop1."""

    def __init__(self, root: Path) -> None:
        self.b = SysfsBuilder(root / "sys")
        self.facts = root / "facts"
        (self.facts / "storage").mkdir(parents=True)
        for d in ("mods", "hw"):
            (root / d).mkdir()
        self.sources = Sources(sysfs=root / "sys", facts=self.facts, modules_dir=root / "mods",
                               hwdata_dir=root / "hw")
        self.plug_serial()
        sata = self.b.pci("0000:00:17.0", driver="ahci", cls=0x010601)
        self.b.node(sata, "block", "loop1", 7, 1, block=True,
                    subdir="host0/target0:0:0/0:0:0:0/block")

    def plug_serial(self) -> None:
        self.serial = self.b.pci("0000:00:1e.0", driver="exar_serial", cls=0x070002)
        self.b.node(self.serial, "tty", "tty5", 4, 5, subdir="tty")

    def unplug_serial(self) -> None:
        self.b.remove(self.serial)

    def storage_role_on(self, partition: str) -> None:
        (self.facts / "storage" / "root").mkdir(exist_ok=True)
        (self.facts / "storage" / "root" / "device").write_text(partition + "\n")


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def own_state(state_dir: Path) -> None:
    """An empty state of the test's own. /var/run/cdi is shared by every test running on this
    machine, and a plugin that finds no state file rebuilds its claims from the specs there: it
    would take other tests' claims for its own, reconcile them against its tree and remove them."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state_dir / STATE_FILE).write_bytes(render_state({}))


def registered_plugin(make_plugin: Any, sources: Sources,
                      state_dir: Path) -> Iterator[tuple[Plugin, TestKubelet]]:
    """A plugin writing its CDI specs where podman reads them, with its own state (not other
    tests' claims, from the shared CDI directory), registered with a test kubelet."""
    own_state(state_dir)
    p = make_plugin(walk=sources.walk, cdi_dir=CDI_DIR, sweep_orphans=False,
                    sysfs=sources.sysfs, state_dir=state_dir)
    k = TestKubelet(p.config.registration_socket)
    k.register()
    try:
        yield p, k
    finally:
        k.close()
        for uid in p.prepared():  # a test that failed before its unprepare: no spec left behind
            (CDI_DIR / f"liken.sh-{uid}.json").unlink(missing_ok=True)


@pytest.fixture
def e2e(make_plugin: Any, machine: Machine, tmp_path: Path) -> Iterator[tuple[Plugin,
                                                                            TestKubelet]]:
    yield from registered_plugin(make_plugin, machine.sources, tmp_path / "state")


STAT = "stat -c '%n %F %t:%T' /dev/tty5 /dev/loop1 2>&1"


def test_container_gets_the_nodes_then_fails_while_absent(api: FakeApiServer, machine: Machine,
                                                          e2e: tuple[Plugin, TestKubelet]) -> None:
    plugin, kubelet = e2e
    claim = new_claim(api, [], results=[{"request": "serial", "device": "pci-0000-00-1e-0"},
                                        {"request": "disk", "device": "pci-0000-00-17-0"}])
    uid = claim[1]
    ans = kubelet.prepare([claim])[uid]
    assert ans.error == ""
    ids = [i for d in ans.devices for i in d["cdi"]]
    assert sorted(ids) == [f"liken.sh/device={uid}-pci-0000-00-17-0",
                           f"liken.sh/device={uid}-pci-0000-00-1e-0"]
    try:
        r = podman(*ids, cmd=STAT)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[:2] == ["/dev/tty5 character special file 4:5",
                                            "/dev/loop1 block special file 7:1"]
        # Exactly the claimed nodes: the container has no other tty or loop device.
        r = podman(*ids, cmd="ls /dev")
        names = set(r.stdout.split())
        assert {"tty5", "loop1"} <= names
        assert not {"tty6", "loop0", "loop2"} & names

        # Unplugged: after the reconcile pass the container cannot start.
        machine.unplug_serial()
        assert plugin.reconcile(machine.sources.walk()) == [uid]
        r = podman(*ids, cmd="true")
        assert r.returncode != 0
        assert "/dev/.liken.sh-absent/pci-0000-00-1e-0/tty5" in r.stderr
        # The disk alone (another device of the same spec) still works.
        assert podman(f"liken.sh/device={uid}-pci-0000-00-17-0", cmd="true").returncode == 0

        # Back in the same slot: the next pass writes the nodes back; the container starts.
        machine.plug_serial()
        assert plugin.reconcile(machine.sources.walk()) == [uid]
        r = podman(*ids, cmd=STAT)
        assert r.returncode == 0, r.stderr
    finally:
        assert kubelet.unprepare([claim]) == {uid: ""}
    assert not (CDI_DIR / f"liken.sh-{uid}.json").exists()
    r = podman(*ids, cmd="true")
    assert r.returncode != 0 and "unresolvable CDI devices" in r.stderr


def make_node(dev_dir: Path, name: str, rdev: tuple[int, int], mode: int, gid: int) -> None:
    path = dev_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(*rdev))
    os.chown(path, 0, gid)
    os.chmod(path, mode)


def test_a_node_keeps_its_mode_and_group_and_the_group_opens_it(
        api: FakeApiServer, machine: Machine, e2e: tuple[Plugin, TestKubelet]) -> None:
    """rules: delivery.mode-and-owner, delivery.nodes-only. The workload reaches a node through the
    group membership its image gives its user. The host's node is 0640 root:4242 (a copy of
    /dev/null's numbers in the plugin's /dev); the container's node is exactly that, a user in
    group 4242 opens it, one outside cannot."""
    plugin, kubelet = e2e
    card = machine.b.pci("0000:00:1e.1", driver="exar_serial", cls=0x070002)
    machine.b.node(card, "tty", "ttyLKN0", 1, 3, subdir="tty")
    make_node(plugin.config.dev_dir, "ttyLKN0", (1, 3), 0o640, 4242)
    claim = new_claim(api, ["pci-0000-00-1e-1"])
    ans = kubelet.prepare([claim])[claim[1]]
    assert ans.error == ""
    (cid,) = ans.devices[0]["cdi"]
    opens = "cat /dev/ttyLKN0 && echo opened"
    try:
        r = podman(cid, cmd="stat -c '%F %t:%T %a %u %g' /dev/ttyLKN0")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "character special file 1:3 640 0 4242"
        member = podman(cid, cmd=opens, user="1000:4242")
        assert (member.returncode, member.stdout.strip()) == (0, "opened"), member.stderr
        image_group = podman(cid, cmd=opens, user="1000:1000", groups=["4242"])
        assert (image_group.returncode, image_group.stdout.strip()) == (0, "opened")
        outsider = podman(cid, cmd=opens, user="1000:1000")
        assert outsider.returncode != 0 and "opened" not in outsider.stdout
        assert "Permission denied" in outsider.stderr
        # The host node's group changes: the next reconcile pass writes it, the next container
        # has it (and the former member is now outside).
        os.chown(plugin.config.dev_dir / "ttyLKN0", 0, 4343)
        assert plugin.reconcile(machine.sources.walk()) == [claim[1]]
        assert podman(cid, cmd=opens, user="1000:4242").returncode != 0
        assert podman(cid, cmd=opens, user="1000:4343").returncode == 0
    finally:
        assert kubelet.unprepare([claim]) == {claim[1]: ""}


def test_disk_that_becomes_a_storage_role(api: FakeApiServer, machine: Machine,
                                          e2e: tuple[Plugin, TestKubelet]) -> None:
    plugin, kubelet = e2e
    held = new_claim(api, ["pci-0000-00-17-0"])
    assert kubelet.prepare([held])[held[1]].error == ""
    disk_id = f"liken.sh/device={held[1]}-pci-0000-00-17-0"
    try:
        assert podman(disk_id, cmd="test -b /dev/loop1").returncode == 0
        # Init now says loop1 backs a role: the disk belongs to the machine.
        machine.storage_role_on("loop1")
        # A new claim allocated from the older slice is refused (the recheck at prepare) ...
        late = new_claim(api, ["pci-0000-00-17-0"])
        out = kubelet.prepare([late])[late[1]]
        assert "not offered" in out.error
        assert not (CDI_DIR / f"liken.sh-{late[1]}.json").exists()
        # ... and the claim that holds it cannot start its next container.
        plugin.reconcile(machine.sources.walk())
        r = podman(disk_id, cmd="true")
        assert r.returncode != 0 and "failed to stat CDI host device" in r.stderr
    finally:
        assert kubelet.unprepare([held]) == {held[1]: ""}
    assert not (CDI_DIR / f"liken.sh-{held[1]}.json").exists()


def test_bluetooth_claim_delivers_usbfs_uinput_and_32_event_nodes(api: FakeApiServer,
                                                                  machine: Machine,
                                                                  e2e: tuple[Plugin,
                                                                             TestKubelet],
                                                                  ) -> None:
    # rules: bluetooth.deliveries. The usbfs node, /dev/uinput and the 32 legacy event
    # nodes by number. None of them exists on this machine (no USB, no uinput, no /dev/input):
    # the runtime creates them from the numbers (the CDI specification's minimally specified
    # node). Those the host lacks take the host's /dev/uinput's mode and owner (here a uinput
    # of the plugin's /dev, 0660 :4243; rules: delivery.mode-and-owner).
    plugin, kubelet = e2e
    make_node(plugin.config.dev_dir, "uinput", (10, 223), 0o660, 4243)
    claim, cid = prepare_radio(api, machine.b, kubelet, interfaces=2)
    try:
        r = podman(cid, cmd="stat -c '%n %t:%T %a %u %g' /dev/bus/usb/001/003 /dev/uinput "
                            "/dev/input/event*; ls /dev/input | wc -l")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.split("\n")
        assert lines[0] == "/dev/bus/usb/001/003 bd:2 660 0 4243"  # 189:2
        assert lines[1] == "/dev/uinput a:df 660 0 4243"  # 10:223
        events = sorted(lines[2:34], key=lambda x: int(x.split()[0][len("/dev/input/event"):]))
        assert events == [f"/dev/input/event{i} d:{64 + i:x} 660 0 4243" for i in range(32)]
        assert lines[34].strip() == "32"
    finally:
        assert kubelet.unprepare([claim]) == {claim[1]: ""}


def prepare_radio(api: FakeApiServer, b: SysfsBuilder, kubelet: TestKubelet, *,
                  interfaces: int = 1) -> tuple[tuple[str, str, str], str]:
    """A Bluetooth radio at USB 1-8 (device 3) with ``interfaces`` btusb interfaces, claimed and
    prepared: the claim and its CDI device ID."""
    usb = b.usb_device("1-8", busnum=1, devnum=3)
    radio = b.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    for i in range(1, interfaces):
        b.usb_interface(usb, f"1.{i}", driver="btusb", cls=0xE0)
    b.device(radio, "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
    claim = new_claim(api, ["usb-1-8-1-0"])
    ans = kubelet.prepare([claim])[claim[1]]
    assert ans.error == ""
    (cid,) = ans.devices[0]["cdi"]
    return claim, cid


def test_bluetooth_claim_cannot_reach_the_built_in_keyboard(api: FakeApiServer, machine: Machine,
                                                            e2e: tuple[Plugin, TestKubelet]
                                                            ) -> None:
    """rules: bluetooth.event-numbers-exclusive. The laptop's
    i8042 keyboard holds 13:64; the Bluetooth claim's container has no event0, and the device
    cgroup refuses 13:64 even to a node its root makes itself, while a stated number is let
    through (this host has no input device at 13:65, so the kernel answers "no such device")."""
    _plugin, kubelet = e2e
    b = machine.b
    i8042 = b.board("platform", "i8042", driver="i8042")
    serio = b.device(i8042, "serio0", "serio", driver="atkbd")
    keyboard = b.device(serio, "input1", "input", subdir="input")
    b.node(keyboard, "input", "event0", 13, 64, devname="input/event0")
    claim, cid = prepare_radio(api, b, kubelet)
    try:
        r = podman(cid, cmd="ls /dev/input")
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.split()) == sorted(f"event{i}" for i in range(1, 32))
        r = podman(cid, cmd="mknod /tmp/kbd c 13 64 && cat /tmp/kbd")
        assert r.returncode != 0 and "Operation not permitted" in r.stderr, r.stderr
        r = podman(cid, cmd="cat /dev/input/event1")
        assert r.returncode != 0 and "Operation not permitted" not in r.stderr
        assert "No such device" in r.stderr, r.stderr
    finally:
        assert kubelet.unprepare([claim]) == {claim[1]: ""}
