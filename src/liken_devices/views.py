"""The views of one inventory that ``liken-devices`` prints: ``scan``, ``deliveries``,
``explain`` and ``report``, as text, tables, JSON or YAML; they need no cluster.

:mod:`.cli` is their parser: it reads the command line once into a command's options (the
``*Options`` here, immutable and typed) and runs the view with them. The renderings
(:func:`table`, :func:`explain_json`, :func:`report_text`...) are pure functions of an inventory.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from .cliargs import dump, terminal_width
from .inventory import Inventory, Sources
from .inventory.limits import DRIVER, MAX_DEVICES
from .slices import devices_json, ensure_valid, make_slice
from .terminal import clean, clean_row

log = logging.getLogger("liken_devices")


class ScanOptions(NamedTuple):
    node: str
    sources: Sources
    output: str  # yaml, json or table


class DeliveriesOptions(NamedTuple):
    sources: Sources
    output: str  # json, yaml or table


class ExplainOptions(NamedTuple):
    sources: Sources
    output: str  # text, json or yaml
    state_dir: Path | None  # --state-dir; None: this host's plugin's
    plugin_state: bool  # whether the plugin's state is read (not for another machine's walk)


class ReportOptions(NamedTuple):
    node: str
    sources: Sources


def _walk(sources: Sources) -> Inventory:
    sources.check()
    return sources.walk()


def liken_slice(node: str, inv: Inventory) -> dict[str, Any]:
    obj = make_slice(node, DRIVER, devices_json(inv))
    ensure_valid(obj)
    return obj


# -- scan -------------------------------------------------------------------------------------


def scan(opts: ScanOptions) -> int:
    """``scan``: the slice as it would be written, or a table of it."""
    inv = _walk(opts.sources)
    obj = liken_slice(opts.node, inv)
    if opts.output == "table":
        sys.stdout.write(table(inv))
    else:
        sys.stdout.write(dump(obj, opts.output))
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


def deliveries(opts: DeliveriesOptions) -> int:
    """``deliveries``: the nodes a claim on each device receives."""
    inv = _walk(opts.sources)
    obj = {d.name: [n.to_json() for n in d.nodes] for d in inv.devices}
    if opts.output == "table":
        for name, nodes in obj.items():
            for n in nodes:
                sys.stdout.write(f"{clean(name)}\t{clean(n['path'])}\t{n['type']} "
                                 f"{n['major']}:{n['minor']}\n")
    else:
        sys.stdout.write(dump(obj, opts.output))
    return 0


# -- explain ----------------------------------------------------------------------------------


def late_registrants(opts: ExplainOptions, inv: Inventory
                     ) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """rules: bluetooth.late-registrant. Per Bluetooth device, the numbers a running claim's
    container holds that another device registered after it started, from the kubelet plugin's
    state (:func:`.plugin.prepared.late_in_state`): ``--state-dir``, else this host's plugin's
    for this host and none for another machine (:attr:`ExplainOptions.plugin_state`); and why
    the state could not be read, or None."""
    if not opts.plugin_state:
        return {}, None
    # deferred: the plugin's state reader, explain's alone among these views, 11 ms that scan,
    # deliveries and report skip (tests/test_layers.py)
    from .plugin.prepared import late_in_state

    return late_in_state(opts.state_dir, inv)


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


def explain(opts: ExplainOptions) -> int:
    """``explain``: what became of every piece of hardware, and why."""
    inv = _walk(opts.sources)
    late, state_error = late_registrants(opts, inv)
    if opts.output in ("json", "yaml"):
        sys.stdout.write(dump(explain_json(inv, late, state_error), opts.output))
        return 0
    sys.stdout.write("".join(fit(clean(line)) + "\n" for line in explain_lines(inv, late,
                                                                                 state_error)))
    return 0


def explain_lines(inv: Inventory, late: dict[str, list[dict[str, Any]]],
                  state_error: str | None) -> list[str]:
    """``explain``'s text, a line per piece of hardware, then what the walk could not read."""
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
    return out


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


def report(opts: ReportOptions) -> int:
    """``report``: the hardware report, a Machine manifest for this node."""
    inv = _walk(opts.sources)
    spec = opts.sources.machine()
    serio = [{k: v for k, v in (("protocol", e.protocol), ("vendor", e.vendor),
                                ("product", e.product), ("serial", e.serial)) if v is not None}
             for e in spec.serio]
    sys.stdout.write(report_text(opts.node, inv, spec.modules, serio))
    return 0
