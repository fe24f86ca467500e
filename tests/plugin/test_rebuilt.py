"""Claims rebuilt from their CDI specs are checked against the API once the kubelet had its chance
to unprepare them (plugin/core.py), and a refused instance names only live lock holders
(plugin/state.py)."""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from liken_devices.plugin import Plugin
from liken_devices.plugin.state import STATE_FILE, StateBusy, StateStore
from tests.support.fakeapi import FakeApiServer

from .conftest import Hardware, cdi_files, new_claim
from .kubelet import TestKubelet

LATER = 10_000.0  # seconds: far past any grace


def _rebuilt(api: FakeApiServer, make_plugin: Callable[..., Plugin], devices: list[list[str]],
             **kw: object) -> tuple[Plugin, list[tuple[str, str, str]]]:
    """Claims prepared by a first plugin whose state file is then lost; the second plugin,
    started, has rebuilt them from their specs."""
    first = make_plugin()
    k = TestKubelet(first.config.registration_socket)
    k.register()
    claims = [new_claim(api, d) for d in devices]
    assert all(a.error == "" for a in k.prepare(claims).values())
    k.close()
    first.stop()
    (first.config.state_dir / STATE_FILE).write_bytes(b"not json")
    p = make_plugin(**kw)
    assert all(p.prepared()[uid].rebuilt for _, uid, _ in claims)
    return p, claims


def _spec(p: Plugin, uid: str) -> str:
    return f"liken.sh-{uid}.json"


def test_a_rebuilt_claim_keeps_its_name(api: FakeApiServer, make_plugin) -> None:
    p, [(ns, uid, name)] = _rebuilt(api, make_plugin, [["usb-1-3"]])
    got = p.prepared()[uid]
    assert (got.namespace, got.name) == (ns, name)


def test_a_deleted_claim_is_dropped_after_the_grace_with_one_line(
        api: FakeApiServer, make_plugin, caplog: pytest.LogCaptureFixture) -> None:
    p, [gone, kept] = _rebuilt(api, make_plugin, [["usb-1-3"], ["pnp-00-01"]])
    api.delete_object("resourceclaims", gone[2], gone[0])
    # Within the grace nothing is asked nor dropped: the kubelet may still unprepare it.
    api.requests.clear()
    wait = p.check_rebuilt(now=time.time())
    assert wait is not None and wait > 60
    assert gone[1] in p.prepared() and not api.requests
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="liken_devices.plugin.core"):
        assert p.check_rebuilt(now=time.time() + LATER) is None
    assert sorted(p.prepared()) == [kept[1]]
    assert cdi_files(p.config.cdi_dir) == [_spec(p, kept[1])]
    lines = [r.getMessage() for r in caplog.records if gone[1] in r.getMessage()]
    assert len(lines) == 1 and "dropped claim" in lines[0] and "not found" in lines[0]
    # The state on disk forgot it too, and the health no longer lists its device.
    assert gone[1] not in (p.config.state_dir / STATE_FILE).read_text()
    assert "usb-1-3" not in {d.device for d in p.health()[1]}


def test_a_claim_the_api_still_allocates_here_is_kept(api: FakeApiServer, make_plugin) -> None:
    p, [(_, uid, _)] = _rebuilt(api, make_plugin, [["usb-1-3"]])
    assert p.check_rebuilt(now=time.time() + LATER) is None
    assert uid in p.prepared() and cdi_files(p.config.cdi_dir) == [_spec(p, uid)]


@pytest.mark.parametrize("change", ["replaced", "deallocated", "another node",
                                    "name lost", "planted spec"])
def test_a_claim_the_api_does_not_know_here_is_dropped(api: FakeApiServer, make_plugin,
                                                       tmp_path: Path, change: str) -> None:
    p, [(ns, uid, name)] = _rebuilt(api, make_plugin, [["usb-1-3"]])
    if change == "replaced":
        api.set_claim_uid(ns, name, str(uuid.uuid4()))
    elif change == "deallocated":
        api.remove_allocation(ns, name)
    elif change == "another node":
        api.delete_object("resourceclaims", name, ns)
        api.add_claim(ns, name, uid=uid, node="node-b", results=[{"device": "usb-1-3"}])
    p.stop()
    if change == "name lost":
        (p.config.state_dir / "names" / uid).unlink()
    if change == "planted spec":
        planted = str(uuid.uuid4())
        spec = (p.config.cdi_dir / _spec(p, uid)).read_text().replace(uid, planted)
        (p.config.cdi_dir / _spec(p, planted)).write_text(spec)
        (p.config.state_dir / STATE_FILE).write_bytes(b"lost again")
        uid = planted
    else:
        (p.config.state_dir / STATE_FILE).write_bytes(b"lost again")
    p = make_plugin()
    assert p.prepared()[uid].rebuilt
    assert p.check_rebuilt(now=time.time() + LATER) is None
    assert uid not in p.prepared()
    assert _spec(p, uid) not in cdi_files(p.config.cdi_dir)


def test_an_unreachable_api_keeps_the_claim_and_asks_again(api: FakeApiServer,
                                                           make_plugin) -> None:
    p, [(_, uid, _)] = _rebuilt(api, make_plugin, [["usb-1-3"]], rebuilt_retry=7.0)
    api.fail_next(503, count=1, path_contains="resourceclaims")
    assert p.check_rebuilt(now=time.time() + LATER) == 7.0
    assert uid in p.prepared()
    assert p.check_rebuilt(now=time.time() + LATER) is None  # answered: allocated here
    assert uid in p.prepared()


def test_a_claim_prepared_again_is_no_longer_checked(api: FakeApiServer, make_plugin) -> None:
    p, [claim] = _rebuilt(api, make_plugin, [["usb-1-3"]])
    k = TestKubelet(p.config.registration_socket)
    k.register()
    assert k.prepare([claim])[claim[1]].error == ""
    k.close()
    api.delete_object("resourceclaims", claim[2], claim[0])
    assert p.check_rebuilt(now=time.time() + LATER) is None
    assert claim[1] in p.prepared()  # the kubelet's to unprepare, as any prepared claim


def test_the_plugin_drops_it_on_its_own_after_the_grace(api: FakeApiServer, make_plugin,
                                                        hardware: Hardware) -> None:
    released: list[int] = []
    p, [(ns, uid, name)] = _rebuilt(api, make_plugin, [["usb-1-3"]], rebuilt_grace=0.3)
    p.on_release = lambda: released.append(1)
    api.delete_object("resourceclaims", name, ns)
    api.wait_for(lambda: uid not in p.prepared())
    assert _spec(p, uid) not in cdi_files(p.config.cdi_dir)
    api.wait_for(lambda: released)


# ---- the lock's holder ---------------------------------------------------------------------


def _dead_holder(state_dir: Path) -> Path:
    """The holder file a long-dead instance left (nobody locks it)."""
    path = state_dir / "holder-1-1"
    path.write_text("pid 1 on long-gone (pod liken-devices-dead), since 2020-01-01T00:00:00Z\n")
    return path


def test_a_refusal_names_the_live_holder_not_a_dead_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    dead = _dead_holder(state)
    live = StateStore(state)
    live.acquire()
    try:
        with pytest.raises(StateBusy) as err:
            StateStore(state).acquire()
        assert f"locked by pid {os.getpid()} on " in str(err.value)
        assert "long-gone" not in str(err.value)
        assert not dead.exists()  # removed: its lock was free
    finally:
        live.release()
    again = StateStore(state)
    again.acquire()  # the live holder is gone too: nothing is locked
    again.release()


def test_a_refusal_names_the_seamless_instances(tmp_path: Path) -> None:
    state = tmp_path / "state"
    old, new = StateStore(state), StateStore(state)
    old.acquire(shared=True)
    new.acquire(shared=True)
    try:
        with pytest.raises(StateBusy) as err:
            StateStore(state).acquire()
        text = str(err.value)
        assert text.count(f"pid {os.getpid()} on ") == 2
        assert text.count("in --seamless-upgrade mode") >= 2
    finally:
        old.release()
        new.release()


def test_a_holder_file_is_locked_for_the_holders_life(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = StateStore(state)
    store.acquire()
    [holder] = [p for p in state.iterdir() if p.name.startswith("holder-")]
    fd = os.open(holder, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    store.release()
    assert not holder.exists()


def test_an_exclusive_holder_long_dead_is_not_named_by_the_upgrade_that_followed(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    # An instance in the default mode ran once and wrote its name where the lock lives...
    (state / "instance.lock").write_text("pid 1 on long-gone, since 2020-01-01T00:00:00Z\n")
    # ...and two instances of a seamless upgrade hold the lock now.
    old = StateStore(state)
    old.acquire(shared=True)
    try:
        with pytest.raises(StateBusy) as err:
            StateStore(state).acquire()
        assert "long-gone" not in str(err.value)
        assert f"pid {os.getpid()} on " in str(err.value)
    finally:
        old.release()
