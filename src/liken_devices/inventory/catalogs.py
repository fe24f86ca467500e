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
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from .modname import normalize

log = logging.getLogger(__name__)

_PREFIX = 12  # literal characters used to index a pattern ("pci:v00008086", "usb:v046Dp")
_WILD = frozenset("*?[")


def _literal_prefix(pattern: str) -> str:
    for i, ch in enumerate(pattern):
        if ch in _WILD:
            return pattern[:i]
    return pattern


def _could_match(pattern: str, modalias: str) -> bool:
    """A cheap necessary condition: the glob's literal pieces appear in order.

    It spares fnmatch (which compiles and caches a regular expression per pattern) all but the
    few patterns that can match; pieces holding ``?`` or ``[`` are left to fnmatch.
    """
    pieces = pattern.split("*")
    first = pieces[0]
    if not (_WILD & set(first)) and not modalias.startswith(first):
        return False
    pos = len(first)
    for piece in pieces[1:]:
        if not piece or _WILD & set(piece):
            continue
        found = modalias.find(piece, pos)
        if found < 0:
            return False
        pos = found + len(piece)
    return True


@dataclass(frozen=True)
class AliasIndex:
    """``modules.alias`` grouped by the first characters of each glob's literal prefix.

    Each group is kept as one string of ``pattern module`` lines: tens of thousands of small
    tuples would cost the node agent about 9 MiB for answers it needs a handful of times.
    """

    by_prefix: dict[str, str] = field(default_factory=dict)
    short: str = ""  # globs whose literal prefix is shorter than the index key

    @staticmethod
    def parse(text: str) -> AliasIndex:
        by_prefix: dict[str, list[str]] = {}
        short: list[str] = []
        for m in _ALIAS_LINE.finditer(text):  # one line at a time: no list of 30,000 lines
            pattern = m.group(1)
            literal = _literal_prefix(pattern)
            entry = f"{pattern} {m.group(2)}"
            if len(literal) >= _PREFIX:
                by_prefix.setdefault(literal[:_PREFIX], []).append(entry)
            else:
                short.append(entry)
        return AliasIndex({k: "\n".join(v) for k, v in by_prefix.items()}, "\n".join(short))

    def match(self, modalias: str) -> tuple[str, ...]:
        found: list[str] = []
        for group in (self.by_prefix.get(modalias[:_PREFIX], ""), self.short):
            for entry in group.split("\n") if group else ():
                pattern, _, module = entry.partition(" ")
                if module not in found and _could_match(pattern, modalias) \
                        and fnmatchcase(modalias, pattern):
                    found.append(module)
        return tuple(found)


_VENDOR_LINE = re.compile(r"^([0-9a-fA-F]{4})  \S", re.MULTILINE)
_ALIAS_LINE = re.compile(r"^alias[ \t]+(\S+)[ \t]+(\S+)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True, eq=False)
class IdNames:
    """Vendor and device names from pci.ids/usb.ids, looked up on demand.

    The files list some 40,000 devices; parsed into dictionaries they cost about 12 MiB of the
    node agent's memory, for the few names a machine needs. So the text is kept (about 2 MiB)
    with the offset of each vendor's line (``vvvv  Name``), and a lookup scans that vendor's
    device lines (``\tdddd  Name``; ``\t\t`` lines are subsystems), caching the answer.
    """

    text: str = ""
    vendor_at: dict[str, int] = field(default_factory=dict)
    _cache: dict[tuple[str, str], str | None] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(text: str) -> IdNames:
        vendor_at: dict[str, int] = {}
        # A vendor line; the class sections (C 03, HUT 01, ...) never start with 4 hex digits.
        for m in _VENDOR_LINE.finditer(text):
            vendor_at.setdefault(m.group(1).lower(), m.start())
        return IdNames(text, vendor_at)

    def name(self, vendor: str, product: str) -> str | None:
        """``Vendor Product`` words, or None when either is unknown."""
        key = (vendor, product)
        if key not in self._cache:
            self._cache[key] = self._lookup(vendor, product)
        return self._cache[key]

    def _lookup(self, vendor: str, product: str) -> str | None:
        pos = self.vendor_at.get(vendor)
        if pos is None:
            return None
        text = self.text
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        vendor_name = text[pos + 6:end].strip()
        i = end + 1
        while i < len(text):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            line = text[i:end]
            i = end + 1
            if not line or line[0] == "#" or line.startswith("\t\t"):
                continue
            if line[0] != "\t":
                return None  # the next vendor: the product is not listed
            if line[5:7] == "  " and line[1:5].lower() == product:
                return f"{vendor_name} {line[7:].strip()}"
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

        builtin = frozenset(normalize(Path(line.strip()).name.removesuffix(".ko"))
                            for line in text(modules_dir / "modules.builtin").splitlines()
                            if line.strip())
        carried = frozenset(normalize(Path(line.split(":", 1)[0]).name.split(".ko")[0])
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
                 if normalize(m) not in catalogs.builtin)
