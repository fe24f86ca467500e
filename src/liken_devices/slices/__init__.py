"""ResourceSlice objects: building them from an inventory, and checking them as the API would.

The published OpenAPI schema says nothing of the API server's own limits (DNS names, the device
count, attributes per device, string bytes, one value per attribute; the numbers live in
:mod:`..inventory.limits`), and the server rejects a whole slice for one violation.
:func:`validate_slice` checks every rule before a slice leaves the node; the media agent and the
test API server use the same function.
"""

from ..inventory.limits import slice_name
from .build import attribute_value, devices_json, make_slice
from .validate import SliceInvalid, ensure_valid, validate_slice

__all__ = [
    "SliceInvalid",
    "attribute_value",
    "devices_json",
    "ensure_valid",
    "make_slice",
    "slice_name",
    "validate_slice",
]
