"""The same names as the render node (rules: media.names-as-render-node), on every corpus machine.

The host's ``pci.ids`` and the image's name every GPU differently. liken-devices reads the host's
first and publishes its render nodes; the media agent, whose own walk here reads only the image's
file, takes ``address``, ``driver``, ``vendor``, ``product`` and ``name`` from liken's slice, and
without a slice its own walk reads the host's file first. Either way the five values equal the
render node's, byte for byte. The render nodes are not in the agent's (test) /dev, so no driver
is asked: each media device is a failed query, which carries the same five attributes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from liken_devices.inventory import Sources
from liken_devices.inventory.model import Inventory
from liken_devices.media.agent import MediaAgent
from liken_devices.media.devices import render_devices
from liken_devices.slices import devices_json, make_slice
from liken_devices.sysfs.umockdev import load_recording
from tests.support.corpus import recording_params

FIVE = ("address", "driver", "vendor", "product", "name")


class Publisher:
    """What the agent publishes, kept."""

    def __init__(self) -> None:
        self.devices: list[dict[str, Any]] = []
        self.writes = 0
        self.converged = True

    def set_devices(self, devices: list[dict[str, Any]]) -> None:
        self.devices = devices

    def observe(self, event: str, obj: dict[str, Any] | None) -> bool:
        return False

    def sync(self) -> bool:
        return True

    def retry_in(self, now: float | None = None) -> float | None:
        return None


def id_files(root: Path, inv: Inventory, words: str) -> Path:
    """A pci.ids naming every render node's vendor and device with ``words``."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for d in render_devices(inv):
        vendor, product = d.attributes.get("vendor"), d.attributes.get("product")
        if isinstance(vendor, str) and isinstance(product, str):
            lines += [f"{vendor}  {words} vendor {vendor}", f"\t{product}  {words} GPU {product}"]
    (root / "pci.ids").write_text("\n".join(lines) + "\n")
    return root


def five(attrs: dict[str, Any]) -> dict[str, str]:
    return {k: v["string"] for k, v in attrs.items() if k in FIVE}


def render_recordings() -> list[Any]:
    out = []
    for param in recording_params():
        path = param.values[0] if hasattr(param, "values") else param
        if path is None:  # the corpus is absent: recording_params' skipped placeholder
            continue
        if any(d.is_render for d in _walk(Path(str(path)), Path("/nonexistent")).devices):
            out.append(param)
    return out or [pytest.param(None, marks=pytest.mark.skip(reason="no corpus with a GPU"))]


def _walk(recording: Path, hwdata: Path | tuple[Path, ...]) -> Inventory:
    return Sources(recording=recording, facts=None, modules_dir=Path("/nonexistent"),
                   hwdata_dir=hwdata).walk()


@pytest.mark.parametrize("path", render_recordings())
def test_the_media_devices_name_their_gpu_as_the_render_node(tmp_path: Path,
                                                              path: Path) -> None:
    load_recording(path)
    bare = _walk(path, tmp_path / "none")
    host = id_files(tmp_path / "host", bare, "Host")
    image = id_files(tmp_path / "image", bare, "Image")

    # liken-devices on the node: the host's files first.
    liken = Sources(recording=path, facts=None, modules_dir=tmp_path, hwdata_dir=(host, image))
    renders = {d["name"]: d for d in devices_json(liken.walk())
               if d["attributes"].get("renderNode", {}).get("bool")}
    assert renders
    liken_slice = make_slice("n1", "liken.sh", devices_json(liken.walk()))

    # The agent whose own walk reads only the image's file: it names them as liken's slice does.
    images_only = Sources(recording=path, facts=None, modules_dir=tmp_path, hwdata_dir=image)
    image_names = {d.name: d.attributes.get("name") for d in render_devices(images_only.walk())
                   if "vendor" in d.attributes}
    for name, words in image_names.items():  # the files differ (a board GPU has no IDs)
        assert words != renders[name]["attributes"]["name"]["string"]
    agent = MediaAgent(images_only, Publisher(), dev_root=tmp_path / "dev")
    agent.on_liken_slice("ADDED", liken_slice)
    agent.refresh()
    published = {d["name"]: d for d in agent.publisher.devices}  # type: ignore[attr-defined]
    assert set(published) == set(renders)
    for name, render in renders.items():
        assert five(published[name]["attributes"]) == five(render["attributes"]), name

    # No liken slice yet: the agent's own walk, reading the host's files first.
    host_first = Sources(recording=path, facts=None, modules_dir=tmp_path,
                         hwdata_dir=(host, image))
    agent = MediaAgent(host_first, Publisher(), dev_root=tmp_path / "dev")
    agent.refresh()
    published = {d["name"]: d for d in agent.publisher.devices}  # type: ignore[attr-defined]
    for name, render in renders.items():
        assert five(published[name]["attributes"]) == five(render["attributes"]), name


def test_a_changed_name_in_likens_slice_republishes_without_asking(tmp_path: Path) -> None:
    from tests.support.sysfs_builder import SysfsBuilder, bare_sources

    b = SysfsBuilder(tmp_path / "sys")
    b.gpu()
    sources = bare_sources(tmp_path)
    agent = MediaAgent(sources, Publisher(), dev_root=tmp_path / "dev")
    agent.refresh()
    renders = devices_json(sources.walk())
    for d in renders:
        d["attributes"]["name"] = {"string": "Host words"}
    agent.on_liken_slice("MODIFIED", make_slice("n1", "liken.sh", renders))
    agent._turn()
    (device,) = agent.publisher.devices  # type: ignore[attr-defined]
    assert device["attributes"]["name"] == {"string": "Host words"}
    assert agent.queried == ["pci-0000-00-02-0"]  # asked once, at start
