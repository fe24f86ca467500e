"""The driver's name, its slice's name and the limits a ResourceSlice holds it to, each stated
once.

Every module that needs one of these imports it from here (the inventory, the slice builder and
validator, the publisher, the plugin, the agent, the commands), so the number in a log line, an
``explain`` reason and the validator cannot disagree. The limits are the API server's for
``resource.k8s.io/v1`` (KEP-4381, "Dynamic Resource Allocation with Structured Parameters").
"""

from __future__ import annotations

DRIVER = "liken.sh"  # rules: limits.one-slice
MEDIA_DRIVER = "media.liken.sh"  # the media capabilities agent's devices, a slice of their own
MAX_DEVICES = 128  # one slice per node, at most 128 devices (rules: limits.cap)
DNS_LABEL_MAX = 63  # a DNS label: a device name, a driver's or an attribute domain's part
NAME_MAX = DNS_LABEL_MAX  # a name stops at 63 characters (rules: names.cut)
VALUE_MAX = 64  # bytes in a string attribute value (rules: attributes.bounded)
MAX_ATTRIBUTES = 32  # attributes (and capacities) per device (rules: attributes.bounded)
# Storage roles in init's facts: more make the facts unreadable (rules: hardware.facts-fail-closed),
# and the stamp that lets a prepare reuse the last walk covers every one of them
# (rules: delivery.fresh-walk). One number for both, so a role the reader reads is never one the
# stamp leaves out.
MAX_ROLES = 1024


def slice_name(node: str, driver: str = DRIVER) -> str:
    """A node's one ResourceSlice of ``driver`` (rules: limits.one-slice):
    ``<node>-<driver>``, ``<node>-liken.sh`` for this driver."""
    return f"{node}-{driver}"
