"""Reading the kernel's device model.

A :class:`~liken_devices.sysfs.model.Snapshot` is what one walk saw: every device that matters to
the inventory (bus devices, device nodes, Bluetooth controllers) with its subsystem, driver,
uevent properties and the few attributes the policy reads. Two sources produce it: a real sysfs
tree under a root directory (:mod:`.reader`) and a umockdev recording (:mod:`.umockdev`). The
policy never touches the filesystem; it only reads snapshots.
"""

from .model import DevNode, Snapshot, SysDevice

__all__ = ["DevNode", "Snapshot", "SysDevice"]
