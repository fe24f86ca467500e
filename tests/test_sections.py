"""Every citation of a section names a heading its page has (docs/rules/README.md, "How code
cites a rule").

Code, tests, deploy files and pages point a reader at a section as ``docs/page.md, "Heading"``
(also ``docs/page.md "Heading"``, ``docs/page.md ("Heading")``, ``README, "Heading"``, the page
in backticks, and ``docs/a.md and docs/b.md, "Heading"``; a page in ``docs/`` may name a
sibling page without the folder). A heading renamed or a section merged leaves such a pointer
aiming at nothing, and no link checker sees it, so this one does: the quoted text must be, case
and all, a Markdown heading of that page (``#`` to ``######``, outside code fences), either its
whole text or its title, the part before the first ``" ("`` or ``": "``; backticks do not count.
A citation may wrap onto the next lines of its comment, docstring or page, and a Python string
may be split in two literals.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.test_rulebook import BOOK, REPO, _outside_fences, _text, scope

# The page(s): ``docs/x.md``, ``README``, or a bare ``x.md`` (a sibling of the citing page).
PAGE = r"`?(?:README|[A-Za-z][\w/-]*\.md)`?"
CITE_RE = re.compile(
    rf"(?<![\w/.-])({PAGE}(?:\s+and\s+{PAGE})*)(?:,\s*|\s+\(|\s+)[\"\u201c]([^\"\u201d]*)"
    r"([\"\u201d])?")
HEADING_RE = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
TITLE_RE = re.compile(r" \(|: ")
# What opens a line of a comment or a docstring's list, dropped when lines are joined.
LEAD_RE = re.compile(r"^\s*(?:#+|//|\*(?=\s))?\s*")
WINDOW = 3  # lines: a citation starts on the first and its heading is closed by the last
LONGEST = 120  # characters of a heading's text


@dataclass(frozen=True)
class Section:
    path: str  # the citing file, relative to the repository
    line: int
    page: str  # the cited page, relative to the repository
    heading: str


def headings(text: str) -> frozenset[str]:
    """The texts a citation may quote for the page: each heading whole and its title."""
    out: set[str] = set()
    for _, line in _outside_fences(text.splitlines()):
        if m := HEADING_RE.match(line):
            whole = m.group(1).replace("`", "")
            out.add(whole)
            out.add(TITLE_RE.split(whole, maxsplit=1)[0])
    return frozenset(out)


def _page(rel: str, name: str, root: Path) -> str:
    """The cited page, relative to the repository: a path with a folder is; ``README`` is the
    repository's; a bare name is the citing page's sibling, else a page of ``docs/``."""
    if name == "README":
        return "README.md"
    if "/" in name:
        return name
    beside = (Path(rel).parent / name).as_posix()
    if (root / beside).is_file() or not (root / "docs" / name).is_file():
        return beside
    return f"docs/{name}"


def _joined(lines: list[str], n: int) -> str:
    """Line ``n`` and the next ones, as one line of prose: comment marks gone, and a string
    literal closed at a line's end joined to the one that opens the next."""
    out = lines[n].strip()
    for line in lines[n + 1:n + WINDOW]:
        nxt = line.strip()
        if out.endswith('"') and nxt.startswith('"') and not out.endswith('"""'):
            out = out[:-1] + nxt[1:]
        else:
            out = out + " " + LEAD_RE.sub("", line, count=1).strip()
    return out.replace('\\"', '"')


def sections_in(rel: str, text: str, root: Path = REPO) -> Iterator[Section | str]:
    """The citations of sections in one file; a citation whose quote does not close within
    :data:`WINDOW` lines is a problem of its own (a string)."""
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if not re.search(r"(?:README|\.md)`?(?:[\s,(]|$)", line):
            continue
        joined = _joined(lines, n)
        for m in CITE_RE.finditer(joined):
            if m.start() >= len(line.strip()):
                break  # it starts on a later line, which reports it
            if not m.group(3) or len(m.group(2)) > LONGEST:
                yield f"{rel}:{n + 1}: a citation of {m.group(1)} whose heading is not closed"
                continue
            cited = " ".join(m.group(2).replace("`", "").split())
            for name in re.split(r"\s+and\s+", m.group(1).replace("`", "")):
                yield Section(rel, n + 1, _page(rel, name, root), cited)


def check_sections(found: Iterable[Section | str], root: Path) -> list[str]:
    """Each cited page exists and has the heading the citation quotes."""
    problems: list[str] = []
    pages: dict[str, frozenset[str] | None] = {}
    for s in found:
        if isinstance(s, str):
            problems.append(s)
            continue
        if s.page not in pages:
            path = root / s.page
            pages[s.page] = headings(path.read_text(encoding="utf-8")) if path.is_file() else None
        known = pages[s.page]
        if known is None:
            problems.append(f"{s.path}:{s.line}: cites {s.page}, which does not exist")
        elif s.heading not in known:
            problems.append(f'{s.path}:{s.line}: cites {s.page}, "{s.heading}", a heading the '
                            "page does not have")
    return problems


def files(root: Path = REPO) -> Iterator[Path]:
    """Where sections are cited: the rulebook's scope, the rulebook itself, not this file."""
    yield from (p for p in scope(root) if p != Path(__file__))
    yield from sorted((root / BOOK.relative_to(REPO)).glob("*.md"))


@cache
def all_sections() -> tuple[Section | str, ...]:
    out: list[Section | str] = []
    for path in files():
        text = _text(path)
        if text is not None:
            out.extend(sections_in(str(path.relative_to(REPO)), text))
    return tuple(out)


def test_every_cited_section_is_a_heading_of_its_page() -> None:
    found = all_sections()
    assert sum(isinstance(s, Section) for s in found) > 80, "the scan finds too few: it is broken"
    assert check_sections(found, REPO) == []


# ---- the check finds what it is for -----------------------------------------------------------

PAGE_TEXT = """\
# A page

## Bad input

### Metrics and health (`--metrics-port`)

## `fleet`: the cluster's hardware

```sh
# Not a heading
```
"""


def _site(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(PAGE_TEXT)
    (tmp_path / "README.md").write_text("# Project\n\n## Layout\n")
    return tmp_path


def test_a_heading_is_quoted_whole_or_by_its_title() -> None:
    assert headings(PAGE_TEXT) == {
        "A page", "Bad input", "Metrics and health (--metrics-port)", "Metrics and health",
        "fleet: the cluster's hardware", "fleet"}


def test_each_form_of_citation_is_read() -> None:
    text = ('"""Hostile (docs/page.md, "Bad input"; README, "Layout").\n'
            "# the port (docs/page.md and docs/other.md, \"Metrics and\n"
            '#   health"); the view (docs/page.md "fleet")\n'
            '    help="the state (docs/page.md, "\n'
            '         "\\"Bad input\\")")\n'
            'x = read("docs/page.md"), "not a citation"\n')
    assert list(sections_in("src/x.py", text)) == [
        Section("src/x.py", 1, "docs/page.md", "Bad input"),
        Section("src/x.py", 1, "README.md", "Layout"),
        Section("src/x.py", 2, "docs/page.md", "Metrics and health"),
        Section("src/x.py", 2, "docs/other.md", "Metrics and health"),
        Section("src/x.py", 3, "docs/page.md", "fleet"),
        Section("src/x.py", 4, "docs/page.md", "Bad input")]
    assert list(sections_in("docs/guide.md", "see page.md (\u201cfleet\u201d) and\n"
                                             '`docs/page.md` ("Bad input")\n')) == [
        Section("docs/guide.md", 1, "docs/page.md", "fleet"),
        Section("docs/guide.md", 2, "docs/page.md", "Bad input")]


def test_a_broken_citation_is_found(tmp_path: Path) -> None:
    root = _site(tmp_path)
    good = ('# (docs/page.md, "Bad input"), (docs/page.md, "Metrics and health"),\n'
            '# (docs/page.md, "Metrics and health (--metrics-port)"), (README, "Layout")\n')
    assert check_sections(sections_in("src/a.py", good), root) == []
    bad = ('# (docs/page.md, "bad input") (docs/page.md, "Not a heading")\n'
           '# (docs/page.md, "Bad") (docs/gone.md, "Bad input") (docs/page.md, "Bad input\n'
           "#\n#\n#\n")
    assert check_sections(sections_in("src/b.py", bad), root) == [
        'src/b.py:1: cites docs/page.md, "bad input", a heading the page does not have',
        'src/b.py:1: cites docs/page.md, "Not a heading", a heading the page does not have',
        'src/b.py:2: cites docs/page.md, "Bad", a heading the page does not have',
        "src/b.py:2: cites docs/gone.md, which does not exist",
        "src/b.py:2: a citation of docs/page.md whose heading is not closed"]


def test_a_seeded_bad_citation_in_a_copy_of_the_repository_fails(tmp_path: Path) -> None:
    """The whole check, on a copy of the docs and of one module with one heading misnamed."""
    root = tmp_path
    for rel in ["README.md", *(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text((REPO / rel).read_text(encoding="utf-8"), encoding="utf-8")
    module = "src/liken_devices/plugin/cdi.py"
    text = (REPO / module).read_text(encoding="utf-8")
    assert 'docs/plugin.md, "Bad input"' in text
    found = list(sections_in(module, text, root))
    assert found and check_sections(found, root) == []
    seeded = text.replace('docs/plugin.md, "Bad input"', 'docs/plugin.md, "Bad inputs"', 1)
    assert [p.split(": ", 1)[1] for p in check_sections(sections_in(module, seeded, root), root)
            ] == ['cites docs/plugin.md, "Bad inputs", a heading the page does not have']
