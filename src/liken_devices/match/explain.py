"""Why a selector is false, or why it failed, for one device: the comparison and the value read.

A user reads ``match``'s answer to fix a selector, so the answer names what failed, not what
the selector merely mentions: for ``device.attributes[device.driver].vendor == "10de"`` it is the
vendor (``"1002"``), not ``device.driver``. The failing part is the first ``&&`` operand that is
false (CEL's ``&&`` is false as soon as one operand is). Every PATH (``device.driver``,
``device.attributes[D].name``, ``device.capacity[D].name``, ``device.allowMultipleAllocations``,
in any spelling the selector uses) is evaluated by CEL itself on the device, so the value shown
is the one the selector read. The forms explained as comparisons:

- ``PATH OP LITERAL`` and ``LITERAL OP PATH`` (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``);
- ``PATH.startsWith(L)``, ``endsWith``, ``contains``, ``matches``;
- ``PATH in [...]``; ``has(PATH)`` and ``!has(PATH)``;
- ``PATH.compareTo(semver(...)) OP N`` (or ``quantity``), ``isGreaterThan``/``isLessThan``.

Anything else shows each PATH it reads and its value. An evaluation error (an absent attribute,
two types no operator takes) names the operand that failed and each PATH in it with its value
and type.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from .cel import CompileError, Env, code_positions, matching_bracket

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LITERAL = r'(?:"(?:[^"\\]|\\.)*"|-?[0-9]+u?|-?[0-9]*\.[0-9]+|true|false|null)'
_OPS = ("==", "!=", "<=", ">=", "<", ">")
_FLIP = {"==": "==", "!=": "!=", "<": ">", ">": "<", "<=": ">=", ">=": "<="}
_STRING_TESTS = {"startsWith": "start with", "endsWith": "end with", "contains": "contain",
                 "matches": "match"}


def paths(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of every PATH in ``text``: ``device`` and its fields, indexes and
    (optional) selections, up to a method call or anything that is not part of a path."""
    i = 0
    for pos, _ in code_positions(text):
        if pos < i or not text.startswith("device", pos):
            continue
        if pos > 0 and (text[pos - 1].isalnum() or text[pos - 1] in "_."):
            continue
        end = pos + len("device")
        if end < len(text) and (text[end].isalnum() or text[end] == "_"):
            continue
        steps = 0
        while end < len(text):
            j = end
            while j < len(text) and text[j].isspace():
                j += 1
            if text.startswith("[", j):
                close = matching_bracket(text, j)
                if close < 0:
                    break
                end = close + 1
            elif text.startswith(".", j):
                k = j + 1
                if text.startswith("?", k):
                    k += 1
                m = _IDENT.match(text, k)
                if m is None:
                    break
                after = m.end()
                while after < len(text) and text[after].isspace():
                    after += 1
                if text.startswith("(", after):
                    break  # a method call: the path ends before it
                end = m.end()
            else:
                break
            steps += 1
        if steps:
            yield pos, end
            i = end


def conjuncts(expression: str) -> list[str]:
    """The top-level ``&&`` operands of an expression (outside strings and brackets)."""
    parts, start = [], 0
    for i, depth in code_positions(expression):
        if i >= start and depth == 0 and expression.startswith("&&", i):
            parts.append(expression[start:i])
            start = i + 2
    parts.append(expression[start:])
    parts = [p.strip() for p in parts]
    if len(parts) == 1:
        inner = parts[0]
        if inner.startswith("(") and matching_bracket(inner, 0) == len(inner) - 1:
            return conjuncts(inner[1:-1])
    return parts


def type_name(env: Env, value: Any) -> str:
    """The CEL type of a value as the API documents it."""
    shown = env.show(value)
    if shown.startswith("semver("):
        return "semver"
    if shown.startswith("quantity("):
        return "quantity"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


class Reader:
    """Evaluates PATHs on one device's data with the selector's own environment."""

    def __init__(self, env: Env, data: dict[str, Any],
                 wrap: Callable[[str], str] = lambda text: text) -> None:
        self.env = env
        self.data = data
        self.wrap = wrap  # puts a path back into the selector's bindings (cel.bind)

    def value(self, path: str) -> tuple[bool, Any]:
        """(True, value) or (False, why it cannot be read: "absent" or the error)."""
        try:
            program = self.env.compile_value(self.wrap(path))
        except CompileError as exc:
            return False, str(exc)
        value, error = self.env.evaluate(program, self.data)
        if error is not None:
            return False, "absent" if error.startswith("no such key") else f"an error ({error})"
        return True, value

    def describe(self, path: str, with_type: bool = False) -> str:
        ok, value = self.value(path)
        if not ok:
            return f"{path} is {value}"
        shown = self.env.show(value)
        return f"{path} is {shown}" + (f" ({type_name(self.env, value)})" if with_type else "")


def _strip(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and matching_bracket(text, 0) == len(text) - 1:
        text = text[1:-1].strip()
    return text


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _wants(op: str, literal: str) -> str:
    if op == "==":
        return f"the selector wants {literal}"
    if op == "!=":
        return f"the selector wants anything but {literal}"
    return f"the selector wants {op} {literal}"


def comparison(reader: Reader, part: str) -> str | None:
    """The explanation of ``part`` when it has one of the module's comparison forms."""
    part = _strip(part)
    if part.startswith("!") and not part.startswith("!="):
        inner = _strip(part[1:])
        m = re.fullmatch(r"has\((.*)\)", inner, re.S)
        if m and [(0, len(m.group(1).strip()))] == list(paths(m.group(1).strip())):
            path = m.group(1).strip()
            return f"{reader.describe(path)}, the selector wants it absent"
        return None
    m = re.fullmatch(r"has\((.*)\)", part, re.S)
    if m is not None:
        path = m.group(1).strip()
        if [(0, len(path))] == list(paths(path)):
            return f"{reader.describe(path)}, the selector wants it present"
        return None
    found = list(paths(part))
    if not found:
        return None
    start, end = found[0]
    path, rest, before = part[start:end], part[end:].strip(), part[:start].strip()
    if start == 0:
        for op in _OPS:
            if rest.startswith(op):
                literal = rest[len(op):].strip()
                if re.fullmatch(_LITERAL, literal) or re.fullmatch(
                        r"(?:semver|quantity)\(\s*" + _LITERAL + r"\s*(?:,\s*(?:true|false))?\)",
                        literal):
                    return f"{reader.describe(path)}, {_wants(op, literal)}"
                return None
        m = re.fullmatch(r"\.\s*(startsWith|endsWith|contains|matches)\(\s*(" + _LITERAL
                         + r")\s*\)", rest, re.S)
        if m is not None:
            return (f"{reader.describe(path)}, the selector wants it to "
                    f"{_STRING_TESTS[m.group(1)]} {m.group(2)}")
        m = re.fullmatch(r"in\s*(\[.*\])", rest, re.S)
        if m is not None and matching_bracket(m.group(1), 0) == len(m.group(1)) - 1:
            return f"{reader.describe(path)}, the selector wants one of {_short(m.group(1))}"
        m = re.fullmatch(r"\.\s*(compareTo|isGreaterThan|isLessThan)\((.*)", rest, re.S)
        if m is not None:
            return f"{reader.describe(path)}, the selector wants {path}{_short(rest)}"
        return None
    if end == len(part):
        for op in _OPS:
            if before.endswith(op):
                literal = before[:-len(op)].strip()
                if re.fullmatch(_LITERAL, literal):
                    return f"{reader.describe(path)}, {_wants(_FLIP[op], literal)}"
                return None
    return None


def _alias(expression: str) -> tuple[str, str | None, str]:
    """``cel.bind(x, E, body)`` as (body, x, E); anything else as (expression, None, "")."""
    m = re.match(r"cel\.bind\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,", expression)
    if m is None or matching_bracket(expression, expression.index("(")) != len(expression) - 1:
        return expression, None, ""
    # The bound value ends at the first top-level comma after the name.
    for i, depth in code_positions(expression, m.end()):
        if depth == 0 and expression[i] == ",":
            return expression[i + 1:-1].strip(), m.group(1), expression[m.end():i].strip()
    return expression, None, ""


def _unbind(expression: str) -> tuple[str, Callable[[str], str], Callable[[str], str]]:
    """The body to explain, how to evaluate a part of it on its own, and how to show a part:
    a name bound to a PATH is written as that PATH (``l.vendor`` is
    ``device.attributes["liken.sh"].vendor``); a name bound to anything else stays, read
    inside the bind."""
    body, name, value = _alias(expression.strip())
    if name is None:
        return body, lambda t: t, lambda t: t

    def wrap(text: str) -> str:
        return f"cel.bind({name}, {value}, {text})"

    if [(0, len(value))] == list(paths(value)):
        def show(text: str) -> str:
            return re.sub(rf"(?<![\w.]){re.escape(name)}(?=\s*[.\[])", lambda _: value, text)
        return body, wrap, show
    return body, wrap, lambda t: t


def explain_false(env: Env, expression: str, data: dict[str, Any],
                  evaluate: Callable[[str], tuple[bool, str | None]]) -> str:
    """Why ``expression`` is false for the device whose data is ``data``. ``evaluate(text)``
    gives (matched, error) of a selector text on that device."""
    body, wrap, show = _unbind(expression)
    failing = body
    parts = conjuncts(body)
    if len(parts) > 1:
        for part in parts:
            matched, error = evaluate(wrap(part))
            if error is not None or not matched:
                failing = part
                break
    shown = show(failing)
    reader = Reader(env, data, (lambda t: t) if shown != failing else wrap)
    said = comparison(reader, shown)
    if said is not None:
        return said
    seen = [reader.describe(shown[s:e]) for s, e in paths(shown)]
    seen += _bound_paths(shown, expression, reader, False)
    seen = list(dict.fromkeys(seen))
    if seen:
        return f"{', '.join(seen)}: `{_short(shown)}` is false"
    return f"`{_short(shown)}` is false"


def _bound_paths(failing: str, expression: str, reader: Reader, with_type: bool) -> list[str]:
    """The selections of a ``cel.bind`` name in ``failing`` (``x.vendor``), read in the bind."""
    _, name, _ = _alias(expression.strip())
    if name is None:
        return []
    out = []
    for sel in re.finditer(rf"(?<![\w.]){re.escape(name)}(?:\s*\.\s*\??[A-Za-z_][A-Za-z0-9_]*"
                           rf"(?!\s*\())+", failing):
        out.append(reader.describe(sel.group(0), with_type))
    return list(dict.fromkeys(out))


def explain_error(env: Env, expression: str, data: dict[str, Any], error: str,
                  evaluate: Callable[[str], tuple[bool, str | None]]) -> str:
    """An evaluation error, with the operand that failed and each PATH in it: value and type."""
    body, wrap, show = _unbind(expression)
    failing = body
    for part in conjuncts(body):
        _, err = evaluate(wrap(part))
        if err is not None:
            failing = part
            break
    shown = show(failing)
    reader = Reader(env, data, (lambda t: t) if shown != failing else wrap)
    seen = [reader.describe(shown[s:e], with_type=True) for s, e in paths(shown)]
    seen += _bound_paths(shown, expression, reader, True)
    seen = list(dict.fromkeys(seen))
    where = f" in `{_short(shown)}`" if failing != expression.strip() else ""
    return f"CEL runtime error: {error}{where}" + (f": {', '.join(seen)}" if seen else "")
