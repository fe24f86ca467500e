"""The ``liken-devices`` command: what this machine offers, and the node agent's commands.

``scan``, ``deliveries``, ``explain`` and ``report`` are views of one inventory; they need no
cluster. The other sub-commands live with their parts of the package (``plugin``, ``claims``,
``run``, ``machine``...), each added by the ``register`` function of a module that
:data:`SUBCOMMANDS` names; a command line naming one command imports and builds only its own.
The shared inputs (``--sysfs``, ``--node``...) are :mod:`.cliargs`. Bad input exits 2 with one
line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .cliargs import (
    Parser,
    another_machine,
    dump,
    inputs_parent,
    node_from_args,
    run_command,
    setup_logging,
    sources_from_args,
    terminal_width,
)
from .inventory import Inventory, Sources
from .inventory.limits import DRIVER, MAX_DEVICES
from .slices import devices_json, ensure_valid, make_slice
from .terminal import clean, clean_row

log = logging.getLogger("liken_devices")

# Adds sub-commands: register(subparsers, inputs_parent).
Register = Callable[[Any, argparse.ArgumentParser], None]


def _walk(args: argparse.Namespace) -> tuple[Sources, Inventory]:
    sources = sources_from_args(args)
    sources.check()
    return sources, sources.walk()


def liken_slice(node: str, inv: Inventory) -> dict[str, Any]:
    obj = make_slice(node, DRIVER, devices_json(inv))
    ensure_valid(obj)
    return obj


# -- scan -------------------------------------------------------------------------------------


def cmd_scan(args: argparse.Namespace) -> int:
    node = node_from_args(args)
    _, inv = _walk(args)
    obj = liken_slice(node, inv)
    if args.output == "table":
        sys.stdout.write(table(inv))
    else:
        sys.stdout.write(dump(obj, args.output))
    if inv.overflow:
        log.warning("%d devices found, %d published: %d dropped past the cap of %d",
                    inv.total, len(inv.devices), len(inv.overflow), MAX_DEVICES)
    note_facts(inv)
    line = catalog_line(inv)
    if line is not None:
        print(f"liken-devices: {line}", file=sys.stderr)
    return 0


def catalog_line(inv: Inventory) -> str | None:
    """The one line that says no module can be named because the catalog was not read."""
    if inv.catalog_error is None:
        return None
    return (f"the module catalog was not read ({inv.catalog_error}): no module can be named "
            "for unclaimed hardware (--modules-dir DIR)")


def note_facts(inv: Inventory) -> None:
    """One line on stderr when no disk is offered: a warning when this host's facts could not
    be read, a plain line when another machine was given none (its facts are its own)."""
    if inv.facts.readable:
        return
    if not inv.facts.given:
        print(f"liken-devices: {inv.facts.error}", file=sys.stderr)
        return
    log.warning("storage facts unreadable (%s): no disk is offered", inv.facts.error)


def table(inv: Inventory) -> str:
    """A kubectl-like view of the slice for people."""
    rows: list[tuple[str, ...]] = [("NAME", "SUBSYSTEM", "DRIVER", "CLASS", "SHARED", "NODES",
                                    "HARDWARE")]
    for d in inv.devices:
        a = d.attributes
        hardware = str(a.get("name") or a.get("modalias") or "")
        nodes = ",".join(n.path for n in d.nodes[:3]) + (
            f",+{len(d.nodes) - 3}" if len(d.nodes) > 3 else "")
        rows.append(clean_row((d.name, str(a.get("subsystem", "-")), str(a.get("driver", "-")),
                               str(a.get("class", "-")), "yes" if d.shareable else "no",
                               nodes, hardware)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + "   " + r[-1]
             for r in rows]
    out = "\n".join(line.rstrip() for line in lines) + "\n"
    if len(rows) == 1:
        out = "No devices to publish.\n"
    if inv.overflow:
        out += f"\n{len(inv.overflow)} more devices dropped past the cap of {MAX_DEVICES}.\n"
    return out


# -- deliveries -------------------------------------------------------------------------------


def cmd_deliveries(args: argparse.Namespace) -> int:
    _, inv = _walk(args)
    obj = {d.name: [n.to_json() for n in d.nodes] for d in inv.devices}
    if args.output == "table":
        for name, nodes in obj.items():
            for n in nodes:
                sys.stdout.write(f"{clean(name)}\t{clean(n['path'])}\t{n['type']} "
                                 f"{n['major']}:{n['minor']}\n")
    else:
        sys.stdout.write(dump(obj, args.output))
    return 0


# -- explain ----------------------------------------------------------------------------------


def late_registrants(args: argparse.Namespace, inv: Inventory
                     ) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """rules: bluetooth.late-registrant. Per Bluetooth device, the numbers a running claim's
    container holds that another device registered after it started, from the kubelet plugin's
    state (:func:`.plugin.prepared.late_in_state`): ``--state-dir``, else this host's plugin's
    for this host and none for another machine; and why the state could not be read, or None."""
    if args.state_dir is None and another_machine(args):
        return {}, None
    # deferred: the plugin's state reader, explain's alone among these views, 11 ms that scan,
    # deliveries and report skip (tests/test_layers.py)
    from .plugin.prepared import late_in_state

    return late_in_state(args.state_dir, inv)


def explain_json(inv: Inventory, late: dict[str, list[dict[str, Any]]] | None = None,
                 state_error: str | None = None) -> dict[str, Any]:
    return {
        "published": len(inv.devices),
        "overflow": list(inv.overflow),
        "facts": {"readable": inv.facts.readable, "given": inv.facts.given,
                  "error": inv.facts.error},
        "moduleCatalog": {"read": inv.catalog_error is None, "error": inv.catalog_error},
        "hardware": [
            {"path": o.path, "bus": o.bus, "address": o.address, "driver": o.driver,
             "devices": list(o.devices),
             # What each device is, in the order of devices, when the hardware became several.
             **({"parts": list(o.parts)} if o.parts else {}),
             "reason": None if o.reason is None else str(o.reason), "detail": o.detail}
            for o in inv.outcomes
        ],
        "unclaimed": [
            {"path": u.path, "address": u.address, **u.to_status()} for u in inv.unclaimed
        ],
        # Nodes a claim does not state because they are other devices'
        # (rules: bluetooth.event-numbers-exclusive).
        "leftOut": {d.name: [x.to_json() for x in d.left_out] for d in inv.devices
                    if d.left_out},
        # Numbers a running claim's container holds that another device took since it
        # started, from the plugin's state (rules: bluetooth.late-registrant).
        "lateRegistrants": late or {},
        "pluginState": {"read": state_error is None, "error": state_error},
    }


def cmd_explain(args: argparse.Namespace) -> int:
    _, inv = _walk(args)
    late, state_error = late_registrants(args, inv)
    if args.output in ("json", "yaml"):
        sys.stdout.write(dump(explain_json(inv, late, state_error), args.output))
        return 0
    out: list[str] = []
    left_out = {d.name: d.left_out for d in inv.devices if d.left_out}
    for o in sorted(inv.outcomes, key=lambda o: (o.reason is not None, o.bus, o.address)):
        head = f"{o.bus} {o.address}" + (f" [{o.driver}]" if o.driver else " [no driver]")
        if o.devices:
            detail = o.detail
            left = [x for name in o.devices for x in left_out.get(name, ())]
            if left:
                # A Bluetooth adapter's numbers and owners are a screenful: -o json has them.
                detail = (f"Bluetooth adapter; {len(left)} of its 32 event numbers left out as "
                          f"other devices' own: {', '.join(f'13:{x.node.minor}' for x in left)} "
                          "(-o json: leftOut names each owner)")
            if o.parts:
                # Hardware that became several devices (a GPU): each with what it is.
                # rules: sharing.gpu-split, sharing.gpu-unnamed-kind
                named = ", ".join(f"{name} ({why})" if why else name
                                  for name, why in zip(o.devices, o.parts, strict=True))
                out.append(f"{head}: published as {named}" + (f"; {detail}" if detail else ""))
            else:
                out.append(f"{head}: published as {', '.join(o.devices)}"
                           + (f" ({detail})" if detail else ""))
            out.extend(f"  {name} UNHEALTHY in claim {x['claim']}: {x['why']}, registered "
                       "after the container started (it can read it until it restarts)"
                       for name in o.devices for x in late.get(name, ()))
        else:
            out.append(f"{head}: not published: {o.reason}" + (f" ({o.detail})" if o.detail
                                                                 else ""))
    if inv.unclaimed:
        out.append("")
        out.append("Unclaimed hardware:")
        for u in inv.unclaimed:
            out.append(f"  {u.message}")
    line = catalog_line(inv)
    if line is not None:
        out.append("")
        out.append(line[0].upper() + line[1:] + ".")
    if not inv.facts.readable:
        out.append("")
        out.append(f"{inv.facts.error[0].upper()}{inv.facts.error[1:]}." if not inv.facts.given
                   and inv.facts.error else
                   f"Storage facts unreadable ({inv.facts.error}): no disk is offered.")
    if state_error is not None:
        out.append("")
        out.append(f"The kubelet plugin's state cannot be read ({state_error}): late Bluetooth "
                   "registrants are not shown.")
    if inv.overflow:
        out.append("")
        out.append(f"{inv.total} devices found; {len(inv.overflow)} dropped past the cap of "
                   f"{MAX_DEVICES}: " + ", ".join(inv.overflow))
    sys.stdout.write("".join(fit(clean(line)) + "\n" for line in out))
    return 0


def fit(line: str, width: int | None = None) -> str:
    """A line of ``explain`` wrapped to the terminal's width, continued indented."""
    width = width or terminal_width()
    if len(line) <= width:
        return line
    return "\n".join(textwrap.wrap(line, width, subsequent_indent="    ",
                                    break_long_words=True, break_on_hyphens=False))


# -- report -----------------------------------------------------------------------------------


def report_text(node: str, inv: Inventory, declared: Sequence[str],
                serio: Sequence[dict[str, Any]] = ()) -> str:
    """A Machine manifest whose spec.modules lists, commented, what would drive the unclaimed."""
    lines = [
        "# Hardware report: the Machine for this node. Uncomment a module under spec.modules to",
        "# have the node load it; the hardware it drives appears in the slice at the next walk.",
        "apiVersion: liken.sh/v1alpha1",
        "kind: Machine",
        "metadata:",
        f"  name: {json.dumps(node)}",
        "spec:",
        "  modules:",
    ]
    lines += [f"  - {json.dumps(m)}" for m in declared]
    if not inv.unclaimed:
        lines.append("  # nothing unclaimed: every piece of hardware has a driver or needs none")
    unread = catalog_line(inv)
    if unread is not None and inv.unclaimed:
        lines.append(f"  # {unread}")
    for u in inv.unclaimed:
        label = " ".join(x for x in (u.bus, u.address) if x)
        what = ", ".join(x for x in (u.name, u.class_) if x)
        lines.append(f"  # {label}" + (f": {what}" if what else "")
                     + (f" ({u.modalias})" if u.modalias else ""))
        if u.candidates:
            lines += [f"  # - {m}" for m in u.candidates if m not in declared]
        elif unread is not None:
            lines.append("  #   no module named: the module catalog was not read")
        else:
            lines.append("  #   no module on this machine matches it")
    if serio:
        lines.append("  serio:")
        for entry in serio:
            lines.append("  - " + json.dumps(entry))
    # A comment line holds the hardware's own words: cleaned, no newline can end the comment.
    return "\n".join(clean(line) for line in lines) + "\n"


def cmd_report(args: argparse.Namespace) -> int:
    node = node_from_args(args)
    sources, inv = _walk(args)
    spec = sources.machine()
    serio = [{k: v for k, v in (("protocol", e.protocol), ("vendor", e.vendor),
                                ("product", e.product), ("serial", e.serial)) if v is not None}
             for e in spec.serio]
    sys.stdout.write(report_text(node, inv, spec.modules, serio))
    return 0


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
