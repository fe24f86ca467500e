"""A surge upgrade whose two instances walk differently: only the newer writes the slice.

Two ``liken-devices run --seamless-upgrade`` processes serve one node, sharing the plugin's state
directory as the old and the new pod do, and publish to the loopback API server. Their walks
differ (a new version's rules, or new arguments, do that): here each reads a tree of its own. The
newer one's slice stands and is written once, not rewritten by each in turn; when the newer one
dies, the older writes its own view again (docs/plugin.md, "Upgrades").
"""

from __future__ import annotations

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

from .node import FixtureNode, is_root

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(not is_root(), reason="the agent's uevent socket")]

REPO = Path(__file__).resolve().parents[2]


class Instance:
    """One pod's agent: its own tree and probe socket, the node's shared kubelet directories."""

    def __init__(self, api: FakeApiServer, node: str, tree: FixtureNode, shared: Path,
                 uid: str, log: Path) -> None:
        args = [sys.executable, "-m", "liken_devices.cli", "run", "--node", node, *tree.args(),
                "-v", "--kubeconfig", str(api.write_kubeconfig(shared / f"kubeconfig-{uid}")),
                "--console", str(log.with_suffix(".console")), "--no-machine-side",
                "--cdi-dir", str(shared / "cdi"), "--state-dir", str(shared / "state"),
                "--plugin-dir", str(shared / "plugin"), "--registry-dir", str(shared / "reg"),
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
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                logs = [i.log.read_text()[-3000:] for i in (old, new) if i is not None]
                raise AssertionError(f"{what}: not after {timeout} s; slice {names()}; "
                                     + "\n---\n".join(logs))
            time.sleep(0.05)

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
