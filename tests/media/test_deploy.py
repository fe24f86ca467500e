"""deploy/media/ and the examples in docs/media.md: valid objects that select the right devices.

Every manifest and every YAML example of the document is checked against the Kubernetes 1.34
OpenAPI schema (kubernetes-validate, strict), and every CEL selector is evaluated (cel-python)
against real slices: liken.sh devices from the inventory of a built sysfs tree, and media.liken.sh
devices from the agent's queries of fake GPUs. The two-request claim is then resolved the way
the scheduler does: a render node and a capability device that both match their classes and
have the same resource.kubernetes.io/pciBusID.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml

from liken_devices.inventory import Sources
from liken_devices.media.devices import query_devices, render_devices
from liken_devices.slices import devices_json

from .conftest import CAPS, FakeGPUs
from .test_scan import Machine

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "media"
DOC = REPO / "docs" / "media.md"
K8S = "1.34.0"


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def doc_examples() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    return [d for b in blocks for d in yaml.safe_load_all(b) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("obj", manifests() + doc_examples(),
                         ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_valid_against_the_api_schema(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files


def test_daemonset_gets_render_nodes_through_its_own_claim() -> None:
    docs = manifests()
    [ds] = by_kind(docs, "DaemonSet")
    assert (ds["metadata"]["name"], ds["metadata"]["namespace"]) == ("media-capabilities",
                                                                      "liken-system")
    pod = ds["spec"]["template"]["spec"]
    [claim] = pod["resourceClaims"]
    [template] = by_kind(docs, "ResourceClaimTemplate")
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert template["metadata"]["namespace"] == "liken-system"
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": "media-render", "allocationMode": "All",
                                  "adminAccess": True}
    [container] = pod["containers"]
    assert container["resources"]["claims"] == [{"name": claim["name"]}]
    assert container["args"][:3] == ["run", "--node", "$(NODE_NAME)"]
    # No privilege and no host /dev (docs/media.md, "Deploying").
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532  # the image's user
    assert sc["capabilities"]["drop"] == ["ALL"]
    # One host path: the host's /usr/share, read-only, for its pci.ids (the render nodes' names).
    host = [v for v in pod.get("volumes", []) if "hostPath" in v]
    assert [v["hostPath"]["path"] for v in host] == ["/usr/share"]
    assert [(m["mountPath"], m.get("readOnly")) for m in container["volumeMounts"]
            if m["name"] == host[0]["name"]] == [("/host/usr/share", True)]
    assert container["args"][-4:] == ["--hwdata-dir", "/host/usr/share/hwdata",
                                      "--hwdata-dir", "/usr/share/hwdata"]
    assert not pod.get("hostPID") and not pod.get("hostNetwork") and not pod.get("hostIPC")
    assert pod["serviceAccountName"] == "media-capabilities"


def test_the_agents_claim_takes_no_render_node_from_workloads() -> None:
    """adminAccess: the claim sees every render node and holds none; the API server accepts it
    only in a namespace labelled for it, which liken's own manifests label."""
    [template] = by_kind(manifests(), "ResourceClaimTemplate")
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "media-capabilities-x-render-nodes-y",
                          "namespace": template["metadata"]["namespace"]},
             "spec": template["spec"]["spec"]}
    kubernetes_validate.validate(claim, K8S, strict=True)  # the claim the template makes
    # What the scheduler writes back for it: one result per render node, each adminAccess.
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "render", "driver": "liken.sh", "pool": "node-a", "device": d,
         "adminAccess": True} for d in ("pci-0000-00-02-0", "pci-0000-03-00-0")]}}}
    kubernetes_validate.validate(claim, K8S, strict=True)
    namespace = yaml.safe_load((REPO / "deploy" / "liken-devices" / "namespace.yaml").read_text())
    assert namespace["metadata"]["name"] == template["metadata"]["namespace"]
    assert namespace["metadata"]["labels"]["resource.kubernetes.io/admin-access"] == "true"


def test_probes_metrics_and_the_pods_own_identity() -> None:
    [ds] = by_kind(manifests(), "DaemonSet")
    [container] = ds["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name",
                   "POD_NAMESPACE": "metadata.namespace", "POD_IP": "status.podIP"}
    port = int(container["args"][container["args"].index("--metrics-port") + 1])
    assert container["ports"] == [{"name": "metrics", "containerPort": port}]
    probes = {k: container[k]["httpGet"]["path"] for k in
              ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes == {"startupProbe": "/healthz", "livenessProbe": "/healthz",
                      "readinessProbe": "/readyz"}


def test_rbac() -> None:
    docs = manifests()
    [role] = by_kind(docs, "ClusterRole")
    rules = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
    assert rules[("resource.k8s.io", "resourceslices")] == {"create", "patch", "get", "list",
                                                           "watch"}
    assert rules[("", "nodes")] == {"get"}
    [binding] = by_kind(docs, "ClusterRoleBinding")
    [sa] = by_kind(docs, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": "liken-system"}]
    # Evicting its own pod: create on pods/eviction, in its own namespace only.
    [local] = by_kind(docs, "Role")
    assert local["metadata"]["namespace"] == "liken-system"
    assert local["rules"] == [{"apiGroups": [""], "resources": ["pods/eviction"],
                               "verbs": ["create"]}]
    [local_binding] = by_kind(docs, "RoleBinding")
    assert local_binding["roleRef"]["name"] == local["metadata"]["name"]
    assert local_binding["subjects"] == binding["subjects"]


# ---- CEL against real slices --------------------------------------------------------------------


def cel_device(driver: str, device: dict[str, Any]) -> Any:
    """The CEL ``device`` of a slice device (KEP-4381): attributes by domain, bare names
    under the driver's own domain."""
    attrs: dict[str, dict[str, Any]] = {}
    for key, value in device.get("attributes", {}).items():
        domain, _, ident = key.rpartition("/")
        attrs.setdefault(domain or driver, {})[ident] = next(iter(value.values()))
    return celpy.json_to_cel({"driver": driver, "attributes": attrs})


def selects(cls: dict[str, Any], driver: str, device: dict[str, Any]) -> bool:
    env = celpy.Environment()
    device_cel = cel_device(driver, device)
    for sel in cls["spec"]["selectors"]:
        program = env.program(env.compile(sel["cel"]["expression"]))
        if not bool(program.evaluate({"device": device_cel})):
            return False
    return True


@pytest.fixture
def cluster(tmp_path: Path, fake_env: FakeGPUs) -> tuple[list[dict[str, Any]],
                                                         list[dict[str, Any]]]:
    """A node with three GPUs: its liken.sh devices and its media.liken.sh devices."""
    m = Machine(tmp_path / "m", fake_env)
    m.gpu("0000:00:02.0", 128, CAPS / "intel-dg2-ihd.txt")          # HEVC 10, AV1 10, LP only
    m.gpu("0000:03:00.0", 129, CAPS / "amd-polaris-mesa.txt", driver="amdgpu", vendor="1002",
          device="73bf")                                             # HEVC 10, no AV1
    m.gpu("0000:04:00.0", 130, CAPS / "av1-8bit-only.txt", driver="amdgpu", vendor="1002",
          device="73bf")                                             # no HEVC at all
    r = m.root
    inv = Sources(sysfs=r / "sys", facts=r / "facts", modules_dir=r / "modules",
                  hwdata_dir=r / "hwdata").walk()
    liken = devices_json(inv)
    media = [d.to_api() for d in query_devices(render_devices(inv), m.gpus.dev, 5.0)]
    return liken, media


def test_media_render_class_selects_every_render_node_and_nothing_else(
        cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    liken, media = cluster
    [cls] = by_kind(manifests(), "DeviceClass")
    assert cls["metadata"]["name"] == "media-render"
    chosen = [d["name"] for d in liken if selects(cls, "liken.sh", d)]
    assert chosen == ["pci-0000-00-02-0", "pci-0000-03-00-0", "pci-0000-04-00-0"]
    assert any(d["name"].endswith("-display") for d in liken)  # present, and not chosen
    assert not any(selects(cls, "media.liken.sh", d) for d in media)


def test_example_classes(cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    _, media = cluster
    classes = {c["metadata"]["name"]: c for c in by_kind(doc_examples(), "DeviceClass")}

    def chosen(name: str) -> list[str]:
        return [d["name"] for d in media if selects(classes[name], "media.liken.sh", d)]

    assert chosen("decode-hevc-10bit") == ["pci-0000-00-02-0", "pci-0000-03-00-0"]
    assert chosen("transcode-av1-10bit-to-hevc-10bit") == ["pci-0000-00-02-0"]
    # Polaris has the full H.264 encoder; DG2 only the low-power one.
    assert chosen("encode-h264-full") == ["pci-0000-03-00-0"]


def test_two_request_claim_pairs_the_same_gpu(
        cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    liken, media = cluster
    examples = doc_examples()
    classes = {c["metadata"]["name"]: c for c in by_kind(examples + manifests(), "DeviceClass")}
    [template] = by_kind(examples, "ResourceClaimTemplate")
    devices = template["spec"]["spec"]["devices"]
    requests = {r["name"]: r["exactly"]["deviceClassName"] for r in devices["requests"]}
    [constraint] = devices["constraints"]
    key = constraint["matchAttribute"]
    assert key == "resource.kubernetes.io/pciBusID"
    candidates = {"liken.sh": liken, "media.liken.sh": media}
    pairs = []
    for gpu in candidates["liken.sh"]:
        if not selects(classes[requests["gpu"]], "liken.sh", gpu):
            continue
        for caps in candidates["media.liken.sh"]:
            if not selects(classes[requests["caps"]], "media.liken.sh", caps):
                continue
            if gpu["attributes"].get(key) == caps["attributes"].get(key) is not None:
                pairs.append((gpu["name"], caps["name"]))
    # Only the two GPUs that decode 10-bit HEVC, each with its own render node.
    assert pairs == [("pci-0000-00-02-0", "pci-0000-00-02-0"),
                     ("pci-0000-03-00-0", "pci-0000-03-00-0")]
