"""Benchmark: the machine side's cost per walk (``MachineSide.apply``), and its one-off tree parse.

apply() runs after every walk, so its steady state must stay small beside the walk itself: it
stats the three catalogs, reads /proc/modules and /sys/module, decides each declared name from
memory, and matches spec.serio against the snapshot. Sizes are a distribution kernel's: 6000
loadable modules, 800 built in, 30000 aliases, 200 entries under /sys/module, a 600-device
snapshot. Run with ``./tasks bench``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from liken_devices.inventory.model import MachineSpec, SerioEntry
from liken_devices.machine.side import MachineSide
from liken_devices.machine.tree import ModuleTree
from liken_devices.sysfs.model import Snapshot, SysDevice

from .figures import record, timed

MODULES = 6000


class NoLoad:
    def load(self, name: str) -> str:
        raise AssertionError(f"{name} should already be loaded")


def big_tree(root: Path) -> Path:
    d = root / "lib" / "modules" / "6.1.0-bench"
    (d / "kernel").mkdir(parents=True)
    lines, aliases = [], []
    for i in range(MODULES):
        path = f"kernel/drivers/d{i % 40}/mod{i}.ko.xz"
        deps = " ".join(f"kernel/drivers/d{j % 40}/mod{j}.ko.xz" for j in (i // 2, i // 3) if j)
        lines.append(f"{path}: {deps}".rstrip())
        for a in range(5):
            aliases.append(f"alias pci:v0000{i:04X}d0000{a:04X}sv*sd*bc*sc*i* mod{i}")
    (d / "modules.dep").write_text("\n".join(lines) + "\n")
    (d / "modules.builtin").write_text("".join(f"kernel/b/builtin{i}.ko\n" for i in range(800)))
    (d / "modules.alias").write_text("\n".join(aliases) + "\n")
    for i in range(0, 40, 4):  # the declared ones must exist to be "carried"
        f = d / f"kernel/drivers/d{i % 40}/mod{i}.ko.xz"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"")
    return d


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("machine-bench")
    modules_dir = big_tree(tmp)
    sys_root = tmp / "sys"
    for i in range(200):
        m = sys_root / "module" / f"mod{i}"
        m.mkdir(parents=True)
        (m / "initstate").write_text("live\n")
    devices = {f"/devices/platform/d{i}": SysDevice(f"/devices/platform/d{i}", "platform",
                                                     "drv", {}) for i in range(600)}
    spec = MachineSpec(modules=(*(f"mod{i}" for i in range(0, 40, 4)), "builtin7"),
                       serio=(SerioEntry("pulse8-cec", "2548", "1002"),))
    return {"modules_dir": modules_dir, "sys": sys_root, "proc": tmp / "proc",
            "snapshot": Snapshot(devices), "spec": spec}


@pytest.mark.benchmark(group="machine")
def test_apply_per_walk(benchmark: Any, setup: dict[str, Any]) -> None:
    side = MachineSide(setup["modules_dir"], NoLoad(), sys_root=setup["sys"],
                       proc_root=setup["proc"])
    side.apply(setup["spec"], setup["snapshot"])  # the first pass parses the tree
    out = benchmark(side.apply, setup["spec"], setup["snapshot"])
    record(benchmark, "machine", "machine side, one pass after a walk",
           [t * 1e3 for t in timed(benchmark)], "ms")
    assert {r["state"] for r in out["modules"]} == {"Loaded", "Builtin"}
    assert out["serio"][0]["state"] == "Waiting"
    side.close()


@pytest.mark.benchmark(group="machine")
def test_first_answers_of_a_new_tree(benchmark: Any, setup: dict[str, Any]) -> None:
    """After a depmod run the catalogs are asked afresh: the cost of the first answers."""

    def first_answers() -> list[str]:
        tree = ModuleTree.load(setup["modules_dir"])
        return [tree.resolve(name).kind for name in setup["spec"].modules]

    kinds = benchmark(first_answers)
    assert len(kinds) == 11 and kinds[-1] == "builtin" and "module" in kinds
    record(benchmark, "machine", "first answers of a new module tree (11 names)",
           [t * 1e3 for t in timed(benchmark)], "ms")
