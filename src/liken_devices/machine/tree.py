"""A kernel's module tree as far as deciding about ``spec.modules`` needs it.

decisions.md, "The facts, the Machine and the catalogs": the catalogs are ``modules.dep``,
``modules.builtin`` and ``modules.alias`` of ``/lib/modules/$(uname -r)`` (an option, so tests
pass their own tree). From them the machine side decides, before it asks the module tooling to
do anything, whether a declared name is built into the kernel, carried as a loadable module (and
which modules it needs first), or not carried at all.

Facts used (kmod's file formats, depmod(8)/modules.dep(5)):

* ``modules.dep``: one line per loadable module, ``<path>: <dependency path>...``, paths relative
  to the tree; the module's name is the file's base name without ``.ko`` and any compression
  suffix (``.xz``, ``.zst``, ``.gz``).
* ``modules.builtin``: one path per line (``kernel/drivers/hid/uhid.ko``) of modules the kernel
  was built with.
* ``modules.alias``: ``alias <pattern> <module>`` lines. A pattern without glob characters is a
  plain second name for a module (``alias char-major-10-239 uhid``), which modprobe accepts too.
* Module names treat ``-`` and ``_`` alike; the kernel reports them with ``_``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..inventory.modname import normalize

CATALOG_FILES = ("modules.dep", "modules.builtin", "modules.alias")
_COMPRESSION = (".xz", ".zst", ".gz")
_GLOB = frozenset("*?[")


def module_name_of(path: str) -> str:
    """``kernel/drivers/media/cec/usb/pulse8/pulse8-cec.ko.xz`` -> ``pulse8_cec``."""
    base = path.rsplit("/", 1)[-1]
    for suffix in _COMPRESSION:
        base = base.removesuffix(suffix)
    return normalize(base.removesuffix(".ko"))


Fingerprint = tuple[tuple[str, int, int, int] | None, ...]


def fingerprint(root: Path) -> Fingerprint:
    """What changes when the module tree changes (a depmod run rewrites these files)."""
    out: list[tuple[str, int, int, int] | None] = []
    for name in CATALOG_FILES:
        try:
            st = os.stat(root / name)
        except OSError:
            out.append(None)
            continue
        out.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Resolution:
    """What the tree says about one declared name."""

    kind: Literal["builtin", "module", "missing"]
    module: str  # the kernel's name of the module the declared name stands for
    path: Path | None = None  # the module file, for kind == "module"
    depends: tuple[str, ...] = ()  # modules it needs loaded first, for kind == "module"
    note: str = ""  # why "missing", or "alias of ..." when the name was an alias


@dataclass(frozen=True)
class ModuleTree:
    """The parsed catalogs of one module tree."""

    root: Path
    builtin: frozenset[str] = frozenset()
    modules: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # literal aliases only
    problems: tuple[str, ...] = ()  # catalogs that could not be read
    stamp: Fingerprint = ()

    @staticmethod
    def load(root: Path) -> ModuleTree:
        stamp = fingerprint(root)
        problems: list[str] = []

        def lines(name: str) -> list[str]:
            try:
                text = (root / name).read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                problems.append(f"{root / name} does not exist")
                return []
            except OSError as exc:
                problems.append(f"cannot read {root / name}: {exc.strerror or exc}")
                return []
            return [line.strip() for line in text.splitlines() if line.strip()]

        modules: dict[str, tuple[str, tuple[str, ...]]] = {}
        for line in lines("modules.dep"):
            if ":" not in line:
                continue
            path, _, rest = line.partition(":")
            modules[module_name_of(path)] = (path.strip(), tuple(rest.split()))
        builtin = frozenset(module_name_of(line) for line in lines("modules.builtin"))
        aliases: dict[str, list[str]] = {}
        for line in lines("modules.alias"):
            parts = line.split()
            if len(parts) != 3 or parts[0] != "alias" or _GLOB.intersection(parts[1]):
                continue
            targets = aliases.setdefault(normalize(parts[1]), [])
            if normalize(parts[2]) not in targets:
                targets.append(normalize(parts[2]))
        return ModuleTree(root, builtin, modules, {k: tuple(v) for k, v in aliases.items()},
                          tuple(problems), stamp)

    def resolve(self, name: str) -> Resolution:
        """Built in, carried (with what it depends on), or not carried: the tree's answer."""
        wanted = normalize(name)
        direct = self._resolve_module(wanted)
        if direct.kind != "missing" or wanted in self.modules:
            return direct
        targets = self.aliases.get(wanted, ())
        for target in targets:
            found = self._resolve_module(target)
            if found.kind != "missing":
                return Resolution(found.kind, found.module, found.path, found.depends,
                                  f"alias of {found.module}")
        where = f"in {self.root}"
        if self.problems:
            where += f" ({'; '.join(self.problems)})"
        return Resolution("missing", wanted, note=f"the machine does not carry module {name}: "
                          f"it is neither built into the kernel nor listed in modules.dep {where}")

    def _resolve_module(self, wanted: str) -> Resolution:
        if wanted in self.builtin:
            return Resolution("builtin", wanted)
        entry = self.modules.get(wanted)
        if entry is None:
            return Resolution("missing", wanted)
        path, deps = entry
        # modprobe inserts every dependency first; a file that is gone fails the whole load, so
        # say which one is absent instead of letting the load fail with a vaguer error.
        for rel in (path, *deps):
            if not (self.root / rel).exists():
                what = "its file" if rel == path else f"its dependency {module_name_of(rel)}"
                return Resolution("missing", wanted, note=(
                    f"the machine does not carry module {wanted}: modules.dep lists it, but "
                    f"{what} {self.root / rel} is absent"))
        return Resolution("module", wanted, self.root / path,
                          tuple(module_name_of(d) for d in deps))
