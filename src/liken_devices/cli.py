"""The ``liken-devices`` command: what this machine offers, and the node agent's commands.

``scan``, ``deliveries``, ``explain`` and ``report`` are views of one inventory, :mod:`.views`;
they need no cluster. This module is their parser alone: each command line is read once into
the view's options. The other sub-commands live with their parts of the package (``plugin``,
``claims``, ``run``, ``machine``...), each added by the ``register`` function of a module that
:data:`SUBCOMMANDS` names; a command line naming one command imports and builds only its own.
The shared inputs (``--sysfs``, ``--node``...) are :mod:`.cliargs`. Bad input exits 2 with one
line on stderr."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import __version__, views
from .cliargs import Inputs, Parser, inputs_parent, run_command, setup_logging

# Adds sub-commands: register(subparsers, inputs_parent).
Register = Callable[[Any, argparse.ArgumentParser], None]


# -- the views' doors: the command line read once into a view's options ----------------------


def cmd_scan(args: argparse.Namespace) -> int:
    inputs = Inputs.from_args(args)
    return views.scan(views.ScanOptions(node=inputs.node_name(), sources=inputs.sources(),
                                        output=args.output))


def cmd_deliveries(args: argparse.Namespace) -> int:
    inputs = Inputs.from_args(args)
    return views.deliveries(views.DeliveriesOptions(sources=inputs.sources(), output=args.output))


def cmd_explain(args: argparse.Namespace) -> int:
    inputs = Inputs.from_args(args)
    return views.explain(views.ExplainOptions(
        sources=inputs.sources(), output=args.output, state_dir=args.state_dir,
        plugin_state=args.state_dir is not None or not inputs.another_machine()))


def cmd_report(args: argparse.Namespace) -> int:
    inputs = Inputs.from_args(args)
    return views.report(views.ReportOptions(node=inputs.node_name(), sources=inputs.sources()))


# -- the parser -------------------------------------------------------------------------------


def register_views(sub: Any, parent: argparse.ArgumentParser) -> None:
    """``scan``, ``deliveries``, ``explain`` and ``report``."""
    p = sub.add_parser("scan", parents=[parent], help="print this machine's ResourceSlice",
                       description="Print the ResourceSlice <node>-liken.sh exactly as it would "
                                   "be written to the API (no cluster needed).")
    p.add_argument("-o", "--output", choices=("yaml", "json", "table"), default="yaml")
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser("deliveries", parents=[parent],
                       help="print the nodes a claim on each device receives",
                       description="Print an object mapping each published device to the device "
                                   "nodes a claim on it receives: {path, type, major, minor}.")
    p.add_argument("-o", "--output", choices=("json", "yaml", "table"), default="json")
    p.set_defaults(func=cmd_deliveries)

    p = sub.add_parser("explain", parents=[parent],
                       help="say what became of every piece of hardware, and why",
                       description="List every considered piece of hardware with the devices it "
                                   "became or the reason it did not, and the unclaimed hardware "
                                   "with the modules that could drive it.")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    p.add_argument("--state-dir", type=Path, default=None, metavar="DIR",
                   help="the kubelet plugin's state, read for the late Bluetooth registrants of "
                        "running claims (default: the plugin's for this host; none for another "
                        "machine)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("report", parents=[parent],
                       help="print the hardware report: a Machine manifest for this node",
                       description="Print a Machine manifest for this node whose spec.modules is "
                                   "followed, for each piece of unclaimed hardware, by comment "
                                   "lines naming it and the modules that would drive it.")
    p.set_defaults(func=cmd_report)


# Every sub-command, in --help's order: the names a module's ``register`` adds, and the module
# ("" for this one). A command line naming one command imports only its module. A new command
# is one more name here (tests/test_cli.py holds the names to what the modules register).
SUBCOMMANDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("scan", "deliveries", "explain", "report"), ""),
    (("plugin", "claims"), "plugin.cli"),
    (("run", "probe"), "agent.cli"),
    (("machine",), "machine.cli"),
    (("claim-for", "match", "fleet"), "match.cli"),
)


def _register(module: str) -> Register:
    if not module:
        return register_views
    register: Register = importlib.import_module(f"{__package__}.{module}").register
    return register


class _Skipped:
    """Takes a sub-command's definition and keeps none of it (see :class:`_OneCommand`)."""

    def __getattr__(self, name: str) -> Callable[..., _Skipped]:
        return lambda *args, **kwargs: self


class _OneCommand:
    """The sub-commands action as registration sees it when the command line names one
    command: that command's parser is built, every other definition is skipped. A program that
    runs once per call (``scan`` in a loop, a probe) does not build some 60 parsers to use one.
    """

    def __init__(self, sub: Any, command: str) -> None:
        self.sub, self.command, self.found = sub, command, False

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name != self.command:
            return _Skipped()
        self.found = True
        return self.sub.add_parser(name, **kwargs)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command``, one whose only sub-command is that one (the whole
    parser when no sub-command has that name, so that the error lists them all)."""
    parent = inputs_parent()
    parser = Parser(
        prog="liken-devices",
        description="The liken.sh DRA driver: reads sysfs, publishes the node's claimable "
                    "hardware as the ResourceSlice <node>-liken.sh, and delivers /dev nodes to "
                    "containers through CDI.",
        epilog="Start with 'liken-devices scan -o table' to see what this machine offers, and "
               "'liken-devices explain' for why the rest is left out.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=Parser)
    one = _OneCommand(sub, command) if command is not None else None
    for names, module in SUBCOMMANDS:
        if one is None or command in names:
            _register(module)(one or sub, parent)
    if one is not None and not one.found:
        return build_parser()
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The top level has only --help and --version: a first word that is not an option is the
    # sub-command.
    command = argv[0] if argv and not argv[0].startswith("-") else None
    args = build_parser(command).parse_args(argv)
    setup_logging(getattr(args, "verbose", 0), getattr(args, "log_format", "text"))
    return run_command("liken-devices", args.func, args)


if __name__ == "__main__":
    sys.exit(main())
