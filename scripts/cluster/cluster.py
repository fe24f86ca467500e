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
* every kernel setting under /proc/sys that changes while the cluster runs (the kubelet sets
  some: vm.overcommit_memory, kernel.panic, ...) is restored by `down`.

`down`, and `up` after a killed run, end only what the cluster started: the pids it recorded, the
processes inside its namespaces and the processes in its cgroups; then unmount, remove the
cgroups, the namespaces and the state directory. Only the binary cache stays.

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
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

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
LOCK = Path("/run/lock/liken-k8s.lock") if Path("/run/lock").is_dir() else CACHE / "lock"

NODE = "liken-node"
NODE_IP = "10.233.0.2"           # on a veth inside the cluster's own network namespace
CGROUP = "liken-k8s"
CGROUP_ROOT = Path("/sys/fs/cgroup")
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


def sysctls() -> dict[str, str]:
    """Every readable, writable kernel setting outside net/ (per network namespace)."""
    out: dict[str, str] = {}
    for path in Path("/proc/sys").rglob("*"):
        rel = path.relative_to("/proc/sys")
        if rel.parts[0] == "net" or rel.parts[:2] in VOLATILE:
            continue
        try:
            if not path.is_file() or not os.access(path, os.W_OK):
                continue
            out[str(rel)] = path.read_text()
        except OSError:
            continue
    return out


def restore_sysctls(saved: dict[str, str]) -> None:
    now = sysctls()
    for key, value in saved.items():
        if now.get(key) != value:
            try:
                Path("/proc/sys", key).write_text(value)
                say(f"restored {key.replace('/', '.')} to {value.strip()}")
            except OSError as err:
                say(f"could not restore {key}: {err}")


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
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def namespace_pids() -> set[int]:
    """Processes inside the cluster's network or mount namespace."""
    inodes = {i for i in (ns_inode(NET_NS), ns_inode(MNT_NS)) if i is not None}
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


def recorded_pids() -> dict[str, int]:
    try:
        return {k: int(v) for k, v in json.loads(PIDS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def record_pid(name: str, pid: int, cmd: list[str] | None = None) -> None:
    pids = recorded_pids()
    pids[name] = pid
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
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def cluster_pids() -> set[int]:
    pids = set(recorded_pids().values()) | namespace_pids() | cgroup_pids()
    return {p for p in pids if p != os.getpid() and alive(p)}


def kill_all() -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        pids = cluster_pids()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
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
                                start_new_session=True)
    record_pid(name, proc.pid, cmd)
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
        restore_sysctls(host["sysctls"])
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
        except BaseException:
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
    pids = recorded_pids()
    for name, pid in pids.items():
        print(f"{name:24} pid {pid:<8} {'running' if alive(pid) else 'NOT RUNNING'}")
    print(f"kubernetes v{info['kubernetes']}, node {info['node']} ({info['nodeIP']})")
    print(f"KUBECONFIG={info['kubeconfig']}")
    return 0 if all(alive(p) for p in pids.values()) and pids else 1


def cmd_restart(args: argparse.Namespace) -> int:
    """Stop one component (SIGTERM, then SIGKILL) and start it again as it was started: what a
    node's init does when the kubelet or containerd restarts."""
    cmd = read_json(COMMANDS).get(args.component)
    if cmd is None:
        raise ClusterError(f"no component {args.component!r}: {sorted(read_json(COMMANDS))}")
    pid = recorded_pids().get(args.component)
    if pid and alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
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
    sub.add_parser("down", help="stop everything the cluster started, or clean what a killed "
                                "run left; the host as it was")
    sub.add_parser("status", help="the components and the kubeconfig")
    rs = sub.add_parser("restart", help="restart one component (kubelet, containerd, ...)")
    rs.add_argument("component")
    sub.add_parser("images", help="import ./tasks image's images again into the running cluster")
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
                "restart": cmd_restart, "images": cmd_images}[args.verb](
            args)
    except (ClusterError, subprocess.CalledProcessError) as err:
        say(str(err))
        return 1


if __name__ == "__main__":
    sys.exit(main())
