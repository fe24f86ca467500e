"""Loading the modules a Machine declares in ``spec.modules``, and saying what became of each.

rules: machine.declare-module, hardware.driver-bound. Declaring a module is the only step that
moves hardware from the unclaimed report into the slice, and hardware with no driver bound
supplies nothing. The outcomes (docs/machine.md): a name built into the kernel
is ``Builtin``; one the machine does not carry is ``Missing``; otherwise it is loaded with what it
depends on through the system's module tooling (modprobe) and is ``Loaded``, or ``Failed`` with
the kernel's error. Removing a name needs a reboot: nothing is ever unloaded.

A load that failed is not tried again on every walk: a walk follows every relevant uevent, so a
retry per walk would be a crash loop in the log. It is tried again when the spec's module list
or the module tree (a depmod run, a new kernel package) changes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from ..inventory.modname import is_module_name, normalize
from .tree import Fingerprint, ModuleTree, fingerprint, module_name_of

log = logging.getLogger(__name__)

# "WouldLoad" appears only in a dry run's preview (``liken-devices machine apply --dry-run``).
ModuleStateName = Literal["Loaded", "Builtin", "Missing", "Failed", "WouldLoad"]
MESSAGE_LIMIT = 1024  # a status message stays readable; modprobe's stderr can be long
REMOVED_NOTE = ("removed from spec.modules, but it stays loaded: the node never unloads a module, "
                "so removing one takes effect at the next reboot")


class LoadError(Exception):
    """The tooling could not load a module; the text is what the kernel/modprobe said."""


class Loader(Protocol):
    """Loads one module and what it depends on. Returns a note for the status message."""

    def load(self, name: str) -> str: ...


def modprobe_binary() -> str:
    for candidate in ("modprobe", "/usr/sbin/modprobe", "/sbin/modprobe"):
        found = shutil.which(candidate)
        if found:
            return found
    return "modprobe"


def _tree_args(modules_dir: Path) -> list[str]:
    """``-d ROOT -S VERSION`` for a tree at ``ROOT/lib/modules/VERSION``.

    modprobe(8) reads ``<dirname>/lib/modules/<version>`` and nothing else, so a tree laid out
    differently cannot be used by the real tooling; that is a clear LoadError, not a guess.
    """
    parts = modules_dir.parts
    if len(parts) >= 3 and parts[-3:-1] == ("lib", "modules"):
        root = Path(*parts[:-3]) if len(parts) > 3 else Path("/")
        return ["-d", str(root), "-S", parts[-1]]
    raise LoadError(f"modprobe reads modules only from <root>/lib/modules/<version>; "
                    f"{modules_dir} is not such a directory")


_ERROR_LINE = re.compile(r"^modprobe: (ERROR|FATAL): ")


def _clip(text: str) -> str:
    text = " ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


class ModprobeLoader:
    """The real loader: ``modprobe -v`` (or ``-n -v``, a dry run that loads nothing).

    modprobe inserts the module's dependencies from modules.dep first and reports the kernel's
    refusal on stderr (``modprobe: ERROR: could not insert 'x': Operation not permitted``); that
    text becomes the Failed message. Loading needs CAP_SYS_MODULE and the host's module tree.
    """

    def __init__(self, modules_dir: Path, *, dry_run: bool = False, binary: str | None = None,
                 timeout: float = 60.0) -> None:
        self.modules_dir = modules_dir
        self.dry_run = dry_run
        self.binary = binary or modprobe_binary()
        self.timeout = timeout

    def command(self, name: str) -> list[str]:
        if not is_module_name(name):
            raise LoadError(f"{name!r} is not a module name")
        flags = ["-n", "-v"] if self.dry_run else ["-v"]
        # "--" ends the options: a name can never be read as one.
        return [self.binary, *flags, *_tree_args(self.modules_dir), "--", name]

    def load(self, name: str) -> str:
        argv = self.command(name)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                                  check=False, stdin=subprocess.DEVNULL)
        except FileNotFoundError as exc:
            raise LoadError(f"cannot run {self.binary}: {exc.strerror or exc}") from exc
        except subprocess.TimeoutExpired as exc:
            raise LoadError(f"{self.binary} did not finish within {self.timeout:.0f}s") from exc
        if done.returncode != 0:
            errors = [ln for ln in done.stderr.splitlines() if _ERROR_LINE.match(ln)]
            raise LoadError(_clip("\n".join(errors) or done.stderr or done.stdout)
                            or f"{self.binary} exited with status {done.returncode}")
        steps = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
        return _clip("; ".join(steps))


@dataclass(frozen=True, slots=True)
class ModuleStatus:
    """One row of ``status.modules``."""

    name: str
    state: ModuleStateName
    message: str
    declared: bool = True  # False: a name removed from the spec, reported until the reboot

    def to_status(self) -> dict[str, str]:
        return {"name": self.name, "state": self.state, "message": self.message}


class LoadedModules:
    """Which modules the running kernel has loaded (``/proc/modules``, ``/sys/module``).

    A loadable module has ``/sys/module/<name>/initstate``; a built-in one may have a directory
    there too (for its parameters) but never ``initstate``. ``/proc/modules`` is read once per
    pass; /sys/module is asked only about the names in question.
    """

    def __init__(self, sys_root: Path, proc_root: Path) -> None:
        self.sys_root = sys_root
        self.proc: set[str] = set()
        try:
            with open(proc_root / "modules", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.strip():
                        self.proc.add(normalize(line.split()[0]))
        except OSError:
            pass  # this kernel has no loadable-module support, or /proc is elsewhere

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        name = normalize(name)
        return name in self.proc or (self.sys_root / "module" / name / "initstate").exists()


def loaded_modules(sys_root: Path, proc_root: Path) -> frozenset[str]:
    """Every loaded module's name (for reports and tests; a pass uses :class:`LoadedModules`)."""
    found = LoadedModules(sys_root, proc_root)
    names = set(found.proc)
    with contextlib.suppress(OSError):
        names.update(normalize(e.name) for e in os.scandir(sys_root / "module")
                     if e.name in found)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class _Attempt:
    key: tuple[Fingerprint, tuple[str, ...]]
    status: ModuleStatus


class ModuleManager:
    """Decides about each declared name, loads what needs loading, remembers the outcomes."""

    def __init__(self, modules_dir: Path, loader: Loader, *, sys_root: Path = Path("/sys"),
                 proc_root: Path = Path("/proc")) -> None:
        self.modules_dir = modules_dir
        self.loader = loader
        self.sys_root = sys_root
        self.proc_root = proc_root
        self._tree: ModuleTree | None = None
        self._attempts: dict[str, _Attempt] = {}
        self._declared_ever: dict[str, str] = {}  # normalized -> the name as the spec wrote it

    def tree(self) -> ModuleTree:
        """The parsed tree, parsed again only when its catalogs changed."""
        stamp = fingerprint(self.modules_dir)
        if self._tree is None or self._tree.stamp != stamp:
            self._tree = ModuleTree.load(self.modules_dir)
        return self._tree

    def apply(self, names: tuple[str, ...], *, dry_run: bool = False) -> list[ModuleStatus]:
        """One row per declared name (and per removed name still loaded), loading as needed.

        ``dry_run``: nothing is loaded and the loader is not called; the plan read from the
        tree is shown as WouldLoad and not remembered.
        """
        tree = self.tree()
        key = (tree.stamp, tuple(names))
        loaded = LoadedModules(self.sys_root, self.proc_root)
        out: list[ModuleStatus] = []
        seen: set[str] = set()
        for name in names:
            norm = normalize(name)
            if norm in seen:
                continue  # a name written twice is one module, reported once
            seen.add(norm)
            self._declared_ever[norm] = name
            try:
                status = self._decide(name, tree, loaded, key, dry_run)
            except Exception as exc:  # this name's row says it; the other names go on
                log.warning("module %s: %s", name, exc)
                status = ModuleStatus(name, "Failed", f"cannot load: {type(exc).__name__}: "
                                      f"{exc}; tried again when spec.modules or the module "
                                      "tree changes")
            out.append(status)
        for norm, name in sorted(self._declared_ever.items()):
            if norm in seen:
                continue
            removed = self._removed(name, tree, loaded)
            if removed is not None:
                out.append(removed)
        return out

    def _decide(self, name: str, tree: ModuleTree, loaded: LoadedModules,
                key: tuple[Fingerprint, tuple[str, ...]], dry_run: bool) -> ModuleStatus:
        if not is_module_name(name):
            return ModuleStatus(name, "Failed", f"{name!r} is not a module name: a name such as "
                                "pulse8_cec, without a path or options, is expected")
        res = tree.resolve(name)
        alias = f" ({res.note})" if res.note and res.kind != "missing" else ""
        if res.kind == "builtin":
            return ModuleStatus(name, "Builtin", f"built into the kernel{alias}")
        previous = self._attempts.get(normalize(name))
        if res.module in loaded:
            if previous is not None and previous.status.state == "Loaded":
                return previous.status
            return ModuleStatus(name, "Loaded", f"already loaded{alias}")
        if res.kind == "missing":
            return ModuleStatus(name, "Missing", res.note)
        if previous is not None and previous.key == key and not dry_run:
            return previous.status  # no new load attempt until the spec or the tree changes
        if dry_run:
            # rules: machine.apply-this-host. A dry run runs no tooling at all: the plan is
            # modprobe's own, read from modules.dep (dependencies first, the last listed
            # first, those loaded already left out), and the loader is never called.
            entry = tree.catalog.dependency_line(res.module)
            path, dep_paths = entry if entry is not None else ("", ())
            steps = [tree.root / d for d in reversed(dep_paths)
                     if module_name_of(d) not in loaded]
            note = "; ".join(f"insmod {p}" for p in [*steps, tree.root / path] if path)
            return ModuleStatus(name, "WouldLoad", f"dry run: would load{alias}"
                                + (f": {note}" if note else ""))
        try:
            note = self.loader.load(name)
        except LoadError as exc:
            log.warning("module %s: load failed: %s", name, exc)
            status = ModuleStatus(name, "Failed", f"load failed: {exc}; tried again when "
                                  "spec.modules or the module tree changes")
        else:
            deps = f", after {', '.join(res.depends)}" if res.depends else ""
            status = ModuleStatus(name, "Loaded", f"loaded by the node{deps}{alias}"
                                  + (f": {note}" if note else ""))
            log.info("module %s: loaded", name)
        self._attempts[normalize(name)] = _Attempt(key, status)
        return status

    def _removed(self, name: str, tree: ModuleTree,
                 loaded: LoadedModules) -> ModuleStatus | None:
        res = tree.resolve(name) if is_module_name(name) else None
        if res is not None and res.kind == "builtin":
            return ModuleStatus(name, "Builtin", "removed from spec.modules; it is built into "
                                "the kernel and stays", declared=False)
        attempt = self._attempts.get(normalize(name))
        was_loaded = attempt is not None and attempt.status.state == "Loaded"
        if (res is not None and res.module in loaded) or was_loaded:
            return ModuleStatus(name, "Loaded", REMOVED_NOTE, declared=False)
        return None  # never loaded: nothing remains to report
