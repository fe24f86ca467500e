"""Where the real recordings live (``../shared/sysfs`` beside the checkout), if they exist.

Tests that read them skip where the folder is absent; the suite passes without it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("LIKEN_SHARED", ROOT.parent / "shared"))
SYSFS = SHARED / "sysfs"
VAINFO = SHARED / "vainfo"


def recordings() -> list[Path]:
    if not SYSFS.is_dir():
        return []
    return sorted(SYSFS.rglob("*.umockdev"))


def recording_params() -> list[object]:
    found = recordings()
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{SYSFS} is absent"))]
    return [pytest.param(p, id=str(p.relative_to(SYSFS))) for p in found]


def recording(name: str) -> Path:
    path = SYSFS / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path
