"""The one error type for bad input from the operator, shared by every layer.

A recording, a sysfs tree, a Machine file or a node name that cannot be used is the operator's
mistake, not the program's: the command says what is wrong in one line on stderr and exits 2
(README, "What a machine offers"; docs/inventory.md, "Bad input"). Lower layers (the sysfs
readers) raise it too, so it lives below all of them.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input from the operator: a missing root, a malformed file. Exit status 2."""

