"""docs/guide.md's "Helm", walked on the real cluster: install by the chart with the guide's
values file, upgrade with a changed value (a new tag, the media agent off), uninstall, and the
Machine CRD and the node's Machine kept through it all, spec unchanged.

The commands are the guide's, run as printed; the values file is the guide's, naming this
cluster's images and, as this cluster has no kube-proxy, its API server's address. At the end
the cluster is as the walk found it: a kustomize install that was there is applied again (the
walk removes it first, keeping the CRD: the two do not mix), a Machine or CRD that was not there
is removed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.support import helm

from .support import REPO, apply, get, info, inside, kubectl, wait_for
from .test_guide import (
    after,
    blocks,
    commands,
    ctr,
    exists,
    guide_machine,
    installed_overlay,
    section,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
NEW_TAG = f"{VERSION}-helm-walk"  # the upgrade's "new image": the same bits, a new name
DEVICES = "app.kubernetes.io/name=liken-devices"
MEDIA = "app.kubernetes.io/name=media-capabilities"


@dataclass
class Walk:
    node: str
    work: Path
    helm: str
    home: dict[str, str]

    def run(self, argv: list[str], timeout: float = 300) -> str:
        """A command the guide prints, from the checkout, `helm` being the pinned build and
        `site.yaml` the walk's values file."""
        argv = [self.helm if a == "helm" else str(self.work / a) if a == "site.yaml" else a
                for a in argv]
        return inside(*argv, timeout=timeout, env=self.home).stdout


def helm_section() -> str:
    return section("Helm")


def site_values(walk: Walk, **change: Any) -> None:
    """The guide's values file for this cluster: the images as `./tasks image` names them, the
    API server's own address (no kube-proxy here), and ``change`` on top."""
    values: dict[str, Any] = yaml.safe_load(after(helm_section(), "here, given to every", "yaml"))
    assert values["devices"]["image"]["repository"] == \
        "registry.example.org/liken/liken-devices" and values["apiServer"] == {"host": ""}
    values["devices"]["image"] = {"repository": "localhost/liken-devices", "tag": VERSION}
    values["media"]["image"] = {"repository": "localhost/liken-media", "tag": VERSION}
    host, port = info()["apiServer"].removeprefix("https://").rsplit(":", 1)
    values["apiServer"] = {"host": host, "port": int(port)}
    for path, value in change.items():
        *parents, leaf = path.split("__")
        at = values
        for p in parents:
            at = at.setdefault(p, {})
        at[leaf] = value
    (walk.work / "site.yaml").write_text(yaml.safe_dump(values))


def pods(label: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get("-n", "liken-system", "pods", "-l", label)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(scope="module")
def walk(k8s: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    exe = helm()
    assert exe is not None, "helm is not built: scripts/cluster/build.sh builds it"
    work = tmp_path_factory.mktemp("helm")
    home = {f"HELM_{n}_HOME": str(work / "helm-home" / n.lower())
            for n in ("CACHE", "CONFIG", "DATA")}
    w = Walk(node=k8s["node"], work=work, helm=exe, home=home)
    before = installed_overlay()
    crd_before = exists("crd", "machines.liken.sh")
    machine_before = crd_before and exists("machine", w.node)
    if before is not None:
        kubectl("delete", "-k", str(before), "-l", "app.kubernetes.io/component!=machine-crd",
                "--ignore-not-found", "--wait=true", timeout=300)
    ctr("images", "tag", "--force", f"localhost/liken-devices:{VERSION}",
        f"localhost/liken-devices:{NEW_TAG}")
    try:
        yield w
    finally:
        if inside(w.helm, "status", "liken", "--namespace", "default", check=False,
                  env=home).returncode == 0:
            inside(w.helm, "uninstall", "liken", "--namespace", "default", "--wait",
                   check=False, timeout=300, env=home)
        wait_for("liken-system gone", lambda: not exists("namespace", "liken-system"),
                 timeout=180)
        if not machine_before:
            kubectl("delete", "machine", w.node, "--ignore-not-found", check=False)
        if before is not None:
            kubectl("apply", "-k", str(before), timeout=300)
            kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices",
                    "--timeout=300s", timeout=320)
        elif not crd_before:
            kubectl("delete", "crd", "machines.liken.sh", "--ignore-not-found", check=False)
        ctr("images", "rm", f"localhost/liken-devices:{NEW_TAG}", check=False)


def test_install(walk: Walk) -> None:
    [install, _, _] = [commands(b) for b in blocks(helm_section(), "sh")]
    assert install == [
        ["helm", "install", "liken", "deploy/helm/liken-devices", "--namespace", "default",
         "-f", "site.yaml"],
        ["kubectl", "-n", "liken-system", "rollout", "status", "ds/liken-devices"]]
    site_values(walk)
    walk.run(install[0])
    walk.run([*install[1], "--timeout=300s"], timeout=320)
    [pod] = pods(DEVICES)
    assert pod["spec"]["containers"][0]["image"] == f"localhost/liken-devices:{VERSION}"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    # The agent reached the API server at that address: the node's slice.
    wait_for("the node's slice", lambda: exists("resourceslice", f"{walk.node}-liken.sh"))
    # The chart made the CRD (crds/) and the media agent, and the namespace with its label.
    assert exists("crd", "machines.liken.sh")
    assert exists("-n", "liken-system", "daemonset", "media-capabilities")
    assert get("namespace", "liken-system")["metadata"]["labels"][
        "resource.kubernetes.io/admin-access"] == "true"
    listed = walk.run(["helm", "list", "--namespace", "default"])
    assert "liken" in listed and "deployed" in listed, listed
    # The node's Machine: the agent reports on it (this VM has no init's facts, so the
    # condition it sets is FactsPublished=False, FactsUnreadable).
    apply([guide_machine(walk.node)])
    wait_for("the Machine's status", lambda: any(
        c["type"] == "FactsPublished"
        for c in get("machine", walk.node).get("status", {}).get("conditions", [])))


def test_upgrade_with_a_changed_value(walk: Walk) -> None:
    [_, upgrade, _] = [commands(b) for b in blocks(helm_section(), "sh")]
    assert upgrade == [
        ["kubectl", "apply", "-f", "deploy/liken-devices/machine-crd.yaml"],
        ["helm", "upgrade", "liken", "deploy/helm/liken-devices", "--namespace", "default",
         "-f", "site.yaml"],
        ["kubectl", "-n", "liken-system", "rollout", "status", "ds/liken-devices"]]
    [old] = pods(DEVICES)
    kept = get("machine", walk.node)["spec"]
    # "apply the new CRD first": the CRD Helm created takes kubectl's apply.
    walk.run(upgrade[0])
    site_values(walk, devices__image__tag=NEW_TAG, media__enabled=False)
    walk.run(upgrade[1])
    walk.run([*upgrade[2], "--timeout=300s"], timeout=320)
    wait_for("the old pod gone", lambda: all(
        p["metadata"]["uid"] != old["metadata"]["uid"] for p in pods(DEVICES)), timeout=90)
    [new] = pods(DEVICES)
    assert new["spec"]["containers"][0]["image"] == f"localhost/liken-devices:{NEW_TAG}"
    # "A value turned off removes its objects in the same upgrade."
    for gone in (("-n", "liken-system", "daemonset", "media-capabilities"),
                 ("deviceclass", "media-render"), ("clusterrole", "media-capabilities"),
                 ("-n", "liken-system", "resourceclaimtemplate", "media-render-all")):
        assert not exists(*gone), gone
    wait_for("the media agent's pod gone", lambda: not pods(MEDIA), timeout=90)
    assert get("machine", walk.node)["spec"] == kept
    wait_for("the node's slice", lambda: exists("resourceslice", f"{walk.node}-liken.sh"))
    history = walk.run(["helm", "history", "liken", "--namespace", "default"])
    assert "Upgrade complete" in history, history


def test_uninstall_keeps_the_crd_and_the_machines(walk: Walk) -> None:
    [_, _, uninstall] = [commands(b) for b in blocks(helm_section(), "sh")]
    assert uninstall == [["helm", "uninstall", "liken", "--namespace", "default"]]
    kept = get("machine", walk.node)
    walk.run(uninstall[0])
    # "deletes everything the release installed but the machines.liken.sh CRD"
    assert exists("crd", "machines.liken.sh")
    machine = get("machine", walk.node)
    assert machine["spec"] == kept["spec"]
    assert machine["metadata"]["uid"] == kept["metadata"]["uid"]
    wait_for("liken-system gone", lambda: not exists("namespace", "liken-system"), timeout=180)
    for gone in (("clusterrole", "liken-devices"), ("clusterrolebinding", "liken-devices"),
                 ("validatingadmissionpolicy", "liken-node-scoped-writes"),
                 ("validatingadmissionpolicybinding", "liken-node-scoped-writes")):
        assert not exists(*gone), gone
    listed = walk.run(["helm", "list", "--namespace", "default"])
    assert "liken" not in listed.split(), listed
    gone = inside(walk.helm, "status", "liken", "--namespace", "default", check=False,
                  env=walk.home)
    assert gone.returncode != 0 and "not found" in gone.stderr, gone.stderr
    # The kubelet removes the slice of a driver that is gone.
    wait_for("the gone driver's slice removed",
             lambda: not exists("resourceslice", f"{walk.node}-liken.sh"), timeout=120)
