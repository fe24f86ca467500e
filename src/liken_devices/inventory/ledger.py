"""What one walk has decided so far: the candidates to publish and a reason for the rest.

Every rule module writes here: a candidate device for the slice, an :class:`~.model.Outcome`
for every considered piece of hardware (``liken-devices explain``), the unclaimed hardware with
the modules that could drive it (the Machine's status, the hardware report), and the devices a
libusb program holds. The policy turns it into the :class:`~.model.Inventory`.

A rule hands over a candidate, never its name: the outcome of published hardware lists the
candidates it became, and the walk's :class:`~.names.Names` names them all at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from ..sysfs.model import DevNode
from .catalogs import Catalogs
from .hardware import Hardware
from .model import AttrValue, LeftOut, Outcome, Reason, Unclaimed


class Candidate(NamedTuple):
    """A device about to be published, before it is named and the cap applies."""

    hw: Hardware
    suffix: str
    kind: str
    nodes: tuple[DevNode, ...]
    attributes: dict[str, AttrValue]
    shareable: bool
    left_out: tuple[LeftOut, ...] = ()
    why: str = ""  # what explain says this device is, when its hardware became several


class Ledger:
    """The answers of one walk, in the order they were decided."""

    def __init__(self, attributes: Callable[[Hardware], dict[str, AttrValue]],
                 catalogs: Catalogs) -> None:
        self.attributes = attributes
        self.catalogs = catalogs
        self._catalog_error: str | bool | None = False  # False: not asked yet
        # Each outcome with the candidates it published (named at the end of the walk).
        self.outcomes: list[tuple[Outcome, tuple[Candidate, ...]]] = []
        self.unclaimed: list[Unclaimed] = []
        self.candidates: list[Candidate] = []
        # Devices out of the slice because a program or a claim holds them, by the name they
        # are held by (Names.of), with the nodes a claim on them keeps.
        self.held: dict[str, tuple[DevNode, ...]] = {}

    def outcome(self, hw: Hardware, reason: Reason | None, detail: str = "",
                devices: Iterable[Candidate] = ()) -> None:
        self.outcomes.append((Outcome(hw.path, hw.bus, hw.address, hw.dev.driver, (), reason,
                                      detail), tuple(devices)))

    def candidate(self, hw: Hardware, suffix: str, kind: str, nodes: tuple[DevNode, ...],
                  attributes: dict[str, AttrValue], shareable: bool,
                  left_out: tuple[LeftOut, ...] = (), why: str = "") -> Candidate:
        c = Candidate(hw, suffix, kind, nodes, attributes, shareable, left_out, why)
        self.candidates.append(c)
        return c

    def named_outcomes(self, names: Sequence[str]) -> list[Outcome]:
        """The outcomes, each with the names of its devices (``names``: the candidates' names,
        in the order the candidates were handed over) and what each of them is."""
        by_candidate = {id(c): n for c, n in zip(self.candidates, names, strict=True)}
        return [o._replace(devices=tuple(by_candidate[id(c)] for c in cs),
                           parts=tuple(c.why for c in cs) if any(c.why for c in cs) else ())
                if cs else o for o, cs in self.outcomes]

    def kernel_modules(self, hw: Hardware) -> tuple[str | None, tuple[str, ...]]:
        """The hardware's modalias and the modules on this machine that would drive it."""
        modalias = self.attributes(hw).get("modalias")
        modalias = modalias if isinstance(modalias, str) else None
        return modalias, self.catalogs.candidates(modalias)

    @property
    def catalog_error(self) -> str | None:
        """Why the module catalog was not read, when it was needed and could not be."""
        return self._catalog_error if isinstance(self._catalog_error, str) else None

    def _catalog_unread(self) -> str | None:
        if self._catalog_error is False:
            self._catalog_error = self.catalogs.modules.unread()
        return self.catalog_error

    def add_unclaimed(self, hw: Hardware) -> None:
        """Hardware no driver drives, with the modules that could.

        rules: machine.unclaimed, hardware.driver-bound
        """
        attrs = self.attributes(hw)
        modalias, candidates = self.kernel_modules(hw)
        label = f"{hw.bus} {hw.address}"
        if candidates:
            message = (f"{label} has no driver bound; declare {' or '.join(candidates)} in "
                       f"spec.modules and it appears in the slice at the next walk")
        elif modalias and self._catalog_unread():
            # The catalog's error is said once for the walk (Inventory.catalog_error).
            message = (f"{label} has no driver bound; no module can be named for it: the module "
                       "catalog was not read")
        elif modalias:
            message = (f"{label} has no driver bound and no module on this machine matches "
                       f"its modalias {modalias}")
        else:
            message = f"{label} has no driver bound and no modalias to match a module against"
        name, cls = attrs.get("name"), attrs.get("class")
        self.unclaimed.append(Unclaimed(hw.path, hw.bus, hw.address, modalias,
                                        name if isinstance(name, str) else None,
                                        cls if isinstance(cls, str) else None,
                                        candidates, message))
