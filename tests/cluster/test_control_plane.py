"""The control plane, for real: deploy/ as the guide applies it, the docs' manifests, the
admission policy with pod-bound tokens, the ClusterRoles against the audit log, the Machine CRD
and the ResourceSlice limits, all judged by the real kube-apiserver."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.media.conftest import CAPS, FakeGPUs, build_va
from tests.media.test_scan import Machine as MediaMachine

from .support import CLUSTER, REPO, STATE, apply, get, inside, kubectl, pod_token, wait_for

pytestmark = pytest.mark.cluster

EXAMPLES = sorted((REPO / "docs" / "examples").glob("*.yaml"))
OTHER = "node-b"  # a second node: a Node object with no kubelet, for another node's tokens


def slice_doc(node: str, name: str | None = None, pool: str | None = None,
              devices: list[dict[str, Any]] | None = None,
              driver: str = "liken.sh") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}"},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices if devices is not None else
                 [{"name": "usb-1-2-1-0", "attributes": {"bus": {"string": "usb"}}}]},
    }


@pytest.fixture(scope="module")
def installed(k8s: dict[str, str]) -> Iterator[dict[str, str]]:
    """deploy/ applied as the guide says, through the kube-proxy-free overlay."""
    kubectl("apply", "-k", str(REPO / "tests" / "cluster" / "overlay"), timeout=300)
    kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices", "--timeout=300s",
            timeout=320)
    yield k8s


@pytest.fixture(scope="module")
def other_node(installed: dict[str, str]) -> Iterator[str]:
    apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": OTHER}}])
    yield OTHER
    kubectl("delete", "node", OTHER, "--ignore-not-found")


def test_the_agents_run_and_publish(installed: dict[str, str]) -> None:
    node = installed["node"]
    stored = wait_for("the node's slice", lambda: get("resourceslice", f"{node}-liken.sh"))
    assert stored["spec"]["nodeName"] == node
    assert stored["spec"]["pool"]["name"] == node
    assert stored["spec"]["driver"] == "liken.sh"


def test_the_media_agent_waits_on_a_node_without_a_gpu(installed: dict[str, str]) -> None:
    # docs/media.md: on a node with no render node the agent's claim (allocationMode All)
    # cannot be allocated, so its pod stays Pending and nothing is published for the node.
    def pending() -> str | None:
        [pod] = get("-n", "liken-system", "pods", "-l",
                    "app.kubernetes.io/name=media-capabilities")["items"]
        cond = [c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        return cond[0].get("message") if cond and cond[0]["status"] == "False" else None
    message = wait_for("the media agent's pod unschedulable", pending)
    assert "cannot allocate all claims" in message, message


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_accepted_by_the_api_server(installed: dict[str, str],
                                                     path: Path) -> None:
    out = kubectl("apply", "--dry-run=server", "-f", str(path))
    assert "(server dry run)" in out.stdout


def refused_by_policy(out: Any) -> bool:
    return out.returncode != 0 and "liken-node-scoped-writes" in out.stderr


def test_a_node_token_writes_its_own_slice_and_nothing_of_another_node(
        installed: dict[str, str], other_node: str) -> None:
    node = installed["node"]
    theirs = pod_token("liken-devices", other_node)
    # Its own slice: admitted (create, then update). The agents never delete a slice (the
    # kubelet removes a gone driver's), and RBAC grants them no delete.
    apply([slice_doc(other_node)], token=theirs)
    changed = slice_doc(other_node)
    changed["spec"]["pool"]["generation"] = 2
    apply([changed], token=theirs)
    kubectl("delete", "resourceslice", f"{other_node}-liken.sh")

    mine = pod_token("liken-devices", node)
    scenarios = {
        "another node's slice": slice_doc(other_node),
        # Squatting: the other node's slice name, pinned to this node. Admitted, it would turn
        # every later write of the other node's agent into a refused update, for good.
        "another node's slice name": slice_doc(node, name=f"{other_node}-liken.sh"),
        "another driver's slice": slice_doc(node, name=f"{node}-media.liken.sh",
                                            driver="media.liken.sh"),
    }
    for what, doc in scenarios.items():
        out = apply([doc], token=mine, check=False)
        assert refused_by_policy(out), f"{what}: {out.stderr}"
    # A pool named after another node makes that node's devices of the same names look
    # allocated. (The other node's slice name is free; this node's own slice exists, and a
    # slice's pool cannot change, so the other node's token tries it.)
    out = apply([slice_doc(other_node, pool=node)], token=theirs, check=False)
    assert refused_by_policy(out), out.stderr
    machine = {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
               "metadata": {"name": other_node}, "spec": {}}
    apply([machine])
    # The agent patches its Machine's status with no read first (RBAC grants it only patch on
    # machines/status), as the agent itself does.
    out = inside("curl", "-sS", "-X", "PATCH", "--cacert", str(STATE / "config/pki/ca.crt"),
                 "-H", f"Authorization: Bearer {mine}",
                 "-H", "Content-Type: application/merge-patch+json",
                 "-d", json.dumps({"status": {"conditions": []}}),
                 f"https://127.0.0.1:6443/apis/liken.sh/v1alpha1/machines/{other_node}/status",
                 check=False)
    answer = json.loads(out.stdout)
    assert answer.get("code") == 403 and "liken-node-scoped-writes" in answer["message"], answer
    # The media agent's token: its own driver's slice of its own node only.
    media = pod_token("media-capabilities", node)
    out = apply([slice_doc(node, name=f"{node}-liken.sh")], token=media, check=False)
    assert out.returncode != 0, out.stderr
    out = apply([slice_doc(other_node, name=f"{other_node}-media.liken.sh",
                           driver="media.liken.sh")], token=media, check=False)
    assert refused_by_policy(out), out.stderr


def test_the_media_token_evicts_only_its_own_pod(installed: dict[str, str]) -> None:
    media = pod_token("media-capabilities", installed["node"])
    driver = get("-n", "liken-system", "pods", "-l",
                 "app.kubernetes.io/name=liken-devices")["items"][0]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": driver["metadata"]["name"], "namespace": "liken-system"}}
    out = kubectl("create", "--raw",
                  f"/api/v1/namespaces/liken-system/pods/{driver['metadata']['name']}/eviction",
                  "-f", "-", input=json.dumps(eviction), token=media, check=False)
    assert refused_by_policy(out), out.stderr
    assert get("-n", "liken-system", "pod", driver["metadata"]["name"])["metadata"].get(
        "deletionTimestamp") is None
    # Its own pod (the token's): admitted.
    own = "token-media-capabilities-" + installed["node"]
    eviction["metadata"]["name"] = own
    out = kubectl("create", "--raw",
                  f"/api/v1/namespaces/liken-system/pods/{own}/eviction", "-f", "-",
                  input=json.dumps(eviction), token=media, check=False)
    assert out.returncode == 0, out.stderr


def granted(role: str) -> set[tuple[str, str]]:
    docs = [d for f in ("liken-devices/rbac.yaml", "media/rbac.yaml")
            for d in yaml.safe_load_all((REPO / "deploy" / f).read_text()) if d]
    out = set()
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "Role") and doc["metadata"]["name"] == role:
            for rule in doc["rules"]:
                for resource in rule["resources"]:
                    out |= {(verb, resource) for verb in rule["verbs"]}
    return out


def used(account: str, namespace: str = "liken-system") -> set[tuple[str, str]]:
    user = f"system:serviceaccount:{namespace}:{account}"
    out = set()
    for line in (STATE / "logs" / "audit.log").read_text().splitlines():
        event = json.loads(line)
        if event["user"]["username"] != user or event["stage"] != "ResponseComplete":
            continue
        ref = event.get("objectRef", {})
        resource = ref.get("resource", "") + (f"/{ref['subresource']}"
                                              if ref.get("subresource") else "")
        if resource and event["responseStatus"]["code"] < 400:
            out.add((event["verb"], resource))
    return out


def test_the_audit_log_shows_the_verbs_liken_devices_role_grants(
        installed: dict[str, str]) -> None:
    account = "liken-devices"
    wait_for("the agent's writes", lambda: used(account) & {("create", "resourceslices"),
                                                            ("patch", "resourceslices")})
    assert used(account) <= granted(account), used(account) - granted(account)


def test_the_media_agent_publishes_with_its_pod_token_and_only_the_verbs_its_role_grants(
        installed: dict[str, str], tmp_path: Path) -> None:
    """This node has no GPU, so the media DaemonSet's pod waits (see above). The agent itself,
    `liken-media run` from this checkout, runs here instead with its service account's pod-bound
    token for this node, asking a fake render node through the real libva (tests/media's fake VA
    driver): the real API server stores its slice, and the audit log shows what it did."""
    node = installed["node"]
    (tmp_path / "va").mkdir()
    gpus = FakeGPUs(tmp_path / "gpus", build_va(tmp_path / "va"))
    machine = MediaMachine(tmp_path / "m", gpus)
    machine.gpu("0000:00:02.0", 128, CAPS / "intel-dg2-ihd.txt")
    ca = STATE / "config" / "pki" / "ca.crt"
    kubeconfig = tmp_path / "media.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "media",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443",
                                               "certificate-authority": str(ca)}}],
        "users": [{"name": "media", "user": {"token": pod_token("media-capabilities", node,
                                                                "media-agent-here")}}],
        "contexts": [{"name": "media", "context": {"cluster": "c", "user": "media"}}]}))
    fake = [f"{k}={v}" for k, v in gpus.env.items()
            if k.startswith(("LD_PRELOAD", "VAFAKE_", "LIBVA_"))]
    agent = Path(sys.executable).parent / "liken-media"
    log = tmp_path / "agent.log"
    name = f"{node}-media.liken.sh"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["python3", str(CLUSTER), "exec", "--", "env", *fake, str(agent), "run",
             "--sysfs", str(machine.root / "sys"), "--hwdata-dir", str(machine.root / "hwdata"),
             "--dev", str(gpus.dev), "--node", node, "--kubeconfig", str(kubeconfig)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            stored = wait_for("the media agent's slice", lambda: get("resourceslice", name)
                              if proc.poll() is None else pytest.fail(log.read_text()[-4000:]))
        finally:
            proc.terminate()
            proc.wait(30)
    try:
        assert proc.returncode == 0, log.read_text()[-4000:]
        assert stored["spec"]["driver"] == "media.liken.sh"
        assert stored["spec"]["nodeName"] == node
        [device] = stored["spec"]["devices"]
        # What the fake driver answered for the DG2's dump: its vendor string and capabilities.
        assert "vaDriver" in device["attributes"], device
        assert any(a.get("bool") for a in device["attributes"].values()), device
        account = "media-capabilities"
        wait_for("the media agent's writes in the audit log",
                 lambda: used(account) & {("create", "resourceslices"),
                                          ("patch", "resourceslices")})
        assert used(account) <= granted(account), used(account) - granted(account)
    finally:
        kubectl("delete", "resourceslice", name, "--ignore-not-found")


def test_a_slice_that_server_side_apply_creates_needs_the_create_grant(
        installed: dict[str, str]) -> None:
    """Why both roles grant `create` on resourceslices although the audit log shows the agents
    only patching: a server-side apply that creates the slice is recorded as a patch, but the
    API server authorizes it as a create too. A service account without `create` is refused."""
    name = "probe-no-create"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
                       "verbs": ["get", "patch"]}]}
    apply([{"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": "default"}}, role,
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]}])
    slice_name = f"{name}-slice"
    doc = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": slice_name},
           "spec": {"driver": "probe.example.com", "allNodes": True,
                    "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "d0"}]}}
    try:
        token = kubectl("-n", "default", "create", "token", name).stdout.strip()

        def server_side() -> Any:
            return kubectl("apply", "--server-side", "--field-manager=probe", "-f", "-",
                           input=json.dumps(doc), token=token, check=False)
        refused = server_side()
        assert refused.returncode != 0
        assert 'cannot create resource "resourceslices"' in refused.stderr, refused.stderr
        role["rules"][0]["verbs"].append("create")
        apply([role])
        wait_for("the apply with the create grant", lambda: server_side().returncode == 0)
        assert ("patch", "resourceslices") in used(name, "default")
        assert ("create", "resourceslices") not in used(name, "default")
    finally:
        kubectl("delete", "resourceslice", slice_name, "--ignore-not-found", check=False)
        kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found",
                check=False)
        kubectl("-n", "default", "delete", "serviceaccount", name, "--ignore-not-found",
                check=False)


GOOD_MACHINES = [
    {"modules": ["btusb", "snd_hda_intel"]},
    {"serio": [{"protocol": "pulse8-cec", "vendor": "2548", "product": "1002"}]},
    {"serio": [{"protocol": "rainshadow-cec", "vendor": "0x04d8", "product": "ff59",
                "serial": "A1"}]},
    {"modules": None},
]
BAD_MACHINES = [
    ({"modules": ["btusb; rm -rf /"]}, "spec.modules[0]"),
    ({"serio": [{"protocol": "other-cec", "vendor": "2548", "product": "1002"}]},
     "spec.serio[0].protocol"),
    ({"serio": [{"protocol": "pulse8-cec", "vendor": "25488", "product": "1002"}]},
     "spec.serio[0].vendor"),
    ({"serio": [{"protocol": "pulse8-cec", "vendor": "2548"}]}, "product"),
]


@pytest.mark.parametrize("spec", GOOD_MACHINES)
def test_the_machine_crd_accepts_good_machines(installed: dict[str, str],
                                               spec: dict[str, Any]) -> None:
    doc = {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
           "metadata": {"name": "crd-good"}, "spec": spec}
    kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(doc))


@pytest.mark.parametrize(("spec", "field"), BAD_MACHINES)
def test_the_machine_crd_refuses_bad_machines_saying_why(installed: dict[str, str],
                                                         spec: dict[str, Any],
                                                         field: str) -> None:
    doc = {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
           "metadata": {"name": "crd-bad"}, "spec": spec}
    out = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False)
    assert out.returncode != 0
    assert field in out.stderr, out.stderr


def devices(n: int, attrs: int = 1, value: str = "x") -> list[dict[str, Any]]:
    return [{"name": f"d{i}", "attributes": {f"a{j}": {"string": value} for j in range(attrs)}}
            for i in range(n)]


@pytest.mark.parametrize(("devs", "ok"), [
    (devices(128), True), (devices(129), False),
    (devices(1, attrs=32), True), (devices(1, attrs=33), False),
    (devices(1, value="v" * 64), True), (devices(1, value="v" * 65), False),
    ([{"name": "n" * 63}], True), ([{"name": "n" * 64}], False),
])
def test_slice_limits_at_their_boundaries(installed: dict[str, str],
                                          devs: list[dict[str, Any]], ok: bool) -> None:
    doc = slice_doc("limits-node", devices=devs)
    out = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False)
    assert (out.returncode == 0) is ok, out.stderr
