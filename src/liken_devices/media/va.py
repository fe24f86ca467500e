"""libva's constants the agent needs, as plain numbers (no libva is loaded here).

The values are libva ABI, append-only across libva 2.x (libva's ``va/va.h``). The parent maps
the child's answer with them and must never load libva (docs/media.md, "How it asks"). The
numbers only the queries need (statuses, attribute types) live in :mod:`.child`, which imports
nothing of this package; the two both use (``VAProfileNone``, ``VAEntrypointVideoProc``) are
spelled in both, and a test holds them equal.
"""

from __future__ import annotations

from typing import Final

# VAProfile (an enum; VAProfileNone is -1 and passes as a signed int).
VAProfileNone: Final = -1
VAProfileMPEG2Main: Final = 1
VAProfileH264High: Final = 7
VAProfileVC1Advanced: Final = 10
VAProfileVP8Version0_3: Final = 14
VAProfileHEVCMain: Final = 17
VAProfileHEVCMain10: Final = 18
VAProfileVP9Profile0: Final = 19
VAProfileVP9Profile2: Final = 21
VAProfileAV1Profile0: Final = 32

# VAEntrypoint.
VAEntrypointVLD: Final = 1
VAEntrypointEncSlice: Final = 6
VAEntrypointEncSliceLP: Final = 8
VAEntrypointVideoProc: Final = 10

# The "not supported" answer of vaGetConfigAttributes. It is the same bit as
# VA_RT_FORMAT_PROTECTED, so only a value *equal* to it means "not supported" (as vainfo reads it).
VA_ATTRIB_NOT_SUPPORTED: Final = 0x80000000
VA_RT_FORMAT_YUV420: Final = 0x00000001
VA_RT_FORMAT_YUV420_10: Final = 0x00000100


def fourcc(code: str) -> int:
    """A VA_FOURCC value: the four characters little-endian in 32 bits."""
    raw = code.encode("ascii")
    if len(raw) != 4:
        raise ValueError(f"a fourcc has four characters, not {code!r}")
    return int.from_bytes(raw, "little")


VA_FOURCC_NV12: Final = fourcc("NV12")  # 0x3231564E: 8-bit 4:2:0
VA_FOURCC_P010: Final = fourcc("P010")  # 0x30313050: 10-bit 4:2:0
