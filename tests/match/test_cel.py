"""The DRA selector environment against cases written from Kubernetes' own CEL test expectations.

Each case is an expression, a device (driver, attributes, capacity) and what Kubernetes answers:
a match, no match, a compile error or an evaluation error (with a fragment of its message where
our runtime words it the same way).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("cel_expr_python")

from liken_devices.match.cel import CompileError, DeviceInput, Env, environment

D = "dra.example.com"


@pytest.fixture(scope="module")
def env() -> Env:
    return environment()


def run(env: Env, expression: str, attrs: dict[str, Any] | None = None,
        capacity: dict[str, Any] | None = None, driver: str = D,
        allow_multiple: bool = False) -> tuple[bool, str | None]:
    program = env.compile(expression)
    data = env.device_data(DeviceInput(driver, attrs or {}, capacity or {}, allow_multiple))
    outcome = env.matches(program, data)
    return outcome.matched, outcome.error


MATCHES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("true", {}, {}, True),
    ("false", {}, {}, False),
    ('"no-such-domain" in device.attributes', {}, {}, False),
    (f'"{D}" in device.attributes', {f"{D}/something": {"bool": True}}, {}, True),
    (f'device.driver == "{D}"', {}, {}, True),
    (f'device.attributes["{D}"].name', {"name": {"bool": True}}, {}, True),
    (f'device.attributes["{D}"]["name"]', {"name": {"bool": True}}, {}, True),
    (f'cel.bind(dra, device.attributes["{D}"], dra.name)', {"name": {"bool": True}}, {}, True),
    ('device.attributes["other.example.com"].name', {"other.example.com/name": {"bool": True}},
     {}, True),
    (f'device.attributes["{D}"].name > 0', {"name": {"int": 1}}, {}, True),
    (f'device.attributes["{D}"].name == "fish"', {"name": {"string": "fish"}}, {}, True),
    (f'device.attributes["{D}"].names.size() == 2', {"names": {"bools": [True, False]}}, {},
     True),
    (f'device.attributes["{D}"].names.size() == 2', {"names": {"versions": ["1.0.0", "2.0.0"]}},
     {}, True),
    (f'device.attributes["{D}"].names.exists(x, x > 0)', {"names": {"ints": [1, 2]}}, {}, True),
    (f'device.attributes["{D}"].names.all(x, x != "")', {"names": {"strings": ["a", "b"]}}, {},
     True),
    (f'device.attributes["{D}"].names.all(x, x.isGreaterThan(semver("0.0.1")))',
     {"names": {"versions": ["1.0.0", "2.0.0"]}}, {}, True),
    (f'device.attributes["{D}"].name.includes("fish")', {"name": {"strings": ["fish", "b"]}},
     {}, True),
    (f'device.attributes["{D}"].name.includes("cat")', {"name": {"strings": ["fish", "b"]}},
     {}, False),
    (f'device.attributes["{D}"].name.includes("fish")', {"name": {"string": "fish"}}, {}, True),
    (f'device.attributes["{D}"].name.includes("bird")', {"name": {"string": "fish"}}, {}, False),
    (f'device.attributes["{D}"].name.includes(true)', {"name": {"bool": True}}, {}, True),
    (f'device.attributes["{D}"].name.includes(true)', {"name": {"bool": False}}, {}, False),
    (f'device.attributes["{D}"].name.includes(false)', {"name": {"bools": [True, True]}}, {},
     False),
    (f'device.attributes["{D}"].name.includes(1)', {"name": {"int": 1}}, {}, True),
    (f'device.attributes["{D}"].name.includes(1)', {"name": {"int": 2}}, {}, False),
    (f'device.attributes["{D}"].name.includes(3)', {"name": {"ints": [1, 2]}}, {}, False),
    (f'device.attributes["{D}"].name.includes(semver("1.0.0"))', {"name": {"version": "1.0.0"}},
     {}, True),
    (f'device.attributes["{D}"].name.includes(semver("2.0.0"))', {"name": {"version": "1.0.0"}},
     {}, False),
    (f'device.attributes["{D}"].name.includes(semver("1.0.0"))',
     {"name": {"versions": ["1.0.0", "2.0.0"]}}, {}, True),
    (f'device.attributes["{D}"].name.includes("value-47")',
     {"name": {"strings": [f"value-{i}" for i in range(48)]}}, {}, True),
    (f'1 in device.attributes["{D}"].names', {"names": {"ints": [1, 2, 3]}}, {}, True),
    (f'device.attributes["{D}"].name.isGreaterThan(semver("0.0.1"))',
     {"name": {"version": "1.0.0"}}, {}, True),
    (f'device.attributes["{D}"].name.isGreaterThan(semver("v0.0.1", true)) && '
     'isSemver("v1.0.0", true)', {"name": {"version": "1.0.0"}}, {}, True),
    ('isSemver("v1.0.0")', {}, {}, False),
    (f'device.capacity["{D}"].name.isGreaterThan(quantity("1Ki"))', {},
     {"name": {"value": "1Mi"}}, True),
    (f'"name" in device.capacity["{D}"] && '
     f'device.capacity["{D}"].name.isGreaterThan(quantity("1Ki"))', {},
     {"name": {"value": "1Mi"}}, True),
    (f'!("name" in device.capacity["{D}"]) || '
     f'device.capacity["{D}"].name.isGreaterThan(quantity("1Ki"))', {}, {}, True),
    (f'device.attributes["{D}"].services.split("example").size() >= 2',
     {"services": {"string": "some_example_value"}}, {}, True),
    (f'device.attributes["{D}"].services.matches("[^a]?sym")',
     {"services": {"string": "asymetric"}}, {}, True),
    (f'device.attributes.exists_one(x, x == "{D}")', {"services": {"string": "x"}}, {}, True),
    (f'device.attributes["{D}"].exists_one(x, x == "services")', {"services": {"string": "x"}},
     {}, True),
    (f'device.capacity.exists_one(x, x == "{D}")', {}, {"memory": {"value": "1Mi"}}, True),
    # The string extensions and optional syntax the Kubernetes environment enables.
    (f'device.attributes["{D}"].s.lowerAscii() == "ab"', {"s": {"string": "AB"}}, {}, True),
    (f'device.attributes["{D}"].s.substring(1) == "B"', {"s": {"string": "AB"}}, {}, True),
    (f'device.attributes["{D}"].?missing.orValue("x") == "x"', {}, {}, True),
    (f'has(device.attributes["{D}"].serial)', {}, {}, False),
    # Quantities compare by value, not by spelling; semver precedence per SemVer 2.0.0.
    ('quantity("1Ki") == quantity("1024")', {}, {}, True),
    ('quantity("1Ki").add(1).compareTo(quantity("1025")) == 0', {}, {}, True),
    ('quantity("500m").isInteger()', {}, {}, False),
    ('quantity("1.5").sub(quantity("500m")).asInteger() == 1', {}, {}, True),
    ('quantity("-2").sign() == -1', {}, {}, True),
    ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', {}, {}, True),
    ('semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))', {}, {}, True),
    ('semver("1.0.0-2").isLessThan(semver("1.0.0-10"))', {}, {}, True),
    ('semver("1.2.3").major() == 1 && semver("1.2.3").patch() == 3', {}, {}, True),
    ('semver("1.0.0+build.5") == semver("1.0.0")', {}, {}, True),
    # Heterogeneous equality is false, not an error.
    (f'device.attributes["{D}"].n == "3"', {"n": {"int": 3}}, {}, False),
]


@pytest.mark.parametrize(("expression", "attrs", "capacity", "expected"), MATCHES,
                         ids=[m[0][:60] for m in MATCHES])
def test_matches(env: Env, expression: str, attrs: dict[str, Any], capacity: dict[str, Any],
                 expected: bool) -> None:
    matched, error = run(env, expression, attrs, capacity)
    assert error is None
    assert matched is expected


def test_empty_driver_name(env: Env) -> None:
    assert run(env, 'device.driver == ""', driver="") == (True, None)


@pytest.mark.parametrize("value", [True, False])
def test_allow_multiple_allocations(env: Env, value: bool) -> None:
    assert run(env, f"device.allowMultipleAllocations == {str(value).lower()}",
               allow_multiple=value) == (True, None)


ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ('device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))', {},
     "no such key: noSuchAttr"),
    ('device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))', {},
     "no such key: noSuchAttr"),
    (f'device.attributes["{D}"].serial == "x"', {}, "no such key: serial"),
    (f'device.attributes["{D}"].name.exists(x, x > 0)', {"name": {"int": 1}}, ""),
    (f'device.attributes["{D}"].name.exists(x, x == true)', {"name": {"bool": True}}, ""),
    (f'device.attributes["{D}"].name.exists(x, x == "fish")', {"name": {"string": "fish"}}, ""),
    (f'device.attributes["{D}"].name.exists(x, x.isGreaterThan(semver("0.0.1")))',
     {"name": {"version": "1.0.0"}}, ""),
    (f'device.attributes["{D}"].names', {"names": {"strings": ["a", "b"]}},
     "CEL result of type list could not be converted to bool"),
    (f'device.attributes["{D}"].name.includes("value-48")',
     {"name": {"strings": [f"value-{i}" for i in range(49)]}},
     "'includes' function cannot be applied to lists longer than 48 values"),
    ('semver("not-a-version") == semver("1.0.0")', {}, "semver"),
    ('quantity("12 apples").isInteger()', {}, "quantities must match"),
    ('quantity("1.5").asInteger() == 1', {}, "cannot convert"),
    (f'device.attributes["{D}"].n > "a"', {"n": {"int": 1}}, ""),
]


@pytest.mark.parametrize(("expression", "attrs", "fragment"), ERRORS,
                         ids=[e[0][:60] for e in ERRORS])
def test_evaluation_errors(env: Env, expression: str, attrs: dict[str, Any],
                           fragment: str) -> None:
    matched, error = run(env, expression, attrs)
    assert error is not None, "an evaluation error was expected"
    assert fragment in error
    assert matched is False


@pytest.mark.parametrize(("expression", "fragment"), [
    ("?!", "Syntax error"),
    ("1", "must evaluate to bool or the unknown type, not int"),
    ('"x"', "must evaluate to bool"),
    ("nosuchvariable == 1", "undeclared reference"),
    ("device.foo == 1", "undefined field 'foo'"),
    ("has(device.attribute)", "undefined field 'attribute'"),
    ('device.attributes["d"].x.nosuchfunction()', "undeclared reference"),
    ("", "empty"),
    ("true || " * 2000 + "true", "longer than"),
    # Kubernetes' own example of an expression over its cost limit: seven nested comprehensions.
    ("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x, " * 7 + "int('1'.find('[0-9]*')) < 100" + ")" * 7,
     "exceeds the limit"),
    (f'device.attributes["{D}"].a.all(x, device.attributes["{D}"].b.all(y, '
     f'device.attributes["{D}"].c.all(z, x + y + z > 0)))', "exceeds the limit"),
])
def test_compile_errors(env: Env, expression: str, fragment: str) -> None:
    with pytest.raises(CompileError) as info:
        env.compile(expression)
    assert fragment.lower() in str(info.value).lower()


@pytest.mark.parametrize("expression", [
    f'device.attributes["{D}"].names.exists(x, device.attributes["{D}"].other.exists(y, x == y))',
    "[1, 2, 3].all(x, [4, 5].all(y, [6, 7].all(z, x < y)))",
    f'device.attributes.exists_one(x, x == "{D}")',
])
def test_affordable_comprehensions_compile(env: Env, expression: str) -> None:
    env.compile(expression)


def test_field_names_inside_strings_are_not_fields(env: Env) -> None:
    assert run(env, '"device.foo" != device.driver') == (True, None)


def test_invalid_version_attribute_is_reported(env: Env) -> None:
    from liken_devices.match.values import ValueError_

    with pytest.raises(ValueError_, match="attribute name"):
        env.device_data(DeviceInput(D, {"name": {"version": "v1.0"}}, {}))


def test_absent_domain_in_membership_stays_absent(env: Env) -> None:
    """A lookup of an absent domain is an empty map, yet `in` still says it is absent."""
    assert run(env, '!("x.example.com" in device.attributes) && '
                    'device.attributes["x.example.com"].size() == 0') == (True, None)


LIBRARIES: list[tuple[str, dict[str, Any], bool]] = [
    # The list library.
    ("[1, 2, 3].isSorted() && ![2, 1].isSorted()", {}, True),
    ('["a", "b"].isSorted()', {}, True),
    ("[1, 2, 3].sum() == 6 && [].sum() == 0", {}, True),
    ("[1.5, 2.5].sum() == 4.0", {}, True),
    ("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3", {}, True),
    ('[semver("1.0.0"), semver("1.0.0-rc.1")].min() == semver("1.0.0-rc.1")', {}, True),
    ('[quantity("1Ki"), quantity("2k")].max() == quantity("2000")', {}, True),
    # The regex library (RE2).
    ("'1'.find('[0-9]*') == '1' && 'abc'.find('[0-9]+') == ''", {}, True),
    ("'a1b22c333'.findAll('[0-9]+') == ['1', '22', '333']", {}, True),
    ("'a1b22c333'.findAll('[0-9]+', 2) == ['1', '22']", {}, True),
    # The sets extension.
    ("sets.contains([1, 2, 3], [3, 1]) && !sets.contains([1], [2])", {}, True),
    ("sets.equivalent([1, 2, 2], [2, 1]) && sets.intersects([1, 2], [2, 5])", {}, True),
    ("sets.intersects([1], [true])", {}, False),
]


@pytest.mark.parametrize(("expression", "attrs", "expected"), LIBRARIES,
                         ids=[m[0][:60] for m in LIBRARIES])
def test_kubernetes_libraries(env: Env, expression: str, attrs: dict[str, Any],
                              expected: bool) -> None:
    assert run(env, expression, attrs) == (expected, None)


@pytest.mark.parametrize(("expression", "fragment"), [
    ("[].min() == 1", "empty list"),
    ("[1, 'a'].isSorted()", "mixes types"),
    ("'a'.find('(') == ''", "invalid regular expression"),
    ("[9223372036854775807, 1].sum() > 0", "overflow"),
])
def test_library_errors(env: Env, expression: str, fragment: str) -> None:
    matched, error = run(env, expression)
    assert error is not None and fragment in error and matched is False
