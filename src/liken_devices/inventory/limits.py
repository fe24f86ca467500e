"""The driver's name and the limits a ResourceSlice holds it to, each stated once.

Every module that needs one of these imports it from here, so the number in a log line, an
``explain`` reason and the validator cannot disagree.
"""

from __future__ import annotations

DRIVER_NAME = "liken.sh"  # seed, "The driver"
MAX_DEVICES = 128  # seed, "Limits": one slice per node, at most 128 devices
NAME_MAX = 63  # decisions, "Names": a device name is a DNS label
VALUE_MAX = 64  # decisions, "Attributes": bytes in a string attribute value
MAX_ATTRIBUTES = 32  # decisions, "Attributes": attributes per device


def slice_name(node: str) -> str:
    """The node's one ResourceSlice (seed, "What a node publishes"): ``<node>-liken.sh``."""
    return f"{node}-{DRIVER_NAME}"
