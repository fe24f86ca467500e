"""liken-devices: the device layer of liken.

Two programs live here. The liken.sh DRA driver (``liken-devices``) walks sysfs, publishes the
node's claimable hardware as a ResourceSlice and delivers /dev nodes to containers through CDI.
The media capabilities agent (``liken-media``) asks each GPU's VA-API driver what it supports.
Everything the driver publishes is a view of one pure decision, :mod:`liken_devices.inventory`;
its name and limits live in :mod:`liken_devices.inventory.limits`.
"""

__version__ = "0.1.0"
