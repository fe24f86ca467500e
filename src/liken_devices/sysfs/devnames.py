"""The kernel's default /dev name for a device node, where no DEVNAME says it.

Since 2.6.3x the kernel states each node's name in the device's ``uevent`` (DEVNAME). Older
kernels, and recordings of them, give only ``dev`` (major:minor); the name then follows the
class's ``devnode`` callback: ALSA under ``snd/``, evdev under ``input/``, DRM under ``dri/``,
usbfs at ``bus/usb/BBB/DDD``, the ``usb`` and ``usbmisc`` classes' nodes under ``usb/``, everything
else the directory name.
"""

from __future__ import annotations

from collections.abc import Mapping

from .usbbus import usb_role
from .values import dec

_SUBDIR = {"sound": "snd", "input": "input", "drm": "dri", "usbmisc": "usb", "dvb": "dvb",
           "bsg": "bsg"}
OSS_MAJOR = 14  # OSS emulation nodes (dsp, mixer, audio) stay at the top of /dev


def default_devname(subsystem: str | None, name: str, props: Mapping[str, str],
                    busnum: str | None = None, devnum: str | None = None,
                    major: int | None = None) -> str | None:
    if subsystem == "usb" and usb_role(name, props.get("DEVTYPE")) is None:
        # A class device of the legacy usb class: named as its successor usbmisc's are
        # (rules: usb.bus-devices-only).
        return f"usb/{name}"
    if subsystem == "usb":
        bus = dec(busnum or props.get("BUSNUM"))
        dev = dec(devnum or props.get("DEVNUM"))
        if bus is not None and dev is not None:
            return f"bus/usb/{bus:03d}/{dev:03d}"
        return None
    if subsystem == "sound" and major == OSS_MAJOR:
        return name
    sub = _SUBDIR.get(subsystem or "")
    return f"{sub}/{name}" if sub else name
