"""How a kernel module's name is spelled: the one place that says what a module name is.

A Machine's ``spec.modules`` names modules as ``modprobe`` takes them (docs/machine.md,
"Modules"), and the catalogs (``modules.dep``, ``modules.builtin``, ``modules.alias``) name them
as the kernel does. Both pass through here: a name is letters, digits, ``_`` and ``-`` (the
kernel's ``MODULE_NAME_LEN`` is 56 bytes with the terminating NUL; a literal alias such as
``char-major-10-239`` may be longer, so 64 is the bound), never a path or an option string; and
``-`` and ``_`` are the same character (the kernel reports ``pulse8-cec`` as ``pulse8_cec``).
"""

from __future__ import annotations

import re

MAX_MODULE_NAME = 64
# Anchored with fullmatch: "pulse8_cec\n" is not a module name.
MODULE_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_-]{{0,{MAX_MODULE_NAME - 1}}}")


def is_module_name(name: object) -> bool:
    """A name ``modprobe`` gets as a module: no path, no option (``-r``), no ``=`` parameter."""
    return isinstance(name, str) and MODULE_NAME.fullmatch(name) is not None


def normalize(name: str) -> str:
    """The kernel's spelling: ``pulse8-cec`` and ``pulse8_cec`` are one module."""
    return name.replace("-", "_")
