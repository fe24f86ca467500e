"""The media capabilities agent (docs/rules/media.md).

For every GPU render node liken publishes, the agent asks the GPU's VA-API driver, through the
real libva, what it decodes, encodes and scales, and publishes the answer as a ``media.liken.sh``
device with eighteen booleans, paired with the ``liken.sh`` render node through
``resource.kubernetes.io/pciBusID``.

Modules: :mod:`.va` (libva's constants, pure data), :mod:`.child` (the process that sends the
queries through ctypes: the only one that loads libva, self-contained), :mod:`.probe` (one child per
render node, in parallel, killed at the timeout), :mod:`.capabilities` (the capability table and log
line), :mod:`.devices` (the media.liken.sh devices and slice), :mod:`.agent` (the ``run`` loop) and
:mod:`.cli` (the options of ``scan`` and ``run``, which :mod:`.scan` and :mod:`.run` run). Importing
this package never loads libva: the parent process must not (a driver that hangs or crashes would
take the agent with it; docs/media.md, "How it asks").
"""
