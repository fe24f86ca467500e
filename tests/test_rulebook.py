"""The rulebook (``docs/rules/``) and the code hold each other (docs/rules/README.md).

A rule is an anchor line ``<a id="page.name"></a>`` on a page ``docs/rules/page.md``, a heading
that repeats the id, and four list items: ``- Why:``, ``- Origin:``, ``- Held by:`` (module
paths in backticks) and ``- Tested by:`` (``path::function`` in backticks). Code, tests and
deploy files cite a rule with ``rules: page.name[, page.name...]`` on one line; pages in
``docs/`` link to ``rules/page.md#page.name``. The checks below fail on a citation of a rule the
book lacks, on a rule none of its modules cites, on a named module or test that does not exist,
and on a citation of the specification's pages by file name (or of "the seed" / "the decisions"
with no rule beside it). Each check is a function returning its problems, so the tests at the
end can show that each one finds what it is for.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.support.corpus import SHARED

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "docs" / "rules"

# Rules whose code or test is still landing (round 3, built on another branch). For these alone a
# named test may be missing and no module needs to cite them yet. The list only shrinks: once a
# pending rule's tests exist and a module cites it, test_pending_is_still_pending asks to take it
# off. A rule's page says "(pending)" after each test that does not exist yet.
PENDING: frozenset[str] = frozenset()

# Files that still cite the specification's pages, each with why; the list only shrinks (the test
# fails once a listed file cites them no more). Their lines are rewritten on another branch;
# replacing them here would make that merge conflict.
OLD_CITATIONS_LEFT: Mapping[str, str] = {}

# Where rules are cited: the code, the tests, the deploy files, the docs and the entry points.
SCOPE_DIRS = ("src", "tests", "docs", "deploy", "scripts", "setup.d")
SCOPE_FILES = ("README.md", "tasks", "pyproject.toml")
SKIP_PARTS = {"__pycache__", ".venv", "gen", "native"}
MAX_SCANNED = 1 << 20  # bytes; larger files are data, not prose

ID = r"[a-z]+\.[a-z0-9]+(?:-[a-z0-9]+)*"
ID_RE = re.compile(rf"^{ID}$")
ANCHOR_RE = re.compile(r'^<a id="([^"]*)"></a>\s*$')
HEADING_RE = re.compile(r"^###\s+(\S+?):\s+\S")
FIELD_RE = re.compile(r"^- (Why|Origin|Held by|Tested by):\s*(.*)$")
CITE_RE = re.compile(rf"\brules: ({ID}(?:, {ID})*)(,?)")
# `rules:` ending a comment line, a docstring line or a parenthesis; not `for r in rules:`, not
# a YAML key.
DANGLING_RE = re.compile(r"(?:#\s*|^\s*\*\s*|\()rules:\s*$")
DANGLING_PROSE_RE = re.compile(r"^\s*rules:\s*$")  # a docstring's or a page's line of its own
LINK_RE = re.compile(rf"(?:^|[(/\s])(?:rules/)?([a-z]+)\.md#({ID})\b")
TICKS_RE = re.compile(r"`([^`]+)`")
# The specification's pages by file name: never cited from the repository.
SPEC_FILE_RE = re.compile(r"devices\.txt|render-node-capabilities\.txt|decisions\.md"
                          r"|shared/seeds|shared/spec", re.IGNORECASE)
# "the seed" / "the decisions" as a source: allowed only beside a rule's citation (its origin).
# Citation-like uses only, so a random seed (``--seed S``, ``choose(t, seed, ...)``) is none.
SPEC_WORD_RE = re.compile(
    r"\bseed's\b|\bseeds?(?:[,:]\s*|\s+)[\"\u201c](?-i:[A-Z])|\(seed[),;]"
    r"|\bthe seeds?\s+(?:names|says|states|wants|considers|section|sections|page|heading|table)"
    r"|\bdecisions(?:\.md)?(?:[,:]\s*|\s+)[\"\u201c](?-i:[A-Z])|\(decisions\b|\bdecisions:"
    r"|\bdecisions page\b|\bthe (?:project's )?decisions\b", re.IGNORECASE)
SPEC_SENTENCE_RE = re.compile(r"(?:^|[.\s(])Seed,\s")  # "Seed, "Limits": ..." opening a sentence
NEAR = 1  # lines either side of an origin word where its rule's citation must stand


@dataclass(frozen=True)
class Rule:
    id: str
    page: str  # the page's stem: "usb"
    line: int
    heading: str  # the id the heading repeats ("" when the heading is missing)
    fields: Mapping[str, str]

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(TICKS_RE.findall(self.fields.get("Held by", "")))

    @property
    def tests(self) -> tuple[str, ...]:
        return tuple(TICKS_RE.findall(self.fields.get("Tested by", "")))

    @property
    def marked_pending(self) -> bool:
        return "(pending)" in self.fields.get("Tested by", "")

    def where(self) -> str:
        return f"docs/rules/{self.page}.md:{self.line} {self.id}"


@dataclass(frozen=True)
class Citation:
    path: str  # relative to the repository
    line: int
    rule: str
    problem: str = ""  # a malformed citation says what is wrong


def _outside_fences(lines: list[str]) -> Iterator[tuple[int, str]]:
    fenced = False
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def parse_page(page: str, text: str) -> list[Rule]:
    """The rules of one page, in order. A field runs on over indented continuation lines."""
    rules: list[Rule] = []
    start: tuple[str, int] | None = None  # the current rule's id and line
    heading = ""
    fields: dict[str, str] = {}
    field: str | None = None

    def close() -> None:
        if start is not None:
            rules.append(Rule(start[0], page, start[1], heading, dict(fields)))

    for n, line in _outside_fences(text.splitlines()):
        if m := ANCHOR_RE.match(line):
            close()
            start, heading, fields, field = (m.group(1), n), "", {}, None
        elif start is None:
            continue
        elif not heading and (h := HEADING_RE.match(line)):
            heading = h.group(1)
        elif f := FIELD_RE.match(line):
            field = f.group(1)
            fields[field] = f.group(2).strip()
        elif field and line.startswith("  ") and line.strip():
            fields[field] = (fields[field] + " " + line.strip()).strip()
        else:
            field = None
    close()
    return rules


@cache
def book() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for path in sorted(BOOK.glob("*.md")):
        if path.name != "README.md":
            rules.extend(parse_page(path.stem, path.read_text(encoding="utf-8")))
    return tuple(rules)


def scope(root: Path = REPO) -> Iterator[Path]:
    """The text files where rules are cited (the book's own pages and this file aside)."""
    for name in SCOPE_FILES:
        if (root / name).is_file():
            yield root / name
    for d in SCOPE_DIRS:
        for path in sorted((root / d).rglob("*")):
            rel = path.relative_to(root)
            if (not path.is_file() or SKIP_PARTS & set(rel.parts)
                    or any(p.endswith(".egg-info") for p in rel.parts)
                    or rel.parts[:2] == ("docs", "rules") or path == Path(__file__)
                    or path.stat().st_size > MAX_SCANNED):
                continue
            yield path


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # binary data is not prose


def citations_in(rel: str, text: str) -> list[Citation]:
    out: list[Citation] = []
    for n, line in enumerate(text.splitlines(), 1):
        if DANGLING_RE.search(line) or (DANGLING_PROSE_RE.match(line)
                                        and not rel.endswith((".yaml", ".yml"))):
            out.append(Citation(rel, n, "", "a citation names its ids on the line of `rules:`"))
        for m in CITE_RE.finditer(line):
            problem = ("a citation list must end on its line (repeat `rules:` on the next)"
                       if m.group(2) and not line[m.end():].strip() else "")
            out.extend(Citation(rel, n, r.strip(), problem) for r in m.group(1).split(","))
        if rel.endswith(".md"):
            out.extend(Citation(rel, n, m.group(2),
                                "" if m.group(2).split(".")[0] == m.group(1)
                                else f"links {m.group(2)} on page {m.group(1)}.md")
                       for m in LINK_RE.finditer(line))
    return out


@cache
def all_citations() -> tuple[Citation, ...]:
    out: list[Citation] = []
    for path in scope():
        text = _text(path)
        if text is not None:
            out.extend(citations_in(str(path.relative_to(REPO)), text))
    return tuple(out)


def functions_of(path: Path) -> frozenset[str]:
    """Every function a test file defines, at its top level or in a class."""
    return _functions(path.read_text(encoding="utf-8"))


@cache
def _functions(source: str) -> frozenset[str]:
    return frozenset(n.name for n in ast.walk(ast.parse(source))
                     if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))


# ---- the checks: each returns its problems, one line each -----------------------------------

def check_rules(rules: Iterable[Rule]) -> list[str]:
    """Each rule: a well-formed id on its own page, its heading, its four fields."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    for r in rules:
        if not ID_RE.match(r.id):
            problems.append(f"{r.where()}: an id is `page.name`: lowercase letters, digits, -")
        elif r.id.split(".")[0] != r.page:
            problems.append(f"{r.where()}: the id's page is not {r.page}")
        if r.id in seen:
            problems.append(f"{r.where()}: defined again (first at {seen[r.id]})")
        seen.setdefault(r.id, r.where())
        if r.heading != r.id:
            problems.append(f"{r.where()}: the heading `### {r.id}: ...` must follow the anchor")
        for name in ("Why", "Origin"):
            if not r.fields.get(name):
                problems.append(f"{r.where()}: no `- {name}:`")
        if not r.modules:
            problems.append(f"{r.where()}: no module under `- Held by:`")
        if not r.tests:
            problems.append(f"{r.where()}: no test under `- Tested by:`")
    return problems


def check_paths(rules: Iterable[Rule], root: Path, pending: frozenset[str]) -> list[str]:
    """Every named module exists; every named test function is defined in its file."""
    problems: list[str] = []
    for r in rules:
        problems.extend(f"{r.where()}: no module {m}" for m in r.modules
                        if not (root / m).is_file())
        for t in r.tests:
            path, _, func = t.partition("::")
            if not func or not path.startswith("tests/") or not path.endswith(".py"):
                problems.append(f"{r.where()}: a test is named `tests/....py::function`: {t}")
            elif r.id in pending:
                continue
            elif not (root / path).is_file():
                problems.append(f"{r.where()}: no test file {path}")
            elif func not in functions_of(root / path):
                problems.append(f"{r.where()}: {path} defines no {func}")
    return problems


def check_citations(rules: Iterable[Rule], cites: Iterable[Citation]) -> list[str]:
    known = {r.id for r in rules}
    return [f"{c.path}:{c.line}: " + (c.problem or f"cites {c.rule}, which no page of docs/rules "
                                                    "defines")
            for c in cites if c.problem or c.rule not in known]


def check_cited(rules: Iterable[Rule], cites: Iterable[Citation],
                pending: frozenset[str]) -> list[str]:
    """Every rule is cited by at least one of the modules it names."""
    by_rule: dict[str, set[str]] = {}
    for c in cites:
        by_rule.setdefault(c.rule, set()).add(c.path)
    return [f"{r.where()}: none of {', '.join(r.modules)} cites it (`rules: {r.id}`)"
            for r in rules
            if r.id not in pending and not by_rule.get(r.id, set()) & set(r.modules)]


def check_pending(rules: Iterable[Rule], cites: Iterable[Citation], root: Path,
                  pending: frozenset[str]) -> list[str]:
    """PENDING names rules of the book whose page says "(pending)", and only while they are."""
    rules = list(rules)
    problems = [f"PENDING names {p}, which no page defines" for p in
                sorted(pending - {r.id for r in rules})]
    cited = {(c.rule, c.path) for c in cites}
    for r in rules:
        if r.marked_pending != (r.id in pending):
            problems.append(f"{r.where()}: its page and PENDING disagree on whether it is pending")
        if r.id in pending and not check_paths([r], root, frozenset()) and any(
                (r.id, m) in cited for m in r.modules):
            problems.append(f"{r.where()}: its tests exist and its module cites it: take it off "
                            "PENDING and its page's (pending)")
    return problems


def check_index(readme: str, pages: Iterable[str]) -> list[str]:
    linked = set(re.findall(r"\]\(([a-z]+)\.md\)", readme))
    pages = set(pages)
    return ([f"docs/rules/README.md does not list {p}.md" for p in sorted(pages - linked)]
            + [f"docs/rules/README.md lists {p}.md, which does not exist"
               for p in sorted(linked - pages)])


def check_no_spec_citations(rel: str, text: str) -> list[str]:
    """No file names the specification's pages; "the seed"/"the decisions" only beside a rule."""
    lines = text.splitlines()
    cited = [bool(CITE_RE.search(line) or (rel.endswith(".md") and LINK_RE.search(line)))
             for line in lines]
    problems: list[str] = []
    for n, line in enumerate(lines):
        if m := SPEC_FILE_RE.search(line):
            problems.append(f"{rel}:{n + 1}: cites {m.group(0)}; cite the rule in docs/rules")
        elif ((m := SPEC_WORD_RE.search(line) or SPEC_SENTENCE_RE.search(line))
              and not any(cited[max(0, n - NEAR):n + NEAR + 1])):
            problems.append(f"{rel}:{n + 1}: names {m.group(0)!r} with no rule cited beside it")
    return problems


COPIED_RUN = 8  # words in a row that the book may not share with the specification's pages


def _words(text: str) -> list[str]:
    text = text.lower().replace("\u2019", "'").replace("`", "")
    return re.findall(r"[a-z0-9][a-z0-9'._/*-]*", text)


def _prose(page: str) -> str:
    """A page without its Origin items, which may quote the title of the section they name."""
    keep: list[str] = []
    origin = False
    for line in page.splitlines():
        origin = line.startswith("- Origin:") or (origin and line.startswith("  "))
        if not origin:
            keep.append(line)
    return "\n".join(keep)


def check_own_words(pages: Mapping[str, str], spec: str, run: int = COPIED_RUN) -> list[str]:
    """No run of ``run`` words of a page's prose is also a run of the specification's pages."""
    words = _words(spec)
    runs = {tuple(words[i:i + run]) for i in range(len(words) - run + 1)}
    problems: list[str] = []
    for name, text in pages.items():
        w = _words(_prose(text))
        problems.extend(f"docs/rules/{name}: copies {' '.join(w[i:i + run])!r}"
                        for i in range(len(w) - run + 1) if tuple(w[i:i + run]) in runs)
    return problems


# ---- the tests -------------------------------------------------------------------------------

def test_the_book_has_every_page_in_the_index() -> None:
    pages = [p.stem for p in BOOK.glob("*.md") if p.name != "README.md"]
    assert len(pages) >= 12
    assert check_index((BOOK / "README.md").read_text(encoding="utf-8"), pages) == []
    assert all(any(r.page == p for r in book()) for p in pages), "a page without rules"


def test_every_rule_is_complete() -> None:
    assert len(book()) > 50
    assert check_rules(book()) == []


def test_every_named_module_and_test_exists() -> None:
    assert check_paths(book(), REPO, PENDING) == []


def test_every_citation_names_a_rule_of_the_book() -> None:
    assert all_citations(), "no citation found at all: the scan is broken"
    assert check_citations(book(), all_citations()) == []


def test_links_between_pages_name_rules_of_the_book() -> None:
    cites = [c for p in sorted(BOOK.glob("*.md"))
             for c in citations_in(f"docs/rules/{p.name}", p.read_text(encoding="utf-8"))]
    assert cites
    assert check_citations(book(), cites) == []


def test_every_rule_is_cited_by_its_module() -> None:
    assert check_cited(book(), all_citations(), PENDING) == []


def test_pending_is_still_pending() -> None:
    assert check_pending(book(), all_citations(), REPO, PENDING) == []


def test_nothing_cites_the_specification_pages_by_name() -> None:
    problems = []
    for path in scope():
        text = _text(path)
        rel = str(path.relative_to(REPO))
        if text is None:
            continue
        found = check_no_spec_citations(rel, text)
        if rel not in OLD_CITATIONS_LEFT:
            problems.extend(found)
        elif not found:
            problems.append(f"{rel} cites no specification page: take it off OLD_CITATIONS_LEFT")
    problems.extend(f"OLD_CITATIONS_LEFT names {p}, which does not exist"
                    for p in OLD_CITATIONS_LEFT if not (REPO / p).is_file())
    assert problems == []


def test_the_book_is_in_its_own_words() -> None:
    """Paraphrased, not pasted: checked against the specification's pages where they are."""
    sources = [*sorted((SHARED / "seeds").glob("*.txt")), SHARED / "spec" / "decisions.md"]
    if not all(p.is_file() for p in sources) or len(sources) < 3:
        pytest.skip(f"the specification's pages are not beside the checkout ({SHARED})")
    spec = "\n".join(p.read_text(encoding="utf-8") for p in sources)
    pages = {p.name: p.read_text(encoding="utf-8") for p in sorted(BOOK.glob("*.md"))}
    assert check_own_words(pages, spec) == []


def check_module_table(text: str, modules: Iterable[str]) -> list[str]:
    """What docs/inventory.md's module table gets wrong: a module of the package (its
    ``__init__.py`` too) without a row, a row whose module is gone, a row that does not say what
    its module holds."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        cells = line.split("|")
        if line.startswith("| `") and len(cells) > 3:
            for m in re.findall(r"`([a-z_]+\.py)`", cells[1]):
                rows[m] = cells[2].strip()
    wanted = set(modules)
    return ([f"no row for {m}" for m in sorted(wanted - rows.keys())]
            + [f"a row for {m}, which the package does not hold"
               for m in sorted(rows.keys() - wanted)]
            + [f"the row of {m} does not say what it holds" for m, held in sorted(rows.items())
               if not held])


def test_the_inventory_module_table_names_every_module() -> None:
    """docs/inventory.md's table is where a reader looks a module up: it names all of them."""
    text = (REPO / "docs" / "inventory.md").read_text(encoding="utf-8")
    modules = {p.name for p in (REPO / "src" / "liken_devices" / "inventory").glob("*.py")}
    assert check_module_table(text, modules) == []


# ---- each check finds what it is for ---------------------------------------------------------

GOOD_PAGE = """\
# Things

```markdown
<a id="things.in-a-fence"></a>
```

<a id="things.one"></a>
### things.one: one thing

The rule.

- Why: because.
- Origin: a decision.
- Held by: `src/a.py`,
  `src/b.py`
- Tested by: `tests/test_a.py::test_one`
"""


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "src" / "a.py").write_text("# rules: things.one\n")
    (tmp_path / "src" / "b.py").write_text("")
    (tmp_path / "tests" / "test_a.py").write_text("class T:\n    def test_one(self): ...\n")
    return tmp_path


def test_a_page_parses_with_continuations_and_fences() -> None:
    (rule,) = parse_page("things", GOOD_PAGE)
    assert rule.id == "things.one" and rule.heading == "things.one" and rule.line == 7
    assert rule.modules == ("src/a.py", "src/b.py")
    assert rule.tests == ("tests/test_a.py::test_one",)
    assert check_rules([rule]) == []


def test_a_malformed_rule_is_found() -> None:
    bad = GOOD_PAGE.replace("### things.one", "### thing.one").replace("- Why: because.\n", "")
    problems = check_rules(parse_page("things", bad) + parse_page("other", GOOD_PAGE))
    assert any("heading" in p for p in problems)
    assert any("no `- Why:`" in p for p in problems)
    assert any("the id's page is not other" in p for p in problems)


def test_a_missing_module_or_test_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (rule,) = parse_page("things", GOOD_PAGE)
    assert check_paths([rule], root, frozenset()) == []
    (root / "src" / "b.py").unlink()
    (root / "tests" / "test_a.py").write_text("def test_other(): ...\n")
    problems = check_paths([rule], root, frozenset())
    assert any("no module src/b.py" in p for p in problems)
    assert any("defines no test_one" in p for p in problems)
    assert check_paths([rule], root, frozenset({"things.one"})) == [
        p for p in problems if "no module" in p]


def test_a_citation_of_an_unknown_rule_or_a_bad_link_is_found() -> None:
    (rule,) = parse_page("things", GOOD_PAGE)
    cites = citations_in("src/x.py", "x = 1  # (rules: things.one, things.two)\n"
                                     "# rules: things.one,\n# (rules:\n# things.one)\n")
    cites += citations_in("docs/x.md", "see [it](rules/other.md#things.one)\n")
    assert [c.rule for c in cites] == ["things.one", "things.two", "things.one", "", "things.one"]
    problems = check_citations([rule], cites)
    assert problems[0] == "src/x.py:1: cites things.two, which no page of docs/rules defines"
    assert "must end on its line" in problems[1] and "on the line of `rules:`" in problems[2]
    assert "on page other.md" in problems[3]
    assert citations_in("src/y.py", "def f(rules: list[str]) -> None:\n    for r in rules:\n") == []
    assert citations_in("deploy/rbac.yaml", "rules:\n- apiGroups: [\"\"]\n") == []


def test_a_rule_its_module_does_not_cite_is_found() -> None:
    (rule,) = parse_page("things", GOOD_PAGE)
    elsewhere = [Citation("tests/test_a.py", 1, "things.one")]
    assert check_cited([rule], elsewhere, frozenset()) == [
        "docs/rules/things.md:7 things.one: none of src/a.py, src/b.py cites it "
        "(`rules: things.one`)"]
    assert check_cited([rule], [Citation("src/b.py", 3, "things.one")], frozenset()) == []
    assert check_cited([rule], elsewhere, frozenset({"things.one"})) == []


def test_a_module_the_table_lacks_or_a_stale_row_is_found() -> None:
    table = ("| module | what it holds | rules |\n|---|---|---|\n"
             "| `a.py`, `b.py` | the a and the b | [things.one](rules/things.md#things.one) |\n"
             "| `gone.py` |  | |\n"
             "| `no driver` | not a module's row |\n")
    assert check_module_table(table, {"a.py", "b.py"} | {"gone.py"}) == [
        "the row of gone.py does not say what it holds"]
    assert check_module_table(table, {"__init__.py", "a.py", "b.py", "c.py"}) == [
        "no row for __init__.py", "no row for c.py",
        "a row for gone.py, which the package does not hold",
        "the row of gone.py does not say what it holds"]


def test_pending_must_agree_with_the_page_and_be_cleared(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (rule,) = parse_page("things", GOOD_PAGE)
    cite = [Citation("src/a.py", 1, "things.one")]
    one = frozenset({"things.one"})
    assert any("disagree" in p for p in check_pending([rule], cite, root, one))
    (marked,) = parse_page("things", GOOD_PAGE.replace("test_one`", "test_one` (pending)"))
    assert any("take it off" in p for p in
               check_pending([marked], cite, root, frozenset({"things.one"})))
    assert check_pending([marked], [], root, frozenset({"things.one"})) == []
    assert check_pending([], [], root, frozenset({"gone.rule"})) == [
        "PENDING names gone.rule, which no page defines"]


def test_the_index_must_list_every_page() -> None:
    assert check_index("1. [A](a.md)\n2. [C](c.md)\n", ["a", "b"]) == [
        "docs/rules/README.md does not list b.md",
        "docs/rules/README.md lists c.md, which does not exist"]


def test_citations_of_the_specification_pages_are_found() -> None:
    text = ('"""decisions.md, "Names": cut at 63."""\n'
            "x = 1\n\n\n\n"
            '# the seed\'s table\n\n\n\n'
            '# origin: seed "Limits" (rules: limits.cap)\n'
            "random.seed(4)\n"
            "``--sample N --seed S`` runs N mutants chosen by the seed (what the floor does).\n"
            'x = choose(t, sample, seed, True) or {"seed": seed, "to": 1}  # seed {seed}: a seed\n'
            '\n\n\n# (decisions, "Names")\n'
            'Seed, "Limits": at most 128.\n'
            "the two the seed names\n")
    assert [p.split(": ", 1)[0] for p in check_no_spec_citations("src/x.py", text)] == [
        "src/x.py:1", "src/x.py:6", "src/x.py:17", "src/x.py:18", "src/x.py:19"]


@pytest.mark.parametrize("word", ["devices.txt", "render-node-capabilities.txt",
                                  "../shared/seeds/devices.txt", "../shared/spec/x"])
def test_each_spec_file_name_is_refused(word: str) -> None:
    assert check_no_spec_citations("docs/x.md", f"see {word} (rules: limits.cap)\n")


def test_a_pasted_sentence_is_found_and_an_origin_may_quote() -> None:
    spec = "A name stops at 63 characters, the limit of a DNS label, and is cut at the base."
    page = ("A name stops at 63 characters, the limit of a DNS label, says the rule.\n"
            "- Origin: \"stops at 63 characters, the limit of a DNS label\"\n")
    problems = check_own_words({"names.md": page}, spec)
    assert len(problems) == 5  # every run of eight words of the pasted part
    assert problems[0] == "docs/rules/names.md: copies 'a name stops at 63 characters the limit'"
    assert check_own_words({"names.md": page.splitlines()[1]}, spec) == []
