"""``claim-for`` and ``match``: the devices from the local walk, a slice file or the cluster,
and the command's answer. The commands' options are :mod:`.cli`'s.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from ..cliargs import InputError, dump, node_from_args, sources_from_args
from ..inventory.limits import DRIVER
from ..slices import devices_json, ensure_valid, make_slice
from ..terminal import clean
from .cel import CelUnavailable, environment
from .claimfor import Ambiguous, generate, render
from .matching import Question, answer, to_json, to_text
from .model import SLICE_LIMITS, Claim, load_documents

log = logging.getLogger("liken_devices.match")


def _use_cluster(args: argparse.Namespace) -> bool:
    return args.kubeconfig is not None or (getattr(args, "cluster_default", False)
                                           and args.slices is None
                                           and args.recording is None
                                           and args.sysfs == Path("/sys"))


def _local_slice(args: argparse.Namespace) -> dict[str, Any]:
    node = node_from_args(args)
    sources = sources_from_args(args)
    sources.check()
    inv = sources.walk()
    obj = make_slice(node, DRIVER, devices_json(inv))
    ensure_valid(obj)
    return obj


def _cluster_objects(args: argparse.Namespace, *, with_claims: bool) -> dict[str, list[Any]]:
    # deferred: a local walk or --slices starts without the API client's modules, 6 ms
    # (tests/test_layers.py)
    from .cluster import cluster_objects

    return cluster_objects(args, with_claims=with_claims)


def _slices_from_file(path: Path | str) -> list[dict[str, Any]]:
    docs = load_documents(path, SLICE_LIMITS)
    slices = [d for d in docs if d.get("kind") == "ResourceSlice"]
    if not slices:
        raise InputError(f"{path}: no ResourceSlice in it")
    return slices


# -- claim-for --------------------------------------------------------------------------------


def cmd_claim_for(args: argparse.Namespace) -> int:
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
                             by_address=args.by_address, namespace=args.namespace,
                             extended_resource=args.extended_resource)
    except Ambiguous as exc:
        print(f"liken-devices: refused: {clean(exc)}", file=sys.stderr)
        return 1
    sys.stdout.write(render(generated))
    return 0


# -- match ------------------------------------------------------------------------------------


def cmd_match(args: argparse.Namespace) -> int:
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
        question.extended = cluster.extended.overlaid(question.extended)
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
