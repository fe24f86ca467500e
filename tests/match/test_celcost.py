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
from liken_devices.match.celcost import MAX_NESTING, estimate
from tests.support.fakeapi import FakeApiServer
from tests.support.hostile import Outcome, assert_fails_closed, examples, run_cli

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


def _match(tmp_path: Path, expression: str, *, memory: int = 384 << 20,
           deadline: float = 30) -> Outcome:
    """``match`` of a claim whose DeviceClass selects with ``expression``, on one device."""
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
    return run_cli(["match", "-f", str(claim), "--slices", str(slices)], memory=memory,
                   deadline=deadline)


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
    out = _match(tmp_path, expression, memory=384 << 20, deadline=60)
    assert_fails_closed(out, allowed=(0, 1, 2))
    if out.rc == 2:
        assert "exceeds the limit" in out.stderr or "does not compile" in out.stderr


# ---- one bound for the estimate and the evaluator (rules: limits.cel-bound) -----------------
#
# Reproduction: a selector whose growth sits behind a construct the old estimate did not know
# (an optional list element `[?x]` made the whole expression unparsable to it, so it was rated
# cost 1 and run) ended in `std::bad_alloc` after gigabytes; 110 nested parentheses ended the
# estimate in a RecursionError traceback.

X16 = '"xxxxxxxxxxxxxxxx"'


def _doubling(seed: str, step: str, n: int) -> str:
    """``seed`` bound, then ``n`` times rebound to ``step`` of itself (each step doubles it)."""
    return (f"cel.bind(a0, {seed}, "
            + "".join(f"cel.bind(a{i + 1}, {step.format(p=f'a{i}')}, " for i in range(n))
            + f"a{n}.size() > 0" + ")" * (n + 1))


OPTIONAL_LIST_BOMB = ('cel.bind(l0, [?optional.of("xxxxxxxx"), ?optional.of("y")], '
                      + "".join(f"cel.bind(l{i + 1}, l{i} + l{i}, " for i in range(24))
                      + "l24.size() > 0" + ")" * 25)
HIDDEN_GROWTH = {
    "optional list elements": OPTIONAL_LIST_BOMB,
    "optional or()": _doubling(X16, "optional.none().or(optional.of({p} + {p})).value()", 26),
    "optMap": _doubling(X16, "optional.of({p}).optMap(s, s + s).value()", 26),
    "bytes": _doubling(f"bytes({X16})", "{p} + {p}", 26),
    "max() of a list": _doubling(X16, "[{p} + {p}].max()", 26),
    "first() of a list": _doubling(X16, "[{p} + {p}].first().value()", 26),
    "a map's keys": _doubling(X16, "{{{p} + {p}: 1}}.map(k, k)[0]", 26),
    "escapes in replace()": ('"\\x61\\x61\\x61\\x61"' + '.replace("\\x61", "aaaaaaaaaa")' * 9
                             + ".size() > 0"),
    "comparing nested lists": ("cel.bind(a0, [1, 1, 1, 1, 1, 1, 1, 1], "
                               + "".join(f"cel.bind(a{i + 1}, [{', '.join([f'a{i}'] * 8)}], "
                                         for i in range(9))
                               + "a9 == a9" + ")" * 10),
}


@pytest.mark.fuzz
@pytest.mark.parametrize("construct", list(HIDDEN_GROWTH))
def test_growth_behind_any_construct_is_refused_before_evaluation(construct: str) -> None:
    """Each of these builds gigabytes (or compares 8^10 elements) in the runtime: the estimate
    follows the sizes through optional elements, or(), optMap, bytes, a list's elements, a
    map's keys, escapes and deep comparisons, and refuses it before it runs."""
    expression = HIDDEN_GROWTH[construct]
    assert len(expression.encode()) < 2048
    with pytest.raises(CompileError, match="exceeds the limit"):
        environment().compile(expression)


@pytest.mark.fuzz
def test_the_optional_list_bomb_ends_in_one_answer_within_bounds(tmp_path: Path) -> None:
    """The reproduction as the command runs it: before, exit 1 with a `std::bad_alloc`
    traceback; now the claim is answered (the selector does not compile) in the bounds."""
    out = _match(tmp_path, OPTIONAL_LIST_BOMB, memory=768 << 20, deadline=60)
    assert_fails_closed(out, allowed=(1,))
    assert "exceeds the limit" in out.stdout, out.stdout[-1000:]


@pytest.mark.parametrize("depth", [31, 32, 33, 34])
def test_the_estimate_and_the_runtime_stop_nesting_at_the_same_depth(depth: int) -> None:
    """The runtime's parser stops at 32 levels of parentheses: so does the estimate, counted
    without recursion. Should the runtime's limit change, this test fails."""
    expression = "(" * depth + "true" + ")" * depth
    env = environment()
    try:
        env._env.compile(expression)
        runtime_accepts = True
    except RuntimeError as exc:
        assert "recursion limit" in str(exc)
        runtime_accepts = False
    assert runtime_accepts == (depth <= MAX_NESTING)
    assert (estimate(expression) is not None) == (depth <= MAX_NESTING)


DEEP = {
    "110 parentheses": "(" * 110 + "true" + ")" * 110,
    "4,000 parentheses": "(" * 4000 + "true" + ")" * 4000,
    "nested lists": "[" * 300 + "1" + "]" * 300 + " != []",
    "nested optional lists": "[?optional.of(" * 200 + "1" + ")]" * 200 + " != []",
    "nested calls": "size(" * 500 + '"a"' + ")" * 500 + " > 0",
    "nested maps": "{1: " * 500 + "1" + "}" * 500 + " != {}",
    "conditionals": "false ? false : " * 600 + "true",
    "chained calls": '"a"' + ".lowerAscii()" * 700 + ' == "a"',
    "chained maps": "[1]" + ".map(a, [a])" * 800 + " != []",
    "nested binds": "cel.bind(a, 1, " * 600 + "a == 1" + ")" * 600,
}


@pytest.mark.fuzz
@pytest.mark.parametrize("shape", list(DEEP))
def test_deep_nesting_is_refused_in_one_line(api: FakeApiServer, tmp_path: Path,
                                             shape: str) -> None:
    """Before: a RecursionError traceback from 110 parentheses on. Now every shape of deep
    nesting is answered: the estimate refuses it, or the runtime's parser does, never a
    traceback; `fleet --selector` says so in one line with exit 2."""
    expression = DEEP[shape]
    assert len(expression.encode()) <= 10 * 1024
    with pytest.raises(CompileError):
        environment().compile(expression)
    out = _match(tmp_path, expression)
    assert_fails_closed(out, allowed=(0, 1))
    assert "does not compile" in out.stdout or "cannot bound" in out.stdout, out.stdout[-800:]
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
    out = run_cli(["fleet", "--kubeconfig", kubeconfig, "--selector", expression])
    assert_fails_closed(out, allowed=(2,))
    assert "--selector" in out.stderr


@pytest.mark.parametrize("expression", ["!" * 8000 + "true", "-" * 8000 + "1 == 1"])
def test_a_run_of_unary_operators_is_counted_not_recursed(expression: str) -> None:
    """Both parsers take a run of ``!`` or ``-`` as one construct: before, the estimate recursed
    once per operator and ended in a RecursionError; now it is evaluated, and true."""
    env = environment()
    value, error = env.evaluate(env.compile(expression), env.device_data(DeviceInput(D, {}, {})))
    assert error is None and value is True


def test_what_the_estimate_does_not_know_is_not_run() -> None:
    """A function or construct outside the estimate's grammar cannot be bounded: when the
    runtime would run it, the selector is refused in one line instead of rated cheap."""
    for expression in ('device.attributes["liken.sh"].vendor.unknownFn() == 1',
                       "kubernetes.Semver{major: 1} != kubernetes.Semver{}"):
        assert estimate(expression) is None
        with pytest.raises(CompileError):
            environment().compile(expression)


# ---- generated expressions over the whole environment ---------------------------------------

_ATOMS = st.sampled_from([
    '"ab"', '"aaaa"', "''", '"\\x61\\u0062"', "r'a\\\\b'", "b'xy'", "1", "-2", "3u", "1.5",
    "true", "false", "null", "x", "y", f'device.attributes["{D}"].bus', "device.driver",
    f'device.attributes["{D}"]', "device.attributes", "[1, 2, 3]", '["a", "b"]',
    "{'k': 'v'}", "optional.none()", "[]", "{}", '"1.2.3"', "int"])
_METHODS = st.sampled_from([
    '.replace("a", "aaaaaaaa")', '.replace("", "bb")', '.split("")', '.split("a", 2)',
    '.join("ab")', ".join()", ".lowerAscii()", ".upperAscii()", ".reverse()", ".trim()",
    ".substring(1)", ".charAt(0)", '.indexOf("a")', ".size()", '.startsWith("a")',
    '.matches("a+")', '.find("a")', '.findAll("a")', ".isSorted()", ".sum()", ".max()",
    ".first()", ".last()", ".value()", ".hasValue()", ".orValue(1)",
    ".or(optional.of(1))", "[0]", "[?0]", ".?k", '["k"]', ".bus", '.includes("a")'])
_OPS = st.sampled_from(["+", "-", "*", "==", "!=", "<", ">=", "&&", "||", "in"])
_MACRO = st.sampled_from(["map", "filter", "all", "exists", "exists_one", "optMap",
                          "optFlatMap"])
_FUNC = st.sampled_from(["size", "string", "bytes", "int", "dyn", "optional.of",
                         "optional.ofNonZeroValue", "strings.quote", "isSemver", "semver",
                         "quantity", "type", "sets.contains", "has"])


def _grow(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, _OPS, children).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(children, children, children).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
        st.tuples(children, _METHODS).map("".join),
        st.lists(st.tuples(st.booleans(), children), max_size=4).map(
            lambda items: "[" + ", ".join(f"?optional.of({c})" if opt else c
                                          for opt, c in items) + "]"),
        st.lists(st.tuples(st.booleans(), children, children), max_size=3).map(
            lambda items: "{" + ", ".join(f"?{k}: optional.of({v})" if opt else f"{k}: {v}"
                                          for opt, k, v in items) + "}"),
        st.tuples(children, _MACRO, st.sampled_from(["x", "y"]), children).map(
            lambda t: f"{t[0]}.{t[1]}({t[2]}, {t[3]})"),
        st.tuples(children, children).map(lambda t: f'"%s-%d".format([{t[0]}, {t[1]}])'),
        st.tuples(_FUNC, children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(["x", "y"]), children, children).map(
            lambda t: f"cel.bind({t[0]}, {t[1]}, {t[2]})"),
        st.tuples(st.integers(0, 40), children).map(
            lambda t: "(" * t[0] + t[1] + ")" * t[0]),
        st.tuples(st.integers(1, 300), children).map(lambda t: "!" * t[0] + t[1]),
        children.map(lambda c: f"cel.bind(x, {c}, cel.bind(x, x + x, cel.bind(x, x + x, "
                               f"x.size() > 0)))"),
    )


EXPRESSIONS = st.recursive(_ATOMS, _grow, max_leaves=24).flatmap(
    lambda e: st.sampled_from([e, f"({e}) == ({e})", f"size({e}) > 0", f"!({e})"]))


@settings(max_examples=examples(300), deadline=None)
@given(expression=EXPRESSIONS)
def test_the_estimate_answers_every_generated_expression(expression: str) -> None:
    """The estimate itself never fails: a cost, or None (not bounded), for any expression of
    the grammar (optional syntax, macros, nesting, string operations), in linear time."""
    cost = estimate(expression)
    assert cost is None or cost >= 0


@pytest.mark.fuzz
@settings(max_examples=examples(12), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(expression=EXPRESSIONS)
def test_every_generated_selector_is_answered_within_bounds(tmp_path: Path,
                                                            expression: str) -> None:
    """One bound for the estimate and the evaluator (rules: limits.cel-bound): whatever the
    expression, ``match`` answers (0, 1) or refuses it in one line, within 384 MiB and 30 s,
    never a traceback. A selector that runs has an estimate within the limit."""
    out = _match(tmp_path, expression)
    assert_fails_closed(out, allowed=(0, 1, 2))
    assert "MemoryError" not in out.stdout + out.stderr
    if len(expression.encode()) <= 10 * 1024 and "does not compile" not in out.stdout \
            and out.rc in (0, 1):
        cost = estimate(expression)
        assert cost is not None and cost <= MAX_COST, (cost, out.stdout[-500:])
