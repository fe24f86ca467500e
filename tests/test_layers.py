"""The package's layers, pinned: sysfs -> inventory -> slices -> kube/plugin/machine/media ->
agent -> cli (README, "Layout").

An ``ast`` walk of every module's imports. A module imports only from its own layer or a lower
one; the small shared modules at the bottom (errors, files, inputfiles) import nothing above
them. An import inside a function (a lazy import) stays only with a comment beside it or on the
line above saying why it is lazy, and an import of a higher layer is allowed only that way.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "liken_devices"

# The rank of each top-level unit of the package; a unit imports only units of rank <= its own.
LAYERS: dict[str, int] = {
    "": 0,  # the package itself (__version__)
    "errors": 0, "files": 0, "documents": 0, "heap": 0, "inputfiles": 0, "logs": 0, "probe": 0,
    "signals": 0, "terminal": 0,
    "sysfs": 1,
    "inventory": 2,
    "slices": 3, "cliargs": 3,
    "kube": 4, "plugin": 4, "machine": 4, "media": 4,
    "agent": 5, "match": 5,
    "cli": 6, "entry": 7,
}


@dataclass(frozen=True)
class Import:
    module: str  # "liken_devices.plugin.cdi"
    line: int
    target: str  # "liken_devices.inventory.limits"
    lazy: bool
    commented: bool


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        if "gen" in rel.parts:
            continue  # generated protobuf code
        out.append((".".join(rel.parts).removesuffix(".__init__"), path))
    return out


def said_why(lines: list[str], lineno: int) -> bool:
    """A comment on the import's line, or within three lines above the run of import lines it
    belongs to (one comment says why for a function's lazy imports)."""
    first = lineno - 1
    while first > 0 and lines[first - 1].strip().startswith(("from ", "import ")):
        first -= 1
    return any("#" in line for line in lines[max(0, first - 3):lineno])


def imports(module: str, path: Path) -> list[Import]:
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            inside |= {id(n) for n in ast.walk(fn) if n is not fn}
    found: list[Import] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                targets = [".".join(base + ([node.module] if node.module else []))]
            elif node.module:
                targets = [node.module]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for target in targets:
            if target.split(".")[0] != "liken_devices" and not isinstance(node, ast.ImportFrom):
                continue
            commented = said_why(lines, node.lineno)
            found.append(Import(module, node.lineno, target, id(node) in inside, commented))
    return found


ALL = [i for module, path in modules() for i in imports(module, path)]
OURS = [i for i in ALL if i.target.split(".")[0] == "liken_devices"]


def test_every_unit_has_a_layer() -> None:
    assert {unit(m) for m, _ in modules()} <= LAYERS.keys()


@pytest.mark.parametrize("imp", [i for i in OURS if unit(i.module) != unit(i.target)],
                         ids=lambda i: f"{i.module}:{i.line}")
def test_imports_follow_the_layers(imp: Import) -> None:
    here, there = LAYERS[unit(imp.module)], LAYERS[unit(imp.target)]
    if there > here:
        assert imp.lazy and imp.commented, (
            f"{imp.module}:{imp.line} imports {imp.target}, a higher layer: only a lazy import "
            f"with a comment saying why may do that")


def test_every_lazy_import_says_why() -> None:
    silent = [f"{i.module}:{i.line} ({i.target})" for i in ALL if i.lazy and not i.commented]
    assert not silent, "lazy imports without a comment saying why: " + ", ".join(silent)


def test_the_walk_sees_the_imports() -> None:
    """The walk is not vacuous: it finds the policy's import of the hardware tree."""
    assert any(i.module == "liken_devices.inventory.policy"
               and i.target == "liken_devices.inventory.hardware" for i in ALL)
