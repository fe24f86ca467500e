"""``liken-devices machine apply``: a Machine spec's modules and serial lines, applied once.

The command's options and its help are :mod:`.cli`'s. While it holds a line it stays in the
foreground, and lets go on SIGTERM or SIGINT (see :mod:`.holder`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any

from .. import signals
from ..cliargs import dump, sources_from_args
from ..inventory.sources import default_modules_dir
from .modules import ModprobeLoader
from .side import MachineSide


def failed(fragment: dict[str, Any]) -> bool:
    return (any(r["state"] in ("Missing", "Failed") for r in fragment["modules"])
            or any(r["state"] == "Failed" for r in fragment["serio"]))


def cmd_apply(args: argparse.Namespace) -> int:
    sources = sources_from_args(args)
    sources.check()
    spec = sources.machine()
    modules_dir = args.modules_dir or default_modules_dir()
    wake = threading.Event()
    side = MachineSide(modules_dir, ModprobeLoader(modules_dir, dry_run=args.dry_run),
                       sys_root=args.sysfs, on_change=wake.set)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        wake.set()

    try:
        fragment = side.apply(spec, sources.snapshot(), dry_run=args.dry_run)
        sys.stdout.write(dump(fragment, args.output))
        sys.stdout.flush()
        if args.dry_run or not side.serio.held():
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
                sys.stdout.write(("---\n" if args.output == "yaml" else "")
                                 + dump(fragment, args.output))
                sys.stdout.flush()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return 1 if failed(fragment) else 0
    finally:
        side.close()
