"""The CEL cost estimate counts what strings and lists grow to, as the API server's does: an
expression that builds gigabytes without a comprehension is refused at compile time, one that
is accepted runs within a memory bound, and ``//`` comments are read as comments.

Reproduction: a selector of under 300 bytes rated cost 1 by the old estimate (which counted
comprehensions only) allocated 3 GB at evaluation and ended in a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("cel_expr_python")

from liken_devices.match.cel import MAX_COST, CompileError, DeviceInput, environment
from liken_devices.match.celcost import estimate
from tests.support.hostile import assert_fails_closed, examples, run_cli

D = "liken.sh"
REPLACE_BOMB = '"aaaa"' + '.replace("a", "aaaaaaaaaa")' * 9 + '.size() > 0'
BIND_BOMB = ('cel.bind(a0, "xxxxxxxxxxxxxxxx", '
             + "".join(f"cel.bind(a{i + 1}, a{i} + a{i}, " for i in range(28))
             + "a28.size() > 0" + ")" * 29)
LIST_BOMB = ("cel.bind(l0, [1, 2, 3, 4, 5, 6, 7, 8], "
             + "".join(f"cel.bind(l{i + 1}, l{i} + l{i}, " for i in range(26))
             + "l26.size() > 0" + ")" * 27)
JOIN_BOMB = ('["' + "x" * 60 + '"]' + '.map(s, [s, s, s, s, s, s, s, s].join(s))' * 6
             + '.size() > 0')


@pytest.mark.fuzz
@pytest.mark.parametrize("expression", [REPLACE_BOMB, BIND_BOMB, LIST_BOMB, JOIN_BOMB])
def test_growth_without_comprehensions_is_refused(expression: str) -> None:
    assert len(expression.encode()) < 1100
    with pytest.raises(CompileError, match="exceeds the limit"):
        environment().compile(expression)


def test_the_issue_sized_bomb_is_short_and_refused() -> None:
    assert len(REPLACE_BOMB.encode()) <= 284
    cost = estimate(REPLACE_BOMB)
    assert cost is not None and cost > MAX_COST


@pytest.mark.parametrize("expression", [
    f'device.attributes["{D}"].vendor == "10de" && has(device.attributes["{D}"].serial)',
    f'device.attributes["{D}"].name.lowerAscii().replace("-", "_").startsWith("intel")',
    f'device.attributes["{D}"].address.split(":").size() == 2',
    f'cel.bind(a, device.attributes["{D}"], a.vendor + ":" + a.product == "10de:1234")',
    f'device.attributes["{D}"].names.exists(x, x.contains("gpu"))',
    '["a", "b"].map(x, x + x).join(",") == "aa,bb"',
])
def test_ordinary_selectors_are_cheap(expression: str) -> None:
    cost = estimate(expression)
    assert cost is not None and cost < 10_000, cost


# What the real API server (Kubernetes 1.34) refused as too complex and what it admitted: two
# type values have no size the checker knows, so comparing them costs the largest size.
@pytest.mark.parametrize("expression,refused", [
    (f'type(device.attributes["{D}"].address) == string', True),
    (f'has(device.attributes["{D}"].a) && type(device.attributes["{D}"].a) == string', True),
    (f'type(device.attributes["{D}"].address) != type("")', True),
    ("int == int", True),
    (f'string == type(device.attributes["{D}"].address)', True),
    (f'device.attributes["{D}"].address == 3', False),
    (f'device.attributes["{D}"].a == device.attributes["{D}"].b', False),
    (f'has(device.attributes["{D}"].a) && device.attributes["{D}"].a.endsWith(":1.1")', False),
    (f'string(device.attributes["{D}"].address).endsWith(":1.1")', False),
])
def test_comparing_type_values_is_too_complex(expression: str, refused: bool) -> None:
    cost = estimate(expression)
    assert cost is not None and (cost > MAX_COST) == refused, cost


@pytest.mark.parametrize("expression", [
    f'device.attributes["{D}"].vendor == "10de" // the vendor\'s "ID"',
    '// it\'s the driver\'s [\ndevice.attributes["nosuchdomain"].size() == 0',
    f'device.attributes["{D}"].vendor == "10de" /* no */ || true'.replace(" /* no */", ""),
])
def test_a_selector_with_comments_is_accepted(expression: str) -> None:
    env = environment()
    data = env.device_data(DeviceInput(D, {"vendor": {"string": "10de"}}, {}))
    value, error = env.evaluate(env.compile(expression), data)
    assert error is None and value is True


def test_a_string_attribute_longer_than_the_api_allows_is_not_evaluated() -> None:
    """The estimate assumes the API's 64-byte bound; a slice file cannot break it."""
    from liken_devices.match.values import ValueError_

    with pytest.raises(ValueError_):
        environment().device_data(DeviceInput(D, {"vendor": {"string": "x" * 65}}, {}))


OPS = st.sampled_from([
    '.replace("a", "aaaaaaaa")', '.replace("", "bb")', " + x", '.upperAscii()',
    '.split("").join("ab")', '.split("a").join("aaaa")', " + x + x"])


@pytest.mark.fuzz
@settings(max_examples=examples(8), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.text(alphabet="ab", min_size=1, max_size=40), ops=st.lists(OPS, max_size=12),
       binds=st.integers(0, 6))
def test_what_is_accepted_runs_in_bounded_memory(tmp_path: Path, seed: str, ops: list[str],
                                                 binds: int) -> None:
    """Generated growth: ``match`` either refuses the selector (exit 2, one line) or answers
    (0 or 1) within 384 MiB and the deadline; never a traceback."""
    body = "x" + "".join(ops)
    expression = f'cel.bind(x, "{seed}", {body}.size() >= 0)'
    for _i in range(binds):
        expression = f'cel.bind(x, "{seed}" + "{seed}", {expression})'
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump_all([
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"},
         "spec": {"selectors": [{"cel": {"expression": expression}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "r", "namespace": "default"},
         "spec": {"devices": {"requests": [{"name": "r", "exactly": {
             "deviceClassName": "c"}}]}}}]))
    slices = tmp_path / "slices.yaml"
    slices.write_text(yaml.safe_dump({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "n1-liken.sh"},
        "spec": {"driver": D, "nodeName": "n1", "pool": {"name": "n1", "generation": 1,
                                                          "resourceSliceCount": 1},
                 "devices": [{"name": "d", "attributes": {"bus": {"string": "usb"}}}]}}))
    out = run_cli(["match", "-f", str(claim), "--slices", str(slices)], memory=384 << 20,
                  deadline=60)
    assert_fails_closed(out, allowed=(0, 1, 2))
    if out.rc == 2:
        assert "exceeds the limit" in out.stderr or "does not compile" in out.stderr
