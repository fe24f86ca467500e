"""Quantities and semantic versions: the API's parsing rules and SemVer 2.0.0 precedence."""

from __future__ import annotations

from fractions import Fraction

import pytest

from liken_devices.match.values import (
    Semver,
    ValueError_,
    format_quantity,
    parse_quantity,
    parse_semver,
)


@pytest.mark.parametrize(("text", "value"), [
    ("1", 1), ("1Ki", 1024), ("1.5Gi", 3 * 2**29), ("500m", Fraction(1, 2)), ("2k", 2000),
    ("1e3", 1000), ("1E-2", Fraction(1, 100)), ("-3", -3), ("+4M", 4_000_000), (".5", 0.5),
    ("100n", Fraction(1, 10**7)),
])
def test_quantities(text: str, value: object) -> None:
    assert parse_quantity(text) == Fraction(str(value))


@pytest.mark.parametrize("text", ["", "1Kb", "1 Gi", "Gi", "1Gi\n", "1e", "1e999", "--1",
                                  "1.2.3", "²", "x" * 200])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError_):
        parse_quantity(text)


def test_format_quantity() -> None:
    assert format_quantity(Fraction(1024)) == "1Ki"
    assert format_quantity(Fraction(1, 2)) == "500m"
    assert format_quantity(Fraction(1000)) == "1000"


@pytest.mark.parametrize(("a", "b"), [
    ("1.0.0-alpha", "1.0.0-alpha.1"), ("1.0.0-alpha.1", "1.0.0-alpha.beta"),
    ("1.0.0-alpha.beta", "1.0.0-beta"), ("1.0.0-beta", "1.0.0-beta.2"),
    ("1.0.0-beta.2", "1.0.0-beta.11"), ("1.0.0-beta.11", "1.0.0-rc.1"), ("1.0.0-rc.1", "1.0.0"),
    ("1.9.0", "1.10.0"), ("6.8.0-45-generic", "6.8.0"),
])
def test_semver_precedence(a: str, b: str) -> None:
    assert parse_semver(a).compare(parse_semver(b)) == -1
    assert parse_semver(b).compare(parse_semver(a)) == 1


def test_semver_build_metadata_and_lenient_parse() -> None:
    assert parse_semver("1.0.0+abc").compare(parse_semver("1.0.0")) == 0
    assert parse_semver("v1.2", lenient=True) == Semver(1, 2, 0)
    assert parse_semver("01.002.3-rc.1", lenient=True) == Semver(1, 2, 3, ("rc", "1"))
    assert str(parse_semver("1.0.0-rc.1+b.5")) == "1.0.0-rc.1+b.5"


@pytest.mark.parametrize("text", ["v1.2.3", "1.02.3", "1.0", "535.104.05", "1.2.3\n",
                                  "1.2.\u00b3", "1.2.3-01", "1.2.3+", ""])
def test_strict_semver_refuses(text: str) -> None:
    with pytest.raises(ValueError_):
        parse_semver(text)
