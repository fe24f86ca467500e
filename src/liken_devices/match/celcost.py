"""A worst-case cost estimate of a DRA selector that counts what strings and lists can grow to.

Kubernetes refuses a selector whose estimated cost exceeds 1,000,000
(``CELSelectorExpressionMaxCost``) and evaluates the ones it admits under the same limit. Its
estimate (cel-go's checker, with the sizes the DRA environment declares) follows each value's
size through the expression: a string operation costs a tenth of a unit per byte it reads and
its result is as long as it can get, so ``"aaaa".replace("a", "aaaaaaaaaa")`` nested nine times
reads 4 GB and is refused, though no comprehension appears in it. The runtime here has no
such estimate, so this module parses the expression and computes one in the same way:

- every value carries its largest size (bytes of a string, elements of a list or map) and, for
  a list or map, the estimate of its elements;
- a device's data is bounded as the API bounds it: 32 domains and 32 attributes per device, a
  string attribute of at most 64 bytes, list attributes (and anything else whose size a selector
  cannot know) of at most 64 elements;
- a string or list operation costs 1 plus a tenth per element or byte it reads, and its result
  grows as the operation allows (``+`` adds the sizes, ``replace`` multiplies by the replacement
  over the text replaced, ``join`` by the separator, ``split`` makes as many parts as bytes);
- a comprehension (``all``, ``exists``, ``exists_one``, ``map``, ``filter``) costs its range's
  size times its body, and ``cel.bind`` gives its name the estimate of what it binds.

An expression it cannot parse is left to the compiler, which reports the syntax error. What it
accepts stays within the limit: every intermediate value is no larger than its estimate, so an
accepted selector runs in bounded memory.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_SIZE = 1e18
DEVICE_STRING = 64  # DeviceAttributeMaxValueLength
DEVICE_LIST = 64  # list attributes hold 48 values; an unknown collection is taken as 64
DEVICE_MAP = 32  # attributes and capacities per device; domains
TRAVERSAL = 0.1  # cost per byte or element read (cel-go's string traversal factor)
LIST_CREATE = 10
MAP_CREATE = 30
MAX_PARSE_DEPTH = 250  # cel-go's parser refuses deeper expressions too


@dataclass(frozen=True)
class Est:
    """The worst case of one value: what computing it costs and how large it can be."""

    cost: float = 0.0
    size: float = 1.0  # bytes of a string, elements of a list or map; 1 for a scalar
    elem: Est | None = None  # a list's elements, a map's values
    kind: str = "other"  # "string", "list", "map", "other"
    min_size: float = 0.0  # the shortest it can be (a literal's length)

    def plus(self, cost: float) -> Est:
        return Est(min(self.cost + cost, math.inf), self.size, self.elem, self.kind,
                   self.min_size)


def _cap(x: float) -> float:
    return min(x, MAX_SIZE)


STRING64 = Est(size=DEVICE_STRING, kind="string")
DYN_VALUE = Est(size=DEVICE_LIST, elem=STRING64, kind="dyn")
ATTRS = Est(size=DEVICE_MAP, elem=DYN_VALUE, kind="map")
DOMAINS = Est(size=DEVICE_MAP, elem=ATTRS, kind="map")
DEVICE = Est(size=4, elem=DYN_VALUE, kind="device")
# A type value (``string``, ``type(x)``) has no size the checker knows, so comparing two of them
# is estimated at the largest size: Kubernetes refuses ``type(x) == string`` as too complex.
TYPE_VALUE = Est(size=MAX_SIZE, kind="type")
TYPE_NAMES = frozenset({"bool", "bytes", "double", "int", "list", "map", "null_type", "string",
                        "type", "uint"})

_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<string>[rRbB]{0,2}(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
                          |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|\.\?|\[\?|[-+*/%<>!?:.,()\[\]{}])
""", re.X | re.S)

_MACROS = {"all", "exists", "exists_one", "existsOne", "map", "filter", "transformList",
           "transformMap", "transformMapEntry", "sortBy"}


class _Unparsable(Exception):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            raise _Unparsable(f"unexpected character at {i}")
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append((kind, m.group(0)))
        i = m.end()
    return out


def _literal_length(token: str) -> int:
    body = token.lstrip("rRbB")
    quote = 3 if body[:3] in ('"""', "'''") else 1
    inner = body[quote:-quote]
    # An escape is at most one character: counting the text's bytes is an upper bound.
    return len(inner.encode("utf-8", "surrogatepass"))


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0
        self.env: list[dict[str, Est]] = [{"device": DEVICE}]

    # -- tokens -----------------------------------------------------------------------------

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.toks[j][1] if j < len(self.toks) else ""

    def kind(self) -> str:
        return self.toks[self.i][0] if self.i < len(self.toks) else ""

    def take(self, want: str | None = None) -> str:
        if self.i >= len(self.toks):
            raise _Unparsable("unexpected end")
        tok = self.toks[self.i][1]
        if want is not None and tok != want:
            raise _Unparsable(f"expected {want!r}, found {tok!r}")
        self.i += 1
        return tok

    def lookup(self, name: str) -> Est | None:
        for scope in reversed(self.env):
            if name in scope:
                return scope[name]
        return None

    # -- grammar ----------------------------------------------------------------------------

    def parse(self) -> Est:
        e = self.expr()
        if self.i != len(self.toks):
            raise _Unparsable("trailing tokens")
        return e

    def expr(self) -> Est:
        self.depth += 1
        if self.depth > MAX_PARSE_DEPTH:
            raise _Unparsable("too deep")
        try:
            cond = self.or_()
            if self.peek() != "?":
                return cond
            self.take("?")
            a = self.or_()
            self.take(":")
            b = self.expr()
            return _join_branches(a, b).plus(cond.cost)
        finally:
            self.depth -= 1

    def or_(self) -> Est:
        e = self.and_()
        while self.peek() == "||":
            self.take()
            r = self.and_()
            e = Est(e.cost + r.cost)
        return e

    def and_(self) -> Est:
        e = self.rel()
        while self.peek() == "&&":
            self.take()
            r = self.rel()
            e = Est(e.cost + r.cost)
        return e

    def rel(self) -> Est:
        e = self.add()
        while self.peek() in ("<", "<=", ">", ">=", "==", "!=", "in"):
            op = self.take()
            r = self.add()
            if op == "in":
                e = Est(e.cost + r.cost + 1 + r.size * (1 + TRAVERSAL * _elem_size(r)))
            else:
                e = Est(e.cost + r.cost + 1 + TRAVERSAL * min(e.size, r.size)
                        * (_elem_size(e) if e.kind == "list" else 1))
        return e

    def add(self) -> Est:
        e = self.mul()
        while self.peek() in ("+", "-"):
            op = self.take()
            r = self.mul()
            if op == "+" and (e.kind in ("string", "list", "dyn")
                              or r.kind in ("string", "list", "dyn")):
                size = _cap(e.size + r.size)
                kind = e.kind if e.kind != "dyn" else r.kind
                elem = _widest(e.elem, r.elem)
                e = Est(e.cost + r.cost + 1 + TRAVERSAL * size * _elem_size(e), size, elem,
                        kind, e.min_size + r.min_size)
            else:
                e = Est(e.cost + r.cost + 1)
        return e

    def mul(self) -> Est:
        e = self.unary()
        while self.peek() in ("*", "/", "%"):
            self.take()
            r = self.unary()
            e = Est(e.cost + r.cost + 1)
        return e

    def unary(self) -> Est:
        if self.peek() in ("!", "-"):
            self.take()
            return self.unary().plus(1)
        return self.member()

    def member(self) -> Est:
        e = self.primary()
        while True:
            tok = self.peek()
            if tok in (".", ".?"):
                self.take()
                name = self.take()
                e = self.call(name, e) if self.peek() == "(" else _field(e, name).plus(e.cost + 1)
            elif tok in ("[", "[?"):
                self.take()
                index = self.expr()
                self.take("]")
                e = _index(e).plus(e.cost + index.cost + 1)
            else:
                return e

    def args(self) -> list[Est]:
        self.take("(")
        out: list[Est] = []
        while self.peek() != ")":
            out.append(self.expr())
            if self.peek() == ",":
                self.take()
            elif self.peek() != ")":
                raise _Unparsable("expected , or )")
        self.take(")")
        return out

    def primary(self) -> Est:
        kind, tok = (self.kind(), self.peek())
        if kind == "string":
            self.take()
            n = _literal_length(tok)
            return Est(0, n, None, "string", n)
        if kind == "number":
            self.take()
            return Est()
        if tok == "(":
            self.take()
            e = self.expr()
            self.take(")")
            return e
        if tok == "[":
            self.take()
            items: list[Est] = []
            while self.peek() != "]":
                if self.peek() == "?":
                    self.take()
                items.append(self.expr())
                if self.peek() == ",":
                    self.take()
                elif self.peek() != "]":
                    raise _Unparsable("expected , or ]")
            self.take("]")
            elem = None
            for it in items:
                elem = _widest(elem, it)
            return Est(sum(it.cost for it in items) + LIST_CREATE, len(items), elem, "list",
                       len(items))
        if tok == "{":
            self.take()
            cost, n, elem = float(MAP_CREATE), 0, None
            while self.peek() != "}":
                if self.peek() == "?":
                    self.take()
                k = self.expr()
                self.take(":")
                v = self.expr()
                cost += k.cost + v.cost
                elem = _widest(elem, v)
                n += 1
                if self.peek() == ",":
                    self.take()
                elif self.peek() != "}":
                    raise _Unparsable("expected , or }")
            self.take("}")
            return Est(cost, n, elem, "map", n)
        if tok == ".":
            self.take()
            tok = self.peek()
        if kind == "ident" or self.kind() == "ident":
            name = self.take()
            if name in ("true", "false", "null"):
                return Est()
            if name in TYPE_NAMES and self.peek() != "(" and self.lookup(name) is None:
                return TYPE_VALUE.plus(1)
            if name == "cel" and self.peek() == "." and self.peek(1) == "bind":
                self.take(".")
                self.take("bind")
                return self.bind()
            if name in ("sets", "optional", "strings", "math", "lists") and self.peek() == ".":
                self.take(".")
                fn = self.take()
                return self.call(f"{name}.{fn}", None)
            if name == "has" and self.peek() == "(":
                self.args()
                return Est(1)
            if self.peek() == "(":
                return self.call(name, None)
            bound = self.lookup(name)
            if bound is not None:  # a bound name costs a read, not its computation again
                return Est(1, bound.size, bound.elem, bound.kind, bound.min_size)
            return Est(1)
        raise _Unparsable(f"unexpected {tok!r}")

    def bind(self) -> Est:
        self.take("(")
        name = self.take()
        self.take(",")
        init = self.expr()
        self.take(",")
        self.env.append({name: Est(0, init.size, init.elem, init.kind, init.min_size)})
        try:
            body = self.expr()
        finally:
            self.env.pop()
        self.take(")")
        return body.plus(init.cost)

    def call(self, name: str, recv: Est | None) -> Est:
        if recv is not None and name in _MACROS:
            return self.macro(name, recv)
        args = self.args()
        base = (recv.cost if recv is not None else 0) + sum(a.cost for a in args) + 1
        r = recv if recv is not None else (args[0] if args else Est())
        rest = args if recv is not None else args[1:]
        return _function(name, r, rest).plus(base)

    def macro(self, name: str, recv: Est) -> Est:
        self.take("(")
        var = self.take()
        self.take(",")
        item = recv.elem or DYN_VALUE
        if recv.kind in ("map", "device"):
            item = STRING64  # a map's comprehension ranges over its keys
        n = recv.size
        self.env.append({var: Est(0, item.size, item.elem, item.kind, item.min_size)})
        try:
            bodies = [self.expr()]
            while self.peek() == ",":
                self.take()
                bodies.append(self.expr())
        finally:
            self.env.pop()
        self.take(")")
        step = sum(b.cost for b in bodies) + 2
        cost = recv.cost + n * step
        if name == "map":
            return Est(cost + LIST_CREATE, n, bodies[-1], "list")
        if name in ("filter", "sortBy", "transformList"):
            return Est(cost + LIST_CREATE, n, recv.elem, "list")
        if name in ("transformMap", "transformMapEntry"):
            return Est(cost + MAP_CREATE, n, bodies[-1], "map")
        return Est(cost)


def _elem_size(e: Est) -> float:
    return e.elem.size if e.elem is not None and e.kind in ("list", "dyn") else 1


def _widest(a: Est | None, b: Est | None) -> Est | None:
    if a is None:
        return b
    if b is None:
        return a
    kind = a.kind if a.kind == b.kind else "dyn"
    return Est(0, max(a.size, b.size), _widest(a.elem, b.elem), kind,
               min(a.min_size, b.min_size))


def _join_branches(a: Est, b: Est) -> Est:
    w = _widest(a, b)
    assert w is not None
    return Est(max(a.cost, b.cost), w.size, w.elem, w.kind, w.min_size)


def _field(e: Est, name: str) -> Est:
    if e.kind == "device":
        if name in ("attributes", "capacity"):
            return DOMAINS
        if name == "driver":
            return Est(0, 63, None, "string")
        return Est()
    if e.elem is not None:
        return Est(0, e.elem.size, e.elem.elem, e.elem.kind, e.elem.min_size)
    return DYN_VALUE


def _index(e: Est) -> Est:
    if e.kind == "string":
        return Est()
    return _field(e, "")


def _function(name: str, r: Est, args: list[Est]) -> Est:
    """The estimate of ``r.name(args)`` (or ``name(r, args)``), its own cost excluding its
    operands' and the call's one unit."""
    read = TRAVERSAL * r.size * _elem_size(r)
    a0 = args[0] if args else Est(size=0)
    if name == "type":
        return TYPE_VALUE
    if name in ("size", "major", "minor", "patch", "sign", "isInteger", "asInteger",
                "asApproximateFloat", "compareTo", "isGreaterThan", "isLessThan", "int",
                "uint", "double", "bool", "dyn", "hasValue", "add", "sub",
                "optional.none", "getMilliseconds"):
        return Est(0, r.size if name in ("dyn",) else 1, r.elem if name == "dyn" else None,
                   r.kind if name == "dyn" else "other")
    if name in ("value", "orValue", "optional.of", "optional.ofNonZeroValue"):
        w = _widest(r, a0) if name == "orValue" else r
        assert w is not None
        return Est(0, w.size, w.elem, w.kind, w.min_size)
    if name in ("contains", "startsWith", "endsWith", "indexOf", "lastIndexOf", "charAt"):
        return Est(read * max(1.0, a0.size if name in ("contains", "indexOf",
                                                        "lastIndexOf") else 1.0),
                   1, None, "string" if name == "charAt" else "other")
    if name in ("matches", "find"):
        return Est(read * max(1.0, a0.size), r.size if name == "find" else 1, None,
                   "string" if name == "find" else "other")
    if name == "findAll":
        return Est(read * max(1.0, a0.size), r.size, Est(0, r.size, None, "string"), "list")
    if name in ("lowerAscii", "upperAscii", "trim", "reverse", "string", "substring"):
        size = r.size if r.kind == "string" else 32
        return Est(read, size, None, "string")
    if name == "strings.quote":
        return Est(read, _cap(2 * r.size + 2), None, "string")
    if name == "replace":
        old, new = a0, (args[1] if len(args) > 1 else Est(size=0))
        if old.min_size <= 0:
            size = r.size + (r.size + 1) * new.size
        else:
            size = r.size * max(1.0, new.size / old.min_size)
        return Est(read + TRAVERSAL * _cap(size), _cap(size), None, "string")
    if name == "split":
        return Est(read, _cap(r.size + 1), Est(0, r.size, None, "string"), "list")
    if name == "join":
        elem = r.elem.size if r.elem is not None else DEVICE_STRING
        size = _cap(r.size * (elem + a0.size))
        return Est(TRAVERSAL * size, size, None, "string")
    if name == "format":
        size = _cap(r.size + a0.size * _elem_size(a0) * 4)
        return Est(TRAVERSAL * size, size, None, "string")
    if name in ("semver", "quantity", "isSemver", "isQuantity"):
        return Est(read)
    if name in ("isSorted", "sum", "min", "max", "includes"):
        return Est(r.size * (1 + TRAVERSAL * _elem_size(r)),
                   _elem_size(r) if name in ("min", "max") else 1)
    if name.startswith("sets."):
        return Est(r.size * a0.size * (1 + TRAVERSAL * _elem_size(r)))
    # Anything else reads its operands once.
    return Est(read + sum(TRAVERSAL * a.size for a in args))


def estimate(expression: str) -> float | None:
    """The worst-case cost of ``expression``, or None when it does not parse (the compiler
    then says why)."""
    try:
        return _Parser(expression).parse().cost
    except _Unparsable:
        return None
