"""``liken-devices run``: the node agent assembled from its command line, and run.

:mod:`.cli` defines the command's options and reads them once into a
:class:`.options.RunOptions`; this module, the composition root, builds the agent they describe
(:func:`assemble`: the endpoint first, then the API client, the publishers, the watches, the
kubelet plugin and the machine side) and runs it until SIGTERM.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..inventory import Sources
from ..inventory.limits import DRIVER
from ..kube import MachineReporter, ObjectWatch, Resources, SlicePublisher, make_client
from ..kube.client import cluster_available
from ..kube.endpoint import Endpoint, default_address
from ..kube.watch import Watch
from ..plugin.options import Upgrade
from ..plugin.upgrade import surge_or_plain
from ..slices.publish import Publisher, SliceFile
from .metrics import AgentMetrics
from .options import RunOptions
from .runner import Agent, AgentConfig, Wake

if TYPE_CHECKING:
    from lightkube import Client

    from ..machine.side import MachineSide
    from ..plugin.core import Plugin, Walk

log = logging.getLogger(__name__)


class Assembled:
    """The agent and what must be closed after it ran."""

    def __init__(self, agent: Agent, client: Client | None, server: Endpoint | None) -> None:
        self.agent = agent
        self.client = client
        self.metrics_server = server

    def close(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.stop()
        if self.client is not None:
            self.client.close()


def assemble(opts: RunOptions) -> Assembled:
    """Build the agent the options describe (``cmd_run`` runs it; tests run it in a thread)."""
    opts = opts._replace(upgrade=_surge_only_where_supported(opts))
    metrics = AgentMetrics()
    # The endpoint listens before anything slow (the agent's modules, the API client, the
    # plugin): in a surge upgrade, from the moment it listens the kubelet's probes of this pod
    # reach this instance rather than the old one (docs/plugin.md, "Upgrades"). Until the agent
    # exists its checks say "starting".
    built: list[Agent] = []
    server = _serve(opts, metrics, built)
    try:
        return _assemble(opts, metrics, server, built)
    except BaseException:
        if server is not None:
            server.stop()
        raise


def _surge_only_where_supported(opts: RunOptions) -> Upgrade:
    """``--seamless-upgrade`` on a node whose kubelet is older than 1.33 (or unknown): a plain
    single instance, said once (plugin/upgrade.py). Offline there is no kubelet to ask."""
    if not opts.upgrade.seamless or opts.no_api or not cluster_available(opts.kubeconfig):
        return opts.upgrade
    client = make_client(opts.kubeconfig, timeout=opts.api_timeout)
    try:
        return surge_or_plain(opts.upgrade, opts.node, client)
    finally:
        client.close()


def _serve(opts: RunOptions, metrics: AgentMetrics, built: list[Agent]) -> Endpoint | None:
    """The metrics and probe endpoint (None without ``--metrics-port``); its checks ask the
    agent once ``built`` holds it."""
    if opts.metrics_port is None:
        return None
    def check(name: str) -> Callable[[], tuple[bool, str]]:
        def run() -> tuple[bool, str]:
            if not built:
                return False, "starting: the agent is being assembled"
            result: tuple[bool, str] = getattr(built[0], name)()
            return result
        return run

    addr = opts.metrics_addr or default_address()
    # A surge upgrade runs two instances in the node's network namespace: they share it.
    server = metrics.serve(opts.metrics_port, addr, health=check("health"),
                           ready=check("readiness"), reuse_port=opts.upgrade.seamless,
                           probe_socket=opts.probe_socket)
    log.info("metrics and probes on %s:%d (/metrics, /healthz, /readyz)%s", addr, server.port,
             f", probes on {opts.probe_socket} too" if opts.probe_socket else "")
    return server


def _assemble(opts: RunOptions, metrics: AgentMetrics, server: Endpoint | None,
              built: list[Agent]) -> Assembled:
    """The rest of :func:`assemble`, once the endpoint listens."""
    node, sources = opts.node, opts.sources
    config = AgentConfig(node=node, sources=sources, console=opts.console,
                         status_out=opts.status_out)
    if opts.quiet_seconds is not None:
        config.quiet = opts.quiet_seconds
    online = not opts.no_api and cluster_available(opts.kubeconfig)
    if not online and not opts.no_api:
        log.warning("no kubeconfig and not in a pod: running offline (spec from --machine)")
    reporter: MachineReporter | None = None
    client: Client | None = None
    publishers: list[Publisher] = []
    watches: list[Callable[[Agent], Watch]] = []
    if online:
        client = make_client(opts.kubeconfig, timeout=opts.api_timeout)

        def on_sharing(available: bool) -> None:
            # The write's answer shows whether the server keeps allowMultipleAllocations: the
            # Machine says so (SharingAvailable), at once if a walk already reported.
            if reporter is not None and reporter.set_sharing(available):
                agent.wake(Wake.REPORT)

        publishers.append(SlicePublisher(client, node, metrics=metrics, on_sharing=on_sharing))
        if sources.machine_file is None:
            reporter = MachineReporter(client, node, metrics=metrics)
        else:
            log.info("Machine spec read from %s; the Machine object is not reported",
                     sources.machine_file)
        watches = _watches(client, node, reporter is not None)
    if opts.slice_out is not None:
        # The file's writes count as the slice's only without the API server's.
        publishers.append(SliceFile(node, opts.slice_out,
                                    published=None if online else metrics.published))
    agent = Agent(config, publishers=publishers, reporter=reporter, metrics=metrics,
                  watches=watches)
    if opts.plugin:
        # Prepare walks afresh with the Machine's current spec (the agent's, not the file's);
        # an unprepare wakes a walk, since what a claim held publishes again (docs/plugin.md).
        agent.plugin = _plugin(opts, client, agent.fresh_walk, metrics,
                               lambda: agent.wake(Wake.CLAIMS))
        if agent.plugin is not None:
            metrics.track_registration(lambda: bool(agent.plugin and agent.plugin.registered))
            quiet_grpc()
    if opts.machine_side:
        agent.machine_side = _machine_side(sources, lambda: agent.wake(Wake.MACHINE_SIDE))
    built.append(agent)
    log.info("liken-devices run: node %s, %s", node,
             "publishing to the API server" if online else "offline")
    return Assembled(agent, client, server)


def cmd_run(opts: RunOptions) -> int:
    built = assemble(opts)
    signal.signal(signal.SIGTERM, built.agent.request_stop)
    signal.signal(signal.SIGINT, built.agent.request_stop)
    built.agent.release_lines_at_exit = True
    try:
        return int(built.agent.run())
    finally:
        built.close()
        # Last of all: a surge upgrade's new instance attaches the lines at their release.
        built.agent.release_lines()


def _watches(client: Client, node: str, machine: bool) -> list[Callable[[Agent], Watch]]:
    """The slice and Machine watches, sharing the agent's one client (one SSL context)."""
    def slice_watch(agent: Agent) -> Watch:
        return ObjectWatch(lambda: client, Resources.slice(),
                           {"spec.nodeName": node, "spec.driver": DRIVER},
                           agent.on_slice_event, "slices", owns_client=False).start()

    def machine_watch(agent: Agent) -> Watch:
        return ObjectWatch(lambda: client, Resources.machine(), {"metadata.name": node},
                           agent.on_machine_event, "machine", owns_client=False).start()

    return [slice_watch, machine_watch] if machine else [slice_watch]


def _plugin(opts: RunOptions, client: Client | None, walk: Walk,
            metrics: AgentMetrics, on_release: Callable[[], object]) -> Plugin | None:
    try:
        # deferred: --no-plugin starts without the plugin's modules, 42 ms (tests/test_layers.py)
        from ..plugin.core import Plugin, PluginConfig
    except ImportError:
        log.warning("the kubelet plugin is not part of this build; not serving it")
        return None
    dirs = opts.dirs
    config = PluginConfig(node=opts.node, cdi_dir=dirs.cdi_dir, state_dir=dirs.state_dir,
                          plugin_dir=dirs.plugin_dir, registry_dir=dirs.registry_dir,
                          sysfs=opts.sources.sysfs, pod_uid=opts.upgrade.pod_uid)
    return Plugin(config, walk=walk, kube_client=client, metrics=metrics, on_release=on_release)


def quiet_grpc(period: float = 3600.0) -> None:
    """Let grpcio's server threads sleep until there is work.

    Each grpcio server's serving thread polls its completion queue with a one-second deadline
    only to notice a server object that was garbage-collected without ``stop()``
    (``grpc._server._DEALLOCATED_SERVER_CHECK_PERIOD_S``). The agent always stops its servers,
    and ``stop()`` posts to that queue, so a long deadline changes nothing but the idle cost:
    two wake-ups a second are most of an idle node's CPU (tests/bench/agent_bench.py).
    """
    try:
        # deferred: grpcio, 58-115 ms, only with the plugin (tests/test_layers.py)
        import grpc._server as grpc_server
    except ImportError:
        return
    if hasattr(grpc_server, "_DEALLOCATED_SERVER_CHECK_PERIOD_S"):
        grpc_server._DEALLOCATED_SERVER_CHECK_PERIOD_S = period


def _machine_side(sources: Sources, on_change: Callable[[], None]) -> MachineSide | None:
    try:
        # deferred: --no-machine-side starts without it, 21 ms (tests/test_layers.py)
        from ..machine.side import MachineSide
    except ImportError:
        return None
    return MachineSide(sources.modules_dir, sys_root=sources.sysfs, on_change=on_change)
