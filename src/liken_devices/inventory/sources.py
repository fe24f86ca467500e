"""Where each walk reads from: sysfs (or a recording), the facts tree, the machine file, catalogs.

The I/O at the policy's edge. :class:`Sources` holds the paths (all options, so tests pass their
own), produces a fresh :class:`~.context.Context` and snapshot for each walk, and owns what one
walk may reuse from the last (:class:`~.attributes.AttributeMemo`).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from ..errors import InputError
from ..files import FileTooLarge, read_bounded
from ..sysfs.model import Snapshot
from ..sysfs.reader import ReaderMemo, read_sysfs
from .attributes import AttributeMemo
from .catalogs import Catalogs
from .context import Context
from .limits import MAX_ROLES
from .model import NO_CLAIMS, Claimed, Facts, Inventory, MachineSpec
from .policy import build_inventory

# A role's ``device`` file holds a kernel block device name: at most 31 characters (the
# kernel's DISK_NAME_LEN is 32 with the NUL), no ``/``, no space ("nvme0n1p3", "mmcblk0p2",
# "dm-0", "cciss!c0d0p1"); "/dev/" written in front is tolerated.
PARTITION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.!+:-]{0,30}")  # fullmatch
MAX_FACT_BYTES = 64


class FactsUnreadable(Exception):
    """The facts tree is not one the policy can trust; the message says why."""


NO_FACTS = ("no facts were given for this machine (another machine's facts are its own: "
            "--facts DIR), so its disks are withheld")


def read_facts(root: Path | None) -> Facts:
    """Storage roles from init's facts tree; unreadable facts mean no disk is offered.

    rules: hardware.facts-fail-closed. Readable only when ``storage/`` is a directory that can be
    listed, every entry in it is a directory whose ``device`` file reads as a non-empty kernel
    partition name, and nothing on the way is a dangling or looping link. A facts root with no
    ``storage/`` at all means "no roles". ``None``: another machine's walk given no facts
    (rules: hardware.other-machines-facts).
    """
    if root is None:
        return Facts(None, NO_FACTS, given=False)
    try:
        return Facts(_storage_roles(root))
    except FactsUnreadable as exc:
        return Facts(None, str(exc))
    except OSError as exc:  # a root the kernel refuses to look up (a name too long): unreadable
        return Facts(None, f"facts root cannot be read: {exc.strerror}")


def _storage_roles(root: Path) -> frozenset[str]:
    if not root.is_dir():
        raise FactsUnreadable(f"facts root {root} does not exist")
    storage = root / "storage"
    if not os.path.lexists(storage):
        return frozenset()
    try:
        st = os.stat(storage)
        if not stat.S_ISDIR(st.st_mode):
            raise FactsUnreadable(f"{storage} is not a directory")
        roles = sorted(os.listdir(storage))
    except OSError as exc:
        raise FactsUnreadable(f"cannot read {storage}: {exc.strerror or exc}") from None
    if len(roles) > MAX_ROLES:
        raise FactsUnreadable(f"{storage} holds more than {MAX_ROLES} roles")
    return frozenset(_role_partition(storage / role) for role in roles)


def _role_partition(role: Path) -> str:
    """The partition ``<role>/device`` names, or :class:`FactsUnreadable`."""
    try:
        if not stat.S_ISDIR(os.stat(role).st_mode):
            raise FactsUnreadable(f"storage role {role} is not a directory")
        raw = read_bounded(role / "device", MAX_FACT_BYTES, follow_symlinks=True)
    except FileTooLarge:
        raise FactsUnreadable(f"{role}/device is longer than a partition name") from None
    except OSError as exc:
        raise FactsUnreadable(f"cannot read {role}/device: {exc.strerror or exc}") from None
    value = raw.decode("ascii", errors="replace").strip().removeprefix("/dev/")
    if not PARTITION_NAME.fullmatch(value):
        what = "is empty" if not value else f"holds {value[:40]!r}, not a partition name"
        raise FactsUnreadable(f"{role}/device {what}")
    return value


FactsStamp = tuple[tuple[str, int, int, int, int] | tuple[str, str], ...]


def facts_stamp(root: Path | None) -> FactsStamp:
    """What changes when init's facts change: inode, mode, size and mtime of the root, of
    ``storage/``, and of each role's directory and ``device`` file (links followed and not), or
    the error met. Two equal stamps mean the facts read the same, so a walk taken under the
    first still holds (the kubelet plugin reuses it instead of walking again).

    It covers every role :func:`read_facts` accepts (``MAX_ROLES``, one number in
    ``limits.py``): a role it left out could move onto an offered disk unseen
    (rules: delivery.fresh-walk). Past that number the reader refuses the facts whatever the roles
    hold, so the stamp notes only how many there are."""
    out: list[tuple[str, int, int, int, int] | tuple[str, str]] = []
    if root is None:
        return ()

    def note(path: Path, follow: bool = True) -> None:
        try:
            st = os.stat(path, follow_symlinks=follow)
        except OSError as exc:
            out.append((str(path), exc.strerror or str(exc)))
            return
        out.append((str(path), st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns))

    storage = root / "storage"
    for path in (root, storage):
        note(path)
    try:
        roles = sorted(os.listdir(storage))
    except OSError:
        roles = []
    if len(roles) > MAX_ROLES:
        out.append((str(storage), f"{len(roles)} roles"))
        return tuple(out)
    for role in roles:
        for path in (storage / role, storage / role / "device"):
            note(path, follow=False)
            note(path)
    return tuple(out)


def default_modules_dir() -> Path:
    return Path("/lib/modules") / os.uname().release


def default_hwdata_dir() -> Path:
    for candidate in ("/usr/share/hwdata", "/usr/share/misc"):
        if (Path(candidate) / "pci.ids").exists():
            return Path(candidate)
    return Path("/usr/share/hwdata")


class Sources:
    """Where each walk reads from. Exactly one of ``sysfs`` and ``recording`` is used.

    ``hwdata_dir`` is one directory, or several: each ID file is read from the first that has a
    readable copy. A Sources keeps what one walk may reuse from the last (its memos), never
    shared with another."""

    def __init__(self, sysfs: Path = Path("/sys"), facts: Path | None = Path("/run/liken/facts"),
                 machine_file: Path | None = None, modules_dir: Path | None = None,
                 hwdata_dir: Path | tuple[Path, ...] | None = None,
                 recording: Path | None = None) -> None:
        self.sysfs = sysfs
        self.facts = facts
        self.machine_file = machine_file
        self.modules_dir = modules_dir if modules_dir is not None else default_modules_dir()
        self.hwdata_dir = hwdata_dir if hwdata_dir is not None else default_hwdata_dir()
        self.recording = recording
        self._catalogs: Catalogs | None = None
        self.memo = AttributeMemo()
        self.reader_memo = ReaderMemo()

    def __repr__(self) -> str:
        where = f"recording={self.recording}" if self.recording is not None \
            else f"sysfs={self.sysfs}"
        return f"Sources({where}, facts={self.facts}, modules_dir={self.modules_dir})"

    def check(self) -> None:
        """Fail early, with one clear line, on input that can never work."""
        try:
            self._check_paths()
        except OSError as err:  # a name too long, a loop of links: no path the kernel takes
            raise InputError(f"cannot use {err.filename}: {err.strerror}") from None
        if self.machine_file is not None:
            # deferred: the Machine file's YAML reader, 30 ms, only with --machine
            # (tests/test_layers.py)
            from .machinefile import read_machine_file

            read_machine_file(self.machine_file)

    def _check_paths(self) -> None:
        if self.recording is not None:
            if not self.recording.exists():
                raise InputError(f"recording {self.recording} does not exist")
            if not self.recording.is_file():
                raise InputError(f"recording {self.recording} is not a regular file")
        elif not (self.sysfs / "devices").is_dir():
            raise InputError(f"sysfs root {self.sysfs} has no devices/ directory")
        elif not (self.sysfs / "dev" / "char").is_dir():
            raise InputError(f"{self.sysfs} is not a sysfs tree: it has no dev/char index")

    def catalogs(self) -> Catalogs:
        """The module and ID catalogs, loaded once (they change only with a new kernel)."""
        if self._catalogs is None:
            self._catalogs = Catalogs.load(self.modules_dir, self.hwdata_dir)
        return self._catalogs

    def machine(self) -> MachineSpec:
        if not self.machine_file:
            return MachineSpec()
        # deferred: the Machine file's YAML reader, 30 ms, only with --machine
        # (tests/test_layers.py)
        from .machinefile import read_machine_file

        return read_machine_file(self.machine_file)

    def context(self, machine: MachineSpec | None = None) -> Context:
        return Context(read_facts(self.facts), machine if machine is not None else self.machine(),
                       self.catalogs())

    def snapshot(self) -> Snapshot:
        if self.recording is not None:
            # deferred: only offline, 0.4 ms: a node's agent and scan read sysfs
            # (tests/test_layers.py)
            from ..sysfs.umockdev import load_recording

            return load_recording(self.recording)
        return read_sysfs(self.sysfs, self.reader_memo)

    def walk(self, machine: MachineSpec | None = None, *, claimed: Claimed = NO_CLAIMS,
             snapshot: Snapshot | None = None) -> Inventory:
        """One fresh walk: snapshot, context, policy (``claimed``: see :class:`.model.Claimed`).

        ``snapshot``: the one just taken (:meth:`snapshot`) by a caller that reads it too (the
        node agent's machine side), so both see the same tree."""
        return build_inventory(snapshot if snapshot is not None else self.snapshot(),
                               self.context(machine), memo=self.memo, claimed=claimed)
