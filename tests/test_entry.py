"""The console scripts' entry points: imports run with the collector paused, the command after."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from liken_devices import entry, heap


def test_imports_are_frozen_out_of_the_collectors_view_and_the_command_runs_collecting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lk_entry_probe.py").write_text(
        "import gc\n"
        "MADE = [[i] for i in range(5000)]\n"
        "PAUSED = not gc.isenabled()\n"
        "def main():\n"
        "    return 7 if gc.isenabled() else 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert entry._run("lk_entry_probe") == 7  # the command runs with the collector on
        import lk_entry_probe  # type: ignore[import-not-found]

        assert lk_entry_probe.PAUSED  # the import ran with it paused
        assert gc.get_freeze_count() >= len(lk_entry_probe.MADE)
        heap.settle()  # a long-running process collects what the imports froze, then freezes
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        sys.modules.pop("lk_entry_probe", None)


def test_the_console_script_and_the_module_give_the_same_answer() -> None:
    script = Path(sys.executable).parent / "liken-devices"
    via_module = subprocess.run([sys.executable, "-m", "liken_devices.entry", "--version"],
                                capture_output=True, text=True, check=True).stdout
    assert via_module.startswith("liken-devices ")
    if script.exists():
        assert subprocess.run([str(script), "--version"], capture_output=True, text=True,
                              check=True).stdout == via_module
