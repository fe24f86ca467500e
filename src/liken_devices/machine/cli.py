"""``liken-devices machine apply``: apply a Machine spec's modules and serial lines once, offline.

The machine side works with and without a cluster (docs/machine.md). ``liken-devices run`` applies
the Machine object after each walk; this command applies a ``--machine FILE`` once and prints the
status fragment the agent would merge into the Machine's status. Because a serio attachment
lasts only while a process holds the line (see :mod:`.holder`), the command stays in the
foreground while it holds a line, and lets go on SIGTERM or SIGINT.

This module is the command's parser alone: it reads the command line once into
:class:`.options.ApplyOptions`, and :mod:`.apply` runs it, imported when it runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..cliargs import Inputs
from .options import ApplyOptions

HELP = """\
Apply the spec of --machine FILE to this machine once: load each module of spec.modules (with
modprobe, and what it depends on), attach each spec.serio adapter's ttyACM* to the kernel's serio
layer, and print the status fragment {modules, serio, conditions} that 'liken-devices run' merges
into the Machine's status.

A serio attachment lasts only while a process holds the line, so when at least one line is
attached the command stays in the foreground and holds it. SIGTERM or SIGINT (Ctrl-C) releases
every line and exits. If a held line ends on its own (the adapter was unplugged), the command
walks again, prints the new status, and exits when it holds no line any more. It does not follow
uevents: an adapter plugged in later is attached by 'liken-devices run', or by running this
command again. Modules are never unloaded (removing one takes a reboot).

--dry-run loads nothing, attaches nothing, runs no modprobe and opens no device node: modules
show WouldLoad with the plan modprobe would follow (read from modules.dep), lines WouldAttach.
The command acts on this host: --recording FILE, or a --sysfs tree other than /sys, is another
machine, and is refused without --dry-run.

Exit status: 0 when nothing failed (adapters that are absent are only Waiting), 1 when a module is
Missing or Failed or a line Failed, 2 on bad input.
"""


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    """Add ``machine apply`` to the ``liken-devices`` command."""
    machine = subparsers.add_parser(
        "machine", help="apply a Machine spec's modules and serial lines (offline)",
        description="The machine side of the node agent, run offline.")
    sub = machine.add_subparsers(dest="machine_command", metavar="COMMAND", required=True)
    p = sub.add_parser("apply", parents=[common_parent],
                       help="load spec.modules, attach spec.serio lines, print the status",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true",
                   help="decide and print, but load no module and attach no line")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml",
                   help="output format (default: yaml)")
    p.set_defaults(func=cmd_apply)


def cmd_apply(args: argparse.Namespace) -> int:
    # deferred: the command's module, 15 ms that --help and the other commands
    # skip (tests/test_layers.py)
    from .apply import cmd_apply

    return cmd_apply(ApplyOptions(inputs=Inputs.from_args(args), dry_run=args.dry_run,
                                  output=args.output))
