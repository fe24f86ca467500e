"""What reaches a terminal is cleaned (liken_devices.terminal): a property over arbitrary text,
then every command that prints a node's, a Machine's or an API server's strings, and the log.
``-o json``/``-o yaml`` stay exact."""

from __future__ import annotations

import io
import json
import logging
import unicodedata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from liken_devices import logs
from liken_devices.cli import main
from liken_devices.inventory.limits import DRIVER
from liken_devices.match.cli import kubectl_main
from liken_devices.slices import make_slice
from liken_devices.terminal import clean
from liken_devices.views import report_text, table
from tests.support.fakeapi import FakeApiServer
from tests.support.hostile import examples

# What a terminal acts on, named one by one (not derived from the module under test): C0 and C1
# controls and DEL, the line and paragraph separators, the bidi embeddings, overrides, isolates
# and marks, the zero-width space, joiners and word joiner, the byte-order mark, the soft hyphen,
# the Hangul fillers.
ACTING = frozenset(
    [chr(c) for c in range(0x20)] + [chr(c) for c in range(0x7F, 0xA0)]
    + list("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
           "\u061c\u200b\u200c\u200d\u2060\ufeff\u00ad\u115f\u1160\u3164\uffa0"))
# Unicode's categories of what is not drawn as text.
UNDRAWN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}

# What a hostile node writes: set the window title, ring, clear the screen, return to the line's
# start, reverse the text, hide a character, forge a line.
TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J\x1b[H"
HOSTILE = [TITLE, CLEAR, "ok\rFAKE", "abc\u202eevil", "a\u200bdmin", "x\ny", "\x9b31m",
           "\u2066iso\u2069", "line\u2028two"]


def safe(text: str) -> bool:
    return not any(ch in ACTING or unicodedata.category(ch) in UNDRAWN for ch in text)


@pytest.mark.fuzz
@settings(max_examples=examples(300), deadline=None)
@given(st.text())
@example("".join(HOSTILE))
@example("\udc80\U000e0041\U0010fffd")
def test_clean_leaves_nothing_a_terminal_acts_on_and_loses_nothing(text: str) -> None:
    out = clean(text)
    assert safe(out)
    assert "\n" not in out and "\r" not in out
    if "\\" not in text:
        # Every escape reads back as the character it stands for.
        assert out.encode("ascii", "backslashreplace").decode("unicode_escape") == text
    if text.isascii() and all(0x20 <= ord(c) < 0x7F for c in text):
        assert out == text


def test_clean_spells_each_character_as_its_escape() -> None:
    assert clean("ok\x1b[31m red\u202eevil\u2028fake line\x85") == (
        "ok\\x1b[31m red\\u202eevil\\u2028fake line\\x85")
    assert clean("a\u200bb\u3164c\r\n") == "a\\u200bb\\u3164c\\r\\n"
    words = "Intel iHD driver - 25.2.3 (é, ü, 日本)"
    assert clean(words) == words


def test_clean_bounds_the_length() -> None:
    assert clean("x" * 600, 10) == "x" * 10 + "..."
    assert clean("x" * 10, 10) == "x" * 10
    assert clean("\x1b" * 600, 10) == "\\x1b\\x1b\\x" + "..."


# ---- fleet and kubectl liken against an API server whose objects carry escapes ---------------


def _hostile_cluster(api: FakeApiServer) -> None:
    uid = api.add_node("n1")["metadata"]["uid"]
    attrs = {"class": "smart-card", "vendor": TITLE, "product": CLEAR, "serial": "ok\rFAKE",
             "address": "abc\u202eevil", "name": "a\u200bdmin", "subsystem": "x\ny"}
    api.put_object("resourceslices", make_slice("n1", DRIVER, [
        {"name": "usb-1-2", "attributes": {k: {"string": v} for k, v in attrs.items()}}],
        owner_uid=uid))
    api.put_object("machines", {
        "apiVersion": "liken.sh/v1alpha1", "kind": "Machine", "metadata": {"name": "n1"},
        "spec": {}, "status": {
            "hardware": {"unclaimed": [{"bus": "pci\x1b[5m", "name": "Wi-Fi\u2066 AX200",
                                        "candidates": ["iwl\x07wifi"], "message": "m"}]},
            "conditions": [{"type": "FactsPublished", "status": "False",
                            "reason": "FactsUnreadable", "message": "gone\x1b]52;c;AAAA\x07"}]}})
    api.add_claim("team\u202e", "reader\x1b[1m", results=[{"device": "usb-1-2"}], node="n1")


@pytest.mark.parametrize("entry", ["liken-devices", "kubectl-liken"])
@pytest.mark.parametrize("output", ["table", "wide"])
def test_fleet_shows_a_nodes_escapes_escaped(api: FakeApiServer, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str], entry: str,
                                             output: str) -> None:
    _hostile_cluster(api)
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    argv = ["fleet", "--kubeconfig", str(kubeconfig), "-o", output]
    rc = main(argv) if entry == "liken-devices" else kubectl_main(argv)
    out = capsys.readouterr().out
    assert rc == 0
    assert all(safe(line) for line in out.splitlines()), out
    assert "\\x1b]52;c;AAAA\\x07" in out  # the facts message, as the Machine said it
    assert "Wi-Fi\\u2066 AX200" in out and "iwl\\x07wifi" in out
    assert "team\\u202e/reader\\x1b[1m" in out
    if output == "wide":
        assert "\\x1b]0;pwned\\x07" in out and "ok\\rFAKE" in out and "abc\\u202eevil" in out


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_fleet_json_and_yaml_stay_exact(api: FakeApiServer, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str], output: str) -> None:
    _hostile_cluster(api)
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    assert main(["fleet", "--kubeconfig", str(kubeconfig), "-o", output]) == 0
    text = capsys.readouterr().out
    data = json.loads(text) if output == "json" else yaml.safe_load(text)
    [dev] = data["devices"]
    assert dev["attributes"]["vendor"] == {"string": TITLE}
    assert dev["attributes"]["address"] == {"string": "abc\u202eevil"}
    assert dev["heldBy"] == ["team\u202e/reader\x1b[1m"]
    assert data["unclaimed"][0]["candidates"] == ["iwl\x07wifi"]


# ---- match's text output -----------------------------------------------------------------------


def _slices_file(tmp_path: Path) -> Path:
    path = tmp_path / "slices.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        make_slice("n1", DRIVER, [{"name": "usb-1-2", "attributes": {
            "class": {"string": "smart-card"}, "serial": {"string": TITLE + CLEAR}}}])]}))
    return path


def _claim_file(tmp_path: Path) -> Path:
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump_all([
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": "readers"},
         "spec": {"selectors": [{"cel": {"expression":
                                         'device.attributes["liken.sh"].serial == "R1"'}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "mine\u202e", "namespace": "team-b"},
         "spec": {"devices": {"requests": [{"name": "r", "exactly": {
             "deviceClassName": "readers"}}]}}}]))
    return path


def test_match_text_shows_a_slices_escapes_escaped(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["match", "-f", str(_claim_file(tmp_path)), "--slices",
               str(_slices_file(tmp_path)), "--node", "n1"])
    out = capsys.readouterr().out
    assert rc == 1
    assert all(safe(line) for line in out.splitlines()), out
    assert "mine\\u202e" in out


def test_match_json_stays_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["match", "-f", str(_claim_file(tmp_path)), "--slices",
               str(_slices_file(tmp_path)), "--node", "n1", "-o", "json"])
    text = capsys.readouterr().out
    assert rc == 1
    [asked] = json.loads(text)["nodes"][0]["asked"]
    assert asked["what"] == "ResourceClaim team-b/mine\u202e"  # as the file says it


# ---- scan's table and report's comments ---------------------------------------------------------


def _device(dev: str, **attrs: str) -> Any:
    return SimpleNamespace(name=dev, attributes=attrs, shareable=False,
                           nodes=[SimpleNamespace(path="/dev/tty\x1b[2J")])


def test_scan_table_cleans_every_cell() -> None:
    inv = SimpleNamespace(devices=[_device("usb-1-2", subsystem="tty", driver="cdc\u202eacm",
                                           name=TITLE)], overflow=())
    out = table(inv)  # type: ignore[arg-type]
    assert all(safe(line) for line in out.splitlines()), out
    assert "cdc\\u202eacm" in out and "/dev/tty\\x1b[2J" in out and "\\x1b]0;pwned\\x07" in out


def test_report_comments_cannot_be_ended_by_the_hardwares_words() -> None:
    unclaimed = SimpleNamespace(bus="usb", address="1-2", name="Reader\nspec:\n  modules: [evil]",
                                class_="x\x1b[2J", modalias="usb:v1\u202e", candidates=["m\r"])
    inv = SimpleNamespace(unclaimed=[unclaimed], catalog_error=None)
    out = report_text("n1", inv, [], [])  # type: ignore[arg-type]
    assert all(safe(line) for line in out.splitlines()), out
    doc = yaml.safe_load(out)
    assert doc["spec"] == {"modules": None}  # the name stayed inside its comment


# ---- the log ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_log_line_shows_escapes_escaped(fmt: str) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter() if fmt == "json" else logs.TextFormatter())
    logger = logging.getLogger("liken_devices.test_terminal")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("slice of %s: %s", "n1\r2026-01-01 INFO forged", TITLE + "\u202e")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert text.count("\n") == 1
    line = json.loads(text)["msg"] if fmt == "json" else text.rstrip("\n")
    assert safe(line)
    assert "n1\\r2026-01-01 INFO forged" in line and "\\x1b]0;pwned\\x07\\u202e" in line
