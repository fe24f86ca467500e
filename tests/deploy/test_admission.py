"""The ValidatingAdmissionPolicy in deploy/liken-devices/admission.yaml keeps each agent's writes
on its own node. Its CEL is evaluated with cel-python against allowed and forbidden requests,
shaped as the API server builds them for a pod's service-account token (whose extra field
``authentication.kubernetes.io/node-name`` names the pod's node)."""

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


def policy_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "liken-devices" / "admission.yaml")
                                          .read_text()) if d]


POLICY = by_kind(policy_docs(), "ValidatingAdmissionPolicy")[0]


def request(user: str, node: str | None, op: str, resource: str, sub: str = "",
            group: str = "resource.k8s.io", extra: dict[str, list[str]] | None = None
            ) -> dict[str, Any]:
    info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts"],
                            "extra": extra if extra is not None else
                            ({NODE_KEY: [node]} if node else {})}
    return {"operation": op, "userInfo": info, "subResource": sub,
            "resource": {"group": group, "version": "v1", "resource": resource}}


def slice_(node: str | None, driver: str = "liken.sh", **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"driver": driver, "pool": {"name": node or "all", "generation": 1,
                                                    "resourceSliceCount": 1}, **spec}
    if node is not None:
        s["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}"}, "spec": s}


def machine(name: str) -> dict[str, Any]:
    return {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine", "metadata": {"name": name},
            "status": {}}


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
]

FORBIDDEN = [
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


@settings(max_examples=60, deadline=None)
@given(sa=st.sampled_from([DEVICES_SA, MEDIA_SA]), token_node=names, new_node=names,
       old_node=st.none() | names, driver=st.sampled_from(["liken.sh", "media.liken.sh"]))
def test_a_slice_write_is_admitted_exactly_on_its_node(sa: str, token_node: str, new_node: str,
                                                       old_node: str | None,
                                                       driver: str) -> None:
    op = "CREATE" if old_node is None else "UPDATE"
    old = None if old_node is None else slice_(old_node, driver)
    verdict = admit(POLICY, request(sa, token_node, op, "resourceslices"),
                    slice_(new_node, driver), old)
    own_driver = "liken.sh" if sa == DEVICES_SA else "media.liken.sh"
    expected = (driver == own_driver and new_node == token_node
                and old_node in (None, token_node))
    assert verdict.allowed == expected, verdict.message
