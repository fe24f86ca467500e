"""The images `./tasks image` builds, run with podman: `scan --recording` of a real recording
gives inside the image the same slice as outside, and `liken-devices run` with the DaemonSet's
mounts emulated by bind mounts publishes its node's slice to the loopback API server and
registers with the kubelet at the paths the manifest names.

Building takes a minute or two per image (Debian's packages and the wheels are downloaded), so an
image is built once per set of inputs: its tag is a hash of everything that goes into it, and a
later run with the same inputs reuses it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fakeapi import FakeApiServer
from tests.support.sysfs_builder import SysfsBuilder

from .support import REPO, by_kind, kubectl, rendered

SHARED = REPO.parent / "shared" / "sysfs"
RECORDING = SHARED / "thinkpad-t60p-systemd-sys-script.umockdev"
INPUTS = ("scripts/image.sh", "deploy/image/Containerfile", "pyproject.toml", "README.md",
          "LICENSE")

pytestmark = [
    pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(1800),  # a first build downloads
    pytest.mark.skipif(os.geteuid() != 0, reason="podman and mmdebstrap run as root"),
    pytest.mark.skipif(not (shutil.which("podman") and shutil.which("mmdebstrap")),
                       reason="podman or mmdebstrap missing (setup.d/30-podman.sh, 65-image.sh)"),
]


def input_hash() -> str:
    h = hashlib.sha256()
    files = [REPO / f for f in INPUTS]
    files += sorted(p for p in (REPO / "src").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts
                    and ".egg-info" not in str(p))
    for path in files:
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def podman(*args: str, timeout: float = 120, check: bool = True
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          check=check, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """The two images for the current inputs, built unless an earlier run built them."""
    tag = "in-" + input_hash()
    names = {p: f"localhost/{p}:{tag}" for p in ("liken-devices", "liken-media")}
    lock_path = REPO / "build" / "image.lock"
    lock_path.parent.mkdir(exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time across pytest workers
        missing = [p for p, n in names.items()
                   if podman("image", "exists", n, check=False).returncode != 0]
        if missing:
            env = {**os.environ, "IMAGE_TAG": tag, "PYTHON": sys.executable,
                   "IMAGE_BUILD_DIR": str(REPO / "build" / "image-test")}
            done = subprocess.run([str(REPO / "scripts" / "image.sh"), *missing], env=env,
                                  capture_output=True, text=True, timeout=1500,
                                  stdin=subprocess.DEVNULL)
            assert done.returncode == 0, done.stderr[-3000:]
            # The images this checkout built for earlier inputs are of no more use; other
            # checkouts on the machine share podman's storage, so theirs are left alone.
            built = REPO / "build" / "image-tags.txt"
            earlier = built.read_text().split() if built.exists() else []
            stale = [n for n in earlier if n not in names.values()]
            if stale:
                podman("rmi", *stale, check=False)
            built.write_text("".join(f"{n}\n" for n in names.values()))
    return names


def test_image_is_reproducible_and_holds_the_id_files(images: dict[str, str]) -> None:
    for program, name in images.items():
        inspect = json.loads(podman("image", "inspect", name).stdout)[0]
        config = inspect["Config"]
        assert config["Entrypoint"] == [f"/opt/liken/bin/{program}"]
        # The media agent runs unprivileged; liken-devices loads modules, so it stays root.
        assert config.get("User") == ("65532:65532" if program == "liken-media" else "0:0")
        out = podman("run", "--rm", "--network", "none", name, "--version").stdout
        assert out.split() == [program, inspect["Config"]["Labels"][
            "org.opencontainers.image.version"]]
        ls = podman("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", name, "-c",
                    "test -s /usr/share/hwdata/pci.ids && test -s /usr/share/hwdata/usb.ids "
                    "&& readlink /usr/lib/modules", check=False)
        assert ls.returncode == 0, ls.stderr
        assert ls.stdout.strip() == "/host/usr/lib/modules"
    media = podman("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh",
                   images["liken-media"], "-c",
                   "ls /usr/lib/*/libva.so.2 /usr/lib/*/libva-drm.so.2 "
                   "/usr/lib/*/dri/iHD_drv_video.so")
    assert media.stdout.count("\n") == 3


# What the node agent imports: under the DaemonSet's PYTHONOPTIMIZE=2 on a read-only root, each
# must come from -OO byte-code made at build time, not be compiled again at every start.
AGENT_IMPORTS = ("import liken_devices.cli, liken_devices.agent.runner,"
                 " liken_devices.plugin.server, liken_devices.kube, liken_devices.machine.side,"
                 " grpc, lightkube, yaml, json")


def test_the_agents_byte_code_is_compiled_for_the_daemonsets_optimization(
        images: dict[str, str]) -> None:
    for optimize in ("2", "0"):  # the DaemonSets' PYTHONOPTIMIZE, and the media child's -I
        out = podman("run", "--rm", "--network", "none", "--read-only", "-e",
                     f"PYTHONOPTIMIZE={optimize}", "--entrypoint", "/opt/liken/bin/python",
                     images["liken-devices"], "-v", "-c", AGENT_IMPORTS)
        loaded = [line for line in out.stderr.splitlines()
                  if line.startswith("# code object from")]
        assert len(loaded) > 300  # the agent's modules, and what they import
        from_source = [line for line in loaded if not line.rstrip("'").endswith(".pyc")]
        assert from_source == [], f"PYTHONOPTIMIZE={optimize}"


def image_hwdata(image: str, into: Path) -> Path:
    """The image's ID files, copied out, for the same names outside."""
    into.mkdir()
    for name in ("pci.ids", "usb.ids"):
        out = subprocess.run(["podman", "run", "--rm", "--network", "none", "--entrypoint",
                              "/bin/cat", image, f"/usr/share/hwdata/{name}"],
                             capture_output=True, check=True, timeout=60)
        (into / name).write_bytes(out.stdout)
    return into


@pytest.mark.skipif(not RECORDING.exists(), reason="the shared recordings are absent")
def test_scan_of_a_recording_is_the_same_inside(images: dict[str, str], tmp_path: Path) -> None:
    hwdata = image_hwdata(images["liken-devices"], tmp_path / "hwdata")
    common = ["scan", "-o", "json", "--node", "t60p", "--modules-dir", "/nonexistent"]
    inside = podman("run", "--rm", "--network", "none", "-v", f"{RECORDING}:/rec.umockdev:ro",
                    images["liken-devices"], *common, "--recording", "/rec.umockdev").stdout
    outside = subprocess.run([sys.executable, "-m", "liken_devices.cli", *common,
                              "--recording", str(RECORDING), "--hwdata-dir", str(hwdata)],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    assert json.loads(inside) == json.loads(outside)
    devices = json.loads(inside)["spec"]["devices"]
    assert len(devices) >= 5
    # Names came from the image's ID files, not from vvvv:pppp.
    names = [d["attributes"].get("name", {}).get("string", "") for d in devices]
    assert any(" " in n for n in names), names


# ---- liken-devices run with the DaemonSet's mounts --------------------------------------------


def container_args(ds: dict[str, Any], env: dict[str, str]) -> list[str]:
    [c] = ds["spec"]["template"]["spec"]["containers"]
    out = []
    for a in c["args"]:
        for k, v in env.items():
            a = a.replace(f"$({k})", v)
        out.append(a)
    return out


def pod_env(container: dict[str, Any], cm: dict[str, Any], node: str) -> dict[str, str]:
    """The container's environment as the kubelet fills it: the downward API's fields of a pod
    on ``node`` (host network: the pod's IP is the node's), and the ConfigMap's keys."""
    fields = {"spec.nodeName": node, "metadata.uid": str(uuid.uuid4()),
              "metadata.name": "liken-devices-test", "metadata.namespace": "liken-system",
              "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1"}
    out = {}
    for e in container.get("env", []):
        source = e.get("valueFrom", {})
        if "value" in e:
            out[e["name"]] = e["value"]
        elif "fieldRef" in source:
            out[e["name"]] = fields[source["fieldRef"]["fieldPath"]]
        else:
            ref = source["configMapKeyRef"]
            assert ref["name"] == cm["metadata"]["name"]
            out[e["name"]] = cm["data"][ref["key"]]
    return out


@pytest.mark.skipif(kubectl() is None, reason="kubectl (kustomize) not installed")
def test_run_in_the_image_publishes_with_the_daemonsets_mounts(
        images: dict[str, str], api: FakeApiServer, tmp_path: Path) -> None:
    docs = rendered()
    ds = next(d for d in by_kind(docs, "DaemonSet") if d["metadata"]["name"] == "liken-devices")
    [cm] = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"] ==
            "liken-devices-kubelet"]
    pod = ds["spec"]["template"]["spec"]
    [container] = pod["containers"]
    node = "image-node"
    api.add_node(node)
    api.add_machine(node, {})
    # The node: a built sysfs tree (a GPU, a USB dongle) stands for the host's /sys; the rest of
    # the host paths are directories of this test, except /usr and /dev, which are this host's.
    host = tmp_path / "host"
    builder = SysfsBuilder(host / "sys")
    builder.console("ttyS0")
    builder.gpu()
    dongle = builder.usb_device("1-2", devnum=3)
    iface = builder.usb_interface(dongle, "1.0", driver="usbhid", cls=3)
    hid = builder.device(iface, "0003:1234:5678.0001", "hid")
    builder.node(hid, "hidraw", "hidraw0", 240, 0, subdir="hidraw")
    (host / "sys" / "fs" / "cgroup").mkdir(parents=True)  # where the runtime mounts cgroups
    real = {"/usr": "/usr", "/dev": "/dev"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    binds = []
    for mount in container["volumeMounts"]:
        vol = volumes[mount["name"]]
        if "hostPath" in vol:
            path = vol["hostPath"]["path"]
            source = Path(real.get(path, str(host / path.lstrip("/"))))
            source.mkdir(parents=True, exist_ok=True)
        else:
            source = tmp_path / "emptydir" / mount["name"]
            source.mkdir(parents=True)
        mode = "ro" if mount.get("readOnly") else "rw"
        binds += ["-v", f"{source}:{mount['mountPath']}:{mode}"]
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    env = pod_env(container, cm, node)
    # The host's network is shared with every other test: the endpoint takes a free port.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    args = [f"--metrics-port={free}" if a.startswith("--metrics-port=") else a
            for a in container_args(ds, env)]
    assert f"--metrics-port={free}" in args
    name = f"liken-image-test-{os.getpid()}"
    proc = subprocess.Popen(
        ["podman", "run", "--rm", "--name", name, "--privileged", "--network", "host",
         "--read-only", *binds, "-v", f"{kubeconfig}:/kubeconfig:ro",
         *[f"--env={k}={v}" for k, v in env.items()],
         images["liken-devices"], *args, "--kubeconfig", "/kubeconfig"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    registry = host / cm["data"]["kubeletDir"].lstrip("/") / "plugins_registry"
    try:
        published = api.wait_for(lambda: api.slices(node), timeout=60)
        deadline = time.monotonic() + 30
        while not any(p.is_socket() for p in registry.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.2)
        # The kubelet's plugin watcher would find it here, at the path the manifest names.
        registered = sorted(p.name for p in registry.iterdir() if p.is_socket())
    except AssertionError:
        published, registered = None, []
    finally:
        podman("stop", "-t", "10", name, check=False, timeout=60)
        out, _ = proc.communicate(timeout=60)
    assert published, f"no slice; the container said:\n{out[-3000:]}"
    assert registered, out[-3000:]
    # On SIGTERM the plugin removed its sockets.
    assert not any(p.is_socket() for p in registry.iterdir())
    [published] = api.slices(node)
    outside = subprocess.run(
        [sys.executable, "-m", "liken_devices.cli", "scan", "-o", "json", "--node", node,
         "--sysfs", str(host / "sys"), "--facts", str(host / "run/liken/facts"),
         "--hwdata-dir", str(image_hwdata(images["liken-devices"], tmp_path / "ids")),
         "--modules-dir", "/nonexistent"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    assert published["spec"]["devices"] == json.loads(outside)["spec"]["devices"], out[-2000:]
    assert {d["name"] for d in published["spec"]["devices"]} == {
        "pci-0000-00-02-0", "pci-0000-00-02-0-display", "usb-1-2-1-0"}
    machine = api.get_object("machines", node)
    assert machine is not None and machine.get("status"), out[-2000:]
    assert yaml.safe_dump(published)  # a plain object, as the API stores it
