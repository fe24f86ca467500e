"""The probe child's own facts (:mod:`liken_devices.media.child`), checked without libva.

The child spells libva's structures as arrays of C ints and a few numbers itself (it imports
nothing of the package); here ctypes' own layout of the same C structures (va/va.h) and the
parent's names (:mod:`liken_devices.media.va`) hold them true. The queries themselves run
against the real libva in tests/media/test_probe.py.
"""

from __future__ import annotations

import ctypes

from liken_devices.media import child, va


class VAConfigAttrib(ctypes.Structure):
    _fields_ = (("type", ctypes.c_int), ("value", ctypes.c_uint32))


class VAGenericValueUnion(ctypes.Union):
    _fields_ = (("i", ctypes.c_int32), ("f", ctypes.c_float), ("p", ctypes.c_void_p),
                ("fn", ctypes.c_void_p))


class VAGenericValue(ctypes.Structure):
    _fields_ = (("type", ctypes.c_int), ("value", VAGenericValueUnion))


class VASurfaceAttrib(ctypes.Structure):
    _fields_ = (("type", ctypes.c_int), ("flags", ctypes.c_uint32), ("value", VAGenericValue))


def test_config_attrib_is_two_uints() -> None:
    assert ctypes.sizeof(VAConfigAttrib) == 2 * ctypes.sizeof(ctypes.c_uint)
    assert VAConfigAttrib.value.offset == ctypes.sizeof(ctypes.c_uint)


def test_surface_attrib_is_six_ints_read_at_0_2_4() -> None:
    # The child reads a VASurfaceAttrib as ints: [0] its type, [2] the value's type, [4] the
    # value's int32 member.
    word = ctypes.sizeof(ctypes.c_int)
    assert ctypes.sizeof(VASurfaceAttrib) == 6 * word
    assert VASurfaceAttrib.type.offset == 0 * word
    assert VASurfaceAttrib.value.offset + VAGenericValue.type.offset == 2 * word
    assert (VASurfaceAttrib.value.offset + VAGenericValue.value.offset
            + VAGenericValueUnion.i.offset) == 4 * word
    surface = VASurfaceAttrib(child.VASurfaceAttribPixelFormat, 0,
                              VAGenericValue(child.VAGenericValueTypeInteger,
                                             VAGenericValueUnion(i=va.VA_FOURCC_P010)))
    words = (ctypes.c_int * 6).from_buffer_copy(surface)
    assert (words[0], words[2], words[4]) == (1, 1, va.VA_FOURCC_P010)


def test_the_childs_c_types_are_ctypes() -> None:
    for name in ("c_int", "c_uint", "c_void_p", "c_size_t", "py_object"):
        ours, theirs = getattr(child, name), getattr(ctypes, name)
        assert ours._type_ == theirs._type_ and ctypes.sizeof(ours) == ctypes.sizeof(theirs)


def test_the_childs_numbers_are_the_parents() -> None:
    assert (child.VAProfileNone, child.VAEntrypointVideoProc) == (
        va.VAProfileNone, va.VAEntrypointVideoProc)
