"""A seamless upgrade: the old and the new instance serve the node side by side through the test
kubelet, with prepares in flight on both, and no claim is lost (docs/plugin.md, "Upgrades")."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from liken_devices.plugin import Plugin
from liken_devices.plugin.state import STATE_FILE, StateBusy
from tests.support.fakeapi import FakeApiServer

from .conftest import cdi_files, new_claim
from .kubelet import TestKubelet
from .process import LIKEN, Node

OLD = "3f6a1c2e-0000-4000-8000-00000000a01d"
NEW = "9b2d4e6f-0000-4000-8000-00000000ee01"


def test_socket_names_are_unique_per_pod(make_plugin: Callable[..., Plugin]) -> None:
    old = make_plugin(start=False, pod_uid=OLD).config
    new = make_plugin(start=False, pod_uid=NEW).config
    assert old.registration_socket.name == f"liken.sh-{OLD}-reg.sock"
    assert old.dra_socket.name == f"dra-{OLD}.sock"
    assert new.registration_socket != old.registration_socket
    assert new.dra_socket != old.dra_socket
    deep = make_plugin(start=False, pod_uid=OLD, registry_dir=Path("/" + "d" * 60)).config
    assert len(str(deep.registration_socket)) <= 107  # a hash of the UID where it would not fit
    assert OLD not in deep.registration_socket.name


class Kubelet:
    """The kubelet's view of one driver with several registered endpoints: it calls the most
    recently registered one that answers, and retries a failed call (as it does on its next pod
    sync) on the others."""

    def __init__(self) -> None:
        self.endpoints: list[TestKubelet] = []
        self.lock = threading.Lock()
        self.retries = 0

    def register(self, plugin: Plugin) -> None:
        k = TestKubelet(plugin.config.registration_socket)
        k.register()
        with self.lock:
            self.endpoints.insert(0, k)

    def prepare(self, claim: tuple[str, str, str]) -> str:
        for _ in range(20):
            with self.lock:
                endpoints = list(self.endpoints)
            for k in endpoints:
                try:
                    return k.prepare([claim])[claim[1]].error
                except grpc.RpcError:
                    with self.lock:
                        self.retries += 1
            time.sleep(0.05)
        raise AssertionError(f"no endpoint answered the prepare of {claim[1]}")

    def close(self) -> None:
        for k in self.endpoints:
            k.close()


def test_old_and_new_side_by_side_lose_no_prepare(api: FakeApiServer,
                                                  make_plugin: Callable[..., Plugin]) -> None:
    old = make_plugin(pod_uid=OLD)
    kubelet = Kubelet()
    kubelet.register(old)
    claims = [new_claim(api, [dev]) for dev in ["usb-1-3", "pnp-00-01", "usb-1-2-1-0"] * 8]
    errors: dict[str, str] = {}
    done = threading.Event()

    def prepares(mine: list[tuple[str, str, str]]) -> None:
        for c in mine:
            errors[c[1]] = kubelet.prepare(c)
        done.set()

    # Prepares are in flight on the old instance while the new one starts and registers
    # (the DaemonSet's surge), then while the old one stops (its SIGTERM).
    threads = [threading.Thread(target=prepares, args=(claims[i::3],)) for i in range(3)]
    for t in threads:
        t.start()
    new = make_plugin(pod_uid=NEW)
    kubelet.register(new)
    # Two instances by design: both serve at once, and writes from both reach one state.
    both = [new_claim(api, ["pci-0000-00-02-0"]) for _ in range(6)]
    ks = [TestKubelet(p.config.registration_socket) for p in (old, new)]
    for k in ks:
        k.register()
    racing = [threading.Thread(target=lambda k=k, c=c: errors.__setitem__(
        c[1], k.prepare([c])[c[1]].error)) for k, c in zip(ks * 3, both, strict=True)]
    for t in racing:
        t.start()
    for t in racing:
        t.join(60)
    old.stop()  # the old pod's SIGTERM, prepares still in flight
    for t in threads:
        t.join(120)
    assert done.is_set()
    every = claims + both
    assert errors == {c[1]: "" for c in every}
    # The old instance removed its own sockets only; the new one still serves.
    assert not old.config.registration_socket.exists()
    assert new.config.registration_socket.exists() and new.config.dra_socket.exists()
    # Nothing lost: every claim is in the one state file and has its spec.
    state = json.loads((new.config.state_dir / STATE_FILE).read_text())
    assert sorted(state["claims"]) == sorted(c[1] for c in every)
    assert cdi_files(new.config.cdi_dir) == sorted(f"liken.sh-{c[1]}.json" for c in every)
    # The new instance unprepares claims the old one prepared.
    k = TestKubelet(new.config.registration_socket)
    k.register()
    assert k.unprepare(every) == {c[1]: "" for c in every}
    assert cdi_files(new.config.cdi_dir) == []
    assert json.loads((new.config.state_dir / STATE_FILE).read_text())["claims"] == {}
    for x in (k, *ks):
        x.close()
    kubelet.close()


def test_the_modes_exclude_each_other(make_plugin: Callable[..., Plugin], kube,
                                      hardware) -> None:
    upgrading = make_plugin(pod_uid=OLD)
    alone = Plugin(upgrading.config.__class__(**{
        **{f: getattr(upgrading.config, f) for f in upgrading.config.__dataclass_fields__},
        "pod_uid": None}), hardware.walk, kube)
    with pytest.raises(StateBusy, match="--seamless-upgrade mode"):
        alone.start()
    alone.stop()
    upgrading.stop()
    alone.start()
    try:
        with pytest.raises(StateBusy, match="does not run in --seamless-upgrade mode"):
            make_plugin(pod_uid=NEW)
    finally:
        alone.stop()


def _start(node: Node, uid: str) -> subprocess.Popen[bytes]:
    log = open(node.root / f"plugin-{uid[:8]}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [*LIKEN, "plugin", *node.common(), "--kubeconfig", str(node.kubeconfig),
         "--plugin-dir", str(node.sockdir / "plugins" / "liken.sh"),
         "--registry-dir", str(node.sockdir / "registry"), "--seamless-upgrade", "-v"],
        stdin=subprocess.DEVNULL, stderr=log, env={"POD_UID": uid, "PATH": "/usr/bin:/bin"})
    log.close()
    reg = node.sockdir / "registry" / f"liken.sh-{uid}-reg.sock"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, (node.root / f"plugin-{uid[:8]}.log").read_text()
        try:
            k = TestKubelet(reg)
            k.register()
            k.close()
            return proc
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_either_instance_may_die(api: FakeApiServer, node: Node) -> None:
    reg = node.sockdir / "registry"
    old = _start(node, OLD)
    new = _start(node, NEW)
    try:
        a, b = new_claim(api, ["usb-1-2-1-0"]), new_claim(api, ["pci-0000-00-1e-0"])
        ko = TestKubelet(reg / f"liken.sh-{OLD}-reg.sock")
        ko.register()
        assert ko.prepare([a])[a[1]].error == ""
        ko.close()
        old.send_signal(signal.SIGKILL)  # dies without removing anything
        old.wait(10)
        kn = TestKubelet(reg / f"liken.sh-{NEW}-reg.sock")
        kn.register()
        assert kn.prepare([b])[b[1]].error == ""
        state = json.loads((node.state / STATE_FILE).read_text())
        assert sorted(state["claims"]) == sorted([a[1], b[1]])
        kn.close()
        # The next upgrade: a third instance removes the dead one's sockets, not the live ones.
        third = "c0ffee00-0000-4000-8000-000000000003"
        newest = _start(node, third)
        assert sorted(p.name for p in reg.iterdir()) == sorted(
            [f"liken.sh-{NEW}-reg.sock", f"liken.sh-{third}-reg.sock"])
        new.send_signal(signal.SIGTERM)
        assert new.wait(20) == 0
        assert sorted(p.name for p in reg.iterdir()) == [f"liken.sh-{third}-reg.sock"]
        k3 = TestKubelet(reg / f"liken.sh-{third}-reg.sock")
        k3.register()
        assert k3.unprepare([a, b]) == {a[1]: "", b[1]: ""}
        assert cdi_files(node.cdi) == []
        k3.close()
        newest.send_signal(signal.SIGTERM)
        assert newest.wait(20) == 0
    finally:
        for p in (old, new):
            if p.poll() is None:
                p.kill()
                p.wait(10)


def test_seamless_upgrade_needs_a_pod_uid(node: Node) -> None:
    for env, want in (({}, "needs the pod's UID"), ({"POD_UID": "../x"}, "is not a UID")):
        out = subprocess.run([*LIKEN, "plugin", *node.common(), "--kubeconfig",
                              str(node.kubeconfig), "--seamless-upgrade"],
                             capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", **env})
        assert out.returncode == 2 and want in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_the_daemonset_upgrades_with_a_surge_in_seamless_mode() -> None:
    import yaml

    path = Path(__file__).resolve().parents[2] / "deploy" / "liken-devices" / "daemonset.yaml"
    ds = yaml.safe_load(path.read_text())
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert "--seamless-upgrade" in container["args"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in container["env"]}
    assert env["POD_UID"] == "metadata.uid"


# -- which instance is the newer: the pod's start, on a clock that cannot step back --------------
# rules: limits.one-writer


def test_the_old_pods_restarted_container_stays_the_older_instance(
        make_plugin: Callable[..., Plugin]) -> None:
    """The old pod's container restarting during a surge (a crash, a failed liveness probe) is a
    new process of the same pod: it stays the older instance, so the new pod keeps writing and
    stays ready, and the rollout goes on."""
    old = make_plugin(start=False, pod_uid=OLD)
    new = make_plugin(start=False, pod_uid=NEW)
    restarted: Plugin | None = None
    try:
        old.load()
        new.load()
        assert old.superseded() is not None and new.superseded() is None
        old.stop()  # the old container ends; the kubelet starts it again in the same pod
        restarted = make_plugin(start=False, pod_uid=OLD)
        restarted.load()
        assert new.superseded() is None, "the restarted old container took over the writing"
        assert restarted.superseded() is not None
    finally:
        for p in (restarted, new, old):
            if p is not None:
                p.stop()


def test_a_wall_clock_stepped_back_leaves_the_later_instance_the_newer(
        make_plugin: Callable[..., Plugin], monkeypatch: pytest.MonkeyPatch) -> None:
    """The old pod started while the wall clock was an hour ahead (NTP stepped it back since):
    the pod that started later is still the newer."""
    old = make_plugin(start=False, pod_uid=OLD)
    new = make_plugin(start=False, pod_uid=NEW)
    try:
        real = time.time_ns
        with monkeypatch.context() as m:
            m.setattr(time, "time_ns", lambda: real() + 3600 * 10**9)
            old.load()
        new.load()
        assert new.superseded() is None, "the new pod stands by for the old one"
        assert old.superseded() is not None
    finally:
        new.stop()
        old.stop()


def test_an_instance_started_later_is_newer_than_a_wall_clock_holder(
        make_plugin: Callable[..., Plugin]) -> None:
    """A holder named after the wall clock (``holder-<pid>-<time.time_ns()>``, as a build before
    the boot clock wrote it), however late, is older than this build's instances; and this
    build's holder number is above every such time, so an instance of that build stands by for
    this one."""
    import fcntl
    import os

    from liken_devices.plugin.state import _HOLDER_NAME

    new = make_plugin(start=False, pod_uid=NEW)
    state = new.config.state_dir
    state.mkdir(parents=True)
    planted = state / f"holder-1-{time.time_ns() + 3600 * 10**9}"
    fd = os.open(planted, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"pid 1 on node in --seamless-upgrade mode\n")
        new.load()
        assert new.superseded() is None
        mine = [n for n in os.listdir(state) if n.startswith("holder-") and n != planted.name]
        assert len(mine) == 1
        m = _HOLDER_NAME.fullmatch(mine[0])
        assert m is not None and int(m.group(2)) > time.time_ns() + 3600 * 10**9
    finally:
        os.close(fd)
        new.stop()


# -- an instance that cannot write its holder file writes nothing the node shows ------------------


@pytest.mark.root
def test_a_state_without_free_blocks_still_orders_the_instances(
        make_plugin: Callable[..., Plugin], tmp_path: Path) -> None:
    """The state's filesystem has no block left: the new instance's holder file is made empty
    (its name orders it and its lock proves it runs), so the old one knows it and stands by."""
    from tests.support.smallfs import fill_blocks, small_tmpfs

    with small_tmpfs(tmp_path / "full", size="64k", inodes=64) as fs:
        old = make_plugin(start=False, pod_uid=OLD, state_dir=fs / "state")
        new = make_plugin(start=False, pod_uid=NEW, state_dir=fs / "state")
        try:
            old.load()
            fill_blocks(fs)
            new.load()
            assert old.superseded() is not None, "the old instance does not see the new one"
            assert new.superseded() is None
        finally:
            new.stop()
            old.stop()


@pytest.mark.root
def test_an_instance_that_cannot_make_its_holder_file_cannot_say_it_writes(
        make_plugin: Callable[..., Plugin], tmp_path: Path) -> None:
    """No inode left for the new instance's holder file: the old one cannot know it runs, so the
    new one cannot claim to be the one writer; asked, it raises why (the agent then writes
    nothing and is not ready), and tries again: once there is room it is the newer."""
    from tests.support.smallfs import fill_inodes, small_tmpfs

    with small_tmpfs(tmp_path / "full", size="256k", inodes=64) as fs:
        old = make_plugin(start=False, pod_uid=OLD, state_dir=fs / "state")
        new = make_plugin(start=False, pod_uid=NEW, state_dir=fs / "state")
        try:
            old.load()
            fillers = fill_inodes(fs)
            new.load()
            with pytest.raises(OSError, match="No space left on device"):
                new.superseded()
            assert old.superseded() is None  # it cannot know: it writes alone
            for f in fillers[:4]:
                f.unlink()
            assert new.superseded() is None
            assert old.superseded() is not None
        finally:
            new.stop()
            old.stop()
