"""``liken-media``: the media capabilities agent's commands.

``scan`` asks this machine's render nodes and prints the ``<node>-media.liken.sh`` slice, with no
cluster (docs/media.md). ``run`` is the agent of the ``media-capabilities`` DaemonSet: it
asks once at start, publishes, and asks again only when liken publishes a render node it has not
seen (render-node-capabilities.txt: "The agent queries each render node once, when its pod starts
or when liken publishes a new render node ... No timer queries again").
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from ..cliargs import InputError, node_from_args, sources_from_args
from ..slices import SliceInvalid
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
    p.add_argument("--sysfs", type=Path, default=Path("/sys"), help="sysfs root (default /sys)")
    p.add_argument("--recording", type=Path, help="a umockdev recording to read instead of sysfs")
    p.add_argument("--facts", type=Path, default=Path("/run/liken/facts"), help=argparse.SUPPRESS)
    p.add_argument("--modules-dir", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--hwdata-dir", type=Path, action="append", default=None,
                   help="where pci.ids is (for the name attribute); repeat it to give "
                        "fallbacks: the first DIR with a readable copy is used")
    p.add_argument("--dev", type=Path, default=Path("/dev"),
                   help="where the render nodes are opened (default /dev)")
    p.add_argument("--node", default=None, help="the node's name (default: NODE_NAME or host)")
    p.add_argument("--timeout", type=_timeout, default=DEFAULT_TIMEOUT,
                   help=f"seconds one render node's query may take (default {DEFAULT_TIMEOUT:g})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="liken-media", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log libva's messages too")
    sub = parser.add_subparsers(dest="command", required=True)
    scan = sub.add_parser("scan", help="ask this machine's render nodes and print the slice")
    _common(scan)
    scan.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    scan.set_defaults(handler=cmd_scan)
    run = sub.add_parser("run", help="ask, publish, and watch liken's slice for new render nodes")
    _common(run)
    run.add_argument("--kubeconfig", type=Path, default=None,
                     help="kubeconfig file (default: in-cluster, then KUBECONFIG)")
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
    else:
        yaml.safe_dump(obj, sys.stdout, sort_keys=False)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .agent import run_agent

    return run_agent(args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(message)s", stream=sys.stderr)
    try:
        rc: int = args.handler(args)
    except InputError as exc:
        print(f"liken-media: {exc}", file=sys.stderr)
        return 2
    except SliceInvalid as exc:  # never expected: the API server would refuse it just the same
        print(f"liken-media: the slice would be invalid: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return rc


if __name__ == "__main__":
    sys.exit(main())
