"""The CDI spec's rules, each with its expected answer written out.

docs/plugin.md, "The CDI spec": a spec is written with mode 0644 whatever the umask (the runtime
reads it; only root writes the CDI directory: a world-writable spec would let any host user change
what a container receives). docs/plugin.md, "Bad input": a spec read back to rebuild a claim is
hostile input; a device's nodes are all present (``/dev/<name>`` with type ``c`` or ``b`` and 32-bit
numbers) or all absent (``/dev/.liken.sh-absent/<device>/<name>``), names stay under ``/dev``,
and anything else is refused. The fuzz test's oracle is a second, deliberately plain reading of
those rules over a small vocabulary whose every word is labelled by hand: it never calls the
reader it judges.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.plugin import cdi
from liken_devices.plugin.cdi import Delivery, SpecError
from liken_devices.sysfs.model import DevNode
from tests.support.hostile import examples

UID = "0f8fad5b-d9cb-469f-a165-70867728950e"
OTHER_UID = "1f8fad5b-d9cb-469f-a165-70867728950e"
ABSENT = "/dev/.liken.sh-absent"


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


# -- the spec file's mode -----------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077, 0o002])
def test_a_written_spec_is_0644_whatever_the_umask(tmp_path: Path, umask: None,
                                                    mask: int) -> None:
    os.umask(mask)
    spec = cdi.build_spec(UID, [Delivery("usb-1-3", (DevNode("ttyS1", "c", 4, 65),), False)],
                          tmp_path)
    assert cdi.write_spec(tmp_path / "cdi", UID, spec)
    st_ = os.stat(tmp_path / "cdi" / f"liken.sh-{UID}.json")
    assert stat.S_ISREG(st_.st_mode)
    assert stat.S_IMODE(st_.st_mode) == 0o644


def test_a_rewritten_spec_is_0644_even_over_a_world_writable_one(tmp_path: Path,
                                                                  umask: None) -> None:
    os.umask(0)
    path = tmp_path / f"liken.sh-{UID}.json"
    path.write_text("{}")
    os.chmod(path, 0o666)
    spec = cdi.build_spec(UID, [Delivery("usb-1-3", (DevNode("ttyS1", "c", 4, 65),), False)],
                          tmp_path)
    assert cdi.write_spec(tmp_path, UID, spec)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert json.loads(path.read_text())["kind"] == "liken.sh/device"


# -- reading a spec back: explicit cases --------------------------------------------------------


def write(cdi_dir: Path, doc: Any, uid: str = UID) -> None:
    cdi_dir.mkdir(parents=True, exist_ok=True)
    (cdi_dir / f"liken.sh-{uid}.json").write_text(json.dumps(doc))


def spec(*devices: tuple[str, list[Any]]) -> dict[str, Any]:
    return {"cdiVersion": "0.5.0", "kind": "liken.sh/device",
            "devices": [{"name": f"{UID}-{d}", "containerEdits": {"deviceNodes": nodes}}
                        for d, nodes in devices]}


def present(path: str, typ: str = "c", major: Any = 4, minor: Any = 65) -> dict[str, Any]:
    return {"path": path, "type": typ, "major": major, "minor": minor, "fileMode": 0o660,
            "uid": 0, "gid": 20}


def test_a_spec_reads_back_to_its_deliveries(tmp_path: Path) -> None:
    write(tmp_path, spec(
        ("pnp-00-01", [present("/dev/ttyS1")]),
        ("usb-1-3", [{"path": f"{ABSENT}/usb-1-3/bus/usb/001/005"},
                     {"path": f"{ABSENT}/usb-1-3/hidraw0"}]),
        ("sda", [present("/dev/sda", "b", 8, 0), present("/dev/input/event31", "c", 13, 95)]),
        ("big", [present("/dev/x", "c", 0, 4294967295)])))
    assert cdi.read_claim_spec(tmp_path, UID) == [
        Delivery("pnp-00-01", (DevNode("ttyS1", "c", 4, 65),), True),
        Delivery("usb-1-3", (DevNode("bus/usb/001/005", "c", 0, 0),
                             DevNode("hidraw0", "c", 0, 0)), False),
        Delivery("sda", (DevNode("sda", "b", 8, 0), DevNode("input/event31", "c", 13, 95)),
                 True),
        Delivery("big", (DevNode("x", "c", 0, 4294967295),), True),
    ]


REFUSED: dict[str, Any] = {
    "present and absent mixed": spec(("usb-1-3", [present("/dev/ttyS1"),
                                                  {"path": f"{ABSENT}/usb-1-3/ttyS2"}])),
    "absent then present": spec(("usb-1-3", [{"path": f"{ABSENT}/usb-1-3/ttyS2"},
                                             present("/dev/ttyS1")])),
    "a path outside /dev": spec(("usb-1-3", [present("/etc/shadow")])),
    "a path that leaves /dev": spec(("usb-1-3", [present("/dev/../etc/shadow")])),
    "a path next to /dev": spec(("usb-1-3", [present("/devx/ttyS1")])),
    "/dev itself": spec(("usb-1-3", [present("/dev/")])),
    "a relative path": spec(("usb-1-3", [present("dev/ttyS1")])),
    "an absent path of another device": spec(("usb-1-3", [{"path": f"{ABSENT}/sda/ttyS1"}])),
    "an absent path that leaves": spec(("usb-1-3", [{"path": f"{ABSENT}/usb-1-3/../../x"}])),
    "an empty absent name": spec(("usb-1-3", [{"path": f"{ABSENT}/usb-1-3/"}])),
    # rules: delivery.absent-node. A present node in the absent root, which nothing creates.
    "a present node in another device's absent path": spec(
        ("usb-1-3", [present(f"{ABSENT}/sda/ttyS1")])),
    "a present node in its own device's absent path's parent": spec(
        ("usb-1-3", [present(f"{ABSENT}/ttyS1")])),
    "the absent root as a present node": spec(("usb-1-3", [present(ABSENT)])),
    "a negative major": spec(("usb-1-3", [present("/dev/ttyS1", major=-1)])),
    "a negative minor": spec(("usb-1-3", [present("/dev/ttyS1", minor=-1)])),
    "a major of 2^32": spec(("usb-1-3", [present("/dev/ttyS1", major=2**32)])),
    "a minor of 2^32": spec(("usb-1-3", [present("/dev/ttyS1", minor=2**32)])),
    "a float number": spec(("usb-1-3", [present("/dev/ttyS1", minor=65.0)])),
    "a string number": spec(("usb-1-3", [present("/dev/ttyS1", major="4")])),
    "a boolean number": spec(("usb-1-3", [present("/dev/ttyS1", major=True)])),
    "a missing number": spec(("usb-1-3", [present("/dev/ttyS1", minor=None)])),
    "type p": spec(("usb-1-3", [present("/dev/ttyS1", typ="p")])),
    "type u": spec(("usb-1-3", [present("/dev/ttyS1", typ="u")])),
    "no type": spec(("usb-1-3", [present("/dev/ttyS1", typ=None)])),
    "a node without a path": spec(("usb-1-3", [{"type": "c", "major": 4, "minor": 65}])),
    "a node that is a string": spec(("usb-1-3", ["/dev/ttyS1"])),
    "no nodes": spec(("usb-1-3", [])),
    "another kind": {**spec(("usb-1-3", [present("/dev/ttyS1")])), "kind": "nvidia.com/gpu"},
    "no devices": {**spec(), "devices": []},
    "devices not a list": {**spec(), "devices": {"a": 1}},
    "a list": [spec(("usb-1-3", [present("/dev/ttyS1")]))],
    "a device of another claim": {**spec(), "devices": [
        {"name": f"{OTHER_UID}-usb-1-3",
         "containerEdits": {"deviceNodes": [present("/dev/ttyS1")]}}]},
    "a device name that is not a DNS label": spec(("Usb_1", [present("/dev/ttyS1")])),
    "a device name without the dash after the UID": {**spec(), "devices": [
        {"name": f"{UID}xusb-1-3",
         "containerEdits": {"deviceNodes": [present("/dev/ttyS1")]}}]},
    "a device without edits": {**spec(), "devices": [{"name": f"{UID}-usb-1-3"}]},
    "edits that are a list": {**spec(), "devices": [
        {"name": f"{UID}-usb-1-3", "containerEdits": [present("/dev/ttyS1")]}]},
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_hostile_spec_is_refused(tmp_path: Path, case: str) -> None:
    write(tmp_path, REFUSED[case])
    with pytest.raises(SpecError):
        cdi.read_claim_spec(tmp_path, UID)


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe{}", b"[" * 100_000 + b"]" * 100_000])
def test_a_spec_that_is_not_json_is_refused(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / f"liken.sh-{UID}.json").write_bytes(raw)
    with pytest.raises(SpecError):
        cdi.read_claim_spec(tmp_path, UID)


def test_a_spec_of_4_mib_is_read(tmp_path: Path) -> None:
    doc = spec(("usb-1-3", [present("/dev/ttyS1")]))
    doc["pad"] = ""
    doc["pad"] = "x" * ((4 << 20) - len(json.dumps(doc)))
    write(tmp_path, doc)
    assert (tmp_path / f"liken.sh-{UID}.json").stat().st_size == 4 << 20
    assert cdi.read_claim_spec(tmp_path, UID) == [
        Delivery("usb-1-3", (DevNode("ttyS1", "c", 4, 65),), True)]


def test_a_spec_larger_than_4_mib_is_not_read(tmp_path: Path) -> None:
    doc = spec(("usb-1-3", [present("/dev/ttyS1")]))
    doc["pad"] = "x" * (4 << 20)
    write(tmp_path, doc)
    with pytest.raises(OSError):
        cdi.read_claim_spec(tmp_path, UID)


# -- reading a spec back: fuzzed, judged by a plain second reading --------------------------------

# Every path the generator uses, labelled by hand: the node name it reads back as, or None when
# the path must be refused. An absent path is (name, False).
PATHS: dict[str, tuple[str, bool] | None] = {
    "/dev/ttyS1": ("ttyS1", True),
    "/dev/bus/usb/001/005": ("bus/usb/001/005", True),
    "/dev/input/event31": ("input/event31", True),
    "/etc/shadow": None,
    "/run/secrets": None,
    "/tmp/ttyS1": None,
    "/sys/x/ttyS1": None,
    "/dev/../etc/shadow": None,
    "/dev//ttyS1": None,
    "/dev/": None,
    "/devx/ttyS1": None,
    "dev/ttyS1": None,
    "/dev/tty S1": None,
    "/dev/ttyS1\n": None,
    f"{ABSENT}/usb-1-3/bus/usb/001/005": ("bus/usb/001/005", False),
    f"{ABSENT}/usb-1-3/ttyS1": ("ttyS1", False),
    f"{ABSENT}/usb-1-3/../x": None,
    f"{ABSENT}/usb-1-3/": None,
    # Another device's absent path, or the absent root itself, names no node, absent or
    # present: nothing creates /dev/.liken.sh-absent (rules: delivery.absent-node).
    f"{ABSENT}/sda/ttyS1": None,
    f"{ABSENT}/usb-1-3x/ttyS1": None,
    f"{ABSENT}/ttyS1": None,
    ABSENT: None,
}
DEVICE_NAMES: dict[str, str | None] = {  # the CDI name -> the device it reads back as
    f"{UID}-usb-1-3": "usb-1-3",
    f"{UID}-Usb-1-3": None,
    f"{UID}-": None,
    f"{OTHER_UID}-usb-1-3": None,
    "usb-1-3": None,
}
GOOD_PATHS = [p for p, label in PATHS.items() if label is not None]
BAD_PATHS = sorted(p for p, label in PATHS.items() if label is None)
anything = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=3),
                     st.lists(st.integers(), max_size=1),
                     st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
MISSING = object()


def rarely(draw: Any, valid: Any, hostile: st.SearchStrategy[Any], field: bool = True) -> Any:
    """``valid`` most of the time; otherwise mostly one of the field's own hostile values,
    sometimes anything, or (for a ``field``) ``MISSING``: the key is left out. One field at a
    time goes wrong, so each refusal is reached with the rest of the spec valid."""
    n = draw(st.integers(0, 19))
    if n < 16:
        return valid
    if n < 19:
        return draw(hostile)
    return draw(st.one_of(anything, *([st.just(MISSING)] if field else [])))


@st.composite
def node_doc(draw: Any, is_present: bool) -> dict[str, Any]:
    paths = [p for p in GOOD_PATHS if PATHS[p][1] is is_present]  # type: ignore[index]
    doc = {"path": rarely(draw, draw(st.sampled_from(paths)), st.sampled_from(BAD_PATHS)),
           "type": rarely(draw, draw(st.sampled_from(["c", "b"])),
                          st.sampled_from(["p", "", "C"])),
           "major": rarely(draw, draw(st.sampled_from([0, 4, 189, 2**32 - 1])),
                           st.sampled_from([2**32, -1, 2**40, 4.0, "4", True])),
           "minor": rarely(draw, draw(st.sampled_from([0, 65, 95, 2**32 - 1])),
                           st.sampled_from([2**32, -1, 65.5, "65", False]))}
    if not is_present and draw(st.booleans()):  # what build_spec writes: the path alone
        doc = {"path": doc["path"]}
    return {k: v for k, v in doc.items() if v is not MISSING}


@st.composite
def device_doc(draw: Any) -> dict[str, Any]:
    is_present = draw(st.booleans())
    nodes = [draw(node_doc(is_present if draw(st.integers(0, 9)) else not is_present))
             for _ in range(draw(st.integers(1, 3)))]
    doc = {"name": rarely(draw, f"{UID}-usb-1-3", st.sampled_from(sorted(DEVICE_NAMES))),
           "containerEdits": rarely(draw, {"deviceNodes": rarely(draw, nodes, st.just([]))},
                                    st.just({"deviceNodes": MISSING}))}
    if isinstance(doc["containerEdits"], dict) and doc["containerEdits"].get("deviceNodes") \
            is MISSING:
        doc["containerEdits"] = {}
    return {k: v for k, v in doc.items() if v is not MISSING}


@st.composite
def spec_doc(draw: Any) -> Any:
    doc = {"cdiVersion": "0.5.0",
           "kind": rarely(draw, "liken.sh/device", st.sampled_from(["liken.sh/devices", "x"])),
           "devices": rarely(draw, [draw(device_doc()) for _ in range(draw(st.integers(1, 3)))],
                             st.just([]))}
    doc = {k: v for k, v in doc.items() if v is not MISSING}
    return rarely(draw, doc, st.just([doc]), field=False)


@st.composite
def one_wrong(draw: Any) -> Any:
    """A spec valid but for one field, drawn from the labelled hostile values: each refusal is
    met with everything else right, so a reader that drops one check reads the spec."""
    wrong = draw(st.sampled_from(["none", "path", "type", "major", "minor", "mixed", "name"]))
    # Type and numbers matter only for a present node.
    is_present = wrong in ("type", "major", "minor") or draw(st.booleans())
    paths = [p for p in GOOD_PATHS if PATHS[p][1] is is_present]  # type: ignore[index]
    nodes = [{"path": draw(st.sampled_from(paths)), "type": draw(st.sampled_from(["c", "b"])),
              "major": draw(st.sampled_from([0, 4, 2**32 - 1])),
              "minor": draw(st.sampled_from([0, 65, 2**32 - 1]))}
             for _ in range(draw(st.integers(1, 3)))]
    doc: dict[str, Any] = {"cdiVersion": "0.5.0", "kind": "liken.sh/device", "devices": [
        {"name": f"{UID}-usb-1-3", "containerEdits": {"deviceNodes": nodes}}]}
    node = draw(st.sampled_from(nodes))
    if wrong == "path":
        node["path"] = draw(st.sampled_from(BAD_PATHS))
    elif wrong == "type":
        node["type"] = draw(st.sampled_from(["p", "", None, 99]))
    elif wrong in ("major", "minor"):
        node[wrong] = draw(st.sampled_from([-1, 2**32, 2**40, 4.0, "4", True, None]))
    elif wrong == "mixed":
        other = [p for p in GOOD_PATHS if PATHS[p][1] is not is_present]  # type: ignore[index]
        nodes.append({**node, "path": draw(st.sampled_from(other))})
    elif wrong == "name":
        doc["devices"][0]["name"] = draw(st.sampled_from(sorted(DEVICE_NAMES)))
    return doc


def model(doc: Any) -> list[Delivery] | None:
    """The plain reading: the deliveries ``doc`` states, or None when it must be refused."""
    if type(doc) is not dict or doc.get("kind") != "liken.sh/device":
        return None
    devices = doc.get("devices")
    if type(devices) is not list or len(devices) == 0:
        return None
    out = []
    for d in devices:
        if type(d) is not dict or type(d.get("name")) is not str:
            return None
        device = DEVICE_NAMES.get(d["name"])  # other text is too short to hold the UID
        edits = d.get("containerEdits")
        if device is None or type(edits) is not dict:
            return None
        nodes = edits.get("deviceNodes")
        if type(nodes) is not list or len(nodes) == 0:
            return None
        got = []
        for n in nodes:
            if type(n) is not dict or type(n.get("path")) is not str:
                return None
            label = PATHS.get(n["path"])  # other text (3 characters at most) is not /dev/x
            if label is None:
                return None
            name, is_present = label
            if not is_present:
                got.append((False, DevNode(name, "c", 0, 0)))
                continue
            typ, major, minor = n.get("type"), n.get("major"), n.get("minor")
            if typ not in ("c", "b"):
                return None
            if type(major) is not int or type(minor) is not int:
                return None
            if not (0 <= major <= 4294967295 and 0 <= minor <= 4294967295):
                return None
            got.append((True, DevNode(name, typ, major, minor)))
        if {p for p, _ in got} not in ({True}, {False}):
            return None
        out.append(Delivery(device, tuple(n for _, n in got), got[0][0]))
    return out


@settings(max_examples=examples(300), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@pytest.mark.fuzz
@given(doc=st.one_of(spec_doc(), one_wrong()))
def test_any_spec_reads_back_as_the_plain_reading_says(tmp_path: Path, doc: Any) -> None:
    write(tmp_path, doc)
    expected = model(doc)
    if expected is None:
        with pytest.raises(SpecError):
            cdi.read_claim_spec(tmp_path, UID)
    else:
        assert cdi.read_claim_spec(tmp_path, UID) == expected


def test_the_plain_reading_accepts_and_refuses_both() -> None:
    """The generator reaches both answers (a fuzz test that only ever refuses proves little)."""
    good = spec(("usb-1-3", [{"path": "/dev/ttyS1", "type": "c", "major": 4, "minor": 65}]))
    assert model(good) == [Delivery("usb-1-3", (DevNode("ttyS1", "c", 4, 65),), True)]
    assert model({**good, "kind": "x"}) is None


# -- building a spec ----------------------------------------------------------------------------


def test_an_absent_device_without_nodes_names_a_path_that_reads_back(tmp_path: Path) -> None:
    spec_ = cdi.build_spec(UID, [Delivery("usb-1-3", (), False)], tmp_path)
    assert spec_["devices"] == [{"name": f"{UID}-usb-1-3", "containerEdits": {
        "deviceNodes": [{"path": f"{ABSENT}/usb-1-3/gone"}]}}]
    assert cdi.write_spec(tmp_path / "cdi", UID, spec_)
    assert cdi.read_claim_spec(tmp_path / "cdi", UID) == [
        Delivery("usb-1-3", (DevNode("gone", "c", 0, 0),), False)]


def test_build_spec_refuses_a_claim_without_devices(tmp_path: Path) -> None:
    """The CDI specification: a spec holds at least one device."""
    with pytest.raises(SpecError, match="no device"):
        cdi.build_spec(UID, [], tmp_path)


@pytest.mark.parametrize("uid", ["../x", "", "a/b", "x" * 65])
def test_build_spec_refuses_a_bad_claim_uid(tmp_path: Path, uid: str) -> None:
    with pytest.raises(SpecError):
        cdi.build_spec(uid, [Delivery("usb-1-3", (DevNode("ttyS1", "c", 4, 65),), True)],
                       tmp_path)


def test_a_device_delivered_twice_is_one_device_of_the_spec(tmp_path: Path) -> None:
    spec_ = cdi.build_spec(UID, [
        Delivery("usb-1-3", (DevNode("ttyS1", "c", 4, 65),), False),
        Delivery("usb-1-3", (DevNode("ttyS2", "c", 4, 66),), False),
        Delivery("pnp-00-01", (DevNode("ttyS3", "c", 4, 67),), False)], tmp_path)
    assert [(d["name"], d["containerEdits"]["deviceNodes"]) for d in spec_["devices"]] == [
        (f"{UID}-pnp-00-01", [{"path": f"{ABSENT}/pnp-00-01/ttyS3"}]),
        (f"{UID}-usb-1-3", [{"path": f"{ABSENT}/usb-1-3/ttyS1"}])]


# -- which files are specs of ours --------------------------------------------------------------


def test_spec_uids_names_only_our_specs(tmp_path: Path) -> None:
    for name in [f"liken.sh-{UID}.json", f"liken.sh-{OTHER_UID}.json", "other-vendor.json",
                 f"liken.sh-{UID}.yaml", f".liken.sh-{UID}.json.1.ab.tmp", "liken.sh-.json",
                 "liken.sh--x.json", f"nvidia.com-{UID}.json", "liken.sh-a.json"]:
        (tmp_path / name).write_text("{}")
    assert cdi.spec_uids(tmp_path) == [UID, OTHER_UID]
    assert cdi.spec_uids(tmp_path / "missing") == []


def test_remove_spec_says_whether_there_was_one(tmp_path: Path) -> None:
    (tmp_path / f"liken.sh-{UID}.json").write_text("{}")
    (tmp_path / "other-vendor.json").write_text("{}")
    assert cdi.remove_spec(tmp_path, UID) is True
    assert cdi.remove_spec(tmp_path, UID) is False
    assert sorted(os.listdir(tmp_path)) == ["other-vendor.json"]


def test_the_host_nodes_are_read_from_dev_by_default() -> None:
    """Without a directory given, a node's mode and owner are the host's /dev's: /dev/null is
    character 1:3, 0666, root's on every Linux machine."""
    assert cdi.HostNodes().owner(DevNode("null", "c", 1, 3)) == cdi.Owner(0o666, 0, 0)


@pytest.mark.parametrize("mode", [0o777, 0o661, 0o000, 0o7777])
def test_every_permission_bit_travels_and_no_special_bit(tmp_path: Path, mode: int) -> None:
    """fileMode is the host node's permission bits (0o777), all nine of them, never setuid,
    setgid or sticky."""
    path = tmp_path / "ttyUSB0"
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(188, 0))
    os.chmod(path, mode)
    os.chown(path, 1000, 20)
    got = cdi.host_owner(tmp_path, DevNode("ttyUSB0", "c", 188, 0))
    assert got == cdi.Owner(mode & 0o777, 1000, 20)


# -- what a spec may carry ----------------------------------------------------------------------

NODE_KEYS = {"path", "type", "major", "minor", "fileMode", "uid", "gid"}
node_names = st.sampled_from(["ttyUSB0", "dri/renderD128", "bus/usb/001/002", "snd/pcmC0D0p",
                              "input/event3", "hidraw0", "cec0", "sg1"])
deliveries = st.lists(st.builds(
    Delivery, st.sampled_from(["usb-1-3", "pci-0000-00-02-0", "pnp-00-01", "usb-3-9-1-0"]),
    st.lists(st.builds(DevNode, node_names, st.sampled_from(["c", "b"]),
                       st.integers(0, 2**20), st.integers(0, 2**20)), max_size=3).map(tuple),
    st.booleans()), min_size=1, max_size=5)


@given(deliveries)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_spec_carries_device_nodes_and_nothing_else(got: list[Delivery]) -> None:
    """rules: delivery.nodes-only. Whatever a claim holds, present or away, its spec edits the
    container with device nodes alone: no mount (so no host path, and no device metadata file,
    which the peers bind-mount from the host), no hook, no environment, no annotation."""
    try:
        spec_ = cdi.build_spec(UID, got, Path("/nonexistent-dev"))
    except SpecError:
        assert any(d.present and not d.nodes for d in got)  # a present device without a node
        return
    assert set(spec_) == {"cdiVersion", "kind", "devices"}
    for device in spec_["devices"]:  # type: ignore[attr-defined]
        assert set(device) == {"name", "containerEdits"}
        assert set(device["containerEdits"]) == {"deviceNodes"}
        for node in device["containerEdits"]["deviceNodes"]:
            assert set(node) <= NODE_KEYS and "path" in node
