"""match/extended.py: extended resource names as the API server checks them, and hostile pods.

rules: claims.extended-resource

The name check is compared with a second, plain reading of the rule (the domain's labels one by
one, the name's characters one by one); a pod of any shape is read or refused as bad input,
never with another error.
"""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liken_devices.errors import InputError
from liken_devices.match.extended import PodNeeds, extended_name_problem
from tests.support.hostile import examples

LABEL_CHARS = set(string.ascii_lowercase + string.digits + "-")
NAME_CHARS = set(string.ascii_letters + string.digits + "-_.")


def plain_is_extended(name: str) -> bool:
    if name.count("/") != 1 or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    domain, last = name.split("/")
    prefix = "requests." + domain
    if len(prefix) > 253:
        return False
    for label in prefix.split("."):
        if not label or len(label) > 63 or not set(label) <= LABEL_CHARS \
                or label[0] == "-" or label[-1] == "-":
            return False
    alnum = set(string.ascii_letters + string.digits)
    return 0 < len(last) <= 63 and set(last) <= NAME_CHARS and last[0] in alnum \
        and last[-1] in alnum


NAMES = st.one_of(
    st.text(alphabet="abcAB09-_./kuberntsio", max_size=40),
    st.builds(lambda d, n: f"{d}/{n}", st.sampled_from(
        ["squat.ai", "smarter-devices", "kubernetes.io", "a.kubernetes.io", "requests.x", "x-",
         "-x", "UP.ai", "a" * 250, "a..b", ""]),
        st.sampled_from(["serial", "ttyUSB0", "-a", "a-", "a.b_c", "x" * 63, "x" * 64, ""])))


@pytest.mark.fuzz
@settings(max_examples=examples(300), deadline=None)
@given(NAMES)
def test_the_name_check_agrees_with_a_plain_reading(name: str) -> None:
    assert (extended_name_problem(name) is None) == plain_is_extended(name), name


def test_the_names_the_peers_use_are_extended_resource_names() -> None:
    for name in ("squat.ai/serial", "smarter-devices/ttyUSB0", "nvidia.com/gpu",
                 "gpu.intel.com/i915"):
        assert extended_name_problem(name) is None, name


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 1 << 40), st.floats(),
                   st.text(max_size=12), st.sampled_from(["1", "2", "500m", "1k", "1Ki", "1e3",
                                                           "0", "-1", "1.5", " 1"]),
                   st.lists(st.integers(), max_size=2))
RESOURCE_MAPS = st.one_of(VALUES, st.dictionaries(
    st.one_of(st.sampled_from(["squat.ai/serial", "cpu", "memory",
                               "deviceclass.resource.kubernetes.io/serial"]), st.text(max_size=8)),
    VALUES, max_size=4))
CONTAINERS = st.one_of(VALUES, st.lists(st.one_of(VALUES, st.fixed_dictionaries(
    {}, optional={"name": VALUES, "restartPolicy": st.sampled_from(["Always", "Never", 3]),
                  "resources": st.one_of(VALUES, st.fixed_dictionaries(
                      {}, optional={"requests": RESOURCE_MAPS, "limits": RESOURCE_MAPS}))})),
    max_size=3))


@pytest.mark.fuzz
@settings(max_examples=examples(200), deadline=None)
@given(st.fixed_dictionaries({}, optional={"containers": CONTAINERS,
                                           "initContainers": CONTAINERS}))
def test_a_pod_of_any_shape_is_read_or_refused_as_bad_input(spec: dict[str, Any]) -> None:
    try:
        needs = PodNeeds.parse({"kind": "Pod", "spec": spec}, "default", "p")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    for c in needs.containers:
        assert all(isinstance(v, int) and v > 0 for v in c.needs.values())
