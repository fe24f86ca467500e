"""``liken-media``: the media capabilities agent's commands.

``scan`` asks this machine's render nodes and prints the ``<node>-media.liken.sh`` slice, with no
cluster (docs/media.md). ``run`` is the agent of the ``media-capabilities`` DaemonSet: it
asks once at start, publishes, and asks again only when liken publishes a render node it has not
seen; no timer asks again (rules: media.query-once).

This module is the commands' parser alone: it reads a command line once into the command's
options (:mod:`.options`); ``scan`` is :mod:`.scan` and ``run`` :mod:`.run`, each imported when
its command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import __version__, logs
from ..cliargs import InputError, Inputs, Parser, add_endpoint_args
from ..inventory.limits import MEDIA_DRIVER
from ..inventory.sources import Sources
from ..slices import SliceInvalid
from ..terminal import clean
from .options import RunOptions, ScanOptions
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
    # deferred: the command's module, 6 ms that --help and the other commands
    # skip (tests/test_layers.py)
    from .scan import cmd_scan

    node, sources = _machine(args)
    return cmd_scan(ScanOptions(node=node, sources=sources, dev=args.dev, timeout=args.timeout,
                                output=args.output))


def cmd_run(args: argparse.Namespace) -> int:
    # deferred: the command's module, 104 ms that --help and the other commands
    # skip (tests/test_layers.py)
    from .run import cmd_run

    return cmd_run(run_options(args))


def run_options(args: argparse.Namespace) -> RunOptions:
    """``run``'s command line, read once."""
    node, sources = _machine(args)
    return RunOptions(node=node, sources=sources, dev=args.dev, timeout=args.timeout,
                      kubeconfig=args.kubeconfig, metrics_port=args.metrics_port,
                      metrics_addr=args.metrics_addr, pod_name=args.pod_name,
                      pod_namespace=args.pod_namespace)


def _machine(args: argparse.Namespace) -> tuple[str, Sources]:
    """The node's name (the one rule, for the media slice's name), then the sources, checked."""
    inputs = Inputs.from_args(args)
    node = inputs.node_name(MEDIA_DRIVER)
    sources = inputs.sources()
    sources.check()
    return node, sources


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
