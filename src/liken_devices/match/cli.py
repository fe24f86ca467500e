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
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..cliargs import InputError, dump, node_from_args, run_command, sources_from_args
from ..inventory.limits import DRIVER
from ..terminal import clean

log = logging.getLogger("liken_devices.match")


def _default_kubeconfig() -> Path | None:
    """kubectl's choice: ``$KUBECONFIG`` (its first file), else ``~/.kube/config``."""
    env = os.environ.get("KUBECONFIG")
    if env:
        return Path(env.split(os.pathsep)[0])
    home = Path.home() / ".kube" / "config"
    return home if home.is_file() else None


def _client(kubeconfig: Path | None) -> Any:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from ..kube.client import NoClusterConfig, make_client

    if kubeconfig is not None and not kubeconfig.is_file():
        raise InputError(f"--kubeconfig {kubeconfig}: no such file")
    try:
        return make_client(kubeconfig, timeout=30.0)
    except NoClusterConfig as exc:
        raise InputError(f"{exc}: pass --kubeconfig FILE") from None
    except Exception as exc:  # a kubeconfig lightkube cannot load
        raise InputError(f"cannot load the kubeconfig {kubeconfig}: {exc}") from None


def _api_error(exc: BaseException) -> InputError:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from ..kube.client import describe

    return InputError(f"the API server: {describe(exc)}")


def _use_cluster(args: argparse.Namespace) -> bool:
    return args.kubeconfig is not None or (getattr(args, "cluster_default", False)
                                           and args.slices is None
                                           and args.recording is None
                                           and args.sysfs == Path("/sys"))


def _local_slice(args: argparse.Namespace) -> dict[str, Any]:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from ..slices import devices_json, ensure_valid, make_slice

    node = node_from_args(args)
    sources = sources_from_args(args)
    sources.check()
    inv = sources.walk()
    obj = make_slice(node, DRIVER, devices_json(inv))
    ensure_valid(obj)
    return obj


def _cluster_objects(args: argparse.Namespace, *, with_claims: bool) -> dict[str, list[Any]]:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from ..kube.client import Resources
    from ..kube.listing import Budget
    from .fleet import list_all

    client = _client(args.kubeconfig or _default_kubeconfig())
    budget = Budget(seconds=args.timeout)
    out: dict[str, list[Any]] = {}
    fields = None if with_claims else {"spec.driver": DRIVER}
    try:
        out["slices"] = list(list_all(client, Resources.slice(), page=args.page_size,
                                      fields=fields, budget=budget))
        if with_claims:
            out["classes"] = list(list_all(client, Resources.device_class(),
                                           page=args.page_size, budget=budget))
            out["claims"] = list(list_all(client, Resources.claim(), page=args.page_size,
                                          namespaced=True, budget=budget))
            out["templates"] = list(list_all(client, Resources.claim_template(),
                                             page=args.page_size, namespaced=True,
                                             budget=budget))
    except InputError:
        raise
    except Exception as exc:
        raise _api_error(exc) from None
    return out


def _slices_from_file(path: Path | str) -> list[dict[str, Any]]:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from .model import SLICE_LIMITS, load_documents

    docs = load_documents(path, SLICE_LIMITS)
    slices = [d for d in docs if d.get("kind") == "ResourceSlice" or
              ("kind" not in d and isinstance(d.get("spec"), dict) and "driver" in d["spec"])]
    if not slices:
        raise InputError(f"{path}: no ResourceSlice in it")
    return slices


# -- claim-for --------------------------------------------------------------------------------


def cmd_claim_for(args: argparse.Namespace) -> int:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from .claimfor import Ambiguous, generate, render

    if args.any and args.by_address:
        raise InputError("--any and --by-address exclude each other")
    node = None
    if args.slices is not None or _use_cluster(args):
        slices = _slices_from_file(args.slices) if args.slices is not None else \
            _cluster_objects(args, with_claims=False)["slices"]
        slices = [s for s in slices if (s.get("spec") or {}).get("driver") == DRIVER]
        if args.node:
            node = args.node
            slices = [s for s in slices if (s.get("spec") or {}).get("nodeName") == node]
        else:
            nodes = {(s.get("spec") or {}).get("nodeName") for s in slices}
            if len(nodes) > 1:
                raise InputError(f"the slices are of {len(nodes)} nodes: name one with --node")
        if not slices:
            raise InputError(f"no {DRIVER} ResourceSlice" + (f" of node {node}" if node else ""))
        slice_obj = slices[0]
    else:
        slice_obj = _local_slice(args)
    try:
        generated = generate(slice_obj, args.device, any_of_kind=args.any,
                             by_address=args.by_address, namespace=args.namespace)
    except Ambiguous as exc:
        print(f"liken-devices: refused: {clean(exc)}", file=sys.stderr)
        return 1
    sys.stdout.write(render(generated))
    return 0


# -- match ------------------------------------------------------------------------------------


def cmd_match(args: argparse.Namespace) -> int:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from .cel import CelUnavailable, environment
    from .matching import Question, answer, to_json, to_text
    from .model import Claim, load_documents

    stdin = [p for p in [*args.filename, args.slices] if p is not None and str(p) == "-"]
    if len(stdin) > 1:
        raise InputError("standard input (-) can be read once: name it in one -f or --slices")
    question = Question()
    for path in args.filename:
        for doc in load_documents(path):
            question.add(doc, "standard input" if str(path) == "-" else str(path))
    if args.slices is not None:
        slices = _slices_from_file(args.slices)
        node = args.node
    elif _use_cluster(args):
        objs = _cluster_objects(args, with_claims=True)
        slices = objs["slices"]
        node = args.node
        cluster = Question()
        for kind, items in (("classes", objs["classes"]), ("claims", objs["claims"]),
                            ("templates", objs["templates"])):
            for obj in items:
                obj.setdefault("kind", {"classes": "DeviceClass", "claims": "ResourceClaim",
                                        "templates": "ResourceClaimTemplate"}[kind])
                try:
                    cluster.add(obj, "the cluster")
                except InputError as exc:
                    try:
                        held = Claim.held(obj) if kind == "claims" else None
                    except InputError:
                        held = None
                    if held is not None:  # its devices stay held, whatever its spec says
                        cluster.allocated.append(held)
                    log.warning("skipping an object the cluster returned: %s", exc)
        # The files win over the cluster for the same object; the cluster's allocations stay.
        question.classes = {**cluster.classes, **question.classes}
        question.allocated = cluster.allocated + question.allocated
        for key, claim in cluster.claims.items():
            if question.pods:
                question.claims.setdefault(key, claim)
        for key, t in cluster.templates.items():
            if question.pods:
                question.templates.setdefault(key, t)
    elif question.slices:
        slices = question.slices
        node = args.node
    else:
        slices = [_local_slice(args)]
        node = node_from_args(args)
    slices = slices + (question.slices if args.slices is not None or _use_cluster(args)
                       else [])
    try:
        env = environment()
    except CelUnavailable as exc:
        raise InputError(str(exc)) from None
    answers = answer(env, question, slices, node)
    if args.output == "text":
        sys.stdout.write(to_text(answers, detail=len(answers) == 1 or args.details))
    else:
        sys.stdout.write(dump(to_json(answers), args.output))
    return 0 if any(a.allocatable for a in answers) else 1


# -- fleet ------------------------------------------------------------------------------------


def cmd_fleet(args: argparse.Namespace) -> int:
    # lazy: loaded when this sub-command runs; the other commands start without it
    from ..kube.listing import Budget
    from .fleet import build, read_cluster, to_json, to_text

    client = _client(args.kubeconfig or _default_kubeconfig())
    try:
        snap = read_cluster(client, page=args.page_size, budget=Budget(seconds=args.timeout))
    except Exception as exc:
        raise _api_error(exc) from None
    env = None
    if args.selector is not None:
        # lazy: the CEL runtime loads only when a selector is evaluated
        from .cel import CelUnavailable, environment

        try:
            env = environment()
        except CelUnavailable as exc:
            raise InputError(str(exc)) from None
    fleet = build(snap, nodes=args.fleet_node or (), attributes=args.attribute or (),
                  selector=args.selector, env=env)
    if args.output in ("table", "wide"):
        sys.stdout.write(to_text(fleet, wide=args.output == "wide"))
    else:
        sys.stdout.write(dump(to_json(fleet), args.output))
    return 0


# -- registration -----------------------------------------------------------------------------


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


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add ``claim-for``, ``match`` and ``fleet`` to a ``liken-devices`` parser."""
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
    _sources(p)
    p.set_defaults(func=cmd_claim_for)

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
                    "and the value it read. Exit 0 allocatable (on at least one node), 1 not, "
                    "2 bad input.")
    p.add_argument("-f", "--filename", type=Path, action="append", required=True,
                   metavar="FILE", help="claims, templates, pods and DeviceClasses, YAML or "
                                        "JSON, several documents each (repeat; - reads "
                                        "standard input)")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    p.add_argument("--details", action="store_true",
                   help="with several nodes, print every node's details, not one line each")
    _sources(p)
    p.set_defaults(func=cmd_match)

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


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl liken claim-for|match|fleet ...``: the cluster is the default source."""
    # lazy: the main command registers this module, so a top-level import is a cycle
    from ..cli import setup_logging
    from ..cliargs import Parser, inputs_parent

    parser = Parser(
        prog="kubectl liken",
        description="liken.sh devices in the cluster: claim-for writes a claim for a device, "
                    "match says why a claim is pending, fleet shows every node's hardware.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=Parser)
    register(sub, inputs_parent())
    args = parser.parse_args(argv)
    args.cluster_default = True
    setup_logging(getattr(args, "verbose", 0))
    return run_command("kubectl-liken", args.func, args)
