"""One logging set-up for both programs, so their lines read alike wherever they are collected.

A line carries the time (UTC, ISO 8601 with milliseconds), the level, the logger and the message:
``2026-12-01T18:34:27.816Z WARNING liken_devices.agent: ...``. ``--log-format json`` writes one
JSON object per line instead (``time``, ``level``, ``logger``, ``msg``, and ``exc`` with the
traceback when there is one), for a cluster's log pipeline to index without parsing text.
In both, the message is cleaned (:mod:`liken_devices.terminal`): what a node, a driver or an API
server said cannot move the cursor, forge a line or reorder the text of whoever reads the log.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TextIO

from .terminal import clean

FORMATS = ("text", "json")


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + \
        f".{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: " \
            f"{clean(record.getMessage())}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"time": _timestamp(record), "level": record.levelname, "logger": record.name,
               "msg": clean(record.getMessage())}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def add_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *,
               inherit: bool = False) -> None:
    """``--log-format``; ``inherit``: a sub-command's copy, which leaves the main one's value
    alone unless given."""
    parser.add_argument("--log-format", choices=FORMATS,
                        default=argparse.SUPPRESS if inherit else "text",
                        help="log lines as text (time, level, logger, message) or as one JSON "
                             "object per line (default: text)")


def setup(level: int, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Route every logger's records to ``stream`` (stderr) in ``fmt``, at ``level``.

    Like logging.basicConfig, it leaves a root logger that already has handlers alone (a host
    program, or a test harness capturing logs, configured it).
    """
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
