"""What the images cost: `scripts/image.sh` builds both from nothing (Debian's packages and the
wheels downloaded, the root made, the wheels installed with no network), and the figures are the
seconds each image took and its size, as podman reports it uncompressed. A second build from the
same inputs must give the same image ID (the build is reproducible), which is checked too.

This builds twice from scratch, minutes of work, so it runs under `./tasks bench` only; the
plain suite builds the images once per set of inputs in tests/deploy/test_image.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .figures import record

REPO = Path(__file__).resolve().parents[2]


def build(tmp: Path, tag: str) -> dict[str, tuple[str, float, float]]:
    env = {**os.environ, "IMAGE_TAG": tag, "PYTHON": sys.executable,
           "IMAGE_BUILD_DIR": str(tmp)}
    done = subprocess.run([str(REPO / "scripts" / "image.sh")], env=env, capture_output=True,
                          text=True, timeout=3000, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    out = {}
    for line in done.stdout.splitlines():
        program, _, image_id, size, seconds = line.split("\t")
        out[program] = (image_id, int(size) / 1e6, float(seconds))
    return out


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("podman") and
                                               shutil.which("mmdebstrap")),
                    reason="builds images as root with podman and mmdebstrap")
@pytest.mark.timeout(3600)
def test_image_build(benchmark: Any, tmp_path: Path) -> None:
    if benchmark.disabled:
        pytest.skip("two builds from scratch: measured by ./tasks bench")
    tag = f"bench-{os.getpid()}"
    try:
        first = benchmark.pedantic(build, args=(tmp_path / "a", tag), rounds=1, iterations=1)
        second = build(tmp_path / "b", tag)
    finally:
        subprocess.run(["podman", "rmi", "-f", f"localhost/liken-devices:{tag}",
                        f"localhost/liken-media:{tag}"], capture_output=True, check=False)
    for program, (image_id, size, seconds) in sorted(first.items()):
        assert second[program][0] == image_id, f"{program}: not reproducible"
        record(benchmark, "image", f"{program}: build from nothing", [seconds], "s",
               note="downloads included; the wheels are downloaded once for both images")
        record(benchmark, "image", f"{program}: size", [size], "MB")
