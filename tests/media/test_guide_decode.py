"""docs/examples/gpu-decode.yaml, the guide's "A GPU by what it decodes": its two requests,
evaluated with cel-python against the liken.sh and media.liken.sh devices of a node with three
GPUs, pair exactly the render nodes of the GPUs that decode 10-bit HEVC with their own
capability devices."""

from __future__ import annotations

from typing import Any

import yaml

from tests.deploy.support import REPO, allocations, by_kind

from .test_deploy import cluster, manifests

__all__ = ["cluster"]  # the fixture: a node with three fake GPUs


def test_gpu_by_what_it_decodes(cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]]
                                ) -> None:
    liken, media = cluster
    docs = [d for d in yaml.safe_load_all((REPO / "docs" / "examples" / "gpu-decode.yaml")
                                          .read_text()) if d]
    classes = {c["metadata"]["name"]: c for c in by_kind(docs + manifests(), "DeviceClass")}
    [template] = by_kind(docs, "ResourceClaimTemplate")
    got = allocations(template, classes, {"liken.sh": liken, "media.liken.sh": media})
    assert got == [("liken.sh/pci-0000-00-02-0", "media.liken.sh/pci-0000-00-02-0"),
                   ("liken.sh/pci-0000-03-00-0", "media.liken.sh/pci-0000-03-00-0")]
