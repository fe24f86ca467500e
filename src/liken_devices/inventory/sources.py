"""Where each walk reads from: sysfs (or a recording), the facts tree, the machine file, catalogs.

The I/O at the policy's edge. :class:`Sources` holds the paths (all options, so tests pass their
own), produces a fresh :class:`~.context.Context` and snapshot for each walk, and owns what one
walk may reuse from the last (:class:`~.attributes.AttributeMemo`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..sysfs.model import Snapshot
from ..sysfs.reader import read_sysfs
from ..sysfs.umockdev import load_recording
from .attributes import AttributeMemo
from .catalogs import Catalogs
from .context import Context
from .model import Facts, Inventory, MachineSpec
from .policy import build_inventory


def read_facts(root: Path) -> Facts:
    """Storage roles from init's facts tree; unreadable facts mean no disk is offered."""
    storage = root / "storage"
    try:
        if not root.is_dir():
            return Facts(None, f"facts root {root} does not exist")
        if not storage.exists():
            return Facts(frozenset())
        parts: set[str] = set()
        for role in sorted(os.listdir(storage)):
            device = storage / role / "device"
            if not device.exists() and not (storage / role).is_dir():
                continue
            value = device.read_text().strip()
            if value:
                # The kernel name of a partition ("nvme0n1p3"); tolerate "/dev/" written in front.
                parts.add(value.removeprefix("/dev/"))
        return Facts(frozenset(parts))
    except (OSError, UnicodeDecodeError) as exc:
        return Facts(None, f"cannot read facts under {root}: {exc}")


FactsStamp = tuple[tuple[str, int, int, int, int] | tuple[str, str], ...]


def facts_stamp(root: Path, limit: int = 256) -> FactsStamp:
    """What changes when init's facts change: inode, mode, size and mtime of the root, of
    ``storage/``, and of each role's directory and ``device`` file (links followed and not), or
    the error met. Two equal stamps mean the facts read the same, so a walk taken under the
    first still holds (the kubelet plugin reuses it instead of walking again)."""
    out: list[tuple[str, int, int, int, int] | tuple[str, str]] = []

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
        roles = sorted(os.listdir(storage))[:limit]
    except OSError:
        roles = []
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


@dataclass
class Sources:
    """Where each walk reads from. Exactly one of ``sysfs`` and ``recording`` is used."""

    sysfs: Path = Path("/sys")
    facts: Path = Path("/run/liken/facts")
    machine_file: Path | None = None
    modules_dir: Path = field(default_factory=default_modules_dir)
    # One directory, or several: each ID file is read from the first that has a readable copy.
    hwdata_dir: Path | tuple[Path, ...] = field(default_factory=default_hwdata_dir)
    recording: Path | None = None
    _catalogs: Catalogs | None = field(default=None, repr=False)
    memo: AttributeMemo = field(default_factory=AttributeMemo, repr=False, compare=False)

    def check(self) -> None:
        """Fail early, with one clear line, on input that can never work."""
        if self.recording is not None:
            if not self.recording.is_file():
                raise InputError(f"recording {self.recording} does not exist")
        elif not (self.sysfs / "devices").is_dir():
            raise InputError(f"sysfs root {self.sysfs} has no devices/ directory")
        elif not (self.sysfs / "dev" / "char").is_dir():
            raise InputError(f"{self.sysfs} is not a sysfs tree: it has no dev/char index")
        if self.machine_file is not None:
            from .machinefile import read_machine_file  # YAML: only with --machine

            read_machine_file(self.machine_file)

    def catalogs(self) -> Catalogs:
        """The module and ID catalogs, loaded once (they change only with a new kernel)."""
        if self._catalogs is None:
            self._catalogs = Catalogs.load(self.modules_dir, self.hwdata_dir)
        return self._catalogs

    def machine(self) -> MachineSpec:
        if not self.machine_file:
            return MachineSpec()
        from .machinefile import read_machine_file  # YAML: only with --machine

        return read_machine_file(self.machine_file)

    def context(self, machine: MachineSpec | None = None) -> Context:
        return Context(read_facts(self.facts), machine if machine is not None else self.machine(),
                       self.catalogs())

    def snapshot(self) -> Snapshot:
        if self.recording is not None:
            return load_recording(self.recording)
        return read_sysfs(self.sysfs)

    def walk(self, machine: MachineSpec | None = None) -> Inventory:
        """One fresh walk: snapshot, context, policy."""
        return build_inventory(self.snapshot(), self.context(machine), memo=self.memo)
