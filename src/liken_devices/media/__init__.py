"""The media capabilities agent (render-node-capabilities.txt).

For every GPU render node liken publishes, the agent asks the GPU's VA-API driver, through the
real libva, what it decodes, encodes and scales, and publishes the answer as a ``media.liken.sh``
device with eighteen booleans, paired with the ``liken.sh`` render node through
``resource.kubernetes.io/pciBusID``.

Modules: :mod:`.va` (libva's constants, pure data), :mod:`.vaapi` (the ctypes queries; loaded
only in the child process), :mod:`.probe` (one child process per render node, the timeout),
:mod:`.capabilities` (the seed's table), :mod:`.devices` (the slice), :mod:`.cli` (``scan`` and
``run``). Importing this package never loads libva: the parent process must not (libva.md 3.4).
"""
