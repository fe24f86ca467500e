"""A worst-case cost estimate of a DRA selector that counts what strings and lists can grow to.

Kubernetes refuses a selector whose estimated cost exceeds 1,000,000
(``CELSelectorExpressionMaxCost``) and evaluates the ones it admits under the same limit. Its
estimate (cel-go's checker, with the sizes the DRA environment declares) follows each value's
size through the expression: a string operation costs a tenth of a unit per byte it reads and
its result is as long as it can get, so ``"aaaa".replace("a", "aaaaaaaaaa")`` nested nine times
reads 4 GB and is refused, though no comprehension appears in it. The runtime here has no
such estimate, so this module parses the expression and computes one in the same way:

- every value carries its largest size (bytes of a string, elements of a list or map) and, for
  a list or map, the estimate of its elements (and of a map's keys);
- a device's data is bounded as the API bounds it: 32 domains and 32 attributes per device, a
  string attribute of at most 64 bytes, list attributes (and anything else whose size a selector
  cannot know) of at most 64 elements;
- a string or list operation costs 1 plus a tenth per element or byte it reads, and its result
  grows as the operation allows (``+`` adds the sizes, ``replace`` multiplies by the replacement
  over the text replaced, ``join`` by the separator, ``split`` makes as many parts as bytes,
  ``format`` by what each verb can print); comparing two values reads all they hold;
- a comprehension (``all``, ``exists``, ``exists_one``, ``map``, ``filter``, and the optional
  library's ``optMap``/``optFlatMap``) costs its range's size times its body, and ``cel.bind``
  gives its name the estimate of what it binds;
- a list literal has at most as many elements as it lists, optional elements (``[?x]``) and
  entries (``{?k: v}``) included.

One bound for the estimate and the evaluator (rules: limits.cel-bound): every construct of the
environment is in this module's grammar and every function of the environment in its table
(:data:`FUNCTIONS`); what it does not know, it cannot bound, and :func:`bound` raises
:class:`Unbounded` (match/cel.py then refuses the expression in one line when the compiler
accepts it: it is never evaluated on a guess). Nesting is bounded before the recursive parser
runs, by an iterative count of the brackets and conditionals: at most :data:`MAX_NESTING` levels,
the depth at which the runtime's own parser (cel-cpp) stops too, so neither can overflow a
stack. What it accepts stays within the limit: every intermediate value is no larger than its
estimate, so an accepted selector runs in bounded memory.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

MAX_SIZE = 1e18
DEVICE_STRING = 64  # DeviceAttributeMaxValueLength
DEVICE_LIST = 64  # list attributes hold 48 values; an unknown collection is taken as 64
DEVICE_MAP = 32  # attributes and capacities per device; domains
TRAVERSAL = 0.1  # cost per byte or element read (cel-go's string traversal factor)
LIST_CREATE = 10
MAP_CREATE = 30
# The runtime's parser (cel-cpp) refuses an expression nested deeper than 32 levels ("Expression
# recursion limit exceeded. limit: 32"), whatever nests: parentheses, list and map literals,
# call arguments, indexes, conditionals. tests/match/test_celcost.py holds the two to one depth.
MAX_NESTING = 32
# A value nests no deeper than the expression that builds it; twice the nesting bound leaves room
# for chained calls and stops the estimate long before Python's recursion limit.
MAX_VALUE_DEPTH = 2 * MAX_NESTING
FORMAT_VERB = 1400  # "%.1000f" of the largest double (precision is capped at 1000 by the runtime)


class Unbounded(Exception):
    """The estimate cannot bound the expression (the message says why, in a few words)."""


@dataclass(frozen=True)
class Est:
    """The worst case of one value: what computing it costs and how large it can be."""

    cost: float = 0.0
    size: float = 1.0  # bytes of a string, elements of a list or map; 1 for a scalar
    elem: Est | None = None  # a list's elements, a map's values
    kind: str = "other"  # "string", "list", "map", "dyn", "device", "type", "other" (a scalar)
    min_size: float = 0.0  # the shortest it can be (a literal's length)
    key: Est | None = None  # a map's keys
    depth: int = field(default=1, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        depth = 1 + max(self.elem.depth if self.elem is not None else 0,
                        self.key.depth if self.key is not None else 0)
        if depth > MAX_VALUE_DEPTH:
            raise Unbounded(f"values nested more than {MAX_VALUE_DEPTH} deep")
        object.__setattr__(self, "depth", depth)

    def plus(self, cost: float) -> Est:
        return replace(self, cost=min(self.cost + cost, math.inf))

    def value(self) -> Est:
        """The same value, already computed (a bound name, a comprehension's variable)."""
        return replace(self, cost=0.0)


def _cap(x: float) -> float:
    return min(x, MAX_SIZE)


STRING64 = Est(size=DEVICE_STRING, kind="string")
DYN_VALUE = Est(size=DEVICE_LIST, elem=STRING64, kind="dyn")
ATTRS = Est(size=DEVICE_MAP, elem=DYN_VALUE, kind="map", key=STRING64)
DOMAINS = Est(size=DEVICE_MAP, elem=ATTRS, kind="map", key=STRING64)
DEVICE = Est(size=4, elem=DYN_VALUE, kind="device", key=STRING64)
# A type value (``string``, ``type(x)``) has no size the checker knows, so comparing two of them
# is estimated at the largest size: Kubernetes refuses ``type(x) == string`` as too complex.
TYPE_VALUE = Est(size=MAX_SIZE, kind="type")
TYPE_NAMES = frozenset({"bool", "bytes", "double", "int", "list", "map", "null_type", "string",
                        "type", "uint", "dyn"})

_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<string>[rRbB]{0,2}(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
                          |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:[0-9]+\.[0-9]+|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%<>!?:.,()\[\]{}])
""", re.X | re.S)

# Receiver macros: a variable, then one body (two for map's filtering form).
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter", "optMap", "optFlatMap"})
_SCALAR = frozenset({
    # the standard library
    "size", "int", "uint", "double", "bool", "duration", "timestamp", "contains", "startsWith",
    "endsWith", "matches", "getFullYear", "getMonth", "getDate", "getDayOfMonth",
    "getDayOfWeek", "getDayOfYear", "getHours", "getMinutes", "getSeconds", "getMilliseconds",
    # the optional library
    "hasValue", "optional.none",
    # the string extension
    "indexOf", "lastIndexOf",
    # Kubernetes' semver, quantity and list libraries, the sets extension, includes()
    "semver", "quantity", "isSemver", "isQuantity", "compareTo", "isGreaterThan",
    "isLessThan", "major", "minor", "patch", "sign", "isInteger", "asInteger",
    "asApproximateFloat", "add", "sub", "isSorted", "sum", "includes", "sets.contains",
    "sets.equivalent", "sets.intersects"})
_SAME = frozenset({"dyn", "value", "optional.of", "optional.ofNonZeroValue"})
_WIDEST = frozenset({"or", "orValue"})
_ELEMENT = frozenset({"first", "last", "min", "max"})
_STRING = frozenset({"lowerAscii", "upperAscii", "trim", "reverse", "substring", "string",
                     "bytes", "charAt", "strings.quote", "replace", "split", "join", "format",
                     "find", "findAll"})
FUNCTIONS = _SCALAR | _SAME | _WIDEST | _ELEMENT | _STRING | {"type"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            raise Unbounded(f"unexpected character at {i}")
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append((kind, m.group(0)))
        i = m.end()
    return out


def check_nesting(toks: list[tuple[str, str]]) -> None:
    """Refuse an expression nested deeper than :data:`MAX_NESTING`, counted without recursion:
    each open bracket is a level, and so is each conditional's ``?`` until the comma or bracket
    that ends its branch (rules: limits.cel-bound)."""
    depth, open_conds = 0, 0
    stack: list[int] = []
    prev = ""
    for kind, tok in toks:
        if kind == "op":
            if tok in ("(", "[", "{"):
                stack.append(open_conds)
                depth, open_conds = depth + 1, 0
            elif tok in (")", "]", "}"):
                if not stack:
                    raise Unbounded(f"unbalanced {tok!r}")
                depth -= 1 + open_conds
                open_conds = stack.pop()
            elif tok == ",":
                depth -= open_conds
                open_conds = 0
            elif tok == "?" and prev not in ("[", "{", ",", "."):
                depth, open_conds = depth + 1, open_conds + 1
            if depth > MAX_NESTING:
                raise Unbounded(f"nested more than {MAX_NESTING} levels deep")
        prev = tok


def _unescaped_length(inner: str) -> int:
    """The fewest bytes a literal's text can stand for: each escape at least one."""
    n, i = 0, 0
    while i < len(inner):
        if inner[i] == "\\" and i + 1 < len(inner):
            c = inner[i + 1]
            i += {"x": 4, "X": 4, "u": 6, "U": 10}.get(c, 4 if c in "0123" else 2)
            n += 1
        else:
            n += len(inner[i].encode("utf-8", "surrogatepass"))
            i += 1
    return n


def _literal(token: str) -> Est:
    prefix = len(token) - len(token.lstrip("rRbB"))
    body = token[prefix:]
    quote = 3 if body[:3] in ('"""', "'''") else 1
    inner = body[quote:-quote]
    # An escape is at most one character: counting the text's bytes is an upper bound.
    longest = len(inner.encode("utf-8", "surrogatepass"))
    raw = "r" in token[:prefix].lower()
    shortest = longest if raw or "\\" not in inner else _unescaped_length(inner)
    return Est(0, longest, None, "string", shortest)


def _bytes(e: Est | None) -> float:
    """All a value holds, counted down its nesting (iteratively): a list's elements times what
    each holds, plus a few bytes each for how it prints."""
    chain: list[Est] = []
    while e is not None:
        chain.append(e)
        e = e.elem if e.kind in ("list", "dyn", "map") else None
    total = 0.0
    for x in reversed(chain):
        total = x.size if x is chain[-1] else _cap(x.size * (total + 4) + 2)
    return total


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        check_nesting(self.toks)
        self.i = 0
        self.env: list[dict[str, Est]] = [{"device": DEVICE}]

    # -- tokens -----------------------------------------------------------------------------

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.toks[j][1] if j < len(self.toks) else ""

    def kind(self) -> str:
        return self.toks[self.i][0] if self.i < len(self.toks) else ""

    def take(self, want: str | None = None) -> str:
        if self.i >= len(self.toks):
            raise Unbounded("unexpected end")
        tok = self.toks[self.i][1]
        if want is not None and tok != want:
            raise Unbounded(f"expected {want!r}, found {tok!r}")
        self.i += 1
        return tok

    def ident(self) -> str:
        if self.kind() != "ident":
            raise Unbounded(f"expected a name, found {self.peek()!r}")
        return self.take()

    def lookup(self, name: str) -> Est | None:
        for scope in reversed(self.env):
            if name in scope:
                return scope[name]
        return None

    # -- grammar ----------------------------------------------------------------------------

    def parse(self) -> Est:
        e = self.expr()
        if self.i != len(self.toks):
            raise Unbounded(f"unexpected {self.peek()!r}")
        return e

    def expr(self) -> Est:
        cond = self.or_()
        if self.peek() != "?":
            return cond
        self.take("?")
        a = self.or_()
        self.take(":")
        b = self.expr()
        return _join_branches(a, b).plus(cond.cost)

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
            if op == "in" and r.kind in ("map", "device"):  # a lookup: hashes the key
                e = Est(e.cost + r.cost + 1 + TRAVERSAL * min(_bytes(e), _bytes(r.key)))
            elif op == "in":  # a scan: compares each element
                e = Est(e.cost + r.cost + 1
                        + r.size * (1 + TRAVERSAL * min(_bytes(e), _bytes(r.elem))))
            else:  # comparing reads all the smaller side holds
                e = Est(e.cost + r.cost + 1 + TRAVERSAL * min(_bytes(e), _bytes(r)))
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
        ops = 0
        while self.peek() in ("!", "-"):  # a run of operators, counted rather than recursed
            self.take()
            ops += 1
        e = self.member()
        return e.plus(ops) if ops else e

    def member(self) -> Est:
        e = self.primary()
        while True:
            tok = self.peek()
            if tok == ".":
                self.take()
                if self.peek() == "?":
                    self.take()
                name = self.ident()
                e = self.call(name, e) if self.peek() == "(" else _field(e, name).plus(e.cost + 1)
            elif tok == "[":
                self.take()
                if self.peek() == "?":
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
                raise Unbounded("expected , or )")
        self.take(")")
        return out

    def primary(self) -> Est:
        kind, tok = (self.kind(), self.peek())
        if kind == "string":
            self.take()
            return _literal(tok)
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
                if self.peek() == "?":  # an optional element: present or not, at most one
                    self.take()
                items.append(self.expr())
                if self.peek() == ",":
                    self.take()
                elif self.peek() != "]":
                    raise Unbounded("expected , or ]")
            self.take("]")
            elem = None
            for it in items:
                elem = _widest(elem, it)
            return Est(sum(it.cost for it in items) + LIST_CREATE, len(items), elem, "list")
        if tok == "{":
            self.take()
            cost, n, elem, key = float(MAP_CREATE), 0, None, None
            while self.peek() != "}":
                if self.peek() == "?":
                    self.take()
                k = self.expr()
                self.take(":")
                v = self.expr()
                cost += k.cost + v.cost
                elem, key = _widest(elem, v), _widest(key, k)
                n += 1
                if self.peek() == ",":
                    self.take()
                elif self.peek() != "}":
                    raise Unbounded("expected , or }")
            self.take("}")
            return Est(cost, n, elem, "map", 0, key)
        if tok == ".":
            self.take()
            if self.kind() != "ident":
                raise Unbounded(f"unexpected {self.peek()!r}")
        if self.kind() == "ident":
            name = self.take()
            if name in ("true", "false", "null"):
                return Est()
            if name in TYPE_NAMES and self.peek() != "(" and self.lookup(name) is None:
                return TYPE_VALUE.plus(1)
            if name == "cel" and self.peek() == "." and self.peek(1) == "bind":
                self.take(".")
                self.take("bind")
                return self.bind()
            if name in ("sets", "optional", "strings") and self.peek() == "." \
                    and self.lookup(name) is None:
                self.take(".")
                fn = self.ident()
                return self.call(f"{name}.{fn}", None)
            if name == "has" and self.peek() == "(":
                self.args()
                return Est(1)
            if self.peek() == "(":
                return self.call(name, None)
            bound = self.lookup(name)
            if bound is None:
                raise Unbounded(f"unknown name {name!r}")
            return bound.value().plus(1)  # a bound name costs a read, not its computation
        raise Unbounded(f"unexpected {tok!r}")

    def bind(self) -> Est:
        self.take("(")
        name = self.ident()
        self.take(",")
        init = self.expr()
        self.take(",")
        self.env.append({name: init.value()})
        try:
            body = self.expr()
        finally:
            self.env.pop()
        self.take(")")
        return body.plus(init.cost)

    def call(self, name: str, recv: Est | None) -> Est:
        if recv is not None and name in _MACROS:
            return self.macro(name, recv)
        if name not in FUNCTIONS:
            raise Unbounded(f"unknown function {name!r}")
        args = self.args()
        base = (recv.cost if recv is not None else 0) + sum(a.cost for a in args) + 1
        r = recv if recv is not None else (args[0] if args else Est())
        rest = args if recv is not None else args[1:]
        return _function(name, r, rest).plus(base)

    def macro(self, name: str, recv: Est) -> Est:
        self.take("(")
        var = self.ident()
        self.take(",")
        if name in ("optMap", "optFlatMap"):
            item = recv  # the optional's value
        elif recv.kind in ("map", "device"):
            item = recv.key or STRING64  # a map's comprehension ranges over its keys
        else:
            item = recv.elem or DYN_VALUE
        n = 1.0 if name in ("optMap", "optFlatMap") else recv.size
        self.env.append({var: item.value()})
        try:
            bodies = [self.expr()]
            while self.peek() == ",":
                self.take()
                bodies.append(self.expr())
        finally:
            self.env.pop()
        self.take(")")
        if len(bodies) > (2 if name == "map" else 1):
            raise Unbounded(f"{name}() with {len(bodies)} bodies")
        step = sum(b.cost for b in bodies) + 2
        cost = recv.cost + n * step
        if name in ("optMap", "optFlatMap"):
            return bodies[-1].value().plus(cost)
        if name == "map":
            return Est(cost + LIST_CREATE, n, bodies[-1].value(), "list")
        if name == "filter":
            return Est(cost + LIST_CREATE, n, item.value(), "list")
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
               min(a.min_size, b.min_size), _widest(a.key, b.key))


def _join_branches(a: Est, b: Est) -> Est:
    w = _widest(a, b)
    assert w is not None
    return replace(w, cost=max(a.cost, b.cost))


def _field(e: Est, name: str) -> Est:
    if e.kind == "device":
        if name in ("attributes", "capacity"):
            return DOMAINS
        if name == "driver":
            return Est(0, 63, None, "string")
        return Est()
    if e.elem is not None:
        return e.elem.value()
    return DYN_VALUE


def _index(e: Est) -> Est:
    if e.kind == "string":
        return Est()
    return _field(e, "")


def _function(name: str, r: Est, args: list[Est]) -> Est:
    """The estimate of ``r.name(args)`` (or ``name(r, args)``), its own cost excluding its
    operands' and the call's one unit. Every function of the environment is here
    (:data:`FUNCTIONS`); the caller refuses any other."""
    read = TRAVERSAL * r.size * _elem_size(r)
    a0 = args[0] if args else Est(size=0)
    if name == "type":
        return TYPE_VALUE
    if name in _SAME:
        return r.value()
    if name in _WIDEST:
        w = _widest(r, a0)
        assert w is not None
        return w.value()
    if name in _ELEMENT:
        scan = r.size * (1 + TRAVERSAL * _bytes(r.elem)) if name in ("min", "max") else 0.0
        return (r.elem or DYN_VALUE).value().plus(scan)
    if name in ("contains", "indexOf", "lastIndexOf"):
        return Est(read * max(1.0, a0.size))
    if name in ("startsWith", "endsWith", "size", "hasValue"):
        return Est(read if name in ("startsWith", "endsWith") else 0)
    if name == "charAt":
        return Est(read, 4, None, "string", 0)
    if name in ("matches", "find"):
        return Est(read * max(1.0, a0.size), r.size if name == "find" else 1, None,
                   "string" if name == "find" else "other")
    if name == "findAll":
        return Est(read * max(1.0, a0.size), r.size, Est(0, r.size, None, "string"), "list")
    if name in ("lowerAscii", "upperAscii", "trim", "reverse", "substring", "bytes"):
        return Est(read, r.size if r.kind in ("string", "dyn") else 32, None, "string")
    if name == "string":
        return Est(read, max(r.size if r.kind in ("string", "dyn") else 0, 32), None, "string")
    if name == "strings.quote":
        # an escaped character is at most six bytes (\u0000-style), plus the quotes
        return Est(read, _cap(6 * r.size + 2), None, "string")
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
        size = _cap(r.size * (_bytes(r.elem) + a0.size))
        return Est(TRAVERSAL * size, size, None, "string")
    if name == "format":
        # each verb takes two bytes of the format and prints one argument, or a number of at
        # most FORMAT_VERB bytes
        size = _cap(r.size + (r.size / 2 + 1) * max(float(FORMAT_VERB), _bytes(a0.elem)))
        return Est(TRAVERSAL * size, size, None, "string")
    if name in ("isSorted", "sum", "includes"):
        return Est(r.size * (1 + TRAVERSAL * _bytes(r.elem)))
    if name.startswith("sets."):
        return Est(r.size * a0.size * (1 + TRAVERSAL * _bytes(r.elem)))
    # The remaining scalars (conversions, semver and quantity methods, timestamps) read their
    # operands once.
    return Est(read + sum(TRAVERSAL * a.size for a in args))


def bound(expression: str) -> float:
    """The worst-case cost of ``expression``; :class:`Unbounded` when the estimate cannot
    bound it (it does not parse, it nests too deep, it calls what the estimate does not know)."""
    try:
        return _Parser(expression).parse().cost
    except RecursionError:  # pragma: no cover - check_nesting bounds the recursion
        raise Unbounded("nested too deep") from None


def estimate(expression: str) -> float | None:
    """The worst-case cost of ``expression``, or None when :func:`bound` cannot bound it."""
    try:
        return bound(expression)
    except Unbounded:
        return None
