"""``liken-devices run``: the node agent that keeps the slice, the plugin and the Machine true.

:mod:`.uevent` reads the kernel's uevents and decides when a burst is over; :mod:`.runner` is the
loop (walk, publish, reconcile, report); :mod:`.metrics` the Prometheus side; :mod:`.cli` the
subcommand's options, registered by ``liken_devices.cli``, and :mod:`.run` the command.
"""
