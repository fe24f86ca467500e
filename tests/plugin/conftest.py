"""Fixtures for the plugin's tests: a fake API serving ResourceClaims, hardware the test controls,
a plugin serving on real unix sockets, and the test kubelet registered with it."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightkube
import pytest
from lightkube import KubeConfig

from liken_devices.inventory.model import NO_CLAIMS, Claimed, Inventory, PublishedDevice
from liken_devices.plugin import Plugin, PluginConfig
from liken_devices.sysfs.model import DevNode
from tests.support.fakeapi import FakeApiServer

from .kubelet import TestKubelet

if TYPE_CHECKING:
    from .process import Node

NODE = "node-a"


def n(name: str, typ: str, major: int, minor: int) -> DevNode:
    assert typ in ("c", "b")
    return DevNode(name, typ, major, minor)  # type: ignore[arg-type]


USBFS = n("bus/usb/001/004", "c", 189, 3)
BT_EVENTS = tuple(n(f"input/event{i}", "c", 13, 64 + i) for i in range(32))

# One device of every kind the inventory publishes (docs/rules/sharing.md, usb.md, bluetooth.md,
# serial.md), with the nodes a claim on it delivers.
CATALOG: dict[str, tuple[str, tuple[DevNode, ...], str]] = {
    "pci-0000-00-02-0": ("render", (n("dri/renderD128", "c", 226, 128),),
                         "/devices/pci0000:00/0000:00:02.0"),
    "pci-0000-00-02-0-display": ("display", (n("dri/card0", "c", 226, 0),),
                                 "/devices/pci0000:00/0000:00:02.0"),
    "pci-0000-00-02-0-i2c-dev": ("i2c-dev", (n("i2c-3", "c", 89, 3), n("i2c-4", "c", 89, 4)),
                                 "/devices/pci0000:00/0000:00:02.0"),
    "pci-0000-00-1f-3": ("sound", (n("snd/controlC0", "c", 116, 2),
                                   n("snd/pcmC0D0p", "c", 116, 3),
                                   n("input/event9", "c", 13, 73)),
                         "/devices/pci0000:00/0000:00:1f.3"),
    "usb-1-2-1-0": ("interface", (n("hidraw0", "c", 242, 0), USBFS),
                    "/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0"),
    "usb-1-3": ("whole", (n("bus/usb/001/005", "c", 189, 4),),
                "/devices/pci0000:00/0000:00:14.0/usb1/1-3"),
    "usb-1-8-1-0": ("bluetooth", (n("bus/usb/001/006", "c", 189, 5), n("uinput", "c", 10, 223),
                                  *BT_EVENTS),
                    "/devices/pci0000:00/0000:00:14.0/usb1/1-8/1-8:1.0"),
    "usb-1-4-1-0-cec": ("cec", (n("cec0", "c", 511, 0),),
                        "/devices/pci0000:00/0000:00:14.0/usb1/1-4/1-4:1.0"),
    "usb-1-4-1-0-input": ("input", (n("input/event7", "c", 13, 71),),
                          "/devices/pci0000:00/0000:00:14.0/usb1/1-4/1-4:1.0"),
    "pnp-00-01": ("tty", (n("ttyS1", "c", 4, 65),), "/devices/pnp0/00:01"),
    "pci-0000-00-17-0": ("disk", (n("sda", "b", 8, 0), n("sda1", "b", 8, 1)),
                         "/devices/pci0000:00/0000:00:17.0"),
}


def device(name: str, nodes: tuple[DevNode, ...] | None = None) -> PublishedDevice:
    kind, default_nodes, source = CATALOG.get(name, ("whole", (), "/devices/platform/x"))
    return PublishedDevice(name=name, attributes={"address": source.rsplit("/", 1)[-1]},
                           nodes=nodes if nodes is not None else default_nodes,
                           shareable=kind == "render", source=source, kind=kind)


class Hardware:
    """What the node has now; the plugin's ``walk`` returns it as a fresh Inventory."""

    def __init__(self, names: list[str] | None = None) -> None:
        self.devices: dict[str, PublishedDevice] = {}
        self.held: dict[str, tuple[DevNode, ...]] = {}
        self.walks = 0
        self.claimed: list[Claimed] = []  # what each walk was told the prepared claims hold
        self.lock = threading.Lock()
        for name in names if names is not None else list(CATALOG):
            self.plug(name)

    def plug(self, name: str, nodes: tuple[DevNode, ...] | None = None) -> None:
        self.devices[name] = device(name, nodes)

    def unplug(self, name: str) -> None:
        self.devices.pop(name, None)

    def inventory(self) -> Inventory:
        return Inventory(devices=tuple(sorted(self.devices.values(), key=lambda d: d.name)),
                         outcomes=(), unclaimed=(), held=dict(self.held))

    def walk(self, *, claimed: Claimed = NO_CLAIMS) -> Inventory:
        with self.lock:
            self.claimed.append(claimed)
            self.walks += 1
        return self.inventory()


@pytest.fixture
def api(api: FakeApiServer) -> FakeApiServer:
    """The suite's loopback API server (tests/conftest.py), with this node's Node."""
    api.add_node(NODE)
    return api


@pytest.fixture
def kube(api: FakeApiServer, tmp_path: Path) -> Iterator[Any]:
    cfg = api.write_kubeconfig(tmp_path / "kubeconfig")
    client = lightkube.Client(config=KubeConfig.from_file(cfg))
    yield client
    client.close()


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short directory for sockets (sun_path is 108 bytes; pytest's tmp paths are long)."""
    d = Path(tempfile.mkdtemp(prefix="lkp-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def hardware() -> Hardware:
    return Hardware()


def make_config(tmp_path: Path, sockdir: Path, **kw: Any) -> PluginConfig:
    base: dict[str, Any] = dict(
        node=NODE, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state",
        plugin_dir=sockdir / "plugins" / "liken.sh", registry_dir=sockdir / "plugins_registry",
        sysfs=tmp_path / "sys", dev_dir=tmp_path / "dev", health_interval=0.5)
    base.update(kw)
    return PluginConfig(**base)


@pytest.fixture
def make_plugin(tmp_path: Path, sockdir: Path, kube: Any,
                hardware: Hardware) -> Iterator[Callable[..., Plugin]]:
    started: list[Plugin] = []

    def make(walk: Callable[..., Inventory] | None = None, start: bool = True,
             **kw: Any) -> Plugin:
        p = Plugin(make_config(tmp_path, sockdir, **kw), walk or hardware.walk, kube)
        if start:
            p.start()
            started.append(p)
        return p

    yield make
    for p in started:
        p.stop()


@pytest.fixture
def plugin(make_plugin: Callable[..., Plugin]) -> Plugin:
    return make_plugin()


@pytest.fixture
def kubelet(plugin: Plugin) -> Iterator[TestKubelet]:
    k = TestKubelet(plugin.config.registration_socket)
    k.register()
    yield k
    k.close()


def new_claim(api: FakeApiServer, devices: list[str], request: str = "req",
              namespace: str = "default", results: list[dict[str, Any]] | None = None,
              ) -> tuple[str, str, str]:
    """A claim allocated to ``devices`` of this node; returns (namespace, uid, name)."""
    uid = str(uuid.uuid4())
    name = f"claim-{uid[:8]}"
    api.add_claim(namespace, name, uid=uid, node=NODE,
                  results=results or [{"request": request, "device": d} for d in devices])
    return namespace, uid, name


def cdi_files(cdi_dir: Path) -> list[str]:
    return sorted(os.listdir(cdi_dir)) if cdi_dir.exists() else []


@pytest.fixture
def node(tmp_path: Path, sockdir: Path, api: FakeApiServer) -> Iterator[Node]:
    """A fixture machine on which ``liken-devices plugin`` runs as a process (tests/plugin/
    process.py); killed at the end if still running."""
    from .process import Node

    n = Node(tmp_path, sockdir, api.write_kubeconfig(tmp_path / "kubeconfig"))
    try:
        yield n
    finally:
        if n.proc is not None:
            n.kill()
