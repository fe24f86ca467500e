"""Fixtures for the media agent's tests: a fake VA driver and fake render nodes, built for real.

Only what hardware provides is replaced (docs/media.md, "Testing without a GPU"): the agent's
own code, the child process, ctypes, libva.so.2 and libva-drm.so.2 are the real ones. The VA
driver is tests/media/native/vafake.c, compiled here with gcc against libva-dev and loaded by
libva through LIBVA_DRIVERS_PATH/LIBVA_DRIVER_NAME; the render nodes are plain files that libdrm
accepts through tests/media/native/drmshim.c (an LD_PRELOAD shim).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.corpus import VAINFO

NATIVE = Path(__file__).parent / "native"
CAPS = Path(__file__).parent / "caps"
# The real vainfo dumps (shared/vainfo beside the checkout, as tests/support/corpus.py finds it).
VAINFO_DIR = Path(os.environ.get("LIKEN_VAINFO_DIR", str(VAINFO)))


@dataclass(frozen=True)
class VaBuild:
    """The compiled test driver and shim."""

    driver_dir: Path  # holds vafake_drv_video.so
    shim: Path


def _pkg_flags(*args: str) -> list[str]:
    out = subprocess.run(["pkg-config", *args], check=True, capture_output=True, text=True)
    return out.stdout.split()


def build_va(out: Path) -> VaBuild:
    """Compile the fake driver and the shim into ``out`` (about a second)."""
    for tool in ("gcc", "pkg-config"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: run setup.d/50-media.sh")
    cflags = ["-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"]
    subprocess.run(["gcc", *cflags, "-o", str(out / "vafake_drv_video.so"),
                    str(NATIVE / "vafake.c"), *_pkg_flags("--cflags", "--libs", "libva")],
                   check=True, capture_output=True, text=True)
    subprocess.run(["gcc", *cflags, "-o", str(out / "drmshim.so"), str(NATIVE / "drmshim.c"),
                    *_pkg_flags("--cflags", "libdrm"), "-ldl"],
                   check=True, capture_output=True, text=True)
    return VaBuild(out, out / "drmshim.so")


@pytest.fixture(scope="session")
def va_build(tmp_path_factory: pytest.TempPathFactory) -> VaBuild:
    """The fake driver and shim, built once per test process."""
    return build_va(tmp_path_factory.mktemp("vabuild"))


class FakeGPUs:
    """A /dev with fake render nodes, each answered by the fake driver from its own caps file."""

    def __init__(self, root: Path, build: VaBuild) -> None:
        self.root = root
        self.build = build
        self.dev = root / "dev"
        self.caps = root / "caps"
        (self.dev / "dri").mkdir(parents=True)
        self.caps.mkdir()

    def add(self, minor: int, caps: str | Path) -> str:
        """A render node renderD<minor> whose driver answers ``caps`` (text or a file)."""
        node = self.dev / "dri" / f"renderD{minor}"
        node.touch()
        text = caps.read_text() if isinstance(caps, Path) else caps
        (self.caps / f"renderD{minor}.txt").write_text(text)
        return str(node)

    @property
    def env(self) -> dict[str, str]:
        """The environment a child needs to reach the fake driver through the real libva."""
        env = dict(os.environ)
        env.update({
            "LD_PRELOAD": str(self.build.shim),
            "VAFAKE_DRM_PREFIX": str(self.dev) + "/",
            "LIBVA_DRIVERS_PATH": str(self.build.driver_dir),
            "LIBVA_DRIVER_NAME": "vafake",
            "VAFAKE_CAPS": str(self.caps),
            "LIBVA_MESSAGING_LEVEL": "2",
        })
        return env


@pytest.fixture
def gpus(tmp_path: Path, va_build: VaBuild) -> FakeGPUs:
    return FakeGPUs(tmp_path, va_build)


@pytest.fixture
def fake_env(gpus: FakeGPUs, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGPUs]:
    """The fake driver's environment in this process, for code that starts children itself."""
    for key, value in gpus.env.items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    yield gpus
