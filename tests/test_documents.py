"""The one bounded reader for the YAML and JSON files users hand ``match`` and ``claim-for``
(and ``kubectl liken``): each reproduction of a reader left to itself is refused in one line
with exit 2, within a memory limit and a deadline, and ordinary files read as PyYAML's safe
loader reads them.

Reproductions: a 600-byte alias bomb (a minute and 1.8 GB before), 50,000-deep nesting (a
SIGSEGV in the C composer), a FIFO (a read that never ends), a 16 MiB slices file (3 GB).
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.documents import Limits, parse
from liken_devices.errors import InputError
from tests.support.hostile import assert_fails_closed, examples, run_cli

SLICE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: n{i}-liken.sh}}
spec:
  driver: liken.sh
  nodeName: n{i}
  pool: {{name: n{i}, generation: 1, resourceSliceCount: 1}}
  devices:
  - name: usb-1-2-1-0
    attributes:
      bus: {{string: usb}}
      vendor: {{string: "10c4"}}
      serial: {{string: "S{i}"}}
      subsystem: {{string: tty}}
"""

CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: serial}
spec:
  selectors:
  - cel: {expression: 'device.driver == "liken.sh"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c, namespace: default}
spec:
  devices:
    requests:
    - {name: s, exactly: {deviceClassName: serial}}
"""


def alias_bomb() -> str:
    """Billion laughs: nine levels of ten aliases each, 10**9 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in "bcdefghi":
        prev = chr(ord(level) - 1)
        lines.append(f"{level}: &{level} [" + ",".join(f"*{prev}" for _ in range(10)) + "]")
    return "\n".join(lines) + "\n"


def match(tmp_path: Path, claim: str | None = None, slices: str | None = None,
          **kw: Any) -> Any:
    c = tmp_path / "claim.yaml"
    c.write_text(claim if claim is not None else CLAIM)
    s = tmp_path / "slices.yaml"
    if slices is not None:
        s.write_text(slices)
    elif not s.exists():
        s.write_text(SLICE.format(i=1))
    return run_cli(["match", "-f", str(c), "--slices", str(s)], **kw)


pytestmark = pytest.mark.fuzz


def test_the_alias_bomb_is_refused(tmp_path: Path) -> None:
    bomb = alias_bomb()
    assert len(bomb.encode()) <= 600
    for claim, slices in ((bomb, None), (None, bomb)):
        out = match(tmp_path, claim, slices, memory=256 << 20, deadline=60)
        assert_fails_closed(out, allowed=(2,))
        assert "aliases expanded" in out.stderr


@pytest.mark.parametrize("text", ["[" * 50_000 + "]" * 50_000,
                                  "a:\n" + "".join(" " * i + "- \n" for i in range(2000)),
                                  "{" * 50_000 + "}" * 50_000,
                                  '{"a": ' * 50_000 + "1" + "}" * 50_000])
def test_deep_nesting_is_refused(tmp_path: Path, text: str) -> None:
    out = match(tmp_path, text, None, deadline=60)
    assert_fails_closed(out, allowed=(2,))
    assert "nested deeper than" in out.stderr or "not valid YAML" in out.stderr


def test_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = run_cli(["match", "-f", str(fifo), "--slices", str(fifo)], deadline=20)
    assert_fails_closed(out, allowed=(2,))
    assert "not a regular file" in out.stderr
    out = run_cli(["claim-for", "usb-1-2-1-0", "--slices", str(fifo)], deadline=20)
    assert_fails_closed(out, allowed=(2,))


def test_a_device_node_is_refused(tmp_path: Path) -> None:
    out = run_cli(["match", "-f", "/dev/zero", "--slices", "/dev/zero"], deadline=20)
    assert_fails_closed(out, allowed=(2,))
    assert "not a regular file" in out.stderr


@pytest.mark.slow
def test_a_16_mib_slices_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """A fleet's worth of slices, within 640 MiB of address space (it took 3 GB)."""
    parts = ["apiVersion: v1\nkind: List\nitems:\n"]
    size, i = 0, 0
    while size < 16 << 20:
        item = "- " + SLICE.format(i=i).replace("\n", "\n  ").rstrip() + "\n"
        parts.append(item)
        size += len(item)
        i += 1
    slices = tmp_path / "slices.yaml"
    slices.write_text("".join(parts))
    out = match(tmp_path, slices=slices.read_text(), memory=640 << 20, deadline=900)
    assert_fails_closed(out, allowed=(0, 1))
    assert f"allocatable on {i} of {i} nodes" in out.stdout


def test_a_file_over_the_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "slices.yaml"
    with open(big, "wb") as f:
        f.truncate(33 << 20)
    out = run_cli(["match", "-f", str(big), "--slices", str(big)], memory=128 << 20)
    assert_fails_closed(out, allowed=(2,))
    assert "larger than" in out.stderr


def test_standard_input_is_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from liken_devices.documents import read_source

    class In:
        buffer = io.BytesIO(b"x" * 100)

    monkeypatch.setattr(sys, "stdin", In)
    with pytest.raises(InputError, match="standard input is larger than 10 bytes"):
        read_source("-", 10, "file")


# -- what it reads, against PyYAML's safe loader ----------------------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=False), st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=examples(100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(VALUES, min_size=1, max_size=3), flow=st.booleans())
def test_ordinary_documents_read_as_the_safe_loader_reads_them(docs: list[Any],
                                                               flow: bool) -> None:
    text = yaml.safe_dump_all(docs, default_flow_style=flow)
    assert parse(text, Limits(bytes=1 << 20)) == list(yaml.safe_load_all(text))


def test_anchors_merges_and_json() -> None:
    text = "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\nlist: [*b, *b]\n"
    assert parse(text, Limits(bytes=1 << 20)) == list(yaml.safe_load_all(text))
    assert parse('{"a": [1, 2.5, "x", null, true]}', Limits(bytes=100)) == \
        [{"a": [1, 2.5, "x", None, True]}]
    with pytest.raises(InputError, match="anchors and aliases"):
        parse(text, Limits(bytes=1 << 20, aliases=False))
    with pytest.raises(InputError, match="appears twice"):
        parse("a: 1\na: 2\n", Limits(bytes=100, unique_keys=True))
    with pytest.raises(InputError, match="found another document"):
        parse("a\n---\nb\n---\nc\n", Limits(bytes=100, documents=2))
    with pytest.raises(InputError, match="not accepted"):
        parse("!!python/object:os.system {}\n", Limits(bytes=100))


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(
    lambda b: b.decode("latin-1"))))
def test_any_text_is_values_or_one_line(text: str) -> None:
    try:
        parse(text, Limits(bytes=1 << 16, depth=16, values=10_000))
    except InputError as exc:  # the one failure it may have, with a reason
        assert str(exc)
