"""A claim's UID is parsed where it enters (``ClaimRef.parse``), by the one pattern of a
Kubernetes UID that the CDI spec's file name and ``--pod-uid`` check too."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liken_devices.plugin import cdi
from liken_devices.plugin.claimref import ClaimRef, UidError, parse_uid

UID = "0f8fad5b-d9cb-469f-a165-70867728950e"
HOSTILE = ["", "../x", "a/b", "-lead", "trail-", "x" * 65, "a b", f"{UID}\n", "\u0661" * 8,
           "é" * 8, "a\x00b"]


def test_a_claim_of_the_kubelet_parses() -> None:
    ref = ClaimRef.parse("default", UID, "claim-1")
    assert (ref.namespace, ref.uid, ref.name) == ("default", UID, "claim-1")
    assert ref == ClaimRef("default", UID, "claim-1")
    with pytest.raises(AttributeError):
        ref.uid = "x"  # type: ignore[misc]


@pytest.mark.parametrize("uid", HOSTILE)
def test_a_uid_that_is_not_one_is_refused_in_one_line(uid: str) -> None:
    with pytest.raises(UidError) as err:
        ClaimRef.parse("default", uid, "claim-1")
    assert str(err.value) == f"claim UID {uid[:80]!r} is not a UID (letters, digits and '-')"
    assert "\n" not in str(err.value)
    with pytest.raises(UidError, match=r"^pod UID "):
        parse_uid(uid, "pod UID")


def test_a_long_uid_is_shown_cut() -> None:
    with pytest.raises(UidError) as err:
        parse_uid("a" * 1000)
    assert len(str(err.value)) < 200


@given(st.one_of(st.text(max_size=70), st.uuids().map(str),
                 st.text("0123456789abcdefABCDEF-", max_size=70)))
def test_one_pattern_where_it_enters_and_where_it_becomes_a_file_name(text: str) -> None:
    try:
        parse_uid(text)
        entered = True
    except UidError:
        entered = False
    try:
        path = cdi.spec_path(Path("/run/cdi"), text)
        named = True
    except cdi.SpecError:
        named = False
    assert entered == named
    if named:
        assert path.parent == Path("/run/cdi") and path.name == f"liken.sh-{text}.json"


def test_every_uuid_is_a_uid() -> None:
    for _ in range(100):
        assert parse_uid(str(uuid.uuid4()))
