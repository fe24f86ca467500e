"""The capability queries, through the real libva with ctypes (loaded only in the child process).

render-node-capabilities.txt, "Where the values come from": the agent opens the render node with
libva and sends the queries vainfo sends (vaQueryConfigProfiles, vaQueryConfigEntrypoints), plus
vaGetConfigAttributes(RTFormat) for each pair and, for VAProfileNone/VideoProc, vaCreateConfig +
vaQuerySurfaceAttributes for the pixel formats. The call sequence follows vainfo's
(docs/media.md, "How it asks"). Importing this module loads libva.so.2 and libva-drm.so.2, so
only :mod:`.probe`'s child imports it; a driver that hangs or crashes then takes down only that
child.

What the driver says is bounded here already, so the child's own memory stays small whatever
the driver does: strings are read with ``strnlen`` up to ``MAX_STRING`` bytes (never the whole
of a 50 MB vendor string), at most ``MAX_MESSAGES`` of libva's messages are kept (the rest only
counted), and the profile and entrypoint arrays the driver asks for are refused past a bound.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    Union,
    byref,
    c_char_p,
    c_float,
    c_int,
    c_int32,
    c_uint,
    c_uint32,
    c_void_p,
    sizeof,
)

from . import va

TYPE_CHECKING = False  # typing is not imported at run time: the probe child starts per node
if TYPE_CHECKING:
    from typing import Any


class VAConfigAttrib(Structure):
    _fields_ = (("type", c_int), ("value", c_uint32))


class _GenericValueUnion(Union):
    _fields_ = (("i", c_int32), ("f", c_float), ("p", c_void_p), ("fn", c_void_p))


class VAGenericValue(Structure):
    _fields_ = (("type", c_int), ("value", _GenericValueUnion))


class VASurfaceAttrib(Structure):
    _fields_ = (("type", c_int), ("flags", c_uint32), ("value", VAGenericValue))


# The layouts of va.h on LP64 (x86_64, aarch64), as sizeof/offsetof give them there: a wrong
# layout would read garbage silently, so refuse to run instead.
assert sizeof(VAConfigAttrib) == 8 and VAConfigAttrib.value.offset == 4
assert sizeof(VAGenericValue) == 16 and VAGenericValue.value.offset == 8
assert sizeof(VASurfaceAttrib) == 24 and VASurfaceAttrib.value.offset == 8

# The message is read through a bare pointer, so ctypes does not copy a string of any length.
MessageCallback = CFUNCTYPE(None, c_void_p, c_void_p)

MAX_STRING = 4096  # bytes read of any string the driver or libva hands over
MAX_MESSAGES = 64  # messages kept; the parent keeps as many
MAX_PROFILES = 1024  # array sizes a driver may ask for (libva knows fewer than 64 profiles)
MAX_ENTRYPOINTS = 256


class QueryError(Exception):
    """A libva call failed; the message names the call and libva's error text."""

    def __init__(self, text: str, messages: list[str] | None = None, dropped: int = 0) -> None:
        super().__init__(text)
        self.messages = list(messages or [])
        self.dropped = dropped


def _load() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    # The sonames: the unversioned libva.so exists only with the -dev package.
    libva = ctypes.CDLL("libva.so.2")
    libva_drm = ctypes.CDLL("libva-drm.so.2")
    dpy = c_void_p
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "vaErrorStr": (c_char_p, [c_int]),
        "vaSetErrorCallback": (c_void_p, [dpy, MessageCallback, c_void_p]),
        "vaSetInfoCallback": (c_void_p, [dpy, MessageCallback, c_void_p]),
        "vaInitialize": (c_int, [dpy, POINTER(c_int), POINTER(c_int)]),
        "vaTerminate": (c_int, [dpy]),
        "vaQueryVendorString": (c_void_p, [dpy]),
        "vaMaxNumProfiles": (c_int, [dpy]),
        "vaMaxNumEntrypoints": (c_int, [dpy]),
        "vaQueryConfigProfiles": (c_int, [dpy, POINTER(c_int), POINTER(c_int)]),
        "vaQueryConfigEntrypoints": (c_int, [dpy, c_int, POINTER(c_int), POINTER(c_int)]),
        "vaGetConfigAttributes": (c_int, [dpy, c_int, c_int, POINTER(VAConfigAttrib), c_int]),
        "vaCreateConfig": (c_int, [dpy, c_int, c_int, POINTER(VAConfigAttrib), c_int,
                                   POINTER(c_uint)]),
        "vaDestroyConfig": (c_int, [dpy, c_uint]),
        "vaQuerySurfaceAttributes": (c_int, [dpy, c_uint, POINTER(VASurfaceAttrib),
                                             POINTER(c_uint)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(libva, name)
        fn.restype = restype
        fn.argtypes = argtypes
    libva_drm.vaGetDisplayDRM.restype = c_void_p
    libva_drm.vaGetDisplayDRM.argtypes = [c_int]
    return libva, libva_drm


class Answer:
    """The raw answer for one node, in the JSON form the child prints.

    (A plain class: importing dataclasses would cost every child a few tens of milliseconds.)
    """

    def __init__(self, version: tuple[int, int] = (0, 0)) -> None:
        self.version = version
        self.vendor = ""
        self.pairs: list[tuple[int, int, int | None]] = []
        self.vpp_formats: list[int] | None = None
        self.messages: list[str] = []
        self.dropped = 0


class Session:
    """One open display on one render node."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.libva, self.libva_drm = _load()
        self.messages: list[str] = []
        self.errors: list[str] = []
        self.dropped = 0  # messages past MAX_MESSAGES, counted only
        # Keep the callbacks referenced while libva may call them (ctypes frees them otherwise).
        self._on_error = MessageCallback(self._error)
        self._on_info = MessageCallback(self._info)
        self.fd = -1
        self.dpy: int | None = None

    def _error(self, _ctx: int | None, message: int | None) -> None:
        if len(self.messages) >= MAX_MESSAGES:
            self.dropped += 1
            return
        text = _bounded(message)
        self.messages.append("error: " + text)
        self.errors.append(text)

    def _info(self, _ctx: int | None, message: int | None) -> None:
        if len(self.messages) >= MAX_MESSAGES:
            self.dropped += 1
            return
        self.messages.append("info: " + _bounded(message))

    def fail(self, call: str, status: int) -> QueryError:
        # VA_STATUS_ERROR_UNKNOWN (0xFFFFFFFF) arrives as -1 through c_int: mask it.
        code = status & 0xFFFFFFFF
        text = _text(self.libva.vaErrorStr(status))
        detail = f"{call} failed: {text} (0x{code:x})"
        # libva's own words help most: its error lines, else its last line ("va_openDriver()
        # returns -1" when the driver file is missing).
        said = self.errors[-2:] or [m.split(": ", 1)[-1] for m in self.messages[-1:]]
        if said:
            detail += "; libva: " + " / ".join(said)
        return QueryError(detail)

    def check(self, call: str, status: int) -> None:
        if status != va.VA_STATUS_SUCCESS:
            raise self.fail(call, status)

    def query(self) -> Answer:
        try:
            self.fd = os.open(self.node, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise QueryError(f"cannot open {self.node}: {exc.strerror or exc}") from exc
        dpy = self.libva_drm.vaGetDisplayDRM(self.fd)
        if not dpy:
            raise QueryError(f"vaGetDisplayDRM: {self.node} is not a DRM device libva accepts")
        self.libva.vaSetErrorCallback(dpy, self._on_error, None)
        self.libva.vaSetInfoCallback(dpy, self._on_info, None)
        major, minor = c_int(0), c_int(0)
        self.check("vaInitialize", self.libva.vaInitialize(dpy, byref(major), byref(minor)))
        self.dpy = dpy
        answer = Answer(version=(major.value, minor.value))
        answer.vendor = _bounded(self.libva.vaQueryVendorString(dpy))

        max_profiles = max(int(self.libva.vaMaxNumProfiles(dpy)), 1)
        if max_profiles > MAX_PROFILES:
            raise QueryError(f"the driver asks room for {max_profiles} profiles (at most "
                             f"{MAX_PROFILES} make sense)")
        profiles = (c_int * max_profiles)()
        count = c_int(0)
        self.check("vaQueryConfigProfiles",
                   self.libva.vaQueryConfigProfiles(dpy, profiles, byref(count)))
        max_entrypoints = max(int(self.libva.vaMaxNumEntrypoints(dpy)), 1)
        if max_entrypoints > MAX_ENTRYPOINTS:
            raise QueryError(f"the driver asks room for {max_entrypoints} entrypoints (at most "
                             f"{MAX_ENTRYPOINTS} make sense)")
        for profile in list(profiles)[: min(count.value, max_profiles)]:
            entrypoints = (c_int * max_entrypoints)()
            n = c_int(0)
            status = self.libva.vaQueryConfigEntrypoints(dpy, profile, entrypoints, byref(n))
            if status == va.VA_STATUS_ERROR_UNSUPPORTED_PROFILE:
                continue  # listed but not usable: vainfo skips it too
            self.check("vaQueryConfigEntrypoints", status)
            for entrypoint in list(entrypoints)[: min(n.value, max_entrypoints)]:
                attrib = VAConfigAttrib(va.VAConfigAttribRTFormat, 0)
                self.check("vaGetConfigAttributes",
                           self.libva.vaGetConfigAttributes(dpy, profile, entrypoint,
                                                            byref(attrib), 1))
                answer.pairs.append((int(profile), int(entrypoint), int(attrib.value)))
        if (va.VAProfileNone, va.VAEntrypointVideoProc) in {(p, e) for p, e, _ in answer.pairs}:
            answer.vpp_formats = self.video_processor_formats(dpy)
        answer.messages = self.messages
        answer.dropped = self.dropped
        return answer

    def video_processor_formats(self, dpy: int) -> list[int]:
        """The pixel formats a VAProfileNone/VideoProc config accepts (vaQuerySurfaceAttributes)."""
        config = c_uint(0xFFFFFFFF)  # VA_INVALID_ID
        self.check("vaCreateConfig",
                   self.libva.vaCreateConfig(dpy, va.VAProfileNone, va.VAEntrypointVideoProc,
                                             None, 0, byref(config)))
        try:
            # A NULL list gets an upper bound; the second call writes back the real count
            # (va.h). A driver may still ask for more: grow once more then.
            n = c_uint(0)
            self.check("vaQuerySurfaceAttributes",
                       self.libva.vaQuerySurfaceAttributes(dpy, config, None, byref(n)))
            for _ in range(2):
                size = max(n.value, 1)
                attribs = (VASurfaceAttrib * size)()
                n = c_uint(size)
                status = self.libva.vaQuerySurfaceAttributes(dpy, config, attribs, byref(n))
                if status == va.VA_STATUS_ERROR_MAX_NUM_EXCEEDED and n.value > size:
                    continue
                self.check("vaQuerySurfaceAttributes", status)
                formats: list[int] = []
                for a in list(attribs)[: min(n.value, size)]:
                    if (a.type == va.VASurfaceAttribPixelFormat
                            and a.value.type == va.VAGenericValueTypeInteger):
                        formats.append(a.value.value.i & 0xFFFFFFFF)
                return formats
            raise QueryError("vaQuerySurfaceAttributes: the driver keeps asking for more room")
        finally:
            self.check("vaDestroyConfig", self.libva.vaDestroyConfig(dpy, config))

    def close(self) -> None:
        if self.dpy is not None:
            self.libva.vaTerminate(self.dpy)
            self.dpy = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def query_node(node: str) -> Answer:
    """Ask the driver of ``node`` everything the table needs; QueryError when a call fails."""
    session = Session(node)
    try:
        return session.query()
    except QueryError as exc:
        raise QueryError(str(exc), session.messages, session.dropped) from exc
    finally:
        session.close()


def _text(raw: bytes | None) -> str:
    return "" if raw is None else raw[:MAX_STRING].decode("utf-8", errors="replace").rstrip("\n")


_strnlen: Any = None


def _bounded(ptr: int | None) -> str:
    """The NUL-terminated string at ``ptr``, at most MAX_STRING bytes of it."""
    global _strnlen
    if not ptr:
        return ""
    if _strnlen is None:
        fn = ctypes.CDLL(None).strnlen
        fn.restype = ctypes.c_size_t
        fn.argtypes = [c_void_p, ctypes.c_size_t]
        _strnlen = fn
    size = int(_strnlen(ptr, MAX_STRING))
    return _text(ctypes.string_at(ptr, size))
