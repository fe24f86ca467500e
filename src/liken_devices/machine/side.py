"""The one object the node agent embeds for the Machine's own work: modules and serial lines.

``liken-devices run`` applies the Machine object's spec after every walk (a walk follows
every relevant uevent, so a replug and a spec change arrive through the same path), and an
offline ``--machine FILE`` run applies the file's spec. :meth:`MachineSide.apply` returns the
status fragment the agent merges into the Machine's status::

    {"modules": [{name, state, message}],
     "serio": [{protocol, vendor, product, serial?, tty?, state, message}],
     "conditions": [ModulesLoaded, SerioAttached]}

Each condition is ``{type, status: "True"|"False", reason, message}``; the agent adds
``lastTransitionTime`` when it writes them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..inventory.model import MachineSpec
from ..sysfs.model import Snapshot
from .conditions import condition
from .modules import Loader, ModprobeLoader, ModuleManager, ModuleStatus

if TYPE_CHECKING:
    from .serio import LineOps, SerioManager

log = logging.getLogger(__name__)

MODULES_LOADED = "ModulesLoaded"
SERIO_ATTACHED = "SerioAttached"


def modules_condition(rows: list[ModuleStatus]) -> dict[str, str]:
    """True when every declared module is Loaded or Builtin (docs/machine.md, "Modules")."""
    declared = [r for r in rows if r.declared]
    if not declared:
        return condition(MODULES_LOADED, True, "NoneDeclared", "spec.modules declares no module")
    failed = [r.name for r in declared if r.state == "Failed"]
    missing = [r.name for r in declared if r.state == "Missing"]
    if failed or missing:
        parts = []
        if failed:
            parts.append(f"failed to load: {', '.join(failed)}")
        if missing:
            parts.append(f"not carried by this machine: {', '.join(missing)}")
        return condition(MODULES_LOADED, False, "LoadFailed" if failed else "ModulesMissing",
                          "; ".join(parts))
    would = [r.name for r in declared if r.state == "WouldLoad"]
    if would:
        return condition(MODULES_LOADED, False, "DryRun",
                          f"dry run: would load {', '.join(would)}")
    return condition(MODULES_LOADED, True, "AllLoaded",
                      f"all {len(declared)} declared modules are loaded or built in")


def serio_condition(rows: list[dict[str, str]], declared: int) -> dict[str, str]:
    """True when every ``spec.serio`` entry has its adapter's line attached."""
    if declared == 0:
        return condition(SERIO_ATTACHED, True, "NoneDeclared", "spec.serio declares no line")
    failed = [r for r in rows if r["state"] == "Failed"]
    waiting = [r for r in rows if r["state"] == "Waiting"]

    def label(r: dict[str, str]) -> str:
        return f"{r['protocol']} {r['vendor']}:{r['product']}" + (
            f" ({r['tty']})" if "tty" in r else "")

    if failed:
        return condition(SERIO_ATTACHED, False, "AttachFailed",
                          "; ".join(f"{label(r)}: {r['message']}" for r in failed))
    if waiting:
        # A Waiting row with a tty is a line another process holds (an upgrade's old instance).
        busy = all("tty" in r for r in waiting)
        return condition(SERIO_ATTACHED, False, "LineHeldElsewhere" if busy else "AdapterAbsent",
                          "; ".join(f"{label(r)}: {r['message']}" for r in waiting))
    if any(r["state"] != "Attached" for r in rows):
        return condition(SERIO_ATTACHED, False, "DryRun", "dry run: no line was attached")
    return condition(SERIO_ATTACHED, True, "AllAttached",
                      f"{len(rows)} serial line(s) attached to serio")


class MachineSide:
    """Loads ``spec.modules`` and holds ``spec.serio`` lines; reports both.

    ``loader`` loads one module and its dependencies (default: the real ``modprobe``);
    ``serio_opener`` makes the serial line's system calls (default: the real ones). ``on_change``
    is called (from another thread) when a held line ends on its own, so the agent can walk and
    report it without waiting for the next uevent.
    """

    def __init__(self, modules_dir: Path, loader: Loader | None = None,
                 serio_opener: LineOps | None = None, *, sys_root: Path = Path("/sys"),
                 proc_root: Path = Path("/proc"), dev_root: Path = Path("/dev"),
                 on_change: Callable[[], None] | None = None) -> None:
        self.modules = ModuleManager(modules_dir, loader or ModprobeLoader(modules_dir),
                                     sys_root=sys_root, proc_root=proc_root)
        self._serio_args = (serio_opener, dev_root, on_change)
        self._serio: SerioManager | None = None
        self._lock = threading.Lock()  # one pass at a time, whichever thread calls

    @property
    def serio(self) -> SerioManager:
        """The serial-line side, made (and its module loaded) when first needed: most machines
        declare no line, and their agent carries none of it."""
        if self._serio is None:
            # deferred: loaded by the first machine with a line, 4 ms (tests/test_layers.py)
            from .serio import SerioManager

            opener, dev_root, on_change = self._serio_args
            self._serio = SerioManager(opener, dev_root=dev_root, on_change=on_change)
        return self._serio

    def apply(self, spec: MachineSpec, snapshot: Snapshot, *, dry_run: bool = False
              ) -> dict[str, Any]:
        """Bring the machine in line with ``spec``; return the status fragment.

        ``dry_run`` (the CLI's preview) decides without attaching any line; a dry run's module
        loading is the loader's business (``ModprobeLoader(dry_run=True)`` loads nothing).
        """
        with self._lock:
            # Modules first: a line's serport or CEC driver may be among them (docs/machine.md).
            # Neither half can take the other (or the agent's walk) down: what fails becomes
            # the Failed rows of the entries it concerns.
            try:
                module_rows = self.modules.apply(spec.modules, dry_run=dry_run)
            except Exception as exc:
                log.warning("the module side failed: %s", exc)
                module_rows = [ModuleStatus(name, "Failed", f"cannot read the module tree: "
                                            f"{type(exc).__name__}: {exc}")
                               for name in dict.fromkeys(spec.modules)]
            try:
                # No line declared and none ever held: nothing to attach or release.
                serio_rows = self.serio.apply(spec.serio, snapshot, dry_run=dry_run) \
                    if spec.serio or self._serio is not None else []
            except Exception as exc:
                from .serio import failed_row  # deferred: see serio

                log.warning("the serial-line side failed: %s", exc)
                serio_rows = [failed_row(entry, f"{type(exc).__name__}: {exc}")
                              for entry in dict.fromkeys(spec.serio)]
        return {
            "modules": [r.to_status() for r in module_rows],
            "serio": serio_rows,
            "conditions": [modules_condition(module_rows),
                           serio_condition(serio_rows, len(spec.serio))],
        }

    def waiting_for_release(self) -> bool:
        """Whether a declared line is held by another process (docs/machine.md, "Upgrades and
        restarts"): its release's ``remove`` uevent then walks at once."""
        return self._serio is not None and self._serio.waiting_for_release()

    def close(self) -> None:
        """Release every held serial line."""
        if self._serio is not None:
            self._serio.close()
