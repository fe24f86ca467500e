"""A test kubelet: the kubelet's side of plugin registration and of the DRA gRPC calls.

It does what the kubelet's plugin manager does (plugin registration, then the DRA manager), over
the real unix sockets:
dial the registration socket, call GetInfo, check the plugin type and name, choose the first of
the plugin's supported_versions that this kubelet supports (v1.DRAPlugin, v1beta1.DRAPlugin),
report the outcome with NotifyRegistrationStatus, then dial the advertised endpoint and call
NodePrepareResources / NodeUnprepareResources with the chosen service, checking the answers the
way the kubelet does (an entry for every claim, none for an unknown UID).

The health service is chosen from the same list the way the kubelet of 1.37 does (KEP-4680): v1
when the plugin advertises ``v1.DRAResourceHealth``, wherever it stands in the list, else
v1alpha1 when it advertises ``v1alpha1.DRAResourceHealth``, else no health stream. An older
kubelet knows only v1alpha1 (``health=("v1alpha1.DRAResourceHealth",)``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from liken_devices.plugin.gen import (
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

KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # most recent first
# The health services a 1.37 kubelet consumes, preferred first (v1alpha1 for the transition).
KUBELET_HEALTH = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
HEALTH_STUBS: dict[str, tuple[Any, Any]] = {
    "v1.DRAResourceHealth": (health_v1_pb2, health_v1_pb2_grpc),
    "v1alpha1.DRAResourceHealth": (health_v1alpha1_pb2, health_v1alpha1_pb2_grpc),
}
TIMEOUT = 45.0  # the kubelet's per-call timeout for a DRA plugin


class RegistrationRefused(Exception):
    pass


@dataclass
class ClaimAnswer:
    devices: list[dict[str, Any]]
    error: str


class TestKubelet:
    __test__ = False  # not a pytest class

    def __init__(self, registration_socket: Path, supported: Iterable[str] = KUBELET_SERVICES,
                 health: Iterable[str] = KUBELET_HEALTH):
        self.registration_socket = registration_socket
        self.supported = tuple(supported)
        self.health = tuple(health)
        self.info: Any = None
        self.service: str | None = None
        self.health_service: str | None = None
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        self._pb: Any = None

    def register(self) -> str:
        """The handshake; returns the service the kubelet will use."""
        if not self.registration_socket.exists():
            raise RegistrationRefused(f"no socket at {self.registration_socket}")
        with grpc.insecure_channel(f"unix:{self.registration_socket}") as ch:
            grpc.channel_ready_future(ch).result(timeout=10)  # dial timeout 10 s
            reg = pluginregistration_v1_pb2_grpc.RegistrationStub(ch)
            info = reg.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=10)
            self.info = info
            error = ""
            chosen = None
            if info.type != "DRAPlugin":
                error = f"unknown plugin type {info.type!r}"
            else:
                chosen = next((v for v in info.supported_versions if v in self.supported), None)
                if chosen is None:
                    error = (f"none of services supported by the plugin "
                             f"{list(info.supported_versions)} are supported by the kubelet")
            endpoint = info.endpoint or str(self.registration_socket)
            if not error and not os.path.exists(endpoint):
                error = f"endpoint {endpoint} does not exist"
            reg.NotifyRegistrationStatus(pluginregistration_v1_pb2.RegistrationStatus(
                plugin_registered=not error, error=error), timeout=5)
        if error:
            raise RegistrationRefused(error)
        assert chosen is not None
        self.service = chosen
        # The kubelet's preference decides, not the plugin's order.
        self.health_service = next((h for h in self.health if h in info.supported_versions),
                                   None)
        self._channel = grpc.insecure_channel(f"unix:{endpoint}")
        if chosen == "v1.DRAPlugin":
            self._stub, self._pb = dra_v1_pb2_grpc.DRAPluginStub(self._channel), dra_v1_pb2
        else:
            self._stub = dra_v1beta1_pb2_grpc.DRAPluginStub(self._channel)
            self._pb = dra_v1beta1_pb2
        return chosen

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _claims(self, claims: Iterable[tuple[str, str, str]]) -> list[Any]:
        return [self._pb.Claim(namespace=ns, uid=uid, name=name) for ns, uid, name in claims]

    def prepare(self, claims: Iterable[tuple[str, str, str]]) -> dict[str, ClaimAnswer]:
        """(namespace, uid, name) claims -> answer per UID, checked like the kubelet does."""
        claims = list(claims)
        resp = self._stub.NodePrepareResources(
            self._pb.NodePrepareResourcesRequest(claims=self._claims(claims)), timeout=TIMEOUT)
        uids = {uid for _, uid, _ in claims}
        unknown = set(resp.claims) - uids
        assert not unknown, f"returned result for unknown claim UID {unknown}"
        assert len(resp.claims) == len(uids), \
            f"NodePrepareResources skipped {len(uids) - len(resp.claims)} ResourceClaims"
        out = {}
        for uid, r in resp.claims.items():
            devs = []
            for d in r.devices:
                dev = {"requests": list(d.request_names), "pool": d.pool_name,
                       "device": d.device_name, "cdi": list(d.cdi_device_ids)}
                if self._pb is dra_v1_pb2 and d.HasField("share_id"):
                    dev["share_id"] = d.share_id
                devs.append(dev)
            out[uid] = ClaimAnswer(devs, r.error)
        return out

    def unprepare(self, claims: Iterable[tuple[str, str, str]]) -> dict[str, str]:
        claims = list(claims)
        resp = self._stub.NodeUnprepareResources(
            self._pb.NodeUnprepareResourcesRequest(claims=self._claims(claims)), timeout=TIMEOUT)
        uids = {uid for _, uid, _ in claims}
        assert set(resp.claims) == uids, "every requested claim must have an entry"
        return {uid: r.error for uid, r in resp.claims.items()}

    def watch_health_messages(self, timeout: float = 30.0, service: str | None = None,
                              ) -> Iterator[list[tuple[str, str, int, str]]]:
        """The health stream with each device's message: [(pool, device, health, message)]."""
        assert self.info is not None
        service = service or self.health_service
        assert service is not None, "the plugin advertises no health service this kubelet knows"
        pb, pb_grpc = HEALTH_STUBS[service]
        stub = pb_grpc.DRAResourceHealthStub(self._channel)
        stream = stub.NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=timeout)
        try:
            for msg in stream:
                yield [(d.device.pool_name, d.device.device_name, d.health, d.message)
                       for d in msg.devices]
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
        finally:
            stream.cancel()

    def watch_health(self, timeout: float = 30.0, service: str | None = None,
                     ) -> Iterator[list[tuple[str, str, int]]]:
        """The health stream over the chosen health service (or ``service``): each message as
        [(pool, device, health)], health 1 ok, 2 bad."""
        for msg in self.watch_health_messages(timeout, service):
            yield [(pool, device, health) for pool, device, health, _ in msg]
