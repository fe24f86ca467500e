"""The slice file, one of the agents' publishers: written atomically when the devices change,
with the pool's generation raised, and a failed write tried again at the next sync."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from liken_devices.slices import validate_slice
from liken_devices.slices.publish import SliceFile

DEVICES: list[dict[str, Any]] = [{"name": "pci-0000-00-02-0"}]


def read(path: Path) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(path.read_text())
    return obj


def test_written_when_the_devices_change(tmp_path: Path) -> None:
    published: list[tuple[int, int]] = []
    out = SliceFile("n1", tmp_path / "slice.json",
                    published=lambda n, g: published.append((n, g)))
    assert out.sync() and not (tmp_path / "slice.json").exists()  # nothing set yet
    out.set_devices(DEVICES)
    assert out.sync()
    obj = read(tmp_path / "slice.json")
    assert validate_slice(obj) == []
    assert obj["metadata"]["name"] == "n1-liken.sh"
    assert obj["spec"]["devices"] == DEVICES and obj["spec"]["pool"]["generation"] == 1
    out.set_devices(list(DEVICES))  # the same devices: no write
    assert out.sync() and out.writes == 1
    out.set_devices([*DEVICES, {"name": "usb-1-3"}])
    assert out.sync() and out.writes == 2
    assert read(tmp_path / "slice.json")["spec"]["pool"]["generation"] == 2
    assert published == [(1, 1), (2, 2)]
    # Nothing for a loop to wait for: no watch, no retry.
    assert out.converged and out.retry_in() is None and not out.observe("DELETED", None)


def test_a_failed_write_is_said_and_tried_at_the_next_sync(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "slice.json"
    path.mkdir()  # a directory in the way: the write fails
    out = SliceFile("n1", path)
    out.set_devices(DEVICES)
    with caplog.at_level(logging.DEBUG, "liken_devices.slices.publish"):
        assert not out.sync()
        assert f"cannot write {path}" in caplog.text and out.writes == 0
        path.rmdir()
        assert out.sync() and out.writes == 1
        assert "wrote ResourceSlice n1-liken.sh" in caplog.text
    assert read(path)["spec"]["devices"] == DEVICES
