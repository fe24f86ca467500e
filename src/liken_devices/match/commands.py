"""``claim-for`` and ``match``: the devices from the local walk, a slice file or the cluster,
and the command's answer. The commands' options are :mod:`.cli`'s, read once into
:mod:`.options`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from ..cliargs import InputError, Inputs, dump
from ..inventory.limits import DRIVER
from ..slices import devices_json, ensure_valid, make_slice
from ..terminal import clean
from .cel import CelUnavailable, environment
from .claimfor import Ambiguous, generate, render
from .matching import Question, answer, to_json, to_text
from .model import SLICE_LIMITS, Claim, load_documents
from .options import ClaimForOptions, ClusterRead, MatchOptions

log = logging.getLogger("liken_devices.match")


def _local_slice(inputs: Inputs) -> dict[str, Any]:
    node = inputs.node_name()
    sources = inputs.sources()
    sources.check()
    inv = sources.walk()
    obj = make_slice(node, DRIVER, devices_json(inv))
    ensure_valid(obj)
    return obj


def _cluster_objects(read: ClusterRead, *, with_claims: bool) -> dict[str, list[Any]]:
    # deferred: a local walk or --slices starts without the API client's modules, 6 ms
    # (tests/test_layers.py)
    from .cluster import cluster_objects

    return cluster_objects(read, with_claims=with_claims)


def _slices_from_file(path: Path | str) -> list[dict[str, Any]]:
    docs = load_documents(path, SLICE_LIMITS)
    slices = [d for d in docs if d.get("kind") == "ResourceSlice"]
    if not slices:
        raise InputError(f"{path}: no ResourceSlice in it")
    return slices


# -- claim-for --------------------------------------------------------------------------------


def cmd_claim_for(opts: ClaimForOptions) -> int:
    if opts.any_of_kind and opts.by_address:
        raise InputError("--any and --by-address exclude each other")
    node = None
    source = opts.source
    if source.slices is not None or source.cluster:
        slices = _slices_from_file(source.slices) if source.slices is not None else \
            _cluster_objects(source.read, with_claims=False)["slices"]
        slices = [s for s in slices if (s.get("spec") or {}).get("driver") == DRIVER]
        if opts.inputs.node:
            node = opts.inputs.node
            slices = [s for s in slices if (s.get("spec") or {}).get("nodeName") == node]
        else:
            nodes = {(s.get("spec") or {}).get("nodeName") for s in slices}
            if len(nodes) > 1:
                raise InputError(f"the slices are of {len(nodes)} nodes: name one with --node")
        if not slices:
            raise InputError(f"no {DRIVER} ResourceSlice" + (f" of node {node}" if node else ""))
        slice_obj = slices[0]
    else:
        slice_obj = _local_slice(opts.inputs)
    try:
        generated = generate(slice_obj, opts.device, any_of_kind=opts.any_of_kind,
                             by_address=opts.by_address, namespace=opts.namespace,
                             extended_resource=opts.extended_resource)
    except Ambiguous as exc:
        print(f"liken-devices: refused: {clean(exc)}", file=sys.stderr)
        return 1
    sys.stdout.write(render(generated))
    return 0


# -- match ------------------------------------------------------------------------------------


def cmd_match(opts: MatchOptions) -> int:
    source = opts.source
    stdin = [p for p in [*opts.filenames, source.slices] if p is not None and str(p) == "-"]
    if len(stdin) > 1:
        raise InputError("standard input (-) can be read once: name it in one -f or --slices")
    question = Question()
    for path in opts.filenames:
        for doc in load_documents(path):
            question.add(doc, "standard input" if str(path) == "-" else str(path))
    if source.slices is not None:
        slices = _slices_from_file(source.slices)
        node = opts.inputs.node
    elif source.cluster:
        objs = _cluster_objects(source.read, with_claims=True)
        slices = objs["slices"]
        node = opts.inputs.node
        _add_cluster(question, objs)
    elif question.slices:
        slices = question.slices
        node = opts.inputs.node
    else:
        slices = [_local_slice(opts.inputs)]
        node = opts.inputs.node_name()
    slices = slices + (question.slices if source.slices is not None or source.cluster
                       else [])
    try:
        env = environment()
    except CelUnavailable as exc:
        raise InputError(str(exc)) from None
    answers = answer(env, question, slices, node)
    if opts.output == "text":
        sys.stdout.write(to_text(answers, detail=len(answers) == 1 or opts.details))
    else:
        sys.stdout.write(dump(to_json(answers), opts.output))
    return 0 if any(a.allocatable for a in answers) else 1


def _add_cluster(question: Question, objs: dict[str, list[Any]]) -> None:
    """The cluster's classes, claims and templates under ``question``'s own: the files win over
    the cluster for the same object; the cluster's allocations stay."""
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
    question.classes = {**cluster.classes, **question.classes}
    question.extended = cluster.extended.overlaid(question.extended)
    question.allocated = cluster.allocated + question.allocated
    for key, claim in cluster.claims.items():
        if question.pods:
            question.claims.setdefault(key, claim)
    for key, t in cluster.templates.items():
        if question.pods:
            question.templates.setdefault(key, t)
