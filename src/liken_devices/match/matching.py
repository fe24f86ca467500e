"""``match``: will this claim (or pod) be allocated on this node, and if not, why?

Inputs are the objects of the ``-f`` files (DeviceClasses, ResourceClaims,
ResourceClaimTemplates, Pods) and a source of devices: the local walk, a file of ResourceSlices,
or the cluster (its slices, classes, templates and allocated claims). A ResourceClaim that carries
``status.allocation`` is an existing allocation (its devices are held), not a question, unless a
Pod names it (then it is asked again without its own hold). The
answer is per node: a pod's claims are allocated in one search, as the scheduler allocates them
for one node; a claim or template alone is evaluated by itself. A pod's extended resources that a
DeviceClass maps become one more claim of that search, as the scheduler makes it
(:mod:`.extended`; rules: claims.extended-resource).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..terminal import clean
from .allocate import (
    Alternative,
    ClaimResult,
    ConstraintResult,
    Evaluator,
    evaluate_claims,
)
from .cel import Env
from .extended import ExtendedClasses, PodNeeds, implicit_claim, unmapped_reason
from .model import Claim, Device, DeviceClass, PodClaims, slice_devices


@dataclass
class Question:
    """What the files ask, and what they say about the cluster."""

    classes: dict[str, DeviceClass] = field(default_factory=dict)
    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    templates: dict[tuple[str, str], Claim] = field(default_factory=dict)
    allocated: list[Claim] = field(default_factory=list)
    pods: list[PodClaims] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)
    extended: ExtendedClasses = field(default_factory=ExtendedClasses)
    pod_needs: list[PodNeeds] = field(default_factory=list)  # beside ``pods``, in its order
    # A pod's extended resources that no class maps: its label -> (the claim, the names).
    unmapped: dict[str, tuple[Claim, list[str]]] = field(default_factory=dict)

    def add(self, obj: dict[str, Any], source: str) -> None:
        kind = obj.get("kind")
        if kind == "DeviceClass":
            c = DeviceClass.parse(obj)
            self.classes[c.name] = c
            self.extended.add(obj, c.name)
        elif kind == "ResourceClaim":
            claim = Claim.parse(obj)
            if claim.allocation is not None:
                self.allocated.append(claim)
            else:
                self.claims[(claim.namespace, claim.name)] = claim
        elif kind == "ResourceClaimTemplate":
            t = Claim.parse(obj)
            self.templates[(t.namespace, t.name)] = t
        elif kind == "Pod":
            pod = PodClaims.parse(obj)
            self.pods.append(pod)
            self.pod_needs.append(PodNeeds.parse(obj, pod.namespace, pod.name))
        elif kind == "ResourceSlice":
            self.slices.append(obj)
        else:
            raise InputError(f"{source}: cannot evaluate a {kind!r}: give DeviceClasses, "
                             "ResourceClaims, ResourceClaimTemplates or Pods")

    def targets(self) -> list[tuple[str, list[Claim]]]:
        """(what is asked, the claims to evaluate together), in file order."""
        out: list[tuple[str, list[Claim]]] = []
        used: set[tuple[str, str]] = set()
        self.unmapped = {}
        for pod, needs in zip(self.pods, self.pod_needs, strict=True):
            claims = []
            for entry, claim_name, template in pod.entries:
                if claim_name is not None:
                    key = (pod.namespace, claim_name)
                    # A claim that is allocated already is asked again: could it be now?
                    found = self.claims.get(key) or next(
                        (c for c in self.allocated if (c.namespace, c.name) == key), None)
                    if found is None:
                        raise InputError(f"Pod {pod.namespace}/{pod.name}: resource claim "
                                         f"{entry!r} names ResourceClaim {claim_name}, which is "
                                         "not in the files (or the cluster)")
                else:
                    assert template is not None
                    key = (pod.namespace, template)
                    found = self.templates.get(key)
                    if found is None:
                        raise InputError(f"Pod {pod.namespace}/{pod.name}: resource claim "
                                         f"{entry!r} names ResourceClaimTemplate {template}, "
                                         "which is not in the files (or the cluster)")
                used.add(key)
                claims.append(found)
            label = f"Pod {pod.namespace}/{pod.name}"
            implicit, unmapped = implicit_claim(
                needs, lambda name: self.extended.resolve(name, self.classes))
            if implicit is not None:
                claims.append(implicit)
            if unmapped:
                self.unmapped[label] = (implicit or Claim(
                    "ResourceClaim", pod.namespace, f"{pod.name}-extended-resources", [], []),
                    unmapped)
            out.append((label, claims))
        for key, claim in [*self.claims.items(), *self.templates.items()]:
            if key not in used and not self.pods:
                out.append((claim.label, [claim]))
        if not out:
            raise InputError("nothing to evaluate: the files hold no ResourceClaim, "
                             "ResourceClaimTemplate or Pod")
        return out


def holders(allocated: Sequence[Claim], asked: Sequence[Claim]
            ) -> dict[tuple[str, str, str], str]:
    """Who holds each allocated device, leaving out the asked claims' own allocations and
    admin-access results (admin access takes a device from no one)."""
    skip = {(c.namespace, c.name) for c in asked if c.kind == "ResourceClaim"}
    out: dict[tuple[str, str, str], str] = {}
    for claim in allocated:
        if (claim.namespace, claim.name) in skip:
            continue
        who = f"ResourceClaim {claim.namespace}/{claim.name}"
        if claim.reserved_for:
            who += f" (reserved for {', '.join(claim.reserved_for)})"
        for r in claim.allocation or []:
            if r.get("adminAccess") is True:
                continue
            key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            out.setdefault(key, who)
    return out


def by_node(devices: Sequence[Device]) -> dict[str, list[Device]]:
    """Each node's devices: its own slices' and every all-nodes slice's."""
    nodes: dict[str, list[Device]] = {}
    shared = [d for d in devices if d.node is None]
    for d in devices:
        if d.node is not None:
            nodes.setdefault(d.node, []).append(d)
    for devs in nodes.values():
        devs.extend(shared)
    return nodes


@dataclass
class NodeAnswer:
    node: str
    results: list[tuple[str, list[ClaimResult]]]

    @property
    def allocatable(self) -> bool:
        return all(r.allocatable for _, rs in self.results for r in rs)


def answer(env: Env, question: Question, slices: Sequence[dict[str, Any]],
           node: str | None = None) -> list[NodeAnswer]:
    devices = slice_devices(slices)
    nodes = by_node(devices)
    shared = [d for d in devices if d.node is None]
    for s in slices:  # a node whose slice lists no device is still a node to answer for
        name = (s.get("spec") or {}).get("nodeName")
        if isinstance(name, str):
            nodes.setdefault(name, list(shared))
    if node is not None:
        if node not in nodes and not shared:
            known = ", ".join(sorted(nodes)[:10]) or "none"
            raise InputError(f"no ResourceSlice of node {node} among the slices read "
                             f"(nodes: {known})")
        nodes = {node: nodes.get(node, list(shared))}
    if not nodes:
        raise InputError("no node's ResourceSlice among the slices read")
    targets = question.targets()
    asked = [c for _, claims in targets for c in claims]
    held = holders(question.allocated, asked)
    evaluator = Evaluator(env, question.classes)
    out = []
    for name in sorted(nodes):
        results = []
        for label, claims in targets:
            rs = evaluate_claims(evaluator, claims, nodes[name], held)
            if label in question.unmapped:
                claim, names = question.unmapped[label]
                rs.append(ClaimResult(claim, False, unmapped_reason(names), []))
            results.append((label, rs))
        out.append(NodeAnswer(name, results))
    return out


# -- output -----------------------------------------------------------------------------------


def _alt_json(alt: Alternative) -> dict[str, Any]:
    return {
        "name": alt.sub.name,
        "deviceClassName": alt.sub.class_name,
        "allocationMode": "All" if alt.sub.all_devices else "ExactCount",
        **({} if alt.sub.all_devices else {"count": alt.sub.count}),
        **({"adminAccess": True} if alt.sub.admin_access else {}),
        **({"problem": alt.problem} if alt.problem else {}),
        "matching": [{"device": c.device.name, "driver": c.device.driver, "pool": c.device.pool,
                      "free": c.free, **({"heldBy": c.held_by} if c.held_by else {})}
                     for c in alt.matching],
        "notMatching": [{"device": r.device.name, "driver": r.device.driver,
                         "pool": r.device.pool, "selector": r.selector, "reason": r.message,
                         "error": r.error} for r in alt.rejected],
    }


def _device_ref(d: Device) -> dict[str, str]:
    return {"driver": d.driver, "pool": d.pool, "device": d.name}


def _constraint_json(c: ConstraintResult) -> dict[str, Any]:
    return {c.kind: c.attribute, "requests": list(c.requests), "satisfied": c.satisfied,
            "values": [{"request": name, **_device_ref(d),
                        "value": None if v is None else {v[0]: list(v[1])
                                                         if isinstance(v[1], tuple) else v[1]}}
                       for name, d, v in c.values]}


def _claim_json(r: ClaimResult) -> dict[str, Any]:
    """One claim's answer; an allocation in the shape of ``status.allocation`` (request, driver,
    pool, device), so that it compares with what the scheduler writes."""
    out: dict[str, Any] = {
        "claim": r.claim.label, "allocatable": r.allocatable, "reason": r.reason,
        "warnings": r.warnings,
        "requests": [{
            "name": rr.request.name,
            **({"chosen": rr.chosen, "devices": [d.name for d in rr.devices]}
               if rr.chosen else {}),
            "alternatives": [_alt_json(alt) for alt in rr.alternatives],
        } for rr in r.requests],
    }
    if r.allocatable:
        out["allocation"] = {"devices": {"results": [
            {"request": rr.chosen, **_device_ref(d)}
            for rr in r.requests for d in rr.devices]}}
    if r.constraints:
        out["constraints"] = [_constraint_json(c) for c in r.constraints]
    if r.stop is not None:
        out["stop"] = {"claim": r.stop.claim.label, "request": r.stop.request,
                       "message": r.stop.message}
        if r.stop.rejection is not None:
            out["stop"].update(device=_device_ref(r.stop.rejection.device),
                               selector=r.stop.rejection.selector)
    return out


def to_json(answers: Sequence[NodeAnswer]) -> dict[str, Any]:
    ok = [a.node for a in answers if a.allocatable]
    return {
        "allocatable": bool(ok),
        "nodes": [{
            "node": a.node,
            "allocatable": a.allocatable,
            "asked": [{
                "what": label,
                "claims": [_claim_json(r) for r in results],
            } for label, results in a.results],
        } for a in answers],
        "summary": summary(answers),
    }


def summary(answers: Sequence[NodeAnswer]) -> str:
    ok = [a.node for a in answers if a.allocatable]
    if len(answers) == 1:
        a = answers[0]
        return (f"allocatable on node {a.node}" if a.allocatable
                else f"not allocatable on node {a.node}")
    if not ok:
        return f"not allocatable on any of {len(answers)} nodes"
    shown = ", ".join(ok[:20]) + (f" and {len(ok) - 20} more" if len(ok) > 20 else "")
    return f"allocatable on {len(ok)} of {len(answers)} nodes: {shown}"


def to_text(answers: Sequence[NodeAnswer], detail: bool) -> str:
    out: list[str] = []
    for a in answers:
        if not detail:
            reasons = [r.reason for _, rs in a.results for r in rs if not r.allocatable]
            out.append(f"{a.node}: " + ("allocatable" if a.allocatable else reasons[0]))
            continue
        out.append(f"Node {a.node}:")
        for label, results in a.results:
            out.append(f"  {label}:")
            for r in results:
                pad = "    "
                if len(results) > 1 or r.claim.label != label:
                    out.append(f"    {r.claim.label}:")
                    pad = "      "
                for rr in r.requests:
                    for alt in rr.alternatives:
                        mode = "all matching devices" if alt.sub.all_devices else \
                            f"{alt.sub.count} device{'s' if alt.sub.count != 1 else ''}"
                        extra = ", admin access" if alt.sub.admin_access else ""
                        out.append(f"{pad}request {alt.sub.name} (DeviceClass "
                                   f"{alt.sub.class_name}, {mode}{extra}):")
                        if alt.problem:
                            out.append(f"{pad}  {alt.problem}")
                            continue
                        for c in alt.matching:
                            state = "free" if c.free else f"held by {c.held_by}"
                            out.append(f"{pad}  matches {r.name(c.device)} ({state})")
                        for rej in alt.rejected:
                            flag = "error " if rej.error else ""
                            out.append(f"{pad}  {flag}{r.name(rej.device)}: {rej.selector}: "
                                       f"{rej.message}")
                        if not alt.matching and not alt.rejected:
                            out.append(f"{pad}  the node publishes no devices")
                if r.warnings:
                    out.append(f"{pad}warning: the scheduler stops allocating a claim at a CEL "
                               "runtime error on a device it reaches (it visits pools in no "
                               "fixed order); guard lookups with has() or .?name")
                out.append(f"{pad}=> {r.reason}")
    out.append(summary(answers))
    # Names, selectors and CEL messages come from slices and claims: each line cleaned.
    return "\n".join(clean(line) for line in out) + "\n"
