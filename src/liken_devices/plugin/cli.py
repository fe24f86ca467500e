"""``liken-devices plugin`` and ``liken-devices claims``: the kubelet plugin from the command line.

``plugin`` runs the plugin on its own (docs/plugin.md, "Command line"): it walks once at start,
on SIGHUP and after an unprepare ended a claim, reconciles the prepared claims' specs after each
walk, and serves until SIGTERM or SIGINT. The node agent (``liken-devices run``) embeds the same
:class:`~.core.Plugin` and walks on uevents instead. ``claims`` lists the prepared claims from the
state file with the nodes each delivers now, walking with those claims as the plugin does; it
only reads, so it works beside a running plugin, and a state it cannot read is one line and exit
2. ``--seamless-upgrade`` (``plugin`` and ``run``) is the mode in which two instances serve the
node during a surge upgrade (docs/plugin.md, "Upgrades").

This module is the commands' parser alone: it reads a command line once into the command's
options (:mod:`.options`); ``plugin`` is :mod:`.serve` and ``claims`` :mod:`.prepared`, each
imported when its command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..cliargs import Inputs
from .options import ClaimsOptions, PluginDirs, PluginOptions, Upgrade
from .paths import DEFAULT_CDI_DIR, DEFAULT_PLUGIN_DIR, DEFAULT_REGISTRY_DIR, DEFAULT_STATE_DIR


def register(subparsers: Any, common_parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "plugin", parents=[common_parent],
        help="serve the kubelet DRA plugin (walk at start and on SIGHUP, stop on SIGTERM)")
    p.add_argument("--kubeconfig", type=Path, default=None,
                   help="kubeconfig for reading ResourceClaims (default: in-cluster, then "
                        "$KUBECONFIG)")
    p.add_argument("--api-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="timeout of one API request (default 10)")
    _dirs(p)
    p.add_argument("--plugin-dir", type=Path, default=DEFAULT_PLUGIN_DIR,
                   help=f"directory of dra.sock (default {DEFAULT_PLUGIN_DIR})")
    p.add_argument("--registry-dir", type=Path, default=DEFAULT_REGISTRY_DIR,
                   help=f"kubelet plugin registry (default {DEFAULT_REGISTRY_DIR})")
    upgrade_args(p)
    p.set_defaults(func=run_plugin)

    c = subparsers.add_parser(
        "claims", parents=[common_parent],
        help="list the prepared claims and the nodes each delivers now")
    _dirs(c)
    c.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    c.set_defaults(func=run_claims)


def _dirs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cdi-dir", type=Path, default=DEFAULT_CDI_DIR,
                   help=f"where claim CDI specs are written (default {DEFAULT_CDI_DIR})")
    p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                   help=f"persistent plugin state (default {DEFAULT_STATE_DIR})")


def upgrade_args(p: Any) -> None:
    """The seamless-upgrade options, shared by ``plugin`` and ``run``."""
    p.add_argument("--seamless-upgrade", action="store_true",
                   help="run beside the other instance of a surge upgrade: sockets named after "
                        "the pod's UID, the state locked per write (docs/plugin.md, "
                        "\"Upgrades\"); only where the node's kubelet is 1.33 or later, else "
                        "the agent runs as a plain single instance and says so")
    p.add_argument("--pod-uid", default=None, metavar="UID",
                   help="the pod's UID for --seamless-upgrade (default $POD_UID, from the "
                        "downward API's metadata.uid)")


def plugin_dirs(args: argparse.Namespace) -> PluginDirs:
    """Where the plugin writes, as ``plugin`` and ``run`` were told."""
    return PluginDirs(cdi_dir=args.cdi_dir, state_dir=args.state_dir,
                      plugin_dir=args.plugin_dir, registry_dir=args.registry_dir)


def upgrade_options(args: argparse.Namespace) -> Upgrade:
    """The seamless-upgrade mode as ``plugin`` and ``run`` were told: the pod UID is read and
    checked here, once (a bad one is the operator's error before anything else)."""
    if not args.seamless_upgrade:
        return Upgrade.plain()
    # deferred: the UID's parser and the kube package with it, which plugin and run import
    # anyway; a plain instance's options skip it (tests/test_layers.py)
    from .upgrade import pod_uid

    return Upgrade(seamless=True, pod_uid=pod_uid(args.pod_uid))


def plugin_options(args: argparse.Namespace) -> PluginOptions:
    """``plugin``'s command line, read once: the sources checked, then the node, then the
    seamless-upgrade mode (in that order each is the operator's error)."""
    inputs = Inputs.from_args(args)
    sources = inputs.sources()
    sources.check()  # a missing --sysfs/--recording is the operator's error: exit 2
    return PluginOptions(node=inputs.node_name(), sources=sources, kubeconfig=args.kubeconfig,
                         api_timeout=args.api_timeout, dirs=plugin_dirs(args),
                         upgrade=upgrade_options(args))


def run_plugin(args: argparse.Namespace) -> int:
    # deferred: the command's module, 60 ms that --help and the other commands
    # skip (tests/test_layers.py)
    from .serve import run_plugin

    return run_plugin(plugin_options(args))


def run_claims(args: argparse.Namespace) -> int:
    # deferred: the command's module, 11 ms that --help and the other commands
    # skip (tests/test_layers.py)
    from .prepared import run_claims

    return run_claims(ClaimsOptions(sources=Inputs.from_args(args).sources(),
                                    state_dir=args.state_dir, output=args.output))
