"""The manifests in deploy/liken-devices/ are valid objects in every supported Kubernetes minor,
the DaemonSet's arguments are ones the agent takes and point at what it mounts, and the
ClusterRole grants every request the agent makes, and nothing it does not (docs/agent.md,
"Deploy")."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from liken_devices.agent.cli import run_options
from liken_devices.agent.run import assemble
from liken_devices.cli import build_parser
from tests.deploy.support import MINORS
from tests.support.fakeapi import FakeApiServer

from .node import FixtureNode, is_root, synthetic_uevent

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "liken-devices"


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def test_manifests_are_valid_objects() -> None:
    kinds = []
    for doc in documents():
        for minor in MINORS:
            kubernetes_validate.validate(doc, minor, strict=True)
        kinds.append(doc["kind"])
    assert sorted(kinds) == sorted(["Namespace", "CustomResourceDefinition", "ServiceAccount",
                                    "ClusterRole", "ClusterRoleBinding", "DaemonSet",
                                    "ValidatingAdmissionPolicy",
                                    "ValidatingAdmissionPolicyBinding"])
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in DEPLOY.glob("*.yaml")
                                    if p.name != "kustomization.yaml")


def test_daemonset_mounts_what_the_agent_reads() -> None:
    ds = next(d for d in documents() if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True  # the kernel's uevents reach the host's netns only
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/sys"]["readOnly"] is True
    for path in ("/dev", "/var/lib/kubelet/plugins/liken.sh", "/var/lib/kubelet/plugins_registry",
                 "/var/run/cdi", "/host/usr", "/run/liken", "/sys/bus"):
        assert path in mounts, path
    assert mounts["/host/usr"]["readOnly"] is True and not mounts["/sys/bus"].get("readOnly")
    volumes = {v["name"]: v for v in pod["volumes"]}
    # Facts: a host without them must show no facts directory (an empty one means "no roles").
    assert volumes[mounts["/run/liken"]["name"]]["hostPath"]["path"] == "/run/liken"
    assert container["args"][0] == "run"
    assert pod["serviceAccountName"] == "liken-devices"
    # The arguments are ones `liken-devices run` takes, the kubelet's paths under kubeletDir
    # (the ConfigMap the kustomization generates) as the kubelet's defaults.
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    [generated] = kustomization["configMapGenerator"]
    kubelet_dir = dict(lit.split("=", 1) for lit in generated["literals"])["kubeletDir"]
    assert kubelet_dir == "/var/lib/kubelet"
    env = {e["name"]: e for e in container["env"]}
    assert env["KUBELET_DIR"]["valueFrom"]["configMapKeyRef"] == {
        "name": generated["name"], "key": "kubeletDir"}
    args = build_parser().parse_args([a.replace("$(NODE_NAME)", "node-1")
                                      .replace("$(KUBELET_DIR)", kubelet_dir)
                                      for a in container["args"]])
    assert args.node == "node-1" and args.metrics_port == 9464
    # Names from the host's ID files when readable, else from the image's.
    assert args.hwdata_dir == [Path("/host/usr/share/hwdata"), Path("/usr/share/hwdata")]
    assert str(args.plugin_dir) in mounts and str(args.registry_dir) in mounts
    assert str(args.cdi_dir) in mounts and str(args.state_dir).startswith("/var/lib/liken-devices")
    from liken_devices.cliargs import Inputs

    # This host's facts: the agent reads /sys, so its facts are the host's (the mount above).
    assert str(Inputs.from_args(args).facts_dir()).startswith("/run/liken/")


def granted() -> set[tuple[str, str]]:
    role = next(d for d in documents() if d["kind"] == "ClusterRole")
    out = set()
    for rule in role["rules"]:
        for res in rule["resources"]:
            for verb in rule["verbs"]:
                out.add((verb, res))
    return out


@pytest.mark.root
@pytest.mark.skipif(not is_root(), reason="real uevents")
def test_cluster_role_grants_exactly_what_the_agent_uses(tmp_path: Path) -> None:
    api = FakeApiServer().start()
    try:
        name = "rbac-node"
        api.add_node(name)
        api.add_machine(name, {})
        node = FixtureNode(tmp_path / "node")
        args = build_parser().parse_args([
            "run", "--node", name, *node.args(), "--kubeconfig",
            str(api.write_kubeconfig(tmp_path / "kubeconfig")), "--console",
            str(tmp_path / "console"), "--no-machine-side", "--cdi-dir", str(tmp_path / "cdi"),
            "--state-dir", str(tmp_path / "state"), "--plugin-dir", str(tmp_path / "plugin"),
            "--registry-dir", str(tmp_path / "registry")])
        built = assemble(run_options(args))
        t = threading.Thread(target=built.agent.run, daemon=True)
        t.start()
        try:
            assert built.agent.ready.wait(15)
            api.wait_for(lambda: all(w.connected.is_set() for w in built.agent._watches))
            node.plug_usb(2)
            synthetic_uevent("add")
            api.wait_for(lambda: ("patch", "resourceslices") in api.verbs
                         and api.verbs.count(("patch", "resourceslices")) >= 2)
            # The embedded plugin reads a claim when the kubelet prepares it.
            claim = api.add_claim("ns", "c", results=[{"device": "usb-1-2-1-0"}], node=name)
            from liken_devices.plugin.claims import fetch_results

            fetch_results(built.client, "ns", "c", claim["metadata"]["uid"], name)
            # And, for a late Bluetooth registrant, the pods the claim is reserved for.
            from liken_devices.plugin.claims import container_starts

            pod = api.add_pod("ns", "p", node=name)
            claim["status"]["reservedFor"] = [{"resource": "pods", "name": "p",
                                               "uid": pod["metadata"]["uid"]}]
            api.put_object("resourceclaims", claim)
            assert container_starts(built.client, "ns", "c", claim["metadata"]["uid"]) == []
            # And it says in the claim's status what the prepare delivered.
            from liken_devices.plugin.claimstatus import ClaimStatusWriter

            writer = ClaimStatusWriter(built.client)
            writer.want(claim["metadata"]["uid"], "ns", "c", [
                {"driver": "liken.sh", "pool": name, "device": "usb-1-2-1-0"}])
            writer.flush()
            assert writer.writes == 1
        finally:
            built.agent.request_stop()
            t.join(10)
            built.close()
    finally:
        api.stop()
    used = {(verb, res) for verb, res in api.verbs}
    assert used <= granted(), f"not granted: {sorted(used - granted())}"
    assert granted() <= used, f"granted but never used: {sorted(granted() - used)}"


def test_a_surge_pod_fits_beside_the_old_one() -> None:
    """With host network every declared containerPort is also a host port (the API defaults
    hostPort to it), and the scheduler places no pod that needs a host port another pod on the
    node holds: the surge pod, a copy of the same template, would never start beside the old
    one. So the pod declares none; the probes are exec probes over the agent's own unix socket
    (tests/agent/test_probe_socket.py)."""
    ds = next(d for d in documents() if d["kind"] == "DaemonSet")
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 1
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    host_ports = [p.get("hostPort", p["containerPort"])
                  for c in pod["containers"] + pod.get("initContainers", [])
                  for p in c.get("ports", [])]
    assert host_ports == []
    (container,) = pod["containers"]
    args = build_parser().parse_args([a.replace("$(NODE_NAME)", "node-1")
                                      .replace("$(KUBELET_DIR)", "/var/lib/kubelet")
                                      for a in container["args"]])
    assert args.seamless_upgrade  # the endpoint shares its port only in this mode
    # The metrics endpoint listens on the pod's IP, which with host network is the node's
    # ($POD_IP from status.podIP, no --metrics-addr).
    assert args.metrics_addr is None
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in container["env"]}
    assert env["POD_IP"] == "status.podIP"
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(args.metrics_port)
