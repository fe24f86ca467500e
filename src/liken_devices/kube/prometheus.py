"""Prometheus metrics in the text exposition format, version 0.0.4, without a client library.

The node agent runs on every node, so what it imports it pays for on every node. The usual
client library brings an HTTP server stack (http.server, socketserver, wsgiref, gzip and more)
that the agents never use, since :mod:`.endpoint` serves the port; what they do use is small:
counters, gauges (also read at scrape time), histograms, the process's own series, and the text
format. That is all this module is.

- A :class:`Registry` belongs to whoever makes it; there is no process-wide default, so tests
  and embedders never collide.
- :class:`Counter`, :class:`Gauge` and :class:`Histogram` take ``labelnames`` and give a child
  per label values with ``labels()``. A counter ``x`` is exposed as ``x_total`` (its family
  name too); no ``_created`` series. A histogram exposes cumulative ``_bucket{le=...}`` series
  ending with ``le="+Inf"``, then ``_count`` and ``_sum``.
- :class:`ProcessCollector` gives the conventional ``process_*`` series from ``/proc/self``:
  CPU seconds, resident and virtual memory, start time, open and maximum descriptors.
- Updates and scrapes may come from different threads: each metric guards its values with a
  lock, and a scrape copies them under it.

The format's rules (the Prometheus "Exposition formats" document): a ``# HELP`` line escapes
``\\`` and a newline; a label value escapes those and ``"``; text is UTF-8; a value is a float
written as Go writes it (``+Inf``, ``-Inf``, ``NaN``, an exponent past six integer digits).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


@dataclass(frozen=True)
class Sample:
    """One line of the exposition: a series name, its labels (sorted by name) and its value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True)
class Family:
    """What ``# HELP`` and ``# TYPE`` describe, and the samples that follow them."""

    name: str
    type: str
    help: str
    samples: tuple[Sample, ...]


class Collector(Protocol):
    def names(self) -> tuple[str, ...]:
        """The series names it exposes (a registry refuses two collectors sharing one)."""

    def collect(self) -> list[Family]: ...


class Registry:
    """The collectors one exposition shows, in the order they were registered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._collectors: list[Collector] = []
        self._names: set[str] = set()

    def register(self, collector: Collector) -> None:
        names = collector.names()
        with self._lock:
            taken = sorted(self._names.intersection(names))
            if taken or len(set(names)) != len(names):
                raise ValueError(f"duplicate metric names in the registry: {taken or names}")
            self._names.update(names)
            self._collectors.append(collector)

    def collect(self) -> list[Family]:
        with self._lock:
            collectors = list(self._collectors)
        return [family for c in collectors for family in c.collect()]

    def exposition(self) -> bytes:
        """The text format, version 0.0.4 (served as :data:`CONTENT_TYPE`)."""
        return render(self.collect())

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The value of the series ``name`` with exactly ``labels``; None when there is none."""
        want = tuple(sorted((labels or {}).items()))
        for family in self.collect():
            for s in family.samples:
                if s.name == name and s.labels == want:
                    return s.value
        return None


# ---- the text format ---------------------------------------------------------------------------


def format_value(value: float) -> str:
    """A float as Go's shortest form writes it, which every Prometheus parser reads."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    digits, _, exponent = text.partition("e")
    whole = digits.lstrip("-").split(".")[0]
    if not exponent and len(whole) > 6:  # Python keeps 16 integer digits before an exponent
        sign = "-" if digits.startswith("-") else ""
        mantissa = (whole + digits.partition(".")[2]).rstrip("0")
        mantissa = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
        return f"{sign}{mantissa}e+{len(whole) - 1:02d}"
    return text


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(families: Iterable[Family]) -> bytes:
    out: list[str] = []
    for f in families:
        out.append(f"# HELP {f.name} {escape_help(f.help)}\n# TYPE {f.name} {f.type}\n")
        for s in f.samples:
            labels = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in s.labels)
            out.append(f"{s.name}{{{labels}}} " if labels else f"{s.name} ")
            out.append(format_value(s.value) + "\n")
    return "".join(out).encode("utf-8")


def _utf8(text: str, what: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not valid UTF-8 text: {text!r}") from exc
    return text


# ---- counters, gauges, histograms --------------------------------------------------------------

C = TypeVar("C")


class _Metric(Generic[C]):
    """A family with its children, one per label values (one child with no labels)."""

    type: ClassVar[str]
    _reserved_labels: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: Registry | None = None) -> None:
        if not _METRIC_NAME.match(name):
            raise ValueError(f"invalid metric name: {name!r}")
        for label in labelnames:
            if (not _LABEL_NAME.match(label) or label.startswith("__")
                    or label in self._reserved_labels):
                raise ValueError(f"invalid label name for {name}: {label!r}")
        if len(set(labelnames)) != len(labelnames):
            raise ValueError(f"a label name repeats in {name}: {list(labelnames)}")
        self.name = name
        self.help = _utf8(documentation, f"the help of {name}")
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], C] = {}
        if not self.labelnames:
            self._children[()] = self._child()
        if registry is not None:
            registry.register(self)

    def _child(self) -> C:
        raise NotImplementedError

    def names(self) -> tuple[str, ...]:
        raise NotImplementedError

    def collect(self) -> list[Family]:
        raise NotImplementedError

    def labels(self, *values: str, **by_name: str) -> C:
        """The child for these label values (made on first use)."""
        if values and by_name:
            raise ValueError("label values are given by position or by name, not both")
        key = tuple(by_name[n] for n in self.labelnames if n in by_name) if by_name else values
        if not self.labelnames or len(key) != len(self.labelnames) or (
                by_name and len(by_name) != len(self.labelnames)):
            raise ValueError(f"{self.name} takes the labels {list(self.labelnames)}")
        child = self._children.get(key)
        if child is None:
            for v in key:
                if not isinstance(v, str):
                    raise TypeError(f"a label value of {self.name} is not a string: {v!r}")
                _utf8(v, f"a label value of {self.name}")
            with self._lock:
                child = self._children.setdefault(key, self._child())
        return child

    def _only(self) -> C:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels {list(self.labelnames)}: use labels()")
        return self._children[()]

    def _label_pairs(self, key: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        return tuple(zip(self.labelnames, key, strict=True))

    def _items(self) -> list[tuple[tuple[str, ...], C]]:
        with self._lock:
            return list(self._children.items())


def _sorted(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs))


class CounterValue:
    """A value that only goes up."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up (inc({amount!r}))")
        with self._lock:
            self._value += amount

    def get(self) -> float:
        with self._lock:
            return self._value


class Counter(_Metric[CounterValue]):
    """Exposed as ``<name>_total`` (a ``_total`` given in the name is not doubled)."""

    type = "counter"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: Registry | None = None) -> None:
        super().__init__(name.removesuffix("_total"), documentation, labelnames, registry)

    def _child(self) -> CounterValue:
        return CounterValue(self._lock)

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def get(self) -> float:
        return self._only().get()

    def names(self) -> tuple[str, ...]:
        return (self.name + "_total",)

    def collect(self) -> list[Family]:
        total = self.name + "_total"
        samples = tuple(Sample(total, _sorted(self._label_pairs(k)), c.get())
                        for k, c in self._items())
        return [Family(total, self.type, self.help, samples)]


class GaugeValue:
    """A value that is set, moved, or read from a function at every scrape."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._value = 0.0
        self._function: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self._value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.inc(-amount)

    def set_function(self, function: Callable[[], float]) -> None:
        """From now on the value is ``function()``, called at every scrape."""
        with self._lock:
            self._function = function

    def get(self) -> float:
        with self._lock:
            function, value = self._function, self._value
        return float(function()) if function is not None else value  # outside the lock


class Gauge(_Metric[GaugeValue]):
    type = "gauge"

    def _child(self) -> GaugeValue:
        return GaugeValue(self._lock)

    def set(self, value: float) -> None:
        self._only().set(value)

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self._only().dec(amount)

    def set_function(self, function: Callable[[], float]) -> None:
        self._only().set_function(function)

    def get(self) -> float:
        return self._only().get()

    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def collect(self) -> list[Family]:
        samples = tuple(Sample(self.name, _sorted(self._label_pairs(k)), g.get())
                        for k, g in self._items())
        return [Family(self.name, self.type, self.help, samples)]


DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                   10.0)


class HistogramValue:
    """Observations counted into buckets (each bucket its own count; cumulated at a scrape)."""

    def __init__(self, lock: threading.Lock, bounds: tuple[float, ...]) -> None:
        self._lock = lock
        self._bounds = bounds
        self._counts = [0] * len(bounds)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        # The first bound >= value (a bucket's bound is inclusive); NaN is above every bound.
        i = len(self._bounds) - 1 if math.isnan(value) else bisect.bisect_left(self._bounds, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[int], float]:
        """Cumulative bucket counts (the last is the count) and the sum, taken together."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        running = 0
        for i, c in enumerate(counts):
            running += c
            counts[i] = running
        return counts, total


class Histogram(_Metric[HistogramValue]):
    type = "histogram"
    _reserved_labels = frozenset({"le"})

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: Registry | None = None,
                 buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        bounds = [float(b) for b in buckets]
        if bounds and bounds[-1] != math.inf:
            bounds.append(math.inf)
        if len(bounds) < 2 or any(math.isnan(b) for b in bounds) or any(
                a >= b for a, b in itertools.pairwise(bounds)):
            raise ValueError(f"the buckets of {name} must be at least one finite bound, "
                             f"in increasing order: {list(buckets)}")
        self.bounds = tuple(bounds)
        super().__init__(name, documentation, labelnames, registry)

    def _child(self) -> HistogramValue:
        return HistogramValue(self._lock, self.bounds)

    def observe(self, value: float) -> None:
        self._only().observe(value)

    def names(self) -> tuple[str, ...]:
        return (self.name + "_bucket", self.name + "_count", self.name + "_sum")

    def collect(self) -> list[Family]:
        samples: list[Sample] = []
        les = [format_value(b) for b in self.bounds]
        for key, h in self._items():
            pairs = self._label_pairs(key)
            counts, total = h.snapshot()
            samples.extend(Sample(self.name + "_bucket", _sorted((*pairs, ("le", le))), c)
                           for le, c in zip(les, counts, strict=True))
            samples.append(Sample(self.name + "_count", _sorted(pairs), counts[-1]))
            samples.append(Sample(self.name + "_sum", _sorted(pairs), total))
        return [Family(self.name, self.type, self.help, tuple(samples))]


# ---- the process -------------------------------------------------------------------------------


class ProcessCollector:
    """The process's own series, read from ``/proc/<pid>`` (proc(5)) at every scrape, with the
    conventional names, help texts and units. Where ``/proc`` cannot be read, none."""

    def __init__(self, registry: Registry | None = None, proc: str = "/proc/self") -> None:
        self._proc = proc
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._boot = self._boot_time()
        if registry is not None:
            registry.register(self)

    @staticmethod
    def _boot_time() -> float | None:
        try:
            with open("/proc/stat", "rb") as f:
                for line in f:
                    if line.startswith(b"btime "):
                        return float(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return None

    def names(self) -> tuple[str, ...]:
        return ("process_virtual_memory_bytes", "process_resident_memory_bytes",
                "process_start_time_seconds", "process_cpu_seconds_total", "process_open_fds",
                "process_max_fds")

    def collect(self) -> list[Family]:
        out: list[Family] = []

        def gauge(name: str, text: str, value: float, kind: str = "gauge") -> None:
            out.append(Family(name, kind, text, (Sample(name, (), value),)))

        try:
            with open(f"{self._proc}/stat", "rb") as f:
                stat = f.read()
            # The fields after the command name, which is in parentheses and may hold anything.
            fields = stat[stat.rindex(b")") + 2:].split()
            utime, stime, start = float(fields[11]), float(fields[12]), float(fields[19])
            vsize, rss = float(fields[20]), float(fields[21])
        except (OSError, ValueError, IndexError):
            pass
        else:
            gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", vsize)
            gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
                  rss * self._page)
            if self._boot is not None:
                gauge("process_start_time_seconds",
                      "Start time of the process since unix epoch in seconds.",
                      start / self._ticks + self._boot)
            gauge("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                  (utime + stime) / self._ticks, "counter")
        with contextlib.suppress(OSError):
            gauge("process_open_fds", "Number of open file descriptors.",
                  len(os.listdir(f"{self._proc}/fd")))
        max_fds = self._max_fds()
        if max_fds is not None:
            gauge("process_max_fds", "Maximum number of open file descriptors.", max_fds)
        return out

    def _max_fds(self) -> float | None:
        try:
            with open(f"{self._proc}/limits", "rb") as f:
                for line in f:
                    if line.startswith(b"Max open files"):
                        soft = line.split()[3]
                        return math.inf if soft == b"unlimited" else float(soft)
        except (OSError, ValueError, IndexError):
            pass
        return None
