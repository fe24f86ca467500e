"""A surge upgrade whose two instances walk differently: only the newer writes the slice.

Two ``liken-devices run --seamless-upgrade`` processes serve one node, sharing the plugin's state
directory as the old and the new pod do, and publish to the loopback API server. Their walks
differ (a new version's rules, or new arguments, do that): here each reads a tree of its own. The
newer one's slice stands and is written once, not rewritten by each in turn; when the newer one
dies, the older writes its own view again (docs/plugin.md, "Upgrades"). The old pod's container
restarting mid-rollout stays the older, and an instance whose holder file cannot be made (a
full state filesystem) writes nothing and is not ready until it can (rules: limits.one-writer).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fakeapi import FakeApiServer
from tests.support.wait import wait_until

from .node import FixtureNode, is_root

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(not is_root(), reason="the agent's uevent socket")]

REPO = Path(__file__).resolve().parents[2]
_NODES = itertools.count()


class Instance:
    """One pod's agent: its own tree and probe socket, the node's shared kubelet directories."""

    def __init__(self, api: FakeApiServer, node: str, tree: FixtureNode, shared: Path,
                 uid: str, log: Path, state: Path | None = None) -> None:
        self.probe = shared / f"probe-{uid}.sock"  # the pod's own /tmp in a real pod
        self.shared, self.uid = shared, uid
        args = [sys.executable, "-m", "liken_devices.cli", "run", "--node", node, *tree.args(),
                "-v", "--kubeconfig", str(api.write_kubeconfig(shared / f"kubeconfig-{uid}")),
                "--console", str(log.with_suffix(".console")), "--no-machine-side",
                "--cdi-dir", str(shared / "cdi"), "--state-dir", str(state or shared / "state"),
                "--plugin-dir", str(shared / "plugin"), "--registry-dir", str(shared / "reg"),
                "--metrics-port", "0", "--probe-socket", str(self.probe),
                "--seamless-upgrade", "--pod-uid", uid]
        self.log = log
        env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         env=env)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)

    def register(self) -> bool:
        """The kubelet's registration handshake with this instance (readiness waits for it);
        False while its socket is not there yet."""
        from tests.plugin.kubelet import TestKubelet

        k = TestKubelet(self.shared / "reg" / f"liken.sh-{self.uid}-reg.sock")
        try:
            k.register()
        except Exception:
            return False
        finally:
            k.close()
        return True

    def readyz(self) -> tuple[bool, str]:
        """What the pod's readiness probe hears from this instance."""
        from liken_devices.probe import ask

        return ask(self.probe, "/readyz")


class Surge:
    """One node's surge upgrade on the loopback API server: the shared kubelet directories, the
    slice's devices and how often it was written, instances started and stopped."""

    def __init__(self, api: FakeApiServer, tmp_path: Path, request: pytest.FixtureRequest,
                 state: Path | None = None) -> None:
        self.api, self.tmp_path, self.state = api, tmp_path, state
        self.node = f"surge-{os.getpid()}-{next(_NODES)}"
        api.add_node(self.node)
        api.add_machine(self.node, {})
        # The kubelet's directories, short: a socket's path has at most 107 bytes.
        self.shared = Path(tempfile.mkdtemp(prefix="surge-", dir="/tmp"))
        request.addfinalizer(lambda: shutil.rmtree(self.shared, ignore_errors=True))
        self.instances: list[Instance] = []
        request.addfinalizer(self.stop_all)

    def start(self, tree: FixtureNode, uid: str, name: str) -> Instance:
        i = Instance(self.api, self.node, tree, self.shared, uid, self.tmp_path / f"{name}.log",
                     self.state)
        self.instances.append(i)
        return i

    def stop_all(self) -> None:
        for i in self.instances:
            i.stop(signal.SIGKILL)

    def names(self) -> list[str]:
        obj = self.api.get_object("resourceslices", f"{self.node}-liken.sh")
        return sorted(d["name"] for d in (obj or {}).get("spec", {}).get("devices") or [])

    def slice_writes(self) -> int:
        return sum(1 for method, path, _ in self.api.requests
                   if method in ("PATCH", "PUT", "POST") and "/resourceslices" in path)

    def until(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        def said() -> str:
            logs = [f"{i.log.name}: {i.log.read_text()[-2500:]}" for i in self.instances]
            return f"{what}; slice {self.names()}; " + "\n---\n".join(logs)

        wait_until(check, timeout, said, every=0.05)

    def steady(self, view: list[str], seconds: float = 3.0) -> None:
        """The slice stays ``view`` and is not written for ``seconds``: one writer."""
        before = self.slice_writes()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.names() == view, "the two instances write the slice in turn"
            time.sleep(0.05)
        assert self.slice_writes() == before, "the two instances rewrite the slice in turn"


def test_only_the_newer_instance_writes_the_slice(api: FakeApiServer, tmp_path: Path,
                                                  request: pytest.FixtureRequest) -> None:
    node = f"surge-{os.getpid()}"
    api.add_node(node)
    api.add_machine(node, {})
    # The kubelet's directories, short: a socket's path has at most 107 bytes.
    shared = Path(tempfile.mkdtemp(prefix="surge-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    old_tree, new_tree = FixtureNode(tmp_path / "old"), FixtureNode(tmp_path / "new")
    dongle = new_tree.plug_usb(2)  # what only the new instance's walk finds

    def names() -> list[str]:
        obj = api.get_object("resourceslices", f"{node}-liken.sh")
        return sorted(d["name"] for d in (obj or {}).get("spec", {}).get("devices") or [])

    def slice_writes() -> int:
        return sum(1 for method, path, _ in api.requests
                   if method in ("PATCH", "PUT", "POST") and "/resourceslices" in path)

    old_view = names_of(old_tree)
    new_view = names_of(new_tree)
    assert dongle in new_view and dongle not in old_view

    old = Instance(api, node, old_tree, shared, "0000-old", tmp_path / "old.log")
    new: Instance | None = None

    def until(what: str, check: Callable[[], bool], timeout: float) -> None:
        def said() -> str:
            logs = [i.log.read_text()[-3000:] for i in (old, new) if i is not None]
            return f"{what}; slice {names()}; " + "\n---\n".join(logs)

        wait_until(check, timeout, said, every=0.05)

    try:
        until("the old instance's slice", lambda: names() == old_view, 30)
        new = Instance(api, node, new_tree, shared, "0000-new", tmp_path / "new.log")
        until("the new instance's slice", lambda: names() == new_view, 30)
        until("the old one standing by", lambda: "this one stands by" in old.log.read_text(), 10)
        # Both run and both watch the slice; it stays as the newer one wrote it.
        before = slice_writes()
        time.sleep(3)
        assert slice_writes() == before, "the two instances rewrite the slice in turn"
        assert names() == new_view

        # The newer one dies (a crash, or its pod deleted): the older writes its own view again
        # within its standby check.
        new.stop(signal.SIGKILL)
        until("the old instance's slice again", lambda: names() == old_view, 15)
        assert "the claims' CDI specs again" in \
            old.log.read_text()
        assert old.proc.poll() is None, old.log.read_text()
    finally:
        if new is not None:
            new.stop(signal.SIGKILL)
        old.stop()
    assert old.proc.returncode == 0, old.log.read_text()[-4000:]


def names_of(tree: FixtureNode) -> list[str]:
    """The devices a walk of ``tree`` publishes."""
    from liken_devices.slices import devices_json

    return sorted(d["name"] for d in devices_json(tree.sources().walk()))


def test_the_old_pods_restarted_container_leaves_the_new_pod_writing_and_ready(
        api: FakeApiServer, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The old pod's container restarts mid-rollout (killed; the kubelet starts it again in the
    same pod, same UID): it is still the older instance. The new pod's walk stays what the node
    shows and the new pod stays ready, so the rollout goes on; the restarted one stands by."""
    surge = Surge(api, tmp_path, request)
    old_tree, new_tree = FixtureNode(tmp_path / "old"), FixtureNode(tmp_path / "new")
    new_tree.plug_usb(2)  # what only the new instance's walk finds
    old_view, new_view = names_of(old_tree), names_of(new_tree)
    old = surge.start(old_tree, "0000-old", "old")
    surge.until("the old instance's slice", lambda: surge.names() == old_view, 30)
    new = surge.start(new_tree, "0000-new", "new")
    surge.until("the new instance's slice", lambda: surge.names() == new_view, 30)
    surge.until("the kubelet's registration", new.register, 15)
    surge.until("the new pod ready", lambda: new.readyz()[0], 15)
    surge.until("the old one standing by", lambda: "this one stands by" in old.log.read_text(),
                10)
    old.stop(signal.SIGKILL)
    restarted = surge.start(old_tree, "0000-old", "old-restarted")
    surge.until("the restarted old container's first walk",
                lambda: "stands by" in restarted.log.read_text() or surge.names() != new_view,
                30)
    surge.steady(new_view)
    assert new.readyz()[0], new.readyz()
    assert new.proc.poll() is None and restarted.proc.poll() is None


def test_an_instance_whose_holder_file_cannot_be_made_writes_nothing_and_is_not_ready(
        api: FakeApiServer, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The state's filesystem has no inode left when the new pod starts: its holder file cannot
    be made, so the old instance cannot know it runs and goes on writing. The new one writes
    nothing (the slice stays the old view, written by one), says why in /readyz, and once an
    inode is free it makes its holder, writes its own walk and is ready; the old one stands by."""
    from tests.support.smallfs import fill_inodes, small_tmpfs

    with small_tmpfs(tmp_path / "statefs", size="1m", inodes=64) as fs:
        surge = Surge(api, tmp_path, request, state=fs / "state")
        old_tree, new_tree = FixtureNode(tmp_path / "old"), FixtureNode(tmp_path / "new")
        new_tree.plug_usb(2)
        old_view, new_view = names_of(old_tree), names_of(new_tree)
        old = surge.start(old_tree, "0000-old", "old")
        surge.until("the old instance's slice", lambda: surge.names() == old_view, 30)
        fillers = fill_inodes(fs)
        new = surge.start(new_tree, "0000-new", "new")
        surge.until("the new instance's verdict", lambda: "holder file" in new.readyz()[1], 30)
        surge.steady(old_view)
        ready, why = new.readyz()
        assert not ready and "No space left on device" in why, why
        for f in fillers:
            f.unlink()
        surge.until("the new instance's slice", lambda: surge.names() == new_view, 15)
        surge.until("the kubelet's registration", new.register, 15)
        surge.until("the new pod ready", lambda: new.readyz()[0], 15)
        surge.until("the old one standing by",
                    lambda: "this one stands by" in old.log.read_text(), 10)
        surge.steady(new_view)
        surge.stop_all()
