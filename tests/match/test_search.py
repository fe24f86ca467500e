"""The allocator's search, as a property: on small generated nodes and claims it finds an
allocation exactly when one exists (checked by brute force over every assignment), and what it
finds obeys the selectors, the counts, the holders and the constraints.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("cel_expr_python")

from liken_devices.match.allocate import Evaluator, evaluate_claim, evaluate_claims
from liken_devices.match.cel import environment
from liken_devices.match.model import (
    Claim,
    Constraint,
    Device,
    DeviceClass,
    Request,
    Subrequest,
)

DRIVER = "liken.sh"
COLORS = ("red", "blue")
CLASSES = {
    "any": DeviceClass("any", ()),
    "red": DeviceClass("red", ('device.attributes["liken.sh"].color == "red"',)),
    "card": DeviceClass("card", ('has(device.attributes["liken.sh"].card)',)),
}


@st.composite
def nodes(draw: Any) -> tuple[list[Device], dict[tuple[str, str, str], str]]:
    n = draw(st.integers(1, 5))
    devices = []
    for i in range(n):
        attrs: dict[str, Any] = {"color": {"string": draw(st.sampled_from(COLORS))}}
        if draw(st.booleans()):
            attrs["card"] = {"int": draw(st.integers(0, 1))}
        devices.append(Device(DRIVER, "n1", f"d{i}", "n1", attrs, {}, draw(st.booleans())))
    held = {d.key: "ResourceClaim x/y" for d in devices if draw(st.booleans())}
    return devices, held


@st.composite
def claims(draw: Any, name: str = "c") -> Claim:
    requests = []
    for r in range(draw(st.integers(1, 2))):
        subs = []
        for s in range(draw(st.integers(1, 2))):
            all_devices = draw(st.booleans()) and draw(st.booleans())
            subs.append(Subrequest(f"r{r}/s{s}",
                                   draw(st.sampled_from(sorted(CLASSES))), (), all_devices,
                                   0 if all_devices else draw(st.integers(1, 2)),
                                   draw(st.booleans()) and draw(st.booleans())))
        requests.append(Request(f"r{r}", tuple(subs), True))
    constraints = []
    if draw(st.booleans()):
        constraints.append(Constraint((), "liken.sh/card", None))
    if draw(st.booleans()):
        constraints.append(Constraint(("r0",), None, "liken.sh/color"))
    return Claim("ResourceClaim", "default", name, requests, constraints)


def fits(sub: Subrequest, d: Device) -> bool:
    if sub.class_name == "red":
        return d.attributes["color"]["string"] == "red"
    if sub.class_name == "card":
        return "card" in d.attributes
    return True


def free(sub: Subrequest, d: Device, held: dict[tuple[str, str, str], str]) -> bool:
    return d.key not in held or d.allow_multiple or sub.admin_access


def value(d: Device, attr: str) -> Any:
    v = d.attributes.get(attr.split("/")[1])
    return None if v is None else next(iter(v.values()))


def consistent(claim: Claim, picked: list[tuple[str, list[Device]]]) -> bool:
    for c in claim.constraints:
        attr = c.match_attribute or c.distinct_attribute
        assert attr is not None
        values = [value(d, attr) for name, devs in picked
                  if not c.requests or name.split("/")[0] in c.requests for d in devs]
        if any(v is None for v in values):
            return False
        if c.match_attribute and len(set(values)) > 1:
            return False
        if c.distinct_attribute and len(set(values)) != len(values):
            return False
    return True


def options(sub: Subrequest, devices: list[Device], held: dict[tuple[str, str, str], str]
            ) -> list[list[Device]]:
    matching = [d for d in devices if fits(sub, d)]
    if sub.all_devices:
        if matching and all(free(sub, d, held) for d in matching):
            return [matching]
        return []
    usable = [d for d in matching if free(sub, d, held)]
    return [list(c) for c in itertools.combinations(usable, sub.count)]


def brute_force(claim: Claim, devices: list[Device],
                held: dict[tuple[str, str, str], str]) -> bool:
    per_request = [[(sub.name, devs) for sub in r.alternatives
                    for devs in options(sub, devices, held)] for r in claim.requests]
    for choice in itertools.product(*per_request):
        used: list[tuple[str, str, str]] = [d.key for _, devs in choice for d in devs
                                            if not d.allow_multiple]
        if len(used) != len(set(used)):
            continue
        if consistent(claim, list(choice)):
            return True
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=nodes(), claim=claims())
def test_search_finds_an_allocation_exactly_when_one_exists(
        node: tuple[list[Device], dict[tuple[str, str, str], str]], claim: Claim) -> None:
    devices, held = node
    result = evaluate_claim(Evaluator(environment(), CLASSES), claim, devices, held)
    assert result.allocatable == brute_force(claim, devices, held), result.reason
    if not result.allocatable:
        return
    picked = []
    for rr in result.requests:
        (sub,) = [s for s in rr.request.alternatives if s.name == rr.chosen]
        assert all(fits(sub, d) and free(sub, d, held) for d in rr.devices)
        if sub.all_devices:
            assert sorted(d.name for d in rr.devices) == \
                sorted(d.name for d in devices if fits(sub, d))
        else:
            assert len(rr.devices) == sub.count
        picked.append((sub.name, rr.devices))
    assert consistent(claim, picked)
    exclusive = [d.key for _, devs in picked for d in devs if not d.allow_multiple]
    assert len(exclusive) == len(set(exclusive))


def brute_force_pod(pod: list[Claim], devices: list[Device],
                    held: dict[tuple[str, str, str], str]) -> bool:
    per_request = [[(i, sub.name, devs) for sub in r.alternatives
                    for devs in options(sub, devices, held)]
                   for i, claim in enumerate(pod) for r in claim.requests]
    for choice in itertools.product(*per_request):
        used = [d.key for _, _, devs in choice for d in devs if not d.allow_multiple]
        if len(used) != len(set(used)):
            continue
        if all(consistent(claim, [(n, devs) for j, n, devs in choice if j == i])
               for i, claim in enumerate(pod)):
            return True
    return False


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=nodes(), first=claims("a"), second=claims("b"))
def test_a_pods_claims_are_allocated_exactly_when_they_fit_together(
        node: tuple[list[Device], dict[tuple[str, str, str], str]], first: Claim,
        second: Claim) -> None:
    devices, held = node
    results = evaluate_claims(Evaluator(environment(), CLASSES), [first, second], devices, held)
    together = all(r.allocatable for r in results)
    assert together == brute_force_pod([first, second], devices, held)
    if together:
        exclusive = [d.key for r in results for rr in r.requests for d in rr.devices
                     if not d.allow_multiple]
        assert len(exclusive) == len(set(exclusive))
