"""The inputs every ``liken-devices`` command shares, and their validation, in one place.

Every command reads the same machine: ``--sysfs DIR`` (or ``--recording FILE``), ``--facts DIR``,
``--machine FILE``, ``--modules-dir DIR``, ``--hwdata-dir DIR``, and names the same node
(``--node NAME``). The options, their defaults and the one rule for the node's name live here,
so that ``scan``, ``run``, ``plugin``, ``claims``, ``machine apply`` and ``liken-media`` agree.
:func:`dump` is the one way a command prints an object (``-o yaml|json``).
Bad input is an :class:`InputError`: the command exits 2 with one line on stderr (README,
"What a machine offers"; docs/inventory.md, "Bad input").
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from . import logs
from .inventory.context import InputError
from .inventory.limits import DNS_LABEL_MAX, DRIVER, slice_name
from .inventory.sources import Sources, default_hwdata_dir, default_modules_dir
from .terminal import clean

__all__ = [
    "InputError",
    "Inputs",
    "Parser",
    "add_inputs",
    "check_node_name",
    "dump",
    "inputs_parent",
    "node_name",
    "run_command",
    "setup_logging",
]

# This host's facts, which init writes.
HOST_FACTS = Path("/run/liken/facts")
# The environment variable a DaemonSet sets from the downward API (spec.nodeName).
NODE_NAME_ENV = "NODE_NAME"
# A Node's name is a DNS-1123 subdomain: at most 253 characters, dot-separated labels of
# lowercase letters, digits and '-', each starting and ending with a letter or digit.
MAX_NODE_NAME = 253
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # its length is checked first
_NOT_IN_NAME = re.compile(r"[^-a-z0-9.]")


def check_node_name(name: str, driver: str = DRIVER) -> str | None:
    """Why ``name`` cannot be a node's name (with ``<name>-<driver>`` a slice's), or None."""
    if not name:
        return "it is empty"
    limit = MAX_NODE_NAME - len(slice_name("", driver))  # the slice's name is a DNS subdomain too
    if len(name) > limit:
        return (f"it has {len(name)} characters; at most {limit} leave room for the "
                f"ResourceSlice name {slice_name('<node>', driver)}")
    bad = _NOT_IN_NAME.search(name)
    if bad is not None:
        ch = bad.group()
        what = "an upper-case letter" if ch.isupper() else repr(ch)
        return (f"it contains {what}; a node's name is a DNS subdomain: lowercase letters, "
                "digits, '-' and '.'")
    for label in name.split("."):
        if not label:
            return "it has an empty label (a leading, trailing or doubled '.')"
        if len(label) > DNS_LABEL_MAX:
            return f"its label {label[:20]!r}... is longer than {DNS_LABEL_MAX} characters"
        if not _LABEL.fullmatch(label):
            return f"its label {label!r} must start and end with a letter or digit"
    return None


def node_name(explicit: str | None, environ: Mapping[str, str] | None = None,
              hostname: str | None = None, driver: str = DRIVER) -> str:
    """The node's name, by the one rule: ``--node``, else ``$NODE_NAME``, else the host's name.

    The host's name is taken as the kubelet takes it when no ``--hostname-override`` is given:
    the whole name, lowercased. Raises :class:`InputError` with the reason when the name is not a
    DNS subdomain (a hostname with ``_`` cannot name a Node).
    """
    env = os.environ if environ is None else environ
    if explicit is not None:
        name, source = explicit, "--node"
    elif env.get(NODE_NAME_ENV):
        name, source = env[NODE_NAME_ENV], f"${NODE_NAME_ENV}"
    else:
        name = (hostname if hostname is not None else os.uname().nodename).strip().lower()
        source = "this host's name (pass --node NAME)"
    reason = check_node_name(name, driver)
    if reason is not None:
        raise InputError(f"node name {name[:80]!r} from {source} cannot name a node: {reason}")
    return name


def add_inputs(parser: argparse.ArgumentParser, *, machine: bool = True) -> None:
    """Add the shared input options to ``parser``; defaults are the real machine's paths."""
    g = parser.add_argument_group("where the machine is read from")
    g.add_argument("--sysfs", type=Path, default=Path("/sys"), metavar="DIR",
                   help="sysfs root to walk (default: /sys)")
    g.add_argument("--recording", type=Path, metavar="FILE",
                   help="read a umockdev recording (umockdev-record's text format) instead of "
                        "--sysfs")
    g.add_argument("--facts", type=Path, default=None, metavar="DIR",
                   help="init's facts tree; storage roles are storage/<role>/device "
                        f"(default: {HOST_FACTS} for this host; none for another machine's "
                        "--recording or --sysfs, whose disks are then withheld). Unreadable "
                        "facts: no disk is offered")
    if machine:
        g.add_argument("--machine", type=Path, metavar="FILE",
                       help="a Machine manifest (or just its spec) in YAML: spec.modules, "
                            "spec.serio")
    g.add_argument("--modules-dir", type=Path, default=None, metavar="DIR",
                   help="holds modules.alias, modules.builtin, modules.dep "
                        "(default: /lib/modules/$(uname -r))")
    g.add_argument("--hwdata-dir", type=Path, action="append", default=None, metavar="DIR",
                   help="holds pci.ids and usb.ids (default: /usr/share/hwdata); repeat it to "
                        "give fallbacks: each file is read from the first DIR with a readable "
                        "copy")
    g.add_argument("--node", default=None, metavar="NAME",
                   help=f"the node's name (default: ${NODE_NAME_ENV}, else this host's name)")


def add_endpoint_args(group: argparse._ActionsContainer, port_also: str = "") -> None:
    """The metrics and probe endpoint's options, the same for both agents (kube.endpoint);
    ``port_also`` ends --metrics-port's help."""
    group.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                       help="serve /metrics, /healthz and /readyz on this port (0: any free "
                            "port; default: no endpoint)" + port_also)
    group.add_argument("--metrics-addr", default=None, metavar="ADDR",
                       help="the endpoint's address (default: $POD_IP, which the DaemonSet "
                            "sets from the downward API, else 127.0.0.1)")


def terminal_width() -> int:
    """The terminal's columns ($COLUMNS, else the terminal's size, else 80), less two."""
    return _terminal_width()


def _terminal_width() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size().columns
    except (ValueError, OSError):
        columns = 80
    return max(columns, 40) - 2


class Parser(argparse.ArgumentParser):
    """The project's argument parser. A usage error is one line, like any bad input. It tells
    each formatter the terminal's width from ``os`` itself: argparse would import :mod:`shutil`
    for that (and with it the bz2, lzma and zlib modules) on every argument added, which is most
    of a ``scan``'s start-up beyond the interpreter."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        return self.formatter_class(prog=self.prog, width=_terminal_width())  # type: ignore[call-arg]

    def error(self, message: str) -> NoReturn:
        """A usage error is bad input: one line on stderr, exit status 2."""
        self.exit(2, f"{self.prog}: {clean(message)} (see '{self.prog} --help')\n")


def setup_logging(verbose: int, fmt: str = "text") -> None:
    """The log level of ``-v`` counted: warnings, ``-v`` info, ``-vv`` debug."""
    logs.setup(logging.WARNING - 10 * min(verbose, 2), fmt)


def inputs_parent() -> argparse.ArgumentParser:
    """A parent parser with the shared inputs and ``-v``, for every ``liken-devices`` command."""
    p = Parser(add_help=False)
    add_inputs(p)
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log more (-v: info, -vv: debug)")
    logs.add_option(p)
    return p


class Inputs(NamedTuple):
    """The shared inputs as one command line gave them, read from the parsed options once (a
    command's options hold it; nothing reads the parsed options again). A ``NamedTuple``:
    immutable and typed, without the dataclass machinery a one-shot command would import
    (docs/performance.md, "Start-up")."""

    sysfs: Path
    recording: Path | None
    facts: Path | None
    machine: Path | None
    modules_dir: Path | None
    hwdata_dir: tuple[Path, ...] | None
    node: str | None  # --node as given; :meth:`node_name` applies the one rule

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Inputs:
        """The inputs of the parsed options (a command without ``--machine`` or ``--node`` has
        none)."""
        return cls(sysfs=args.sysfs, recording=args.recording,
                   facts=getattr(args, "facts", None), machine=getattr(args, "machine", None),
                   modules_dir=args.modules_dir,
                   hwdata_dir=tuple(args.hwdata_dir) if args.hwdata_dir else None,
                   node=getattr(args, "node", None))

    def another_machine(self) -> bool:
        """Whether the options read a machine that is not this host: a recording, or a sysfs
        tree other than /sys."""
        if self.recording is not None:
            return True
        return os.path.realpath(self.sysfs) != os.path.realpath("/sys")

    def facts_dir(self) -> Path | None:
        """``--facts DIR``; else this host's facts for this host, and none for another machine
        (rules: hardware.other-machines-facts: its disks are withheld)."""
        if self.facts is not None:
            return self.facts
        return None if self.another_machine() else HOST_FACTS

    def sources(self) -> Sources:
        """Where the options say each walk reads from."""
        return Sources(
            sysfs=self.sysfs,
            facts=self.facts_dir(),
            machine_file=self.machine,
            modules_dir=self.modules_dir or default_modules_dir(),
            hwdata_dir=self.hwdata_dir or default_hwdata_dir(),
            recording=self.recording,
        )

    def node_name(self, driver: str = DRIVER) -> str:
        """The node's name for these options (see :func:`node_name`)."""
        return node_name(self.node, driver=driver)


# A plain scalar that some YAML reader takes for a number, a boolean or null. PyYAML follows
# YAML 1.1 and leaves `0249` or `1e10` plain, but kubectl's reader (YAML 1.1 with Go's number
# parsing, or 1.2) reads them as numbers: a USB product ID `0249` would reach the API server as
# 249 and the object be refused. Such strings are written quoted.
_AMBIGUOUS = re.compile(r"[-+]?(?:[0-9][0-9_.:]*(?:[eE][-+]?[0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+]?"
                        r"[0-9]+)?|\.?inf(?:inity)?|\.?nan|0[xXoObB][0-9a-fA-F_]+)|~|null|true|false|yes|no|"
                        r"on|off|y|n|=|<<", re.IGNORECASE)


def yaml_text(objs: Any, many: bool = False) -> str:
    """``objs`` as YAML that every reader takes as it was meant: strings that look like numbers,
    booleans or null are quoted, and a string's subclasses (the project's StrEnums) are strings.
    With ``many``, ``objs`` is a sequence of documents."""
    # deferred: PyYAML only for YAML output, 13 ms that JSON or a table skip
    # (tests/test_layers.py)
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
        style = '"' if _AMBIGUOUS.fullmatch(data) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style=style)

    Dumper.add_representer(str, represent_str)
    Dumper.add_multi_representer(str, represent_str)
    if many:
        return str(yaml.dump_all(objs, Dumper=Dumper, sort_keys=False, allow_unicode=True))
    return str(yaml.dump(objs, Dumper=Dumper, sort_keys=False, allow_unicode=True))


def dump(obj: Any, fmt: str) -> str:
    """``obj`` as a command prints it: ``json`` (indented) or YAML."""
    if fmt == "json":
        return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    return yaml_text(obj)


def run_command(prog: str, func: Callable[[argparse.Namespace], int],
                args: argparse.Namespace) -> int:
    """Run a parsed command the way every command line of the project ends: bad input is one
    line on stderr and exit 2, a closed pipe is a quiet 0, ^C is 130."""
    try:
        return int(func(args))
    except InputError as exc:
        print(f"{prog}: {clean(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
