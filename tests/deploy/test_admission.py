"""The ValidatingAdmissionPolicy in deploy/liken-devices/admission.yaml keeps each agent's writes
on its own node. Its CEL is evaluated with cel-python against allowed and forbidden requests,
shaped as the API server builds them for a pod's service-account token (whose extra fields
``authentication.kubernetes.io/node-name`` and ``.../pod-name`` name the pod's node and the pod)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from .support import DEPLOY, MINORS, admit, by_kind

DEVICES_SA = "system:serviceaccount:liken-system:liken-devices"
MEDIA_SA = "system:serviceaccount:liken-system:media-capabilities"
NODE_KEY = "authentication.kubernetes.io/node-name"
POD_KEY = "authentication.kubernetes.io/pod-name"


def policy_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "liken-devices" / "admission.yaml")
                                          .read_text()) if d]


POLICY = by_kind(policy_docs(), "ValidatingAdmissionPolicy")[0]


def request(user: str, node: str | None, op: str, resource: str, sub: str = "",
            group: str = "resource.k8s.io", extra: dict[str, list[str]] | None = None,
            name: str = "", namespace: str = "", pod: str | None = None) -> dict[str, Any]:
    """An admission request as the API server hands it to the policy: ``node`` and ``pod`` are
    what the token's extra fields name (the pod defaults to one on ``node``)."""
    if extra is None:
        extra = {NODE_KEY: [node], POD_KEY: [pod or f"{user.rsplit(':', 1)[1]}-{node}"]} \
            if node else {}
    info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts"],
                            "extra": extra}
    return {"operation": op, "userInfo": info, "subResource": sub, "name": name,
            "namespace": namespace,
            "resource": {"group": group, "version": "v1", "resource": resource}}


def slice_(node: str | None, driver: str = "liken.sh", name: str | None = None,
           pool: str | None = None, **spec: Any) -> dict[str, Any]:
    """A slice pinned to ``node``, named ``<node>-<driver>`` in pool ``<node>`` unless
    ``name`` or ``pool`` say otherwise."""
    s: dict[str, Any] = {"driver": driver, "pool": {"name": pool or node or "all",
                                                    "generation": 1,
                                                    "resourceSliceCount": 1}, **spec}
    if node is not None:
        s["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-{driver}"}, "spec": s}


def evict(user: str, node: str, pod: str, target: str,
          namespace: str = "liken-system") -> tuple[dict[str, Any], dict[str, Any]]:
    """The request and the Eviction object of ``POST .../pods/<target>/eviction`` made with the
    token of pod ``pod`` on ``node``."""
    req = request(user, node, "CREATE", "pods", "eviction", group="", name=target,
                  namespace=namespace, pod=pod)
    return req, {"apiVersion": "policy/v1", "kind": "Eviction",
                 "metadata": {"name": target, "namespace": namespace}}


def machine(name: str) -> dict[str, Any]:
    return {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine", "metadata": {"name": name},
            "status": {}}


def claim(pool: str = "n1", devices: list[dict[str, Any]] | None = None,
          reserved: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A claim allocated one liken.sh device of ``pool`` and one of another driver, with
    ``devices`` as its status.devices."""
    status: dict[str, Any] = {"allocation": {"devices": {"results": [
        {"request": "r", "driver": "liken.sh", "pool": pool, "device": "usb-1-3"},
        {"request": "n", "driver": "net.example.com", "pool": pool, "device": "eth0"}]}}}
    if devices:
        status["devices"] = devices
    if reserved is not None:
        status["reservedFor"] = reserved
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "default"}, "spec": {}, "status": status}


def entry(pool: str = "n1", driver: str = "liken.sh", device: str = "usb-1-3",
          paths: tuple[str, ...] = ("/dev/ttyUSB0",)) -> dict[str, Any]:
    return {"driver": driver, "pool": pool, "device": device,
            "data": {"present": True, "paths": list(paths)}}


def claim_status(user: str = DEVICES_SA, node: str = "n1") -> dict[str, Any]:
    return request(user, node, "UPDATE", "resourceclaims", "status", name="c",
                   namespace="default")


NET = entry(driver="net.example.com", device="eth0")


def test_policy_and_binding_are_valid_in_every_minor() -> None:
    docs = policy_docs()
    for minor in MINORS:
        for d in docs:
            kubernetes_validate.validate(d, minor, strict=True)
    [binding] = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == POLICY["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert POLICY["spec"]["failurePolicy"] == "Fail"
    listed = yaml.safe_load((DEPLOY / "liken-devices" / "kustomization.yaml").read_text())
    assert "admission.yaml" in listed["resources"]


ALLOWED = [
    ("own slice created", request(DEVICES_SA, "n1", "CREATE", "resourceslices"),
     slice_("n1"), None),
    ("own slice applied", request(DEVICES_SA, "n1", "UPDATE", "resourceslices"),
     slice_("n1"), slice_("n1")),
    ("own slice deleted", request(DEVICES_SA, "n1", "DELETE", "resourceslices"),
     None, slice_("n1")),
    ("media's own slice", request(MEDIA_SA, "n1", "UPDATE", "resourceslices"),
     slice_("n1", "media.liken.sh"), slice_("n1", "media.liken.sh")),
    ("own Machine's status", request(DEVICES_SA, "n1", "UPDATE", "machines", "status",
                                     "liken.sh"), machine("n1"), machine("n1")),
    ("a person's write", request("kubernetes-admin", None, "UPDATE", "resourceslices"),
     slice_("n2"), slice_("n2")),
    ("the kubelet deleting", request("system:node:n2", None, "DELETE", "resourceslices"),
     None, slice_("n2")),
    ("another resource", request(DEVICES_SA, "n1", "CREATE", "pods", group=""), {}, None),
    ("media's own slice deleted", request(MEDIA_SA, "n1", "DELETE", "resourceslices"),
     None, slice_("n1", "media.liken.sh")),
    ("the media agent evicting its own pod",
     *evict(MEDIA_SA, "n1", "media-capabilities-x7k2p", "media-capabilities-x7k2p"), None),
    ("a person evicting", request("kubernetes-admin", None, "CREATE", "pods", "eviction",
                                  group="", name="liken-devices-abcde",
                                  namespace="liken-system"), {}, None),
    # A claim's status.devices (rules: delivery.claim-status)
    ("own entries written", claim_status(), claim(devices=[entry()]), claim()),
    ("own entries rewritten", claim_status(), claim(devices=[entry(paths=("/dev/ttyUSB1",))]),
     claim(devices=[entry()])),
    ("own entries removed", claim_status(), claim(), claim(devices=[entry()])),
    ("own entries beside another driver's", claim_status(), claim(devices=[NET, entry()]),
     claim(devices=[NET])),
    ("own entries removed, another driver's kept", claim_status(), claim(devices=[NET]),
     claim(devices=[NET, entry()])),
    ("the other driver writing its own", request("system:serviceaccount:net:net-driver", "n1",
                                                 "UPDATE", "resourceclaims", "status"),
     claim(devices=[NET]), claim()),
]

FORBIDDEN = [
    ("another node's claim entries", claim_status(), claim("n2", devices=[entry("n2")]),
     claim("n2"), "may write only the liken.sh entries of pool n1"),
    ("another node's entries removed", claim_status(), claim("n2"),
     claim("n2", devices=[entry("n2")]), "of pool n1"),
    ("another driver's entry written", claim_status(), claim(devices=[NET]), claim(),
     "may write only the liken.sh entries"),
    ("another driver's entry removed", claim_status(), claim(devices=[entry()]),
     claim(devices=[NET, entry()]), "may write only the liken.sh entries"),
    ("another driver's entry changed", claim_status(),
     claim(devices=[entry(driver="net.example.com", device="eth0", paths=("x",))]),
     claim(devices=[NET]), "liken.sh entries"),
    ("the media agent writing liken.sh's entries", claim_status(MEDIA_SA), claim(
        devices=[entry()]), claim(), "may write only the liken.sh entries"),
    ("a claim's allocation removed", claim_status(), {**claim(), "status": {}}, claim(),
     "may not change a claim's allocation"),
    ("a claim's allocation moved", claim_status(), claim("n1"),
     {**claim("n1"), "status": {"allocation": {"devices": {"results": [
         {"request": "r", "driver": "liken.sh", "pool": "n1", "device": "usb-1-4"}]}}}},
     "may not change a claim's allocation"),
    ("a claim reserved for another pod", claim_status(),
     claim(reserved=[{"resource": "pods", "name": "p2", "uid": "u2"}]),
     claim(reserved=[{"resource": "pods", "name": "p", "uid": "u"}]), "reserved for"),
    ("a claim's status by a token without a node", claim_status(node=""),
     claim(devices=[entry()]), claim(), "names no node"),
    ("another node's slice", request(DEVICES_SA, "n1", "CREATE", "resourceslices"),
     slice_("n2"), None, "may write only the liken.sh ResourceSlices"),
    ("moving a slice here", request(DEVICES_SA, "n1", "UPDATE", "resourceslices"),
     slice_("n1"), slice_("n2"), "may write only"),
    ("moving its slice away", request(DEVICES_SA, "n1", "UPDATE", "resourceslices"),
     slice_("n2"), slice_("n1"), "may write only"),
    ("deleting another's", request(DEVICES_SA, "n1", "DELETE", "resourceslices"),
     None, slice_("n2"), "may write only"),
    ("the other driver's slice", request(DEVICES_SA, "n1", "CREATE", "resourceslices"),
     slice_("n1", "media.liken.sh"), None, "may write only"),
    ("media writing liken.sh", request(MEDIA_SA, "n1", "UPDATE", "resourceslices"),
     slice_("n1"), slice_("n1"), "media.liken.sh ResourceSlices"),
    ("a slice for every node", request(DEVICES_SA, "n1", "CREATE", "resourceslices"),
     slice_(None, allNodes=True), None, "may write only"),
    ("a token without a node", request(DEVICES_SA, None, "CREATE", "resourceslices"),
     slice_("n1"), None, "names no node"),
    ("a token naming two nodes", request(DEVICES_SA, None, "CREATE", "resourceslices",
                                         extra={NODE_KEY: ["n1", "n2"]}),
     slice_("n1"), None, "names no node"),
    ("another Machine's status", request(DEVICES_SA, "n1", "UPDATE", "machines", "status",
                                         "liken.sh"), machine("n2"), machine("n2"),
     "only the Machine of that node"),
    ("the media agent on a Machine", request(MEDIA_SA, "n1", "UPDATE", "machines", "status",
                                             "liken.sh"), machine("n1"), machine("n1"),
     "only the Machine"),
    ("a Machine created for another", request(DEVICES_SA, "n1", "CREATE", "machines",
                                              group="liken.sh"), machine("n2"), None,
     "only the Machine"),
    # Squatting: n2's slice name pinned to n1, so that every later write of n2's agent would be
    # an update of an object on n1.
    ("squatting n2-liken.sh pinned to n1",
     request(DEVICES_SA, "n1", "CREATE", "resourceslices"),
     slice_("n1", name="n2-liken.sh"), None, "only the ResourceSlice n1-liken.sh of pool n1"),
    ("squatting n2-liken.sh by the media token",
     request(MEDIA_SA, "n1", "CREATE", "resourceslices"),
     slice_("n1", "media.liken.sh", name="n2-media.liken.sh"), None,
     "only the ResourceSlice n1-media.liken.sh"),
    ("keeping a squatted name", request(DEVICES_SA, "n1", "UPDATE", "resourceslices"),
     slice_("n1", name="n2-liken.sh"), slice_("n1", name="n2-liken.sh"), "only the"),
    ("a second slice of its own", request(DEVICES_SA, "n1", "CREATE", "resourceslices"),
     slice_("n1", name="n1-liken.sh-2"), None, "only the ResourceSlice n1-liken.sh"),
    ("pool n2 published by n1", request(DEVICES_SA, "n1", "CREATE", "resourceslices"),
     slice_("n1", pool="n2"), None, "of pool n1"),
    ("its own slice moved into pool n2", request(DEVICES_SA, "n1", "UPDATE", "resourceslices"),
     slice_("n1", pool="n2"), slice_("n1"), "of pool n1"),
    ("media pool n2 published by n1", request(MEDIA_SA, "n1", "UPDATE", "resourceslices"),
     slice_("n1", "media.liken.sh", pool="n2"), slice_("n1", "media.liken.sh"), "of pool n1"),
    ("deleting a squatter that names n2", request(DEVICES_SA, "n1", "DELETE", "resourceslices"),
     None, slice_("n1", name="n2-liken.sh"), "only the"),
    # Evictions: the media token names its own pod and may evict that one only.
    ("the media token evicting another node's driver pod",
     *evict(MEDIA_SA, "n1", "media-capabilities-x7k2p", "liken-devices-q9z4d"),
     None, "may evict only its own pod (liken-system/media-capabilities-x7k2p)"),
    ("the media token evicting another media pod",
     *evict(MEDIA_SA, "n1", "media-capabilities-x7k2p", "media-capabilities-b8n3m"),
     None, "may evict only its own pod"),
    ("its own pod's name in another namespace",
     *evict(MEDIA_SA, "n1", "media-capabilities-x7k2p", "media-capabilities-x7k2p",
            namespace="default"), None, "may evict only its own pod"),
    ("an eviction by a token naming no pod",
     request(MEDIA_SA, None, "CREATE", "pods", "eviction", group="",
             name="liken-devices-q9z4d", namespace="liken-system",
             extra={NODE_KEY: ["n1"]}), {}, None, "may evict only its own pod"),
    ("an eviction by a token naming two pods",
     request(MEDIA_SA, None, "CREATE", "pods", "eviction", group="",
             name="a", namespace="liken-system",
             extra={NODE_KEY: ["n1"], POD_KEY: ["a", "b"]}), {}, None,
     "may evict only its own pod"),
]


@pytest.mark.parametrize(("req", "obj", "old"), [c[1:] for c in ALLOWED],
                         ids=[c[0] for c in ALLOWED])
def test_allowed(req: dict[str, Any], obj: Any, old: Any) -> None:
    verdict = admit(POLICY, req, obj, old)
    assert verdict.allowed, verdict.message


@pytest.mark.parametrize(("req", "obj", "old", "why"), [c[1:] for c in FORBIDDEN],
                         ids=[c[0] for c in FORBIDDEN])
def test_forbidden(req: dict[str, Any], obj: Any, old: Any, why: str) -> None:
    verdict = admit(POLICY, req, obj, old)
    assert not verdict.allowed
    assert why in verdict.message


names = st.sampled_from(["n1", "n2", "node-a", "gpu-7"])
drivers = st.sampled_from(["liken.sh", "media.liken.sh"])


# One side of a write: the node a slice is pinned to, the node its name starts with, the driver
# its name ends with, and its pool.
sides = st.tuples(names, names, drivers, names)


def _side(driver: str, side: tuple[str, str, str, str]) -> dict[str, Any]:
    pinned, name_node, name_driver, pool = side
    return slice_(pinned, driver, name=f"{name_node}-{name_driver}", pool=pool)


def _own(side: tuple[str, str, str, str] | None, node: str, driver: str) -> bool:
    return side is None or side == (node, node, driver, node)


@settings(max_examples=200, deadline=None)
@given(sa=st.sampled_from([DEVICES_SA, MEDIA_SA]), token_node=names,
       op=st.sampled_from(["CREATE", "UPDATE", "DELETE"]), new=sides, old=sides,
       driver=drivers)
def test_a_slice_write_is_admitted_exactly_on_its_node(sa: str, token_node: str, op: str,
                                                       new: tuple[str, str, str, str],
                                                       old: tuple[str, str, str, str],
                                                       driver: str) -> None:
    new_side = None if op == "DELETE" else new
    old_side = None if op == "CREATE" else old
    verdict = admit(POLICY, request(sa, token_node, op, "resourceslices"),
                    None if new_side is None else _side(driver, new_side),
                    None if old_side is None else _side(driver, old_side))
    own_driver = "liken.sh" if sa == DEVICES_SA else "media.liken.sh"
    expected = (driver == own_driver and _own(new_side, token_node, own_driver)
                and _own(old_side, token_node, own_driver))
    assert verdict.allowed == expected, verdict.message


pods = st.sampled_from(["media-capabilities-x7k2p", "media-capabilities-b8n3m",
                        "liken-devices-q9z4d"])


@settings(max_examples=60, deadline=None)
@given(sa=st.sampled_from([DEVICES_SA, MEDIA_SA]), node=names, own=pods, target=pods,
       namespace=st.sampled_from(["liken-system", "default"]))
def test_an_eviction_is_admitted_exactly_for_the_tokens_own_pod(sa: str, node: str, own: str,
                                                                target: str,
                                                                namespace: str) -> None:
    req, obj = evict(sa, node, own, target, namespace)
    verdict = admit(POLICY, req, obj, None)
    assert verdict.allowed == (own == target and namespace == "liken-system"), verdict.message
