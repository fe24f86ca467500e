"""The package's layers, pinned: sysfs -> inventory -> slices -> kube/plugin/machine/media ->
agent -> cli (README, "Layout").

An ``ast`` walk of every module, every import wherever it sits (at the top, in a function, under
``if TYPE_CHECKING``). A module imports only from its own layer or a lower one, with no
exception; the small shared modules at the bottom (errors, files, inputfiles) import nothing
above them. The modules a command line names by a string (``cli.SUBCOMMANDS``, the console
scripts of ``entry``) are arrows too, and follow the same order.

An import inside a function (a deferred import) hides an arrow from a reader and costs a lookup
at every call, so there are few, each in :data:`DEFERRED` with what it saves, measured, and a
comment beside it saying why. One kind is the rule: each ``*/cli.py`` is its commands' parser
alone and imports the module that runs a command when that command runs.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "liken_devices"

# The rank of each top-level unit of the package; a unit imports only units of rank <= its own.
LAYERS: dict[str, int] = {
    "": 0,  # the package itself (__version__)
    "errors": 0, "files": 0, "documents": 0, "heap": 0, "inputfiles": 0, "logs": 0, "probe": 0,
    "signals": 0, "terminal": 0, "apischema": 0,
    "sysfs": 1,
    "inventory": 2,
    "slices": 3, "cliargs": 3,
    "kube": 4, "plugin": 4, "machine": 4, "media": 4,
    "agent": 5, "match": 5,
    "cli": 6, "views": 6, "entry": 7,
}

# Each */cli.py's command modules: what --help and every other command do not import.
COMMANDS: dict[tuple[str, str], str] = {
    ("agent.cli", "agent.run"): "run: the agent's assembly, the API client, the kube side (33 ms)",
    ("plugin.cli", "plugin.serve"): "plugin: the plugin's core and the API client (60 ms)",
    ("plugin.cli", "plugin.prepared"): "claims: the state file's reader (11 ms)",
    ("plugin.cli", "plugin.upgrade"): "--seamless-upgrade's pod UID, read once: the UID's parser "
                                      "and, with the kubelet's version check, the kube package, "
                                      "which plugin and run import anyway (53-170 ms on a loaded "
                                      "machine)",
    ("machine.cli", "machine.apply"): "machine apply: the machine side (15 ms)",
    ("match.cli", "match.commands"): "claim-for, match: the allocator and CEL (41 ms)",
    ("match.cli", "match.cluster"): "fleet: the allocator, CEL and the API client (43 ms)",
    ("media.cli", "media.scan"): "liken-media scan (6 ms)",
    ("media.cli", "media.run"): "liken-media run: the agent and the kube side (104 ms)",
}

# Every other import inside a function, by (module, imported module): why it waits, and what the
# command it waits in saves. The figures are the import's cost in a fresh interpreter that has
# already imported that command's other modules (median of 9; 2 cores, Python 3.11).
OTHERS: dict[tuple[str, str], str] = {
    ("agent.run", "plugin.core"): "run --no-plugin starts without the plugin (42 ms)",
    ("agent.run", "grpc._server"): "grpcio only with the plugin (58-115 ms)",
    ("agent.run", "machine.side"): "run --no-machine-side starts without it (21 ms)",
    ("cliargs", "yaml"): "PyYAML only for YAML output; JSON and tables skip it (13 ms)",
    ("inventory.names", "hashlib"): "OpenSSL only for a name that collides (3 ms of every scan)",
    ("inventory.sources", "inventory.machinefile"): "the YAML reader only with --machine (30 ms)",
    ("inventory.sources", "sysfs.umockdev"): "only offline; a node reads sysfs (0.4 ms)",
    ("kube.client", "httpx2"): "lightkube's HTTP stack: an offline agent (--no-api) never loads "
                               "it (90-190 ms with lightkube)",
    ("kube.client", "lightkube"): "as httpx2",
    ("kube.client", "lightkube.core"): "as httpx2",
    ("kube.client", "lightkube.generic_resource"): "as httpx2",
    ("kube.machine", "lightkube.types"): "lightkube: the offline agent imports this module "
                                         "(90-190 ms)",
    ("plugin.claimstatus", "lightkube.types"): "lightkube: the plugin's core imports this "
                                               "module, and --no-api never writes (90-190 ms)",
    ("machine", "machine.side"): "PEP 562: the parser of machine apply imports the package "
                                 "(41 ms)",
    ("machine.side", "machine.serio"): "only for a Machine with a serial line (4 ms)",
    ("match.cel", "cel_expr_python"): "an optional dependency (the match extra): its absence is "
                                      "an error at the first CEL use, not at import (3 ms)",
    ("match.cel", "cel_expr_python.ext"): "as cel_expr_python",
    ("match.cel", "google.protobuf"): "as cel_expr_python",
    ("match.cel", "re2"): "as cel_expr_python (3 ms)",
    ("match.commands", "match.cluster"): "a local walk or --slices starts without the API "
                                         "client (6 ms)",
    ("media.probe", "ctypes"): "liken-media --help imports this module (4 ms)",
    ("plugin", "plugin.core"): "PEP 562: the commands' parser imports the package (26 ms)",
    ("plugin", "plugin.claimref"): "PEP 562: as plugin.core, for ClaimRef: dataclasses (8 ms)",
    ("plugin.claims", "lightkube"): "claims reads the state, which imports this module: "
                                    "lightkube only to talk to the API server (90-190 ms)",
    ("plugin.claims", "kube.client"): "as lightkube: the kube package (21 ms)",
    ("views", "plugin.prepared"): "explain, for this host or --state-dir: the plugin's state "
                                  "file's reader, as claims; scan, deliveries and report skip "
                                  "it (11 ms)",
    ("plugin.core", "plugin.server"): "the server imports the core (a cycle at the top); grpcio "
                                      "loads when the plugin starts (58 ms)",
}


def _full(name: str) -> str:
    """A short name of the tables above as the walk names it."""
    ours = name.split(".")[0] in LAYERS and name.split(".")[0] != ""
    return f"liken_devices.{name}" if ours else name


DEFERRED: dict[tuple[str, str], str] = {
    (_full(m), _full(t)): why for (m, t), why in {**COMMANDS, **OTHERS}.items()}


@dataclass(frozen=True)
class Import:
    module: str  # "liken_devices.plugin.cdi"
    line: int
    target: str  # "liken_devices.inventory.limits", "yaml"
    deferred: bool  # inside a function
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
    belongs to (one comment says why for a function's deferred imports)."""
    first = lineno - 1
    while first > 0 and lines[first - 1].strip().startswith(("from ", "import ")):
        first -= 1
    return any("#" in line for line in lines[max(0, first - 3):lineno])


def _is_module(dotted: str) -> bool:
    path = SRC.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(module: str, path: Path) -> list[Import]:
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inside |= {id(n) for n in ast.walk(fn) if n is not fn}
    found: list[Import] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                if node.module:
                    targets = [f"{base}.{node.module}"]
                else:  # from . import core: the module core, or a name of the package
                    targets = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base
                               for a in node.names]
            elif node.module:
                targets = [node.module]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for target in dict.fromkeys(targets):
            found.append(Import(module, node.lineno, target, id(node) in inside,
                                said_why(lines, node.lineno)))
    return found


ALL = [i for module, path in modules() for i in imports(module, path)]
OURS = [i for i in ALL if i.target.split(".")[0] == "liken_devices"]
DEFERRED_FOUND = [i for i in ALL if i.deferred]


def test_every_unit_has_a_layer() -> None:
    assert {unit(m) for m, _ in modules()} <= LAYERS.keys()


@pytest.mark.parametrize("imp", [i for i in OURS if unit(i.module) != unit(i.target)],
                         ids=lambda i: f"{i.module}:{i.line}")
def test_imports_follow_the_layers(imp: Import) -> None:
    here, there = LAYERS[unit(imp.module)], LAYERS[unit(imp.target)]
    assert there <= here, (
        f"{imp.module}:{imp.line} imports {imp.target}, a higher layer"
        + (" (inside a function: a deferred import climbs all the same)" if imp.deferred else ""))


def _named_by_strings() -> list[tuple[str, str]]:
    """(module, module it names by a string): cli's sub-command table and entry's scripts."""
    from liken_devices.cli import SUBCOMMANDS

    out = [("liken_devices.cli", f"liken_devices.{m}" if m else "liken_devices.cli")
           for _, m in SUBCOMMANDS]
    tree = ast.parse((SRC / "entry.py").read_text())
    out += [("liken_devices.entry", node.args[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "_run" and node.args and isinstance(node.args[0], ast.Constant)]
    return out


def test_the_modules_named_by_strings_follow_the_layers() -> None:
    named = _named_by_strings()
    assert ("liken_devices.entry", "liken_devices.media.cli") in named  # the walk sees them
    climbing = [f"{m} names {t}" for m, t in named if LAYERS[unit(t)] > LAYERS[unit(m)]]
    missing = [t for _, t in named if not _is_module(t)]
    assert not climbing and not missing, climbing + missing


def test_every_deferred_import_is_allowed() -> None:
    """An import inside a function is one of DEFERRED, which says what it saves."""
    unlisted = sorted({f"{i.module}:{i.line} ({i.target})" for i in DEFERRED_FOUND
                       if (i.module, i.target) not in DEFERRED})
    assert not unlisted, ("imports inside functions that DEFERRED does not allow (import at "
                          "the top, or measure what waiting saves and list it): "
                          + ", ".join(unlisted))


def test_every_allowed_deferral_is_still_there() -> None:
    found = {(i.module, i.target) for i in DEFERRED_FOUND}
    stale = sorted(f"{m} -> {t}" for m, t in DEFERRED if (m, t) not in found)
    assert not stale, "DEFERRED lists imports no function makes any more: " + ", ".join(stale)


def test_every_deferred_import_says_why() -> None:
    silent = [f"{i.module}:{i.line} ({i.target})" for i in DEFERRED_FOUND if not i.commented]
    assert not silent, "deferred imports without a comment saying why: " + ", ".join(silent)


def test_a_cli_module_defers_only_its_commands() -> None:
    """A */cli.py imports nothing else inside a function, and every module its commands run is
    one of COMMANDS."""
    clis = {i.module for i in DEFERRED_FOUND if i.module.endswith(".cli")}
    for imp in (i for i in DEFERRED_FOUND if i.module in clis):
        assert (imp.module, imp.target) in {(_full(m), _full(t)) for m, t in COMMANDS}, imp
    assert clis == {_full(m) for m, _ in COMMANDS}


def test_the_parsers_import_no_command_module() -> None:
    """Every parser built whole (--help) imports none of the modules that run the commands."""
    commands = sorted({_full(t) for _, t in COMMANDS})
    code = ("import sys\n"
            "from liken_devices.cli import build_parser\n"
            "from liken_devices.media.cli import build_parser as media\n"
            "from liken_devices.match import cli as match\n"
            "build_parser(); media()\n"
            "from liken_devices.cliargs import Parser, inputs_parent\n"
            "match.register(Parser().add_subparsers(), inputs_parent())\n"
            f"print(sorted(m for m in {commands!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_the_walk_sees_the_imports() -> None:
    """The walk is not vacuous: it finds the policy's import of the hardware tree, a deferred
    import of a library and each cli's deferred command module."""
    assert any(i.module == "liken_devices.inventory.policy"
               and i.target == "liken_devices.inventory.hardware" for i in ALL)
    assert any(i.module == "liken_devices.cliargs" and i.target == "yaml" and i.deferred
               for i in ALL)
    assert any(i.module == "liken_devices.plugin" and i.target == "liken_devices.plugin.core"
               and i.deferred for i in ALL)
