"""The text exposition the agents serve, read back by the Prometheus client library's own parser
(a test oracle only: the agents do not import the library).

Whatever is emitted, the parser gives back the same families, help texts, types, labels and
values: odd label values and help texts (quotes, backslashes, newlines, non-ASCII), Go-style
floats, cumulative histogram buckets, gauges read at scrape time, counts exact under threads,
and the process's series named, typed and valued as the library's own process collector.
"""

from __future__ import annotations

import math
import os
import re
import resource
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry as LibRegistry
from prometheus_client import Counter as LibCounter
from prometheus_client import Gauge as LibGauge
from prometheus_client import Histogram as LibHistogram
from prometheus_client import ProcessCollector as LibProcessCollector
from prometheus_client import disable_created_metrics, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from liken_devices.kube.prometheus import (
    CONTENT_TYPE,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    Registry,
    format_value,
)
from tests.support.hostile import examples

Parsed = dict[str, tuple[str, str, list[tuple[str, dict[str, str], float]]]]


def parse(body: bytes) -> Parsed:
    """family name -> (type, help, [(sample name, labels, value)]), as the library reads it."""
    return {f.name: (f.type, f.documentation, [(s.name, s.labels, s.value) for s in f.samples])
            for f in text_string_to_metric_families(body.decode("utf-8"))}


def test_every_family_reads_back_as_the_registry_holds_it() -> None:
    r = Registry()
    c = Counter("x_requests", "Requests, by code", ["code", "op"], registry=r)
    g = Gauge("x_temperature_celsius", "A gauge", registry=r)
    h = Histogram("x_seconds", "A histogram", buckets=(0.1, 1.0), registry=r)
    Counter("x_unused", "Labelled and never used", ["reason"], registry=r)
    c.labels(code="200", op="get").inc(3)
    c.labels("500", "put").inc()
    g.set(-2.5)
    h.observe(0.5)
    parsed = parse(r.exposition())
    assert list(parsed) == ["x_requests", "x_temperature_celsius", "x_seconds", "x_unused"]
    assert parsed["x_requests"] == ("counter", "Requests, by code", [
        ("x_requests_total", {"code": "200", "op": "get"}, 3.0),
        ("x_requests_total", {"code": "500", "op": "put"}, 1.0)])
    assert parsed["x_temperature_celsius"] == ("gauge", "A gauge",
                                               [("x_temperature_celsius", {}, -2.5)])
    assert parsed["x_seconds"][0] == "histogram"
    assert parsed["x_unused"] == ("counter", "Labelled and never used", [])
    # Each sample of the registry is in the text, and nothing else is.
    ours = [(s.name, dict(s.labels), s.value) for f in r.collect() for s in f.samples]
    assert ours == [s for _, _, samples in parsed.values() for s in samples]
    assert r.get_sample_value("x_requests_total", {"code": "200", "op": "get"}) == 3.0
    assert r.get_sample_value("x_requests_total", {"code": "404", "op": "get"}) is None
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_the_text_is_the_librarys_for_the_same_metrics() -> None:
    """The same metrics made and moved in the library and here give the same parsed text, with
    the library's ``_created`` series turned off, as the agents had them."""
    disable_created_metrics()
    lib, ours = LibRegistry(), Registry()
    pairs = []
    for reg, counter, gauge, histogram in ((lib, LibCounter, LibGauge, LibHistogram),
                                           (ours, Counter, Gauge, Histogram)):
        pairs.append((
            counter("t_walks", "Walks, by reason", ["reason"], registry=reg),
            counter("t_errors_total", "Errors", registry=reg),
            gauge("t_info", 'The "build" \\ with\nlines', ["version", "python"], registry=reg),
            gauge("t_registered", "Read at scrape", registry=reg),
            histogram("t_duration_seconds", "Time", buckets=(0.005, 0.5, 1.0, 30.0),
                      registry=reg),
            gauge("t_large", "Large and small values", ["kind"], registry=reg),
        ))
    for walks, errors, info, registered, duration, large in pairs:
        walks.labels(reason="start").inc()
        walks.labels(reason="uevent").inc(41)
        errors.inc(2)
        info.labels(version='0.1"\\\n', python="3.11 é").set(1)
        registered.set_function(lambda: 1.0)
        for v in (0.001, 0.005, 0.3, 1.0, 29.0, 31.0, 0.0):
            duration.observe(v)
        for kind, v in (("big", 123456789.0), ("huge", 1.5e300), ("tiny", 1e-7),
                        ("neg", -12345678.9), ("inf", math.inf), ("ninf", -math.inf),
                        ("exact", 1234567.0), ("seven", 9999999.0)):
            large.labels(kind=kind).set(v)
    assert parse(generate_latest(lib)) == parse(ours.exposition())


def test_odd_label_values_and_help_are_escaped() -> None:
    r = Registry()
    value = 'a "quoted" \\ back\\slash\nnew line, non-ASCII: é ☃ 🚀, and a trailing \\'
    g = Gauge("x_odd", 'Help with \\ and "quotes"\nand a second line ☃', ["v"], registry=r)
    g.labels(v=value).set(1)
    text = r.exposition().decode("utf-8")
    assert '# HELP x_odd Help with \\\\ and "quotes"\\nand a second line ☃\n' in text
    assert ('x_odd{v="a \\"quoted\\" \\\\ back\\\\slash\\nnew line, non-ASCII: é ☃ 🚀, '
            'and a trailing \\\\"} 1.0\n') in text
    assert len(text.splitlines()) == 3  # no raw newline escaped into the text
    assert parse(r.exposition())["x_odd"] == (
        "gauge", 'Help with \\ and "quotes"\nand a second line ☃', [("x_odd", {"v": value}, 1.0)])


# Help texts: the text format cannot carry leading or trailing white space in a help text (the
# parsers strip the line), so the property leaves those out.
_help = st.text(max_size=60).filter(lambda s: s == s.strip())
_label_value = st.text(max_size=60)


@settings(max_examples=examples(200, 2000), deadline=None)
@given(help_text=_help, values=st.lists(_label_value, min_size=1, max_size=4, unique=True),
       amounts=st.lists(st.floats(allow_nan=False, allow_infinity=True), min_size=1,
                        max_size=4))
def test_whatever_is_emitted_the_parser_reads_back(help_text: str, values: list[str],
                                                   amounts: list[float]) -> None:
    try:
        help_text.encode("utf-8")
        for v in values:
            v.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: refused, see the test below
        return
    r = Registry()
    g = Gauge("x_any", help_text, ["value"], registry=r)
    c = Counter("x_count", help_text, ["value", "other"], registry=r)
    for i, v in enumerate(values):
        amount = amounts[i % len(amounts)]
        g.labels(value=v).set(amount)
        c.labels(value=v, other=v[::-1]).inc(abs(amount))
    parsed = parse(r.exposition())
    assert parsed["x_any"] == ("gauge", help_text, [
        ("x_any", {"value": v}, amounts[i % len(amounts)]) for i, v in enumerate(values)])
    assert parsed["x_count"] == ("counter", help_text, [
        ("x_count_total", {"value": v, "other": v[::-1]}, abs(amounts[i % len(amounts)]))
        for i, v in enumerate(values)])


@settings(max_examples=examples(300, 3000), deadline=None)
@given(st.floats(allow_nan=False))
def test_values_are_written_as_go_writes_them_and_read_back_exactly(value: float) -> None:
    text = format_value(value)
    assert float(text) == value
    # Go's shortest form: an exponent once the integer part passes six digits.
    assert "e" in text or "Inf" in text or len(text.lstrip("-").split(".")[0]) <= 6, text
    r = Registry()
    Gauge("x_v", "v", registry=r).set(value)
    assert parse(r.exposition())["x_v"][2] == [("x_v", {}, value)]


def test_value_forms() -> None:
    assert [format_value(v) for v in (1, 0.5, 1234567.0, 123456.0, 1.79615908186e9, -3e7,
                                      1e-7, math.inf, -math.inf, math.nan, 0.0, 1e22)] == [
        "1.0", "0.5", "1.234567e+06", "123456.0", "1.79615908186e+09", "-3e+07", "1e-07",
        "+Inf", "-Inf", "NaN", "0.0", "1e+22"]


def test_histogram_buckets_are_cumulative_and_end_at_inf() -> None:
    r = Registry()
    h = Histogram("x_seconds", "t", buckets=(0.1, 1.0, 10.0), registry=r)
    for v in (0.05, 0.1, 0.2, 1.0, 5.0, 11.0, 1e9, math.nan):
        h.observe(v)
    _, _, samples = parse(r.exposition())["x_seconds"]
    buckets = [(labels["le"], value) for name, labels, value in samples
               if name == "x_seconds_bucket"]
    # A bucket's bound is inclusive (0.1 and 1.0 fall in their own); NaN only in +Inf.
    assert buckets == [("0.1", 2.0), ("1.0", 4.0), ("10.0", 5.0), ("+Inf", 8.0)]
    assert [n for n, _, _ in samples][-2:] == ["x_seconds_count", "x_seconds_sum"]
    assert r.get_sample_value("x_seconds_count") == 8.0
    assert math.isnan(r.get_sample_value("x_seconds_sum") or 0.0)
    fresh = Registry()
    Histogram("x_idle", "t", ["op"], buckets=(1.0,), registry=fresh).labels(op="a")
    assert parse(fresh.exposition())["x_idle"][2] == [
        ("x_idle_bucket", {"op": "a", "le": "1.0"}, 0.0),
        ("x_idle_bucket", {"op": "a", "le": "+Inf"}, 0.0),
        ("x_idle_count", {"op": "a"}, 0.0), ("x_idle_sum", {"op": "a"}, 0.0)]


def test_a_gauge_function_is_read_at_every_scrape() -> None:
    r = Registry()
    state = {"calls": 0, "value": 0.0}

    def read() -> float:
        state["calls"] += 1
        return state["value"]

    Gauge("x_registered", "r", registry=r).set_function(read)
    assert r.get_sample_value("x_registered") == 0.0
    state["value"] = 1.0
    assert parse(r.exposition())["x_registered"][2] == [("x_registered", {}, 1.0)]
    assert state["calls"] == 2


def test_concurrent_updates_sum_exactly_while_scraped() -> None:
    r = Registry()
    c = Counter("x_events", "e", registry=r)
    by = Counter("x_by", "e", ["t"], registry=r)
    g = Gauge("x_level", "g", registry=r)
    h = Histogram("x_h", "h", buckets=(0.5,), registry=r)
    threads, rounds = 8, 5000
    stop = threading.Event()
    scrapes: list[Parsed] = []

    def work(i: int) -> None:
        for n in range(rounds):
            c.inc()
            by.labels(t=str(n % 3)).inc(2)
            g.inc()
            g.dec(0.5)
            h.observe(0.25 if i % 2 else 0.75)

    def scrape() -> None:
        while not stop.is_set():
            scrapes.append(parse(r.exposition()))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    scraper.join()
    total = threads * rounds
    assert c.get() == total
    assert sum(by.labels(t=t).get() for t in "012") == 2 * total
    assert g.get() == total * 0.5
    assert r.get_sample_value("x_h_bucket", {"le": "0.5"}) == total / 2
    assert r.get_sample_value("x_h_count") == total
    assert r.get_sample_value("x_h_sum") == pytest.approx(total / 2)
    # Every scrape saw a histogram whose count is its +Inf bucket (taken together).
    for s in scrapes:
        samples = {(n, labels.get("le")): v for n, labels, v in s["x_h"][2]}
        assert samples[("x_h_count", None)] == samples[("x_h_bucket", "+Inf")]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    assert match
    return int(match.group(1))


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux's /proc")
def test_process_series_are_the_librarys_and_plausible() -> None:
    r, lib = Registry(), LibRegistry()
    ProcessCollector(registry=r)
    LibProcessCollector(registry=lib)
    before = _status_kib("VmRSS") * 1024
    ours, theirs = parse(r.exposition()), parse(generate_latest(lib))
    after = _status_kib("VmRSS") * 1024
    # Same families, types, help texts and series as the library's collector.
    assert [(n, t, h, [s[0] for s in samples]) for n, (t, h, samples) in ours.items()] == [
        (n, t, h, [s[0] for s in samples]) for n, (t, h, samples) in theirs.items()]
    value = {n: samples[0][2] for n, (_, _, samples) in ours.items()}
    assert 0 < value["process_resident_memory_bytes"] <= value["process_virtual_memory_bytes"]
    assert abs(value["process_resident_memory_bytes"] - (before + after) / 2) < 4 << 20
    assert value["process_open_fds"] == pytest.approx(len(os.listdir("/proc/self/fd")), abs=2)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert value["process_max_fds"] == (math.inf if soft == resource.RLIM_INFINITY else soft)
    t = os.times()
    assert value["process_cpu_seconds"] == pytest.approx(t.user + t.system, abs=0.25)
    assert value["process_start_time_seconds"] == pytest.approx(
        theirs["process_start_time_seconds"][2][0][2], abs=0.02)
    assert value["process_start_time_seconds"] < time.time()


def test_an_unreadable_proc_gives_no_process_series() -> None:
    r = Registry()
    ProcessCollector(registry=r, proc="/nonexistent/proc/self")
    Gauge("x_g", "g", registry=r)
    assert [f.name for f in r.collect()] == ["x_g"]


def test_misuse_is_refused_with_the_reason() -> None:
    r = Registry()
    c = Counter("x_c", "c", ["a"], registry=r)
    with pytest.raises(ValueError, match="duplicate metric names"):
        Gauge("x_c_total", "again", registry=r)
    with pytest.raises(ValueError, match="duplicate metric names"):
        Counter("x_c_total", "again", registry=r)  # the same series, named with its suffix
    with pytest.raises(ValueError, match="use labels"):
        c.inc()
    with pytest.raises(ValueError, match="takes the labels"):
        c.labels(b="1")
    with pytest.raises(ValueError, match="takes the labels"):
        c.labels("1", "2")
    with pytest.raises(ValueError, match="only goes up"):
        c.labels(a="1").inc(-1)
    with pytest.raises(ValueError, match="not valid UTF-8"):
        c.labels(a="\udc80")
    with pytest.raises(TypeError, match="not a string"):
        c.labels(a=1)  # type: ignore[arg-type]
    for bad in ("1x", "x-y", "", "x y"):
        with pytest.raises(ValueError, match="invalid metric name"):
            Gauge(bad, "g")
    for label in ("le", "__reserved", "a-b"):
        with pytest.raises(ValueError, match="invalid label name"):
            Histogram("x_h", "h", [label])
    with pytest.raises(ValueError, match="repeats"):
        Gauge("x_g", "g", ["a", "a"])
    for buckets in ((), (1.0, 0.5), (1.0, 1.0), (math.nan,)):
        with pytest.raises(ValueError, match="increasing order"):
            Histogram("x_h", "h", buckets=buckets)
    assert [f.name for f in r.collect()] == ["x_c_total"]  # the refused ones are not registered
