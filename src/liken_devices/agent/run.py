"""``liken-devices run``: the node agent assembled from its command line, and run.

:mod:`.cli` defines the command's options; this module builds the agent they describe
(:func:`assemble`: the endpoint first, then the API client, the publishers, the watches, the
kubelet plugin and the machine side) and runs it until SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Callable
from typing import Any

from ..cliargs import node_from_args, sources_from_args
from ..inventory.limits import DRIVER
from ..kube import MachineReporter, ObjectWatch, Resources, SlicePublisher, make_client
from ..kube.client import cluster_available
from ..kube.endpoint import default_address
from ..plugin.upgrade import plain_unless_kubelet_surges, pod_uid_from_args
from ..slices.publish import Publisher, SliceFile
from .metrics import AgentMetrics
from .runner import Agent, AgentConfig, Wake

log = logging.getLogger(__name__)


class Assembled:
    """The agent and what must be closed after it ran."""

    def __init__(self, agent: Any, client: Any, server: Any) -> None:
        self.agent = agent
        self.client = client
        self.metrics_server = server

    def close(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.stop()
        if self.client is not None:
            self.client.close()


def assemble(args: argparse.Namespace) -> Assembled:
    """Build the agent the options describe (``cmd_run`` runs it; tests run it in a thread)."""
    sources = sources_from_args(args)
    sources.check()
    node = node_from_args(args)
    _surge_only_where_supported(args, node)
    metrics = AgentMetrics()
    # The endpoint listens before anything slow (the agent's modules, the API client, the
    # plugin): in a surge upgrade, from the moment it listens the kubelet's probes of this pod
    # reach this instance rather than the old one (docs/plugin.md, "Upgrades"). Until the agent
    # exists its checks say "starting".
    built: list[Any] = []
    server = _serve(args, metrics, built)
    try:
        return _assemble(args, node, sources, metrics, server, built)
    except BaseException:
        if server is not None:
            server.stop()
        raise


def _surge_only_where_supported(args: argparse.Namespace, node: str) -> None:
    """``--seamless-upgrade`` on a node whose kubelet is older than 1.33 (or unknown): a plain
    single instance, said once (plugin/upgrade.py). Offline there is no kubelet to ask."""
    if not getattr(args, "seamless_upgrade", False):
        return
    pod_uid_from_args(args)  # a bad --pod-uid is the operator's error before anything else
    if args.no_api or not cluster_available(args.kubeconfig):
        return
    client = make_client(args.kubeconfig, timeout=args.api_timeout)
    try:
        plain_unless_kubelet_surges(args, node, client)
    finally:
        client.close()


def _serve(args: argparse.Namespace, metrics: Any, built: list[Any]) -> Any:
    """The metrics and probe endpoint (None without ``--metrics-port``); its checks ask the
    agent once ``built`` holds it."""
    if args.metrics_port is None:
        return None
    def check(name: str) -> Callable[[], tuple[bool, str]]:
        def run() -> tuple[bool, str]:
            if not built:
                return False, "starting: the agent is being assembled"
            result: tuple[bool, str] = getattr(built[0], name)()
            return result
        return run

    addr = args.metrics_addr or default_address()
    # A surge upgrade runs two instances in the node's network namespace: they share it.
    server = metrics.serve(args.metrics_port, addr, health=check("health"),
                           ready=check("readiness"),
                           reuse_port=bool(getattr(args, "seamless_upgrade", False)),
                           probe_socket=args.probe_socket)
    log.info("metrics and probes on %s:%d (/metrics, /healthz, /readyz)%s", addr, server.port,
             f", probes on {args.probe_socket} too" if args.probe_socket else "")
    return server


def _assemble(args: argparse.Namespace, node: str, sources: Any, metrics: Any, server: Any,
              built: list[Any]) -> Assembled:
    """The rest of :func:`assemble`, once the endpoint listens."""
    config = AgentConfig(node=node, sources=sources, console=args.console,
                         status_out=args.status_out)
    if args.quiet_seconds is not None:
        config.quiet = args.quiet_seconds
    online = not args.no_api and cluster_available(args.kubeconfig)
    if not online and not args.no_api:
        log.warning("no kubeconfig and not in a pod: running offline (spec from --machine)")
    reporter = client = None
    publishers: list[Publisher] = []
    watches: list[Any] = []
    if online:
        client = make_client(args.kubeconfig, timeout=args.api_timeout)

        def on_sharing(available: bool) -> None:
            # The write's answer shows whether the server keeps allowMultipleAllocations: the
            # Machine says so (SharingAvailable), at once if a walk already reported.
            if reporter is not None and reporter.set_sharing(available):
                agent.wake(Wake.REPORT)

        publishers.append(SlicePublisher(client, node, metrics=metrics, on_sharing=on_sharing))
        if args.machine is None:
            reporter = MachineReporter(client, node, metrics=metrics)
        else:
            log.info("Machine spec read from %s; the Machine object is not reported",
                     args.machine)
        watches = _watches(client, node, reporter is not None)
    if args.slice_out is not None:
        # The file's writes count as the slice's only without the API server's.
        publishers.append(SliceFile(node, args.slice_out,
                                    published=None if online else metrics.published))
    agent = Agent(config, publishers=publishers, reporter=reporter, metrics=metrics,
                  watches=watches)
    if not args.no_plugin:
        # Prepare walks afresh with the Machine's current spec (the agent's, not the file's);
        # an unprepare wakes a walk, since what a claim held publishes again (docs/plugin.md).
        agent.plugin = _plugin(args, node, sources, client, agent.fresh_walk, metrics,
                               lambda: agent.wake(Wake.CLAIMS))
        if agent.plugin is not None:
            metrics.track_registration(lambda: bool(agent.plugin and agent.plugin.registered))
            quiet_grpc()
    if not args.no_machine_side:
        agent.machine_side = _machine_side(sources, lambda: agent.wake(Wake.MACHINE_SIDE))
    built.append(agent)
    log.info("liken-devices run: node %s, %s", node,
             "publishing to the API server" if online else "offline")
    return Assembled(agent, client, server)


def cmd_run(args: argparse.Namespace) -> int:
    built = assemble(args)
    signal.signal(signal.SIGTERM, built.agent.request_stop)
    signal.signal(signal.SIGINT, built.agent.request_stop)
    built.agent.release_lines_at_exit = True
    try:
        return int(built.agent.run())
    finally:
        built.close()
        # Last of all: a surge upgrade's new instance attaches the lines at their release.
        built.agent.release_lines()


def _watches(client: Any, node: str, machine: bool) -> list[Any]:
    """The slice and Machine watches, sharing the agent's one client (one SSL context)."""
    def slice_watch(agent: Any) -> Any:
        return ObjectWatch(lambda: client, Resources.slice(),
                           {"spec.nodeName": node, "spec.driver": DRIVER},
                           agent.on_slice_event, "slices", owns_client=False).start()

    def machine_watch(agent: Any) -> Any:
        return ObjectWatch(lambda: client, Resources.machine(), {"metadata.name": node},
                           agent.on_machine_event, "machine", owns_client=False).start()

    return [slice_watch, machine_watch] if machine else [slice_watch]


def _plugin(args: argparse.Namespace, node: str, sources: Any, client: Any,
            walk: Any, metrics: Any, on_release: Callable[[], object]) -> Any:
    try:
        # deferred: --no-plugin starts without the plugin's modules, 42 ms (tests/test_layers.py)
        from ..plugin.core import Plugin, PluginConfig
    except ImportError:
        log.warning("the kubelet plugin is not part of this build; not serving it")
        return None
    config = PluginConfig(node=node, cdi_dir=args.cdi_dir, state_dir=args.state_dir,
                          plugin_dir=args.plugin_dir, registry_dir=args.registry_dir,
                          sysfs=sources.sysfs, pod_uid=pod_uid_from_args(args))
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


def _machine_side(sources: Any, on_change: Any) -> Any:
    try:
        # deferred: --no-machine-side starts without it, 21 ms (tests/test_layers.py)
        from ..machine.side import MachineSide
    except ImportError:
        return None
    return MachineSide(sources.modules_dir, sys_root=sources.sysfs, on_change=on_change)
