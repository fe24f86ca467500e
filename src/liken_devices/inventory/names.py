"""Device names (rules: names.form, names.suffix, names.cut, names.collision, names.slot-not-unit).

A name is the bus and the address, lowercased, punctuation as dashes, cut to a DNS label; an
extra device of the same hardware carries a suffix. Two names that collide after the cut are
told apart by a hash of the later one's full address.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from .limits import NAME_MAX

_NON_NAME = re.compile(r"[^a-z0-9]+")


def name_part(address: str) -> str:
    """rules: names.form. Lowercase, every run outside [a-z0-9] becomes one ``-``, trimmed."""
    return _NON_NAME.sub("-", address.lower()).strip("-")


@lru_cache(maxsize=8192)
def device_name(bus: str, address: str, suffix: str = "", *, hashed: bool = False) -> str:
    """``<bus>-<address><suffix>`` cut to 63 characters, the base cut first (rules: names.cut)."""
    base = f"{bus}-{name_part(address)}"
    room = NAME_MAX - len(suffix)
    base = base[:room].rstrip("-")
    if hashed:
        # deferred: hashlib loads OpenSSL, 3 ms of every `scan` for a name that collides only
        # on a rare machine (tests/test_layers.py).
        import hashlib

        digest = hashlib.sha256(address.encode()).hexdigest()[:6]
        base = (base[:-7] if len(base) > 7 else "") + "-" + digest
        base = base[:room].lstrip("-")
    return base + suffix


def unique_names(wanted: Iterable[tuple[str, str, str]]) -> list[str]:
    """The names of ``(bus, address, suffix)`` in the order given (rules: names.collision).

    The caller orders by sysfs path: a name already taken after the cut goes to the earlier
    one, and the later one takes the hashed form.
    """
    seen: set[str] = set()
    out: list[str] = []
    for bus, address, suffix in wanted:
        name = device_name(bus, address, suffix)
        if name in seen:
            name = device_name(bus, address, suffix, hashed=True)
        seen.add(name)
        out.append(name)
    return out
