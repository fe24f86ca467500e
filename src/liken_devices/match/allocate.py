"""Evaluate claims against a node's devices as the scheduler's structured allocator does.

The rules (resource.k8s.io/v1, KEP-4381 structured parameters, KEP-4816 prioritized lists,
KEP-5018 admin access, KEP-5075 allowMultipleAllocations):

- a device fits a request when every selector of the request's DeviceClass and then every
  selector of the request is true for it (the first that is false or fails decides);
- devices are visited pool by pool, each slice's in order; one in use (held by another claim,
  or picked earlier in the search) is skipped before its selectors run; a CEL runtime error on
  a device the search reaches, a missing DeviceClass or a selector that does not compile stops
  the allocation of every claim of the pod, as the scheduler's allocator returns an error;
- a device that another claim holds is taken, unless the device has
  ``allowMultipleAllocations`` (then more than one claim can hold it) or the request asks for
  admin access (which never takes a device from anyone); a taint with effect NoSchedule or
  NoExecute that the request does not tolerate keeps a device out;
- ``ExactCount`` needs ``count`` distinct devices; ``All`` needs every matching device, all free,
  and at least one; ``firstAvailable`` tries its subrequests in order;
- ``matchAttribute`` makes every device of the named requests (all requests when none are named)
  carry the attribute with one value; ``distinctAttribute`` makes the values differ; a device
  without the attribute satisfies neither;
- the search backtracks over device choices like the scheduler, bounded in steps.

For every device that does not fit, the explanation names the first failing selector, the
comparison that failed and the value CEL read (:mod:`.explain`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .cel import CompileError, DeviceInput, Env, Outcome
from .explain import explain_error, explain_false
from .model import Claim, Constraint, Device, DeviceClass, Request, Subrequest
from .values import ValueError_

MAX_SEARCH_STEPS = 200_000


@dataclass
class Rejection:
    device: Device
    selector: str  # "DeviceClass liken-usb selector 1" / "request selector 1" / "taken" ...
    message: str
    error: bool = False


@dataclass
class Candidate:
    device: Device
    free: bool
    held_by: str | None = None  # when not free: the claim (and pods) holding it


@dataclass
class Alternative:
    sub: Subrequest
    matching: list[Candidate] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    problem: str | None = None  # the class is missing, a selector does not compile
    # Every device in the allocator's order with what the selectors say of it.
    order: list[Candidate | Rejection] = field(default_factory=list)


@dataclass(frozen=True)
class Stop:
    """What ends the scheduler's allocation of a pod's claims with an error, on every node:
    a DeviceClass that does not exist, a selector that does not compile, or a CEL runtime
    error on a device the allocator reaches (KEP-4381: errors in selectors are the claim's
    problem, so the scheduler reports them instead of trying other devices)."""

    claim: Claim
    request: str
    message: str
    rejection: Rejection | None = None


@dataclass(frozen=True)
class ConstraintResult:
    """A matchAttribute or distinctAttribute constraint with the values the devices carry:
    for an allocation, each chosen device's; otherwise each candidate's, per request."""

    kind: str  # "matchAttribute" / "distinctAttribute"
    attribute: str
    requests: tuple[str, ...]
    satisfied: bool
    values: tuple[tuple[str, Device, Any], ...]  # (request, device, (kind, value) or None)


@dataclass
class RequestResult:
    request: Request
    alternatives: list[Alternative]
    chosen: str | None = None
    devices: list[Device] = field(default_factory=list)


@dataclass
class ClaimResult:
    claim: Claim
    allocatable: bool
    reason: str
    requests: list[RequestResult]
    warnings: list[str] = field(default_factory=list)
    stop: Stop | None = None
    constraints: list[ConstraintResult] = field(default_factory=list)
    qualified: bool = False  # devices are named driver/pool/device: several pools on the node

    def name(self, device: Device) -> str:
        return device_name(device, self.qualified)


def device_name(device: Device, qualified: bool) -> str:
    """A device as ``status.allocation`` names it (driver, pool, device) where two drivers or
    pools could publish the same device name, else by its name alone."""
    return f"{device.driver}/{device.pool}/{device.name}" if qualified else device.name


def allocator_order(devices: Sequence[Device]) -> list[Device]:
    """The devices in the order the allocator visits them: pool by pool (a pool's slices in
    order, each slice's devices in order). The scheduler visits pools in no fixed order (it
    gathers them in a map); this takes them in the order the slices were read."""
    first: dict[tuple[str, str], int] = {}
    for d in devices:
        first.setdefault((d.driver, d.pool), len(first))
    return sorted(devices, key=lambda d: first[(d.driver, d.pool)])


class Evaluator:
    """Compiles each expression once and converts each device once."""

    def __init__(self, env: Env, classes: dict[str, DeviceClass]) -> None:
        self.env = env
        self.classes = classes
        self._programs: dict[str, Any] = {}
        self._data: dict[tuple[str, str, str], dict[str, Any] | str] = {}
        self._outcomes: dict[tuple[str, tuple[str, str, str]], Outcome] = {}

    def program(self, expression: str) -> Any:
        if expression not in self._programs:
            try:
                self._programs[expression] = self.env.compile(expression)
            except CompileError as exc:
                self._programs[expression] = exc
        result = self._programs[expression]
        if isinstance(result, CompileError):
            raise result
        return result

    def data(self, device: Device) -> dict[str, Any] | str:
        if device.key not in self._data:
            try:
                self._data[device.key] = self.env.device_data(DeviceInput(
                    device.driver, device.attributes, device.capacity, device.allow_multiple))
            except ValueError_ as exc:
                self._data[device.key] = str(exc)
        return self._data[device.key]

    def selectors(self, sub: Subrequest) -> list[tuple[str, str]]:
        """(label, expression) of the class's selectors then the request's."""
        cls = self.classes[sub.class_name]
        out = [(f"DeviceClass {cls.name} selector {i + 1}", e)
               for i, e in enumerate(cls.selectors)]
        out += [(f"request {sub.name} selector {i + 1}", e) for i, e in enumerate(sub.selectors)]
        return out

    def outcome(self, expression: str, device: Device) -> Outcome:
        """``expression`` evaluated on ``device`` (an error for a device the API would not
        hold, such as an attribute with two values)."""
        key = (expression, device.key)
        if key not in self._outcomes:
            data = self.data(device)
            if isinstance(data, str):
                self._outcomes[key] = Outcome(False, f"the device cannot be evaluated: {data}")
            else:
                self._outcomes[key] = self.env.matches(self.program(expression), data)
        return self._outcomes[key]

    def first_failure(self, sub: Subrequest, device: Device) -> Rejection | None:
        """The first selector that is not true for ``device``, class selectors first, as the
        allocator evaluates them (it stops at the first that is false or fails)."""
        for label, expression in self.selectors(sub):
            outcome = self.outcome(expression, device)
            if outcome.error is None and outcome.matched:
                continue
            data = self.data(device)
            if isinstance(data, str):
                return Rejection(device, label, f"the device cannot be evaluated: {data}", True)

            def evaluate(text: str, data: dict[str, Any] = data) -> tuple[bool, str | None]:
                try:
                    o = self.env.matches(self.program(text), data)
                except CompileError as exc:
                    return False, str(exc)
                return o.matched, o.error

            if outcome.error is not None:
                return Rejection(device, label, explain_error(self.env, expression, data,
                                                              outcome.error, evaluate), True)
            return Rejection(device, label, explain_false(self.env, expression, data, evaluate))
        return None


def evaluate_claims(evaluator: Evaluator, claims: Sequence[Claim], devices: Sequence[Device],
                    holders: dict[tuple[str, str, str], str]) -> list[ClaimResult]:
    """Evaluate ``claims`` together (a pod's claims) on ``devices``.

    ``holders`` maps each device that other claims hold (without admin access) to who holds it.
    The scheduler allocates a pod's claims for a node in one search, so a device one claim takes
    can be left to another when that is the only way both fit; the search here is the same, and
    it stops where the scheduler's stops: at a missing class, a selector that does not compile,
    or a CEL runtime error on a device it reaches. When there is no joint allocation, each
    claim is explained in order, given what the claims before it got.
    """
    devices = allocator_order(devices)
    qualified = len({(d.driver, d.pool) for d in devices}) > 1
    prepared = [_prepare(evaluator, claim, devices, holders) for claim in claims]
    items = [(claim, rr) for claim, rrs in prepared for rr in rrs]
    stop = _setup(items)
    found, exhausted = None, False
    if stop is None:
        found, exhausted, stop = _search(items, holders)
    if stop is not None:
        return [_stopped(claim, rrs, stop, qualified) for claim, rrs in prepared]
    if found is not None:
        results = []
        for (claim, rrs), (_, picks) in zip(prepared, _split(prepared, found), strict=True):
            results.append(_allocated(claim, rrs, picks, qualified))
        return results
    held = dict(holders)
    results = []
    for claim in claims:
        result = evaluate_claim(evaluator, claim, devices, held)
        results.append(result)
        for rr in result.requests:
            for d in rr.devices:
                if not d.allow_multiple:
                    held.setdefault(d.key, claim.label)
    if all(r.allocatable for r in results):  # only when the joint search ran out of steps
        last = results[-1]
        last.allocatable = False
        last.reason = (f"no joint allocation of the pod's claims found within "
                       f"{MAX_SEARCH_STEPS} steps of the search" if exhausted else
                       "the claims compete for the same devices")
    return results


def _split(prepared: list[tuple[Claim, list[RequestResult]]],
           found: list[tuple[str, list[Device]]]
           ) -> list[tuple[Claim, list[tuple[str, list[Device]]]]]:
    out, i = [], 0
    for claim, rrs in prepared:
        out.append((claim, found[i:i + len(rrs)]))
        i += len(rrs)
    return out


def _prepare(evaluator: Evaluator, claim: Claim, devices: Sequence[Device],
             holders: dict[tuple[str, str, str], str]) -> tuple[Claim, list[RequestResult]]:
    return claim, [RequestResult(req, [_alternative(evaluator, sub, devices, holders)
                                       for sub in req.alternatives])
                   for req in claim.requests]


def _warnings(requests: list[RequestResult], qualified: bool) -> list[str]:
    return sorted({f"{r.selector} on {device_name(r.device, qualified)}: {r.message}"
                   for rr in requests for a in rr.alternatives for r in a.rejected if r.error})


def _allocated(claim: Claim, requests: list[RequestResult],
               picks: list[tuple[str, list[Device]]], qualified: bool) -> ClaimResult:
    if not requests:
        return ClaimResult(claim, True, "the claim requests no devices", requests, [],
                           qualified=qualified)
    for rr, (alt_name, chosen) in zip(requests, picks, strict=True):
        rr.chosen = alt_name
        rr.devices = chosen
    constraints = [_chosen_values(c, picks) for c in claim.constraints]
    said = "; ".join(f"{c.kind} {c.attribute}: " + ", ".join(
        f"{device_name(d, qualified)} {_show_attr(v)}" for _, d, v in c.values)
        for c in constraints)
    return ClaimResult(claim, True, "allocatable: " + "; ".join(
        f"{rr.chosen} gets {', '.join(device_name(d, qualified) for d in rr.devices)}"
        for rr in requests) + (f" ({said})" if said else ""),
        requests, _warnings(requests, qualified), constraints=constraints, qualified=qualified)


def _stopped(claim: Claim, requests: list[RequestResult], stop: Stop,
             qualified: bool) -> ClaimResult:
    if stop.rejection is not None:
        what = (f"{stop.rejection.selector} on {device_name(stop.rejection.device, qualified)}: "
                f"{stop.rejection.message}")
    else:
        what = stop.message
    if stop.claim is claim:
        reason = (f"not allocatable: the scheduler stops at request {stop.request}: {what}")
    else:
        reason = (f"not allocatable: the scheduler stops allocating the pod's claims at "
                  f"{stop.claim.label}, request {stop.request}: {what}")
    return ClaimResult(claim, False, reason, requests, _warnings(requests, qualified), stop,
                       qualified=qualified)


def evaluate_claim(evaluator: Evaluator, claim: Claim, devices: Sequence[Device],
                   holders: dict[tuple[str, str, str], str]) -> ClaimResult:
    devices = allocator_order(devices)
    qualified = len({(d.driver, d.pool) for d in devices}) > 1
    claim, requests = _prepare(evaluator, claim, devices, holders)
    items = [(claim, rr) for rr in requests]
    stop = _setup(items)
    found, exhausted = None, False
    if stop is None:
        found, exhausted, stop = _search(items, holders)
    if stop is not None:
        return _stopped(claim, requests, stop, qualified)
    if found is not None:
        return _allocated(claim, requests, found, qualified)
    return ClaimResult(claim, False, _why_not(claim, requests, exhausted, qualified), requests,
                       _warnings(requests, qualified), qualified=qualified,
                       constraints=[_candidate_values(c, requests) for c in claim.constraints])


def _alternative(evaluator: Evaluator, sub: Subrequest, devices: Sequence[Device],
                 holders: dict[tuple[str, str, str], str]) -> Alternative:
    alt = Alternative(sub)
    if sub.class_name not in evaluator.classes:
        alt.problem = f"DeviceClass {sub.class_name} not found"
        return alt
    for label, expression in evaluator.selectors(sub):
        try:
            evaluator.program(expression)
        except CompileError as exc:
            alt.problem = f"{label} does not compile: {exc}"
            return alt
    for device in devices:
        rejection = evaluator.first_failure(sub, device)
        if rejection is not None:
            alt.rejected.append(rejection)
            alt.order.append(rejection)
            continue
        untolerated = [t for t in device.taints
                       if t.get("effect") in ("NoSchedule", "NoExecute")
                       and not any(tol.tolerates(t) for tol in sub.tolerations)]
        if untolerated:
            t = untolerated[0]
            rejection = Rejection(device, "taint", f"tainted {t.get('key')}="
                                  f"{t.get('value', '')}:{t.get('effect')}, not tolerated")
            alt.rejected.append(rejection)
            alt.order.append(rejection)
            continue
        holder = holders.get(device.key)
        if holder is not None and not device.allow_multiple and not sub.admin_access:
            candidate = Candidate(device, False, holder)
        else:
            candidate = Candidate(device, True)
        alt.matching.append(candidate)
        alt.order.append(candidate)
    return alt


def _setup(items: list[tuple[Claim, RequestResult]]) -> Stop | None:
    """What the allocator checks before it searches, claim by claim and request by request:
    every (sub)request's class exists and its selectors compile, and for allocationMode All,
    every device of the node is evaluated (in use or not), so any error there stops it."""
    for claim, rr in items:
        for alt in rr.alternatives:
            if alt.problem is not None:
                return Stop(claim, alt.sub.name, alt.problem)
            if alt.sub.all_devices:
                for verdict in alt.order:
                    if isinstance(verdict, Rejection) and verdict.error:
                        return Stop(claim, alt.sub.name, verdict.message, verdict)
    return None


# -- the search -------------------------------------------------------------------------------


def _covers(constraint: Constraint, name: str) -> bool:
    if not constraint.requests:
        return True
    return any(name == r or name.split("/", 1)[0] == r for r in constraint.requests)


def _consistent(constraints: Sequence[Constraint],
                picked: Sequence[tuple[str, Sequence[Device]]]) -> bool:
    for c in constraints:
        attr = c.match_attribute or c.distinct_attribute
        assert attr is not None
        values = [d.attribute(attr) for name, devs in picked if _covers(c, name) for d in devs]
        if any(v is None for v in values):
            return False
        if c.match_attribute is not None and len(set(values)) > 1:
            return False
        if c.distinct_attribute is not None and len(set(values)) != len(values):
            return False
    return True


def _search(items: list[tuple[Claim, RequestResult]],
            holders: dict[tuple[str, str, str], str]
            ) -> tuple[list[tuple[str, list[Device]]] | None, bool, Stop | None]:
    """Devices for every request of ``items`` (one claim's, or a pod's claims' in order), each
    claim's constraints holding over its own requests; depth first, in the allocator's device
    order. A device in use (held by another claim, or picked earlier in this search) is skipped
    before its selectors are evaluated, as the allocator does; reaching a device whose
    selectors fail with an error stops the search with that error."""
    steps = 0
    picked: list[tuple[str, list[Device]]] = []
    owners: list[int] = []  # the claim (by id) of each pick

    def in_use(alt: Alternative, device: Device, used: set[tuple[str, str, str]]) -> bool:
        if device.allow_multiple:
            return False
        # Admin access takes a device from no one, yet not twice in one search.
        return device.key in used or (device.key in holders and not alt.sub.admin_access)

    def options(claim: Claim, alt: Alternative, used: set[tuple[str, str, str]]
                ) -> Iterable[list[Device]]:
        if alt.sub.all_devices:
            if alt.matching and all(c.free for c in alt.matching):
                devs = [c.device for c in alt.matching]
                if all(d.allow_multiple or d.key not in used for d in devs):
                    yield devs
            return
        reachable: list[Candidate | Rejection] = [
            v for v in alt.order if not in_use(alt, v.device, used)
            and (isinstance(v, Candidate) or v.error)]
        for combo in itertools.combinations(reachable, alt.sub.count):
            for v in combo:
                if isinstance(v, Rejection):
                    raise _Stopped(Stop(claim, alt.sub.name, v.message, v))
            yield [v.device for v in combo]

    def dfs(i: int, used: set[tuple[str, str, str]]) -> bool:
        nonlocal steps
        if i == len(items):
            return True
        claim, rr = items[i]
        for alt in rr.alternatives:
            for devs in options(claim, alt, used):
                steps += 1
                if steps > MAX_SEARCH_STEPS:
                    raise _Exhausted
                picked.append((alt.sub.name, devs))
                owners.append(id(claim))
                mine = [p for p, o in zip(picked, owners, strict=True) if o == id(claim)]
                if _consistent(claim.constraints, mine) and \
                        dfs(i + 1, used | {d.key for d in devs if not d.allow_multiple}):
                    return True
                picked.pop()
                owners.pop()
        return False

    try:
        if dfs(0, set()):
            return list(picked), False, None
    except _Exhausted:
        return None, True, None
    except _Stopped as stopped:
        return None, False, stopped.stop
    return None, False, None


class _Exhausted(Exception):
    pass


class _Stopped(Exception):
    def __init__(self, stop: Stop) -> None:
        super().__init__(stop.message)
        self.stop = stop


def _why_not(claim: Claim, requests: list[RequestResult], exhausted: bool,
             qualified: bool) -> str:
    if exhausted:
        return f"no allocation found within {MAX_SEARCH_STEPS} steps of the search"
    short = []
    for rr in requests:
        parts = []
        ok = False
        for alt in rr.alternatives:
            free = sum(1 for c in alt.matching if c.free)
            if alt.problem is not None:
                parts.append(f"{alt.sub.name}: {alt.problem}")
                continue
            if alt.sub.all_devices:
                if not alt.matching:
                    parts.append(f"{alt.sub.name}: allocationMode All, but no device matches")
                elif free < len(alt.matching):
                    parts.append(f"{alt.sub.name}: allocationMode All, but "
                                 f"{len(alt.matching) - free} of the {len(alt.matching)} "
                                 "matching devices are held by other claims")
                else:
                    ok = True
                continue
            if free >= alt.sub.count:
                ok = True
                continue
            want = f"{alt.sub.count} device{'s' if alt.sub.count > 1 else ''}"
            parts.append(f"{alt.sub.name}: needs {want}, {len(alt.matching)} match"
                         + (f" and {free} of them {'is' if free == 1 else 'are'} free"
                            if alt.matching else ""))
        if not ok:
            short.append("; ".join(parts))
    if short:
        return "not allocatable: " + " | ".join(short)
    if claim.constraints:
        return "not allocatable: every request has enough devices, but no choice satisfies " + \
            "; ".join(_describe_constraint(c, requests, qualified) for c in claim.constraints)
    return "not allocatable: the requests compete for the same devices"


def _kind(c: Constraint) -> tuple[str, str]:
    attr = c.match_attribute or c.distinct_attribute
    assert attr is not None
    return ("matchAttribute" if c.match_attribute else "distinctAttribute"), attr


def _chosen_values(c: Constraint, picks: list[tuple[str, list[Device]]]) -> ConstraintResult:
    kind, attr = _kind(c)
    values = tuple((name, d, d.attribute(attr)) for name, devs in picks if _covers(c, name)
                   for d in devs)
    return ConstraintResult(kind, attr, c.requests, True, values)


def _candidate_values(c: Constraint, requests: list[RequestResult]) -> ConstraintResult:
    """The values the free candidates of each covered request carry: the devices that
    disagree when no choice satisfies the constraint."""
    kind, attr = _kind(c)
    values = tuple((alt.sub.name, cand.device, cand.device.attribute(attr))
                   for rr in requests for alt in rr.alternatives if _covers(c, alt.sub.name)
                   for cand in alt.matching if cand.free)
    return ConstraintResult(kind, attr, c.requests, False, values)


def _describe_constraint(c: Constraint, requests: list[RequestResult], qualified: bool) -> str:
    result = _candidate_values(c, requests)
    seen = []
    for rr in requests:
        for alt in rr.alternatives:
            if not _covers(c, alt.sub.name):
                continue
            values = [f"{device_name(d, qualified)}={_show_attr(v)}"
                      for name, d, v in result.values if name == alt.sub.name]
            seen.append(f"{alt.sub.name} [{', '.join(values) or 'no free device'}]")
    return f"{result.kind} {result.attribute} (values: {'; '.join(seen)})"


def _show_attr(v: Any) -> str:
    if v is None:
        return "absent"
    kind, value = v
    if kind in ("string", "version"):
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    if kind == "bool":
        return "true" if value else "false"
    return str(value)
