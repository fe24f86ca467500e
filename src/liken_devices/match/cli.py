"""The ``claim-for``, ``match`` and ``fleet`` sub-commands, and the ``kubectl liken`` plugin.

Where the devices come from is the same for ``claim-for`` and ``match``: the local walk (the
shared inputs, as ``scan``), ``--slices FILE`` (``kubectl get resourceslices -o yaml``), or the
cluster (``--kubeconfig``). ``fleet`` reads the cluster only. Exit codes: 0 yes (written,
allocatable), 1 no (``claim-for`` refused: the device cannot be told apart; ``match``: not
allocatable), 2 bad input, with one line on stderr (docs/claims.md).

``kubectl-liken`` follows kubectl's plugin conventions: an executable named ``kubectl-<name>`` on
PATH, called with the arguments after ``kubectl liken``; kubectl passes none of its own flags,
so the plugin reads ``$KUBECONFIG`` or ``~/.kube/config`` as kubectl does, and defaults to the
cluster rather than the local machine.

This module is the commands' parser alone: it reads a command line once into the command's
options (:mod:`.options`); ``claim-for`` and ``match`` are :mod:`.commands`, ``fleet`` is
:mod:`.cluster`, each imported when its command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..cliargs import Inputs, Parser, inputs_parent, run_command, setup_logging
from .options import ClaimForOptions, ClusterRead, DeviceSource, FleetOptions, MatchOptions


def cmd_claim_for(args: argparse.Namespace) -> int:
    # deferred: the command's module, 41 ms that --help and the other commands
    # skip (tests/test_layers.py)
    from .commands import cmd_claim_for

    return cmd_claim_for(ClaimForOptions(
        inputs=Inputs.from_args(args), source=_device_source(args), device=args.device,
        any_of_kind=args.any, by_address=args.by_address, namespace=args.namespace,
        extended_resource=args.extended_resource))


def cmd_match(args: argparse.Namespace) -> int:
    # deferred: the command's module, 41 ms that --help and the other commands
    # skip (tests/test_layers.py)
    from .commands import cmd_match

    return cmd_match(MatchOptions(inputs=Inputs.from_args(args), source=_device_source(args),
                                  filenames=tuple(args.filename), output=args.output,
                                  details=args.details))


def cmd_fleet(args: argparse.Namespace) -> int:
    # deferred: the command's module, 43 ms that --help and the other commands
    # skip (tests/test_layers.py)
    from .cluster import cmd_fleet

    return cmd_fleet(FleetOptions(read=_cluster_read(args), nodes=tuple(args.fleet_node or ()),
                                  attributes=tuple(args.attribute or ()),
                                  selector=args.selector, output=args.output))


def _cluster_read(args: argparse.Namespace) -> ClusterRead:
    return ClusterRead(kubeconfig=args.kubeconfig, page_size=args.page_size,
                       timeout=args.timeout)


def _device_source(args: argparse.Namespace) -> DeviceSource:
    """Where the devices come from, decided once: ``--slices``; the cluster with
    ``--kubeconfig``, or by ``kubectl liken``'s default when no local source is named (no
    --slices, no --recording, the default --sysfs); else the local walk."""
    cluster = args.kubeconfig is not None or (
        getattr(args, "cluster_default", False) and args.slices is None and args.recording is None
        and args.sysfs == Path("/sys"))
    return DeviceSource(slices=args.slices, cluster=cluster, read=_cluster_read(args))


def _page_size(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= n <= 10_000:
        raise argparse.ArgumentTypeError("between 1 and 10000")
    return n


def _seconds(text: str) -> float:
    try:
        n = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= n <= 86_400:
        raise argparse.ArgumentTypeError("between 1 and 86400 seconds")
    return n


def _timeout(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--timeout", type=_seconds, default=300.0, metavar="SECONDS",
                   help="give up reading the cluster after this long (default 300; each "
                        "request at most 30 s, each page at most 64 MiB, all answers at most "
                        "512 MiB)")


def _sources(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where the devices come from (default: this machine's walk)")
    g.add_argument("--slices", type=Path, metavar="FILE",
                   help="ResourceSlices in YAML or JSON (e.g. kubectl get resourceslices "
                        "-o yaml; - reads standard input); with several nodes' slices, "
                        "--node picks one")
    g.add_argument("--kubeconfig", type=Path, metavar="FILE",
                   help="read the cluster: its ResourceSlices, DeviceClasses, "
                        "ResourceClaimTemplates and allocated ResourceClaims")
    g.add_argument("--page-size", type=_page_size, default=500, metavar="N",
                   help="objects per list request (limit/continue; default 500)")
    _timeout(g)


def _claim_for(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "claim-for", parents=[parent],
        help="print a DeviceClass and claim that select one published device",
        description="Print a DeviceClass, a ResourceClaimTemplate and a Pod stub (YAML, ready "
                    "for kubectl apply) that select DEVICE by what identifies it across reboots "
                    "and replugs: vendor, product and serial for USB; pciBusID, vendor and "
                    "product for PCI; the firmware name for a board device. Every attribute a "
                    "selector reads is guarded (has()), so no selector fails on another "
                    "device, which would stop the scheduler's allocation. Exit 1 (refused) "
                    "when that cannot tell DEVICE apart from another published device.")
    p.add_argument("device", metavar="DEVICE", help="a published device's name (see scan)")
    p.add_argument("--any", action="store_true",
                   help="select every device of its kind (same vendor, product and class)")
    p.add_argument("--by-address", action="store_true",
                   help="select by address (the slot or USB port path), for identical devices "
                        "without serial numbers")
    p.add_argument("--namespace", default="default", help="of the template and the pod")
    p.add_argument("--extended-resource", metavar="NAME",
                   help="write the class with spec.extendedResourceName NAME (such as "
                        "squat.ai/serial) and a pod that asks for NAME in resources.limits, as "
                        "a pod written for a device plugin does (Kubernetes 1.36 and later)")
    _sources(p)
    p.set_defaults(func=cmd_claim_for)


def _match(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "match", parents=[parent],
        help="say whether a claim or pod can be allocated, and why not",
        description="Evaluate ResourceClaims, ResourceClaimTemplates or a Pod (with its "
                    "templates) against a node's devices as the scheduler's allocator does: "
                    "DeviceClass and request selectors (CEL), exactly/firstAvailable, "
                    "allocationMode and count, matchAttribute/distinctAttribute, devices other "
                    "claims hold, admin access; a CEL runtime error on a device the allocator "
                    "reaches stops the claim, as in the scheduler. For every device that does "
                    "not match it names the first failing selector, the comparison that failed "
                    "and the value it read. The files (and --slices) are read as the API "
                    "server reads them with strict field validation: resource.k8s.io/v1, "
                    "v1beta2 or v1beta1, and v1 for a Pod; an unknown apiVersion, kind or "
                    "field is bad input, named by its path. Exit 0 allocatable (on at least "
                    "one node), 1 not, 2 bad input.")
    p.add_argument("-f", "--filename", type=Path, action="append", required=True,
                   metavar="FILE", help="claims, templates, pods and DeviceClasses, YAML or "
                                        "JSON, several documents each (repeat; - reads "
                                        "standard input)")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    p.add_argument("--details", action="store_true",
                   help="with several nodes, print every node's details, not one line each")
    _sources(p)
    p.set_defaults(func=cmd_match)


def _fleet(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "fleet",
        help="every node's liken.sh and media.liken.sh devices, holders and problems",
        description="List every node's liken.sh and media.liken.sh devices with the claim and "
                    "pods holding each, the unclaimed hardware of every Machine with its "
                    "candidate modules, and the nodes whose slice is stale or whose facts are "
                    "unreadable. Reads the cluster with paginated list calls only.")
    p.add_argument("--kubeconfig", type=Path, metavar="FILE",
                   help="default: $KUBECONFIG, else ~/.kube/config, else in-cluster")
    p.add_argument("--node", dest="fleet_node", action="append", metavar="NAME",
                   help="only this node (repeat)")
    p.add_argument("--attribute", action="append", metavar="NAME=VALUE",
                   help="only devices with this attribute value (a bare name is in the "
                        "device's driver's domain; repeat: all must hold)")
    p.add_argument("--selector", metavar="CEL",
                   help="only devices this CEL selector is true for, e.g. "
                        "'device.attributes[\"liken.sh\"].class == \"smart-card\"'")
    p.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    p.add_argument("--page-size", type=_page_size, default=500, metavar="N",
                   help="objects per list request (limit/continue; default 500)")
    _timeout(p)
    p.add_argument("-v", "--verbose", action="count", default=0)
    p.set_defaults(func=cmd_fleet)


# The sub-commands, in --help's order: each adds its parser (cli.SUBCOMMANDS names them).
PARSERS: tuple[Callable[[Any, argparse.ArgumentParser], None], ...] = (
    _claim_for, _match, _fleet)


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add ``claim-for``, ``match`` and ``fleet`` to a ``liken-devices`` parser."""
    for add in PARSERS:
        add(sub, parent)


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl liken claim-for|match|fleet ...``: the cluster is the default source."""
    parser = Parser(
        prog="kubectl liken",
        description="liken.sh devices in the cluster: claim-for writes a claim for a device, "
                    "match says why a claim is pending, fleet shows every node's hardware.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=Parser)
    register(sub, inputs_parent())
    parser.set_defaults(cluster_default=True)  # the cluster is kubectl liken's default source
    args = parser.parse_args(argv)
    setup_logging(getattr(args, "verbose", 0))
    return run_command("kubectl-liken", args.func, args)
