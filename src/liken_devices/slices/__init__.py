"""ResourceSlice objects: building them from an inventory, and checking them as the API would.

The published OpenAPI schema says nothing of the API server's own limits (its hand-written
validation of ``resource.k8s.io``: DNS names, 128 devices, 32 attributes, 64-byte strings, one
value per attribute), and the server rejects a whole slice for one violation.
:func:`validate_slice` checks every rule before a slice leaves the node; the media agent and the
test API server use the same function.
"""

from .build import attribute_value, devices_json, make_slice, slice_name
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
