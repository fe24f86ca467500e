"""The plugin on the wire: the kubelet's gRPC services on two unix sockets of one server.

dra-api.md §6.1/§6.4: the DRA socket (``<plugin dir>/dra.sock``) serves the DRAPlugin service in
v1 and v1beta1 and the v1alpha1 health service, and is served first; the registration socket
(``<registry dir>/liken.sh-reg.sock``) serves ``pluginregistration.Registration``, whose GetInfo
names the driver, the DRA socket's host path and the services offered, v1 before v1beta1 because
the kubelet takes the first entry it supports. A stale socket file is replaced; both sockets are
removed on shutdown (the kubelet de-registers a driver whose registration socket is gone).
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from .cdi import DRIVER
from .core import ClaimRef, PrepareOutcome
from .gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)

if TYPE_CHECKING:
    from .core import Plugin

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
# Preferred first (dra-api.md §6.1); the health service is advertised when implemented (§6.4).
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth")
UNIX_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL
HEALTH_TIMEOUT_SECONDS = 60  # how long the kubelet may trust one health message


class SocketError(RuntimeError):
    """A socket path the plugin cannot serve on."""


def _claims(request: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]


def _prepare_response(pb: Any, out: dict[str, PrepareOutcome], share_ids: bool) -> Any:
    resp = pb.NodePrepareResourcesResponse()
    for uid, o in out.items():
        entry = resp.claims[uid]
        if o.error:
            entry.error = o.error
            continue
        for d in o.devices:
            dev = entry.devices.add(request_names=list(d.request_names), pool_name=d.pool,
                                    device_name=d.device, cdi_device_ids=list(d.cdi_ids))
            if share_ids and d.share_id:
                dev.share_id = d.share_id
    return resp


def _unprepare_response(pb: Any, out: dict[str, str]) -> Any:
    resp = pb.NodeUnprepareResourcesResponse()
    for uid, err in out.items():
        entry = resp.claims[uid]  # every claim needs an entry, even an empty one (§5.2)
        if err:
            entry.error = err
    return resp


class _DRAPluginV1(dra_v1_pb2_grpc.DRAPluginServicer):  # type: ignore[misc]
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        return _prepare_response(dra_v1_pb2, self.plugin.prepare(_claims(request)), True)

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return _unprepare_response(dra_v1_pb2, self.plugin.unprepare(_claims(request)))


class _DRAPluginV1beta1(dra_v1beta1_pb2_grpc.DRAPluginServicer):  # type: ignore[misc]
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        return _prepare_response(dra_v1beta1_pb2, self.plugin.prepare(_claims(request)), False)

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return _unprepare_response(dra_v1beta1_pb2, self.plugin.unprepare(_claims(request)))


class _Health(health_v1alpha1_pb2_grpc.DRAResourceHealthServicer):  # type: ignore[misc]
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def NodeWatchResources(self, request: Any, context: Any) -> Iterator[Any]:
        """The complete list of prepared devices, on every change and every health_interval."""
        pb = health_v1alpha1_pb2
        version = -1
        while context.is_active() and not self.plugin.stopping:
            if version == -1:
                version, devices = self.plugin.health()
            else:
                version, devices = self.plugin.wait_health(version,
                                                           self.plugin.config.health_interval)
            if not context.is_active() or self.plugin.stopping:
                return
            now = int(time.time())
            yield pb.NodeWatchResourcesResponse(devices=[
                pb.DeviceHealth(
                    device=pb.DeviceIdentifier(pool_name=d.pool, device_name=d.device),
                    health=pb.HEALTHY if d.healthy else pb.UNHEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=HEALTH_TIMEOUT_SECONDS,
                    message="present" if d.healthy else "hardware absent from the node",
                ) for d in devices])


class _Registration(pluginregistration_v1_pb2_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def GetInfo(self, request: Any, context: Any) -> Any:
        return pluginregistration_v1_pb2.PluginInfo(
            type=PLUGIN_TYPE, name=DRIVER, endpoint=str(self.plugin.config.dra_socket.absolute()),
            supported_versions=list(SUPPORTED_VERSIONS))

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.plugin.registration = (request.plugin_registered, request.error)
        if request.plugin_registered:
            log.info("the kubelet registered %s", DRIVER)
        else:
            log.error("the kubelet refused to register %s: %s", DRIVER, request.error)
        return pluginregistration_v1_pb2.RegistrationStatusResponse()


def prepare_socket(path: Path) -> None:
    """Make room for a socket: create its directory, remove a stale socket, refuse other files."""
    if len(os.fsencode(str(path))) > UNIX_PATH_MAX:
        raise SocketError(f"socket path {path} is longer than {UNIX_PATH_MAX} bytes")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(st.st_mode):
        path.unlink()
    else:
        raise SocketError(f"{path} exists and is not a socket; not replacing it")


class Servers:
    """The plugin's gRPC server, listening on both unix sockets.

    One server with two ports rather than two servers: each grpc server keeps its own polling
    threads, and on an idle node the second one alone cost as much CPU as the whole agent's budget
    (docs/performance.md). Both sockets are bound before the server starts, the DRA socket first,
    so the DRA endpoint exists before the registration socket appears to the kubelet's watcher;
    each socket also answers the other's services, which only the kubelet can reach.
    """

    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin
        self.server: grpc.Server | None = None

    def start(self) -> None:
        cfg = self.plugin.config
        prepare_socket(cfg.dra_socket)
        prepare_socket(cfg.registration_socket)
        server = grpc.server(ThreadPoolExecutor(max_workers=cfg.grpc_workers + 1,
                                                thread_name_prefix="kubelet-grpc"),
                             options=[("grpc.so_reuseport", 0)])
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAPluginV1(self.plugin), server)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAPluginV1beta1(self.plugin),
                                                             server)
        health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(_Health(self.plugin),
                                                                          server)
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(
            _Registration(self.plugin), server)
        self.server = server
        try:
            for path in (cfg.dra_socket, cfg.registration_socket):  # the DRA socket first
                if server.add_insecure_port(f"unix:{path}") == 0:
                    raise SocketError(f"cannot bind {path}")
            server.start()
        except BaseException:
            self.stop()
            raise
        log.info("serving %s on %s, registration on %s", DRIVER, cfg.dra_socket,
                 cfg.registration_socket)

    def stop(self) -> None:
        cfg = self.plugin.config
        # The registration socket goes first: the kubelet de-registers the driver and stops
        # sending work before the DRA socket closes.
        _unlink_socket(cfg.registration_socket)
        if self.server is not None:
            self.server.stop(grace=1.0).wait()
        _unlink_socket(cfg.dra_socket)
        self.server = None


def _unlink_socket(path: Path) -> None:
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
