"""Kubernetes quantities and semantic versions as exact Python values.

The DRA selector environment gives CEL two value types that are not CEL's own: ``Quantity``
(``device.capacity`` and ``quantity("1Gi")``) and ``Semver`` (a ``version`` attribute and
``semver("1.2.3")``). Their parsing and ordering rules are facts of the Kubernetes API
(resource.Quantity's suffixes, Semantic Versioning 2.0.0's precedence), restated here so that the
CEL layer (:mod:`.cel`) and the allocator compare them exactly, without floating point.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

# resource.Quantity: a signed decimal number and one suffix: binary SI (Ki..Ei), decimal SI
# (n u m "" k M G T P E) or a decimal exponent (e3, E-2).
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|"
                       r"[eE][+-]?[0-9]+)?")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
MAX_QUANTITY_TEXT = 128


class ValueError_(ValueError):
    """A string that is not a quantity or not a semantic version."""


def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity such as ``1Gi``, ``500m`` or ``1e3``."""
    if len(text) > MAX_QUANTITY_TEXT:
        raise ValueError_(f"quantity {text[:32]!r}...: too long")
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise ValueError_(f"quantities must match the regular expression "
                          f"'^([+-]?[0-9.]+)([eEinumkKMGTPE]*[-+]?[0-9]*)$': {text!r}")
    number, suffix = m.group(1), m.group(2) or ""
    value = Fraction(number)
    if suffix in _BINARY:
        return value * Fraction(1024) ** _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * Fraction(10) ** _DECIMAL[suffix]
    if suffix:
        exponent = int(suffix[1:])
        if abs(exponent) > 64:
            raise ValueError_(f"quantity {text!r}: exponent out of range")
        return value * Fraction(10) ** exponent
    return value


def format_quantity(value: Fraction) -> str:
    """A readable canonical form: an integer, a power-of-1024 multiple, or milli-units."""
    if value.denominator == 1:
        n = value.numerator
        for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
            unit = 1024 ** power
            if n and n % unit == 0:
                return f"{n // unit}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{float(value):g}"


@dataclass(frozen=True, order=False)
class Semver:
    """A Semantic Versioning 2.0.0 version; build metadata plays no part in precedence."""

    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    build: str = ""

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(self.pre)
        if self.build:
            text += "+" + self.build
        return text

    def key(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        """An ordering key with SemVer 2.0.0 precedence (for sorting lists of versions)."""
        pre = tuple((0, int(p), "") if _DIGITS.fullmatch(p) else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)

    def compare(self, other: Semver) -> int:
        a = (self.major, self.minor, self.patch)
        b = (other.major, other.minor, other.patch)
        if a != b:
            return -1 if a < b else 1
        # A version with a pre-release has lower precedence than the same version without.
        if not self.pre or not other.pre:
            return (not self.pre) - (not other.pre)
        for x, y in zip(self.pre, other.pre, strict=False):
            if x == y:
                continue
            xn, yn = _DIGITS.fullmatch(x) is not None, _DIGITS.fullmatch(y) is not None
            if xn and yn:
                return -1 if int(x) < int(y) else 1
            if xn != yn:  # numeric identifiers sort before alphanumeric ones
                return -1 if xn else 1
            return -1 if x < y else 1
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))


_DIGITS = re.compile(r"[0-9]+")
_NUM = r"(0|[1-9][0-9]*)"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER = re.compile(rf"{_NUM}\.{_NUM}\.{_NUM}(?:-({_PRE_ID}(?:\.{_PRE_ID})*))?"
                     r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?")
_MAX_COMPONENT = 2**63 - 1


def parse_semver(text: str, lenient: bool = False) -> Semver:
    """Parse ``text`` strictly (the API's rule for ``version`` attributes), or leniently as
    ``semver(text, true)`` does: a leading ``v``, missing minor/patch and leading zeros allowed.
    """
    if len(text) > 256:
        raise ValueError_("semver: too long")
    if lenient:
        text = _normalize(text)
    m = _SEMVER.fullmatch(text)
    if m is None:
        raise ValueError_(f"could not parse semver: {text!r}")
    major, minor, patch = (int(m.group(i)) for i in (1, 2, 3))
    if max(major, minor, patch) > _MAX_COMPONENT:
        raise ValueError_(f"semver {text!r}: component out of range")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return Semver(major, minor, patch, pre, m.group(5) or "")


def _normalize(text: str) -> str:
    text = text.strip()
    if text[:1] in ("v", "V"):
        text = text[1:]
    rest = ""
    for i, ch in enumerate(text):
        if ch in "-+":
            text, rest = text[:i], text[i:]
            break
    parts = text.split(".")
    if len(parts) > 3 or not all(_DIGITS.fullmatch(p) for p in parts):
        return text + rest  # let the strict parse report it
    parts = [p.lstrip("0") or "0" for p in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts) + rest
