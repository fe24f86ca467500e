"""No function in src/ is 60 lines or longer unless a note on it says why it reads better whole.

A long function asks its reader to hold all of it at once; split into named parts, each part
says what it is for. Where one does read better whole (a table, one protocol exchange read top
to bottom), the note ``# reads better whole: <why>`` on its ``def`` line or the line after it
says so, and the reason travels with the code. Length is counted from the ``def`` line to the
function's last line, as ``ast`` gives them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LIMIT = 60
NOTE = "# reads better whole:"


def long_functions(root: Path) -> list[str]:
    """Every function under ``root`` of ``LIMIT`` lines or more without the note, as
    ``path:line name (N lines)``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length < LIMIT:
                continue
            near = lines[node.lineno - 1:node.lineno + 1]
            if any(NOTE in line and line.split(NOTE, 1)[1].strip() for line in near):
                continue
            found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_the_count_sees_a_long_function_and_its_note(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT - 1))
    (tmp_path / "long.py").write_text(f"def long():\n{body}")  # LIMIT lines
    (tmp_path / "short.py").write_text(f"def short():\n{body[:-len('    x58 = 58')-1]}")
    (tmp_path / "noted.py").write_text(f"def noted():  {NOTE} one table\n{body}")
    (tmp_path / "after.py").write_text(f"def after():\n    {NOTE} one exchange\n{body}")
    (tmp_path / "empty.py").write_text(f"def empty():  {NOTE}\n{body}")  # a note without a why
    assert long_functions(tmp_path) == ["empty.py:1 empty (60 lines)", "long.py:1 long (60 lines)"]


@pytest.mark.xfail(strict=False, reason="other long functions are being split in parallel branches")
def test_no_long_function_without_its_note() -> None:
    assert long_functions(SRC) == []
