"""The state file's rules, each with its expected answer written out (docs/plugin.md, "State").

``claims.json`` is written 0600 in a 0700 directory (claim names and namespaces are root's
business), and read back as hostile input: every field is checked, and a file that breaks any
rule is refused whole (the plugin then rebuilds from the CDI specs). The fuzz test's oracle is
tests/plugin/state_model.py, a plain second reading that never calls the parser it judges.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.plugin.state import (
    HOLDER_EPOCH,
    PreparedClaim,
    PreparedDevice,
    StateError,
    StateStore,
    boot_clock,
    parse_state,
    render_state,
)
from liken_devices.sysfs.model import DevNode
from tests.support.hostile import examples

from . import state_model

UID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def claim(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "namespace": "ns", "name": "c", "pool": "node-1",
        "devices": [{"name": "usb-1-3", "requests": ["req"], "shareID": "s1"}],
        "nodes": {"usb-1-3": [["bus/usb/001/005", "c", 189, 4]]},
        "present": {"usb-1-3": True}, "usbInterfaces": ["1-3:1.0", "1-2.4.1:1.2"],
        "preparedAt": 1700000000.5}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not DROP}


DROP = object()


def state(*claims: tuple[str, Any], version: Any = 1) -> bytes:
    return json.dumps({"version": version, "claims": dict(claims)}).encode()


def test_a_full_claim_reads_back_field_by_field() -> None:
    got = parse_state(state((UID, claim(rebuilt=True))))
    assert list(got) == [UID]
    c = got[UID]
    assert (c.uid, c.namespace, c.name, c.pool) == (UID, "ns", "c", "node-1")
    assert [(d.name, d.requests, d.share_id) for d in c.devices] == [("usb-1-3", ["req"], "s1")]
    assert c.nodes == {"usb-1-3": [DevNode("bus/usb/001/005", "c", 189, 4)]}
    assert c.present == {"usb-1-3": True}
    assert c.usb_interfaces == ["1-3:1.0", "1-2.4.1:1.2"]
    assert c.prepared_at == 1700000000.5 and c.rebuilt is True


def test_absent_optional_fields_take_their_defaults() -> None:
    got = parse_state(state((UID, {"namespace": "ns", "name": "c"})))[UID]
    assert (got.pool, got.devices, got.nodes, got.present, got.usb_interfaces,
            got.prepared_at, got.rebuilt) == ("", [], {}, {}, [], 0.0, False)


def test_the_smallest_numbers_are_kept() -> None:
    """0:0 is a number like any other (a node read back from an absent device's spec is c 0:0)."""
    got = parse_state(state((UID, claim(nodes={"usb-1-3": [["gone", "c", 0, 0]]}))))[UID]
    assert got.nodes == {"usb-1-3": [DevNode("gone", "c", 0, 0)]}


def test_the_largest_numbers_and_longest_names_are_kept() -> None:
    got = parse_state(state((UID, claim(
        namespace="n" * 253, nodes={"a" * 63: [["x", "b", 4294967295, 4294967295]]},
        devices=[{"name": "a" * 63, "requests": []}], present={}, usbInterfaces=[
            "123-1.2.3.4.5.6.7:123.123"]))))[UID]
    assert got.namespace == "n" * 253
    assert got.nodes == {"a" * 63: [DevNode("x", "b", 4294967295, 4294967295)]}
    assert got.usb_interfaces == ["123-1.2.3.4.5.6.7:123.123"]


REFUSED: dict[str, bytes] = {
    "version 2": state((UID, claim()), version=2),
    "version missing": json.dumps({"claims": {}}).encode(),
    "version as a string": state((UID, claim()), version="1"),
    "version true": state((UID, claim()), version=True),
    "version 1.0": state((UID, claim()), version=1.0),
    "claims missing": json.dumps({"version": 1}).encode(),
    "claims a list": json.dumps({"version": 1, "claims": []}).encode(),
    "a list": json.dumps([1]).encode(),
    "not UTF-8": b'{"version": 1, "claims": {"\xff": 1}}',
    "nested too deep": b"[" * 100_000 + b"]" * 100_000,
    "a UID with a slash": state(("../x", claim())),
    "a UID with a trailing dash": state(("abc-", claim())),
    "a claim that is a list": state((UID, [])),
    "no namespace": state((UID, claim(namespace=DROP))),
    "no name": state((UID, claim(name=DROP))),
    "a namespace of 254": state((UID, claim(namespace="n" * 254))),
    "a name with a newline": state((UID, claim(name="c\n"))),
    "a name with an escape": state((UID, claim(name="c\x1b[2J"))),
    "a pool that is a number": state((UID, claim(pool=1))),
    "devices an object": state((UID, claim(devices={}))),
    "a device that is a string": state((UID, claim(devices=["usb-1-3"]))),
    "a device name not a DNS label": state((UID, claim(devices=[{"name": "Usb_1"}]))),
    "a device without a name": state((UID, claim(devices=[{"requests": []}]))),
    "requests a string": state((UID, claim(devices=[{"name": "a", "requests": "req"}]))),
    "a request that is a number": state((UID, claim(devices=[{"name": "a", "requests": [1]}]))),
    "a share ID that is a number": state((UID, claim(devices=[{"name": "a", "shareID": 5}]))),
    "nodes a list": state((UID, claim(nodes=[]))),
    "a node of three fields": state((UID, claim(nodes={"a": [["x", "c", 1]]}))),
    "a node of five fields": state((UID, claim(nodes={"a": [["x", "c", 1, 2, 3]]}))),
    "a node type p": state((UID, claim(nodes={"a": [["x", "p", 1, 2]]}))),
    "a node name that leaves /dev": state((UID, claim(nodes={"a": [["../etc/shadow", "c", 1,
                                                                    2]]}))),
    "an absolute node name": state((UID, claim(nodes={"a": [["/etc/shadow", "c", 1, 2]]}))),
    "a node name with a space": state((UID, claim(nodes={"a": [["tty S1", "c", 1, 2]]}))),
    # rules: delivery.absent-node. Nothing creates the absent root: no node is there.
    "a node name in the absent root": state((UID, claim(nodes={"a": [
        [".liken.sh-absent/a/ttyS1", "c", 4, 65]]}))),
    "a negative major": state((UID, claim(nodes={"a": [["x", "c", -1, 2]]}))),
    "a minor of 2^32": state((UID, claim(nodes={"a": [["x", "c", 1, 2**32]]}))),
    "a boolean number": state((UID, claim(nodes={"a": [["x", "c", True, 2]]}))),
    "a float number": state((UID, claim(nodes={"a": [["x", "c", 1.0, 2]]}))),
    "nodes of a device not a DNS label": state((UID, claim(nodes={"A_b": []}))),
    "present a list": state((UID, claim(present=[]))),
    "present a number": state((UID, claim(present={"a": 1}))),
    "present of a bad device": state((UID, claim(present={"A_b": True}))),
    "a USB interface without a colon": state((UID, claim(usbInterfaces=["1-3"]))),
    "a USB interface of letters": state((UID, claim(usbInterfaces=["a-3:1.0"]))),
    "a USB interface with a newline": state((UID, claim(usbInterfaces=["1-3:1.0\n"]))),
    "a USB interface that is a number": state((UID, claim(usbInterfaces=[1]))),
    "a time that is a string": state((UID, claim(preparedAt="now"))),
    "a time that is infinite": b'{"version": 1, "claims": {"%s": {"namespace": "n", "name": "c",'
                               b' "preparedAt": 1e400}}}' % UID.encode(),
    "a time that is a boolean": state((UID, claim(preparedAt=True))),
    "rebuilt a string": state((UID, claim(rebuilt="yes"))),
    "a node that is a string": state((UID, claim(nodes={"a": ["x"]}))),
    "a node name that is a number": state((UID, claim(nodes={"a": [[5, "c", 1, 2]]}))),
    "the nodes of a device not a list": state((UID, claim(nodes={"a": "x"}))),
    "USB interfaces not a list": state((UID, claim(usbInterfaces="1-3:1.0"))),
}


# Each refusal says which field is wrong, in one line (docs/plugin.md, "Bad input").
MESSAGES: dict[str, str] = {
    'a UID with a slash': "claim UID '../x' is not a UID",
    'a UID with a trailing dash': "claim UID 'abc-' is not a UID",
    'a USB interface of letters': "USB interface 'a-3:1.0' is not a USB interface name",
    'a USB interface that is a number': 'a USB interface is not a string',
    'a USB interface with a newline':
        'a USB interface is not a printable name of at most 253 characters',
    'a USB interface without a colon': "USB interface '1-3' is not a USB interface name",
    'a boolean number': 'device number True is not a number of 32 bits',
    'a claim that is a list': f"claim {UID} is not an object",
    'a device name not a DNS label': "device name 'Usb_1' is not a DNS label",
    'a device that is a string': 'a device is not an object',
    'a device without a name': 'a device name is not a string',
    'a float number': 'device number 1.0 is not a number of 32 bits',
    'a list': 'the state is not an object',
    'a minor of 2^32': 'device number 4294967296 is not a number of 32 bits',
    'a name with a newline': 'name is not a printable name of at most 253 characters',
    'a name with an escape': 'name is not a printable name of at most 253 characters',
    'a namespace of 254': 'namespace is not a printable name of at most 253 characters',
    'a negative major': 'device number -1 is not a number of 32 bits',
    'a node name that leaves /dev': "device node name '../etc/shadow' is not a name under /dev",
    'a node name in the absent root': "device node name '.liken.sh-absent/a/ttyS1' is in "
                                      "/dev/.liken.sh-absent, where no node is",
    'a node name with a space': "device node name 'tty S1' is not a name under /dev",
    'a node of five fields': "node ['x', 'c', 1, 2, 3] is not [name, type, major, minor]",
    'a node of three fields': "node ['x', 'c', 1] is not [name, type, major, minor]",
    'a node type p': "node type 'p'",
    'a pool that is a number': 'pool is not a string',
    'a request that is a number': 'a request name is not a string',
    'a share ID that is a number': 'a share ID is not a string',
    'a time that is a boolean': 'preparedAt True is not a time',
    'a time that is a string': "preparedAt 'now' is not a time",
    'a time that is infinite': 'preparedAt inf is not a time',
    'an absolute node name': "device node name '/etc/shadow' is not a name under /dev",
    'claims a list': 'claims is not an object',
    'claims missing': 'claims is not an object',
    'devices an object': 'devices is not a list',
    'nested too deep': 'not a JSON document',
    'no name': 'name is not a string',
    'no namespace': 'namespace is not a string',
    'nodes a list': 'nodes is not an object',
    'nodes of a device not a DNS label': "device name 'A_b' is not a DNS label",
    'not UTF-8': 'not a JSON document',
    'present a list': 'present is not an object',
    'present a number': '1 is not true or false',
    'present of a bad device': "device name 'A_b' is not a DNS label",
    'rebuilt a string': "'yes' is not true or false",
    'a node that is a string': "a node is not a list",
    'a node name that is a number': "a node name is not a string",
    'the nodes of a device not a list': "the nodes of a is not a list",
    'USB interfaces not a list': "usbInterfaces is not a list",
    'requests a string': 'requests is not a list',
    'version 2': 'state version 2, want 1',
    'version as a string': "state version '1', want 1",
    'version true': "state version True, want 1",
    'version 1.0': "state version 1.0, want 1",
    'version missing': 'state version None, want 1',
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_hostile_state_is_refused_naming_what_is_wrong(case: str) -> None:
    with pytest.raises(StateError, match="^" + re.escape(MESSAGES[case])) as e:
        parse_state(REFUSED[case])
    assert "\n" not in str(e.value)


def test_the_refusals_are_refusals_of_the_plain_reading_too() -> None:
    """Each case above breaks a rule of the model as well: the model states the same rules."""
    assert [c for c in sorted(REFUSED) if state_model.read_state(REFUSED[c]) is not None] == []
    assert state_model.read_state(state((UID, claim()))) == {UID}


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_the_state_file_is_0600_in_a_0700_directory(tmp_path: Path, umask: None) -> None:
    store = StateStore(tmp_path / "state")
    store.open()
    try:
        store.claims[UID] = PreparedClaim(UID, "ns", "c", "node-1",
                                          [PreparedDevice("usb-1-3", ["req"])])
        store.save()
    finally:
        store.release()
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "state" / "claims.json").st_mode) == 0o600
    assert list(parse_state((tmp_path / "state" / "claims.json").read_bytes())) == [UID]


def test_render_then_parse_is_the_identity() -> None:
    c = PreparedClaim(UID, "ns", "c", "node-1", [PreparedDevice("usb-1-3", ["req"], "s")],
                      {"usb-1-3": [DevNode("bus/usb/001/005", "c", 189, 4)]}, {"usb-1-3": False},
                      ["1-3:1.0"], 12.5, rebuilt=True)
    assert parse_state(render_state({UID: c})) == {UID: c}


# -- fuzzed, judged by the plain reading ---------------------------------------------------------

text = st.sampled_from(["ns", "c", "", "a" * 253, "é", "usb-1-3", "Usb_1"]) \
    | st.sampled_from(["a" * 254, "c\n", "\u202e"])
anything = st.one_of(st.none(), st.booleans(), st.integers(-2, 2**33), st.floats(),
                     st.text(max_size=4), st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def mostly(draw: Any, valid: st.SearchStrategy[Any]) -> Any:
    return draw(valid) if draw(st.integers(0, 9)) < 9 else draw(anything)


node = st.lists(st.one_of(
    st.tuples(mostly(st.sampled_from(["bus/usb/001/005", "ttyS1", "../x", "/x", "a//b", "é"])),
              mostly(st.sampled_from(["c", "b", "p"])),
              mostly(st.sampled_from([0, 189, 2**32 - 1, 2**32, -1])),
              mostly(st.sampled_from([0, 4, 2**32 - 1, 2**32]))).map(list),
    st.lists(st.just("x"), max_size=5)), max_size=2)
device_names = st.sampled_from(["usb-1-3", "a" * 63, "a" * 64, "Usb_1", "-a", ""])
claim_doc = st.fixed_dictionaries({"namespace": mostly(text), "name": mostly(text)}, optional={
    "pool": mostly(text),
    "devices": mostly(st.lists(st.fixed_dictionaries({}, optional={
        "name": mostly(device_names), "requests": mostly(st.lists(mostly(text), max_size=2)),
        "shareID": mostly(st.none() | text)}), max_size=2)),
    "nodes": mostly(st.dictionaries(device_names, mostly(node), max_size=2)),
    "present": mostly(st.dictionaries(device_names, mostly(st.booleans()), max_size=2)),
    "usbInterfaces": mostly(st.lists(mostly(st.sampled_from(
        ["1-3:1.0", "1-2.4:1.1", "1234-1:1.0", "1-3", "1-3:1", "1-3:1.0.0", "1-.3:1.0",
         "1-1.1.1.1.1.1.1.1:1.0"])), max_size=2)),
    "preparedAt": mostly(st.floats(0, 2e9) | st.sampled_from([0, 1e308])),
    "rebuilt": mostly(st.booleans()),
})
state_doc = st.fixed_dictionaries({
    "version": mostly(st.just(1)),
    "claims": mostly(st.dictionaries(st.sampled_from([UID, "ab", "a", "-ab", "a" * 64, "a" * 65]),
                                     claim_doc, max_size=2)),
})


@pytest.mark.fuzz
@settings(max_examples=examples(300), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(doc=state_doc)
def test_any_state_loads_exactly_when_the_plain_reading_says(doc: Any) -> None:
    raw = json.dumps(doc).encode()
    expected = state_model.read_state(raw)
    if expected is None:
        with pytest.raises(StateError):
            parse_state(raw)
    else:
        assert set(parse_state(raw)) == expected


def test_open_removes_the_specs_of_claims_nobody_knows(tmp_path: Path) -> None:
    """A spec whose claim the (readable) state does not hold is a prepare that never finished:
    the start removes it; the specs of known claims and other vendors' files stay."""
    other = "1f8fad5b-d9cb-469f-a165-70867728950e"
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "claims.json").write_bytes(state((UID, claim())))
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    for name in (f"liken.sh-{UID}.json", f"liken.sh-{other}.json", "other-vendor.json"):
        (cdi_dir / name).write_text("{}")
    store = StateStore(tmp_path / "state", cdi_dir, "node-1")
    store.open()
    try:
        assert list(store.claims) == [UID]
    finally:
        store.release()
    assert sorted(os.listdir(cdi_dir)) == ["liken.sh-" + UID + ".json", "other-vendor.json"]


def test_claims_rebuilt_from_the_specs_are_saved(tmp_path: Path) -> None:
    """No state file but a readable spec: the claim is rebuilt and the state written at once,
    so the next start reads it rather than rebuilding again."""
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    (cdi_dir / f"liken.sh-{UID}.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "liken.sh/device", "devices": [
            {"name": f"{UID}-usb-1-3", "containerEdits": {"deviceNodes": [
                {"path": "/dev/.liken.sh-absent/usb-1-3/ttyS1"}]}}]}))
    store = StateStore(tmp_path / "state", cdi_dir, "node-1")
    store.open()
    try:
        assert store.claims[UID].rebuilt
    finally:
        store.release()
    saved = parse_state((tmp_path / "state" / "claims.json").read_bytes())
    assert list(saved) == [UID] and saved[UID].rebuilt and saved[UID].pool == "node-1"
    # What the spec does not hold stays unknown: no namespace, no name.
    assert (saved[UID].namespace, saved[UID].name) == ("", "")


def test_a_corrupt_state_is_kept_aside_and_an_empty_one_written(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "claims.json").write_bytes(b"{not json")
    store = StateStore(tmp_path / "state", tmp_path / "cdi", "node-1")
    store.open()
    store.release()
    names = sorted(os.listdir(tmp_path / "state"))
    assert "claims.json" in names and any(n.startswith("claims.json.bad-") for n in names)
    assert parse_state((tmp_path / "state" / "claims.json").read_bytes()) == {}


def test_a_first_start_writes_no_state(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state", tmp_path / "cdi", "node-1")
    store.open()
    store.release()
    assert not (tmp_path / "state" / "claims.json").exists()


def test_open_without_the_sweep_leaves_every_spec(tmp_path: Path) -> None:
    """A start told not to sweep (the plugin's ``sweep_orphans`` setting off) removes no
    spec."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "claims.json").write_bytes(state())
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    (cdi_dir / f"liken.sh-{UID}.json").write_text("{}")
    store = StateStore(tmp_path / "state", cdi_dir, "node-1")
    store.open(sweep_orphans=False)
    store.release()
    assert os.listdir(cdi_dir) == [f"liken.sh-{UID}.json"]


# -- the numbers a Bluetooth claim's container started with (plugin/late.py) -------------------
# rules: bluetooth.late-registrant. The state keeps, per Bluetooth device, the legacy event
# minors (13:64 to 13:95, at most 32 of them) its running container started with.


def test_the_started_events_read_back_at_both_ends_of_the_range() -> None:
    c = PreparedClaim(UID, "ns", "c", "node-1", [PreparedDevice("usb-1-8-1-1", ["bt"])],
                      started={"usb-1-8-1-1": [64, 95], "usb-1-9-1-0": list(range(64, 96))})
    raw = render_state({UID: c})
    assert json.loads(raw)["claims"][UID]["startedEvents"] == {
        "usb-1-8-1-1": [64, 95], "usb-1-9-1-0": list(range(64, 96))}
    assert parse_state(raw)[UID].started == c.started


STARTED_REFUSED: dict[str, tuple[Any, str]] = {
    "a minor below the range": ({"usb-1-8": [63]},
                                "the started events of usb-1-8 are not legacy event minors"),
    "a minor above the range": ({"usb-1-8": [64, 96]},
                                "the started events of usb-1-8 are not legacy event minors"),
    "33 minors": ({"usb-1-8": [64] * 33},
                  "the started events of usb-1-8 are not legacy event minors"),
    "not an object": ([64], "startedEvents is not an object"),
    "minors not a list": ({"usb-1-8": 64}, "the started events of usb-1-8 is not a list"),
    "a device not a DNS label": ({"A_b": [64]}, "device name 'A_b' is not a DNS label"),
}


@pytest.mark.parametrize("case", sorted(STARTED_REFUSED))
def test_started_events_outside_the_legacy_range_are_refused(case: str) -> None:
    started, message = STARTED_REFUSED[case]
    with pytest.raises(StateError, match="^" + re.escape(message)):
        parse_state(state((UID, claim(startedEvents=started))))


# -- the claims' names, kept apart from the state file --------------------------------------------


def spec_of_one_device(cdi_dir: Path) -> None:
    cdi_dir.mkdir()
    (cdi_dir / f"liken.sh-{UID}.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "liken.sh/device", "devices": [
            {"name": f"{UID}-usb-1-3", "containerEdits": {"deviceNodes": [
                {"path": "/dev/.liken.sh-absent/usb-1-3/ttyS1"}]}}]}))


def test_a_rebuilt_claim_takes_the_name_kept_for_it(tmp_path: Path) -> None:
    """The state is lost but ``names/<uid>`` kept the claim's namespace and name: the claim
    rebuilt from its spec has them."""
    spec_of_one_device(tmp_path / "cdi")
    store = StateStore(tmp_path / "state", tmp_path / "cdi", "node-1")
    store.remember_name(UID, "default", "radio")
    assert (tmp_path / "state" / "names" / UID).read_bytes() == b"default/radio\n"
    store.open()
    store.release()
    saved = parse_state((tmp_path / "state" / "claims.json").read_bytes())
    assert (saved[UID].namespace, saved[UID].name, saved[UID].rebuilt) == (
        "default", "radio", True)


def test_a_start_removes_the_names_of_claims_it_does_not_hold(tmp_path: Path) -> None:
    other = "1f8fad5b-d9cb-469f-a165-70867728950e"
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "claims.json").write_bytes(state((UID, claim())))
    store = StateStore(tmp_path / "state", tmp_path / "cdi", "node-1")
    store.remember_name(UID, "ns", "c")
    store.remember_name(other, "ns", "gone")
    store.open(sweep_orphans=False)
    store.release()
    assert os.listdir(tmp_path / "state" / "names") == [UID]


def test_a_kept_name_of_512_bytes_is_read_and_of_513_is_not(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    (tmp_path / "state" / "names").mkdir(parents=True)
    name = tmp_path / "state" / "names" / UID
    name.write_bytes(b"ns/c" + b" " * 507 + b"\n")
    assert store.read_name(UID) == ("ns", "c")
    name.write_bytes(b"ns/c" + b" " * 508 + b"\n")
    assert store.read_name(UID) is None


# -- who holds the state: the holder files --------------------------------------------------------


def test_an_instance_names_itself_in_one_holder_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    store.acquire()
    try:
        holders = [n for n in os.listdir(tmp_path / "state") if n.startswith("holder-")]
        assert len(holders) == 1
    finally:
        store.release()
    assert not [n for n in os.listdir(tmp_path / "state") if n.startswith("holder-")]


def test_a_refusal_reads_at_most_16_holder_files(tmp_path: Path) -> None:
    """Each live holder (its lock held) is read for the refusal message, at most 16 of them."""
    directory = tmp_path / "state"
    directory.mkdir()
    fds = []
    try:
        for i in range(20):
            fd = os.open(directory / f"holder-{i:02}", os.O_RDWR | os.O_CREAT, 0o600)
            fds.append(fd)
            os.write(fd, f"pid {i}\n".encode())
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert StateStore(directory).live_holders() == [f"pid {i}" for i in range(16)]
    finally:
        for fd in fds:
            os.close(fd)


# -- which instance of an upgrade is the newer ----------------------------------------------------


def test_the_older_shared_instance_knows_the_newer_one_and_the_newer_knows_none(
        tmp_path: Path) -> None:
    directory = tmp_path / "state"
    old, new = StateStore(directory), StateStore(directory)
    old.acquire(shared=True)
    try:
        assert old.newer_instance() is None  # alone
        time.sleep(0.001)  # the holder's name carries the start on the boot clock: a later one
        new.acquire(shared=True)
        try:
            newer = old.newer_instance()
            assert newer is not None and f"pid {os.getpid()}" in newer
            assert new.newer_instance() is None
        finally:
            new.release()
        assert old.newer_instance() is None  # the newer one ended
    finally:
        old.release()


def test_an_exclusive_instance_is_never_superseded(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    store.acquire()
    try:
        assert store.newer_instance() is None
    finally:
        store.release()


def test_a_newer_holder_that_is_dead_or_misnamed_supersedes_nobody(tmp_path: Path) -> None:
    """A holder file nobody locks is a dead instance's (removed); a name that is not
    ``holder-<pid>-<number>`` is not an instance's at all (a hostile directory)."""
    directory = tmp_path / "state"
    store = StateStore(directory)
    store.acquire(shared=True)
    fds = []
    try:
        later = HOLDER_EPOCH + boot_clock() + 10**12  # a start after this one's
        dead = directory / f"holder-1-{later}"
        dead.write_text("pid 1\n")
        for name in (f"holder-x-{later}", f"holder-2-{later}-3", f"holder-3-{'9' * 30}",
                     f".holder-4-{later}"):
            fd = os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o600)
            fds.append(fd)
            os.write(fd, b"pid 4\n")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert store.newer_instance() is None
        assert not dead.exists()
    finally:
        for fd in fds:
            os.close(fd)
        store.release()


def test_a_pods_start_from_another_boot_does_not_make_it_the_newer(tmp_path: Path) -> None:
    """rules: limits.one-writer: a pod's start is kept with the boot's id; after a reboot
    (the pod's containers start again, its UID unchanged) the old boot's time means nothing, or
    a long first boot would make the old pod newer than every pod of the new one."""
    directory = tmp_path / "state"
    directory.mkdir()
    (directory / "started-pod-a").write_text(f"0000-another-boot {10**18}\n")
    old = StateStore(directory, pod_uid="pod-a")
    new = StateStore(directory, pod_uid="pod-b")
    old.acquire(shared=True)
    try:
        new.acquire(shared=True)
        try:
            assert new.newer_instance() is None
            assert old.newer_instance() is not None
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
            assert (directory / "started-pod-a").read_text().split()[0] == boot
        finally:
            new.release()
    finally:
        old.release()


def test_pods_start_records_are_bounded_and_hostile_ones_ignored(tmp_path: Path) -> None:
    """Each pod that ran leaves ``started-<pod UID>``: records of another boot or that do not
    read as one are removed, and past the newest 16 the oldest go (a surge has two live
    pods); a hostile record never orders this pod."""
    directory = tmp_path / "state"
    directory.mkdir()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    for i in range(20):
        (directory / f"started-pod-{i:02}").write_text(f"{boot} {i + 1}\n")
    (directory / "started-pod-other").write_text(f"0000-another-boot {10**9}\n")
    (directory / "started-pod-junk").write_bytes(b"\xff" * 100)
    (directory / "started-pod-me").write_text(f"{boot} {'9' * 40}\n")  # hostile: not a time
    store = StateStore(directory, pod_uid="pod-me")
    store.acquire(shared=True)
    try:
        left = sorted(n for n in os.listdir(directory) if n.startswith("started-"))
        assert "started-pod-other" not in left and "started-pod-junk" not in left
        assert "started-pod-me" in left and len(left) == 16
        assert [f"started-pod-{i:02}" for i in range(5, 20)] == left[:15]  # the oldest went
        # Its own record, rewritten: now on the boot clock, not the hostile number.
        _, ns = (directory / "started-pod-me").read_text().split()
        assert int(ns) <= boot_clock()
    finally:
        store.release()


def test_a_holder_number_is_above_every_wall_clock_holder(tmp_path: Path) -> None:
    """rules: limits.one-writer: a build that named holders by the wall clock
    (``holder-<pid>-<time.time_ns()>``) is older than this one, however its clock ran: this
    instance does not stand by for it, and its number is above every such time, so that
    build's instance (comparing numbers) stands by for this one."""
    directory = tmp_path / "state"
    directory.mkdir()
    ahead = time.time_ns() + 10 * 365 * 86400 * 10**9  # a wall clock ten years ahead
    fd = os.open(directory / f"holder-1-{ahead}", os.O_RDWR | os.O_CREAT, 0o600)
    store = StateStore(directory, pod_uid="pod-new")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        store.acquire(shared=True)
        assert store.newer_instance() is None
        mine = [n for n in os.listdir(directory) if n.startswith("holder-")
                and n != f"holder-1-{ahead}"]
        assert len(mine) == 1 and int(mine[0].rsplit("-", 1)[1]) > ahead
    finally:
        store.release()
        os.close(fd)


def test_a_holder_file_removed_under_its_instance_is_made_again_when_asked(
        tmp_path: Path) -> None:
    """Someone removes the newer instance's holder file (a cleanup of the state directory):
    the older cannot see it any more, so the newer makes it again the next time it asks
    whether it is the newest, keeping its place."""
    directory = tmp_path / "state"
    old, new = StateStore(directory, pod_uid="pod-a"), StateStore(directory, pod_uid="pod-b")
    old.acquire(shared=True)
    before = set(os.listdir(directory))
    new.acquire(shared=True)
    try:
        (holder,) = [n for n in set(os.listdir(directory)) - before if n.startswith("holder-")]
        os.unlink(directory / holder)
        assert old.newer_instance() is None  # it cannot know
        assert new.newer_instance() is None
        assert (directory / holder).exists()
        assert old.newer_instance() is not None
    finally:
        new.release()
        old.release()


@pytest.mark.parametrize("size", [128, 129])
def test_a_pods_start_record_is_read_up_to_128_bytes(tmp_path: Path, size: int) -> None:
    """A ``started-<pod UID>`` record is read bounded: up to 128 bytes it is the pod's start
    (kept), longer it is not one (the start is taken again, now)."""
    directory = tmp_path / "state"
    directory.mkdir()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    text = f"{boot} 12345"
    (directory / "started-pod-a").write_text(text + " " * (size - len(text) - 1) + "\n")
    store = StateStore(directory, pod_uid="pod-a")
    store.acquire(shared=True)
    try:
        (holder,) = [n for n in os.listdir(directory) if n.startswith("holder-")]
        kept = int(holder.rsplit("-", 1)[1]) == HOLDER_EPOCH + 12345
        assert kept == (size <= 128)
    finally:
        store.release()
