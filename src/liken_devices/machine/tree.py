"""A kernel's module tree as far as deciding about ``spec.modules`` needs it.

rules: machine.catalogs. The catalogs are ``modules.dep``,
``modules.builtin`` and ``modules.alias`` of ``/lib/modules/$(uname -r)`` (an option, so tests
pass their own tree). From them the machine side decides, before it asks the module tooling to
do anything, whether a declared name is built into the kernel, carried as a loadable module (and
which modules it needs first), or not carried at all. The files' formats, and reading them on
demand, live in one place: ``inventory/catalogs.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..inventory.catalogs import CATALOG_FILES, ModuleCatalog, Stamp, module_name_of
from ..inventory.modname import normalize

__all__ = ["CATALOG_FILES", "Fingerprint", "ModuleTree", "Resolution", "fingerprint",
           "module_name_of", "normalize"]

Fingerprint = tuple[Stamp, ...]


def fingerprint(root: Path) -> Fingerprint:
    """What changes when the module tree changes (a depmod run rewrites these files)."""
    return ModuleCatalog(root).stamp()


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
    """One module tree's catalogs, asked on demand (nothing of the files is kept)."""

    root: Path
    catalog: ModuleCatalog = field(repr=False, compare=False)
    stamp: Fingerprint = ()

    @staticmethod
    def load(root: Path) -> ModuleTree:
        catalog = ModuleCatalog(root)
        return ModuleTree(root, catalog, catalog.stamp())

    @property
    def problems(self) -> tuple[str, ...]:
        """Catalogs that could not be read."""
        return self.catalog.problems()

    def resolve(self, name: str) -> Resolution:
        """Built in, carried (with what it depends on), or not carried: the tree's answer."""
        wanted = normalize(name)
        direct = self._resolve_module(wanted)
        if direct.kind != "missing" or self.catalog.dependency_line(wanted) is not None:
            return direct
        targets = self.catalog.literal_aliases(wanted)
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
        if self.catalog.is_builtin(wanted):
            return Resolution("builtin", wanted)
        entry = self.catalog.dependency_line(wanted)
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
