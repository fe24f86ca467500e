"""The state file as hostile input: whatever is at its name, the plugin starts, rebuilds the
prepared claims from the CDI specs and loses only what no spec holds (docs/plugin.md, "Bad
input"); ``claims`` on a malformed state is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from liken_devices.plugin import Plugin
from liken_devices.plugin.state import (
    STATE_FILE,
    PreparedClaim,
    PreparedDevice,
    StateError,
    StateStore,
    parse_state,
)
from liken_devices.sysfs.model import DevNode
from tests.support.fakeapi import FakeApiServer

from .conftest import NODE, Hardware, cdi_files, new_claim
from .kubelet import TestKubelet
from .process import LIKEN, Node

UID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def _valid() -> dict:
    return {"version": 1, "claims": {UID: {
        "namespace": "ns", "name": "c", "pool": NODE,
        "devices": [{"name": "usb-1-3", "requests": ["req"]}],
        "nodes": {"usb-1-3": [["bus/usb/001/005", "c", 189, 4]]},
        "present": {"usb-1-3": True}, "usbInterfaces": ["1-3:1.0"], "preparedAt": 1.5}}}


def _with(path: list, value: object) -> bytes:
    obj = _valid()
    cur = obj
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    return json.dumps(obj).encode()


# Each of these stopped the plugin (and with it the node agent) at every start, or would let a
# hostile file reach /dev, drivers_probe or a CDI spec.
CORRUPT: dict[str, bytes] = {
    "not json": b"{not json",
    "empty": b"",
    "not utf-8": b'{"version": 1, "claims": {"\xff": {}}}',
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "1e400 as a number": _with(["claims", UID, "nodes", "usb-1-3", 0, 2], 1e400),
    "float as a number": _with(["claims", UID, "nodes", "usb-1-3", 0, 2], 189.5),
    "bool as a number": _with(["claims", UID, "nodes", "usb-1-3", 0, 2], True),
    "huge number": _with(["claims", UID, "nodes", "usb-1-3", 0, 2], 10**40),
    "claims a list": _with(["claims"], []),
    "top level a list": b"[1, 2]",
    "wrong version": _with(["version"], 2),
    "namespace a number": _with(["claims", UID, "namespace"], 7),
    "node outside /dev": _with(["claims", UID, "nodes", "usb-1-3", 0, 0], "../etc/shadow"),
    "node of 3 fields": _with(["claims", UID, "nodes", "usb-1-3", 0], ["x", "c", 1]),
    "interface injection": _with(["claims", UID, "usbInterfaces"], ["1-3:1.0\n1-4:1.0"]),
    "uid with a slash": json.dumps({"version": 1, "claims": {"../x": {}}}).encode(),
    "preparedAt nan": _with(["claims", UID, "preparedAt"], "NaN"),
    "device name not a label": _with(["claims", UID, "devices", 0, "name"], "Bad_Name"),
    "present a string": _with(["claims", UID, "present", "usb-1-3"], "yes"),
    "escape sequence in a name": _with(["claims", UID, "name"], "c\x1b[2J"),
    "line break in a namespace": _with(["claims", UID, "namespace"], "ns\nfake line"),
}


def test_valid_state_parses() -> None:
    claims = parse_state(json.dumps(_valid()).encode())
    assert claims[UID].nodes["usb-1-3"] == [DevNode("bus/usb/001/005", "c", 189, 4)]


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_corrupt_state_is_a_state_error(name: str) -> None:
    with pytest.raises(StateError):
        parse_state(CORRUPT[name])


def _prepared(api: FakeApiServer, make_plugin: Callable[..., Plugin],
              devices: list[list[str]]) -> tuple[Plugin, list[tuple[str, str, str]]]:
    p = make_plugin()
    k = TestKubelet(p.config.registration_socket)
    k.register()
    claims = [new_claim(api, d) for d in devices]
    answers = k.prepare(claims)
    assert all(a.error == "" for a in answers.values()), answers
    k.close()
    p.stop()
    return p, claims


@pytest.mark.parametrize("name", ["not json", "deep nesting", "1e400 as a number",
                                  "not utf-8", "claims a list"])
def test_corrupt_state_is_rebuilt_from_the_specs(api: FakeApiServer, make_plugin, name: str,
                                                 hardware: Hardware, caplog) -> None:
    first, claims = _prepared(api, make_plugin, [["usb-1-2-1-0", "pnp-00-01"], ["usb-1-3"]])
    specs = {f: (first.config.cdi_dir / f).read_bytes() for f in cdi_files(first.config.cdi_dir)}
    state = first.config.state_dir / STATE_FILE
    state.write_bytes(CORRUPT[name])
    hardware.unplug("usb-1-3")

    p = make_plugin()  # starts: no exception, whatever the file held
    # Nothing the specs hold is lost: both claims, their devices and nodes, and the sweep left
    # every spec in place.
    assert sorted(p.prepared()) == sorted(c[1] for c in claims)
    assert {f: (p.config.cdi_dir / f).read_bytes() for f in cdi_files(p.config.cdi_dir)} == specs
    got = p.prepared()[claims[0][1]]
    assert got.rebuilt and got.device_names() == ["pnp-00-01", "usb-1-2-1-0"]
    assert got.nodes["pnp-00-01"] == [DevNode("ttyS1", "c", 4, 65)]
    kept = [f.name for f in state.parent.iterdir() if f.name.startswith("claims.json.bad-")]
    assert len(kept) == 1 and (state.parent / kept[0]).read_bytes() == CORRUPT[name]
    assert all(uid in caplog.text for _, uid, _ in claims)  # logged per claim
    # The rebuilt state is saved, and works: health, reconcile, unprepare.
    assert sorted(json.loads(state.read_text())["claims"]) == sorted(c[1] for c in claims)
    p.reconcile(hardware.walk())
    assert ("node-a", "usb-1-3", False) in {(d.pool, d.device, d.healthy)
                                            for d in p.health()[1]}
    assert ".liken.sh-absent/usb-1-3/bus/usb/001/005" in (
        p.config.cdi_dir / f"liken.sh-{claims[1][1]}.json").read_text()
    k = TestKubelet(p.config.registration_socket)
    k.register()
    # The kubelet's prepare of a rebuilt claim answers as before and restores what was lost.
    again = k.prepare([claims[0]])[claims[0][1]]
    assert again.error == "" and {d["requests"][0] for d in again.devices} == {"req"}
    assert not p.prepared()[claims[0][1]].rebuilt
    assert p.prepared()[claims[0][1]].namespace == "default"
    assert k.unprepare(claims) == {c[1]: "" for c in claims}
    assert cdi_files(p.config.cdi_dir) == []
    k.close()


def test_rebuilt_usb_claim_finds_its_interfaces_at_the_next_walk(tmp_path: Path) -> None:
    from liken_devices.plugin.state import rebuild_from_specs

    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    other = str(uuid.uuid4())
    spec = {"cdiVersion": "0.5.0", "kind": "liken.sh/device", "devices": [
        {"name": f"{UID}-usb-1-3", "containerEdits": {"deviceNodes": [
            {"path": "/dev/.liken.sh-absent/usb-1-3/bus/usb/001/005"}]}}]}
    (cdi_dir / f"liken.sh-{UID}.json").write_text(json.dumps(spec))
    (cdi_dir / f"liken.sh-{other}.json").write_text(json.dumps(spec))  # names another claim
    claims = rebuild_from_specs(cdi_dir, NODE)
    assert list(claims) == [UID]
    c = claims[UID]
    assert c.present == {"usb-1-3": False}
    assert c.nodes["usb-1-3"][0].name == "bus/usb/001/005"


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo", "too large", "dangling"])
def test_whatever_is_at_the_state_name_the_plugin_starts(api: FakeApiServer, make_plugin,
                                                         kind: str, tmp_path: Path) -> None:
    first, claims = _prepared(api, make_plugin, [["usb-1-3"]])
    state = first.config.state_dir / STATE_FILE
    secret = tmp_path / "secret"
    secret.write_text(json.dumps(_valid()))
    state.unlink()
    if kind == "directory":
        state.mkdir()
        (state / "x").write_text("")
    elif kind == "symlink":
        state.symlink_to(secret)  # a valid state elsewhere: never followed
    elif kind == "fifo":
        os.mkfifo(state)  # reading it would block forever
    elif kind == "too large":
        with open(state, "wb") as f:
            f.truncate(65 << 20)
    else:
        state.symlink_to(tmp_path / "nowhere")
    p = make_plugin()
    assert list(p.prepared()) == [claims[0][1]]
    assert p.prepared()[claims[0][1]].rebuilt
    assert json.loads(secret.read_text()) == _valid()  # the symlink's target is untouched
    assert state.is_file() and not state.is_symlink()


def test_unreadable_spec_loses_only_its_claim(api: FakeApiServer, make_plugin, caplog) -> None:
    first, claims = _prepared(api, make_plugin, [["usb-1-3"], ["pnp-00-01"]])
    (first.config.state_dir / STATE_FILE).write_text("garbage")
    bad = first.config.cdi_dir / f"liken.sh-{claims[1][1]}.json"
    bad.write_text('{"kind": "liken.sh/device", "devices": [{"name": "x"}]}')
    p = make_plugin()
    assert list(p.prepared()) == [claims[0][1]]
    assert f"claim {claims[1][1]} is lost" in caplog.text


def test_missing_state_with_specs_is_rebuilt(api: FakeApiServer, make_plugin) -> None:
    first, claims = _prepared(api, make_plugin, [["usb-1-3"]])
    (first.config.state_dir / STATE_FILE).unlink()
    p = make_plugin()
    assert list(p.prepared()) == [claims[0][1]]
    assert cdi_files(p.config.cdi_dir) == [f"liken.sh-{claims[0][1]}.json"]


def test_stale_temp_files_are_swept_at_start(make_plugin, tmp_path: Path) -> None:
    state_dir, cdi_dir = tmp_path / "state", tmp_path / "cdi"
    state_dir.mkdir()
    cdi_dir.mkdir()
    stale = [state_dir / ".claims.json.1234.deadbeef.tmp", state_dir / ".claims.json.99.tmp",
             cdi_dir / f".liken.sh-{UID}.json.77.0011aabb.tmp"]
    for f in stale:
        f.write_text("half")
    keep = [cdi_dir / ".other-vendor.json.1.tmp", state_dir / "notes.tmp"]
    for f in keep:
        f.write_text("not ours")
    make_plugin()
    assert not any(f.exists() for f in stale)
    assert all(f.exists() for f in keep)


def test_state_roundtrip_mode_and_rebuilt_flag(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    store.claims[UID] = PreparedClaim(
        uid=UID, namespace="", name="", pool=NODE,
        devices=[PreparedDevice("usb-1-3", [], None)],
        nodes={"usb-1-3": [DevNode("bus/usb/001/005", "c", 189, 4)]},
        present={"usb-1-3": True}, rebuilt=True)
    old = os.umask(0)
    try:
        store.save()
    finally:
        os.umask(old)
    assert oct(store.path.stat().st_mode & 0o777) == "0o600"
    assert oct(store.directory.stat().st_mode & 0o777) == "0o700"
    again = StateStore(tmp_path / "state")
    again.load()
    assert again.claims[UID].to_json() == store.claims[UID].to_json()
    assert again.claims[UID].rebuilt


# -- `liken-devices claims` on a bad state -------------------------------------------------------

@pytest.mark.parametrize("name", ["not json", "deep nesting", "1e400 as a number", "not utf-8",
                                  "node outside /dev"])
def test_claims_on_a_malformed_state_is_one_line_and_exit_2(node: Node, name: str) -> None:
    node.state.mkdir(parents=True)
    (node.state / STATE_FILE).write_bytes(CORRUPT[name])
    out = subprocess.run([*LIKEN, "claims", *node.common()], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "claims.json" in out.stderr
    assert (node.state / STATE_FILE).read_bytes() == CORRUPT[name]  # claims never writes


def test_claims_on_a_directory_state_is_exit_2(node: Node) -> None:
    (node.state / STATE_FILE).mkdir(parents=True)
    out = subprocess.run([*LIKEN, "claims", *node.common()], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_claims_names_a_rebuilt_claim(api: FakeApiServer, make_plugin, node: Node) -> None:
    first, claims = _prepared(api, make_plugin, [["usb-1-3"]])
    (first.config.state_dir / STATE_FILE).write_text("garbage")
    p = make_plugin()
    p.stop()
    out = subprocess.run([*LIKEN, "claims", *node.common()[:10], "--state-dir",
                          str(p.config.state_dir)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split()[:3] == ["(rebuilt)", claims[0][1], "usb-1-3"]
