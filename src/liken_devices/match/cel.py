"""The Kubernetes DRA selector environment for CEL, on Google's CEL runtime (cel-cpp).

A DeviceClass or a claim selects devices with CEL expressions over one variable, ``device``
(``driver``, ``attributes``, ``capacity``, ``allowMultipleAllocations``). Kubernetes compiles
them with cel-go in its own environment; this module builds the same environment on
``cel-expr-python`` (the ``match`` extra), Google's Python binding of cel-cpp, which implements
the same CEL specification and conformance suite as cel-go (docs/claims.md says why it was
chosen over the pure-Python ``cel-python``):

- bare attribute names are looked up in the driver's domain (``device.attributes["liken.sh"]``);
- an absent domain is an empty map, an absent name is an evaluation error ("no such key");
- ``version`` attributes are semantic versions: ``semver()``, ``isSemver()``, ``compareTo``,
  ``isGreaterThan``, ``isLessThan``, ``major()``/``minor()``/``patch()``;
- capacities are quantities: ``quantity()``, ``isQuantity()``, ``compareTo``, ``isGreaterThan``,
  ``isLessThan``, ``add``/``sub``, ``sign()``, ``isInteger()``, ``asInteger()``,
  ``asApproximateFloat()``;
- the string extensions, ``cel.bind`` and optional syntax (``.?name.orValue(x)``);
- ``includes()`` on scalar and list attributes (bounded at 48 values, as the API bounds them);
- Kubernetes' list library (``isSorted``, ``sum``, ``min``, ``max``), regex library (``find``,
  ``findAll``, with RE2 as Kubernetes) and the sets extension.

The runtime's import happens only when an :class:`Env` is built, so the node agent never loads it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .celcost import DEVICE_LIST, Unbounded, bound
from .values import Semver, ValueError_, format_quantity, parse_quantity, parse_semver

# CELSelectorExpressionMaxLength in the API.
MAX_EXPRESSION_BYTES = 10 * 1024
# ResourceSliceMaxAttributeValuesPerDevice: the bound that includes() enforces.
MAX_INCLUDES = 48
# DeviceAttributeMaxValueLength: a string or version attribute's longest value.
MAX_ATTRIBUTE_STRING = 64
# CELSelectorExpressionMaxCost: Kubernetes rejects an expression whose worst-case cost is higher.
MAX_COST = 1_000_000
# A missing domain is retried with an empty map in its place at most this often.
_MAX_DOMAIN_RETRIES = 8
_NOT_FOUND = re.compile(r'Key not found in map\s*:\s*"((?:[^"\\]|\\.)*)"')


class CelUnavailable(Exception):
    """The CEL runtime (the ``match`` extra) is not installed."""


class CompileError(Exception):
    """An expression that Kubernetes would reject when the claim or class is created."""


@dataclass(frozen=True)
class Outcome:
    """One evaluation: ``matched`` is meaningful only when ``error`` is None."""

    matched: bool
    error: str | None = None


@dataclass(frozen=True)
class Opaque:
    """A value the CEL binding cannot hand to Python (an optional), known by its type."""

    type: str


@dataclass(frozen=True)
class DeviceInput:
    """What a selector sees of a device (the API's Device, with its driver)."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]  # qualified name -> DeviceAttribute JSON
    capacity: Mapping[str, Any]  # qualified name -> DeviceCapacity JSON
    allow_multiple: bool = False


def split_name(name: str, driver: str) -> tuple[str, str]:
    """A qualified name's domain and identifier; a bare name belongs to the driver's domain."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


class Env:
    """A compiled-expression factory and evaluator for the DRA environment."""

    def __init__(self) -> None:
        try:
            # deferred: an optional dependency (the match extra), whose absence is a clear
            # error here rather than at import; 3 ms (tests/test_layers.py)
            from cel_expr_python import cel
            from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
            from google.protobuf import (  # type: ignore[import-untyped]
                descriptor_pb2,
                descriptor_pool,
                message_factory,
            )
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise CelUnavailable(
                "the CEL runtime is not installed: pip install 'liken-devices[match]' "
                f"({exc})") from exc
        self._cel = cel
        fdp = descriptor_pb2.FileDescriptorProto(
            name="liken_devices_match_cel.proto", package="kubernetes", syntax="proto3")
        sv = fdp.message_type.add(name="Semver")
        for number, field in enumerate(("major", "minor", "patch"), start=1):
            sv.field.add(name=field, number=number, type=3, label=1)  # int64
        sv.field.add(name="pre", number=4, type=9, label=1)  # string
        q = fdp.message_type.add(name="Quantity")
        q.field.add(name="value", number=1, type=9, label=1)  # "numerator/denominator"
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fdp)
        self._semver_cls = message_factory.GetMessageClass(
            pool.FindMessageTypeByName("kubernetes.Semver"))
        self._quantity_cls = message_factory.GetMessageClass(
            pool.FindMessageTypeByName("kubernetes.Quantity"))
        self._env = cel.NewEnv(
            descriptor_pool=pool,
            variables={"device": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)},
            extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(),
                        ext_bindings.ExtBindings()],
            functions=self._functions(),
        )

    # -- values across the boundary ------------------------------------------------------------

    def semver(self, v: Semver) -> Any:
        return self._semver_cls(major=v.major, minor=v.minor, patch=v.patch, pre=".".join(v.pre))

    def quantity(self, value: Fraction) -> Any:
        return self._quantity_cls(value=f"{value.numerator}/{value.denominator}")

    def _sv(self, msg: Any) -> Semver:
        pre = tuple(msg.pre.split(".")) if msg.pre else ()
        return Semver(msg.major, msg.minor, msg.patch, pre)

    @staticmethod
    def _q(msg: Any) -> Fraction:
        return Fraction(msg.value)

    def show(self, value: Any) -> str:
        """A value as the user wrote it in YAML or a selector (for explanations)."""
        if isinstance(value, Opaque):
            return f"a value of type {value.type}"
        if isinstance(value, self._semver_cls):
            return f'semver("{self._sv(value)}")'
        if isinstance(value, self._quantity_cls):
            return f'quantity("{format_quantity(self._q(value))}")'
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(value, list):
            return "[" + ", ".join(self.show(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{self.show(k)}: {self.show(v)}"
                                   for k, v in value.items()) + "}"
        return str(value)

    def attribute_value(self, attr: Mapping[str, Any]) -> Any:
        """A DeviceAttribute's one value as CEL sees it (ValueError_ when it is not valid)."""
        if not isinstance(attr, Mapping) or len(attr) != 1:
            raise ValueError_("an attribute must have exactly one value")
        kind, value = next(iter(attr.items()))
        if kind == "int" and isinstance(value, int) and not isinstance(value, bool) \
                and -(2**63) <= value < 2**63:  # the API's int64
            return value
        if kind == "bool" and isinstance(value, bool):
            return value
        if kind in ("string", "version") and isinstance(value, str) \
                and len(value) > MAX_ATTRIBUTE_STRING:
            # The API's bound, which the cost estimate counts on (celcost.DEVICE_STRING).
            raise ValueError_(f"a {kind} longer than {MAX_ATTRIBUTE_STRING} characters")
        if kind == "string" and isinstance(value, str):
            return value
        if kind == "version" and isinstance(value, str):
            return self.semver(parse_semver(value))
        if kind in ("ints", "bools", "strings", "versions") and isinstance(value, list):
            if len(value) > DEVICE_LIST:  # what the cost estimate assumes of a list
                raise ValueError_(f"a list of more than {DEVICE_LIST} values")
            return [self.attribute_value({kind[:-1]: v}) for v in value]
        raise ValueError_(f"unsupported attribute value {kind!r}")

    def device_data(self, dev: DeviceInput) -> dict[str, Any]:
        """The ``device`` variable (raises ValueError_ for an attribute the API would reject)."""
        attributes: dict[str, dict[str, Any]] = {}
        for name, attr in dev.attributes.items():
            domain, ident = split_name(name, dev.driver)
            try:
                attributes.setdefault(domain, {})[ident] = self.attribute_value(attr)
            except ValueError_ as exc:
                raise ValueError_(f"attribute {name}: {exc}") from None
        capacity: dict[str, dict[str, Any]] = {}
        for name, cap in dev.capacity.items():
            domain, ident = split_name(name, dev.driver)
            raw = cap.get("value") if isinstance(cap, Mapping) else None
            if not isinstance(raw, str | int):
                raise ValueError_(f"capacity {name}: no value")
            capacity.setdefault(domain, {})[ident] = self.quantity(parse_quantity(str(raw)))
        return {"driver": dev.driver, "attributes": attributes, "capacity": capacity,
                "allowMultipleAllocations": dev.allow_multiple}

    # -- compile and evaluate ------------------------------------------------------------------

    def compile(self, expression: str) -> Any:
        """A selector's program; :class:`CompileError` where Kubernetes would reject it."""
        program = self.compile_value(expression)
        rtype = program.return_type()
        if rtype != self._cel.Type.BOOL and rtype != self._cel.Type.DYN:
            raise CompileError(f"must evaluate to bool or the unknown type, not {rtype.name()}")
        return program

    def compile_value(self, expression: str) -> Any:
        """A program for any expression in the environment (a PATH an explanation reads)."""
        if not isinstance(expression, str) or not expression.strip():
            raise CompileError("the expression is empty")
        if len(expression.encode()) > MAX_EXPRESSION_BYTES:
            raise CompileError(f"the expression is longer than {MAX_EXPRESSION_BYTES} bytes")
        unknown = _unknown_device_field(expression)
        if unknown is not None:
            # Kubernetes declares `device` as an object with these fields only.
            raise CompileError(f"compilation failed: undefined field '{unknown}'")
        # One bound for the estimate and the evaluator (rules: limits.cel-bound): what the
        # estimate cannot bound is not evaluated. The compiler speaks first, so that a syntax
        # error (or a nesting the runtime's parser refuses too) is reported in its words.
        try:
            cost: float | None = bound(expression)
        except Unbounded as exc:
            cost, why = None, str(exc)
        if cost is not None and cost > MAX_COST:
            raise CompileError(f"estimated worst-case cost {cost:.3g} exceeds the limit of "
                               f"{MAX_COST} (Kubernetes rejects such an expression)")
        try:
            program = self._env.compile(_default_domains(expression))
        except RuntimeError as exc:
            raise CompileError(_compile_message(str(exc))) from None
        if cost is None:
            raise CompileError(f"the cost estimate cannot bound this expression ({why}), so "
                               f"it is not evaluated")
        return program

    def evaluate(self, program: Any, data: dict[str, Any]) -> tuple[Any, str | None]:
        """The raw result of ``program`` on one device's data, or the evaluation error.

        An absent attribute domain is an empty map in Kubernetes' environment. The runtime has
        no map with a default, so :func:`_default_domains` rewrites every direct index of
        ``device.attributes``/``device.capacity`` into an optional index with an empty default;
        a lookup the rewrite cannot see (through ``cel.bind``) that fails on a domain the device
        lacks is evaluated again with that domain present and empty.
        """
        data = {"device": {**data, "attributes": dict(data["attributes"]),
                           "capacity": dict(data["capacity"])}}
        device = data["device"]
        for _ in range(_MAX_DOMAIN_RETRIES + 1):
            try:
                value = program.eval(data=data)
            except RuntimeError as exc:
                return None, _runtime_message(str(exc))
            try:
                raw = value.value()
            except TypeError:
                # The binding knows no optional value (`.?name`): it calls it an error and
                # cannot convert it. Not an error in Kubernetes' evaluation: shown by its type.
                return Opaque("optional"), None
            if value.type() != self._cel.Type.ERROR:
                return raw, None
            message = str(raw)
            m = _NOT_FOUND.search(message)
            missing = m.group(1) if m else None
            if missing is None or missing in device["attributes"] or \
                    missing in device["capacity"] or missing in ("driver", "attributes",
                                                                  "capacity"):
                return None, _runtime_message(message)
            device["attributes"][missing] = {}
            device["capacity"][missing] = {}
        return None, _runtime_message(message)

    def matches(self, program: Any, data: dict[str, Any]) -> Outcome:
        value, error = self.evaluate(program, data)
        if error is not None:
            return Outcome(False, error)
        if not isinstance(value, bool):
            kind = type(value).__name__
            kind = {"list": "list", "dict": "map", "int": "int", "str": "string",
                    "float": "double"}.get(kind, kind)
            return Outcome(False, f"CEL result of type {kind} could not be converted to bool")
        return Outcome(value)

    # -- the library ---------------------------------------------------------------------------

    def _functions(self) -> list[Any]:
        cel = self._cel
        T = cel.Type
        SV = T("kubernetes.Semver")
        Q = T("kubernetes.Quantity")

        def fn(name: str,
               *overloads: tuple[str, Any, list[Any], bool, Callable[..., Any] | None]) -> Any:
            return cel.FunctionDecl(name, [
                cel.Overload(oid, ret, params, is_member=member, impl=impl)
                if impl is not None else cel.Overload(oid, ret, params, is_member=member)
                for oid, ret, params, member, impl in overloads])

        def guard(f: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any) -> Any:
                try:
                    return f(*args)
                except ValueError_ as exc:
                    raise ValueError(str(exc)) from None
            return run

        sv, q, mk_sv, mk_q = self._sv, self._q, self.semver, self.quantity

        def is_semver(s: str, lenient: bool = False) -> bool:
            try:
                parse_semver(s, lenient)
            except ValueError_:
                return False
            return True

        def is_quantity(s: str) -> bool:
            try:
                parse_quantity(s)
            except ValueError_:
                return False
            return True

        def as_integer(a: Any) -> int:
            v = q(a)
            if v.denominator != 1 or not -(2**63) <= v.numerator < 2**63:
                raise ValueError("cannot convert value to integer")
            return v.numerator

        def cmp(x: Any, y: Any) -> int:
            return int(x > y) - int(x < y)

        def order(a: Any, b: Any) -> int:
            if isinstance(a, self._semver_cls) and isinstance(b, self._semver_cls):
                return sv(a).compare(sv(b))
            if isinstance(a, self._quantity_cls) and isinstance(b, self._quantity_cls):
                return cmp(q(a), q(b))
            raise ValueError(f"no such overload: {type(a).__name__}.compareTo"
                             f"({type(b).__name__})")

        def comparable(xs: list[Any]) -> list[Any]:
            if all(isinstance(x, self._semver_cls) for x in xs):
                return [sv(x).key() for x in xs]
            if all(isinstance(x, self._quantity_cls) for x in xs):
                return [q(x) for x in xs]
            kinds = {type(_plain(x)) if not isinstance(x, int | float) or isinstance(x, bool)
                     else float for x in xs}
            if len(kinds) > 1:
                raise ValueError_("no such overload: the list mixes types")
            return [_plain(x) for x in xs]

        def is_sorted(xs: list[Any]) -> bool:
            keys = comparable(xs)
            return all(a <= b for a, b in itertools.pairwise(keys))

        def list_sum(xs: list[Any]) -> Any:
            if not xs:
                return 0
            if all(isinstance(x, self._quantity_cls) for x in xs):
                return mk_q(sum((q(x) for x in xs), Fraction(0)))
            if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in xs):
                raise ValueError_("no such overload: sum() of a non-numeric list")
            total = sum(xs)
            if isinstance(total, int) and not -(2**63) <= total < 2**63:
                raise ValueError_("integer overflow")
            return total

        def extreme(xs: list[Any], pick: Callable[..., Any]) -> Any:
            if not xs:
                raise ValueError_(f"{pick.__name__} called on empty list")
            keys = comparable(xs)
            best = pick(range(len(xs)), key=lambda i: keys[i])
            return xs[best]

        def contains(xs: list[Any], item: Any) -> bool:
            return any(_plain(x) == _plain(item) for x in xs)

        def regex(pattern: str) -> Any:
            import re2  # deferred: optional (the match extra), 3 ms (tests/test_layers.py)

            try:
                return re2.compile(pattern)
            except re2.error as exc:
                raise ValueError_(f"invalid regular expression {pattern!r}: {exc}") from None

        def find(text: str, pattern: str) -> str:
            m = regex(pattern).search(text)
            return str(m.group(0)) if m else ""

        def find_all(text: str, pattern: str, limit: int) -> list[str]:
            if limit == 0:
                return []
            found = [str(m.group(0)) for m in regex(pattern).finditer(text)]
            return found if limit < 0 else found[:limit]

        def includes(container: Any, item: Any) -> bool:
            if isinstance(container, list):
                if len(container) > MAX_INCLUDES:
                    raise ValueError(f"'includes' function cannot be applied to lists longer "
                                     f"than {MAX_INCLUDES} values")
                return any(_plain(v) == _plain(item) for v in container)
            return bool(_plain(container) == _plain(item))

        return [
            fn("semver",
               ("semver_string", SV, [T.STRING], False, guard(lambda s: mk_sv(parse_semver(s)))),
               ("semver_string_bool", SV, [T.STRING, T.BOOL], False,
                guard(lambda s, b: mk_sv(parse_semver(s, b))))),
            fn("isSemver",
               ("is_semver_string", T.BOOL, [T.STRING], False, is_semver),
               ("is_semver_string_bool", T.BOOL, [T.STRING, T.BOOL], False, is_semver)),
            fn("quantity",
               ("string_to_quantity", Q, [T.STRING], False,
                guard(lambda s: mk_q(parse_quantity(s))))),
            fn("isQuantity", ("is_quantity_string", T.BOOL, [T.STRING], False, is_quantity)),
            # Semver and Quantity are both messages to the runtime, which dispatches on kinds
            # only: the type checker knows both overloads, the runtime has one implementation
            # that tells the two apart by class.
            fn("isGreaterThan",
               ("semver_is_greater_than", T.BOOL, [SV, SV], True, lambda a, b: order(a, b) > 0),
               ("quantity_is_greater_than", T.BOOL, [Q, Q], True, None)),
            fn("isLessThan",
               ("semver_is_less_than", T.BOOL, [SV, SV], True, lambda a, b: order(a, b) < 0),
               ("quantity_is_less_than", T.BOOL, [Q, Q], True, None)),
            fn("compareTo",
               ("semver_compare_to", T.INT, [SV, SV], True, order),
               ("quantity_compare_to", T.INT, [Q, Q], True, None)),
            fn("major", ("semver_major", T.INT, [SV], True, lambda a: a.major)),
            fn("minor", ("semver_minor", T.INT, [SV], True, lambda a: a.minor)),
            fn("patch", ("semver_patch", T.INT, [SV], True, lambda a: a.patch)),
            fn("sign", ("quantity_sign", T.INT, [Q], True, lambda a: cmp(q(a), 0))),
            fn("isInteger", ("quantity_is_integer", T.BOOL, [Q], True,
                             lambda a: q(a).denominator == 1)),
            fn("asInteger", ("quantity_as_integer", T.INT, [Q], True, as_integer)),
            fn("asApproximateFloat", ("quantity_as_float", T.DOUBLE, [Q], True,
                                      lambda a: float(q(a)))),
            fn("add",
               ("quantity_add", Q, [Q, Q], True, lambda a, b: mk_q(q(a) + q(b))),
               ("quantity_add_int", Q, [Q, T.INT], True, lambda a, b: mk_q(q(a) + b))),
            fn("sub",
               ("quantity_sub", Q, [Q, Q], True, lambda a, b: mk_q(q(a) - q(b))),
               ("quantity_sub_int", Q, [Q, T.INT], True, lambda a, b: mk_q(q(a) - b))),
            # The Kubernetes list library: isSorted, sum, min, max. Its indexOf and lastIndexOf
            # on lists are missing: the string extension owns those names in this runtime.
            fn("isSorted", ("list_is_sorted", T.BOOL, [T.LIST], True, guard(is_sorted))),
            fn("sum", ("list_sum", T.DYN, [T.LIST], True, guard(list_sum))),
            fn("min", ("list_min", T.DYN, [T.LIST], True, guard(lambda xs: extreme(xs, min)))),
            fn("max", ("list_max", T.DYN, [T.LIST], True, guard(lambda xs: extreme(xs, max)))),
            # The Kubernetes regex library, with RE2 (linear time, Kubernetes' own syntax).
            fn("find", ("string_find", T.STRING, [T.STRING, T.STRING], True, guard(find))),
            fn("findAll",
               ("string_find_all", T.List(T.STRING), [T.STRING, T.STRING], True,
                guard(lambda text, pattern: find_all(text, pattern, -1))),
               ("string_find_all_n", T.List(T.STRING), [T.STRING, T.STRING, T.INT], True,
                guard(find_all))),
            # The sets extension.
            fn("sets.contains", ("sets_contains", T.BOOL, [T.LIST, T.LIST], False,
                                 lambda a, b: all(contains(a, x) for x in b))),
            fn("sets.equivalent", ("sets_equivalent", T.BOOL, [T.LIST, T.LIST], False,
                                   lambda a, b: all(contains(a, x) for x in b)
                                   and all(contains(b, x) for x in a))),
            fn("sets.intersects", ("sets_intersects", T.BOOL, [T.LIST, T.LIST], False,
                                   lambda a, b: any(contains(a, x) for x in b))),
            # The runtime matches no overload on dyn arguments: one per pair of kinds.
            fn("includes", *[
                (f"includes_{i}_{j}", T.BOOL, [recv, arg], True, includes)
                for i, recv in enumerate((T.LIST, T.BOOL, T.INT, T.STRING, SV))
                for j, arg in enumerate((T.BOOL, T.INT, T.STRING, SV))]),
        ]


_DOMAIN_MAP = re.compile(r"device\s*\.\s*(?:attributes|capacity)\s*\[")


def _default_domains(expression: str) -> str:
    """``device.attributes[E]`` becomes ``dyn(device.attributes[?E].orValue({}))`` (same for
    ``capacity``), outside string literals, so that an absent domain reads as an empty map."""
    out: list[str] = []
    done = 0  # expression[:done] is in ``out``; the scan resumes there
    for i, _ in code_positions(expression):
        if i < done:
            continue
        m = _DOMAIN_MAP.match(expression, i)
        if m is None or (i > 0 and (expression[i - 1].isalnum() or expression[i - 1] in "_.")):
            continue
        close = matching_bracket(expression, m.end() - 1)
        inner = expression[m.end():close]
        out.append(expression[done:i])
        if close < 0 or inner.lstrip().startswith("?"):
            out.append(expression[i:m.end()])
            done = m.end()
            continue
        # dyn(): the checker types an optional's default too narrowly for a comprehension.
        out.append("dyn(" + expression[i:m.end() - 1] + "[?" + _default_domains(inner)
                   + "].orValue({}))")
        done = close + 1
    out.append(expression[done:])
    return "".join(out)


_DEVICE_FIELD = re.compile(r"device\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
DEVICE_FIELDS = frozenset({"driver", "attributes", "capacity", "allowMultipleAllocations"})


def _unknown_device_field(expression: str) -> str | None:
    """A field of ``device`` that the Kubernetes environment does not declare, if any."""
    for i, _ in code_positions(expression):
        if i == 0 or not (expression[i - 1].isalnum() or expression[i - 1] in "_."):
            m = _DEVICE_FIELD.match(expression, i)
            if m is not None and m.group(1) not in DEVICE_FIELDS:
                return m.group(1)
    return None


def _string_end(text: str, start: int) -> int:
    """The index after the string literal that starts at ``start`` (CEL quoting: single or
    double quotes, tripled or not; an ``r``/``R`` prefix turns escapes off)."""
    quote = text[start]
    triple = text.startswith(quote * 3, start)
    delim = quote * 3 if triple else quote
    raw = start > 0 and text[start - 1] in "rR"
    i = start + len(delim)
    while i < len(text):
        if text[i] == "\\" and not raw:
            i += 2
            continue
        if text.startswith(delim, i):
            return i + len(delim)
        i += 1
    return len(text)


def code_positions(text: str, start: int = 0) -> Iterator[tuple[int, int]]:
    """Each index of ``text`` from ``start`` that lies outside CEL string literals and
    ``//`` comments, with the
    bracket depth once the character there is read (an opening bracket counts itself, a
    closing one is already closed). The one scanner every expression rewrite here and in
    ``allocate`` walks with, so that a quote or bracket inside a string never misleads them."""
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            i = _string_end(text, i)
            continue
        if text.startswith("//", i):  # a comment runs to the end of its line
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        yield i, depth
        i += 1


def matching_bracket(text: str, open_at: int) -> int:
    """The index of the bracket closing the one at ``open_at`` (outside string literals), or
    -1 when there is none or it is of another kind."""
    for i, depth in code_positions(text, open_at):
        if depth == 0 and text[i] in ")]}":
            return i if "([{".index(text[open_at]) == ")]}".index(text[i]) else -1
    return -1


def _plain(value: Any) -> Any:
    inner = getattr(value, "value", None)
    if callable(inner):  # a runtime Value wrapper
        return _plain(inner())
    if hasattr(value, "SerializeToString"):
        return (type(value).__name__, value.SerializeToString(deterministic=True))
    if isinstance(value, bool):
        return ("bool", value)
    return value


def _compile_message(text: str) -> str:
    text = re.sub(r"^[A-Z_]+: ", "", text.strip())
    text = re.sub(r"\s*\[[A-Z_]+\]$", "", text)
    if "Syntax error" not in text and re.search(r"ERROR: <input>:\d+:\d+: (mismatched|extraneous|"
                                                r"token recognition|no viable)", text):
        text = "Syntax error: " + text
    return "compilation failed: " + text


def _runtime_message(text: str) -> str:
    m = _NOT_FOUND.search(text)
    if m:
        return f"no such key: {m.group(1)}"
    text = re.sub(r"^[A-Z_]+: ", "", text.strip())
    return re.sub(r"\s*\[[A-Z_]+\]$", "", text)


_ENV: Env | None = None


def environment() -> Env:
    """The process-wide environment (built on first use: it loads the CEL runtime)."""
    global _ENV
    if _ENV is None:
        _ENV = Env()
    return _ENV
