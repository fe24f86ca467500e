"""deploy/ as `kubectl apply -k deploy/` sends it: valid in every supported Kubernetes minor, the
images named once through kustomize `images:`, the kubelet's root directory set in one place,
and every hostPath accepted by the kubelet on a node without USB whose /usr is read-only."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from .support import DEPLOY, MINORS, REPO, by_kind, kubectl, rendered

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl (kustomize) not installed")

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def daemonset(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for d in by_kind(docs, "DaemonSet") if d["metadata"]["name"] == name)


def test_every_object_is_valid_in_every_minor() -> None:
    docs = rendered()
    for doc in docs:
        for minor in MINORS:
            kubernetes_validate.validate(doc, minor, strict=True)
    assert {d["kind"] for d in docs} >= {"DaemonSet", "ConfigMap", "ValidatingAdmissionPolicy",
                                         "CustomResourceDefinition", "DeviceClass"}


def test_images_are_named_once_by_kustomize() -> None:
    docs = rendered()
    for program, ds in (("liken-devices", "liken-devices"),
                        ("liken-media", "media-capabilities")):
        [container] = daemonset(docs, ds)["spec"]["template"]["spec"]["containers"]
        assert container["image"] == f"localhost/{program}:{VERSION}"


def overlay(tmp_path: Path, body: str) -> Path:
    """An operator's overlay on a copy of deploy/ (kustomize loads only below a root)."""
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "kustomization.yaml").write_text(body)
    return tmp_path / "site"


def kubelet_paths(ds: dict[str, Any]) -> list[str]:
    pod = ds["spec"]["template"]["spec"]
    [container] = pod["containers"]
    paths = [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v]
    paths += [m["mountPath"] for m in container["volumeMounts"]]
    return [p for p in paths if "kubelet" in p]


def test_kubelet_root_dir_and_registry_are_set_once_in_an_overlay(tmp_path: Path) -> None:
    base = daemonset(rendered(), "liken-devices")
    assert sorted(kubelet_paths(base)) == sorted(
        ["/var/lib/kubelet/plugins/liken.sh", "/var/lib/kubelet/plugins_registry"] * 2)
    site = overlay(tmp_path, """
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../deploy]
components: [../deploy/liken-devices/kubelet-dir]
configMapGenerator:
  - name: liken-devices-kubelet
    namespace: liken-system
    behavior: merge
    literals: [kubeletDir=/var/lib/k0s/kubelet]
images:
  - name: localhost/liken-devices
    newName: registry.example.org/liken/liken-devices
""")
    docs = rendered(site)
    ds = daemonset(docs, "liken-devices")
    assert sorted(kubelet_paths(ds)) == sorted(
        ["/var/lib/k0s/kubelet/plugins/liken.sh", "/var/lib/k0s/kubelet/plugins_registry"] * 2)
    [cm] = [c for c in by_kind(docs, "ConfigMap")
            if c["metadata"]["name"] == "liken-devices-kubelet"]
    assert cm["data"] == {"kubeletDir": "/var/lib/k0s/kubelet"}  # what $(KUBELET_DIR) reads
    [container] = ds["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.example.org/liken/liken-devices:{VERSION}"
    assert "--plugin-dir=$(KUBELET_DIR)/plugins/liken.sh" in container["args"]


def test_uninstall_selector_keeps_only_the_crd() -> None:
    """docs/guide.md's uninstall that keeps every Machine deletes all but the CRD."""
    docs = rendered()
    kept = [d for d in docs if d["metadata"].get("labels", {})
            .get("app.kubernetes.io/component") == "machine-crd"]
    assert [d["kind"] for d in kept] == ["CustomResourceDefinition"]


# ---- the kubelet's hostPath rules on a node without USB --------------------------------------


def kubelet_host_path(root: Path, path: str, kind: str) -> None:
    """What the kubelet does with a hostPath volume before the container starts (the hostPath
    volume's `type` field): check that the path is of the kind, or create it."""
    p = root / path.lstrip("/")
    if kind == "":
        return  # no check
    if kind == "DirectoryOrCreate":
        if not p.exists():
            p.mkdir(mode=0o755, parents=True)  # raises where the file system is read-only
        kind = "Directory"
    if kind == "FileOrCreate":
        if not p.exists():
            p.touch(mode=0o644)
        kind = "File"
    try:
        mode = p.stat().st_mode  # follows symlinks, as the kubelet's check does
    except FileNotFoundError as exc:
        raise AssertionError(f"hostPath type check failed: {path} is not a {kind}") from exc
    want = {"Directory": stat.S_ISDIR, "File": stat.S_ISREG, "Socket": stat.S_ISSOCK,
            "CharDevice": stat.S_ISCHR, "BlockDevice": stat.S_ISBLK}[kind]
    assert want(mode), f"hostPath type check failed: {path} is not a {kind}"


@contextlib.contextmanager
def usb_less_node(root: Path) -> Iterator[Path]:
    """A node's root: this machine's sysfs (a VM with no USB bus), /dev and /usr bound read-only,
    the directories a running kubelet has made, and nothing else."""
    mounts = []
    try:
        for name in ("sys", "dev", "usr"):
            (root / name).mkdir(parents=True)
            subprocess.run(["mount", "--rbind", f"/{name}", str(root / name)], check=True)
            mounts.append(root / name)
            subprocess.run(["mount", "-o", "remount,bind,ro", str(root / name)], check=True)
        (root / "var/lib/kubelet/plugins_registry").mkdir(parents=True)
        (root / "run").mkdir()
        yield root
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-R", "-l", str(m)], check=False)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
@pytest.mark.skipif(Path("/sys/bus/usb").exists(), reason="this machine has a USB bus")
def test_hostpaths_hold_on_a_node_without_usb(tmp_path: Path) -> None:
    docs = rendered()
    with usb_less_node(tmp_path / "node") as root:
        assert not (root / "sys/bus/usb").exists() and (root / "sys/bus").is_dir()
        with pytest.raises(OSError):  # the node's /usr is read-only
            (root / "usr/share/hwdata-test").mkdir()
        checked = []
        for ds in by_kind(docs, "DaemonSet"):
            for volume in ds["spec"]["template"]["spec"].get("volumes", []):
                if "hostPath" in volume:
                    hp = volume["hostPath"]
                    kubelet_host_path(root, hp["path"], hp.get("type", ""))
                    checked.append(hp["path"])
        assert "/sys/bus" in checked and "/usr" in checked
        # The old manifest's drivers_probe file would have stopped the pod here.
        with pytest.raises(AssertionError, match="not a File"):
            kubelet_host_path(root, "/sys/bus/usb/drivers_probe", "File")
