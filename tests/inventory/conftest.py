"""The fixtures of the inventory's rule tests: a sysfs tree built on disk (``b``) and the policy
over it, read through the real sysfs reader (``scan``). A test file that defines its own ``b``
keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from liken_devices.inventory import Context, Facts, Inventory, MachineSpec
from liken_devices.inventory.catalogs import Catalogs
from liken_devices.inventory.policy import build_inventory
from liken_devices.sysfs.reader import read_sysfs
from tests.support.sysfs_builder import SysfsBuilder

from .support import Scan


@pytest.fixture
def b(tmp_path: Path) -> SysfsBuilder:
    return SysfsBuilder(tmp_path / "sys")


@pytest.fixture
def scan(b: SysfsBuilder) -> Scan:
    def run(*, roles: frozenset[str] | None = frozenset(), machine: MachineSpec | None = None,
            catalogs: Catalogs | None = None) -> Inventory:
        facts = Facts(roles, None if roles is not None else "facts root missing")
        ctx = Context(facts, machine or MachineSpec(), catalogs or Catalogs())
        return build_inventory(read_sysfs(b.root), ctx)
    return run
