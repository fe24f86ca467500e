"""The node, for real: both DaemonSets on the real kubelet and containerd, a pod that gets exactly
its device's nodes (with the host's mode and owner), unprepare when the pod goes, and nothing lost
when the kubelet restarts or the agent's pod is deleted while a claim is prepared.

The machine is a sysfs tree built here whose device nodes are real character devices of this
machine (/dev/tty5 is 4:5, /dev/loop1 7:1): a serial card, and a SATA disk that backs the
machine's root (its facts say so), which no claim may ever get.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.sysfs_builder import SysfsBuilder

from .support import REPO, STATE, apply, cluster, get, inside, kubectl, pod_token, wait_for

pytestmark = pytest.mark.cluster

TREE = STATE / "node-machine"
NS = "node-tier"
SERIAL = "pci-0000-00-1e-0"
IMAGE = "localhost/liken-bbox:ci"
UPGRADE_TTYS = (6, 7, 8)
# One stream: the log keeps stdout and stderr apart and may put an error line (stat's, in a pod
# without the device) ahead of what was printed before it.
SHOW = ("exec 2>&1; find /dev -type c -o -type b | sort; echo ---; "
        "stat -c '%n %t:%T %a %u %g' /dev/tty5; echo READY; sleep 3600")


def build_machine(root: Path, *, serial: bool = True) -> None:
    """The machine; ``serial=False``: the same without the serial card, as if unplugged."""
    # Emptied, not removed: a running agent's hostPath mount holds this directory's inode, and
    # would keep seeing a deleted directory.
    root.mkdir(parents=True, exist_ok=True)
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    b = SysfsBuilder(root / "sys")
    if serial:
        card = b.pci("0000:00:1e.0", driver="exar_serial", cls=0x070002)
        b.node(card, "tty", "tty5", 4, 5, subdir="tty")
    for n in UPGRADE_TTYS:  # more serial cards, for the claims prepared during an upgrade
        card = b.pci(f"0000:00:1e.{n - 5}", driver="exar_serial", cls=0x070002)
        b.node(card, "tty", f"tty{n}", 4, n, subdir="tty")
    sata = b.pci("0000:00:17.0", driver="ahci", cls=0x010601)
    b.node(sata, "block", "loop1", 7, 1, block=True, subdir="host0/target0:0:0/0:0:0:0/block")
    (root / "facts" / "storage" / "root").mkdir(parents=True)
    (root / "facts" / "storage" / "root" / "device").write_text("loop1\n")


@pytest.fixture(scope="module")
def node(k8s: dict[str, str]) -> Iterator[str]:
    # A namespace of the tier's own, new each run: no pod of an earlier run holds the devices.
    kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true", "--timeout=180s",
            timeout=200)
    build_machine(TREE)
    kubectl("apply", "-k", str(REPO / "tests" / "cluster" / "node-overlay"), timeout=300)
    kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices", "--timeout=300s",
            timeout=320)
    name = k8s["node"]
    wait_for("the serial card in the node's slice",
             lambda: SERIAL in {d["name"] for d in get("resourceslice", f"{name}-liken.sh")
                                ["spec"]["devices"]}, timeout=120)
    kubectl("create", "namespace", NS, check=False)
    apply([{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "node-tier-liken"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "liken.sh"'}}]}}])
    yield name
    kubectl("delete", "namespace", NS, "--wait=false")


def claim_pod(name: str, device: str | None, command: str = SHOW) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
        "spec": {"terminationGracePeriodSeconds": 1, "restartPolicy": "Never",
                 "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", command]}]}}
    if device is not None:
        pod["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": name}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "dev"}]}
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": name, "namespace": NS},
                 "spec": {"devices": {"requests": [{"name": "dev", "exactly": {
                     "deviceClassName": "node-tier-liken",
                     "selectors": [{"cel": {"expression":
                                            f'device.attributes["liken.sh"].address == '
                                            f'"{device}"'}}]}}]}}}
        apply([claim])
    apply([pod])
    return pod


def ready_log(name: str) -> str:
    def logs() -> str | None:
        phase = get("-n", NS, "pod", name)["status"].get("phase")
        if phase in ("Failed", "Succeeded"):
            raise AssertionError(f"pod {name} {phase}: {get('-n', NS, 'pod', name)['status']}")
        out = kubectl("-n", NS, "logs", name, check=False).stdout
        return out if "READY" in out else None
    return wait_for(f"pod {name} running", logs, timeout=180)


def device_nodes(log: str) -> set[str]:
    return set(log.split("---")[0].split())


def cdi_specs() -> set[str]:
    return set(inside("ls", "/var/run/cdi").stdout.split())


def delete_pod(name: str) -> None:
    kubectl("-n", NS, "delete", "pod", name, "--wait=true", "--timeout=120s", timeout=130)


def claim_uid(name: str) -> str:
    return get("-n", NS, "resourceclaim", name)["metadata"]["uid"]


def test_the_disk_that_backs_the_root_is_never_published(node: str) -> None:
    devices = get("resourceslice", f"{node}-liken.sh")["spec"]["devices"]
    assert "pci-0000-00-17-0" not in {d["name"] for d in devices}


def test_a_pod_gets_exactly_its_device_with_the_hosts_mode_and_owner(node: str) -> None:
    claim_pod("baseline", None)
    claim_pod("serial", "0000:00:1e.0")
    try:
        baseline, held = ready_log("baseline"), ready_log("serial")
    except AssertionError:
        for name in ("serial", "baseline"):
            delete_pod(name)
        raise
    assert device_nodes(held) - device_nodes(baseline) == {"/dev/tty5"}
    assert device_nodes(baseline) - device_nodes(held) == set()
    host = os.stat("/dev/tty5")
    seen = held.split("---")[1].split()
    assert seen[:5] == ["/dev/tty5", "4:5", f"{stat.S_IMODE(host.st_mode):o}",
                        str(host.st_uid), str(host.st_gid)], seen
    allocation = get("-n", NS, "resourceclaim", "serial")["status"]["allocation"]
    [result] = allocation["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == ("liken.sh", node, SERIAL)

    uid = claim_uid("serial")
    assert f"liken.sh-{uid}.json" in cdi_specs()
    delete_pod("serial")
    wait_for("unprepare: the claim's CDI spec removed",
             lambda: f"liken.sh-{uid}.json" not in cdi_specs(), timeout=60)
    delete_pod("baseline")
    kubectl("-n", NS, "delete", "resourceclaim", "serial")


@pytest.mark.parametrize("restart", ["kubelet", "agent-pod"])
def test_a_prepared_claim_survives_a_restart(node: str, restart: str) -> None:
    name = f"survive-{restart}"
    claim_pod(name, "0000:00:1e.0")
    try:
        ready_log(name)
    except AssertionError:
        delete_pod(name)
        raise
    uid = claim_uid(name)
    if restart == "kubelet":
        assert cluster("restart", "kubelet").returncode == 0
        wait_for("the node Ready again", lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in get("node", node)["status"]["conditions"]), timeout=120)
    else:
        kubectl("-n", "liken-system", "delete", "pod", "-l",
                "app.kubernetes.io/name=liken-devices", "--wait=true", timeout=120)
        kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices",
                "--timeout=180s", timeout=200)
    # The container still runs with its device, and the claim is still prepared.
    assert get("-n", NS, "pod", name)["status"]["phase"] == "Running"
    assert f"liken.sh-{uid}.json" in cdi_specs()
    # Deleting the pod still unprepares: nothing of the claim was lost in the restart.
    time.sleep(2)
    delete_pod(name)
    wait_for("unprepare after the restart", lambda: f"liken.sh-{uid}.json" not in cdi_specs(),
             timeout=90)
    kubectl("-n", NS, "delete", "resourceclaim", name)



def test_a_rolling_upgrade_fails_no_prepare(node: str) -> None:
    """The DaemonSet rolled to a new image (a surge: the new pod beside the old one) while a pod
    holds a claim and other pods' claims are being prepared: every pod starts with its device,
    no prepare fails, and the held claim is still prepared and unprepared afterwards."""
    ds = get("-n", "liken-system", "ds", "liken-devices")
    [container] = [c for c in ds["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "liken-devices"]
    old_image = container["image"]
    new_image = old_image.rsplit(":", 1)[0] + ":upgrade"
    inside("ctr", "-n", "k8s.io", "images", "tag", "--force", old_image, new_image)
    claim_pod("holder", "0000:00:1e.0")
    ready_log("holder")
    uid = claim_uid("holder")
    started = time.time()
    names = [f"during-{n}" for n in UPGRADE_TTYS]
    try:
        kubectl("-n", "liken-system", "set", "image", "ds/liken-devices",
                f"liken-devices={new_image}")
        for n, name in zip(UPGRADE_TTYS, names, strict=True):
            claim_pod(name, f"0000:00:1e.{n - 5}")
            time.sleep(2)
        kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices",
                "--timeout=300s", timeout=320)
        for n, name in zip(UPGRADE_TTYS, names, strict=True):
            assert f"/dev/tty{n}" in device_nodes(ready_log(name))
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started - 1))
        failed = [e["message"] for e in get("-n", NS, "events")["items"]
                  if e.get("reason", "").startswith("Failed") and
                  (e.get("lastTimestamp") or e.get("eventTime") or "") >= since]
        assert failed == [], failed
        assert get("-n", NS, "pod", "holder")["status"]["phase"] == "Running"
        assert f"liken.sh-{uid}.json" in cdi_specs()
        pods = get("-n", "liken-system", "pods", "-l", "app.kubernetes.io/name=liken-devices")
        assert {p["spec"]["containers"][0]["image"] for p in pods["items"]} == {new_image}
    finally:
        for name in ["holder", *names]:
            kubectl("-n", NS, "delete", "pod", name, "--ignore-not-found", "--wait=true",
                    "--timeout=120s", timeout=130, check=False)
            kubectl("-n", NS, "delete", "resourceclaim", name, "--ignore-not-found",
                    check=False)
        kubectl("-n", "liken-system", "set", "image", "ds/liken-devices",
                f"liken-devices={old_image}")
        kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices",
                "--timeout=300s", timeout=320)
    wait_for("unprepare after the upgrade", lambda: f"liken.sh-{uid}.json" not in cdi_specs(),
             timeout=90)


def published(node: str) -> set[str]:
    """The devices of the node's slice (a slice with none has no ``devices``)."""
    return {d["name"] for d in get("resourceslice", f"{node}-liken.sh")["spec"].get("devices")
            or []}


def slice_writes(node: str, since: int) -> dict[str, int]:
    """The agents' writes of the node's slice in the API server's audit log after byte
    ``since``: the pod that wrote -> how many."""
    out: dict[str, int] = {}
    with (STATE / "logs" / "audit.log").open("rb") as log:
        log.seek(since)
        for line in log:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if event["user"]["username"] != "system:serviceaccount:liken-system:liken-devices" \
                    or event["stage"] != "ResponseComplete" or event["verb"] != "patch" \
                    or ref.get("name") != f"{node}-liken.sh":
                continue
            pod = (event["user"].get("extra") or {}).get(
                "authentication.kubernetes.io/pod-name", ["?"])[0]
            out[pod] = out.get(pod, 0) + 1
    return out


def test_a_rollout_that_changes_the_walk_writes_the_slice_a_few_times(node: str) -> None:
    """The surge upgrade from an agent walking this VM's sysfs to one walking the node tier's
    machine: two instances whose walks differ run side by side, and only the newer writes
    (rules: limits.one-writer). Two writers would each restore their own view, in turn, for as
    long as both run: hundreds of writes in the audit log."""
    kubectl("apply", "-k", str(REPO / "tests" / "cluster" / "overlay"), timeout=300)
    kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices", "--timeout=300s",
            timeout=320)
    wait_for("this VM's own walk in the slice", lambda: SERIAL not in published(node),
             timeout=120)
    since = (STATE / "logs" / "audit.log").stat().st_size
    kubectl("apply", "-k", str(REPO / "tests" / "cluster" / "node-overlay"), timeout=300)
    kubectl("-n", "liken-system", "rollout", "status", "ds/liken-devices", "--timeout=300s",
            timeout=320)
    wait_for("the machine's walk in the slice", lambda: SERIAL in published(node),
             timeout=120)
    time.sleep(5)  # the old pod is gone: nothing writes any more
    writes = slice_writes(node, since)
    assert 1 <= sum(writes.values()) <= 6, writes


def wake_the_agent() -> None:
    """A synthetic ``add`` uevent for this machine's tty5 (it changes nothing on the device):
    the agent, which hears the kernel's uevents, walks its tree again."""
    Path("/sys/devices/virtual/tty/tty5/uevent").write_text("add\n")


def agent_log() -> str:
    """What the node's liken-devices agent logged since its container started."""
    return str(kubectl("-n", "liken-system", "logs", "ds/liken-devices", "--tail=-1",
                       timeout=60).stdout)


def test_the_health_stream_reaches_the_pods_status(node: str, k8s: dict[str, str]) -> None:
    """The plugin's health stream (KEP-4680) as the kubelet reports it in the pod's status:
    the device of the pod's claim, healthy while present, unhealthy once it is gone from the
    machine, and healthy again when it is back (docs/plugin.md, "Health")."""
    major, minor = (int(x) for x in k8s["kubernetes"].split(".")[:2])
    claim_pod("health", "0000:00:1e.0")
    try:
        ready_log("health")
        if (major, minor) < (1, 36):
            # ResourceHealthStatus is alpha and off before 1.36: the kubelet registers the plugin
            # (the pod got its device) and opens no health stream, over either version, and the
            # pod's status has no device health.
            statuses = get("-n", NS, "pod", "health")["status"].get("containerStatuses", [])
            assert not any(c.get("allocatedResourcesStatus") for c in statuses), statuses
            assert "opened a health stream" not in agent_log()
            return

        def reported() -> list[dict[str, Any]] | None:
            statuses = get("-n", NS, "pod", "health")["status"].get("containerStatuses", [])
            found = [r for c in statuses for s in c.get("allocatedResourcesStatus") or []
                     for r in s.get("resources") or []]
            return found or None
        resources = wait_for("the device's health in the pod's status", reported, timeout=120)
        # The kubelet names a DRA device there by its CDI device ID (docs/plugin.md,
        # "The CDI spec").
        uid = claim_uid("health")
        device = f"liken.sh/device={uid}-{SERIAL}"
        assert [(r["resourceID"], r.get("health")) for r in resources] == \
            [(device, "Healthy")], resources
        # From the plugin's side: the kubelet chose the health service's v1 where it has it
        # (1.37; rules: delivery.health-versions), its v1alpha1 before.
        want = "v1.DRAResourceHealth" if (major, minor) >= (1, 37) else \
            "v1alpha1.DRAResourceHealth"
        said = agent_log()
        assert f"the kubelet opened a health stream over {want}" in said, said[-3000:]

        def health(expected: str) -> bool:
            wake_the_agent()  # again each time: a uevent that came before a walk ended is seen
            return [(r["resourceID"], r.get("health")) for r in reported() or []] == \
                [(device, expected)]
        build_machine(TREE, serial=False)  # the card unplugged
        wait_for("the device unhealthy in the pod's status", lambda: health("Unhealthy"),
                 timeout=120, every=3)
        build_machine(TREE)  # and back
        wait_for("the device healthy again in the pod's status", lambda: health("Healthy"),
                 timeout=120, every=3)
    finally:
        build_machine(TREE)
        kubectl("-n", NS, "delete", "pod", "health", "--ignore-not-found", "--wait=true",
                "--timeout=120s", timeout=130, check=False)
        kubectl("-n", NS, "delete", "resourceclaim", "health", "--ignore-not-found",
                check=False)


OTHER = "node-status-b"  # a Node object with no kubelet, for another node's pod-bound token


def status_apply(token: str, claim: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    """What the agent sends: server-side apply of the claim's status.devices under the field
    manager liken.sh, with ``token`` (a pod-bound token of an agent)."""
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim, "namespace": NS}, "status": {"devices": devices}}
    out = inside("curl", "-sS", "-X", "PATCH", "--cacert", str(STATE / "config/pki/ca.crt"),
                 "-H", f"Authorization: Bearer {token}",
                 "-H", "Content-Type: application/apply-patch+yaml",
                 "-d", json.dumps(body),
                 f"https://127.0.0.1:6443/apis/resource.k8s.io/v1/namespaces/{NS}/"
                 f"resourceclaims/{claim}/status?fieldManager=liken.sh&force=true", check=False)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_the_claims_status_says_which_nodes_the_pod_got(node: str, k8s: dict[str, str]) -> None:
    """A prepared claim's status.devices on the real API server holds what the pod got: the
    paths its CDI spec delivers and the card's address, written by the agent under the field
    manager liken.sh; and a node's agent may write the entries of its own pool only
    (rules: delivery.claim-status)."""
    major, minor = (int(x) for x in k8s["kubernetes"].split(".")[:2])
    claim_pod("status", "0000:00:1e.0")
    try:
        log = ready_log("status")
        assert "/dev/tty5" in device_nodes(log)

        def entries() -> list[dict[str, Any]] | None:
            got: list[dict[str, Any]] | None = get("-n", NS, "resourceclaim", "status").get(
                "status", {}).get("devices")
            return got
        [entry] = wait_for("the claim's status.devices", entries, timeout=60)
        assert (entry["driver"], entry["pool"], entry["device"]) == ("liken.sh", node, SERIAL)
        assert entry["data"]["paths"] == ["/dev/tty5"] and entry["data"]["present"] is True
        assert entry["data"]["address"] == "0000:00:1e.0"
        claim = get("-n", NS, "resourceclaim", "status", "--show-managed-fields")
        managers = {(m["manager"], m.get("subresource")) for m in claim["metadata"]
                    ["managedFields"]}
        assert ("liken.sh", "status") in managers, managers

        # Another node's claim: allocated (by the admin, as a scheduler would) from pool OTHER.
        apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": OTHER}}])
        apply([{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "status-b", "namespace": NS},
                "spec": {"devices": {"requests": [{"name": "dev", "exactly": {
                    "deviceClassName": "node-tier-liken"}}]}}}])
        kubectl("-n", NS, "patch", "resourceclaim", "status-b", "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": {"allocation": {
                    "devices": {"results": [{"request": "dev", "driver": "liken.sh",
                                             "pool": OTHER, "device": SERIAL}]},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [OTHER]}]}]}}}}))
        theirs_entry = {"driver": "liken.sh", "pool": OTHER, "device": SERIAL,
                        "data": {"present": True, "paths": ["/dev/ttyS9"]}}
        mine = pod_token("liken-devices", node, "token-status-a")
        answer = status_apply(mine, "status-b", [theirs_entry])
        if (major, minor) >= (1, 37):
            # 1.37 itself refuses first: a driver's write of status.devices needs
            # "associated-node:patch" on resourceclaims/driver, and this claim is not on the
            # node the token names (the policy would refuse it next).
            assert answer.get("code") == 422 and "arbitrary-node:patch" in answer["message"], \
                answer
        else:
            assert answer.get("code") == 403 and "liken-node-scoped-writes" in \
                answer["message"] and f"pool {node}" in answer["message"], answer
        # The other node's own agent may: the refusal is the policy's, not the API's validation.
        theirs = pod_token("liken-devices", OTHER, "token-status-b")
        answer = status_apply(theirs, "status-b", [theirs_entry])
        assert answer.get("kind") == "ResourceClaim", answer
        assert answer["status"]["devices"][0]["data"]["paths"] == ["/dev/ttyS9"]
        # Nor may this node's agent remove them (an update that drops another pool's entry).
        kubectl("-n", NS, "patch", "resourceclaim", "status-b", "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": {"devices": None}}), token=mine,
                check=False)
        assert get("-n", NS, "resourceclaim", "status-b")["status"]["devices"][0]["pool"] == OTHER

        delete_pod("status")
        wait_for("the entries removed on unprepare",
                 lambda: not get("-n", NS, "resourceclaim", "status").get("status", {})
                 .get("devices"), timeout=60)
    finally:
        kubectl("-n", NS, "delete", "pod", "status", "--ignore-not-found", "--wait=true",
                "--timeout=120s", timeout=130, check=False)
        kubectl("-n", NS, "delete", "resourceclaim", "status", "status-b", "--ignore-not-found",
                check=False)
        kubectl("-n", "liken-system", "delete", "pod", "token-status-a", "token-status-b",
                "--ignore-not-found", "--wait=false", check=False)
        kubectl("delete", "node", OTHER, "--ignore-not-found", check=False)
