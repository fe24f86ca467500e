#!/usr/bin/env python3
"""A single-node Kubernetes on this machine, for the tests: `./tasks cluster up|down|status|exec`.

The driver's promises (a slice the real API server stores, claims the real scheduler allocates,
devices the real kubelet and containerd hand to a container) can only be proven against the real
components. This script runs them, built from the Go module proxy by `build.sh`, contained so that
the host is left as it was:

* one network namespace of its own: every component listens on an address inside it (loopback,
  and a veth pair of its own for the node's IP, which the kubelet will not take from loopback);
  no interface leads out of it;
* one mount namespace of its own (root made rshared inside it only, as the kubelet needs for
  mount propagation), in which the directories the kubelet, containerd, the CNI plugins and the
  project's agents write to are bind-mounted from the cluster's state directory;
* one cgroup root (`/liken-k8s` in every v1 hierarchy) with a memory limit, which the kubelet
  uses as `cgroupRoot`;
* the kernel settings under /proc/sys that changed while `up` ran (the kubelet sets some:
  vm.overcommit_memory, kernel.panic, ...) are the cluster's own, recorded with the value it set;
  `down` puts back each of those whose value is still the one the cluster set, and no other
  (a setting another program changed, before or after the cluster's value, stays as it is; an
  `up` killed before it recorded its changes puts nothing back and names each difference).

Every component runs in the cluster's cgroup, and its record in pids.json is its pid with what
makes that pid this process: its start time (field 22 of /proc/PID/stat, clock ticks since
boot), the boot id and the cluster's network and mount namespaces. A pid is a number the kernel
hands out again once its process is gone (pid_max is 32768 on many hosts), so a pid is signalled
only while it still answers to that record and sits in the cluster's cgroup, checked through a
pidfd opened first, so that the number cannot change hands between the check and the signal.
A record without a start time (pids.json of an older cluster.py) proves nothing and is never
signalled; the line that says so names the pid, for the operator to check with `ps`.

`down`, and `up` after a killed run, end only what the cluster started: the processes in its
cgroups and inside its namespaces (each checked again through its pidfd); then unmount, remove
the cgroups, the namespaces and the state directory. Only the binary cache stays. `restart`
stops one component only while its record names it. The environment variables LIKEN_K8S_STATE,
LIKEN_K8S_CGROUP_ROOT, LIKEN_K8S_LOCK and LIKEN_K8S_SYSCTL_ROOT point the script elsewhere (the
tests plant a state directory of their own, away from a real cluster's).

Everything is stdlib Python, run as root. Versions come from versions.env.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import ssl
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CACHE = Path(os.environ.get("LIKEN_K8S_CACHE", "/var/cache/liken-k8s"))
STATE = Path(os.environ.get("LIKEN_K8S_STATE", "/var/lib/liken-k8s"))
NS_DIR = STATE / "ns"
NET_NS = NS_DIR / "net"
MNT_NS = NS_DIR / "mnt"
CONF = STATE / "config"
LOGS = STATE / "logs"
ROOTS = STATE / "roots"          # what is bind-mounted over host paths inside the mount namespace
RUN = STATE / "run"              # sockets
PIDS = STATE / "pids.json"
COMMANDS = STATE / "commands.json"  # each component's command line, for `restart`
HOST = STATE / "host.json"       # the host as it was: sysctls, created directories
INFO = STATE / "cluster.json"    # version, node name, addresses
LOCK = Path(os.environ["LIKEN_K8S_LOCK"]) if os.environ.get("LIKEN_K8S_LOCK") else \
    Path("/run/lock/liken-k8s.lock") if Path("/run/lock").is_dir() else CACHE / "lock"
SYSCTL_ROOT = Path(os.environ.get("LIKEN_K8S_SYSCTL_ROOT", "/proc/sys"))
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

NODE = "liken-node"
NODE_IP = "10.233.0.2"           # on a veth inside the cluster's own network namespace
CGROUP = "liken-k8s"
CGROUP_ROOT = Path(os.environ.get("LIKEN_K8S_CGROUP_ROOT", "/sys/fs/cgroup"))
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids",
                  "systemd")
MEMORY_LIMIT = 8 << 30
POD_SUBNET = "10.244.0.0/24"
SERVICE_RANGE = "10.96.0.0/24"
API_PORT = 6443

# Host paths that the cluster's processes write to, each replaced inside the mount namespace by
# a directory of the cluster's state (the host's own copy is never touched).
PRIVATE_PATHS = (
    "/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd",
    "/run/cdi", "/etc/cdi", "/run/netns", "/var/lib/cni", "/run/liken", "/var/lib/liken-devices",
    "/var/lib/liken-media", "/run/liken-media",
)

IMAGES = ("liken-devices", "liken-media")


def say(msg: str) -> None:
    print(f"cluster: {msg}", file=sys.stderr, flush=True)


class ClusterError(Exception):
    pass


# --- versions and binaries ---------------------------------------------------------------------

def versions() -> dict[str, str]:
    out = {}
    for line in (HERE / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key] = value
    return out


def bin_dirs(k8s: str) -> dict[str, Path]:
    v = versions()
    return {
        "k8s": CACHE / f"bin-k8s-{k8s}",
        "etcd": CACHE / f"bin-etcd-{v['ETCD_VERSION']}",
        "ctrd": CACHE / f"bin-ctrd-{v['CONTAINERD_VERSION']}",
        "runc": CACHE / f"bin-runc-{v['RUNC_VERSION']}-seccomp",
    }


def build(k8s: str) -> dict[str, Path]:
    dirs = bin_dirs(k8s)
    if not all((d / ".done").exists() for d in dirs.values()):
        subprocess.run([str(HERE / "build.sh"), k8s], check=True)
    return dirs


# --- the lock ----------------------------------------------------------------------------------

@contextlib.contextmanager
def locked() -> Iterator[None]:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another cluster command holds the lock; waiting")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# --- host state: sysctls, cgroups, processes ---------------------------------------------------

# Values the kernel itself changes all the time: not settings.
VOLATILE = {("kernel", "ns_last_pid"), ("kernel", "random"), ("fs", "dentry-state"),
            ("fs", "file-nr"), ("fs", "inode-nr"), ("fs", "inode-state")}


def sysctls(root: Path = SYSCTL_ROOT) -> dict[str, str]:
    """Every readable, writable kernel setting outside net/ (per network namespace)."""
    out: dict[str, str] = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if rel.parts[0] == "net" or rel.parts[:2] in VOLATILE:
            continue
        try:
            if not path.is_file() or not os.access(path, os.W_OK):
                continue
            out[str(rel)] = path.read_text()
        except OSError:
            continue
    return out


def changed(before: dict[str, str], now: dict[str, str]) -> dict[str, str]:
    """The settings whose value differs from ``before``, with their value now: taken when `up`
    ends, what the cluster set."""
    return {k: now[k] for k in before if k in now and now[k] != before[k]}


def dotted(key: str) -> str:
    return key.replace("/", ".")


def restore_sysctls(host: dict, root: Path = SYSCTL_ROOT) -> None:
    """Put back the settings the cluster changed (``host["set"]``, recorded by `up`) whose value
    is still the one it set; leave every other one as it is, whoever changed it."""
    before: dict[str, str] = host.get("sysctls", {})
    ours: dict[str, str] | None = host.get("set")
    now = sysctls(root)
    if ours is None:
        for key, value in before.items():
            if now.get(key, value) != value:
                say(f"{dotted(key)} is {now[key].strip()}, was {value.strip()} before up; not "
                    f"put back: this up ended before it recorded which settings it changed "
                    f"(sysctl -w {dotted(key)}={value.strip()} if the cluster set it)")
        return
    for key, value in ours.items():
        if key not in before or now.get(key) == before[key]:
            continue
        if now.get(key) != value:
            say(f"{dotted(key)} left at {now.get(key, '(gone)').strip()}: another program "
                f"changed it after the cluster set {value.strip()}")
            continue
        try:
            (root / key).write_text(before[key])
            say(f"restored {dotted(key)} to {before[key].strip()}")
        except OSError as err:
            say(f"could not restore {dotted(key)}: {err}")


def cgroup_dirs() -> list[Path]:
    return [CGROUP_ROOT / c / CGROUP for c in V1_CONTROLLERS if (CGROUP_ROOT / c).is_dir()] + \
        [CGROUP_ROOT / "unified" / CGROUP]


def make_cgroups() -> None:
    for d in cgroup_dirs():
        if not d.parent.is_dir():
            continue
        d.mkdir(exist_ok=True)
        if d.parent.name == "cpuset":
            for f in ("cpuset.cpus", "cpuset.mems"):
                (d / f).write_text((d.parent / f).read_text())
        if d.parent.name == "memory":
            (d / "memory.limit_in_bytes").write_text(str(MEMORY_LIMIT))


def join_cgroup() -> None:
    """In a component's child before it execs: into the cluster's cgroup in every hierarchy, so
    that the component (and all it starts) is found there, and is under its memory limit."""
    for d in cgroup_dirs():
        procs = d / "cgroup.procs"
        if procs.exists():
            procs.write_text("0")


def in_cgroup(text: str, name: str = CGROUP) -> bool:
    """Whether /proc/PID/cgroup's text (``ID:CONTROLLERS:PATH`` lines) puts the process in the
    top-level cgroup ``name`` or below it, in any hierarchy."""
    top = f"/{name}"
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[2] == top or parts[2].startswith(top + "/")):
            return True
    return False


def cgroup_pids() -> set[int]:
    pids: set[int] = set()
    for d in cgroup_dirs():
        if not d.is_dir():
            continue
        for procs in d.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return pids


def remove_cgroups() -> None:
    for d in cgroup_dirs():
        if not d.is_dir():
            continue
        subdirs = sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for sub in [*subdirs, d]:
            for _ in range(50):
                try:
                    sub.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                say(f"could not remove cgroup {sub}")


def ns_inode(path: Path) -> int | None:
    """The inode of the namespace bind-mounted at ``path`` (None when nothing is mounted there:
    the plain file's own inode would name no namespace)."""
    if str(path) not in host_mounts():
        return None
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def cluster_inodes() -> set[int]:
    return {i for i in (ns_inode(NET_NS), ns_inode(MNT_NS)) if i is not None}


def namespace_pids() -> set[int]:
    """Processes inside the cluster's network or mount namespace."""
    inodes = cluster_inodes()
    if not inodes:
        return set()
    pids = set()
    me = os.getpid()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        for kind in ("net", "mnt"):
            with contextlib.suppress(OSError):
                if os.stat(proc / "ns" / kind).st_ino in inodes:
                    pids.add(int(proc.name))
                    break
    return pids


# --- which process a pid is ------------------------------------------------------------------

def parse_stat(text: str) -> tuple[str, int] | None:
    """(state, start time) from the text of /proc/PID/stat, or None when it cannot be read.

    Field 2, the comm, is in parentheses and is whatever the process named itself: it may hold
    spaces, '(' and ')'. The fields after it begin after the LAST ')'. The start time is field
    22, clock ticks since boot (proc(5)): fixed for the life of a process, so a pid handed out
    again shows another one."""
    head, paren, rest = text.rpartition(")")
    if not paren or "(" not in head:
        return None
    fields = rest.split()
    if len(fields) < 20 or not (fields[19].isascii() and fields[19].isdigit()):
        return None
    return fields[0], int(fields[19])


class Seen(NamedTuple):
    """What /proc says about a pid now."""
    state: str
    start: int
    boot: str
    net: int | None
    mnt: int | None
    in_cgroup: bool


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def proc_ns(pid: int | str, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def observe(pid: int) -> Seen | None:
    try:
        parsed = parse_stat(Path(f"/proc/{pid}/stat").read_text())
        cgroups = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    if parsed is None:
        return None
    return Seen(parsed[0], parsed[1], boot_id(), proc_ns(pid, "net"), proc_ns(pid, "mnt"),
                in_cgroup(cgroups))


def record_pid_of(record: object) -> int | None:
    """The pid a record names, whatever its format (an older cluster.py wrote the bare number)."""
    if isinstance(record, dict):
        record = record.get("pid")
    if isinstance(record, int) and not isinstance(record, bool) and record > 0:
        return record
    if isinstance(record, str) and record.isascii() and record.isdigit():
        return int(record)
    return None


def mismatch(record: object, seen: Seen | None) -> str | None:
    """Why the process ``seen`` is not the one ``record`` names (None: it is, and it may be
    signalled). Anything short of a full record is a reason."""
    if seen is None or seen.state in ("Z", "X"):
        return "gone"
    fields = ("pid", "start", "boot", "net", "mnt")
    if not isinstance(record, dict) or not all(
            isinstance(record.get(f), int) and not isinstance(record.get(f), bool)
            for f in fields if f != "boot") or not isinstance(record.get("boot"), str):
        return ("recorded without its start time (pids.json of an older cluster.py, or a "
                "component gone before it was recorded): nothing proves it is the component")
    if record["boot"] != seen.boot:
        return "recorded on another boot"
    if record["start"] != seen.start:
        return (f"started at tick {seen.start}, the component at tick {record['start']}: "
                f"the pid was handed out again")
    if (record["net"], record["mnt"]) != (seen.net, seen.mnt):
        return "not in the cluster's namespaces"
    if not seen.in_cgroup:
        return f"not in the cluster's cgroup /{CGROUP}"
    return None


def signal_if(pid: int, sig: int, ours: Callable[[Seen | None], bool]) -> bool:
    """Send ``sig`` to ``pid`` if ``ours`` holds for the process that has it: checked after a
    pidfd is open, so a pid that changes hands meanwhile gets nothing (the pidfd names the
    process it was opened on, and a signal through it to a process gone fails)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if not ours(observe(pid)):
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def recorded_pids() -> dict[str, object]:
    """pids.json: each component's record (pid, start, boot, net, mnt)."""
    return read_json(PIDS)


def record_pid(name: str, pid: int, cmd: list[str] | None = None,
               inodes: tuple[int | None, int | None] | None = None) -> None:
    """Record a component just started: its pid, start time and boot, and the namespaces it
    runs in (``inodes``, else this process's own: `up` starts the components inside them)."""
    seen = observe(pid)
    net, mnt = inodes if inodes is not None else (proc_ns("self", "net"),
                                                  proc_ns("self", "mnt"))
    pids = recorded_pids()
    pids[name] = {"pid": pid, "start": seen.start if seen else None, "boot": boot_id(),
                  "net": net, "mnt": mnt}
    write_json(PIDS, pids)
    if cmd is not None:
        write_json(COMMANDS, {**read_json(COMMANDS), name: cmd})


def read_json(path: Path) -> dict:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def alive(pid: int) -> bool:
    seen = observe(pid)
    return seen is not None and seen.state not in ("Z", "X")


def is_cluster_process(seen: Seen | None, inodes: set[int]) -> bool:
    """A process of the cluster's: in its cgroup, or inside one of its namespaces."""
    if seen is None or seen.state in ("Z", "X"):
        return False
    return seen.in_cgroup or bool(inodes & {seen.net, seen.mnt})


def cluster_pids() -> set[int]:
    """The live processes in the cluster's cgroups and namespaces (a recorded component is in
    both; a record alone makes no pid the cluster's)."""
    inodes = cluster_inodes()
    pids = namespace_pids() | cgroup_pids()
    return {p for p in pids
            if p != os.getpid() and is_cluster_process(observe(p), inodes)}


def report_records(inodes: set[int]) -> None:
    """One line for each recorded pid that is alive, no longer the component and not otherwise
    the cluster's (in its cgroup or namespaces, where the sweep ends it): it is never signalled."""
    for name, record in recorded_pids().items():
        pid = record_pid_of(record)
        seen = observe(pid) if pid else None
        why = mismatch(record, seen)
        if pid and why and why != "gone" and alive(pid) and \
                not is_cluster_process(seen, inodes):
            say(f"{name}: pid {pid} not signalled: {why} (check it with `ps -p {pid}`; end it "
                f"yourself only if it is the cluster's)")


def kill_all() -> None:
    inodes = cluster_inodes()
    report_records(inodes)
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        pids = cluster_pids()
        if not pids:
            return
        for pid in pids:
            signal_if(pid, sig, lambda seen: is_cluster_process(seen, inodes))
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and cluster_pids():
            time.sleep(0.2)
    left = cluster_pids()
    if left:
        raise ClusterError(f"processes still running after SIGKILL: {sorted(left)}")


# --- namespaces ----------------------------------------------------------------------------------

def host_mounts() -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]


def make_namespaces() -> None:
    NS_DIR.mkdir(parents=True, exist_ok=True)
    # A namespace is kept alive by a bind mount of its /proc file; that mount must sit on a
    # private mount, or it would propagate into the new mount namespace itself.
    subprocess.run(["mount", "--bind", str(NS_DIR), str(NS_DIR)], check=True)
    subprocess.run(["mount", "--make-private", str(NS_DIR)], check=True)
    NET_NS.touch()
    MNT_NS.touch()
    subprocess.run(["unshare", f"--net={NET_NS}", f"--mount={MNT_NS}", "--propagation", "private",
                    "true"], check=True)


def remove_namespaces() -> None:
    for ns in (MNT_NS, NET_NS, NS_DIR):
        if str(ns) in host_mounts():
            subprocess.run(["umount", "-l", str(ns)], check=False)
    while str(NS_DIR) in host_mounts():
        subprocess.run(["umount", "-l", str(NS_DIR)], check=False)


def enter(cmd: list[str], cwd: str | None = None) -> list[str]:
    wd = [f"--wd={cwd}"] if cwd else []
    return ["nsenter", f"--net={NET_NS}", f"--mount={MNT_NS}", *wd, "--", *cmd]


# --- configuration -------------------------------------------------------------------------------

def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def make_pki() -> None:
    pki = CONF / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj",
            "/CN=liken-k8s-ca", "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"))
    sans = ",".join(["DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                     "DNS:localhost", f"DNS:{NODE}", "IP:127.0.0.1", f"IP:{NODE_IP}",
                     "IP:10.96.0.1"])
    for name, subj, ext in (
        ("apiserver", "/CN=kube-apiserver", f"subjectAltName={sans}"),
        ("kubelet", f"/CN={NODE}", f"subjectAltName=DNS:{NODE},IP:{NODE_IP},IP:127.0.0.1"),
        ("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
         "extendedKeyUsage=clientAuth"),
    ):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subj, "-keyout",
                str(pki / f"{name}.key"), "-out", str(pki / f"{name}.csr"))
        with tempfile.NamedTemporaryFile("w", suffix=".ext") as extfile:
            extfile.write(ext + "\n")
            extfile.flush()
            openssl("x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", str(pki / "ca.crt"),
                    "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "30", "-extfile",
                    extfile.name, "-out", str(pki / f"{name}.crt"))
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))


TOKENS = {
    "admin": ("admin", "system:masters"),
    "scheduler": ("system:kube-scheduler", ""),
    "controller-manager": ("system:kube-controller-manager", ""),
    "kubelet": (f"system:node:{NODE}", "system:nodes"),
}


def make_kubeconfigs() -> None:
    lines = []
    for i, (name, (user, group)) in enumerate(TOKENS.items()):
        token = os.urandom(16).hex()
        lines.append(f'{token},{user},uid-{i}' + (f',"{group}"' if group else ""))
        kubeconfig = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "liken-k8s", "cluster": {
                "server": f"https://127.0.0.1:{API_PORT}",
                "certificate-authority": str(CONF / "pki" / "ca.crt")}}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": "liken-k8s", "context": {"cluster": "liken-k8s",
                                                           "user": name}}],
            "current-context": "liken-k8s",
        }
        path = CONF / f"{name}.kubeconfig"
        path.write_text(json.dumps(kubeconfig, indent=1))
        path.chmod(0o600)
    tokens = CONF / "tokens.csv"
    tokens.write_text("\n".join(lines) + "\n")
    tokens.chmod(0o600)


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


def write_configs(ctrd: Path, runc: Path) -> None:
    (CONF / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
    (CONF / "resolv.conf").write_text("# the test cluster has no DNS\n")
    cni = CONF / "cni"
    cni.mkdir(exist_ok=True)
    (cni / "10-liken-k8s.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": "liken-k8s", "plugins": [
            {"type": "bridge", "bridge": "liken0", "isGateway": True, "ipMasq": False,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]]}}]}))
    sock = RUN / "containerd.sock"
    (CONF / "containerd.toml").write_text(f"""\
version = 3
root = "{STATE / 'containerd'}"
state = "{RUN / 'containerd'}"
[grpc]
  address = "{sock}"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "localhost/liken-pause:ci"
[plugins.'io.containerd.cri.v1.runtime']
  # Root here lacks CAP_SYS_RESOURCE (a VM's privileged container), so no process may lower its
  # oom_score_adj: the kubelet's -997/-998 for node-critical pods (the project's DaemonSets)
  # would fail every sandbox. Clamp to containerd's own value instead.
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
      BinaryName = "{runc / 'runc'}"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni}"
""")
    pki = CONF / "pki"
    (CONF / "kubelet.yaml").write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP}",
        "cgroupsPerQOS": True,
        "containerRuntimeEndpoint": f"unix://{sock}",
        "address": NODE_IP,
        "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        "tlsCertFile": str(pki / "kubelet.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "AlwaysAllow"},
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "failSwapOn": False,
        "resolvConf": str(CONF / "resolv.conf"),
        "maxPods": 60,
        "rotateCertificates": False,
        "syncFrequency": "10s",
    }))


# --- running components ------------------------------------------------------------------------

def start(name: str, cmd: list[str], wrap: bool = False) -> subprocess.Popen[bytes]:
    """Start a component in a session of its own, its output in logs/NAME.log; with ``wrap``,
    from the host, through nsenter into the cluster's namespaces."""
    LOGS.mkdir(parents=True, exist_ok=True)
    with open(LOGS / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(enter(cmd) if wrap else cmd, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=join_cgroup)
    # From the host, nsenter enters the namespaces after this returns: record the cluster's.
    record_pid(name, proc.pid, cmd, (ns_inode(NET_NS), ns_inode(MNT_NS)) if wrap else None)
    return proc


def wait_for(what: str, check, timeout: float, proc: subprocess.Popen[bytes] | None = None,
             log: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ClusterError(f"{what}: the process exited ({proc.returncode}); "
                               f"see {LOGS / (log or what)}.log")
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise ClusterError(f"{what} not ready after {timeout:.0f} s; see {LOGS}")


def http_ok(url: str, token: str | None = None) -> bool:
    ctx = ssl.create_default_context(cafile=str(CONF / "pki" / "ca.crt"))
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=3, context=ctx) as resp:
        return resp.status == 200


def admin_token() -> str:
    return json.loads((CONF / "admin.kubeconfig").read_text())["users"][0]["user"]["token"]


def kubectl(k8s_bin: Path, *args: str, check: bool = True,
            capture: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(k8s_bin / "kubectl"), f"--kubeconfig={CONF / 'admin.kubeconfig'}",
                           *args], check=check, text=True, capture_output=capture)


def controllers(k8s: str) -> str:
    """The controller manager's controllers: all but node IPAM (the CNI config gives the pod
    range). The cloud controllers, which need a cloud provider, are named off up to 1.36; 1.37
    no longer has them and refuses a name it does not know."""
    off = ["node-ipam-controller"]
    if tuple(int(x) for x in k8s.split(".")[:2]) < (1, 37):
        off += ["service-lb-controller", "cloud-node-lifecycle-controller"]
    return "--controllers=*," + ",".join(f"-{c}" for c in off)


def inside_up(k8s: str) -> None:
    """Runs inside the cluster's namespaces: network, mounts, components, images."""
    dirs = bin_dirs(k8s)
    kb, pki = dirs["k8s"], CONF / "pki"
    # The network: loopback, and a veth pair for the node's address (nothing leads out).
    for cmd in (["ip", "link", "set", "lo", "up"],
                ["ip", "link", "add", "lk-node", "type", "veth", "peer", "name", "lk-peer"],
                ["ip", "addr", "add", f"{NODE_IP}/24", "dev", "lk-node"],
                ["ip", "link", "set", "lk-node", "up"], ["ip", "link", "set", "lk-peer", "up"],
                ["ip", "route", "add", "default", "dev", "lk-node"]):
        subprocess.run(cmd, check=True)
    # Mounts: shared inside this namespace only, and the private directories.
    subprocess.run(["mount", "--make-rshared", "/"], check=True)
    for path in PRIVATE_PATHS:
        src = ROOTS / path.lstrip("/")
        src.mkdir(parents=True, exist_ok=True)
        Path(path).mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(src), path], check=True)
    (STATE / "etcd").mkdir(exist_ok=True)

    etcd = start("etcd", [str(dirs["etcd"] / "etcd"), f"--data-dir={STATE / 'etcd'}",
                          "--listen-client-urls=http://127.0.0.1:2379",
                          "--advertise-client-urls=http://127.0.0.1:2379",
                          "--listen-peer-urls=http://127.0.0.1:2380",
                          "--unsafe-no-fsync", "--log-level=warn"])
    wait_for("etcd", lambda: urllib.request.urlopen("http://127.0.0.1:2379/health", timeout=2)
             .status == 200, 60, etcd)
    api = start("kube-apiserver", [
        str(kb / "kube-apiserver"), "--etcd-servers=http://127.0.0.1:2379",
        "--bind-address=0.0.0.0", f"--secure-port={API_PORT}", f"--advertise-address={NODE_IP}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--token-auth-file={CONF / 'tokens.csv'}",
        "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
        f"--service-cluster-ip-range={SERVICE_RANGE}", "--allow-privileged=true",
        "--service-account-issuer=https://kubernetes.default.svc",
        "--api-audiences=https://kubernetes.default.svc",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        # The node's name resolves nowhere (no DNS inside the cluster's namespace): reach the
        # kubelet (logs, exec) at its address.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--audit-policy-file={CONF / 'audit-policy.json'}",
        f"--audit-log-path={LOGS / 'audit.log'}", "--audit-log-format=json",
        "--audit-log-maxsize=200", "--audit-log-maxbackup=1",
        "--profiling=false",
    ])
    token = admin_token()
    wait_for("kube-apiserver", lambda: http_ok(f"https://127.0.0.1:{API_PORT}/readyz", token),
             180, api)
    start("kube-controller-manager", [
        str(kb / "kube-controller-manager"),
        f"--kubeconfig={CONF / 'controller-manager.kubeconfig'}",
        "--bind-address=127.0.0.1", "--leader-elect=false",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}", "--use-service-account-credentials=true",
        controllers(k8s),
    ])
    start("kube-scheduler", [
        str(kb / "kube-scheduler"), f"--kubeconfig={CONF / 'scheduler.kubeconfig'}",
        "--bind-address=127.0.0.1", "--leader-elect=false",
    ])
    RUN.mkdir(parents=True, exist_ok=True)
    ctrd = start("containerd", [str(dirs["ctrd"] / "containerd"),
                                f"--config={CONF / 'containerd.toml'}"])
    sock = RUN / "containerd.sock"
    ctr = [str(dirs["ctrd"] / "ctr"), f"--address={sock}", "--namespace=k8s.io"]
    wait_for("containerd", lambda: subprocess.run([*ctr, "version"], capture_output=True)
             .returncode == 0, 60, ctrd)
    import_images(ctr)
    kubelet = start("kubelet", [
        str(kb / "kubelet"), f"--config={CONF / 'kubelet.yaml'}",
        f"--kubeconfig={CONF / 'kubelet.kubeconfig'}", f"--hostname-override={NODE}",
        f"--node-ip={NODE_IP}",
    ])

    def node_ready() -> bool:
        out = kubectl(kb, "get", "node", NODE, "-o",
                      "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}").stdout
        return out.strip() == "True"
    wait_for("node", node_ready, 180, kubelet, log="kubelet")
    # The default service account exists before a test creates pods in "default".
    wait_for("service account", lambda: kubectl(kb, "get", "serviceaccount", "default",
                                                check=False).returncode == 0, 60)


def import_images(ctr: list[str]) -> None:
    work = STATE / "images"
    work.mkdir(exist_ok=True)
    pause = build_pause(work)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.run([*ctr, "images", "import", str(pause)], check=True, **quiet)
    wanted = [("localhost/liken-bbox:latest", "localhost/liken-bbox:ci")]
    version = project_version()
    wanted += [(f"localhost/{p}:{version}", f"localhost/{p}:{version}") for p in IMAGES]
    for source, target in wanted:
        if subprocess.run(["podman", "image", "exists", source]).returncode != 0:
            say(f"image {source} not built (./tasks image); not imported")
            continue
        archive = work / (target.rsplit("/", 1)[1].replace(":", "_") + ".tar")
        subprocess.run(["podman", "save", "-q", "--format", "docker-archive", "-o", str(archive),
                        source, ], check=True)
        subprocess.run([*ctr, "images", "import", str(archive)], check=True, **quiet)
        if source != target:
            subprocess.run([*ctr, "images", "tag", "--force", source, target], check=True,
                           **quiet)
        archive.unlink()


def project_version() -> str:
    import tomllib
    with open(REPO / "pyproject.toml", "rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


PAUSE_C = r"""
#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>
static void stop(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGTERM, stop); signal(SIGINT, stop); signal(SIGCHLD, reap);
  for (;;) pause();
}
"""


def build_pause(work: Path) -> Path:
    """The sandbox image: a static pause program as a one-layer docker archive."""
    src, binary = work / "pause.c", work / "pause"
    src.write_text(PAUSE_C)
    subprocess.run(["gcc", "-static", "-O2", "-o", str(binary), str(src)], check=True)
    layer = work / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        info = tar.gettarinfo(str(binary), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        with open(binary, "rb") as fh:
            tar.addfile(info, fh)
    import hashlib
    diff = "sha256:" + hashlib.sha256(layer.read_bytes()).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Entrypoint": ["/pause"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": ["localhost/liken-pause:ci"],
                            "Layers": ["layer.tar"]}]).encode()
    archive = work / "pause.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(str(layer), arcname="layer.tar")
        for name, data in ((config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            import io
            tar.addfile(info, io.BytesIO(data))
    return archive


# --- the host, before and after ---------------------------------------------------------------

def snapshot() -> dict[str, object]:
    """What the cluster may change on the host: mounts, cgroups, kernel settings, network
    interfaces and namespaces, and processes running the cluster's binaries."""
    mounts = sorted({" ".join(line.split()[4:5] + line.split(" - ")[1].split()[:1])
                     for line in Path("/proc/self/mountinfo").read_text().splitlines()})
    cgroups = sorted(str(p.relative_to(CGROUP_ROOT)) for p in CGROUP_ROOT.glob("*/*")
                     if p.is_dir() and not p.name.startswith("process_api"))
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    netns = sorted(p.name for p in Path("/run/netns").iterdir()) if Path("/run/netns").is_dir() \
        else []
    ours = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                exe = os.readlink(proc / "exe")
                if exe.startswith(str(CACHE)) or exe.endswith("/pause"):
                    ours.append(exe)
    return {"mounts": mounts, "cgroups": cgroups, "sysctls": sysctls(),
            "links": sorted(line.split(":")[1].strip().split("@")[0]
                            for line in links.splitlines()),
            "netns": netns, "processes": sorted(ours),
            "paths": sorted(p for p in PRIVATE_PATHS if Path(p).exists())}


# --- commands ----------------------------------------------------------------------------------

def running() -> bool:
    return INFO.exists() and bool(cluster_pids())


def teardown() -> None:
    """End everything the cluster started and leave the host as it was."""
    if not STATE.exists():
        return
    kill_all()
    remove_namespaces()
    remove_cgroups()
    with contextlib.suppress(OSError, ValueError):
        host = json.loads(HOST.read_text())
        restore_sysctls(host)
        for d in sorted(host.get("created", []), key=len, reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(d)
    # Bind mounts live only in the namespace that ended with its processes; nothing of ours is
    # mounted on the host any more, so the state directory can go.
    leftover = [m for m in host_mounts() if m.startswith(str(STATE))]
    if leftover:
        raise ClusterError(f"still mounted: {leftover}")
    shutil.rmtree(STATE)


def cmd_up(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        raise ClusterError("needs root")
    k8s = args.kubernetes or versions()["KUBERNETES_VERSION"]
    with locked():
        build(k8s)
        if STATE.exists():
            say("a previous cluster's state is here: removing it first")
            teardown()
        started = time.monotonic()
        STATE.mkdir(parents=True)
        CONF.mkdir()
        created = [p for p in PRIVATE_PATHS if not Path(p).exists()]
        HOST.write_text(json.dumps({"sysctls": sysctls(), "created": created}))
        INFO.write_text(json.dumps({"kubernetes": k8s, "node": NODE, "nodeIP": NODE_IP,
                                    "apiServer": f"https://{NODE_IP}:{API_PORT}",
                                    "kubeconfig": str(CONF / "admin.kubeconfig")}))
        try:
            make_pki()
            make_kubeconfigs()
            dirs = bin_dirs(k8s)
            write_configs(dirs["ctrd"], dirs["runc"])
            make_cgroups()
            make_namespaces()
            subprocess.run(enter([sys.executable, str(Path(__file__).resolve()), "_inside-up",
                                  k8s]), check=True)
            record_changes()
        except BaseException:
            record_changes()
            keep = STATE.parent / "liken-k8s-failed-logs"
            say(f"up failed; its logs are kept in {keep}; tearing down")
            shutil.rmtree(keep, ignore_errors=True)
            with contextlib.suppress(OSError):
                shutil.copytree(LOGS, keep)
            teardown()
            raise
        say(f"node {NODE} Ready (Kubernetes v{k8s}) in {time.monotonic() - started:.1f} s")
    print(f"KUBECONFIG={CONF / 'admin.kubeconfig'}")
    return 0


def record_changes() -> None:
    """The kernel settings `up` changed (the kubelet's tunables), with the value each has now:
    what `down` may put back."""
    with contextlib.suppress(OSError, ValueError):
        host = json.loads(HOST.read_text())
        host["set"] = changed(host["sysctls"], sysctls())
        write_json(HOST, host)


def cmd_down(args: argparse.Namespace) -> int:
    with locked():
        teardown()
    say("down: the host is as it was")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    if not INFO.exists():
        print("cluster: not running")
        return 3
    info = json.loads(INFO.read_text())
    ok = bool(records := recorded_pids())
    for name, record in records.items():
        pid = record_pid_of(record)
        why = mismatch(record, observe(pid) if pid else None)
        ok = ok and why is None
        print(f"{name:24} pid {pid or '?':<8} "
              f"{'running' if why is None else 'NOT RUNNING: ' + why}")
    print(f"kubernetes v{info['kubernetes']}, node {info['node']} ({info['nodeIP']})")
    print(f"KUBECONFIG={info['kubeconfig']}")
    return 0 if ok else 1


def cmd_restart(args: argparse.Namespace) -> int:
    """Stop one component (SIGTERM, then SIGKILL) and start it again as it was started: what a
    node's init does when the kubelet or containerd restarts."""
    cmd = read_json(COMMANDS).get(args.component)
    if cmd is None:
        raise ClusterError(f"no component {args.component!r}: {sorted(read_json(COMMANDS))}")
    record = recorded_pids().get(args.component)
    pid = record_pid_of(record)
    if pid:
        def still(seen: Seen | None) -> bool:
            return mismatch(record, seen) is None
        why = mismatch(record, observe(pid))
        if why is None:
            signal_if(pid, signal.SIGTERM, still)
            deadline = time.monotonic() + 15
            while still(observe(pid)) and time.monotonic() < deadline:
                time.sleep(0.1)
            signal_if(pid, signal.SIGKILL, still)
        elif why != "gone":
            say(f"{args.component}: pid {pid} not signalled: {why}")
            if not isinstance(record, dict) or record.get("start") is None:
                raise ClusterError(f"{args.component} may still run unrecorded: "
                                   f"./tasks cluster down, then up")
    if not cluster_inodes():
        raise ClusterError("not running: ./tasks cluster up")
    start(args.component, cmd, wrap=True)
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    """Import the images again (after `./tasks image`) into the running cluster's containerd."""
    if not INFO.exists():
        raise ClusterError("not running: ./tasks cluster up")
    info = json.loads(INFO.read_text())
    ctrd = bin_dirs(info["kubernetes"])["ctrd"]
    ctr = [str(ctrd / "ctr"), f"--address={RUN / 'containerd.sock'}", "--namespace=k8s.io"]
    subprocess.run(enter([sys.executable, str(Path(__file__).resolve()), "_inside-images",
                          *ctr]), check=True)
    return 0


KEEP_BYTES = int(os.environ.get("LIKEN_K8S_KEEP_BYTES", 8 << 20))  # of each log: its end


def keep_file(src: Path, dest: Path, limit: int = KEEP_BYTES) -> None:
    """Copy the last ``limit`` bytes of the regular file ``src`` (never what a symlink names)."""
    with open(src, "rb", opener=lambda path, flags: os.open(path, flags | os.O_NOFOLLOW)) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return
        size = st.st_size
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "wb") as out:
            if size > limit:
                fh.seek(size - limit)
                out.write(f"[cluster logs: the first {size - limit} bytes left out]\n".encode())
            shutil.copyfileobj(fh, out)


def keep_logs(dest: Path, limit: int = KEEP_BYTES) -> list[Path]:
    """What the cluster saw, before `down` removes it: each component's log and the API server's
    audit log (logs/), and every pod's container logs (the kubelet's /var/log/pods, the
    cluster's own copy in roots/), the end of each file. Returns the files kept."""
    kept = []
    sources = [(LOGS, dest / "components"), (ROOTS / "var" / "log" / "pods", dest / "pods")]
    for root, into in sources:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            target = into / path.relative_to(root)
            with contextlib.suppress(OSError):
                keep_file(path, target, limit)
                kept.append(target)
    return kept


def cmd_logs(args: argparse.Namespace) -> int:
    if not STATE.exists():
        raise ClusterError(f"no cluster state in {STATE}: nothing to keep")
    dest = Path(args.dest)
    kept = keep_logs(dest)
    say(f"kept {len(kept)} logs in {dest}")
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    if not INFO.exists():
        raise ClusterError("not running: ./tasks cluster up")
    info = json.loads(INFO.read_text())
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise ClusterError("exec needs a command: ./tasks cluster exec -- CMD...")
    dirs = bin_dirs(info["kubernetes"])
    # kubectl, and ctr talking to the cluster's containerd (CONTAINERD_ADDRESS).
    env = dict(os.environ, KUBECONFIG=info["kubeconfig"],
               PATH=f"{dirs['k8s']}:{dirs['ctrd']}:{os.environ.get('PATH', '')}",
               CONTAINERD_ADDRESS=str(RUN / "containerd.sock"),
               LIKEN_K8S_NODE=info["node"], LIKEN_K8S_API=info["apiServer"],
               LIKEN_K8S_VERSION=info["kubernetes"], LIKEN_K8S_STATE=str(STATE))
    os.execvpe("nsenter", enter(cmd, os.getcwd()), env)
    return 127


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="./tasks cluster",
        description="A single-node Kubernetes (etcd, kube-apiserver, kube-controller-manager, "
                    "kube-scheduler, kubelet, containerd) built from the Go module proxy, "
                    "contained in its own network and mount namespaces and cgroup.")
    sub = parser.add_subparsers(dest="verb", required=True)
    up = sub.add_parser("up", help="build (cached) and start; the last line is KUBECONFIG=...")
    up.add_argument("--kubernetes", metavar="VERSION",
                    default=os.environ.get("LIKEN_KUBERNETES_VERSION") or None,
                    help="Kubernetes version (default: $LIKEN_KUBERNETES_VERSION, else "
                         "versions.env's KUBERNETES_VERSION)")
    down_help = ("stop everything the cluster started, or clean what a killed run left, and "
                 "only that (the processes in its cgroup and namespaces; a recorded pid only "
                 "while it is still the component); put back the kernel settings up changed "
                 "that still hold its values")
    sub.add_parser("down", help=down_help, description=down_help[0].upper() + down_help[1:] +
                   ". A live pid that pids.json names but that is no longer the component "
                   "(another start time, outside the cluster's cgroup, or a pids.json of an "
                   "older version) is left alone and named on stderr.")
    sub.add_parser("status", help="the components and the kubeconfig")
    restart_help = ("restart one component (kubelet, containerd, ...); its old pid is "
                    "signalled only while it is still that component")
    rs = sub.add_parser("restart", help=restart_help,
                        description=restart_help[0].upper() + restart_help[1:] + ".")
    rs.add_argument("component")
    sub.add_parser("images", help="import ./tasks image's images again into the running cluster")
    logs = sub.add_parser("logs", help="copy the components' logs, the audit log and the pods' "
                                       "logs (the end of each) to DEST, before down removes "
                                       "them")
    logs.add_argument("dest", metavar="DEST")
    sub.add_parser("snapshot", help="print the host's state that the cluster may change (JSON)")
    ex = sub.add_parser("exec", help="run CMD inside the cluster's namespaces, with KUBECONFIG")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    inside = sub.add_parser("_inside-up")
    inside.add_argument("k8s")
    inside_images = sub.add_parser("_inside-images")
    inside_images.add_argument("ctr", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if args.verb == "_inside-up":
            inside_up(args.k8s)
            return 0
        if args.verb == "_inside-images":
            import_images(args.ctr)
            return 0
        if args.verb == "snapshot":
            print(json.dumps(snapshot(), indent=1))
            return 0
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status, "exec": cmd_exec,
                "restart": cmd_restart, "images": cmd_images, "logs": cmd_logs}[args.verb](
            args)
    except (ClusterError, subprocess.CalledProcessError) as err:
        say(str(err))
        return 1


if __name__ == "__main__":
    sys.exit(main())
