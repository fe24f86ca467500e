"""The per-claim CDI spec: what the container runtime injects for a prepared claim.

rules: delivery.nodes-only, delivery.cdi-spec. A claim delivers device nodes only, through a CDI
spec that names the /dev entries of that claim, and the workload reaches them through the group
membership its image gives its user. The form: one file per claim,
``<cdi dir>/liken.sh-<claimUID>.json``, kind ``liken.sh/device``, device names
``<claimUID>-<device name>``, at the lowest ``cdiVersion`` its content needs: 0.5.0, the first
that allows a device name starting with a digit (a claim UID may), and the newest that podman 4.3
accepts (``fileMode``, ``uid`` and ``gid`` are in the CDI specification's device node since its
first tagged version, 0.3.0). Each node is given with ``path``, ``type``, ``major`` and ``minor``
(the CDI specification's "minimally specified" node: the runtime creates it from the numbers
even where the host has no such node, as for Bluetooth's event nodes).

rules: delivery.mode-and-owner. Each node also carries ``fileMode`` (the
permission bits), ``uid`` and ``gid`` of the host's node, read with ``lstat`` whenever the spec is
built; without them the runtime makes the node 0666 (podman) or copies only the mode
(containerd), and the image's groups would not matter. A node the host does not have (or has at
that name with other numbers) takes the mode and owner of the host's ``/dev/uinput``; if even
that is missing, 0600 root:root (nothing is opened up that the host does not show).

While hardware is absent its nodes are paths under ``/dev/.liken.sh-absent/`` with no type or
numbers: a node that is not minimally specified must exist on the host, so the runtime's stat
fails and the container cannot start (rules: delivery.absent-node).

Files are written with the project's one atomic writer (:func:`liken_devices.files.write_atomic`:
no runtime ever loads a partial spec) and only when the bytes differ, so a reconcile pass that
changes nothing touches nothing. :func:`read_claim_spec` reads a spec back, as hostile input, so a
plugin whose state is lost rebuilds its claims from the specs (docs/plugin.md, "Bad input").
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..files import read_bounded, write_atomic
from ..inventory.bluetooth import UINPUT
from ..inventory.limits import DRIVER
from ..sysfs.model import DevNode
from ..sysfs.values import devname_problem
from .claimref import UID

KIND = f"{DRIVER}/device"
CDI_VERSION = "0.5.0"
ABSENT_ROOT = f"/dev/.{DRIVER}-absent"
SPEC_PREFIX = f"{DRIVER}-"
SPEC_SUFFIX = ".json"
SPEC_MODE = 0o644  # the runtime reads it; only root writes the CDI directory

DEV_DIR = Path("/dev")  # where this process sees the host's device nodes

# A published device name is a DNS label (rules: names.cut).
_DEVICE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


class SpecError(ValueError):
    """A claim UID or device name that cannot form a CDI spec."""


def check_uid(uid: str) -> str:
    """A claim UID about to name a file or the spec's devices, checked again (it was parsed
    where it entered: ``claimref``)."""
    if not UID.fullmatch(uid):
        raise SpecError(f"claim UID {uid!r} is not a UID (letters, digits and '-')")
    return uid


def check_device(name: str) -> str:
    if not _DEVICE.fullmatch(name):
        raise SpecError(f"device name {name!r} is not a DNS label")
    return name


def spec_path(cdi_dir: Path, uid: str) -> Path:
    return cdi_dir / f"{SPEC_PREFIX}{check_uid(uid)}{SPEC_SUFFIX}"


def cdi_name(uid: str, device: str) -> str:
    return f"{uid}-{device}"


def cdi_id(uid: str, device: str) -> str:
    """The fully-qualified CDI device ID the kubelet passes to the runtime."""
    return f"{KIND}={cdi_name(uid, device)}"


def absent_path(device: str, node_name: str) -> str:
    """A path that cannot exist: nothing ever creates ``/dev/.liken.sh-absent``."""
    return f"{ABSENT_ROOT}/{device}/{node_name}"


@dataclass(frozen=True, slots=True)
class Owner:
    """A host node's permission bits and owner, as the CDI entry carries them."""

    mode: int  # permission bits only (0o777): the CDI fileMode
    uid: int
    gid: int

    def to_json(self) -> dict[str, int]:
        return {"fileMode": self.mode, "uid": self.uid, "gid": self.gid}


ROOT_ONLY = Owner(0o600, 0, 0)


def host_owner(dev_dir: Path, node: DevNode) -> Owner | None:
    """The mode and owner of the host's node, when ``dev_dir/name`` is that very node.

    ``lstat``, as the runtime does: a symlink, a file or a node of other numbers at that name is
    not the node. A name that could leave ``dev_dir`` is never looked up.
    """
    if node.name.startswith("/") or ".." in node.name.split("/"):
        return None
    try:
        st = os.lstat(dev_dir / node.name)
    except (OSError, ValueError):
        return None
    is_kind = stat.S_ISCHR if node.type == "c" else stat.S_ISBLK
    if not is_kind(st.st_mode) or st.st_rdev != os.makedev(node.major, node.minor):
        return None
    return Owner(stat.S_IMODE(st.st_mode) & 0o777, st.st_uid, st.st_gid)


@dataclass(slots=True)
class HostNodes:
    """The host's nodes as one spec write sees them: each looked up once per build."""

    dev_dir: Path = DEV_DIR
    _seen: dict[DevNode, Owner] = field(default_factory=dict)

    def owner(self, node: DevNode) -> Owner:
        got = self._seen.get(node)
        if got is None:
            got = host_owner(self.dev_dir, node) or self.stand_in()
            self._seen[node] = got
        return got

    def stand_in(self) -> Owner:
        """A node stated by number that the host lacks takes /dev/uinput's mode and owner (root
        only without one; rules: delivery.mode-and-owner)."""
        got = self._seen.get(UINPUT)
        if got is None:
            got = host_owner(self.dev_dir, UINPUT) or ROOT_ONLY
            self._seen[UINPUT] = got
        return got


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one device of a claim delivers right now.

    ``present`` False means the hardware is away (or no longer published, e.g. a disk that now
    backs a storage role): ``nodes`` are then the last nodes it had, named under the absent root.
    """

    device: str
    nodes: tuple[DevNode, ...]
    present: bool

    def node_edits(self, host: HostNodes) -> list[dict[str, object]]:
        if self.present:
            return [n.to_json() | host.owner(n).to_json() for n in self.nodes]
        names = [n.name for n in self.nodes] or ["gone"]
        return [{"path": absent_path(self.device, name)} for name in names]


def build_spec(uid: str, deliveries: Sequence[Delivery], dev_dir: Path) -> dict[str, object]:
    """The CDI spec of one claim, with each present node's mode and owner read from ``dev_dir``
    now (the CDI specification: every device needs non-empty edits)."""
    check_uid(uid)  # it names the spec's devices: checked again, as for the file's name
    host = HostNodes(dev_dir)
    devices: list[dict[str, object]] = []
    seen: set[str] = set()
    for d in sorted(deliveries, key=lambda d: d.device):
        check_device(d.device)
        if d.device in seen:
            continue
        seen.add(d.device)
        edits = d.node_edits(host)
        if not edits:
            raise SpecError(f"device {d.device} delivers no node")
        devices.append({"name": cdi_name(uid, d.device), "containerEdits": {"deviceNodes": edits}})
    if not devices:
        raise SpecError(f"claim {uid} has no device of {DRIVER}")
    return {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": devices}


def render(spec: Mapping[str, object]) -> bytes:
    return (json.dumps(spec, indent=2, sort_keys=False) + "\n").encode()


def write_spec(cdi_dir: Path, uid: str, spec: Mapping[str, object]) -> bool:
    """Write a claim's spec through the project's one atomic writer (only when it differs)."""
    return write_atomic(spec_path(cdi_dir, uid), render(spec), mode=SPEC_MODE)


def remove_spec(cdi_dir: Path, uid: str) -> bool:
    """Delete a claim's spec; True when there was one (a missing one is fine)."""
    try:
        spec_path(cdi_dir, uid).unlink()
    except FileNotFoundError:
        return False
    return True


def spec_uids(cdi_dir: Path) -> list[str]:
    """The claim UIDs of the liken.sh specs present in ``cdi_dir``."""
    try:
        names = os.listdir(cdi_dir)
    except OSError:  # missing, or not a directory: no spec of ours
        return []
    out = []
    for name in names:
        if name.startswith(SPEC_PREFIX) and name.endswith(SPEC_SUFFIX):
            uid = name[len(SPEC_PREFIX):-len(SPEC_SUFFIX)]
            if UID.fullmatch(uid):
                out.append(uid)
    return sorted(out)


MAX_SPEC_BYTES = 4 << 20  # a claim's spec: at most 128 devices of a few dozen nodes each


def read_claim_spec(cdi_dir: Path, uid: str) -> list[Delivery]:
    """What a claim's spec on disk delivers, read back: the inverse of :func:`build_spec`.

    The spec names the claim (file name and device names), its devices and their nodes, so a
    plugin whose state is lost can rebuild the claim from it. Every field is checked as hostile
    input; anything that :func:`build_spec` would not have written raises :class:`SpecError`
    (or ``OSError`` when the file cannot be read).
    """
    raw = read_bounded(spec_path(cdi_dir, uid), MAX_SPEC_BYTES, noatime=True)  # leaves no trace
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise SpecError(f"not a JSON document: {e}") from None
    if not isinstance(obj, dict) or obj.get("kind") != KIND:
        raise SpecError(f"not a {KIND} spec")
    devices = obj.get("devices")
    if not isinstance(devices, list) or not devices:
        raise SpecError("no devices")
    out: list[Delivery] = []
    for d in devices:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            raise SpecError("a device without a name")
        name: str = d["name"]
        if not name.startswith(uid + "-"):
            raise SpecError(f"device {name!r} is not of claim {uid}")
        device = check_device(name[len(uid) + 1:])
        edits = d.get("containerEdits")
        nodes = edits.get("deviceNodes") if isinstance(edits, dict) else None
        if not isinstance(nodes, list) or not nodes:
            raise SpecError(f"device {device} has no device nodes")
        parsed = [_read_node(device, n) for n in nodes]
        present = {p for p, _ in parsed}
        if len(present) != 1:
            raise SpecError(f"device {device} is both present and absent")
        out.append(Delivery(device, tuple(n for _, n in parsed), present.pop()))
    return out


def _read_node(device: str, node: object) -> tuple[bool, DevNode]:
    """(present, node) of one ``deviceNodes`` entry. An absent node's numbers are not in the
    spec (it names a path that cannot exist): it comes back as ``c 0:0`` with its name."""
    if not isinstance(node, dict) or not isinstance(node.get("path"), str):
        raise SpecError(f"device {device}: a node without a path")
    path: str = node["path"]
    absent_prefix = f"{ABSENT_ROOT}/{device}/"
    if path.startswith(absent_prefix):
        return False, DevNode(check_node_name(path[len(absent_prefix):]), "c", 0, 0)
    if not path.startswith("/dev/"):
        raise SpecError(f"device {device}: node {path!r} is not under /dev")
    typ, major, minor = node.get("type"), node.get("major"), node.get("minor")
    if typ not in ("c", "b"):
        raise SpecError(f"device {device}: node {path!r} has type {typ!r}")
    for v in (major, minor):
        if type(v) is not int or not 0 <= v < 1 << 32:
            raise SpecError(f"device {device}: node {path!r} has number {v!r}")
    assert isinstance(major, int) and isinstance(minor, int)
    return True, DevNode(check_node_name(path[len("/dev/"):]), typ, major, minor)


def check_node_name(name: str) -> str:
    """A node's name read back from a file, checked by the readers' rule: it cannot leave /dev,
    and it is not in the absent root, which nothing creates: only a device's own absent path
    names it (rules: delivery.absent-node), never a node there."""
    if devname_problem(name) is not None:
        raise SpecError(f"device node name {name[:80]!r} is not a name under /dev")
    if name.split("/", 1)[0] == ABSENT_ROOT.removeprefix("/dev/"):
        raise SpecError(f"device node name {name[:80]!r} is in {ABSENT_ROOT}, where no node is")
    return name
