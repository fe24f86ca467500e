"""The kubelet half of the liken.sh DRA driver: claims in, CDI specs out.

One job of the node agent is to answer the kubelet when a pod's claim comes to the node
(rules: delivery.nodes-only). The kubelet calls this plugin over gRPC on a unix socket to prepare
each allocated claim; the plugin writes a CDI spec naming the claim's device nodes and answers with
CDI device IDs, which the container runtime resolves.

Modules: :mod:`.core` (prepare/unprepare/reconcile/health logic), :mod:`.server` (the gRPC services
and sockets), :mod:`.cdi` (spec files), :mod:`.state` (the on-disk memory of prepared claims),
:mod:`.claimref` (a claim as the kubelet names it: its UID parsed where it enters), :mod:`.claims`
(reading a ResourceClaim), :mod:`.usb` (drivers_probe), :mod:`.cli` (the options of
``liken-devices plugin`` and ``liken-devices claims``, which :mod:`.serve` and :mod:`.prepared` run;
:mod:`.upgrade` the seamless-upgrade mode's decisions); the ``.proto`` files are in ``proto/`` and
their stubs in ``gen/`` (``scripts/gen-protos.sh``).

Contract for the node agent (``liken-devices run``) that embeds the plugin::

    from liken_devices.plugin import Plugin, PluginConfig

    plugin = Plugin(PluginConfig(node=node_name, cdi_dir=..., state_dir=..., plugin_dir=...,
                                 registry_dir=..., sysfs=sources.sysfs),
                    walk=lambda *, claimed: sources.walk(machine, claimed=claimed),  # FRESH
                    kube_client=lightkube.Client(...),     # .get(ResourceClaim, name, namespace=)
                    on_release=lambda: wake_a_walk())      # an unprepare ended a claim
    plugin.start()          # locks and loads the state, serves dra.sock, then registration
    ...
    inv = sources.walk(machine, claimed=plugin.claimed())  # claims shape every walk
    publish(inv)            # the agent's slice
    plugin.reconcile(inv)   # after EVERY walk: rewrites prepared claims' specs (only if changed)
    ...
    plugin.stop()           # on SIGTERM: both sockets removed; state and specs stay

* ``walk`` is called once per NodePrepareResources call (not per claim), under the plugin's
  lock, from a gRPC worker thread, with ``claimed=`` the claims already prepared (it must not
  call ``plugin.claimed()`` itself: the lock is held); it must be thread-safe with respect to
  the agent's own walks (``Sources.walk`` builds a new snapshot each time, which is).
* ``claimed()`` takes the lock; the agent passes it to each of its own walks, because a claimed
  USB device keeps its shape until its claim ends and the 128 cap keeps what is claimed
  (rules: usb.claimed-keeps-shape, limits.cap-keeps-claimed).
* ``on_release`` is called after an unprepare ended a claim, outside the lock: the embedder
  walks again, so what the claim held is published as the kernel now shows it.
* ``reconcile(inv)`` takes the same lock; it may be called from any thread. It never calls
  ``walk`` itself.
* ``kube_client`` may be None (prepare then fails every claim in band, unprepare still works).
* Pass ``sysfs=None`` when the walk reads a umockdev recording: USB interfaces are then never
  looked up or written to ``drivers_probe`` on this machine.
* The state (``state_dir``, default /var/lib/liken-devices/plugin) must be on persistent
  storage; the CDI dir (default /var/run/cdi) is a tmpfs and is rebuilt by ``reconcile``.
* ``start()`` raises :class:`~.state.StateBusy` when another instance holds the state's lock and
  :class:`~.server.SocketError` when a socket path is taken by a live process or unusable: both
  are ``InputError`` (exit 2, one line). ``stop()`` releases the lock; it is safe after a failed
  ``start()`` and removes only sockets this instance bound.
* ``PluginConfig(pod_uid=...)`` is the seamless-upgrade mode (docs/plugin.md, "Upgrades").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .claimref import ClaimRef
    from .core import Plugin, PluginConfig, PreparedDeviceResult, PrepareOutcome

__all__ = ["ClaimRef", "Plugin", "PluginConfig", "PrepareOutcome", "PreparedDeviceResult"]


def __getattr__(name: str) -> Any:
    # deferred (PEP 562): the commands' parser imports this package, and must not pay for the
    # plugin's core it never runs, 26 ms, nor ClaimRef's dataclass, 8 ms (tests/test_layers.py).
    if name in __all__:
        from . import claimref, core

        return getattr(claimref if name == "ClaimRef" else core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
