"""The child process that asks one render node's driver (:func:`.probe.child_command` starts it).

It is the only place libva is loaded (the parent never loads libva, so a driver that hangs or
crashes takes down only this process, which the parent kills after the timeout; docs/media.md).
It sends the queries vainfo sends (rules: media.capabilities):
vaQueryConfigProfiles, vaQueryConfigEntrypoints, vaGetConfigAttributes(RTFormat) for each pair
and, for VAProfileNone/VideoProc, vaCreateConfig + vaQuerySurfaceAttributes for the pixel formats.

It starts once per render node, so it is self-contained and lean: the parent runs it as the
top-level module ``child`` from this directory (``python -I -S -c``: no ``site``, no ``runpy``,
no ``liken_devices`` package). It imports only ``posix`` (built in) and ``_ctypes`` (ctypes'
core, without ``ctypes/__init__``, which cost more than libva and the queries together), and it
ends with ``_exit`` once the answer is written, skipping the interpreter's finalization. No
``json``, ``typing``, ``struct`` or text codecs: it answers in lines of bytes, which the parent
parses as hostile input (:func:`.probe.parse_answer`)::

    ok <major> <minor>                  libva's version; or "failed"
    vendor <text>                       vaQueryVendorString (ok only)
    pair <profile> <entrypoint> <rt>    one per pair, rt the RTFormat attribute's value
    vpp <fourcc> ...                    the video processor's pixel formats, when it is listed
    error <text>                        why the query failed (failed only)
    message <text>                      one per libva message kept ("error: ...", "info: ...")
    dropped <count>                     libva messages counted, not kept
    end

Numbers are decimal; a text is the bytes as libva or the driver gave them, with ``\\`` written
``\\\\`` and a newline ``\\n``. Before loading libva the child moves its stdout onto stderr, so
whatever libva or a driver prints cannot corrupt the answer; the answer goes out on a duplicate
of the original stdout.

What the driver says is bounded here already, so the child's own memory stays small whatever
the driver does: strings are read with ``strnlen`` up to ``MAX_STRING`` bytes (never the whole
of a 50 MB vendor string), at most ``MAX_MESSAGES`` of libva's messages are kept (the rest only
counted), and the arrays the driver asks room for are refused past a bound.
"""

import _ctypes
import posix
from _ctypes import (
    FUNCFLAG_CDECL,
    FUNCFLAG_PYTHONAPI,
    RTLD_LOCAL,
    CFuncPtr,
    _SimpleCData,
    byref,
    dlopen,
    dlsym,
    sizeof,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from ctypes import c_int, c_size_t, c_uint, c_void_p, py_object
else:
    # ctypes' own definitions of the C types (ctypes/__init__ defines them the same way).
    class c_int(_SimpleCData):
        _type_ = "i"

    class c_uint(_SimpleCData):
        _type_ = "I"

    class c_void_p(_SimpleCData):
        _type_ = "P"

    class c_size_t(_SimpleCData):
        _type_ = "L"  # size_t is unsigned long on LP64 (x86_64, aarch64)

    class py_object(_SimpleCData):
        _type_ = "O"

# libva's numbers the queries need (va/va.h, libva ABI: append-only across libva 2.x). The two
# the parent also uses are in :mod:`.va` too, which a test holds equal to these: the child
# imports nothing of the package.
VA_STATUS_SUCCESS = 0
VA_STATUS_ERROR_MAX_NUM_EXCEEDED = 0x0B
VA_STATUS_ERROR_UNSUPPORTED_PROFILE = 0x0C
VAProfileNone = -1
VAEntrypointVideoProc = 10
VAConfigAttribRTFormat = 0
VASurfaceAttribPixelFormat = 1
VAGenericValueTypeInteger = 1
VA_INVALID_ID = 0xFFFFFFFF

MAX_STRING = 4096  # bytes read of any string the driver or libva hands over
MAX_MESSAGES = 64  # messages kept; the parent keeps as many
MAX_PROFILES = 1024  # array sizes a driver may ask for (libva knows fewer than 64 profiles)
MAX_ENTRYPOINTS = 256
MAX_SURFACE_ATTRIBUTES = 4096


# Function pointers by return type; the arguments are passed as ctypes values of the C types
# (a display or a pointer as c_void_p or byref, an int as a Python int, size_t as c_size_t).
class _ReturnsInt(CFuncPtr):
    _flags_ = FUNCFLAG_CDECL
    _restype_ = c_int


class _ReturnsPointer(CFuncPtr):
    _flags_ = FUNCFLAG_CDECL
    _restype_ = c_void_p


class _ReturnsSize(CFuncPtr):
    _flags_ = FUNCFLAG_CDECL
    _restype_ = c_size_t


class _MessageCallback(CFuncPtr):  # void (*)(void *user_context, const char *message)
    _flags_ = FUNCFLAG_CDECL
    _restype_ = None
    _argtypes_ = (c_void_p, c_void_p)  # the message as a bare pointer: ctypes copies nothing


class _StringAt(CFuncPtr):  # ctypes.string_at: (address, size) -> bytes
    _flags_ = FUNCFLAG_CDECL | FUNCFLAG_PYTHONAPI
    _restype_ = py_object
    _argtypes_ = (c_void_p, c_int)


_string_at = _StringAt(_ctypes._string_at_addr)  # type: ignore[attr-defined]  # (no stub)


class QueryError(Exception):
    """A libva call failed; the message names the call and libva's error text."""


def escape(text: bytes) -> bytes:
    """``text`` as one line of the answer: ``\\`` and newlines escaped."""
    return text.replace(b"\\", b"\\\\").replace(b"\n", b"\\n")


def format_answer(version: tuple[int, int] | None, vendor: bytes = b"",
                  pairs: "Iterable[tuple[int, int, int]]" = (),
                  vpp: "Iterable[int] | None" = None, error: bytes = b"",
                  messages: "Iterable[bytes]" = (), dropped: int = 0) -> bytes:
    """The answer's bytes: an answer with libva's ``version``, or (``None``) a failure."""
    if version is None:
        lines = [b"failed", b"error " + escape(error)]
    else:
        lines = [b"ok %d %d" % version, b"vendor " + escape(vendor)]
        lines += [b"pair %d %d %d" % pair for pair in pairs]
        if vpp is not None:
            lines.append(b"".join([b"vpp", *[b" %d" % f for f in vpp]]))
    lines += [b"message " + escape(m) for m in messages]
    if dropped:
        lines.append(b"dropped %d" % dropped)
    lines.append(b"end\n")
    return b"\n".join(lines)


class Query:
    """One render node's driver, asked through libva."""

    def __init__(self) -> None:
        if sizeof(c_void_p) != 8:  # the layouts below are LP64's (x86_64, aarch64)
            raise OSError("the query reads libva's structures as laid out on 64-bit Linux")
        self.version = (0, 0)
        self.vendor = b""
        self.pairs: list[tuple[int, int, int]] = []
        self.vpp: list[int] | None = None
        self.messages: list[bytes] = []
        self.errors: list[bytes] = []
        self.dropped = 0  # messages past MAX_MESSAGES, counted only
        # None: the program's own symbols and libc's, as ctypes.CDLL(None) opens them.
        self.libc = dlopen(None, RTLD_LOCAL)  # type: ignore[arg-type]  # (the stub lacks None)
        self.strnlen = _ReturnsSize(dlsym(self.libc, "strnlen"))
        # The sonames: the unversioned libva.so exists only with the -dev package.
        self.libva = dlopen("libva.so.2", RTLD_LOCAL)
        self.libva_drm = dlopen("libva-drm.so.2", RTLD_LOCAL)
        # Kept referenced while libva may call them (ctypes frees a callback otherwise).
        self.on_error = _MessageCallback(self._error)
        self.on_info = _MessageCallback(self._info)

    def int_fn(self, name: str) -> _ReturnsInt:
        return _ReturnsInt(dlsym(self.libva, name))

    def string(self, ptr: int | None) -> bytes:
        """The NUL-terminated string at ``ptr``, at most MAX_STRING bytes of it."""
        if not ptr:
            return b""
        address = c_void_p(ptr)
        text: bytes = _string_at(address, self.strnlen(address, c_size_t(MAX_STRING)))
        return text.rstrip(b"\n")

    def _error(self, _ctx: int | None, message: int | None) -> None:
        if len(self.messages) >= MAX_MESSAGES:
            self.dropped += 1
            return
        text = self.string(message)
        self.messages.append(b"error: " + text)
        self.errors.append(text)

    def _info(self, _ctx: int | None, message: int | None) -> None:
        if len(self.messages) >= MAX_MESSAGES:
            self.dropped += 1
            return
        self.messages.append(b"info: " + self.string(message))

    def check(self, call: str, status: int) -> None:
        if status == VA_STATUS_SUCCESS:
            return
        # VA_STATUS_ERROR_UNKNOWN (0xFFFFFFFF) arrives as -1 through c_int: mask it.
        error_str = _ReturnsPointer(dlsym(self.libva, "vaErrorStr"))
        detail = b"%s failed: %s (0x%x)" % (call.encode(), self.string(error_str(status)),
                                            status & 0xFFFFFFFF)
        # libva's own words help most: its error lines, else its last line ("va_openDriver()
        # returns -1" when the driver file is missing).
        said = self.errors[-2:] or [m.split(b": ", 1)[-1] for m in self.messages[-1:]]
        if said:
            detail += b"; libva: " + b" / ".join(said)
        raise QueryError(detail)

    def run(self, node: str) -> None:
        try:
            fd = posix.open(node, posix.O_RDWR | posix.O_CLOEXEC)
        except OSError as exc:
            raise QueryError(f"cannot open {node}: {exc.strerror or exc}"
                             .encode(errors="surrogateescape")) from exc
        try:
            dpy = _ReturnsPointer(dlsym(self.libva_drm, "vaGetDisplayDRM"))(fd)
            if not dpy:
                raise QueryError(f"vaGetDisplayDRM: {node} is not a DRM device libva accepts"
                                 .encode(errors="surrogateescape"))
            display = c_void_p(dpy)
            for setter, callback in (("vaSetErrorCallback", self.on_error),
                                     ("vaSetInfoCallback", self.on_info)):
                _ReturnsPointer(dlsym(self.libva, setter))(display, callback, None)
            major, minor = c_int(0), c_int(0)
            self.check("vaInitialize",
                       self.int_fn("vaInitialize")(display, byref(major), byref(minor)))
            self.version = (major.value, minor.value)
            try:
                self.ask(display)
            finally:
                self.int_fn("vaTerminate")(display)
        finally:
            posix.close(fd)

    def ask(self, dpy: c_void_p) -> None:
        self.vendor = self.string(_ReturnsPointer(dlsym(self.libva, "vaQueryVendorString"))(dpy))
        max_profiles = max(self.int_fn("vaMaxNumProfiles")(dpy), 1)
        if max_profiles > MAX_PROFILES:
            raise QueryError(b"the driver asks room for %d profiles (at most %d make sense)"
                             % (max_profiles, MAX_PROFILES))
        profiles = (c_int * max_profiles)()
        count = c_int(0)
        self.check("vaQueryConfigProfiles",
                   self.int_fn("vaQueryConfigProfiles")(dpy, profiles, byref(count)))
        max_entrypoints = max(self.int_fn("vaMaxNumEntrypoints")(dpy), 1)
        if max_entrypoints > MAX_ENTRYPOINTS:
            raise QueryError(b"the driver asks room for %d entrypoints (at most %d make sense)"
                             % (max_entrypoints, MAX_ENTRYPOINTS))
        query_entrypoints = self.int_fn("vaQueryConfigEntrypoints")
        get_attributes = self.int_fn("vaGetConfigAttributes")
        entrypoints = (c_int * max_entrypoints)()
        attrib = (c_uint * 2)()  # a VAConfigAttrib: {int type; unsigned int value}
        for profile in profiles[: min(count.value, max_profiles)]:
            n = c_int(0)
            status = query_entrypoints(dpy, profile, entrypoints, byref(n))
            if status == VA_STATUS_ERROR_UNSUPPORTED_PROFILE:
                continue  # listed but not usable: vainfo skips it too
            self.check("vaQueryConfigEntrypoints", status)
            for entrypoint in entrypoints[: min(n.value, max_entrypoints)]:
                attrib[0], attrib[1] = VAConfigAttribRTFormat, 0
                self.check("vaGetConfigAttributes",
                           get_attributes(dpy, profile, entrypoint, attrib, 1))
                self.pairs.append((profile, entrypoint, attrib[1]))
        if (VAProfileNone, VAEntrypointVideoProc) in {(p, e) for p, e, _ in self.pairs}:
            self.vpp = self.video_processor_formats(dpy)

    def video_processor_formats(self, dpy: c_void_p) -> list[int]:
        """The pixel formats a VAProfileNone/VideoProc config accepts (vaQuerySurfaceAttributes)."""
        config = c_uint(VA_INVALID_ID)
        self.check("vaCreateConfig", self.int_fn("vaCreateConfig")(
            dpy, VAProfileNone, VAEntrypointVideoProc, None, 0, byref(config)))
        try:
            query = self.int_fn("vaQuerySurfaceAttributes")
            # A NULL list gets an upper bound; the second call writes back the real count
            # (va.h). A driver may still ask for more: grow once more then.
            n = c_uint(0)
            self.check("vaQuerySurfaceAttributes", query(dpy, config, None, byref(n)))
            for _ in range(2):
                size = max(n.value, 1)
                if size > MAX_SURFACE_ATTRIBUTES:
                    raise QueryError(b"the driver asks room for %d surface attributes (at most "
                                     b"%d make sense)" % (size, MAX_SURFACE_ATTRIBUTES))
                # A VASurfaceAttrib on LP64 is 24 bytes, six ints: its type, its flags, then its
                # VAGenericValue: the value's type, padding, and the value (a union of 8 bytes,
                # its int32 member first).
                attribs = (c_int * (6 * size))()
                n = c_uint(size)
                status = query(dpy, config, attribs, byref(n))
                if status == VA_STATUS_ERROR_MAX_NUM_EXCEEDED and n.value > size:
                    continue
                self.check("vaQuerySurfaceAttributes", status)
                words = attribs[: 6 * min(n.value, size)]
                return [words[i + 4] & 0xFFFFFFFF for i in range(0, len(words), 6)
                        if words[i] == VASurfaceAttribPixelFormat
                        and words[i + 2] == VAGenericValueTypeInteger]
            raise QueryError(b"vaQuerySurfaceAttributes: the driver keeps asking for more room")
        finally:
            self.check("vaDestroyConfig", self.int_fn("vaDestroyConfig")(dpy, config))

    def answer(self, node: str) -> bytes:
        try:
            self.run(node)
        except QueryError as exc:
            return format_answer(None, error=exc.args[0], messages=self.messages,
                                 dropped=self.dropped)
        return format_answer(self.version, self.vendor, self.pairs, self.vpp,
                             messages=self.messages, dropped=self.dropped)


def main(argv: list[str]) -> None:
    """Ask the node ``argv`` names, write the answer and end the process."""
    if len(argv) != 1:
        posix.write(2, b"usage: child /dev/dri/renderDN\n")
        posix._exit(2)
    out = posix.dup(1)
    posix.dup2(2, 1)
    query = None
    try:
        query = Query()
    except OSError as exc:  # libva.so.2 or libva-drm.so.2 is missing, or a symbol in them
        data = format_answer(None, error=f"cannot load libva: {exc}".encode(errors="replace"))
    else:
        data = query.answer(argv[0])
    view = memoryview(data)
    while view:
        view = view[posix.write(out, view):]
    # End without the interpreter's finalization (a sixth of a bare start-up's CPU): nothing is
    # buffered in Python (the answer went out through write(2)); C's stdio, where a driver may
    # have printed, is flushed first.
    if query is not None:
        _ReturnsInt(dlsym(query.libc, "fflush"))(None)
    posix._exit(0)
