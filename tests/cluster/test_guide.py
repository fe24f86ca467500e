"""docs/guide.md, walked on the real cluster: the commands it prints, run as printed (or, where
this cluster cannot run one as printed, the closest the guide itself offers, said where), and what
the guide says they show, asserted on its key words.

The walk: install; every node's slice; a cookbook claim (`claim-for` a device of the node, the pod
gets it, `fleet` shows who holds it); a cookbook example this machine cannot satisfy, pending, and
the troubleshooting commands that explain it; the node's own answers (`claims`, `explain`); an
upgrade to a new tag while the claim is prepared; uninstall keeping the Machines; install again.

The node is the node tier's machine (tests/cluster/node-overlay, test_node.build_machine): a sysfs
tree whose device nodes are real character devices of this machine, a serial card and a disk that
backs the root. At the end the cluster is as the walk found it: deploy/ installed again the way it
was (the overlay the other modules apply), or removed when it was not there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from .support import CLUSTER, REPO, STATE, apply, get, info, inside, kubectl, wait_for
from .test_node import SERIAL, TREE, build_machine

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]

GUIDE = REPO / "docs" / "guide.md"
BBOX = "localhost/liken-bbox:ci"
DEVICES_LABEL = "app.kubernetes.io/name=liken-devices"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"localhost/liken-devices:{VERSION}"
NEW_TAG = f"{VERSION}-guide-walk"  # the "new image" of the upgrade: the same bits, a new name
DISK = "pci-0000-00-17-0"


# ---- the guide, as text --------------------------------------------------------------------


def section(title: str) -> str:
    text = GUIDE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def flat(text: str) -> str:
    """Prose without its line breaks, to look for what a sentence says."""
    return " ".join(text.replace("`", "").split())


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def commands(block: str) -> list[list[str]]:
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def after(text: str, marker: str, lang: str) -> str:
    """The first ``lang`` block after ``marker``."""
    return blocks(text[text.index(marker):], lang)[0]


# ---- the walk's state ----------------------------------------------------------------------


@dataclass
class Walk:
    node: str
    work: Path
    plugin_path: str
    overlay: Path = Path()      # the guide's kube-proxy-free overlay + the node tier's machine
    upgrade: Path = Path()      # the same, with the new tag in `images:`
    state: dict[str, Any] = field(default_factory=dict)

    def liken(self, *args: str, check: bool = False) -> Any:
        """``kubectl liken ...``: the plugin found on PATH, as kubectl finds plugins."""
        return inside("kubectl", "liken", *args, check=check, timeout=120,
                      env={"PATH": self.plugin_path})


def ctr(*args: str, check: bool = True) -> Any:
    """containerd's own client on the cluster's containerd (images live there, nothing is
    pulled)."""
    spec = importlib.util.spec_from_file_location("liken_cluster_script", CLUSTER)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    binary = script.bin_dirs(info()["kubernetes"])["ctrd"] / "ctr"
    return inside(str(binary), f"--address={STATE / 'run' / 'containerd.sock'}",
                  "--namespace=k8s.io", *args, check=check)


def exists(*args: str) -> bool:
    return kubectl("get", *args, "--ignore-not-found", "-o", "name").stdout.strip() != ""


def installed_overlay() -> Path | None:
    """Which of the tier's overlays installed the running DaemonSet (None: not installed)."""
    if not exists("-n", "liken-system", "daemonset", "liken-devices"):
        return None
    ds = get("-n", "liken-system", "daemonset", "liken-devices")
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    name = "node-overlay" if "--sysfs=/liken-test/sys" in args else "overlay"
    return REPO / "tests" / "cluster" / name


def rollout() -> None:
    kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices", "--timeout=300s",
            timeout=320)


def write_overlays(walk: Walk) -> None:
    """The guide's overlay for a cluster without kube-proxy, as printed, naming this cluster's
    API server and reaching deploy/ from where it is written; on it, the node tier's machine
    (tests/cluster/node-overlay's patches); on that, the upgrade's new tag."""
    install = section("Install")
    text = after(install, "**A cluster without kube-proxy.**", "yaml")
    guide = walk.work / "guide"
    guide.mkdir()
    assert "../liken/deploy" in text and '"10.0.0.10"' in text and '"6443"' in text
    api = info()["apiServer"].removeprefix("https://")
    host, port = api.rsplit(":", 1)
    (guide / "kustomization.yaml").write_text(
        text.replace("../liken/deploy", os.path.relpath(REPO / "deploy", guide))
        .replace('"10.0.0.10"', f'"{host}"').replace('"6443"', f'"{port}"'))
    machine = yaml.safe_load((REPO / "tests" / "cluster" / "node-overlay" /
                              "kustomization.yaml").read_text())
    machine["resources"] = ["../guide"]
    walk.overlay = walk.work / "node"
    walk.overlay.mkdir()
    (walk.overlay / "kustomization.yaml").write_text(yaml.safe_dump(machine))
    # "set the new tag in `images:`": in an overlay the base's image is already named
    # localhost/liken-devices (the guide's kubelet-dir overlay names it so too).
    walk.upgrade = walk.work / "upgrade"
    walk.upgrade.mkdir()
    (walk.upgrade / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../node"],
        "images": [{"name": "localhost/liken-devices", "newTag": NEW_TAG}]}))


def guide_machine(node: str) -> dict[str, Any]:
    """The Machine the cookbook's CEC example declares, for this node (no such adapter here:
    the agent reports it not attached, SerioAttached=False, and loads nothing)."""
    text = after(section("Cookbook: claims"), "### A CEC bus and its remote", "yaml")
    doc: dict[str, Any] = yaml.safe_load(text.replace("name: NODE", f"name: {node}"))
    assert doc["kind"] == "Machine" and doc["spec"]["serio"]
    return doc


@pytest.fixture(scope="module")
def walk(k8s: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    node = k8s["node"]
    before = installed_overlay()
    crd_before = exists("crd", "machines.liken.sh")
    machine_before = crd_before and exists("machine", node)
    plugin_path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    w = Walk(node=node, work=tmp_path_factory.mktemp("guide"), plugin_path=plugin_path)
    write_overlays(w)
    if not (TREE / "sys" / "dev" / "char").is_dir():
        # Only where it is missing: an agent that mounts the tree (a hostPath) keeps the
        # directory it mounted, and a tree removed and built again under it is one it never
        # sees (its walks then fail: "no dev/char index").
        build_machine(TREE)
    ctr("images", "tag", "--force", IMAGE, f"localhost/liken-devices:{NEW_TAG}")
    try:
        yield w
    finally:
        restore(w, before, crd_before, machine_before)


def restore(w: Walk, before: Path | None, crd_before: bool, machine_before: bool) -> None:
    """The cluster as the walk found it: no pod or claim of the walk left (the serial card free
    for the node tier), deploy/ as it was."""
    if installed_overlay() is None and exists("crd", "machines.liken.sh"):
        # A pod whose claim is prepared unprepares through the driver: bring it back first.
        kubectl("apply", "-k", str(w.overlay), timeout=300)
        rollout()
    kubectl("delete", "-f", str(REPO / "docs" / "examples" / "zigbee-stick.yaml"),
            "--ignore-not-found", "--wait=false", check=False)
    for name in ("pci-0000-00-1e-0-user", "held-too"):
        kubectl("-n", "default", "delete", "pod", name, "--ignore-not-found",
                "--timeout=120s", timeout=130, check=False)
    kubectl("delete", "resourceclaimtemplate", "-n", "default", f"liken-{SERIAL}",
            "--ignore-not-found", check=False)
    kubectl("delete", "deviceclass", f"liken-{SERIAL}", "--ignore-not-found", check=False)
    wait_for("the walk's claims gone", lambda: not [
        c for c in get("-n", "default", "resourceclaims")["items"]
        if c["metadata"]["name"].startswith(("pci-0000-00-1e-0-user", "held-too", "zigbee2mqtt"))
    ] or None, timeout=120)
    if not machine_before and exists("crd", "machines.liken.sh"):
        kubectl("delete", "machine", w.node, "--ignore-not-found", check=False)
    if before is not None:
        kubectl("apply", "-k", str(before), timeout=300)
        rollout()
    elif crd_before:
        kubectl("delete", "-k", "deploy/", "-l", "app.kubernetes.io/component!=machine-crd",
                "--ignore-not-found", timeout=300, check=False)
    else:
        kubectl("delete", "-k", "deploy/", "--ignore-not-found", timeout=300, check=False)
    ctr("images", "rm", f"localhost/liken-devices:{NEW_TAG}", check=False)


def devices_pods() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get("-n", "liken-system", "pods", "-l", DEVICES_LABEL)["items"]
    return items


def pod_image(pod: dict[str, Any]) -> str:
    image: str = pod["spec"]["containers"][0]["image"]
    return image


def user_pod_log() -> str | None:
    pod = get("-n", "default", "pod", "pci-0000-00-1e-0-user")
    if pod["status"].get("phase") in ("Failed", "Succeeded"):
        raise AssertionError(f"the claim's pod ended: {pod['status']}")
    out = kubectl("-n", "default", "logs", "pci-0000-00-1e-0-user", check=False).stdout
    return out if "READY" in out else None


def claim_uid() -> str:
    pod = get("-n", "default", "pod", "pci-0000-00-1e-0-user")
    [status] = pod["status"]["resourceClaimStatuses"]
    uid: str = get("-n", "default", "resourceclaim", status["resourceClaimName"])["metadata"]["uid"]
    return uid


def cdi_specs() -> set[str]:
    return set(inside("ls", "/var/run/cdi").stdout.split())


# ---- the walk --------------------------------------------------------------------------------


def test_install(walk: Walk) -> None:
    install = section("Install")
    assert commands(blocks(install, "sh")[0]) == [["kubectl", "apply", "-k", "deploy/"]]
    # As printed, from the checkout. Nothing routes the `kubernetes` Service's IP on this
    # cluster (no kube-proxy), so the agents of this very install could not reach the API
    # server: the real server takes it as a dry run, and the guide's own overlay for such a
    # cluster (below) installs the same objects for real.
    # (The dry run after the install: a namespaced object's dry run needs its namespace.)
    real = kubectl("apply", "-k", str(walk.overlay), timeout=300).stdout
    dry = kubectl("apply", "-k", "deploy/", "--dry-run=server", timeout=120).stdout
    # "This creates the namespace liken-system, the Machine CRD, the liken-devices DaemonSet
    # with its RBAC and admission policy, and the media capabilities agent (its DaemonSet, its
    # claim template and the media-render DeviceClass)."
    for shown in ("namespace/liken-system",
                  "customresourcedefinition.apiextensions.k8s.io/machines.liken.sh",
                  "daemonset.apps/liken-devices", "clusterrole.rbac.authorization.k8s.io/"
                  "liken-devices", "validatingadmissionpolicy.admissionregistration.k8s.io/"
                  "liken-node-scoped-writes", "daemonset.apps/media-capabilities",
                  "resourceclaimtemplate.resource.k8s.io/media-render-all",
                  "deviceclass.resource.k8s.io/media-render"):
        assert shown in dry, dry
        assert shown in real, real
    rollout()
    [pod] = [p for p in devices_pods() if not p["metadata"].get("deletionTimestamp")]
    assert pod_image(pod) == IMAGE
    apply([guide_machine(walk.node)])


def test_every_node_published_its_slice(walk: Walk) -> None:
    check = commands(after(section("Install"), "Check that every node published its slice",
                           "sh"))
    assert check == [["kubectl", "get", "resourceslices", "--field-selector",
                      "spec.driver=liken.sh"],
                     ["kubectl", "-n", "liken-system", "logs", "ds/liken-devices"]]
    mine = f"{walk.node}-liken.sh"
    listed = wait_for("the node's slice listed", lambda: (
        out if mine in (out := kubectl(*check[0][1:]).stdout) else None), timeout=120)
    assert "liken.sh" in listed and walk.node in listed
    logs = kubectl(*check[1][1:]).stdout
    assert f"node {walk.node}, publishing to the API server" in logs, logs[-3000:]
    assert "the kubelet registered liken.sh" in logs, logs[-3000:]
    assert "walk failed" not in logs, logs[-3000:]
    # Prerequisites: on a kubelet of 1.33 or later the agent surges, and does not say that it
    # runs as a plain single instance.
    assert "older than 1.33" not in logs
    # Troubleshooting: "kubectl get resourceslice NODE-liken.sh -o yaml" shows the node's
    # devices; the disk that backs the root is never one of them.
    shown = yaml.safe_load(kubectl("get", "resourceslice", mine, "-o", "yaml").stdout)
    names = {d["name"] for d in shown["spec"]["devices"]}
    assert SERIAL in names and DISK not in names, names
    # The Machine the walk declared is the node's: the agent reports its status there.
    wait_for("the Machine's status", lambda: any(
        c["type"] == "FactsPublished" and c["status"] == "True"
        for c in get("machine", walk.node).get("status", {}).get("conditions", [])))


def test_cookbook_claim_for_a_device(walk: Walk) -> None:
    cookbook = section("Cookbook: claims")
    printed = commands(after(cookbook, "To claim one device you see there", "sh"))
    assert printed == [
        ["kubectl", "liken", "claim-for", "usb-1-3-1-0", "--node", "worker-3", ">",
         "stick.yaml"],
        ["kubectl", "apply", "-f", "stick.yaml"],
        ["kubectl", "liken", "fleet"]]
    # kubectl-liken is on PATH: this checkout's environment has it (`pip install
    # 'liken-devices[match]'` needs an index, which this machine does not reach).
    plugins = inside("kubectl", "plugin", "list", env={"PATH": walk.plugin_path},
                     check=False).stdout
    assert "kubectl-liken" in plugins, plugins
    argv = [walk.node if a == "worker-3" else SERIAL if a == "usb-1-3-1-0" else a
            for a in printed[0][2:printed[0].index(">")]]
    out = walk.liken(*argv, check=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == ["DeviceClass", "ResourceClaimTemplate", "Pod"]
    # The pod is a stub (docs/claims.md: "edit its image and command"): an image this cluster
    # holds, nothing pulled, a command that shows what it got.
    [pod] = [d for d in docs if d["kind"] == "Pod"]
    assert pod["metadata"]["name"] == "pci-0000-00-1e-0-user"
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    pod["spec"]["containers"][0].update(
        image=BBOX, imagePullPolicy="Never",
        command=["sh", "-c", "stat -c '%n %t:%T' /dev/tty5; echo READY; sleep 3600"])
    stick = walk.work / "stick.yaml"
    stick.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    kubectl("apply", "-f", str(stick))
    log = wait_for("the claim's pod running", user_pod_log, timeout=180)
    assert "/dev/tty5 4:5" in log, log
    allocation = get("-n", "default", "resourceclaim", get(
        "-n", "default", "pod", "pci-0000-00-1e-0-user")["status"]["resourceClaimStatuses"][0]
        ["resourceClaimName"])["status"]["allocation"]
    [result] = allocation["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == ("liken.sh", walk.node,
                                                                     SERIAL)
    walk.state["uid"] = claim_uid()
    # "every node's devices, who holds them, what is unclaimed"
    fleet = walk.liken(*printed[2][2:], check=True).stdout
    claim = get("-n", "default", "pod", "pci-0000-00-1e-0-user")["status"][
        "resourceClaimStatuses"][0]["resourceClaimName"]
    walk.state["claim"] = claim
    assert walk.node in fleet and SERIAL in fleet and claim in fleet, fleet


def test_a_cookbook_example_this_node_cannot_satisfy_is_explained(walk: Walk) -> None:
    """The Zigbee stick: no USB here. The troubleshooting section's "claim stays pending"."""
    cookbook = section("Cookbook: claims")
    [ask] = commands(after(cookbook, "### A Zigbee stick", "sh"))
    assert ask == ["kubectl", "liken", "match", "-f", "docs/examples/zigbee-stick.yaml"]
    # Before it is applied, against the cluster: its class is in the file (exit 0 when some
    # node can; 1 here).
    out = walk.liken(*ask[2:])
    assert out.returncode == 1, out.stdout + out.stderr
    kubectl("apply", "-f", "docs/examples/zigbee-stick.yaml")
    trouble = section("Troubleshooting")
    assert "kubectl get resourceclaims shows no allocation, the pod is Pending" in flat(trouble)

    def pending_claim() -> dict[str, Any] | None:
        claims = [c for c in get("-n", "default", "resourceclaims")["items"]
                  if c["metadata"]["name"].startswith("zigbee2mqtt-zigbee")]
        return claims[0] if claims else None
    claim = wait_for("the example's claim", pending_claim)
    listed = kubectl("-n", "default", "get", "resourceclaims").stdout
    [row] = [ln for ln in listed.splitlines() if ln.startswith(claim["metadata"]["name"])]
    assert "pending" in row and "allocated" not in row, listed
    assert get("-n", "default", "pod", "zigbee2mqtt")["status"]["phase"] == "Pending"
    # "`kubectl describe pod POD` shows the scheduler's reason: cannot allocate all claims"
    assert "kubectl describe pod POD shows the scheduler's reason" in flat(trouble)
    assert "*cannot allocate all claims*" in trouble
    wait_for("the scheduler's reason in describe", lambda: "cannot allocate all claims" in
             kubectl("-n", "default", "describe", "pod", "zigbee2mqtt").stdout, timeout=120)
    # `kubectl liken match -f pod.yaml -f template.yaml`: the pod's claims as the scheduler
    # evaluates them (the class from the cluster), each device that does not fit named with its
    # first failing selector and the values it read; exit 1.
    [printed] = [c for c in commands("\n".join(
        ln.strip("`") for ln in re.findall(r"`kubectl liken match [^`]*`", trouble)))]
    assert printed == ["kubectl", "liken", "match", "-f", "pod.yaml", "-f", "template.yaml"]
    docs = [d for d in yaml.safe_load_all(
        (REPO / "docs" / "examples" / "zigbee-stick.yaml").read_text()) if d]
    for kind, name in (("Pod", "pod.yaml"), ("ResourceClaimTemplate", "template.yaml")):
        (walk.work / name).write_text(yaml.safe_dump(next(d for d in docs if d["kind"] == kind)))
    out = walk.liken("match", "-f", str(walk.work / "pod.yaml"),
                     "-f", str(walk.work / "template.yaml"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert SERIAL in out.stdout and "bus" in out.stdout and '"pci"' in out.stdout, out.stdout
    kubectl("delete", "-f", "docs/examples/zigbee-stick.yaml", "--timeout=120s", timeout=130)


def test_a_held_device_is_explained(walk: Walk) -> None:
    """"The device exists but is held": a second pod of the same template, pending."""
    trouble = section("Troubleshooting")
    assert "The device exists but is held" in trouble
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "held-too",
                                                           "namespace": "default"},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "resourceClaims": [{"name": "device",
                                        "resourceClaimTemplateName": f"liken-{SERIAL}"}],
                    "containers": [{"name": "main", "image": BBOX, "imagePullPolicy": "Never",
                                    "command": ["sleep", "3600"],
                                    "resources": {"claims": [{"name": "device"}]}}]}}
    (walk.work / "held.yaml").write_text(json.dumps(pod))
    apply([pod])
    wait_for("the scheduler's reason", lambda: "cannot allocate all claims" in
             kubectl("-n", "default", "describe", "pod", "held-too").stdout, timeout=120)
    out = walk.liken("match", "-f", str(walk.work / "held.yaml"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "held" in out.stdout and SERIAL in out.stdout, out.stdout
    kubectl("-n", "default", "delete", "pod", "held-too", "--timeout=60s", timeout=70)


def test_the_node_says_what_it_holds_and_why_hardware_is_missing(walk: Walk) -> None:
    trouble = section("Troubleshooting")
    assert ("kubectl -n liken-system exec ds/liken-devices -- liken-devices claims lists the "
            "prepared claims and the nodes each delivers now") in flat(trouble)
    # "lists the prepared claims and the nodes each delivers now"
    claims = ["-n", "liken-system", "exec", "ds/liken-devices", "--", "liken-devices", "claims"]
    out = kubectl(*claims).stdout
    assert walk.state["uid"] in out and f"default/{walk.state['claim']}" in out, out
    # As printed it walks the node's own /sys, this VM's, where the tree's serial card is not
    # (its nodes show as absent); with the agent's own inputs, the node it delivers.
    out = kubectl(*claims, "--sysfs=/liken-test/sys", "--facts=/liken-test/facts").stdout
    assert walk.state["uid"] in out and re.search(r"/dev/tty5\(\w*4:5\)", out), out
    [explain] = commands(after(trouble, "**A device is missing from the slice.**", "sh"))
    assert explain == ["kubectl", "-n", "liken-system", "exec", "ds/liken-devices", "--",
                       "liken-devices", "explain"]
    # As printed it walks the node's own /sys: this VM's, whose hardware it lists (every piece
    # "with the devices it became or the reason it did not").
    host = kubectl(*explain[1:]).stdout
    assert re.search(r"published as |not published: ", host), host
    # This cluster's nodes have no init's facts (its /run/liken is a directory of its own), as
    # on any host that is not liken: no disk is offered, and explain says why.
    assert "facts unreadable" in host and "no disk is offered" in flat(host), host
    assert "facts unreadable (a disk on a node whose storage facts cannot be read" in \
        flat(trouble)
    # The agent of this walk reads the node tier's machine: the same command with the agent's
    # own inputs gives its reasons, and the guide's for a disk the machine uses.
    out = kubectl(*explain[1:], "--sysfs=/liken-test/sys", "--facts=/liken-test/facts").stdout
    assert f"published as {SERIAL}" in out, out
    assert re.search(r"pci 0000:00:17\.0 [^\n]*: not published: storage role", out), out
    assert "storage role (a disk the machine itself uses is never offered)" in flat(trouble)


def test_upgrade(walk: Walk) -> None:
    upgrade = section("Upgrade")
    assert commands(blocks(upgrade, "sh")[0]) == [
        ["kubectl", "apply", "-k", "deploy/"],
        ["kubectl", "-n", "liken-system", "rollout", "status", "ds/liken-devices"]]
    [old] = devices_pods()
    # "set the new tag in `images:`, and apply again": the overlay this cluster installs with.
    kubectl("apply", "-k", str(walk.upgrade), timeout=300)

    def surge() -> list[dict[str, Any]] | None:
        pods = devices_pods()
        return pods if any(pod_image(p).endswith(f":{NEW_TAG}") for p in pods) else None
    pods = wait_for("the new pod", surge, every=0.3)
    # "new pod first: the new pod starts beside the old one, which is stopped only once the
    # new one is ready"
    [still] = [p for p in pods if p["metadata"]["uid"] == old["metadata"]["uid"]]
    assert not still["metadata"].get("deletionTimestamp"), "the old pod went first"
    kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices", "--timeout=300s",
            timeout=320)
    wait_for("the old pod gone", lambda: all(
        p["metadata"]["uid"] != old["metadata"]["uid"] for p in devices_pods()), timeout=60)
    [new] = devices_pods()
    assert pod_image(new) == f"localhost/liken-devices:{NEW_TAG}"
    # "its /readyz says why": ready now, so it says it is.
    probe = re.search(r"`(kubectl -n liken-system\s+exec POD -- liken-devices probe [^`]*)`",
                      upgrade)
    assert probe is not None
    argv = [new["metadata"]["name"] if a == "POD" else a for a in shlex.split(probe.group(1))]
    assert kubectl(*argv[1:]).returncode == 0
    # "running containers keep their devices while the plugin restarts"
    assert get("-n", "default", "pod", "pci-0000-00-1e-0-user")["status"]["phase"] == "Running"
    inside_pod = kubectl("-n", "default", "exec", "pci-0000-00-1e-0-user", "--", "stat", "-c",
                         "%n %t:%T", "/dev/tty5").stdout
    assert "/dev/tty5 4:5" in inside_pod
    assert f"liken.sh-{walk.state['uid']}.json" in cdi_specs()
    assert exists("resourceslice", f"{walk.node}-liken.sh")


def test_uninstall_keeping_the_machines(walk: Walk) -> None:
    uninstall = section("Uninstall")
    printed = [commands(b) for b in blocks(uninstall, "sh")]
    assert printed == [[["kubectl", "delete", "-k", "deploy/"]],
                       [["kubectl", "delete", "-k", "deploy/", "-l",
                         "app.kubernetes.io/component!=machine-crd"]]]
    # The first deletes the CRD too (and with it every Machine); the second keeps it, and
    # only it. (Dry runs: the real server says what each would delete.)
    everything = kubectl(*printed[0][0][1:], "--dry-run=server").stdout
    keeping = kubectl(*printed[1][0][1:], "--dry-run=server").stdout
    crd = 'customresourcedefinition.apiextensions.k8s.io "machines.liken.sh" deleted'
    assert crd in everything and crd not in keeping, keeping
    assert set(everything.splitlines()) - set(keeping.splitlines()) == {
        f"{crd} (server dry run)"}, (everything, keeping)
    kept = get("machine", walk.node)
    kubectl(*printed[1][0][1:], timeout=300)
    # The Machines stay, spec and all, with their CRD...
    assert exists("crd", "machines.liken.sh")
    assert get("machine", walk.node)["spec"] == kept["spec"]
    # ...and the rest of the install is gone.
    for gone in (("namespace", "liken-system"), ("clusterrole", "liken-devices"),
                 ("clusterrole", "media-capabilities"),
                 ("clusterrolebinding", "liken-devices"),
                 ("validatingadmissionpolicy", "liken-node-scoped-writes"),
                 ("validatingadmissionpolicybinding", "liken-node-scoped-writes"),
                 ("deviceclass", "media-render")):
        assert not exists(*gone), gone
    # "Devices already prepared on a node stay in their containers until those pods end"
    assert get("-n", "default", "pod", "pci-0000-00-1e-0-user")["status"]["phase"] == "Running"
    assert "/dev/tty5 4:5" in kubectl("-n", "default", "exec", "pci-0000-00-1e-0-user", "--",
                                      "stat", "-c", "%n %t:%T", "/dev/tty5").stdout
    # "ResourceSlices of a node whose driver is gone are removed by the kubelet"
    wait_for("the kubelet removing the gone driver's slice",
             lambda: not exists("resourceslice", f"{walk.node}-liken.sh"), timeout=120)


def test_install_again_finds_the_machines(walk: Walk) -> None:
    """"To keep the Machines (to reinstall later ...)": installed again, the agent reads the
    Machine that stayed, and the pod that held a device through it all ends cleanly."""
    # What the last agent reported goes, so that the status seen next is the new agent's.
    kubectl("patch", "machine", walk.node, "--subresource=status", "--type=merge", "-p",
            json.dumps({"status": None}))
    assert not get("machine", walk.node).get("status")
    kubectl("apply", "-k", str(walk.overlay), timeout=300)
    rollout()
    wait_for("the slice again", lambda: exists("resourceslice", f"{walk.node}-liken.sh"))
    machine = get("machine", walk.node)
    assert machine["spec"] == guide_machine(walk.node)["spec"]
    wait_for("the Machine's status from the new agent", lambda: any(
        c["type"] == "FactsPublished" and c["status"] == "True"
        for c in get("machine", walk.node).get("status", {}).get("conditions", [])))
    uid = walk.state["uid"]
    kubectl("-n", "default", "delete", "pod", "pci-0000-00-1e-0-user", "--timeout=120s",
            timeout=130)
    wait_for("unprepare: the claim's CDI spec removed",
             lambda: f"liken.sh-{uid}.json" not in cdi_specs(), timeout=90)


def test_every_guide_command_of_the_walk_is_one_the_guide_prints() -> None:
    """The walk above asserts each block's commands as printed; this catches a block the guide
    gains that the walk would not know of."""
    for title, count in (("Install", 2), ("Upgrade", 1), ("Uninstall", 2),
                         ("Troubleshooting", 1)):
        assert len(blocks(section(title), "sh")) == count, title
