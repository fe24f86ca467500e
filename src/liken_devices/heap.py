"""The heap of a long-running process, once it has started.

CPython's cyclic garbage collector now and then makes a full collection, which walks every object
it tracks: in the node agent that is tens of thousands of objects made while importing grpcio,
lightkube and the package, none of which ever becomes garbage. Such a pass stops every thread for
tens of milliseconds, and when it falls in a kubelet's NodePrepareResources it is that call's
latency (docs/performance.md, "Kubelet plugin"). Once a process has started, :func:`settle`
collects what start-up left and moves the survivors to the collector's permanent generation
(``gc.freeze``), so later passes walk only what the process made since.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect start-up's garbage and stop tracking what survived it (call once, after start).

    What an entry point froze while importing (:mod:`.entry`) is collected too: a garbage cycle
    made by an import is not kept for the life of the agent."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
