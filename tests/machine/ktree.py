"""A module tree built for a test: the text catalogs, module files, and kmod's binary indexes.

The machine side reads the text catalogs (``modules.dep``, ``modules.builtin``,
``modules.alias``). The real ``modprobe`` reads only kmod's binary indexes (``*.bin``), which
``depmod`` builds from real ELF modules; a test has no real modules, so this writes the indexes
from the same lines. Format facts (kmod, libkmod-index): big-endian ``u32`` magic 0xB007F457,
version 0x00020001, root node offset; a node is found at ``offset & 0x0FFFFFFF`` and its flags
say what follows: 0x80000000 a NUL-terminated prefix, 0x20000000 children (first char, last
char, one ``u32`` node offset per char in between, 0 for none), 0x40000000 values (a ``u32``
count, then per value a ``u32`` priority and a NUL-terminated string). A key is looked up one
character per trie level; its node's values are the answers.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = 0xB007F457
VERSION = 0x00020001
F_CHILDS = 0x20000000
F_VALUES = 0x40000000


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    values: list[tuple[int, bytes]] = field(default_factory=list)


def write_index(path: Path, entries: Iterable[tuple[str, str]]) -> None:
    """A kmod index file mapping each key to its value(s)."""
    root = _Node()
    for priority, (key, value) in enumerate(entries):
        node = root
        for ch in key.encode():
            node = node.children.setdefault(ch, _Node())
        node.values.append((priority, value.encode()))
    out = bytearray(12)

    def emit(node: _Node) -> int:
        offsets = {ch: emit(child) for ch, child in sorted(node.children.items())}
        flags = 0
        body = bytearray()
        if offsets:
            flags |= F_CHILDS
            first, last = min(offsets), max(offsets)
            body += bytes([first, last])
            for ch in range(first, last + 1):
                body += struct.pack(">I", offsets.get(ch, 0))
        if node.values:
            flags |= F_VALUES
            body += struct.pack(">I", len(node.values))
            for priority, value in node.values:
                body += struct.pack(">I", priority) + value + b"\0"
        offset = len(out)
        out.extend(body)
        return offset | flags

    root_offset = emit(root)
    out[0:12] = struct.pack(">III", MAGIC, VERSION, root_offset)
    path.write_bytes(bytes(out))


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1].split(".ko")[0].replace("-", "_")


@dataclass
class ModuleTreeBuilder:
    """``root/lib/modules/<version>`` with the given modules; ``build()`` writes it."""

    root: Path
    version: str = "6.1.0-liken-test"
    modules: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path -> dep paths
    builtin: list[str] = field(default_factory=list)
    aliases: list[tuple[str, str]] = field(default_factory=list)
    absent: set[str] = field(default_factory=set)  # listed in modules.dep, file not written

    @property
    def dir(self) -> Path:
        return self.root / "lib" / "modules" / self.version

    def module(self, path: str, *deps: str) -> ModuleTreeBuilder:
        self.modules[path] = deps
        return self

    def build(self) -> Path:
        d = self.dir
        d.mkdir(parents=True, exist_ok=True)
        for path in self.modules:
            if path in self.absent:
                continue
            (d / path).parent.mkdir(parents=True, exist_ok=True)
            (d / path).write_bytes(b"\x7fELF not a real module")
        dep_lines = [f"{p}: {' '.join(deps)}".rstrip() for p, deps in self.modules.items()]
        (d / "modules.dep").write_text("".join(f"{ln}\n" for ln in dep_lines))
        (d / "modules.builtin").write_text("".join(f"{p}\n" for p in self.builtin))
        (d / "modules.alias").write_text(
            "# Aliases extracted from modules themselves.\n"
            + "".join(f"alias {a} {m}\n" for a, m in self.aliases))
        write_index(d / "modules.dep.bin",
                    [(_name(p), ln.split(":", 1)[0] + ":" + ln.split(":", 1)[1])
                     for p, ln in zip(self.modules, dep_lines, strict=True)])
        write_index(d / "modules.builtin.bin", [(_name(p), "") for p in self.builtin])
        # kmod looks aliases up with '-' spelled '_' (outside [...] classes), as depmod stores them.
        write_index(d / "modules.alias.bin",
                    [(a if "[" in a else a.replace("-", "_"), m) for a, m in self.aliases])
        write_index(d / "modules.symbols.bin", [])
        write_index(d / "modules.builtin.alias.bin", [])
        return d
