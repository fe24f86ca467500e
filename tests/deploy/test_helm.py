"""deploy/helm/liken-devices, the Helm chart: with its default values `helm template` renders
exactly the objects `kubectl kustomize deploy/` renders, field for field; each value changes what
it says and nothing else; `helm lint` finds nothing.

One source: the chart holds no copy of a manifest. Its files/ and crds/ are links into deploy/,
whose files the templates read and change only where a value says so; what kustomize adds beside
the files (the images' names, the kubelet ConfigMap, the kubelet-dir replacement) the chart adds
from its values, whose defaults this comparison holds to deploy/. So a manifest changed in
deploy/ changes both (nothing to keep in step), and a change on one side only (deploy/'s
kustomizations, or the chart's templates or values) fails the comparison
(test_a_change_on_one_side_only_fails_the_comparison proves it on a copy).

helm and kubectl are the cache's (scripts/cluster/build.sh, which `./tasks test` runs first);
where they are not built the module skips saying so, and in CI (CI set) it fails instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from .support import DEPLOY, MINORS, REPO, by_kind, helm, kubectl, rendered, versions

CHART = DEPLOY / "helm" / "liken-devices"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
Key = tuple[str, str, str, str]


@pytest.fixture(autouse=True, scope="module")
def tools() -> None:
    missing = [name for name, exe in (("helm", helm()), ("kubectl", kubectl())) if exe is None]
    if missing:
        why = (f"{' and '.join(missing)} not built (scripts/cluster/build.sh builds helm "
               f"{versions()['HELM_VERSION']} and kubectl into the cache; `./tasks test` runs it)")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(autouse=True)
def helm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Helm's cache, configuration and data in the test's own directory, not the user's."""
    for name in ("CACHE", "CONFIG", "DATA"):
        monkeypatch.setenv(f"HELM_{name}_HOME", str(tmp_path / "helm-home" / name.lower()))


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    exe = helm()
    assert exe is not None
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def template(chart: Path = CHART, *args: str) -> list[dict[str, Any]]:
    """What `helm install` would create: the templates and the CRDs of crds/."""
    out = run_helm("template", "liken", str(chart), "--include-crds", *args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def key(doc: dict[str, Any]) -> Key:
    meta = doc["metadata"]
    return (doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"])


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {a.get(k, '<absent>')!r} != {b.get(k, '<absent>')!r}")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def differences(kustomized: list[dict[str, Any]], charted: list[dict[str, Any]]) -> list[str]:
    """Every object one side has and the other lacks, and every field that differs, by path
    (`kind/namespace/name.spec...`). Empty: the same objects, field for field."""
    left = {key(d): d for d in kustomized}
    right = {key(d): d for d in charted}
    assert len(left) == len(kustomized) and len(right) == len(charted), "an object twice"
    out: list[str] = []
    for k in sorted(set(left) | set(right)):
        name = "/".join(k[1:])
        if k not in right:
            out.append(f"{name}: only in kustomize")
        elif k not in left:
            out.append(f"{name}: only in the chart")
        else:
            _diff(left[k], right[k], name, out)
    return out


def daemonset(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for d in by_kind(docs, "DaemonSet") if d["metadata"]["name"] == name)


# ---- the default values: deploy/, field for field ------------------------------------------


def test_default_values_render_the_kustomize_base() -> None:
    kustomized = rendered()
    charted = template()
    assert differences(kustomized, charted) == []
    # Not two empty renders: everything `kubectl apply -k deploy/` installs.
    kinds = sorted(d["kind"] for d in charted)
    assert kinds.count("DaemonSet") == 2 and len(charted) == len(kustomized) >= 15, kinds
    assert {"CustomResourceDefinition", "ConfigMap", "Namespace", "ValidatingAdmissionPolicy",
            "ResourceClaimTemplate", "DeviceClass"} <= set(kinds)


def test_the_release_namespace_does_not_move_the_objects() -> None:
    """Every object names liken-system (the admission policy's service accounts live there),
    so the namespace Helm keeps its release in changes nothing."""
    assert differences(template(), template(CHART, "--namespace", "kube-system")) == []


def test_the_chart_follows_the_project_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["appVersion"] == VERSION
    assert values["devices"]["image"]["tag"] == values["media"]["image"]["tag"] == VERSION


def test_the_crd_is_in_crds_so_helm_never_deletes_it() -> None:
    """Helm installs crds/ before the templates and never upgrades or deletes it: `helm
    uninstall` keeps the Machines (docs/guide.md, "Helm")."""
    out = run_helm("template", "liken", str(CHART))  # without --include-crds: templates only
    assert out.returncode == 0, out.stderr
    templated = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert "CustomResourceDefinition" not in {d["kind"] for d in templated}
    crds = [d for p in sorted((CHART / "crds").iterdir())
            for d in yaml.safe_load_all(p.read_text()) if d]
    assert [key(d) for d in crds] == [key(d) for d in by_kind(rendered(),
                                                               "CustomResourceDefinition")]


def test_helm_lint_is_clean() -> None:
    out = run_helm("lint", "--strict", str(CHART))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout, out.stdout


# ---- one side only: the comparison sees it --------------------------------------------------


@pytest.fixture
def copy(tmp_path: Path) -> Iterator[Path]:
    """deploy/ copied with its links, so the copy's chart reads the copy's manifests."""
    shutil.copytree(DEPLOY, tmp_path / "deploy", symlinks=True)
    assert (tmp_path / "deploy" / "helm" / "liken-devices" / "files" / "media").is_symlink()
    yield tmp_path / "deploy"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


ONE_SIDE = {
    # kustomize's side: the images' tag in deploy/kustomization.yaml only.
    "kustomization-image": ("kustomization.yaml", "newTag: 0.1.0\n  - name: liken-media",
                            "newTag: 0.1.1\n  - name: liken-media",
                            ("DaemonSet/liken-system/liken-devices.spec.template.spec"
                             ".containers[0].image",)),
    # kustomize's side: the kubelet directory's default in the generator only (the
    # kubelet-dir component then moves the DaemonSet's paths with it).
    "kustomization-kubelet-dir": ("liken-devices/kustomization.yaml",
                                  "kubeletDir=/var/lib/kubelet", "kubeletDir=/var/lib/kubelet2",
                                  ("ConfigMap/liken-system/liken-devices-kubelet.data.kubeletDir",
                                   "DaemonSet/liken-system/liken-devices.spec.template.spec.")),
    # the chart's side: a default value only.
    "values-resources": ("helm/liken-devices/values.yaml", "memory: 512Mi", "memory: 640Mi",
                         ("DaemonSet/liken-system/media-capabilities.spec.template.spec"
                          ".containers[0].resources.limits.memory",)),
    # the chart's side: a template only (it forgets the media agent's claim).
    "template": ("helm/liken-devices/templates/_helpers.tpl",
                 '{{- $_ := set $res "claims" . -}}', "",
                 ("DaemonSet/liken-system/media-capabilities.spec.template.spec"
                  ".containers[0].resources.claims",)),
}


@pytest.mark.parametrize("case", sorted(ONE_SIDE))
def test_a_change_on_one_side_only_fails_the_comparison(copy: Path, case: str) -> None:
    assert differences(rendered(copy), template(copy / "helm" / "liken-devices")) == []
    path, old, new, where = ONE_SIDE[case]
    edit(copy / path, old, new)
    found = differences(rendered(copy), template(copy / "helm" / "liken-devices"))
    assert found and all(f.startswith(where) for f in found), found


def test_a_manifest_changed_in_deploy_changes_both_sides(copy: Path) -> None:
    """The one source: the chart reads deploy/'s files, so an edit there is no drift."""
    edit(copy / "liken-devices" / "daemonset.yaml", "terminationGracePeriodSeconds: 10",
         "terminationGracePeriodSeconds: 11")
    charted = template(copy / "helm" / "liken-devices")
    assert differences(rendered(copy), charted) == []
    spec = daemonset(charted, "liken-devices")["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 11


def test_a_chart_without_its_links_fails_to_render(copy: Path) -> None:
    """Never an empty install: the manifests unreachable (a copy that lost the links) is an
    error that names the file."""
    (copy / "helm" / "liken-devices" / "files" / "media").unlink()
    out = run_helm("template", "liken", str(copy / "helm" / "liken-devices"))
    assert out.returncode != 0
    assert "files/media/kustomization.yaml lists no resources" in out.stderr, out.stderr
    # Without the media agent the media files are not read at all.
    assert run_helm("template", "liken", str(copy / "helm" / "liken-devices"),
                    "--set", "media.enabled=false").returncode == 0


@pytest.mark.parametrize(("line", "said"), [
    ("patches: []\n", "the chart does not render its patches"),
    ("components: [kubelet-dir, other]\n", "the chart does not render the component other"),
])
def test_a_kustomization_field_the_chart_does_not_render_fails_it(copy: Path, line: str,
                                                                   said: str) -> None:
    """A patch (or another component) added to deploy/ is an error of the chart's render, not an
    object the chart silently leaves as it was."""
    path = copy / "media" / "kustomization.yaml"
    path.write_text(path.read_text() + line)
    out = run_helm("template", "liken", str(copy / "helm" / "liken-devices"))
    assert out.returncode != 0 and said in out.stderr, out.stderr


# ---- the values: each changes what it says, and only that ------------------------------------


def test_kubelet_dir_equals_the_guides_overlay(tmp_path: Path) -> None:
    """kubeletDir does what the guide's kustomize overlay does (the generator merged and the
    kubelet-dir component listed again)."""
    shutil.copytree(DEPLOY, tmp_path / "deploy", symlinks=True)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "kustomization.yaml").write_text("""
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../deploy]
components: [../deploy/liken-devices/kubelet-dir]
configMapGenerator:
  - name: liken-devices-kubelet
    namespace: liken-system
    behavior: merge
    literals: [kubeletDir=/var/lib/k0s/kubelet]
""")
    charted = template(CHART, "--set", "kubeletDir=/var/lib/k0s/kubelet/")
    assert differences(rendered(tmp_path / "site"), charted) == []
    pod = daemonset(charted, "liken-devices")["spec"]["template"]["spec"]
    plugin_paths = {v["hostPath"]["path"] for v in pod["volumes"]
                    if "plugins" in v.get("hostPath", {}).get("path", "")}
    assert plugin_paths == {"/var/lib/k0s/kubelet/plugins/liken.sh",
                            "/var/lib/k0s/kubelet/plugins_registry"}


@pytest.mark.parametrize(("args", "said"), [
    (["--set", "device.image.tag=0.2.0"], "additional properties 'device' not allowed"),
    (["--set", "media.enabled=maybe"], "/media/enabled': got string, want boolean"),
    (["--set", "devices.resources.request.cpu=1"], "additional properties 'request'"),
    (["--set-json", "devices.nodeSelector={\"a\":1}"], "got number, want string"),
])
def test_a_misspelled_or_mistyped_value_is_refused(args: list[str], said: str) -> None:
    """values.schema.json: a value the chart does not know is an error, not silently ignored
    (a misspelled key would otherwise install the defaults)."""
    out = run_helm("template", "liken", str(CHART), *args)
    assert out.returncode != 0 and said in out.stderr, out.stderr


def test_a_relative_kubelet_dir_is_refused() -> None:
    out = run_helm("template", "liken", str(CHART), "--set", "kubeletDir=var/lib/kubelet")
    assert out.returncode != 0, out.stdout
    assert "'/kubeletDir': 'var/lib/kubelet' does not match pattern '^/'" in out.stderr, \
        out.stderr
    # The template says so too, where a schema is not read (`helm template --skip-schema-
    # validation`).
    out = run_helm("template", "liken", str(CHART), "--skip-schema-validation", "--set",
                   "kubeletDir=var/lib/kubelet")
    assert out.returncode != 0 and "an absolute path is needed" in out.stderr, out.stderr


def test_api_server_equals_the_overlay_for_a_cluster_without_kube_proxy() -> None:
    """apiServer.host does what tests/cluster/overlay (the guide's "A cluster without
    kube-proxy") does: both agents get KUBERNETES_SERVICE_HOST and _PORT."""
    overlay = REPO / "tests" / "cluster" / "overlay"
    text = (overlay / "kustomization.yaml").read_text()
    assert 'value: "10.233.0.2"' in text and 'value: "6443"' in text
    charted = template(CHART, "--set", "apiServer.host=10.233.0.2")
    assert differences(rendered(overlay), charted) == []
    for name in ("liken-devices", "media-capabilities"):
        env = daemonset(charted, name)["spec"]["template"]["spec"]["containers"][0]["env"]
        assert env[-2:] == [{"name": "KUBERNETES_SERVICE_HOST", "value": "10.233.0.2"},
                            {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]


def test_without_seamless_upgrades_the_pod_is_replaced_in_place() -> None:
    """seamlessUpgrade=false: what the guide's prerequisites say for kubelets older than 1.33
    (maxSurge 0, maxUnavailable 1), and the agent a plain single instance."""
    base = daemonset(rendered(), "liken-devices")
    charted = template(CHART, "--set", "seamlessUpgrade=false")
    ds = daemonset(charted, "liken-devices")
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {
        "maxSurge": 0, "maxUnavailable": 1}}
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--seamless-upgrade" not in args
    assert args == [a for a in base["spec"]["template"]["spec"]["containers"][0]["args"]
                    if a != "--seamless-upgrade"]
    found = differences(rendered(), charted)
    assert found and all(f.startswith(("DaemonSet/liken-system/liken-devices.spec."
                                       "updateStrategy.rollingUpdate.max",
                                       "DaemonSet/liken-system/liken-devices.spec.template."
                                       "spec.containers[0].args")) for f in found), found


def test_the_media_agent_off_leaves_out_its_objects_only() -> None:
    media = {key(d) for d in yaml.safe_load_all(
        "\n---\n".join(p.read_text() for p in sorted((DEPLOY / "media").glob("*.yaml"))
                       if p.name != "kustomization.yaml")) if d}
    assert len(media) == 8
    charted = template(CHART, "--set", "media.enabled=false")
    assert {key(d) for d in rendered()} - {key(d) for d in charted} == media
    assert differences([d for d in rendered() if key(d) not in media], charted) == []


def test_images_placement_and_resources(tmp_path: Path) -> None:
    values = tmp_path / "site.yaml"
    values.write_text(yaml.safe_dump({
        "devices": {"image": {"repository": "registry.example.org/liken/liken-devices",
                              "tag": "0.2.0"},
                    "tolerations": [{"key": "gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                    "nodeSelector": {"liken.sh/devices": "true"},
                    "priorityClassName": "liken-critical",
                    "resources": {"requests": {"cpu": "20m", "memory": "96Mi"},
                                  "limits": {"memory": "192Mi"}}},
        "media": {"image": {"repository": "registry.example.org/liken/liken-media",
                            "tag": "0.2.0"},
                  "tolerations": [],
                  "nodeSelector": {"kubernetes.io/os": "linux"},
                  "priorityClassName": "system-node-critical",
                  "resources": {"requests": {"cpu": "5m", "memory": "32Mi"},
                                "limits": {"memory": "256Mi"}}}}))
    charted = template(CHART, "-f", str(values))
    for doc in charted:
        for minor in MINORS:
            kubernetes_validate.validate(doc, minor, strict=True)
    dev = daemonset(charted, "liken-devices")["spec"]["template"]["spec"]
    assert dev["containers"][0]["image"] == "registry.example.org/liken/liken-devices:0.2.0"
    assert dev["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert dev["nodeSelector"] == {"liken.sh/devices": "true"}
    assert dev["priorityClassName"] == "liken-critical"
    assert dev["containers"][0]["resources"] == {"requests": {"cpu": "20m", "memory": "96Mi"},
                                                 "limits": {"memory": "192Mi"}}
    med = daemonset(charted, "media-capabilities")["spec"]["template"]["spec"]
    assert med["containers"][0]["image"] == "registry.example.org/liken/liken-media:0.2.0"
    assert "tolerations" not in med  # [] : none
    assert med["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert med["priorityClassName"] == "system-node-critical"
    # The agent's claim on the render nodes stays whatever the resources say.
    assert med["containers"][0]["resources"] == {
        "claims": [{"name": "render-nodes"}], "requests": {"cpu": "5m", "memory": "32Mi"},
        "limits": {"memory": "256Mi"}}
    # Nothing else moved: every difference is one of the fields set.
    set_fields = ("containers[0].image", "tolerations", "nodeSelector", "priorityClassName",
                  "containers[0].resources")
    for f in differences(rendered(), charted):
        assert any(f".spec.template.spec.{s}" in f for s in set_fields), f


# ---- docs/guide.md, "Helm" ----------------------------------------------------------------


def guide_helm() -> str:
    text = (REPO / "docs" / "guide.md").read_text()
    start = text.index("\n## Helm\n")
    return text[start:text.index("\n## ", start + 1)]


def leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for k, v in values.items():
        if isinstance(v, dict) and v and k != "resources":  # a value of its own
            out += leaves(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}")
    return out


def test_the_guide_names_every_value_and_its_default() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    table = [ln for ln in guide_helm().splitlines() if ln.startswith("| `")]
    for name in leaves(values):
        [row] = [r for r in table if f"`{name}`" in r.split("|")[1]]
        default = values
        for part in name.split("."):
            default = default[part]
        if isinstance(default, (str, bool)) and default not in ("", None):
            assert f"`{str(default).lower() if isinstance(default, bool) else default}`" \
                in row, (name, row)


def test_the_guides_values_file_renders(tmp_path: Path) -> None:
    text = guide_helm()
    block = text[text.index("```yaml\n") + 8:]
    site = tmp_path / "site.yaml"
    site.write_text(block[:block.index("```")])
    charted = template(CHART, "-f", str(site))
    for name, image in (("liken-devices", "liken-devices"), ("media-capabilities",
                                                             "liken-media")):
        [c] = daemonset(charted, name)["spec"]["template"]["spec"]["containers"]
        assert c["image"] == f"registry.example.org/liken/{image}:{VERSION}"
    # Only the images differ from deploy/ (an empty host: the Service's IP, as every pod).
    assert all(".containers[0].image:" in f for f in differences(rendered(), charted))
