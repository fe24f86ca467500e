"""``liken-devices claims``: the prepared claims from the state file, with the nodes each
delivers now; and the late Bluetooth registrants of those claims, which ``liken-devices explain``
shows (:func:`late_in_state`).

It walks with those claims as the plugin does; it only reads, so it works beside a running
plugin, and a state it cannot read is one line and exit 2 (for ``explain``, one line in its
answer). The command's options are :mod:`.cli`'s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..cliargs import dump
from ..inventory import Inventory
from ..terminal import clean, clean_row
from .late import late_json, late_registrants
from .options import ClaimsOptions
from .paths import DEFAULT_STATE_DIR
from .state import StateError, claimed_in, read_state


def claims_view(plugin_state_dir: Path, inv: Any | None) -> list[dict[str, Any]]:
    """The prepared claims with the nodes each device delivers now (None: absent)."""
    claims = read_state(plugin_state_dir)  # reads only: beside a running plugin too
    out = []
    for uid, c in sorted(claims.items()):
        devices = []
        published = inv.by_name() if inv is not None else {}
        late = late_registrants(c.started, inv) if inv is not None else {}
        for n in c.device_names():
            now = inv.lookup(n) if inv is not None else None
            requests = sorted({r for d in c.devices if d.name == n for r in d.requests})
            device = published.get(n)
            devices.append({
                "name": n,
                "requests": requests,
                "present": bool(now),
                "nodes": [x.to_json() for x in now] if now else None,
                "lastNodes": [x.to_json() for x in c.nodes.get(n, [])],
                # rules: bluetooth.event-numbers-exclusive
                "leftOut": [x.to_json() for x in device.left_out] if device else [],
                # rules: bluetooth.late-registrant. Numbers its running container holds that
                # another device registered after it started.
                "lateRegistrants": [late_json(x) for x in late.get(n, [])],
                "healthy": bool(now) and not late.get(n),
            })
        out.append({"uid": uid, "namespace": c.namespace, "name": c.name, "pool": c.pool,
                    "devices": devices, "usbInterfaces": c.usb_interfaces,
                    "rebuilt": c.rebuilt})
    return out


def late_in_state(state_dir: Path | None, inv: Inventory
                  ) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """rules: bluetooth.late-registrant. Per Bluetooth device, the numbers a running claim's
    container holds that another device registered after it started, each with its owner and
    claim, from the plugin's state in ``state_dir`` (None: this host's plugin's), read only as
    ``claims`` reads it; and why the state could not be read, or None."""
    try:
        claims = read_state(state_dir if state_dir is not None else DEFAULT_STATE_DIR)
    except StateError as e:
        return {}, str(e)
    out: dict[str, list[dict[str, Any]]] = {}
    for uid, c in sorted(claims.items()):
        for device, late in late_registrants(c.started, inv).items():
            out.setdefault(device, []).extend(
                {**late_json(x), "claim": f"{c.namespace}/{c.name}", "uid": uid} for x in late)
    return out, None


def run_claims(opts: ClaimsOptions) -> int:
    try:
        # The walk knows the prepared claims, as the plugin's does (docs/plugin.md).
        inv = opts.sources.walk(claimed=claimed_in(opts.state_dir))
        view = claims_view(opts.state_dir, inv)
    except StateError as e:
        print(f"liken-devices claims: {e} (a plugin rebuilds it from the CDI specs at its "
              "next start)", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"liken-devices claims: {clean(e)}", file=sys.stderr)
        return 2
    if opts.output in ("json", "yaml"):
        sys.stdout.write(dump(view, opts.output))
        return 0
    rows: list[tuple[str, ...]] = [("CLAIM", "UID", "DEVICE", "NODES")]
    for c in view:
        for d in c["devices"]:
            nodes = (" ".join(f"{x['path']}({x['type']}{x['major']}:{x['minor']})"
                              for x in d["nodes"]) if d["nodes"] else "absent")
            # A claim rebuilt from its CDI spec has no name until the kubelet prepares it again.
            claim = "(rebuilt)" if c["rebuilt"] else f"{c['namespace']}/{c['name']}"
            rows.append(clean_row((claim, c["uid"], d["name"], nodes)))
            late = {x["minor"] for x in d["lateRegistrants"]}
            rows.extend(clean_row(("", "", "", f"left out: {x['why']}")) for x in d["leftOut"]
                        if x["minor"] not in late)
            rows.extend(clean_row(("", "", "", f"UNHEALTHY, late registrant: {x['why']}, "
                                   "registered after the container started (it can read it "
                                   "until it restarts)"))
                        for x in d["lateRegistrants"])
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
    if len(rows) == 1:
        print("(no prepared claims)")
    return 0
