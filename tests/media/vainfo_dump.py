"""Turn real ``vainfo`` / ``vainfo --all`` output into a caps file for the fake VA driver.

The dumps in ../shared/vainfo/ beside the checkout are third-party reference data, read in place
and never copied into the project. A plain dump lists profile/entrypoint pairs; a
``--all`` dump also gives each pair's ``VAConfigAttribRTFormat`` values. No vainfo mode prints
the video processor's surface formats, so the fake driver's vendor-based default applies unless
the caller adds a ``vpp`` line.
"""

from __future__ import annotations

import re

_DRIVER = re.compile(r"Driver version:\s*(.+?)\s*$")
_PLAIN_PAIR = re.compile(r"^\s*(VAProfile\w+)\s*:\s*(VAEntrypoint\w+)\s*$")
_ALL_HEADER = re.compile(r"^\s*(VAProfile\w+)/(VAEntrypoint\w+)\s*$")
_RT_ATTR = re.compile(r"^\s*VAConfigAttribRTFormat\s*:\s*(VA_RT_FORMAT_\w+)\s*$")
_CONTINUATION = re.compile(r"^\s+(VA_RT_FORMAT_\w+)\s*$")
_CAPS_PAIR = re.compile(r"^(VAProfile\w+)\s+(VAEntrypoint\w+)(\s+\S+)*\s*$")


class PartialDump(ValueError):
    """The dump stops part-way: replaying it would publish false for what it never reached."""


def caps_from_vainfo(text: str) -> str:
    """A caps file (vendor line, one line per pair with its RT formats when known)."""
    if "# PARTIAL" in text:
        raise PartialDump("a partial capture cannot be replayed as a complete list")
    vendor = None
    pairs: list[tuple[str, str]] = []
    rt: dict[tuple[str, str], list[str]] = {}
    current: tuple[str, str] | None = None
    in_rt = False
    for line in text.splitlines():
        if vendor is None and (m := _DRIVER.search(line)):
            vendor = m.group(1)
            continue
        if m := _PLAIN_PAIR.match(line):
            pair = (m.group(1), m.group(2))
            if pair not in pairs:
                pairs.append(pair)
            current, in_rt = None, False
        elif m := _ALL_HEADER.match(line):
            current = (m.group(1), m.group(2))
            if current not in pairs:
                pairs.append(current)
            in_rt = False
        elif current and (m := _RT_ATTR.match(line)):
            rt.setdefault(current, []).append(m.group(1))
            in_rt = True
        elif current and in_rt and (m := _CONTINUATION.match(line)):
            rt[current].append(m.group(1))
        else:
            in_rt = False
    if vendor is None or not pairs:
        raise ValueError("no driver version or no profile/entrypoint pairs in this output")
    out = [f"vendor {vendor}"]
    out += [" ".join([p, e, *rt.get((p, e), [])]) for p, e in pairs]
    return "\n".join(out) + "\n"


def is_caps_file(text: str) -> bool:
    """True for text already in the caps form (the vaapi-fits derived files)."""
    lines = [x for x in text.splitlines() if x.strip() and not x.startswith("#")]
    return bool(lines) and all(
        x.startswith(("vendor ", "vpp ")) or _CAPS_PAIR.match(x) for x in lines)
