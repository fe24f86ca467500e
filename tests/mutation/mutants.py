"""The mutants of a module: small ``ast``-found edits of its source, each with a stable key.

A mutant is one edit a careless change could make to a rule: a comparison flipped (``<`` and
``<=``, ``==`` and ``!=``, ``in`` and ``not in``, ``is`` and ``is not``), a number moved by one
(the boundary of a range, a mode, a device number), a string emptied, a boolean constant,
``and``/``or`` or ``not`` turned, an ``if``'s condition negated, an arithmetic or bit operator
swapped, and a statement removed (a ``raise``, a call made for its effect, ``continue``,
``break``, an augmented assignment). Each edit replaces the source text of one node, so the rest
of the file (and its line numbers) stays as written.

A mutant's key names the function it lives in, the operator and the text before and after
(``reserved_kind: compare: name == 'rtc0' -> name != 'rtc0'``), with ``#2``, ``#3`` for a repeat
of the same text in the same function: it survives edits elsewhere in the file, so the reasons in
``tests/mutation/equivalent.json`` stay attached to their mutants.

Left alone: docstrings, annotations, ``assert`` (type narrowing), imports, the messages of
exceptions and logs (an f-string or a string inside ``raise``), the sentences the inventory's
ledger records for ``explain`` (strings inside an ``outcome(...)`` call), ``if TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

COMPARE_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
BINOP_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.LShift: ast.RShift, ast.RShift: ast.LShift,
    ast.BitOr: ast.BitAnd, ast.BitAnd: ast.BitOr, ast.Mult: ast.FloorDiv,
}
SYMBOL: dict[type[ast.AST], str] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.Add: "+",
    ast.Sub: "-", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitAnd: "&",
    ast.Mult: "*", ast.FloorDiv: "//",
}
LOG_CALLS = frozenset({"debug", "info", "warning", "error", "exception", "critical", "log"})
# The inventory's ledger records each decision with a reason and a sentence for `explain`.
MESSAGE_CALLS = frozenset({"outcome"})
MAX_TEXT = 90  # of the before/after text in a key


@dataclass(frozen=True)
class Mutant:
    module: str  # "liken_devices.inventory.reserved"
    key: str  # stable: "<qualname>: <operator>: <before> -> <after>[ #n]"
    qualname: str  # "reserved_kind", "UsbRules.decide", "<module>"
    operator: str
    line: int
    start: int  # offsets into the source text
    end: int
    replacement: str

    def apply(self, source: str) -> str:
        return source[:self.start] + self.replacement + source[self.end:]


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


class _Finder(ast.NodeVisitor):
    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.offsets = [0]
        for line in self.lines:
            self.offsets.append(self.offsets[-1] + len(line.encode()))
        self.raw = source.encode()
        self.scope: list[str] = []
        self.quiet = 0  # inside a raise, a log call, an f-string: strings are messages
        self.found: list[tuple[str, str, ast.AST, str]] = []  # qualname, op, node, replacement

    # -- positions ------------------------------------------------------------------------------

    def span(self, node: ast.AST) -> tuple[int, int]:
        """Character offsets of ``node`` in the source (ast gives UTF-8 byte columns)."""
        start_b = self.offsets[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
        end_b = self.offsets[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        return len(self.raw[:start_b].decode()), len(self.raw[:end_b].decode())

    def text(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.source[a:b]

    def add(self, op: str, node: ast.AST, replacement: str) -> None:
        qual = ".".join(self.scope) or "<module>"
        self.found.append((qual, op, node, replacement))

    # -- scopes and what is left alone ----------------------------------------------------------

    def _body(self, body: list[ast.stmt]) -> None:
        for i, stmt in enumerate(body):
            if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str):
                continue  # a docstring
            self.visit(stmt)

    def visit_Module(self, node: ast.Module) -> None:
        self._body(node.body)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)  # its decorators and defaults are its own, too
        for d in node.decorator_list:
            self.visit(d)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)
        self._body(node.body)
        self.scope.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self._body(node.body)
        self.scope.pop()

    def visit_Import(self, node: ast.Import) -> None:
        return

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        return

    def visit_Assert(self, node: ast.Assert) -> None:
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_arg(self, node: ast.arg) -> None:
        return

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # a message

    def visit_Raise(self, node: ast.Raise) -> None:
        self.add("remove", node, "pass")
        self.quiet += 1
        self.generic_visit(node)
        self.quiet -= 1

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in LOG_CALLS:
            return
        if isinstance(node.func, ast.Attribute) and node.func.attr in MESSAGE_CALLS:
            self.quiet += 1  # its strings are what `explain` says, not a rule
            self.generic_visit(node)
            self.quiet -= 1
            return
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if not _flippable(node.test):
            self.add("negate", node.test, f"not ({self.text(node.test)})")
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        if not ((isinstance(node.test, ast.Constant) and node.test.value is True)
                or _flippable(node.test)):
            self.add("negate", node.test, f"not ({self.text(node.test)})")
        self.generic_visit(node)

    # -- statements removed ---------------------------------------------------------------------

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call):
            f = node.value.func
            if not (isinstance(f, ast.Attribute) and f.attr in LOG_CALLS):
                self.add("remove", node, "pass")
        self.generic_visit(node)

    def visit_Continue(self, node: ast.Continue) -> None:
        self.add("remove", node, "pass")

    def visit_Break(self, node: ast.Break) -> None:
        self.add("remove", node, "pass")

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.add("remove", node, "pass")
        self.generic_visit(node)

    # -- expressions ----------------------------------------------------------------------------

    def visit_Compare(self, node: ast.Compare) -> None:
        for i, op in enumerate(node.ops):
            swap = COMPARE_SWAP.get(type(op))
            if swap is None:
                continue
            ops = [*node.ops[:i], swap(), *node.ops[i + 1:]]
            parts = [self.text(node.left)]
            for o, right in zip(ops, node.comparators, strict=True):
                parts += [SYMBOL[type(o)], self.text(right)]
            self.add("compare", node, f"({' '.join(parts)})")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        swap = BINOP_SWAP.get(type(node.op))
        if swap is not None and not (isinstance(node.op, ast.Mult) and _is_str(node)):
            self.add("arith", node, f"({self.text(node.left)} {SYMBOL[swap]} "
                                    f"{self.text(node.right)})")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        other = " or " if isinstance(node.op, ast.And) else " and "
        self.add("boolop", node, f"({other.join(self.text(v) for v in node.values)})")
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            self.add("not", node, f"({ast.unparse(node.operand)})")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        v = node.value
        if isinstance(v, bool):
            self.add("constant", node, repr(not v))
        elif isinstance(v, int):
            spelt = _spelling(self.text(node))
            self.add("number", node, spelt(v + 1))
            if v > 0:
                self.add("number", node, spelt(v - 1))
        elif isinstance(v, str) and not self.quiet:
            self.add("string", node, repr("") if v else repr("x"))


def _spelling(text: str) -> Callable[[int], str]:
    """A number written as the source writes it: a mode stays octal (0o644 -> 0o645)."""
    base = {"0o": oct, "0x": hex, "0b": bin}.get(text[:2].lower())
    return base if base is not None else repr


def _flippable(test: ast.expr) -> bool:
    """A ``not x`` or a one-operator comparison: the ``not`` removed or the comparison flipped
    is already the negation, no second mutant."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    return isinstance(test, ast.Compare) and len(test.ops) == 1 \
        and type(test.ops[0]) in COMPARE_SWAP and type(test.ops[0]) not in (ast.Lt, ast.LtE,
                                                                           ast.Gt, ast.GtE)


def _is_str(node: ast.BinOp) -> bool:
    return any(isinstance(x, ast.Constant) and isinstance(x.value, str)
               for x in (node.left, node.right))


def mutants(module: str, source: str,
            scope: Callable[[str], bool] = lambda q: True) -> list[Mutant]:
    """Every mutant of ``source`` whose function ``scope`` accepts, in source order."""
    tree = ast.parse(source)
    finder = _Finder(source)
    finder.visit(tree)
    out: list[Mutant] = []
    seen: dict[str, int] = {}
    original = ast.dump(tree)
    for qual, op, node, replacement in finder.found:
        if not scope(qual):
            continue
        start, end = finder.span(node)
        before = source[start:end]
        text = source[:start] + replacement + source[end:]
        try:
            changed = ast.dump(ast.parse(text)) != original
        except SyntaxError:
            continue
        if not changed:
            continue
        key = f"{qual}: {op}: {_short(before)} -> {_short(replacement)}"
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key += f" #{seen[key]}"
        out.append(Mutant(module, key, qual, op, node.lineno,  # type: ignore[attr-defined]
                          start, end, replacement))
    return out


def in_scope(functions: tuple[str, ...] | None) -> Callable[[str], bool]:
    """A scope of whole functions (and their nested ones); None is the whole module."""
    if functions is None:
        return lambda q: True
    return lambda q: any(q == f or q.startswith(f + ".") for f in functions)
