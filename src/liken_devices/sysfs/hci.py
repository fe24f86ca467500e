"""A Bluetooth adapter's address, which sysfs no longer shows: asked of the kernel.

The address names an adapter in the input devices BlueZ creates for it (their ``phys``), which
decides whose claim a virtual event node belongs to (rules: bluetooth.virtual-nodes). Kernels
before 3.13 listed it as the hci's ``address`` attribute; newer ones answer ``HCIGETDEVINFO`` on
a raw HCI socket (linux/bluetooth/hci.h, ``_IOR('H', 211, int)``), which any process may ask.
"""

from __future__ import annotations

import contextlib
import fcntl
import socket
import struct

AF_BLUETOOTH = 31
BTPROTO_HCI = 1
HCIGETDEVINFO = (2 << 30) | (4 << 16) | (ord("H") << 8) | 211  # 0x800448d3
# struct hci_dev_info: __u16 dev_id; char name[8]; bdaddr_t bdaddr (6 bytes, least significant
# byte first); then flags, type, features, MTUs and statistics (92 bytes in all).
DEV_INFO_SIZE = 92


def format_bdaddr(raw: bytes) -> str:
    """bdaddr_t (6 bytes, least significant first) as BlueZ writes it in ``phys``, lowercase."""
    return ":".join(f"{b:02x}" for b in reversed(raw[:6]))


def parse_dev_info(buf: bytes) -> str | None:
    """The address in a ``struct hci_dev_info``, or None when the answer is too short or zero."""
    if len(buf) < 16:
        return None
    raw = buf[10:16]
    return None if raw == bytes(6) else format_bdaddr(raw)


def hci_address(index: int) -> str | None:
    """Adapter ``hci<index>``'s address from the kernel, or None (no Bluetooth in this kernel,
    the adapter gone, any error): then no virtual node names it."""
    try:
        sock = socket.socket(AF_BLUETOOTH, socket.SOCK_RAW | socket.SOCK_CLOEXEC, BTPROTO_HCI)
    except (OSError, ValueError):
        return None
    with contextlib.closing(sock):
        try:
            buf = fcntl.ioctl(sock.fileno(), HCIGETDEVINFO,
                              struct.pack("<H", index) + bytes(DEV_INFO_SIZE - 2))
        except OSError:
            return None
    return parse_dev_info(buf)
