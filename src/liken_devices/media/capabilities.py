"""The capability table: from what the driver lists to the eighteen booleans.

rules: media.capabilities, media.failed-query. Each capability is true when the driver lists the
named profile with the named entrypoint (and, for AV1, the render-target format that gives the
bit depth); the scale flags are true when the video processor (VAProfileNone/VideoProc) accepts
NV12 / P010 surfaces. Each value is the driver's own statement: nothing is tested or corrected.
A failed query publishes every capability false and no ``vaDriver``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..terminal import clean
from . import va


@dataclass(frozen=True, slots=True)
class RawCaps:
    """What one render node's driver said, as the child process reported it."""

    vendor: str
    # (profile, entrypoint, RTFormat attribute value or None when the query gave none)
    pairs: tuple[tuple[int, int, int | None], ...]
    # Pixel formats the VideoProc config accepts; None when VAProfileNone/VideoProc is not listed.
    vpp_formats: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One row of the table (rules: media.capabilities)."""

    name: str
    profile: int
    entrypoint: int
    rt_format: int | None = None  # a render-target format bit the pair must state, if any


# In the order of the table in docs/rules/media.md's origin; the log line and the slice keep it.
TABLE: tuple[Requirement, ...] = (
    Requirement("decodeH264", va.VAProfileH264High, va.VAEntrypointVLD),
    Requirement("decodeHEVCMain", va.VAProfileHEVCMain, va.VAEntrypointVLD),
    Requirement("decodeHEVCMain10", va.VAProfileHEVCMain10, va.VAEntrypointVLD),
    # AV1 has one VA-API profile for 8 and 10 bits; the RT formats give its bit depths.
    Requirement("decodeAV1Main", va.VAProfileAV1Profile0, va.VAEntrypointVLD,
                va.VA_RT_FORMAT_YUV420),
    Requirement("decodeAV1Main10", va.VAProfileAV1Profile0, va.VAEntrypointVLD,
                va.VA_RT_FORMAT_YUV420_10),
    Requirement("decodeVP9", va.VAProfileVP9Profile0, va.VAEntrypointVLD),
    Requirement("decodeVP9Profile2", va.VAProfileVP9Profile2, va.VAEntrypointVLD),
    Requirement("decodeVP8", va.VAProfileVP8Version0_3, va.VAEntrypointVLD),
    Requirement("decodeVC1", va.VAProfileVC1Advanced, va.VAEntrypointVLD),
    Requirement("decodeMPEG2", va.VAProfileMPEG2Main, va.VAEntrypointVLD),
    Requirement("encodeH264", va.VAProfileH264High, va.VAEntrypointEncSlice),
    Requirement("encodeHEVCMain", va.VAProfileHEVCMain, va.VAEntrypointEncSlice),
    Requirement("encodeHEVCMain10", va.VAProfileHEVCMain10, va.VAEntrypointEncSlice),
    Requirement("encodeH264LowPower", va.VAProfileH264High, va.VAEntrypointEncSliceLP),
    Requirement("encodeHEVCMainLowPower", va.VAProfileHEVCMain, va.VAEntrypointEncSliceLP),
    Requirement("encodeHEVCMain10LowPower", va.VAProfileHEVCMain10, va.VAEntrypointEncSliceLP),
)
# The two video-processor rows: a VideoProc config that accepts these surfaces.
SCALE: tuple[tuple[str, int], ...] = (
    ("scale8bit", va.VA_FOURCC_NV12),
    ("scale10bit", va.VA_FOURCC_P010),
)
NAMES: tuple[str, ...] = tuple(r.name for r in TABLE) + tuple(n for n, _ in SCALE)
assert len(NAMES) == 18


def _states(rt: int | None, bit: int) -> bool:
    # VA_ATTRIB_NOT_SUPPORTED shares its bit with VA_RT_FORMAT_PROTECTED: only equality means
    # "not supported" (va.h, ``VA_ATTRIB_NOT_SUPPORTED``; vainfo reads it the same way).
    return rt is not None and rt != va.VA_ATTRIB_NOT_SUPPORTED and bool(rt & bit)


def capability_flags(raw: RawCaps | None) -> dict[str, bool]:
    """The eighteen booleans, in table order; all false when the query failed (``raw`` None)."""
    if raw is None:
        return dict.fromkeys(NAMES, False)
    listed: dict[tuple[int, int], int | None] = {(p, e): rt for p, e, rt in raw.pairs}
    flags: dict[str, bool] = {}
    for req in TABLE:
        key = (req.profile, req.entrypoint)
        ok = key in listed
        if ok and req.rt_format is not None:
            ok = _states(listed[key], req.rt_format)
        flags[req.name] = ok
    vpp = set(raw.vpp_formats or ())
    for name, code in SCALE:
        flags[name] = code in vpp
    return flags


def log_line(device: str, node: str, raw: RawCaps | None, error: str | None) -> str:
    """The log line: ``capabilities: <device> (<node>, <vendor>): decodeH264=true ...``,
    or the error text when the query failed."""
    if raw is None:
        return f"capabilities: {device} ({node}): {_one_line(error or 'query failed')}"
    flags = capability_flags(raw)
    values = " ".join(f"{k}={'true' if v else 'false'}" for k, v in flags.items())
    return f"capabilities: {device} ({node}, {_one_line(raw.vendor)}): {values}"


def _one_line(text: str) -> str:
    return clean(" ".join(text.split()))
