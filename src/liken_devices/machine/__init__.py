"""The machine side: the kernel modules a Machine declares, and the serial lines it attaches.

Declaring a module in ``spec.modules`` is the one step that moves hardware from the unclaimed report
into the slice, so the node loads it (rules: machine.declare-module). A ``spec.serio`` entry
attaches a USB-CEC adapter's tty to the kernel's serio layer, and the machine holds that attachment
for the life of the boot (rules: serial.attach).

:class:`~.side.MachineSide` is the one object the agent embeds. This package's ``__init__``
imports nothing heavy, because the serio line holder (:mod:`.holder`) runs as
``python -m liken_devices.machine.holder`` and must start fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .side import MachineSide

__all__ = ["MachineSide"]


def __getattr__(name: str) -> Any:
    if name == "MachineSide":
        # deferred (PEP 562): registering the commands must not load the machine side, 41 ms
        # (tests/test_layers.py)
        from .side import MachineSide

        return MachineSide
    raise AttributeError(name)
