"""``liken-devices machine apply``: a Machine spec's modules and serial lines, applied once.

The command's options and its help are :mod:`.cli`'s, read once into
:class:`.options.ApplyOptions`. While it holds a line it stays in the
foreground, and lets go on SIGTERM or SIGINT (see :mod:`.holder`).
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

from .. import signals
from ..cliargs import InputError, dump
from .modules import LoadError, ModprobeLoader
from .options import ApplyOptions
from .side import MachineSide


def failed(fragment: dict[str, Any]) -> bool:
    return (any(r["state"] in ("Missing", "Failed") for r in fragment["modules"])
            or any(r["state"] == "Failed" for r in fragment["serio"]))


class _NoTooling:
    """The loader of a dry run: it is never called (the plan comes from the module tree), and
    if it were, it would refuse instead of running modprobe (rules: machine.apply-this-host)."""

    def load(self, name: str) -> str:
        raise LoadError("a dry run runs no modprobe")


def cmd_apply(opts: ApplyOptions) -> int:
    # rules: machine.apply-this-host. The command loads this host's modules and opens this
    # host's ttys: the machine it read must be this host, or the run a dry run.
    inputs = opts.inputs
    if inputs.another_machine() and not opts.dry_run:
        what = (f"--recording {inputs.recording} is another machine"
                if inputs.recording is not None
                else f"--sysfs {inputs.sysfs} is not this host's /sys")
        raise InputError(f"machine apply loads modules and attaches lines on this host, and {what}"
                         "; add --dry-run to see what it would do there")
    sources = inputs.sources()
    sources.check()
    spec = sources.machine()
    modules_dir = sources.modules_dir
    wake = threading.Event()
    loader = _NoTooling() if opts.dry_run else ModprobeLoader(modules_dir)
    side = MachineSide(modules_dir, loader, sys_root=inputs.sysfs, on_change=wake.set)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        wake.set()

    try:
        fragment = side.apply(spec, sources.snapshot(), dry_run=opts.dry_run)
        sys.stdout.write(dump(fragment, opts.output))
        sys.stdout.flush()
        if opts.dry_run or not side.serio.held():
            return 1 if failed(fragment) else 0
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_signal),
                    signal.SIGINT: signal.signal(signal.SIGINT, on_signal)}
        try:
            while side.serio.held():
                signals.wait(wake)
                wake.clear()
                if stop.is_set():
                    break
                # A held line ended on its own: walk again and say what the machine has now.
                fragment = side.apply(spec, sources.snapshot())
                sys.stdout.write(("---\n" if opts.output == "yaml" else "")
                                 + dump(fragment, opts.output))
                sys.stdout.flush()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return 1 if failed(fragment) else 0
    finally:
        side.close()
