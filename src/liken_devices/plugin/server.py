"""The plugin on the wire: the kubelet's gRPC services on two unix sockets of one server.

The kubelet's plugin registration and DRA gRPC contracts (docs/plugin.md, "Sockets and
services"): the DRA socket (``<plugin dir>/dra.sock``) serves the DRAPlugin service in v1 and
v1beta1 and the health service (KEP-4680) in v1 and v1alpha1, one stream behind both, and is
served first; the registration socket (``<registry dir>/liken.sh-reg.sock``) serves
``pluginregistration.Registration``, whose GetInfo names the driver, the DRA socket's host path
and the services offered, v1 before v1beta1 because the kubelet takes the first entry it
supports (rules: delivery.health-versions). The kubelet de-registers a driver whose
registration socket is gone, so both sockets are removed on shutdown.

Hostile or accidental company on the sockets (docs/plugin.md, "Bad input"): a socket file is
replaced only when nothing answers on it, and removed on shutdown only while it is still the one
this process bound, so two instances never cut each other off; the sockets and the directory
this plugin makes for them are for root only. Health streams are server-streaming calls that
hold a worker thread each; they have their own cap, and the pool keeps its threads for prepare
and unprepare whatever the number of streams. A call names at most ``MAX_CLAIMS`` claims.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import socket
import stat
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from ..errors import InputError
from ..files import make_dir
from ..inventory.limits import DRIVER
from .claimref import ClaimRef, UidError
from .core import UNIX_PATH_MAX, PrepareOutcome
from .gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)

if TYPE_CHECKING:
    from .core import Plugin

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
# The kubelet takes the first DRAPlugin entry it supports, so v1 comes first. The health service
# is advertised in both versions it is served in: a 1.37 kubelet takes v1 wherever it stands,
# an older one knows only v1alpha1, which upstream plans to drop (rules: delivery.health-versions).
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                      "v1alpha1.DRAResourceHealth")
HEALTH_TIMEOUT_SECONDS = 60  # how long the kubelet may trust one health message
SOCKET_MODE = 0o600  # only root (the kubelet) may connect
PLUGIN_DIR_MODE = 0o700  # a socket directory this plugin has to make: root's only
# A socket is bound at a short temp name in its directory first: ".lk" and 8 hex digits (a
# name starting with "." is ignored by the kubelet's watcher).
_TEMP_SOCKET = re.compile(r"\.lk[0-9a-f]{8}")
# The kubelet opens one health stream per plugin; a few more cover its reconnects. Each open
# stream holds a pool thread, so the pool has these on top of the threads for unary calls.
HEALTH_STREAMS = 4
# A call names the claims of one pod, which are few; far more is not the kubelet.
MAX_CLAIMS = 256
MAX_MESSAGE_BYTES = 1 << 20
MAX_CONCURRENT_RPCS = 64  # beyond: RESOURCE_EXHAUSTED at once, nothing queued without bound


class SocketError(InputError):
    """A socket path the plugin cannot serve on (the operator's to fix: exit 2, one line)."""


def _claims(request: Any, context: Any) -> tuple[list[ClaimRef], dict[str, str]]:
    """The call's claims, each parsed where it enters (``ClaimRef.parse``), and those whose UID
    is not a UID: the text sent -> why (the answer names them by it, with the error in band)."""
    if len(request.claims) > MAX_CLAIMS:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                      f"{len(request.claims)} claims in one call; at most {MAX_CLAIMS}")
    claims: list[ClaimRef] = []
    refused: dict[str, str] = {}
    for c in request.claims:
        try:
            claims.append(ClaimRef.parse(c.namespace, c.uid, c.name))
        except UidError as e:
            refused[c.uid] = str(e)
    return claims, refused


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
        entry = resp.claims[uid]  # every claim needs an entry, even an empty one
        if err:
            entry.error = err
    return resp


class _DRAPluginV1(dra_v1_pb2_grpc.DRAPluginServicer):  # type: ignore[misc]
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        return _prepare_response(dra_v1_pb2, self.plugin.prepare(*_claims(request, context)),
                                 True)

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return _unprepare_response(dra_v1_pb2, self.plugin.unprepare(*_claims(request, context)))


class _DRAPluginV1beta1(dra_v1beta1_pb2_grpc.DRAPluginServicer):  # type: ignore[misc]
    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        return _prepare_response(dra_v1beta1_pb2,
                                 self.plugin.prepare(*_claims(request, context)), False)

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return _unprepare_response(dra_v1beta1_pb2,
                                   self.plugin.unprepare(*_claims(request, context)))


class _Health:
    """The health stream, in the messages of one version of the service (``pb``).

    rules: delivery.health-versions. v1 and v1alpha1 carry the same messages with the same field
    numbers; one instance per version, sharing the plugin's health and one cap of streams.
    """

    def __init__(self, plugin: Plugin, slots: _StreamSlots, pb: Any, service: str) -> None:
        self.plugin = plugin
        self.slots = slots
        self.pb = pb
        self.service = service

    def NodeWatchResources(self, request: Any, context: Any) -> Iterator[Any]:
        """The complete list of prepared devices, on every change and every health_interval.

        At most ``HEALTH_STREAMS`` at once: one more is refused (RESOURCE_EXHAUSTED; the kubelet
        retries), so open streams never take the threads prepare and unprepare need. A stream
        whose client went away frees its slot at once (the call's callback wakes it).
        """
        if not self.slots.take():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"already {self.slots.limit} health streams open")
        try:
            context.add_callback(self.plugin.wake_health)
            # Which version a kubelet chose shows here (its own logs say so only when verbose).
            log.info("the kubelet opened a health stream over %s", self.service)
            yield from self._stream(context)
        finally:
            self.slots.give()

    def _stream(self, context: Any) -> Iterator[Any]:
        pb = self.pb
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
                    message="present" if d.healthy else (
                        d.message or "hardware absent from the node"),
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


def answers(path: Path, timeout: float = 2.0) -> bool:
    """Whether a process listens on the unix socket ``path`` (connect, then hang up)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False  # a socket file nobody listens on (its process died), or already gone
    except OSError as e:
        if e.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            return False
        raise SocketError(f"cannot tell whether {path} is in use: {e.strerror or e}") from None
    finally:
        s.close()
    return True


def check_socket_path(path: Path) -> None:
    """Refuse a path that is too long, or holds something else, or a socket that answers."""
    longest = max(len(os.fsencode(str(path))), len(os.fsencode(str(_temp_socket(path)))))
    if longest > UNIX_PATH_MAX:
        raise SocketError(f"socket path {path} is longer than {UNIX_PATH_MAX} bytes")
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketError(f"{path} exists and is not a socket; not replacing it")
    if answers(path):
        raise SocketError(f"{path}: another process answers on this socket (another "
                          "liken-devices plugin or run serving this node?); not replacing it")


def _temp_socket(path: Path) -> Path:
    return path.parent / f".lk{os.urandom(4).hex()}"


def remove_dead_sockets(directory: Path, pattern: re.Pattern[str], keep: Path | None = None,
                        ) -> list[str]:
    """Remove the sockets named by ``pattern`` on which nothing answers (instances that died
    without removing them); a socket that answers is another live instance's and stays."""
    removed: list[str] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return removed
    for name in names:
        path = directory / name
        if path == keep or not pattern.fullmatch(name):
            continue
        try:
            if not stat.S_ISSOCK(path.lstat().st_mode) or answers(path):
                continue
            path.unlink()
        except (OSError, SocketError):
            continue
        removed.append(name)
    return removed


class _Bound:
    """One socket this process bound: its path and identity, so only it is ever removed."""

    def __init__(self, path: Path, ident: tuple[int, int]) -> None:
        self.path = path
        self.ident = ident

    def remove(self) -> None:
        try:
            st = self.path.lstat()
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) == self.ident:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        else:
            log.warning("%s is no longer the socket this process bound; leaving it", self.path)


class _StreamSlots:
    """At most ``limit`` health streams at a time; each holds a worker thread while open."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            if self.open >= self.limit:
                return False
            self.open += 1
            return True

    def give(self) -> None:
        with self.lock:
            self.open -= 1


class Servers:
    """The plugin's gRPC server, listening on both unix sockets.

    One server with two ports rather than two servers: each grpc server keeps its own polling
    threads, and on an idle node the second one alone cost as much CPU as the whole agent's budget
    (docs/performance.md). Both sockets are bound before the server starts, the DRA socket first,
    so the DRA endpoint exists before the registration socket appears to the kubelet's watcher;
    each socket also answers the other's services, which only the kubelet can reach.

    Each socket is bound at a temp name in its directory (starting with ``.``, which the
    kubelet's watcher ignores), made root-only, then renamed to its path: the path never holds a
    socket of another mode, a dead socket is replaced in one step, and grpc, which removes the
    paths it bound when it stops, only ever removes the temp name.
    """

    def __init__(self, plugin: Plugin) -> None:
        self.plugin = plugin
        self.server: grpc.Server | None = None
        self.bound: list[_Bound] = []

    def start(self) -> None:
        cfg = self.plugin.config
        for path in (cfg.dra_socket, cfg.registration_socket):
            check_socket_path(path)
        make_dir(cfg.plugin_dir, PLUGIN_DIR_MODE)
        make_dir(cfg.registry_dir, PLUGIN_DIR_MODE)
        for directory in (cfg.plugin_dir, cfg.registry_dir):
            for name in remove_dead_sockets(directory, _TEMP_SOCKET):
                log.info("removed %s, a socket left by a killed plugin", directory / name)
        if cfg.seamless:
            # Sockets of instances that were killed before removing them (an old pod's, or a
            # predecessor's in the default mode); a live instance answers and keeps its own.
            for directory, pattern, keep in (
                    (cfg.plugin_dir, _DRA_SOCKETS, cfg.dra_socket),
                    (cfg.registry_dir, _REGISTRATION_SOCKETS, cfg.registration_socket)):
                for name in remove_dead_sockets(directory, pattern, keep):
                    log.info("removed %s: nothing answered on it", directory / name)
        workers = cfg.grpc_workers + HEALTH_STREAMS + 1  # +1: refusing a stream over the cap
        server = grpc.server(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kubelet-grpc"),
            options=[("grpc.so_reuseport", 0),
                     ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
            maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
        slots = _StreamSlots(HEALTH_STREAMS)
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAPluginV1(self.plugin), server)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAPluginV1beta1(self.plugin),
                                                             server)
        for pb, pb_grpc, service in (
                (health_v1_pb2, health_v1_pb2_grpc, "v1.DRAResourceHealth"),
                (health_v1alpha1_pb2, health_v1alpha1_pb2_grpc, "v1alpha1.DRAResourceHealth")):
            pb_grpc.add_DRAResourceHealthServicer_to_server(
                _Health(self.plugin, slots, pb, service), server)
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(
            _Registration(self.plugin), server)
        self.server = server
        try:
            for path in (cfg.dra_socket, cfg.registration_socket):  # the DRA socket first
                self._bind(server, path)
            server.start()
        except BaseException:
            self.stop()
            raise
        log.info("serving %s on %s, registration on %s", DRIVER, cfg.dra_socket,
                 cfg.registration_socket)

    def _bind(self, server: grpc.Server, path: Path) -> None:
        tmp = _temp_socket(path)
        old = os.umask(0o177)  # the socket is born root-only (rw for its owner)
        try:
            ok = server.add_insecure_port(f"unix:{tmp}") != 0
        finally:
            os.umask(old)
        if not ok:
            raise SocketError(f"cannot bind {path}")
        os.chmod(tmp, SOCKET_MODE)
        check_socket_path(path)  # still nothing alive there
        os.rename(tmp, path)
        st = path.lstat()
        self.bound.append(_Bound(path, (st.st_dev, st.st_ino)))

    def stop(self) -> None:
        # The registration socket goes first: the kubelet de-registers the driver and stops
        # sending work before the DRA socket closes.
        for b in self.bound[1:]:
            b.remove()
        if self.server is not None:
            self.server.stop(grace=1.0).wait()
        for b in self.bound[:1]:
            b.remove()
        self.server = None
        self.bound = []


_DRA_SOCKETS = re.compile(r"dra(-[A-Za-z0-9-]{1,64})?\.sock")
_REGISTRATION_SOCKETS = re.compile(re.escape(DRIVER) + r"(-[A-Za-z0-9-]{1,64})?-reg\.sock")
