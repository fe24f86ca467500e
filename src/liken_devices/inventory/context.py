"""Everything the policy reads besides sysfs: facts, the Machine's spec and the catalogs.

decisions.md, "The facts, the Machine and the catalogs": storage roles come from init's facts
tree (``storage/<role>/device``); the Machine gives ``spec.modules`` and ``spec.serio``;
``modules.alias``/``modules.builtin``/``modules.dep`` and ``pci.ids``/``usb.ids`` name the
hardware and the modules that could drive it. :class:`Sources` holds the paths (all options, so
tests pass their own) and produces a fresh :class:`Context` and snapshot for each walk.
"""

from __future__ import annotations

import logging
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError as InputError  # re-exported: its home for the layers above
from ..sysfs.model import Snapshot
from .catalogs import Catalogs
from .model import Facts, Inventory, MachineSpec, SerioEntry
from .modname import is_module_name

log = logging.getLogger(__name__)

SERIO_PROTOCOLS = ("pulse8-cec", "rainshadow-cec")
_HEX4 = re.compile(r"[0-9a-f]{4}")  # fullmatch


@dataclass(frozen=True, slots=True)
class Context:
    """The non-sysfs inputs of one policy run."""

    facts: Facts = field(default_factory=lambda: Facts(frozenset()))
    machine: MachineSpec = field(default_factory=MachineSpec)
    catalogs: Catalogs = field(default_factory=Catalogs)


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


def parse_machine(doc: Any, origin: str = "machine") -> MachineSpec:
    """A Machine object (or just its spec) as a :class:`MachineSpec`; InputError when malformed."""
    if doc is None:
        return MachineSpec()
    if not isinstance(doc, dict):
        kind = type(doc).__name__
        raise InputError(f"{origin}: expected a Machine object or its spec, got {kind}")
    if "kind" in doc or "apiVersion" in doc:
        if doc.get("kind") != "Machine":
            raise InputError(f"{origin}: kind is {doc.get('kind')!r}, expected Machine")
        spec = doc.get("spec") or {}
    elif "spec" in doc and not {"modules", "serio"} & doc.keys():
        spec = doc.get("spec") or {}  # a Machine without its type header
    else:
        spec = doc  # just the spec
    if not isinstance(spec, dict):
        raise InputError(f"{origin}: spec must be a mapping")
    modules_raw = spec.get("modules") or []
    if not isinstance(modules_raw, list):
        raise InputError(f"{origin}: spec.modules must be a list of module names")
    modules: list[str] = []
    for m in modules_raw:
        if not is_module_name(m):
            raise InputError(f"{origin}: spec.modules: {m!r} is not a module name")
        modules.append(m)
    serio_raw = spec.get("serio") or []
    if not isinstance(serio_raw, list):
        raise InputError(f"{origin}: spec.serio must be a list")
    serio: list[SerioEntry] = []
    for i, entry in enumerate(serio_raw):
        where = f"{origin}: spec.serio[{i}]"
        if not isinstance(entry, dict):
            raise InputError(f"{where} must be a mapping")
        protocol = entry.get("protocol")
        if protocol not in SERIO_PROTOCOLS:
            raise InputError(f"{where}.protocol must be one of {', '.join(SERIO_PROTOCOLS)}")
        ids = []
        for key in ("vendor", "product"):
            value = str(entry.get(key, "")).lower().removeprefix("0x")
            if not _HEX4.fullmatch(value):
                raise InputError(f"{where}.{key} must be 4 hex digits (the adapter's USB ID)")
            ids.append(value)
        serial = entry.get("serial")
        if serial is not None and not isinstance(serial, str | int):
            raise InputError(f"{where}.serial must be a string")
        serio.append(SerioEntry(str(protocol), ids[0], ids[1],
                                None if serial is None else str(serial)))
    return MachineSpec(tuple(modules), tuple(serio))


def read_machine_file(path: Path) -> MachineSpec:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read machine file {path}: {exc.strerror or exc}") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "parse error"
        raise InputError(f"machine file {path} is not valid YAML{where}: {problem}") from exc
    return parse_machine(doc, str(path))


def default_modules_dir() -> Path:
    return Path("/lib/modules") / platform.release()


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
            read_machine_file(self.machine_file)

    def catalogs(self) -> Catalogs:
        """The module and ID catalogs, loaded once (they change only with a new kernel)."""
        if self._catalogs is None:
            self._catalogs = Catalogs.load(self.modules_dir, self.hwdata_dir)
        return self._catalogs

    def machine(self) -> MachineSpec:
        return read_machine_file(self.machine_file) if self.machine_file else MachineSpec()

    def context(self, machine: MachineSpec | None = None) -> Context:
        return Context(read_facts(self.facts), machine if machine is not None else self.machine(),
                       self.catalogs())

    def snapshot(self) -> Snapshot:
        if self.recording is not None:
            from ..sysfs.umockdev import load_recording

            return load_recording(self.recording)
        from ..sysfs.reader import read_sysfs

        return read_sysfs(self.sysfs)

    def walk(self, machine: MachineSpec | None = None) -> Inventory:
        """One fresh walk: snapshot, context, policy."""
        from .policy import build_inventory

        return build_inventory(self.snapshot(), self.context(machine))
