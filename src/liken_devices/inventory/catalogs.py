"""The module and hardware-ID catalogs: which modules could drive a modalias, and hardware names.

rules: machine.catalogs, attributes.name-from-catalogs. ``modules.alias``, ``modules.builtin``
and ``modules.dep`` from ``/lib/modules/$(uname -r)``; ``pci.ids`` and ``usb.ids`` from hwdata.
A missing file is an empty catalog (the machine then names no candidates, and hardware keeps its
``vvvv:pppp`` name). An ID file may come from one of several directories, the first that holds a
readable copy: in a container the host's hwdata comes first and the image's copy is the fallback,
since the host's file can be absent, or a relative symlink that leads nowhere once mounted
(docs/guide.md, "Install").

Every catalog is read on demand and nothing of a file is kept between questions. A distribution
kernel's tree lists some 6,000 modules and 30,000 aliases, and the ID files some 40,000 devices;
parsed into Python objects they would hold about 10 MiB of the node agent's memory for the
handful of answers a machine ever needs. So each question maps the file, searches its bytes with
C-speed ``find``/regular expressions, and caches the small answer; the cache is dropped when the
file changes (a depmod run, a hwdata update).

Facts used (kmod's file formats, depmod(8) and modules.dep(5); the pci.ids/usb.ids format):

* ``modules.dep``: one line per loadable module, ``<path>: <dependency path>...``, paths relative
  to the tree; a module's name is its file's base name without ``.ko`` and any compression
  suffix (``.xz``, ``.zst``, ``.gz``).
* ``modules.builtin``: one path per line of the modules built into the kernel.
* ``modules.alias``: ``alias <pattern> <module>``; the pattern is a shell glob matched against a
  device's modalias. A pattern without glob characters is a plain second name for a module
  (``alias char-major-10-239 uhid``), which modprobe accepts too.
* Module names treat ``-`` and ``_`` alike; the kernel reports them with ``_``.
* ``pci.ids``/``usb.ids``: a vendor line is ``vvvv  Name`` at the start of a line, its devices
  follow as ``\\tdddd  Name`` (``\\t\\t`` lines are subsystems); other sections start with a
  keyword (``C 03``, ``HID 01``), never with four hex digits and two spaces.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TypeVar

from .modname import normalize

log = logging.getLogger(__name__)

_WILD = frozenset("*?[")
_WILD_BYTES = (b"*", b"?", b"[")
_COMPRESSION = (".xz", ".zst", ".gz")
CATALOG_FILES = ("modules.dep", "modules.builtin", "modules.alias")
_ALIAS_LINE = re.compile(rb"^alias[ \t]+(\S+)[ \t]+(\S+)[ \t]*$", re.MULTILINE)
_BLOCK_END = re.compile(rb"\n[^\t#\n]")  # the first line after a vendor's block of devices

T = TypeVar("T")
Stamp = tuple[int, int, int] | None


def module_name_of(path: str) -> str:
    """``kernel/drivers/media/cec/usb/pulse8/pulse8-cec.ko.xz`` -> ``pulse8_cec``."""
    base = path.rsplit("/", 1)[-1]
    for suffix in _COMPRESSION:
        base = base.removesuffix(suffix)
    return normalize(base.removesuffix(".ko"))


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


def match_aliases(data: bytes | mmap.mmap, modalias: str) -> tuple[str, ...]:
    """The modules whose ``modules.alias`` globs match ``modalias``, in file order, once each."""
    found: list[str] = []
    first = modalias[:1].encode("utf-8", "replace")
    for m in _ALIAS_LINE.finditer(data):
        lead = m.group(1)[:1]
        if lead != first and lead not in _WILD_BYTES:
            continue  # another bus's alias: the common case, decided on one byte
        pattern = m.group(1).decode("utf-8", "replace")
        module = m.group(2).decode("utf-8", "replace")
        if module not in found and _could_match(pattern, modalias) \
                and fnmatchcase(modalias, pattern):
            found.append(module)
    return tuple(found)


def _name_pattern(name: str) -> bytes:
    """A regular expression for a module name in a path, ``-`` and ``_`` alike."""
    parts = (re.escape(p.encode()) for p in re.split(r"[-_]", normalize(name)))
    return b"[-_]".join(parts)


class _File:
    """One catalog file, mapped only while a question is asked of it."""

    def __init__(self, path: Path | None, data: bytes | None = None) -> None:
        self.path = path
        self._data = data  # an in-memory catalog (tests, and text given directly)
        self._stamp: Stamp = None
        self._cache: dict[object, object] = {}
        self.problem: str | None = None

    def stamp(self) -> Stamp:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def ask(self, key: object, question: Callable[[bytes | mmap.mmap], T], empty: T) -> T:
        """``question`` of the file's bytes, cached until the file changes."""
        stamp = self.stamp()
        if stamp != self._stamp:
            self._cache.clear()
            self._stamp = stamp
        if key in self._cache:
            return self._cache[key]  # type: ignore[return-value]
        with self._bytes() as data:
            answer = question(data) if data is not None else empty
        if len(self._cache) >= 4096:
            self._cache.clear()
        self._cache[key] = answer
        return answer

    @contextmanager
    def _bytes(self) -> Iterator[bytes | mmap.mmap | None]:
        if self._data is not None or self.path is None:
            yield self._data
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            self._note(f"catalog {self.path} not read: {exc.strerror or exc}")
            yield None
            return
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                yield b""
                return
            try:
                mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            except (OSError, ValueError) as exc:  # not a regular file, or unmappable
                self._note(f"catalog {self.path} not read: {exc}")
                yield None
                return
            try:
                yield mm
            finally:
                mm.close()
        finally:
            os.close(fd)
        self.problem = None

    def _note(self, problem: str) -> None:
        if problem != self.problem:
            log.info("%s", problem)
        self.problem = problem


class IdNames:
    """Vendor and device names from pci.ids or usb.ids, looked up on demand."""

    def __init__(self, path: Path | None = None, data: bytes | None = None) -> None:
        self._file = _File(path, data)

    @staticmethod
    def parse(text: str) -> IdNames:
        """A catalog held in memory (tests, and names given as text)."""
        return IdNames(None, text.encode())

    def name(self, vendor: str, product: str) -> str | None:
        """``Vendor Product`` words, or None when either is unknown."""
        v, p = vendor.lower(), product.lower()
        if len(v) != 4 or len(p) != 4 or not (v + p).isascii() or not (v + p).isalnum():
            return None
        return self._file.ask((v, p), lambda data: _lookup(data, v.encode(), p.encode()), None)


def _lookup(data: bytes | mmap.mmap, vendor: bytes, product: bytes) -> str | None:
    head = vendor + b"  "
    pos = 0 if data[:6] == head else data.find(b"\n" + head)
    if pos < 0:
        return None
    start = pos + (0 if pos == 0 and data[:6] == head else 1)
    end = data.find(b"\n", start)
    end = len(data) if end < 0 else end
    vendor_name = bytes(data[start + 6:end]).decode("utf-8", "replace").strip()
    block_end = _BLOCK_END.search(data, end)
    limit = block_end.start() if block_end else len(data)
    at = data.find(b"\n\t" + product + b"  ", end, limit)
    if at < 0:
        return None
    line_end = data.find(b"\n", at + 1)
    line_end = len(data) if line_end < 0 else line_end
    device = bytes(data[at + 8:line_end]).decode("utf-8", "replace").strip()
    return f"{vendor_name} {device}"


class ModuleCatalog:
    """``modules.alias``, ``modules.builtin`` and ``modules.dep`` of one tree, asked on demand."""

    def __init__(self, root: Path | None, *, alias: bytes | None = None,
                 builtin: bytes | None = None, dep: bytes | None = None) -> None:
        self.root = root
        self._alias = _File(root / "modules.alias" if root else None, alias)
        self._builtin = _File(root / "modules.builtin" if root else None, builtin)
        self._dep = _File(root / "modules.dep" if root else None, dep)

    def stamp(self) -> tuple[Stamp, ...]:
        """What changes when the tree changes (a depmod run rewrites these files)."""
        return (self._dep.stamp(), self._builtin.stamp(), self._alias.stamp())

    def problems(self) -> tuple[str, ...]:
        """Catalog files that exist but could not be read, or are missing, in words."""
        out: list[str] = []
        if self.root is None:
            return ()
        for name in CATALOG_FILES:
            path = self.root / name
            if not path.exists():
                out.append(f"{path} does not exist")
            elif not os.access(path, os.R_OK):
                out.append(f"cannot read {path}")
        return tuple(out)

    def unread(self) -> str | None:
        """Why no module can be named at all (``modules.alias`` of a module tree cannot be
        read: a host or a container without the module tree), or None."""
        if self.root is None:
            return None
        path = self.root / "modules.alias"
        try:
            with open(path, "rb", buffering=0):
                return None
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"

    def aliases_of(self, modalias: str) -> tuple[str, ...]:
        """Every module whose alias globs match the modalias (builtins included)."""
        return self._alias.ask(("glob", modalias), lambda d: match_aliases(d, modalias), ())

    def candidates(self, modalias: str | None) -> tuple[str, ...]:
        """Modules that could drive this modalias, builtins left out (they would have bound)."""
        if not modalias:
            return ()
        return tuple(m for m in self.aliases_of(modalias) if not self.is_builtin(m))

    def is_builtin(self, name: str) -> bool:
        pattern = re.compile(rb"(?m)(?:^|/)" + _name_pattern(name) + rb"\.ko[ \t\r]*$")
        return self._builtin.ask(("builtin", normalize(name)),
                                 lambda d: pattern.search(d) is not None, False)

    def dependency_line(self, name: str) -> tuple[str, tuple[str, ...]] | None:
        """``(path, dependency paths)`` of a loadable module, or None when modules.dep lacks it."""
        pattern = re.compile(rb"(?m)^([^:\n]*?(?:^|/)" + _name_pattern(name)
                             + rb"\.ko(?:\.xz|\.zst|\.gz)?)[ \t]*:([^\n]*)$")

        def question(data: bytes | mmap.mmap) -> tuple[str, tuple[str, ...]] | None:
            m = pattern.search(data)
            if m is None:
                return None
            return (m.group(1).decode("utf-8", "replace").strip(),
                    tuple(m.group(2).decode("utf-8", "replace").split()))

        return self._dep.ask(("dep", normalize(name)), question, None)

    def literal_aliases(self, name: str) -> tuple[str, ...]:
        """The modules a glob-free alias (``char-major-10-239``) stands for."""
        wanted = normalize(name)

        def question(data: bytes | mmap.mmap) -> tuple[str, ...]:
            out: list[str] = []
            for m in _ALIAS_LINE.finditer(data):
                pattern = m.group(1).decode("utf-8", "replace")
                if _WILD.intersection(pattern) or normalize(pattern) != wanted:
                    continue
                target = normalize(m.group(2).decode("utf-8", "replace"))
                if target not in out:
                    out.append(target)
            return tuple(out)

        return self._alias.ask(("literal", wanted), question, ())


def _first_readable(dirs: Sequence[Path], name: str) -> Path | None:
    """``name`` in the first directory where it opens (a dangling symlink does not)."""
    for directory in dirs:
        try:
            # O_NONBLOCK: a FIFO in a catalog's place must not block the walk.
            os.close(os.open(directory / name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK))
        except OSError:
            continue
        return directory / name
    return dirs[0] / name if dirs else None


class Catalogs:
    """The catalogs one walk names hardware and candidates from."""

    def __init__(self, modules: ModuleCatalog | None = None, pci: IdNames | None = None,
                 usb: IdNames | None = None) -> None:
        self.modules = modules or ModuleCatalog(None)
        self.pci = pci or IdNames()
        self.usb = usb or IdNames()

    @staticmethod
    def load(modules_dir: Path, hwdata_dir: Path | Sequence[Path]) -> Catalogs:
        """Catalogs of a module tree and hwdata directories; nothing is read until asked."""
        dirs = (hwdata_dir,) if isinstance(hwdata_dir, Path) else tuple(hwdata_dir)
        return Catalogs(ModuleCatalog(modules_dir), IdNames(_first_readable(dirs, "pci.ids")),
                        IdNames(_first_readable(dirs, "usb.ids")))

    def candidates(self, modalias: str | None) -> tuple[str, ...]:
        """Modules that could drive this modalias, builtins left out (they would have bound)."""
        return self.modules.candidates(modalias)
