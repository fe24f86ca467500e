"""The module and hardware-ID catalogs: which modules could drive a modalias, and hardware names.

decisions.md, "Catalogs": ``modules.alias``, ``modules.builtin`` and ``modules.dep`` from
``/lib/modules/$(uname -r)``; ``pci.ids`` and ``usb.ids`` from hwdata. A missing file is an empty
catalog (the machine then names no candidates, and hardware keeps its ``vvvv:pppp`` name).

``modules.alias`` holds tens of thousands of shell-glob patterns. Matching each modalias against
all of them would cost milliseconds per device on every walk, so patterns are indexed by their
literal prefix and answers are cached per modalias.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

_PREFIX = 12  # literal characters used to index a pattern ("pci:v00008086", "usb:v046Dp")
_WILD = frozenset("*?[")


def module_name(name: str) -> str:
    """Module names treat ``-`` and ``_`` alike; the kernel reports them with ``_``."""
    return name.replace("-", "_")


def _literal_prefix(pattern: str) -> str:
    for i, ch in enumerate(pattern):
        if ch in _WILD:
            return pattern[:i]
    return pattern


@dataclass(frozen=True)
class AliasIndex:
    by_prefix: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    short: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def parse(text: str) -> AliasIndex:
        by_prefix: dict[str, list[tuple[str, str]]] = {}
        short: list[tuple[str, str]] = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) != 3 or parts[0] != "alias":
                continue
            pattern, module = parts[1], parts[2]
            literal = _literal_prefix(pattern)
            if len(literal) >= _PREFIX:
                by_prefix.setdefault(literal[:_PREFIX], []).append((pattern, module))
            else:
                short.append((pattern, module))
        return AliasIndex({k: tuple(v) for k, v in by_prefix.items()}, tuple(short))

    def match(self, modalias: str) -> tuple[str, ...]:
        found: list[str] = []
        for pattern, module in (*self.by_prefix.get(modalias[:_PREFIX], ()), *self.short):
            if fnmatchcase(modalias, pattern) and module not in found:
                found.append(module)
        return tuple(found)


def _parse_ids(text: str) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """Vendor and device names from pci.ids/usb.ids (``vvvv  Name`` / ``\\tdddd  Name``)."""
    vendors: dict[str, str] = {}
    devices: dict[tuple[str, str], str] = {}
    vendor: str | None = None
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        if line[0] == "\t":
            if vendor is not None and len(line) > 7 and line[1] != "\t" and line[5:7] == "  ":
                devices[(vendor, line[1:5].lower())] = line[7:].strip()
            continue
        if len(line) > 6 and line[4:6] == "  " and all(c in "0123456789abcdefABCDEF"
                                                       for c in line[:4]):
            vendor = line[:4].lower()
            vendors[vendor] = line[6:].strip()
        else:
            vendor = None  # a class or other section: its lines are not devices
    return vendors, devices


@dataclass(frozen=True)
class IdNames:
    vendors: dict[str, str] = field(default_factory=dict)
    devices: dict[tuple[str, str], str] = field(default_factory=dict)

    @staticmethod
    def parse(text: str) -> IdNames:
        return IdNames(*_parse_ids(text))

    def name(self, vendor: str, product: str) -> str | None:
        """``Vendor Product`` words, the vendor alone, or None when the vendor is unknown."""
        v = self.vendors.get(vendor)
        d = self.devices.get((vendor, product))
        if v and d:
            return f"{v} {d}"
        return None


@dataclass(frozen=True, eq=False)  # hashed by identity: the cache below keys on it
class Catalogs:
    aliases: AliasIndex = field(default_factory=AliasIndex)
    builtin: frozenset[str] = frozenset()
    carried: frozenset[str] = frozenset()  # loadable modules in modules.dep
    pci: IdNames = field(default_factory=IdNames)
    usb: IdNames = field(default_factory=IdNames)

    @staticmethod
    def load(modules_dir: Path, hwdata_dir: Path) -> Catalogs:
        def text(p: Path) -> str:
            try:
                return p.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                log.info("catalog %s not read: %s", p, exc.strerror or exc)
                return ""

        builtin = frozenset(module_name(Path(line.strip()).name.removesuffix(".ko"))
                            for line in text(modules_dir / "modules.builtin").splitlines()
                            if line.strip())
        carried = frozenset(module_name(Path(line.split(":", 1)[0]).name.split(".ko")[0])
                            for line in text(modules_dir / "modules.dep").splitlines()
                            if ":" in line)
        return Catalogs(AliasIndex.parse(text(modules_dir / "modules.alias")), builtin, carried,
                        IdNames.parse(text(hwdata_dir / "pci.ids")),
                        IdNames.parse(text(hwdata_dir / "usb.ids")))

    def candidates(self, modalias: str | None) -> tuple[str, ...]:
        """Modules that could drive this modalias, builtins left out (they would have bound)."""
        if not modalias:
            return ()
        return _candidates(self, modalias)


@lru_cache(maxsize=4096)
def _candidates(catalogs: Catalogs, modalias: str) -> tuple[str, ...]:
    return tuple(m for m in catalogs.aliases.match(modalias)
                 if module_name(m) not in catalogs.builtin)
