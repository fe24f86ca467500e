"""``liken-media``: the media capabilities agent's commands.

``scan`` asks this machine's render nodes and prints the ``<node>-media.liken.sh`` slice, with no
cluster (docs/media.md). ``run`` is the agent of the ``media-capabilities`` DaemonSet: it
asks once at start, publishes, and asks again only when liken publishes a render node it has not
seen; no timer asks again (rules: media.query-once).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import __version__, logs
from ..cliargs import (
    InputError,
    Parser,
    add_endpoint_args,
    node_from_args,
    sources_from_args,
    yaml_text,
)
from ..inventory.limits import DRIVER as LIKEN_DRIVER
from ..slices import SliceInvalid
from ..terminal import clean, clean_row
from .agent import MediaAgent
from .devices import DRIVER, build_slice, query_devices, render_devices
from .probe import DEFAULT_TIMEOUT

log = logging.getLogger("liken_devices.media")


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("the timeout must be between 0 and 3600 seconds")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    # The same names, metavars and verbosity as liken-devices' commands (cliargs).
    p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                   help="log more (-v: debug, with libva's messages)")
    logs.add_option(p, inherit=True)
    p.add_argument("--sysfs", type=Path, default=Path("/sys"), metavar="DIR",
                   help="sysfs root to walk (default: /sys)")
    p.add_argument("--recording", type=Path, metavar="FILE",
                   help="read a umockdev recording (umockdev-record's text format) instead of "
                        "--sysfs")
    p.add_argument("--facts", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--modules-dir", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--hwdata-dir", type=Path, action="append", default=None, metavar="DIR",
                   help="holds pci.ids (for the name attribute; default: /usr/share/hwdata); "
                        "repeat it to give fallbacks: the first DIR with a readable copy is used")
    p.add_argument("--dev", type=Path, default=Path("/dev"), metavar="DIR",
                   help="where the render nodes are opened (default: /dev)")
    p.add_argument("--node", default=None, metavar="NAME",
                   help="the node's name (default: $NODE_NAME, else this host's name)")
    p.add_argument("--timeout", type=_timeout, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"seconds one render node's query may take (default: "
                        f"{DEFAULT_TIMEOUT:g})")


# Literal, not the docstring: the agent may run with PYTHONOPTIMIZE=2, which drops docstrings.
DESCRIPTION = ("The media capabilities agent: what each GPU's VA-API driver decodes, encodes "
               "and scales.")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="liken-media", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more (-v: debug, with libva's messages); also after the "
                             "command")
    logs.add_option(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=Parser)
    scan = sub.add_parser("scan", help="ask this machine's render nodes and print the slice",
                          description="Ask each render node liken publishes on this machine what "
                                      "its VA-API driver decodes, encodes and scales, and print "
                                      "the ResourceSlice <node>-media.liken.sh as it would be "
                                      "written (no cluster needed).")
    _common(scan)
    scan.add_argument("-o", "--output", choices=("yaml", "json", "table"), default="yaml",
                      help="the slice as YAML or JSON, or a table of each GPU's capabilities")
    scan.set_defaults(handler=cmd_scan)
    run = sub.add_parser("run", help="ask, publish, and watch liken's slice for new render nodes",
                         description="The node agent: ask every render node once, publish "
                                     "<node>-media.liken.sh, and ask again only when liken's "
                                     "slice names a render node not seen yet.")
    _common(run)
    run.add_argument("--kubeconfig", type=Path, default=None,
                     help="kubeconfig file (default: in-cluster, then KUBECONFIG)")
    add_endpoint_args(run)
    run.add_argument("--pod-name", default=os.environ.get("POD_NAME") or None, metavar="NAME",
                     help="this pod, evicted when liken publishes a render node it lacks "
                          "(default: $POD_NAME)")
    run.add_argument("--pod-namespace", default=os.environ.get("POD_NAMESPACE") or None,
                     metavar="NS", help="this pod's namespace (default: $POD_NAMESPACE)")
    run.set_defaults(handler=cmd_run)
    return parser


def cmd_scan(args: argparse.Namespace) -> int:
    node = node_from_args(args, DRIVER)
    sources = sources_from_args(args)
    sources.check()
    inventory = sources.walk()
    devices = query_devices(render_devices(inventory), args.dev, args.timeout)
    obj = build_slice(node, devices)
    if args.output == "json":
        json.dump(obj, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.output == "table":
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


def cmd_run(args: argparse.Namespace) -> int:
    return run_agent(args)


def run_agent(args: argparse.Namespace, stop: threading.Event | None = None,
              ready: Callable[[MediaAgent], None] | None = None) -> int:
    """The DaemonSet's process: ``liken-media run --node NAME [--kubeconfig FILE]``; tests run
    it in a thread with their own ``stop`` and learn the agent through ``ready``."""
    # lazy: loaded when this sub-command runs; the other commands start without it
    from ..kube import NoClusterConfig, ObjectWatch, Resources, SlicePublisher, make_client
    from ..kube.endpoint import Endpoint, default_address
    from ..kube.evict import PodEvictor
    from .metrics import MediaMetrics

    node = node_from_args(args, DRIVER)
    sources = sources_from_args(args)
    sources.check()
    try:
        client = make_client(args.kubeconfig)
    except NoClusterConfig as exc:
        log.error("liken-media run: %s (give --kubeconfig)", exc)
        return 2
    metrics = MediaMetrics()
    publisher = SlicePublisher(client, node, driver=DRIVER, metrics=metrics)
    evictor = None
    if args.pod_name and args.pod_namespace:
        evictor = PodEvictor(client, args.pod_namespace, args.pod_name)
    agent = MediaAgent(sources, publisher, args.dev, args.timeout, evictor=evictor,
                       metrics=metrics)
    endpoint = None
    if args.metrics_port is not None:
        addr = args.metrics_addr or default_address()
        try:
            endpoint = Endpoint(addr, args.metrics_port, metrics.exposition,
                                health=agent.health, ready=agent.readiness)
        except InputError:
            client.close()
            raise
        log.info("metrics and probes on %s:%d (/metrics, /healthz, /readyz)", addr,
                 endpoint.port)
        agent.endpoint_port = endpoint.port
    stop = stop or threading.Event()

    def factory() -> Any:
        return make_client(args.kubeconfig)

    watches = [
        ObjectWatch(factory, Resources.slice(), {"spec.nodeName": node,
                                                 "spec.driver": LIKEN_DRIVER},
                    agent.on_liken_slice, "liken-slice"),
        ObjectWatch(factory, Resources.slice(), {"spec.nodeName": node, "spec.driver": DRIVER},
                    agent.on_own_slice, "media-slice"),
    ]

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("liken-media: signal %d, stopping", signum)
        stop.set()
        agent.wake()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    if ready is not None:
        ready(agent)
    try:
        agent.run(stop, watches)
    finally:
        if endpoint is not None:
            endpoint.stop()
        client.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.setup(logging.DEBUG if args.verbose else logging.INFO, args.log_format)
    try:
        rc: int = args.handler(args)
    except InputError as exc:
        print(f"liken-media: {clean(exc)}", file=sys.stderr)
        return 2
    except SliceInvalid as exc:  # never expected: the API server would refuse it just the same
        print(f"liken-media: the slice would be invalid: {clean(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return rc


if __name__ == "__main__":
    sys.exit(main())
