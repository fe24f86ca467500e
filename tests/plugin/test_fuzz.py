"""Fuzz suites of the plugin's inputs: state files, CDI directories and the kubelet's requests.

The property (docs/plugin.md, "Bad input"): whatever the input, the command exits 0 or 2 with
one line, never a traceback, within a memory limit (``RLIMIT_AS``) and a deadline; the plugin
starts whatever its state and CDI directory hold, loses no claim a readable spec names, and
answers every request it is sent. Example counts come from ``tests.support.hostile.examples``:
a few here, many more under ``./tasks fuzz``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.files import read_bounded
from liken_devices.plugin import cdi
from liken_devices.plugin.gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)
from liken_devices.plugin.server import MAX_CLAIMS
from liken_devices.plugin.state import STATE_FILE
from tests.support.fakeapi import FakeApiServer
from tests.support.hostile import assert_fails_closed, examples, run_cli

from . import cdi_model, state_model
from .conftest import NODE, cdi_files, new_claim
from .process import Node

pytestmark = pytest.mark.fuzz

UIDS = [str(uuid.UUID(int=i + 1, version=4)) for i in range(4)]
DEVICES = ["usb-1-3", "pnp-00-01", "pci-0000-00-02-0"]
NODE_NAMES = ["bus/usb/001/005", "ttyS1", "dri/renderD128", "../etc/shadow", "a//b", ""]

FUZZ_SETTINGS = dict(deadline=None, derandomize=False, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.function_scoped_fixture])

json_leaf = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
             | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3)
                          | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=12)


def field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the valid value, sometimes anything JSON can hold."""
    return st.one_of(valid, valid, valid, json_value)


node_entry = st.tuples(field(st.sampled_from(NODE_NAMES)), field(st.sampled_from(["c", "b"])),
                       field(st.integers(0, 2**33)), field(st.integers(0, 300))).map(list)
claim_doc = st.fixed_dictionaries({
    "namespace": field(st.just("ns")), "name": field(st.just("c")),
    "pool": field(st.just(NODE)),
    "devices": field(st.lists(st.fixed_dictionaries({
        "name": field(st.sampled_from(DEVICES)),
        "requests": field(st.lists(field(st.just("req")), max_size=2))}), max_size=3)),
    "nodes": field(st.dictionaries(st.sampled_from(DEVICES) | st.text(max_size=8),
                                   field(st.lists(node_entry, max_size=3)), max_size=3)),
    "present": field(st.dictionaries(st.sampled_from(DEVICES) | st.text(max_size=8),
                                     field(st.booleans()))),
    "usbInterfaces": field(st.lists(field(st.sampled_from(["1-3:1.0", "1-2:1.1"])))),
    "preparedAt": field(st.floats(0, 2e9)),
})
state_doc = st.fixed_dictionaries({
    "version": field(st.just(1)),
    "claims": field(st.dictionaries(st.sampled_from(UIDS) | st.text(max_size=10), claim_doc,
                                    max_size=3)),
})
nesting = st.integers(1, 120_000).map(lambda n: b"[" * n + b"]" * n)
state_bytes = st.one_of(
    state_doc.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=300),
    json_value.map(lambda d: json.dumps(d).encode()),
    nesting,
    st.sampled_from([b'{"version": 1e400, "claims": {}}', b'{"version": 1, "claims": 1e400}',
                     b"\xff\xfe{}", b"{" * 5000]),
)


def spec_doc(uid: str) -> st.SearchStrategy[Any]:
    node = st.fixed_dictionaries({
        "path": field(st.sampled_from(["/dev/ttyS1", "/dev/bus/usb/001/005", "/etc/shadow",
                                       "/dev/.liken.sh-absent/usb-1-3/bus/usb/001/005",
                                       "/dev/../etc/x"])),
        "type": field(st.sampled_from(["c", "b"])), "major": field(st.integers(0, 2**33)),
        "minor": field(st.integers(0, 300))})
    device = st.fixed_dictionaries({
        "name": field(st.sampled_from([f"{uid}-{d}" for d in DEVICES] + [f"{UIDS[0]}-x"])),
        "containerEdits": field(st.fixed_dictionaries({
            "deviceNodes": field(st.lists(node, min_size=1, max_size=3))}))})
    return st.fixed_dictionaries({"cdiVersion": field(st.just("0.5.0")),
                                  "kind": field(st.just("liken.sh/device")),
                                  "devices": field(st.lists(device, min_size=1, max_size=3))})


@st.composite
def cdi_entries(draw: Any) -> dict[str, tuple[str, bytes]]:
    """name -> (kind, content) of a CDI directory: specs valid or not, and other things."""
    out: dict[str, tuple[str, bytes]] = {}
    for uid in draw(st.lists(st.sampled_from(UIDS), unique=True, max_size=4)):
        kind = draw(st.sampled_from(["file", "file", "file", "dir", "symlink", "fifo"]))
        body = draw(st.one_of(spec_doc(uid).map(lambda d: json.dumps(d).encode()),
                              st.binary(max_size=100), nesting))
        out[f"liken.sh-{uid}.json"] = (kind, body)
    if draw(st.booleans()):
        out[f".liken.sh-{UIDS[0]}.json.1.ab.tmp"] = ("file", b"half")
    if draw(st.booleans()):
        out["other-vendor.json"] = ("file", b"{}")
    return out


def _make(directory: Path, entries: dict[str, tuple[str, bytes]], outside: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, (kind, body) in entries.items():
        path = directory / name
        if kind == "dir":
            path.mkdir()
        elif kind == "symlink":
            path.symlink_to(outside)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.write_bytes(body)


def _load_main(argv: list[str]) -> int:
    """Start the plugin's state as ``plugin`` and ``run`` do, without serving: exit 0."""
    from liken_devices.plugin import Plugin, PluginConfig

    state_dir, cdi_dir = Path(argv[0]), Path(argv[1])
    p = Plugin(PluginConfig(node=NODE, cdi_dir=cdi_dir, state_dir=state_dir, sysfs=None),
               walk=lambda: None, kube_client=None)  # type: ignore[arg-type,return-value]
    p.load()
    print(json.dumps(sorted(p.prepared())))
    p.stop()
    return 0


@pytest.fixture(scope="module")
def tree() -> Any:
    """A small fixture machine for ``claims``' walk (tests/plugin/process.py)."""
    root = Path(tempfile.mkdtemp(prefix="lkfz-"))
    try:
        yield Node(root, root, Path("/nonexistent"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_any_state_file_starts_the_plugin_and_claims_fails_closed(tree: Node) -> None:
    @settings(max_examples=examples(30), **FUZZ_SETTINGS)  # type: ignore[arg-type]
    @given(raw=state_bytes, entries=cdi_entries())
    def one(raw: bytes, entries: dict[str, tuple[str, bytes]]) -> None:
        with tempfile.TemporaryDirectory(prefix="lkfz-") as d:
            base = Path(d)
            state_dir, cdi_dir = base / "state", base / "cdi"
            state_dir.mkdir()
            (state_dir / STATE_FILE).write_bytes(raw)
            outside = base / "outside.json"
            outside.write_text("keep")
            _make(cdi_dir, entries, outside)
            # What the specs on disk name before the start, and which claims the state file
            # holds, by the plain readings of tests/plugin/cdi_model.py and state_model.py (never
            # the plugin's own readers: a weakened reader would agree with itself).
            readable = {}
            for name in entries:
                uid = name.removeprefix("liken.sh-").removesuffix(".json")
                if name.startswith("liken.sh-") and uid in UIDS \
                        and cdi_model.read_spec(cdi_dir / name, uid) is not None:
                    readable[uid] = (cdi_dir / name).read_bytes()
            before = state_model.read_state(raw)

            common = [*tree.common()[:8], "--node", NODE, "--state-dir", str(state_dir)]
            listed = run_cli(["claims", *common, "-o", "json"])
            assert_fails_closed(listed)
            assert listed.rc == (2 if before is None else 0), listed.stderr
            assert (state_dir / STATE_FILE).read_bytes() == raw  # claims never writes

            started = run_cli([str(state_dir), str(cdi_dir)], _load_main, deadline=30)
            assert_fails_closed(started, allowed=(0,))
            uids = set(json.loads(started.stdout))
            if before is not None:
                assert uids == set(before)
            else:
                # Rebuilt: every claim a readable spec named, its spec untouched by the sweep.
                assert uids == set(readable)
                for uid, body in readable.items():
                    assert read_bounded(cdi.spec_path(cdi_dir, uid), 1 << 22) == body
            saved = state_dir / STATE_FILE
            if saved.exists() and not saved.is_symlink() and saved.is_file():
                assert state_model.read_state(saved.read_bytes()) == uids
            assert outside.read_text() == "keep"
            assert not any(n.endswith(".tmp") for n in os.listdir(cdi_dir))

    one()


# -- the kubelet's requests --------------------------------------------------------------------

hostile_text = st.one_of(st.text(max_size=40), st.sampled_from(
    ["", "default", "../../secrets", "a/b", "ns\n", "x" * 300, "é", "\u202e", "a\x00b",
     "kube-system", "claim-1"]))
hostile_uid = st.one_of(hostile_text, st.sampled_from(UIDS), st.uuids().map(str))
claim_ref = st.tuples(hostile_text, hostile_uid, hostile_text)
requests = st.tuples(st.sampled_from(["prepare", "unprepare"]), st.sampled_from(["v1", "v1beta1"]),
                     st.one_of(st.lists(claim_ref, max_size=8),
                               st.integers(MAX_CLAIMS - 2, MAX_CLAIMS + 40).map(
                                   lambda n: [("ns", str(uuid.UUID(int=i, version=4)), "c")
                                              for i in range(n)])))


def _limit_memory() -> None:
    # Address space for the plugin process: grpc's threads reserve stacks and arenas up front
    # (8 MiB and 64 MiB each, nearly all of it never touched), and a loaded machine runs every
    # gRPC worker and claim reader at once: 4 GiB bounds a runaway without starving a thread.
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def test_hostile_requests_are_answered_in_band(api: FakeApiServer, node: Node) -> None:
    node.start(preexec_fn=_limit_memory)
    dra = node.sockdir / "plugins" / "liken.sh" / "dra.sock"
    channel = grpc.insecure_channel(f"unix:{dra}")
    stubs = {"v1": (dra_v1_pb2, dra_v1_pb2_grpc.DRAPluginStub(channel)),
             "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc.DRAPluginStub(channel))}

    @settings(max_examples=examples(30), **FUZZ_SETTINGS)  # type: ignore[arg-type]
    @given(req=requests)
    def one(req: tuple[str, str, list[tuple[str, str, str]]]) -> None:
        op, version, claims = req
        pb, stub = stubs[version]
        msg = [pb.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]
        try:
            if op == "prepare":
                resp = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=msg),
                                                 timeout=45)
            else:
                resp = stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=msg),
                                                   timeout=45)
        except grpc.RpcError as e:
            # The only refusal of a whole call: more claims than a pod has.
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and len(claims) > MAX_CLAIMS
            return
        assert len(claims) <= MAX_CLAIMS
        assert set(resp.claims) == {uid for _, uid, _ in claims}  # an entry for every claim
        if op == "prepare":  # none of these claims is allocated to this node's devices
            assert all(r.error and not r.devices for r in resp.claims.values())
        # Nothing reached the CDI directory or outside it, the state stays readable.
        assert all(n.startswith("liken.sh-") or n.startswith(".")
                   for n in cdi_files(node.cdi))
        assert node.proc is not None and node.proc.poll() is None

    try:
        one()
        # Afterwards the plugin still serves the kubelet.
        claim = new_claim(api, ["pci-0000-00-1e-0"])
        k = node.kubelet()
        assert k.prepare([claim])[claim[1]].error == ""
        assert k.unprepare([claim]) == {claim[1]: ""}
        k.close()
        state = node.state / STATE_FILE
        if state.exists():
            assert state_model.read_state(state.read_bytes()) is not None
    finally:
        channel.close()
    assert node.terminate() == 0, (node.root / "plugin.log").read_text()[-2000:]
    log = (node.root / "plugin.log").read_text()
    assert "Traceback" not in log, log[-3000:]


def test_a_state_dir_that_is_a_file_is_one_line_and_exit_2(tree: Node, tmp_path: Path,
                                                             api: FakeApiServer) -> None:
    (tmp_path / "file").write_text("")
    out = run_cli(["plugin", *tree.common()[:8], "--node", NODE, "--kubeconfig",
                   str(api.write_kubeconfig(tmp_path / "kubeconfig")),
                   "--state-dir", str(tmp_path / "file"), "--cdi-dir", str(tmp_path / "cdi"),
                   "--plugin-dir", str(tmp_path / "p"), "--registry-dir", str(tmp_path / "r")])
    assert_fails_closed(out)
    assert out.rc == 2 and "state" in out.stderr
