"""spec.modules: the decision (Builtin/Missing/Loaded/Failed), no retry loop, removal, the tooling.

Everything runs against a module tree built in the test and a loader double, so nothing is loaded
into the test machine's kernel; the real modprobe runs only in its dry-run mode (-n).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from liken_devices.inventory.model import MachineSpec
from liken_devices.machine.modules import (
    REMOVED_NOTE,
    LoadError,
    ModprobeLoader,
    ModuleManager,
    loaded_modules,
)
from liken_devices.machine.side import MachineSide, modules_condition
from liken_devices.machine.tree import ModuleTree, module_name_of
from liken_devices.sysfs.model import Snapshot

from .ktree import ModuleTreeBuilder

CEC = "kernel/drivers/media/cec/core/cec.ko"
PULSE8 = "kernel/drivers/media/cec/usb/pulse8/pulse8-cec.ko"
RAINSHADOW = "kernel/drivers/media/cec/usb/rainshadow/rainshadow-cec.ko.xz"
SERPORT = "kernel/drivers/input/serio/serport.ko"
BROKEN = "kernel/drivers/misc/broken.ko"


class RecordingLoader:
    """A loader double: records each load; fails the names it is told to."""

    def __init__(self, fail: dict[str, str] | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail or {}

    def load(self, name: str) -> str:
        self.calls.append(name)
        if name in self.fail:
            raise LoadError(self.fail[name])
        return f"insmod /lib/modules/x/{name}.ko"


def build_tree(tmp_path: Path) -> ModuleTreeBuilder:
    b = ModuleTreeBuilder(tmp_path / "root")
    b.module(CEC).module(PULSE8, CEC).module(RAINSHADOW, CEC).module(SERPORT)
    b.module(BROKEN, "kernel/drivers/misc/gone.ko")
    b.module("kernel/drivers/misc/gone.ko")
    b.absent.add("kernel/drivers/misc/gone.ko")
    b.builtin += ["kernel/drivers/hid/uhid.ko", "kernel/drivers/input/misc/uinput.ko"]
    b.aliases += [("char-major-10-239", "uhid"), ("tty-ldisc-2", "serport"),
                  ("serio:ty02pr40id*ex*", "pulse8_cec")]
    b.build()
    return b


@pytest.fixture
def tree(tmp_path: Path) -> ModuleTreeBuilder:
    return build_tree(tmp_path)


def manager(tree: ModuleTreeBuilder, tmp_path: Path, loader: RecordingLoader) -> ModuleManager:
    (tmp_path / "sys" / "module").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc").mkdir(exist_ok=True)
    return ModuleManager(tree.dir, loader, sys_root=tmp_path / "sys", proc_root=tmp_path / "proc")


def states(rows: list) -> dict[str, tuple[str, str]]:  # type: ignore[type-arg]
    return {r.name: (r.state, r.message) for r in rows}


def test_tree_parses_names_paths_and_dependencies(tree: ModuleTreeBuilder) -> None:
    t = ModuleTree.load(tree.dir)
    assert module_name_of(RAINSHADOW) == "rainshadow_cec"
    cat = t.catalog
    assert all(cat.dependency_line(m) for m in ("cec", "pulse8_cec", "rainshadow_cec", "serport"))
    assert cat.is_builtin("uhid") and cat.is_builtin("uinput") and not cat.is_builtin("cec")
    assert cat.literal_aliases("char-major-10-239") == ("uhid",)
    assert cat.literal_aliases("serio:ty02pr40id*ex*") == ()  # a pattern is not a name
    res = t.resolve("pulse8-cec")
    assert (res.kind, res.module, res.depends) == ("module", "pulse8_cec", ("cec",))
    assert res.path == tree.dir / PULSE8
    assert t.resolve("uhid").kind == "builtin"
    assert t.resolve("tty-ldisc-2").module == "serport"


def test_builtin_missing_and_loaded(tree: ModuleTreeBuilder, tmp_path: Path) -> None:
    loader = RecordingLoader()
    m = manager(tree, tmp_path, loader)
    rows = states(m.apply(("uhid", "pulse8-cec", "nosuch_driver", "char-major-10-239")))
    assert rows["uhid"][0] == "Builtin"
    assert rows["char-major-10-239"] == ("Builtin", "built into the kernel (alias of uhid)")
    state, message = rows["nosuch_driver"]
    assert state == "Missing"
    assert "does not carry module nosuch_driver" in message
    assert rows["pulse8-cec"][0] == "Loaded"
    assert "after cec" in rows["pulse8-cec"][1]
    assert loader.calls == ["pulse8-cec"]  # builtin and missing names never reach the tooling


def test_dash_and_underscore_are_one_module(tree: ModuleTreeBuilder, tmp_path: Path) -> None:
    loader = RecordingLoader()
    m = manager(tree, tmp_path, loader)
    rows = m.apply(("pulse8-cec", "pulse8_cec", "rainshadow_cec"))
    assert [r.name for r in rows] == ["pulse8-cec", "rainshadow_cec"]
    assert loader.calls == ["pulse8-cec", "rainshadow_cec"]


def test_listed_but_file_absent_is_missing(tree: ModuleTreeBuilder, tmp_path: Path) -> None:
    loader = RecordingLoader()
    rows = states(manager(tree, tmp_path, loader).apply(("broken", "gone")))
    assert rows["broken"][0] == "Missing"
    assert "its dependency gone" in rows["broken"][1] and "is absent" in rows["broken"][1]
    assert rows["gone"][0] == "Missing"
    assert loader.calls == []


def test_already_loaded_is_not_loaded_again(tree: ModuleTreeBuilder, tmp_path: Path) -> None:
    loader = RecordingLoader()
    m = manager(tree, tmp_path, loader)
    (tmp_path / "sys" / "module" / "pulse8_cec").mkdir()
    (tmp_path / "sys" / "module" / "pulse8_cec" / "initstate").write_text("live\n")
    (tmp_path / "sys" / "module" / "uhid").mkdir()  # a builtin's parameters dir: not "loaded"
    (tmp_path / "proc" / "modules").write_text(
        "serport 16384 0 - Live 0x0000000000000000\n")
    assert loaded_modules(tmp_path / "sys", tmp_path / "proc") == {"pulse8_cec", "serport"}
    rows = states(m.apply(("pulse8-cec", "serport", "uhid")))
    assert rows["pulse8-cec"] == ("Loaded", "already loaded")
    assert rows["serport"] == ("Loaded", "already loaded")
    assert rows["uhid"][0] == "Builtin"
    assert loader.calls == []


def test_failure_is_reported_and_not_retried_until_something_changes(
        tree: ModuleTreeBuilder, tmp_path: Path) -> None:
    kernel_says = "modprobe: ERROR: could not insert 'pulse8_cec': Operation not permitted"
    loader = RecordingLoader(fail={"pulse8_cec": kernel_says})
    m = manager(tree, tmp_path, loader)
    for _ in range(5):  # five walks, one attempt
        rows = states(m.apply(("pulse8_cec",)))
        assert rows["pulse8_cec"][0] == "Failed"
        assert kernel_says in rows["pulse8_cec"][1]
    assert loader.calls == ["pulse8_cec"]

    m.apply(("pulse8_cec", "uhid"))  # the spec changed: one new attempt
    m.apply(("pulse8_cec", "uhid"))
    assert loader.calls == ["pulse8_cec", "pulse8_cec"]

    # The module tree changed (a depmod run rewrote modules.dep): one new attempt.
    dep = tree.dir / "modules.dep"
    dep.write_text(dep.read_text() + "kernel/drivers/extra/new.ko:\n")
    os.utime(dep, ns=(1, 1))
    m.apply(("pulse8_cec", "uhid"))
    m.apply(("pulse8_cec", "uhid"))
    assert loader.calls == ["pulse8_cec"] * 3

    loader.fail.clear()  # the cause went away; the next change lets it load
    rows = states(m.apply(("pulse8_cec",)))
    assert rows["pulse8_cec"][0] == "Loaded"
    assert loader.calls == ["pulse8_cec"] * 4


def test_success_is_not_repeated_either(tree: ModuleTreeBuilder, tmp_path: Path) -> None:
    loader = RecordingLoader()
    m = manager(tree, tmp_path, loader)
    for _ in range(3):
        assert states(m.apply(("serport",)))["serport"][0] == "Loaded"
    assert loader.calls == ["serport"]


def test_removed_name_is_reported_and_never_unloaded(
        tree: ModuleTreeBuilder, tmp_path: Path) -> None:
    loader = RecordingLoader()
    m = manager(tree, tmp_path, loader)
    m.apply(("pulse8_cec", "uhid", "nosuch"))
    rows = m.apply(())
    by_name = {r.name: r for r in rows}
    assert by_name["pulse8_cec"].state == "Loaded"
    assert by_name["pulse8_cec"].message == REMOVED_NOTE
    assert "reboot" in REMOVED_NOTE
    assert not by_name["pulse8_cec"].declared
    assert by_name["uhid"].state == "Builtin"
    assert "nosuch" not in by_name  # never loaded: nothing remains to say
    assert loader.calls == ["pulse8_cec"]
    assert modules_condition(rows)["reason"] == "NoneDeclared"  # removed names do not count


@pytest.mark.parametrize("bad", ["../evil", "/lib/modules/x.ko", "-r", "--force", "a=b",
                                 "foo bar", "x" * 65, ""])
def test_names_are_validated(tree: ModuleTreeBuilder, tmp_path: Path, bad: str) -> None:
    loader = RecordingLoader()
    rows = manager(tree, tmp_path, loader).apply((bad,))
    assert rows[0].state == "Failed"
    assert "not a module name" in rows[0].message
    assert loader.calls == []
    with pytest.raises(LoadError):
        ModprobeLoader(tree.dir).command(bad)


def test_condition(tree: ModuleTreeBuilder, tmp_path: Path) -> None:
    loader = RecordingLoader(fail={"serport": "modprobe: ERROR: could not insert 'serport': "
                                              "Exec format error"})
    m = manager(tree, tmp_path, loader)
    ok = modules_condition(m.apply(("uhid", "pulse8_cec")))
    assert (ok["status"], ok["reason"]) == ("True", "AllLoaded")
    missing = modules_condition(m.apply(("uhid", "nosuch")))
    assert (missing["status"], missing["reason"]) == ("False", "ModulesMissing")
    assert "nosuch" in missing["message"]
    failed = modules_condition(m.apply(("nosuch", "serport")))
    assert (failed["status"], failed["reason"]) == ("False", "LoadFailed")
    assert "serport" in failed["message"] and "nosuch" in failed["message"]


def test_machine_side_fragment(tree: ModuleTreeBuilder, tmp_path: Path) -> None:
    loader = RecordingLoader()
    side = MachineSide(tree.dir, loader, sys_root=tmp_path / "nosys", proc_root=tmp_path / "np")
    out = side.apply(MachineSpec(modules=("pulse8_cec", "uhid")), Snapshot({}))
    assert out["modules"] == [
        {"name": "pulse8_cec", "state": "Loaded",
         "message": "loaded by the node, after cec: insmod /lib/modules/x/pulse8_cec.ko"},
        {"name": "uhid", "state": "Builtin", "message": "built into the kernel"}]
    assert out["serio"] == []
    assert [c["type"] for c in out["conditions"]] == ["ModulesLoaded", "SerioAttached"]
    assert all(c["status"] == "True" for c in out["conditions"])
    side.close()


# -- the real tooling, dry run only ---------------------------------------------------------

needs_modprobe = pytest.mark.skipif(
    not any(shutil.which(p) for p in ("modprobe", "/usr/sbin/modprobe", "/sbin/modprobe")),
    reason="modprobe (Debian package kmod) is not installed; setup.d/40-machine.sh installs it")


@needs_modprobe
def test_real_modprobe_dry_run_against_the_test_tree(tree: ModuleTreeBuilder) -> None:
    loader = ModprobeLoader(tree.dir, dry_run=True)
    argv = loader.command("pulse8-cec")
    assert argv[1:] == ["-n", "-v", "-d", str(tree.root), "-S", tree.version, "--", "pulse8-cec"]
    plan = loader.load("pulse8-cec")
    # modprobe resolves the dependency from the tree and would insert it first.
    assert plan == (f"insmod {tree.dir / CEC}; insmod {tree.dir / PULSE8}")
    assert loader.load("tty-ldisc-2") == f"insmod {tree.dir / SERPORT}"  # an alias, as modprobe
    assert loader.load("uhid") == ""  # built in: nothing to insert
    with pytest.raises(LoadError, match="FATAL: Module nosuch_driver not found"):
        loader.load("nosuch_driver")


class _Forbidden:
    def load(self, name: str) -> str:
        raise AssertionError(f"a dry run called the loader for {name}")


def test_machine_side_dry_run_states_the_plan_and_runs_no_tooling(tree: ModuleTreeBuilder,
                                                                  tmp_path: Path) -> None:
    """rules: machine.apply-this-host: the plan is modprobe's, read from modules.dep."""
    side = MachineSide(tree.dir, _Forbidden(),
                       sys_root=tmp_path / "nosys", proc_root=tmp_path / "noproc")
    out = side.apply(MachineSpec(modules=("rainshadow-cec", "uhid")), Snapshot({}), dry_run=True)
    rows = {r["name"]: r for r in out["modules"]}
    assert rows["rainshadow-cec"]["state"] == "WouldLoad"
    assert str(tree.dir / RAINSHADOW) in rows["rainshadow-cec"]["message"]
    assert rows["uhid"]["state"] == "Builtin"
    assert out["conditions"][0]["reason"] == "DryRun"
    # A dry run remembers nothing: a real apply afterwards still decides afresh.
    assert side.modules._attempts == {}


def test_modprobe_needs_a_lib_modules_layout(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="<root>/lib/modules/<version>"):
        ModprobeLoader(tmp_path / "somewhere").command("uhid")
    argv = ModprobeLoader(Path("/lib/modules/6.1.0-13-amd64")).command("uhid")
    assert argv[1:] == ["-v", "-d", "/", "-S", "6.1.0-13-amd64", "--", "uhid"]


def test_missing_modprobe_binary_is_a_load_error(tree: ModuleTreeBuilder) -> None:
    loader = ModprobeLoader(tree.dir, binary=str(tree.root / "no-such-modprobe"))
    with pytest.raises(LoadError, match="cannot run"):
        loader.load("uhid")
