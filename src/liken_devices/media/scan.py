"""``liken-media scan``: ask this machine's render nodes and print the slice, with no cluster
(docs/media.md). The command's options are :mod:`.cli`'s, read once into
:class:`.options.ScanOptions`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..cliargs import yaml_text
from ..terminal import clean_row
from .devices import build_slice, log, query_devices, render_devices, without_media
from .options import ScanOptions


def cmd_scan(opts: ScanOptions) -> int:
    sources = opts.sources
    snapshot = sources.snapshot()
    inventory = sources.walk(snapshot=snapshot)
    # A GPU with no render node has no media device: say which and why, rather than leave the
    # slice (or the table) empty with no word (rules: media.gpu-without-media).
    for line in without_media(inventory, snapshot):
        log.info("%s", line)
    devices = query_devices(render_devices(inventory), opts.dev, opts.timeout)
    obj = build_slice(opts.node, devices)
    if opts.output == "json":
        json.dump(obj, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif opts.output == "table":
        sys.stdout.write(table(obj))
    else:
        sys.stdout.write(yaml_text(obj))
    return 0


def table(obj: dict[str, Any]) -> str:
    """One row per GPU: its PCI address, VA-API driver, and what it decodes and encodes."""
    rows: list[tuple[str, ...]] = [("NAME", "PCI", "VA DRIVER", "DECODE", "ENCODE")]
    for d in obj["spec"]["devices"]:
        attrs = {k.rpartition("/")[2]: next(iter(v.values()))
                 for k, v in d.get("attributes", {}).items()}

        def true(prefix: str, a: dict[str, Any] = attrs) -> str:
            return ",".join(k[len(prefix):] for k, v in sorted(a.items())
                            if k.startswith(prefix) and v is True) or "-"

        rows.append(clean_row((d["name"], str(attrs.get("pciBusID", "-")),
                               str(attrs.get("vaDriver", "-")), true("decode"),
                               true("encode"))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  "
                   + r[-1] + "\n" for r in rows)
