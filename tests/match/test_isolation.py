"""The node agent never loads the CEL runtime: only claim-for, match and fleet import it."""

from __future__ import annotations

import subprocess
import sys


def _python(code: str) -> str:
    """What ``code`` prints in a fresh interpreter (nothing imported yet)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True).stdout


def test_agent_and_parser_do_not_import_the_cel_runtime() -> None:
    code = ("import sys\n"
            "import liken_devices.agent.runner, liken_devices.plugin.core\n"
            "from liken_devices.cli import build_parser\n"
            "build_parser()\n"
            "print(sorted(m for m in sys.modules if m.startswith(('cel_expr_python', 'celpy'))))\n")
    out = _python(code)
    assert out.strip() == "[]"


def test_match_loads_it_on_demand() -> None:
    code = ("import sys\n"
            "from liken_devices.match.cel import environment\n"
            "assert 'cel_expr_python' not in sys.modules\n"
            "environment()\n"
            "print('cel_expr_python' in sys.modules)\n")
    out = _python(code)
    assert out.strip() == "True"
