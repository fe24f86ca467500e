"""Where a slice goes once the devices are known: the one seat every publisher takes.

Both agents hand the devices of each walk to their publishers and never care where they go:
``kube.SlicePublisher`` keeps the ResourceSlice in the API server equal to them, and
:class:`SliceFile` writes the same slice to a file (an agent run offline, or a copy to read
while debugging). :class:`Publisher` is what the agents' loops ask of each.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..files import write_atomic
from ..inventory.limits import DRIVER
from .build import make_slice

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """What an agent's loop needs of a publisher of its slice."""

    writes: int  # how many times it wrote the slice

    @property
    def converged(self) -> bool:
        """Nothing is left for a later :meth:`sync` or retry: what was set is where it goes."""
        ...

    def set_devices(self, devices: list[dict[str, Any]]) -> None:
        """The devices the slice must list (API form, e.g. ``slices.devices_json``)."""

    def observe(self, event: str, obj: dict[str, Any] | None) -> bool:
        """A watch event for the slice (or "RESYNC"); True when a :meth:`sync` is due."""
        ...

    def sync(self) -> bool:
        """One attempt to write what was set; True when the slice is right."""
        ...

    def retry_in(self, now: float | None = None) -> float | None:
        """Seconds until the next attempt is due (0 when overdue), None when none is."""
        ...


class SliceFile:
    """A :class:`Publisher` that writes the slice's JSON to ``path`` atomically, when the devices
    change, raising the pool's generation with each write.

    No watch sees the file and no timer retries it: a failed write is logged and tried again at
    the next :meth:`sync` (the next walk), so the loop never waits for it (``converged``).
    ``published(devices, generation)`` is called after each write (the metrics of an agent that
    has no other publisher); without it a write is logged at debug level only.
    """

    def __init__(self, node: str, path: Path, driver: str = DRIVER,
                 published: Callable[[int, int], None] | None = None) -> None:
        self.node = node
        self.path = path
        self.driver = driver
        self._published = published
        self._desired: list[dict[str, Any]] | None = None
        self._written: list[dict[str, Any]] | None = None
        self.generation = 0
        self.writes = 0

    @property
    def converged(self) -> bool:
        return True  # nothing for the loop to wait for or retry (see the class docstring)

    def set_devices(self, devices: list[dict[str, Any]]) -> None:
        self._desired = devices

    def observe(self, event: str, obj: dict[str, Any] | None) -> bool:
        return False  # no watch sees a file

    def retry_in(self, now: float | None = None) -> float | None:
        return None

    def sync(self) -> bool:
        devices = self._desired
        if devices is None or devices == self._written:
            return True
        self.generation += 1  # a failed write's generation is not used again
        generation = self.generation
        obj = make_slice(self.node, self.driver, devices, generation=generation)
        try:
            write_atomic(self.path, json.dumps(obj, indent=2, sort_keys=True).encode() + b"\n",
                         mode=0o644)
        except OSError as exc:
            log.error("cannot write %s: %s", self.path, exc)
            return False
        self.writes += 1
        self._written = devices
        level = logging.INFO if self._published is not None else logging.DEBUG
        log.log(level, "wrote ResourceSlice %s-%s to %s: %d devices, generation %d", self.node,
                self.driver, self.path, len(devices), generation)
        if self._published is not None:
            self._published(len(devices), generation)
        return True
