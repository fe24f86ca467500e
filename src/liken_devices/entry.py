"""The console scripts' entry points: each command's modules are imported with the cyclic garbage
collector paused.

Importing the package and its libraries makes tens of thousands of objects, none of them
garbage, and the collector would walk them again and again while they are made: a dozen passes
that find nothing, a noticeable part of a one-shot command's start-up (docs/performance.md,
"Start-up"). The pause ends before the command runs, with what the imports made frozen out of
the collector's view; a long-running agent settles its heap once it has started (:mod:`.heap`).
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Callable

from .probe import main as probe


def _run(module: str, name: str = "main") -> int:
    collecting = gc.isenabled()
    gc.disable()
    try:
        command: Callable[[], int] = getattr(importlib.import_module(module), name)
    finally:
        # What the imports made goes out of the collector's view, or the first passes after the
        # pause would walk all of it (a long-running agent collects it once, in heap.settle).
        gc.freeze()
        if collecting:
            gc.enable()
    return command()


def devices() -> int:
    """``liken-devices``: :func:`liken_devices.cli.main`; a plain ``probe`` command line (the
    DaemonSet's exec probes, every few seconds on every node) the short way, :mod:`.probe`."""
    if sys.argv[1:2] == ["probe"]:
        rc = probe(sys.argv[2:])
        if rc is not None:
            return rc
    return _run("liken_devices.cli")


def media() -> int:
    """``liken-media``: :func:`liken_devices.media.cli.main`."""
    return _run("liken_devices.media.cli")


def kubectl() -> int:
    """``kubectl-liken``: :func:`liken_devices.match.cli.kubectl_main`."""
    return _run("liken_devices.match.cli", "kubectl_main")


if __name__ == "__main__":  # python -m liken_devices.entry: the same as liken-devices
    sys.exit(devices())
