"""Bounded list calls (kube/listing.py) against the loopback API server, healthy and hostile:
pages that never end, a repeated ``continue`` token, a body that never ends, a body trickled a
byte at a time. Each command (``fleet``, ``kubectl liken match``) exits 2 with one line, within
the hostile-input harness's memory and time bounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liken_devices.inventory.limits import DRIVER
from liken_devices.kube.client import ApiError, Resources
from liken_devices.kube.listing import Budget, list_pages
from liken_devices.match.cli import kubectl_main
from liken_devices.slices import make_slice
from tests.support.fakeapi import FakeApiServer
from tests.support.hostile import assert_fails_closed, examples, run_cli


def _nodes(api: FakeApiServer, count: int) -> None:
    for i in range(count):
        node = f"node-{i:03d}"
        uid = api.add_node(node)["metadata"]["uid"]
        api.put_object("resourceslices", make_slice(node, DRIVER, [
            {"name": "usb-1-2", "attributes": {"serial": {"string": f"S{i}"}}}], owner_uid=uid))


def test_a_healthy_list_reads_every_page(api: FakeApiServer, client: Any) -> None:
    _nodes(api, 23)
    budget = Budget()
    names = [n["metadata"]["name"] for n in list_pages(client, Resources.node(), budget, page=5)]
    assert names == [f"node-{i:03d}" for i in range(23)]
    assert budget.pages_read == 5  # 5+5+5+5+3
    assert 0 < budget.bytes_read < 1 << 20


def test_a_refusal_keeps_its_status(api: FakeApiServer, client: Any) -> None:
    api.fail_next(403, path_contains="nodes")
    with pytest.raises(ApiError) as err:
        list(list_pages(client, Resources.node(), Budget(), page=5))
    assert err.value.code == 403 and "injected failure 403" in err.value.message


def test_pages_that_never_end_stop_at_the_page_bound(api: FakeApiServer, client: Any) -> None:
    _nodes(api, 3)
    api.hostile_list = "endless-pages"
    budget = Budget(pages=40)
    with pytest.raises(ApiError, match="past 40 pages"):
        list(list_pages(client, Resources.node(), budget, page=2))
    assert budget.pages_read == 41


def test_a_repeated_continue_token_is_an_error(api: FakeApiServer, client: Any) -> None:
    _nodes(api, 3)
    api.hostile_list = "repeat-continue"
    with pytest.raises(ApiError, match="continue token it had given before"):
        list(list_pages(client, Resources.node(), Budget(), page=2))


def test_a_body_that_never_ends_is_cut_at_the_page_bound(api: FakeApiServer,
                                                         client: Any) -> None:
    _nodes(api, 1)
    api.hostile_list = "endless-body"
    with pytest.raises(ApiError, match="too large: a page past 1048576 bytes"):
        list(list_pages(client, Resources.node(), Budget(page_bytes=1 << 20), page=10**6))


def test_the_command_bound_covers_all_pages(api: FakeApiServer, client: Any) -> None:
    _nodes(api, 30)
    budget = Budget(total_bytes=4096)
    with pytest.raises(ApiError, match="too large: the answers in all past"):
        list(list_pages(client, Resources.node(), budget, page=2))


def test_a_trickled_body_is_cut_at_the_request_deadline(api: FakeApiServer,
                                                        client: Any) -> None:
    _nodes(api, 2)
    api.hostile_list = "trickle"
    api.trickle_gap = 0.02
    budget = Budget(request_seconds=1.0)
    with pytest.raises(ApiError, match="took longer than 1 s"):
        list(list_pages(client, Resources.node(), budget, page=2))
    # Not the whole body: the client stopped reading at the deadline.
    page = len(b'{"items": []}') + 2 * 150
    assert api.hostile_bytes_sent < page + 200


# ---- the commands, under the hostile-input harness -----------------------------------------


def _claim(tmp_path: Path) -> Path:
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": "team-b"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {
            "deviceClassName": "liken.sh"}}]}}}))
    return path


MODES = {
    "endless-pages": "longer than 3 s in all",
    "repeat-continue": "continue token it had given before",
    "endless-body": "holds more objects than the 2 asked",
    "trickle": "longer than 3 s",
}


@pytest.mark.fuzz
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("command", ["fleet", "kubectl-liken-fleet", "kubectl-liken-match"])
def test_a_hostile_api_server_ends_the_command_with_one_line(api: FakeApiServer,
                                                              tmp_path: Path, mode: str,
                                                              command: str) -> None:
    _nodes(api, 4)
    api.hostile_list = mode
    api.hostile_path = "resourceslices"
    api.trickle_gap = 0.05
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
    if command == "fleet":
        out = run_cli(["fleet", "--kubeconfig", kubeconfig, "--page-size", "2",
                       "--timeout", "3"], deadline=60)
    else:
        sub = command.rsplit("-", 1)[1]
        argv = [sub, "--kubeconfig", kubeconfig, "--page-size", "2", "--timeout", "3"]
        if sub == "match":
            argv += ["-f", str(_claim(tmp_path))]
        out = run_cli(argv, kubectl_main, deadline=60)
    assert_fails_closed(out, allowed=(2,))
    assert MODES[mode] in out.stderr, out.stderr
    assert out.stdout == ""


# ---- any answer at all -----------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["items", "metadata", "continue", "kind", "x"]), inner, max_size=4),
    max_leaves=20)
pages = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(lambda items, token: json.dumps({"items": items,
                                               "metadata": {"continue": token}}).encode(),
              json_values, json_values),
    st.sampled_from([b"[" * 100_000, b'{"items": [' * 50_000, b"\xff\xfe{}", b"1e99999",
                     b'{"items": [], "metadata": {"continue": 7}}']))


@pytest.mark.fuzz
@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=pages)
def test_any_answer_is_objects_or_one_api_error(api: FakeApiServer, client: Any,
                                                body: bytes) -> None:
    api.hostile_list = "raw"
    api.hostile_body = body
    try:
        got = list(list_pages(client, Resources.node(), Budget(pages=3), page=2))
    except ApiError as exc:
        assert exc.code is None and exc.message
        return
    assert all(isinstance(o, dict) for o in got)


# ---- a page is bounded by objects, bytes and values (rules: limits.list-page) ---------------
#
# Reproduction: the old bounds were 64 MiB a page and 512 MiB in all, with each page parsed
# whole; a page of tiny values costs some twenty times its bytes, so the answers in all cost
# gigabytes (about 3 GB and 69 s at the old bounds; MemoryError under a 2 GB limit).

TINY = b'{"a":[' + b"{}," * 40_000 + b"{}]}"  # one object of 120 KB holding 40,000 values


def maximal_slice(node: str) -> dict[str, Any]:
    """The largest ResourceSlice the API admits, as the bounds assume it: 128 devices of
    63-character names, each with 32 attributes of 32-character names and 64-byte strings."""
    devices = [{"name": f"dev-{d:03d}-".ljust(63, "x"), "attributes": {
        f"attr{a:02d}".ljust(32, "a"): {"string": f"v{a:02d}".ljust(64, "s")}
        for a in range(32)}} for d in range(128)]
    return make_slice(node.ljust(63, "n"), DRIVER, devices, owner_uid="0" * 36)


def test_the_page_bounds_are_derived_from_the_largest_real_page() -> None:
    """The constants are what a maximal slice is (compact JSON, as the API server writes it),
    and a page of the asked 500 such slices fits the page bounds with room to spare."""
    from liken_devices.kube import listing

    body = json.dumps(maximal_slice("node"), separators=(",", ":")).encode()
    values = sum(body.count(c) for c in (b",", b":", b"[", b"{"))
    assert len(body) == listing.MAX_SLICE_BYTES
    assert values == listing.MAX_SLICE_VALUES
    assert listing.PAGE_FACTOR * listing.ASKED * len(body) == listing.PAGE_BYTES
    assert listing.PAGE_FACTOR * listing.ASKED * values == listing.PAGE_VALUES
    assert listing.PAGE_FACTOR <= 2 and len(body) < listing.OBJECT_BYTES // 4
    # the command's answers in all are bounded as one page is
    assert listing.TOTAL_BYTES == listing.PAGE_BYTES
    assert listing.TOTAL_VALUES == listing.PAGE_VALUES


@pytest.mark.fuzz
def test_a_flood_of_tiny_values_is_refused_within_a_small_multiple_of_a_real_page(
        api: FakeApiServer, tmp_path: Path) -> None:
    """Pages of 500 objects (the limit asked), each 120 KB of empty objects, with fresh
    continue tokens: refused at the page's value bound, in one line, within 1.25 GiB (a
    page of the largest real slices costs about 0.9 GiB; docs/performance.md) and 60 s."""
    api.hostile_list = "flood"
    api.hostile_path = "resourceslices"
    api.hostile_item = TINY
    api.hostile_page_bytes = 60 << 20  # under the old page bound
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
    out = run_cli(["fleet", "--kubeconfig", kubeconfig], memory=1280 << 20, deadline=60)
    assert_fails_closed(out, allowed=(2,))
    assert "too large: a page of more than" in out.stderr and "values" in out.stderr, out.stderr
    assert out.stdout == ""


def test_more_objects_than_asked_is_refused(api: FakeApiServer, client: Any) -> None:
    """A server answers at most the ``limit`` asked: a page with more is not a real page."""
    api.hostile_list = "raw"
    api.hostile_body = json.dumps({"metadata": {}, "items": [{}, {}, {}]}).encode()
    with pytest.raises(ApiError, match="more objects than the 2 asked"):
        list(list_pages(client, Resources.node(), Budget(), page=2))
    assert len(list(list_pages(client, Resources.node(), Budget(), page=3))) == 3


def test_an_object_larger_than_any_real_one_is_refused_as_it_streams(
        api: FakeApiServer, client: Any) -> None:
    api.hostile_list = "flood"
    api.hostile_item = b'{"a":"' + b"x" * (5 << 20) + b'"}'
    api.hostile_page_bytes = 6 << 20
    with pytest.raises(ApiError, match="an object past 4194304 characters"):
        list(list_pages(client, Resources.node(), Budget(), page=500))


def test_the_values_of_all_pages_are_bounded_too(api: FakeApiServer, client: Any) -> None:
    api.hostile_list = "flood"
    api.hostile_item = b'{"a":[' + b"1," * 999 + b"1]}"
    api.hostile_page_bytes = 100_000
    budget = Budget(total_values=300_000)
    with pytest.raises(ApiError, match="in all hold more than 300000 values"):
        list(list_pages(client, Resources.node(), budget, page=500))
    assert budget.pages_read >= 3


@settings(max_examples=examples(20), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(objects=st.lists(json_values.filter(lambda v: isinstance(v, dict)), max_size=6),
       cut=st.integers(1, 64))
def test_a_page_parses_the_same_however_its_body_is_cut(api: FakeApiServer, client: Any,
                                                       objects: list[dict[str, Any]],
                                                       cut: int) -> None:
    """The streaming parse gives what ``json.loads`` of the whole body gives, whatever the
    chunks (the server sends the page ``cut`` bytes at a time)."""
    body = json.dumps({"metadata": {}, "items": objects}).encode()
    api.hostile_list = "raw"
    api.hostile_body = body
    api.raw_chunk = cut
    got = list(list_pages(client, Resources.node(), Budget(), page=10))
    assert got == json.loads(body)["items"]
