"""The source distribution carries the licence, the documentation and the manifests, and the
installed programs say their version (pyproject.toml is the one place it is written)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import liken_devices

REPO = Path(__file__).resolve().parents[2]


def test_sdist_carries_docs_and_manifests(tmp_path: Path) -> None:
    # setuptools' own PEP 517 hook, in the venv (no download).
    name = subprocess.run(
        [sys.executable, "-c", "import sys, setuptools.build_meta as b; "
                               "print(b.build_sdist(sys.argv[1]))", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=180).stdout.split()[-1]
    with tarfile.open(tmp_path / name) as tar:
        files = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
    wanted = {"LICENSE", "README.md", "pyproject.toml", "tasks", "docs/guide.md",
              "deploy/kustomization.yaml", "deploy/liken-devices/daemonset.yaml",
              "deploy/liken-devices/admission.yaml", "deploy/image/Containerfile",
              "scripts/image.sh", "src/liken_devices/cli.py",
              # the Helm chart, its links into deploy/ as the files they lead to
              "deploy/helm/liken-devices/templates/_helpers.tpl",
              "deploy/helm/liken-devices/.helmignore",
              "deploy/helm/liken-devices/values.schema.json",
              "deploy/helm/liken-devices/files/media/daemonset.yaml",
              "deploy/helm/liken-devices/crds/machine-crd.yaml"}
    assert wanted <= files, sorted(wanted - files)
    for folder in ("docs", "deploy"):
        on_disk = {str(p.relative_to(REPO)) for p in (REPO / folder).rglob("*")
                   if p.is_file() and p.suffix in (".md", ".yaml")}
        assert on_disk <= files, sorted(on_disk - files)
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]


def test_version_is_the_projects() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert liken_devices.__version__ == project["version"]
