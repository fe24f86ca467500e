"""``liken-devices run``: the node agent as one long-running process (``docs/agent.md``); and
``liken-devices probe``, which asks it.

With a cluster (``--kubeconfig``, or in a pod's service account) it publishes the slice,
serves the kubelet plugin and reports the Machine named after the node. Without one
(``--no-api``, or neither a kubeconfig nor a service account) it still follows the kernel and
walks, reads the Machine's spec from ``--machine FILE`` and writes what it would publish to
``--slice-out``/``--status-out``.

This module is the commands' parser alone: it reads ``run``'s command line once into
:class:`.options.RunOptions`; ``run`` is :mod:`.run`, imported when the command runs, so that
``--help`` and the other commands start without the agent's modules.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..cliargs import Inputs, add_endpoint_args
from ..inventory.limits import MAX_DEVICES, slice_name
from ..plugin.cli import plugin_dirs, upgrade_args, upgrade_options
from ..plugin.paths import (
    DEFAULT_CDI_DIR,
    DEFAULT_PLUGIN_DIR,
    DEFAULT_REGISTRY_DIR,
    DEFAULT_STATE_DIR,
)
from ..probe import ask
from ..terminal import clean
from .options import RunOptions


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    """Add ``run`` and ``probe`` to the ``liken-devices`` command."""
    _run(subparsers, common_parent)
    _probe(subparsers)


def _run(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "run", parents=[common_parent],
        help="the node agent: follow uevents, publish the slice, serve the kubelet plugin, "
             "report the Machine",
        description="Walk at start and after every burst of kernel uevents; publish "
                    f"{slice_name('<node>')}, run the kubelet plugin's reconcile pass and report "
                    "the Machine after each walk. SIGTERM stops it cleanly.")
    api = p.add_argument_group("cluster")
    api.add_argument("--kubeconfig", type=Path, default=None, metavar="FILE",
                     help="kubeconfig to use (default: in-cluster config, then $KUBECONFIG)")
    api.add_argument("--no-api", action="store_true",
                     help="run without a cluster: the Machine's spec comes from --machine")
    api.add_argument("--api-timeout", type=float, default=10.0, metavar="SECONDS",
                     help="timeout of one API request (default 10)")
    out = p.add_argument_group("outputs")
    add_endpoint_args(out, port_also="; with --seamless-upgrade the other instance shares "
                                     "it and the newer one answers")
    out.add_argument("--probe-socket", type=Path, default=None, metavar="PATH",
                     help="with --metrics-port, also serve /healthz and /readyz on this unix "
                          "socket, for exec probes (liken-devices probe): in the pod's private "
                          "/tmp no other process can answer them, as one could on a shared port")
    out.add_argument("--console", type=Path, default=Path("/dev/console"), metavar="PATH",
                     help=f"where the device count is printed past the {MAX_DEVICES} cap "
                          "(default /dev/console)")
    out.add_argument("--slice-out", type=Path, default=None, metavar="FILE",
                     help="also write the slice's JSON here after each change")
    out.add_argument("--status-out", type=Path, default=None, metavar="FILE",
                     help="also write the Machine status's JSON here after each change")
    parts = p.add_argument_group("embedded parts")
    parts.add_argument("--no-plugin", action="store_true",
                       help="do not serve the kubelet plugin")
    parts.add_argument("--no-machine-side", action="store_true",
                       help="do not load spec.modules nor attach spec.serio lines")
    parts.add_argument("--quiet-seconds", type=float, default=None, help=argparse.SUPPRESS)
    parts.add_argument("--cdi-dir", type=Path, default=DEFAULT_CDI_DIR, metavar="DIR",
                       help=f"where claim CDI specs are written (default {DEFAULT_CDI_DIR})")
    parts.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, metavar="DIR",
                       help=f"persistent plugin state (default {DEFAULT_STATE_DIR})")
    parts.add_argument("--plugin-dir", type=Path, default=DEFAULT_PLUGIN_DIR, metavar="DIR",
                       help=f"directory of dra.sock (default {DEFAULT_PLUGIN_DIR})")
    parts.add_argument("--registry-dir", type=Path, default=DEFAULT_REGISTRY_DIR,
                       metavar="DIR",
                       help=f"kubelet plugin registry (default {DEFAULT_REGISTRY_DIR})")
    upgrade_args(parts)
    p.set_defaults(func=cmd_run)


def _probe(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "probe",
        help="ask the running agent's /healthz or /readyz over its probe socket (exec probes)",
        description="Connect to the unix socket that 'run --probe-socket PATH' serves and GET "
                    "/healthz or /readyz: print the agent's one-line answer, exit 0 when it is "
                    "healthy (ready), 1 when not or when no agent answers. The DaemonSet's "
                    "probes run this inside the container.")
    p.add_argument("target", choices=("/healthz", "/readyz"), metavar="PATH",
                   help="/healthz or /readyz")
    p.add_argument("--socket", type=Path, required=True, metavar="PATH",
                   help="the agent's --probe-socket")
    p.add_argument("--timeout", type=float, default=4.0, metavar="SECONDS",
                   help="give up after this long (default 4; keep it under the probe's "
                        "timeoutSeconds)")
    p.set_defaults(func=cmd_probe)


def cmd_run(args: argparse.Namespace) -> int:
    # deferred: the command's module, 33 ms that --help and the other commands
    # skip (tests/test_layers.py)
    from .run import cmd_run

    return cmd_run(run_options(args))


def run_options(args: argparse.Namespace) -> RunOptions:
    """``run``'s command line, read once: the sources checked, then the node, then the
    seamless-upgrade mode and its pod UID (in that order each is the operator's error)."""
    inputs = Inputs.from_args(args)
    sources = inputs.sources()
    sources.check()
    return RunOptions(
        node=inputs.node_name(), sources=sources, kubeconfig=args.kubeconfig,
        no_api=args.no_api, api_timeout=args.api_timeout, metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr, probe_socket=args.probe_socket, console=args.console,
        slice_out=args.slice_out, status_out=args.status_out, plugin=not args.no_plugin,
        machine_side=not args.no_machine_side, quiet_seconds=args.quiet_seconds,
        dirs=plugin_dirs(args), upgrade=upgrade_options(args))


def cmd_probe(args: argparse.Namespace) -> int:
    """The exec probe's question as the full parser read it (:mod:`liken_devices.probe` answers
    a plain command line without the parser)."""
    ok, line = ask(args.socket, args.target, args.timeout)
    print(clean(line, 200))
    return 0 if ok else 1
