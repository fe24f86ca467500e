"""One child process per render node, killed after a timeout; the parent never loads libva.

rules: media.failed-query. A query that fails or runs longer than 20
seconds publishes the GPU's device with every capability false and no vaDriver. A libva call
blocked in a driver cannot be interrupted from Python, and a thread stuck in it wedges the whole
process, so each node is asked by a fresh interpreter running :mod:`.child` (``python -m
liken_devices.media.child NODE``) in its own session, which the parent kills with SIGKILL when
the time is up (docs/media.md, "How it asks"). All nodes are asked at once, so a hung driver
costs one timeout, not one per GPU.

The child prints its answer on its stdout in a line format (:mod:`.child`): libva's version,
the vendor string, the pairs and the video processor's formats, or why the query failed, both
with libva's log messages. A driver is hostile input like any other (docs/media.md, "A driver
that misbehaves"):

* the answer is read up to ``MAX_ANSWER`` bytes and the child's stderr keeps only its last
  ``STDERR_TAIL`` bytes, both in memory (no file in /tmp, which the DaemonSet keeps small);
* the answer is parsed strictly (:func:`parse_answer`): at most ``MAX_LINES`` lines, each of a
  known kind, numbers in their C type's range, every list bounded; anything else is no answer;
* the answer is taken when the child exits, not when its pipe closes: a helper the driver forked
  may hold the pipe open forever;
* every string that reaches a log (vendor, error, libva's messages, stderr) is cut to a bounded
  length and count, and its control, line-separator and bidi characters are shown escaped;
* the agent is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a helper that escaped the child's
  session with ``setsid()`` becomes the agent's child when the child ends, and every process that
  appeared during the query and is not a query is killed and reaped.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..terminal import clean
from .capabilities import RawCaps

DEFAULT_TIMEOUT = 20.0  # seconds (rules: media.failed-query)
REAP_GRACE = 2.0  # after SIGKILL; a child in uninterruptible sleep is left behind
MAX_ANSWER = 1 << 20  # bytes; a real answer is a few KiB
STDERR_TAIL = 4096  # bytes of the child's stderr kept, the last ones
MAX_MESSAGES = 64  # libva messages kept per node (the child also stops collecting past these)
MAX_TEXT = 512  # characters of one message, error or stderr tail as logged
MAX_VENDOR = 256  # characters of the vendor string (vaDriver is cut further, to 64 bytes)
MAX_PAIRS = 4096  # profile/entrypoint pairs; libva has fewer than 64 profiles and 16 entrypoints
MAX_FORMATS = 1024  # video processor pixel formats
MAX_LINES = MAX_PAIRS + MAX_MESSAGES + 8  # the child sends no more message lines than it keeps


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What asking one render node gave: the driver's answer, or why there is none."""

    node: str
    raw: RawCaps | None
    error: str | None
    messages: tuple[str, ...] = ()
    stderr: str = ""  # the tail of what the child (libva, the driver) wrote on stderr, cleaned
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.raw is not None


def child_command() -> list[str]:
    """The child's command line, without the node: a fresh interpreter, isolated (``-I``: no
    user site, no ``PYTHON*`` variables) and without ``site`` (``-S``), that runs :mod:`.child`
    as the top-level module ``child`` from this directory. It starts once per render node, so it
    skips all it can: the site-packages' start-up hooks, ``runpy``, and this package's
    ``__init__`` chain (the child is self-contained)."""
    here = os.path.dirname(os.path.abspath(__file__))
    boot = f"import sys; sys.path.append({here!r}); from child import main; main(sys.argv[1:])"
    return [sys.executable, "-I", "-S", "-c", boot]


# ---- processes ------------------------------------------------------------------------------

_queries: set[int] = set()  # pids of the children running a query now (every thread)
_queries_lock = threading.Lock()
_subreaper_lock = threading.Lock()
_subreaper = False


def become_subreaper() -> bool:
    """Make this process adopt its descendants' orphans (Linux ``PR_SET_CHILD_SUBREAPER``)."""
    global _subreaper
    with _subreaper_lock:
        if _subreaper:
            return True
        # deferred: ctypes, 4 ms of liken-media --help, which imports this module
        # (tests/test_layers.py)
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            _subreaper = False
        return _subreaper


def children() -> set[int]:
    """The pids whose parent is this process (zombies included)."""
    me = os.getpid()
    out = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read(1024)
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(me).encode():
            out.add(int(entry.name))
    return out


def _end_leftovers(before: set[int]) -> None:
    """Kill and reap every child that appeared since ``before`` and is no running query: the
    orphans a query's driver left (a setsid() helper, its own children as they are orphaned)."""
    deadline = time.monotonic() + REAP_GRACE
    while True:
        # Under the lock that starting a query holds: a query another thread is starting now is
        # either not forked yet or already in _queries, never a stray.
        with _queries_lock:
            strays = children() - before - _queries
            for pid in strays:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if not strays:
            return
        for pid in strays:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)


def probe_node(node: str, timeout: float = DEFAULT_TIMEOUT,
               env: Mapping[str, str] | None = None,
               command: Sequence[str] | None = None) -> ProbeResult:
    """Ask one node's driver in a child process; never raises."""
    start = time.monotonic()
    become_subreaper()
    before = children()
    cmd = [*(command or child_command()), node]
    try:
        with _queries_lock:  # started and known as a query in one step (see _end_leftovers)
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, close_fds=True,
                                    start_new_session=True,
                                    env=None if env is None else dict(env))
            _queries.add(proc.pid)
    except OSError as exc:
        return ProbeResult(node, None, clean(f"cannot start the query: {exc}", MAX_TEXT),
                           seconds=time.monotonic() - start)
    try:
        out, err, why = _collect(proc, start + timeout)
        if why == "timeout":
            error = f"timed out after {timeout:g} s"
        elif why == "too large":
            error = f"gave an answer larger than {MAX_ANSWER} bytes"
        else:
            error = None
        if error is not None:
            _kill_session(proc)
            # A child stuck in the kernel dies when its ioctl returns: do not wait for it.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(REAP_GRACE)
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        with _queries_lock:
            _queries.discard(proc.pid)
        _end_leftovers(before)
    elapsed = time.monotonic() - start
    stderr = _clean_tail(err)
    if error is not None:
        return ProbeResult(node, None, error, stderr=stderr, seconds=elapsed)
    rc = proc.returncode
    if rc is not None and rc < 0:
        return ProbeResult(node, None, f"crashed: signal {-rc}", stderr=stderr, seconds=elapsed)
    return _parse(node, out, rc or 0, stderr, elapsed)


def _collect(proc: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes, str]:
    """Read the child's stdout (bounded) and stderr (its tail) until it exits or the deadline
    passes; (answer, stderr tail, "exited" | "timeout" | "too large").

    The end is the child's exit, watched through a pidfd, not its pipes' end-of-file: whatever
    the child wrote before exiting is in the pipe by then, and a helper that inherited the pipe
    cannot hold the answer back."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    sel = selectors.DefaultSelector()
    streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    for fd in streams:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pidfd = -1
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ)
    try:
        while True:
            exited = proc.poll() is not None
            if exited or not streams:
                if not exited:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(max(0.0, deadline - time.monotonic()))
                    if proc.poll() is None:
                        return bytes(out), bytes(err), "timeout"
                for fd in list(streams):  # what the child wrote before it exited
                    if _drain(fd, streams[fd], out is streams[fd]) is None:
                        return bytes(out), bytes(err), "too large"
                return bytes(out), bytes(err), "exited"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(out), bytes(err), "timeout"
            # Without a pidfd (an old kernel), look at the child every 50 ms.
            events = sel.select(remaining if pidfd >= 0 else min(remaining, 0.05))
            for key, _ in events:
                fd = int(key.fd)
                if fd not in streams:
                    continue  # the pidfd: the loop's head sees the exit
                buf = streams[fd]
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(fd)
                    del streams[fd]
                    continue
                if not _keep(buf, data, buf is out):
                    return bytes(out), bytes(err), "too large"
    finally:
        sel.close()
        if pidfd >= 0:
            os.close(pidfd)


def _keep(buf: bytearray, data: bytes, answer: bool) -> bool:
    """Append ``data``: the answer up to MAX_ANSWER (False past it), stderr as a rolling tail."""
    buf += data
    if answer:
        return len(buf) <= MAX_ANSWER
    if len(buf) > STDERR_TAIL:
        del buf[:-STDERR_TAIL]
    return True


def _drain(fd: int, buf: bytearray, answer: bool) -> bytearray | None:
    """Read what is in the pipe now, without waiting (bounded: a helper may keep writing)."""
    for _ in range(MAX_ANSWER // 65536 + 2):
        try:
            data = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            return buf
        if not data:
            return buf
        if not _keep(buf, data, answer):
            return None
    return buf


def _clean_tail(err: bytes) -> str:
    text = err.decode("utf-8", errors="replace").strip()
    return clean(text[-MAX_TEXT:], MAX_TEXT)


def probe_nodes(nodes: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
                env: Mapping[str, str] | None = None,
                command: Sequence[str] | None = None) -> dict[str, ProbeResult]:
    """Ask every node at once, one child each; the answers by node path."""
    unique = list(dict.fromkeys(nodes))
    if not unique:
        return {}
    with ThreadPoolExecutor(max_workers=len(unique), thread_name_prefix="va-probe") as pool:
        futures = {n: pool.submit(probe_node, n, timeout, env, command) for n in unique}
        return {n: f.result() for n, f in futures.items()}


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own session and group
    except ProcessLookupError:
        pass
    except PermissionError:
        proc.kill()


@dataclass(frozen=True, slots=True)
class Answer:
    """What the child's answer says (:func:`parse_answer`)."""

    raw: RawCaps | None  # None: the query failed
    error: str  # why it failed, cleaned ("" when it did not)
    messages: tuple[str, ...]  # libva's messages, cleaned, and "(N more messages not kept)"


_INT32 = (-(1 << 31), (1 << 31) - 1)
_UINT32 = (0, (1 << 32) - 1)
_COUNT = (0, (1 << 63) - 1)


def _number(token: bytes, bounds: tuple[int, int]) -> int:
    """A decimal number in ``bounds``; ValueError for anything else (no ``+``, ``_``, spaces or
    leading run of digits longer than the type's: ``int()`` alone would accept those)."""
    low, high = bounds
    digits = token[1:] if token[:1] == b"-" and low < 0 else token
    if not digits.isdigit() or len(digits) > len(str(high)):  # bytes.isdigit: ASCII only
        raise ValueError(f"not a number: {token[:24]!r}")
    value = int(token)
    if not low <= value <= high:
        raise ValueError(f"out of range: {value}")
    return value


def _text(raw: bytes, limit: int) -> str:
    """A text of the answer, unescaped (``\\\\`` and ``\\n``), decoded and cleaned; only what
    ``limit`` characters can need is looked at."""
    raw = raw[: 8 * limit + 8]  # a character is at most 4 bytes, escaped at most twice that
    text = b"\\".join(part.replace(b"\\n", b"\n") for part in raw.split(b"\\\\"))
    return clean(text.decode("utf-8", errors="replace"), limit)


def parse_answer(out: bytes) -> Answer:
    """The child's answer (its line format, :mod:`.child`) as hostile input: ValueError unless
    it is complete and well formed, with every count and number in bounds."""
    lines = out.split(b"\n", MAX_LINES)
    if len(lines) > MAX_LINES:
        raise ValueError(f"more than {MAX_LINES} lines")
    if lines[-2:] != [b"end", b""]:
        raise ValueError("no end line")
    head = lines[0].split(b" ", 3)
    if head == [b"failed"]:
        version = None
    elif head[0] == b"ok" and len(head) == 3:
        version = (_number(head[1], _INT32), _number(head[2], _INT32))
    else:
        raise ValueError(f"no ok or failed line: {lines[0][:24]!r}")
    vendor: str | None = None
    error: str | None = None
    pairs: list[tuple[int, int, int | None]] = []
    vpp: tuple[int, ...] | None = None
    messages: list[str] = []
    more = 0
    dropped: int | None = None
    for line in lines[1:-2]:
        kind, _, rest = line.partition(b" ")
        if kind == b"message":
            if len(messages) < MAX_MESSAGES:
                messages.append(_text(rest, MAX_TEXT))
            else:
                more += 1
        elif kind == b"dropped" and dropped is None:
            dropped = _number(rest, _COUNT)
        elif version is None:
            if kind != b"error" or error is not None:
                raise ValueError(f"a failed answer has a line {line[:24]!r}")
            error = _text(rest, MAX_TEXT)
        elif kind == b"pair":
            fields = rest.split(b" ", 3)
            if len(fields) != 3 or len(pairs) >= MAX_PAIRS:
                raise ValueError(f"not a pair or too many pairs: {line[:24]!r}")
            pairs.append((_number(fields[0], _INT32), _number(fields[1], _INT32),
                          _number(fields[2], _UINT32)))
        elif kind == b"vendor" and vendor is None:
            vendor = _text(rest, MAX_VENDOR)
        elif kind == b"vpp" and vpp is None:
            formats = rest.split(b" ", MAX_FORMATS) if rest else []
            if len(formats) > MAX_FORMATS:
                raise ValueError(f"more than {MAX_FORMATS} pixel formats")
            vpp = tuple(_number(f, _UINT32) for f in formats)
        else:
            raise ValueError(f"an unexpected line {line[:24]!r}")
    more += dropped or 0
    if more:
        messages.append(f"({more} more messages not kept)")
    if version is None:
        return Answer(None, error or "query failed", tuple(messages))
    if vendor is None:
        raise ValueError("no vendor line")
    return Answer(RawCaps(vendor, tuple(pairs), vpp), "", tuple(messages))


def _parse(node: str, out: bytes, rc: int, stderr: str, elapsed: float) -> ProbeResult:
    try:
        answer = parse_answer(out)
    except ValueError as exc:
        why = f"exited with status {rc}" if rc else f"gave no answer ({clean(exc, 80)})"
        return ProbeResult(node, None, why, (), stderr, elapsed)
    if rc != 0:
        return ProbeResult(node, None, f"exited with status {rc}", answer.messages, stderr,
                           elapsed)
    if answer.raw is None:
        return ProbeResult(node, None, answer.error, answer.messages, stderr, elapsed)
    return ProbeResult(node, answer.raw, None, answer.messages, stderr, elapsed)
