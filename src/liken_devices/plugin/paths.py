"""Where the kubelet plugin keeps its files by default, in a module light enough for ``--help``.

The kubelet finds a DRA plugin through a registration socket in its plugin registry and talks to
it on a socket in the driver's own plugin directory, both under the kubelet's root directory
(``/var/lib/kubelet`` unless the kubelet was started with another ``--root-dir``); CDI specs go to
``/var/run/cdi``, which container runtimes read (the CDI specification); the prepared claims are
remembered under ``/var/lib``, which survives a restart of the agent.
"""

from __future__ import annotations

from pathlib import Path

from ..inventory.limits import DRIVER

KUBELET_ROOT = Path("/var/lib/kubelet")
DEFAULT_CDI_DIR = Path("/var/run/cdi")
DEFAULT_STATE_DIR = Path("/var/lib/liken-devices/plugin")
DEFAULT_PLUGIN_DIR = KUBELET_ROOT / "plugins" / DRIVER
DEFAULT_REGISTRY_DIR = KUBELET_ROOT / "plugins_registry"
