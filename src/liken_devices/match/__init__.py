"""From a device to a claim and back: ``claim-for``, ``match`` and ``fleet``.

These commands answer the question every DRA user asks ("why is my claim pending?") before and
after deploying. They sit above ``slices`` and ``kube``: they read what the node agent publishes
(a local walk, a slice file or the cluster) and evaluate DeviceClasses and claims against it the
way the scheduler's structured-parameters allocator does (docs/claims.md).

Nothing here is imported by the node agent: the CEL library (the ``match`` extra) is imported
lazily by :mod:`.cel` only when a selector is compiled.
"""
