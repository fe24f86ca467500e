"""Evaluate claims against a node's devices as the scheduler's structured allocator does.

The rules (resource.k8s.io/v1, KEP-4381 structured parameters, KEP-4816 prioritized lists,
KEP-5018 admin access, KEP-5075 allowMultipleAllocations):

- a device fits a request when every selector of the request's DeviceClass and then every
  selector of the request is true for it; a CEL evaluation error is not a match (and is shown:
  the scheduler stops allocating the claim on such an error, so it is worth fixing);
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

For every device that does not fit, the explanation names the first failing selector and the
values it read (:func:`explain_failure`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .cel import CompileError, DeviceInput, Env, code_positions, matching_bracket
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


class Evaluator:
    """Compiles each expression once and converts each device once."""

    def __init__(self, env: Env, classes: dict[str, DeviceClass]) -> None:
        self.env = env
        self.classes = classes
        self._programs: dict[str, Any] = {}
        self._data: dict[tuple[str, str, str], dict[str, Any] | str] = {}

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

    def first_failure(self, sub: Subrequest, device: Device) -> Rejection | None:
        data = self.data(device)
        for label, expression in self.selectors(sub):
            if isinstance(data, str):
                return Rejection(device, label, f"the device cannot be evaluated: {data}", True)
            outcome = self.env.matches(self.program(expression), data)
            if outcome.error is not None:
                return Rejection(device, label, f"CEL runtime error: {outcome.error}", True)
            if not outcome.matched:
                return Rejection(device, label, explain_failure(self, expression, data))
        return None


def evaluate_claims(evaluator: Evaluator, claims: Sequence[Claim], devices: Sequence[Device],
                    holders: dict[tuple[str, str, str], str]) -> list[ClaimResult]:
    """Evaluate ``claims`` together (a pod's claims) on ``devices``.

    ``holders`` maps each device that other claims hold (without admin access) to who holds it.
    The scheduler allocates a pod's claims for a node in one search, so a device one claim takes
    can be left to another when that is the only way both fit; the search here is the same.
    When there is no joint allocation, each claim is explained in order, given what the claims
    before it got.
    """
    prepared = [_prepare(evaluator, claim, devices, holders) for claim in claims]
    found, exhausted = _search([(claim, rr) for claim, rrs in prepared for rr in rrs])
    if found is not None:
        results = []
        for (claim, rrs), (_, picks) in zip(prepared, _split(prepared, found), strict=True):
            results.append(_allocated(claim, rrs, picks))
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


def _warnings(requests: list[RequestResult]) -> list[str]:
    return sorted({f"{r.selector} on {r.device.name}: {r.message}"
                   for rr in requests for a in rr.alternatives for r in a.rejected if r.error})


def _allocated(claim: Claim, requests: list[RequestResult],
               picks: list[tuple[str, list[Device]]]) -> ClaimResult:
    if not requests:
        return ClaimResult(claim, True, "the claim requests no devices", requests, [])
    for rr, (alt_name, chosen) in zip(requests, picks, strict=True):
        rr.chosen = alt_name
        rr.devices = chosen
    return ClaimResult(claim, True, "allocatable: " + "; ".join(
        f"{rr.chosen} gets {', '.join(d.name for d in rr.devices)}" for rr in requests),
        requests, _warnings(requests))


def evaluate_claim(evaluator: Evaluator, claim: Claim, devices: Sequence[Device],
                   holders: dict[tuple[str, str, str], str]) -> ClaimResult:
    claim, requests = _prepare(evaluator, claim, devices, holders)
    found, exhausted = _search([(claim, rr) for rr in requests])
    if found is not None:
        return _allocated(claim, requests, found)
    return ClaimResult(claim, False, _why_not(claim, requests, exhausted), requests,
                       _warnings(requests))


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
            continue
        untolerated = [t for t in device.taints
                       if t.get("effect") in ("NoSchedule", "NoExecute")
                       and not any(tol.tolerates(t) for tol in sub.tolerations)]
        if untolerated:
            t = untolerated[0]
            alt.rejected.append(Rejection(device, "taint", f"tainted {t.get('key')}="
                                          f"{t.get('value', '')}:{t.get('effect')}, "
                                          "not tolerated"))
            continue
        holder = holders.get(device.key)
        if holder is not None and not device.allow_multiple and not sub.admin_access:
            alt.matching.append(Candidate(device, False, holder))
        else:
            alt.matching.append(Candidate(device, True))
    return alt


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


def _search(items: list[tuple[Claim, RequestResult]]
            ) -> tuple[list[tuple[str, list[Device]]] | None, bool]:
    """Devices for every request of ``items`` (one claim's, or a pod's claims' in order), each
    claim's constraints holding over its own requests; depth first, in device order."""
    steps = 0
    picked: list[tuple[str, list[Device]]] = []
    owners: list[int] = []  # the claim (by id) of each pick

    def options(alt: Alternative, used: set[tuple[str, str, str]]) -> Iterable[list[Device]]:
        if alt.problem is not None:
            return
        if alt.sub.all_devices:
            if alt.matching and all(c.free for c in alt.matching):
                devs = [c.device for c in alt.matching]
                if all(d.allow_multiple or d.key not in used for d in devs):
                    yield devs
            return
        free = [c.device for c in alt.matching
                if c.free and (c.device.allow_multiple or c.device.key not in used)]
        for combo in itertools.combinations(free, alt.sub.count):
            yield list(combo)

    def dfs(i: int, used: set[tuple[str, str, str]]) -> bool:
        nonlocal steps
        if i == len(items):
            return True
        claim, rr = items[i]
        for alt in rr.alternatives:
            for devs in options(alt, used):
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
            return list(picked), False
    except _Exhausted:
        return None, True
    return None, False


class _Exhausted(Exception):
    pass


def _why_not(claim: Claim, requests: list[RequestResult], exhausted: bool) -> str:
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
            "; ".join(_describe_constraint(c, requests) for c in claim.constraints)
    return "not allocatable: the requests compete for the same devices"


def _describe_constraint(c: Constraint, requests: list[RequestResult]) -> str:
    attr = c.match_attribute or c.distinct_attribute
    assert attr is not None
    kind = "matchAttribute" if c.match_attribute else "distinctAttribute"
    seen = []
    for rr in requests:
        for alt in rr.alternatives:
            if not _covers(c, alt.sub.name):
                continue
            values = []
            for cand in alt.matching:
                if not cand.free:
                    continue
                v = cand.device.attribute(attr)
                values.append(f"{cand.device.name}={_show_attr(v)}")
            seen.append(f"{alt.sub.name} [{', '.join(values) or 'no free device'}]")
    return f"{kind} {attr} (values: {'; '.join(seen)})"


def _show_attr(v: Any) -> str:
    if v is None:
        return "absent"
    kind, value = v
    if kind in ("string", "version"):
        return f'"{value}"'
    if kind == "bool":
        return "true" if value else "false"
    return str(value)


# -- explaining one failing selector ----------------------------------------------------------

_REF = re.compile(
    r'device\.(?:(?P<map>attributes|capacity)\[\s*"(?P<domain>[^"\\]*)"\s*\]'
    r'(?:\.(?P<id>[A-Za-z_][A-Za-z0-9_]*)|\[\s*"(?P<id2>[^"\\]*)"\s*\])?'
    r'|(?P<field>driver|allowMultipleAllocations)\b)')
_LITERAL = r'(?:"(?:[^"\\]|\\.)*"|-?[0-9]+|true|false)'


def _conjuncts(expression: str) -> list[str]:
    """The top-level ``&&`` operands of an expression (outside strings and brackets)."""
    parts, start = [], 0
    for i, depth in code_positions(expression):
        if i >= start and depth == 0 and expression.startswith("&&", i):
            parts.append(expression[start:i])
            start = i + 2
    parts.append(expression[start:])
    parts = [p.strip() for p in parts]
    if len(parts) == 1:
        inner = parts[0]
        if inner.startswith("(") and matching_bracket(inner, 0) == len(inner) - 1:
            return _conjuncts(inner[1:-1])
    return parts


_BIND = re.compile(r'cel\.bind\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,\s*'
                   r'(device\.(?:attributes|capacity)\[\s*"[^"\\]*"\s*\])\s*,')


def explain_failure(evaluator: Evaluator, expression: str, data: dict[str, Any]) -> str:
    """Why ``expression`` is false for a device: the first false ``&&`` operand, the values it
    read, and what it wants when it is a plain comparison with a literal."""
    failing = expression.strip()
    # cel.bind(x, device.attributes["d"], body): explain the body, reading x as what it binds.
    bind = _BIND.match(failing)
    wrap, alias, target = "{}", None, ""
    if bind is not None and matching_bracket(failing, failing.index("(")) == len(failing) - 1:
        alias, target = bind.group(1), bind.group(2)
        wrap = f"cel.bind({alias}, {target}, {{}})"
        failing = failing[bind.end():-1].strip()
    parts = _conjuncts(failing)
    if len(parts) > 1:
        for part in parts:
            try:
                outcome = evaluator.env.matches(
                    evaluator.program(wrap.replace("{}", part, 1)), data)
            except CompileError:
                break
            if outcome.error is not None or not outcome.matched:
                failing = part
                break
    if alias is not None:
        failing = re.sub(rf"(?<![\w.]){re.escape(alias)}(?=\s*[.\[])", target, failing)
    seen = []
    for m in _REF.finditer(failing):
        text = m.group(0)
        if m.group("field"):
            seen.append(f"{text} is {evaluator.env.show(data[m.group('field')])}")
            continue
        ident = m.group("id") or m.group("id2")
        domain_map = data[m.group("map")].get(m.group("domain"), {})
        if ident is None:
            continue
        if ident in domain_map:
            seen.append(f"{text} is {evaluator.env.show(domain_map[ident])}")
        else:
            seen.append(f"{text} is absent")
    seen = list(dict.fromkeys(seen))
    want = None
    cmp: re.Match[str] | None = re.fullmatch(
        rf"\(?\s*(device\.[^=!<>]+?)\s*(==|!=)\s*({_LITERAL})\s*\)?", failing) or \
        re.fullmatch(rf"\(?\s*({_LITERAL})\s*(==|!=)\s*(device\.[^=!<>]+?)\s*\)?", failing)
    if cmp:
        literal = cmp.group(3) if cmp.group(1).startswith("device.") else cmp.group(1)
        want = f"the selector wants {literal}" if cmp.group(2) == "==" else \
            f"the selector wants anything but {literal}"
    if seen and want:
        return f"{', '.join(seen)}, {want}"
    if seen:
        return f"{', '.join(seen)}: `{_short(failing)}` is false"
    return f"`{_short(failing)}` is false"


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
