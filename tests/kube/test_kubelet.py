"""Surge upgrades only where the kubelet supports them (kube/kubelet.py): the version is read from
the agent's own Node, and ``run --seamless-upgrade`` on an older kubelet (or an unknown one) is a
plain single instance that says so once."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from liken_devices.agent.cli import run_options
from liken_devices.agent.run import assemble
from liken_devices.cli import build_parser
from liken_devices.kube.kubelet import parse_version, surge_supported
from tests.agent.node import FixtureNode
from tests.support.fakeapi import FakeApiServer


@pytest.mark.parametrize(("text", "version"), [
    ("v1.33.0", (1, 33)), ("v1.32.4", (1, 32)), ("v1.34.0-rc.1+abc123", (1, 34)),
    ("1.35.2", (1, 35)), ("v1.31.14-eks-3025e55", (1, 31)),
    ("", None), ("v1", None), ("kubelet", None), ("v1.33\n", (1, 33)), ("v1.x.0", None),
    (133, None), (None, None)])
def test_versions_read(text: Any, version: tuple[int, int] | None) -> None:
    assert parse_version(text) == version


def _node(api: FakeApiServer, name: str, version: str | None) -> None:
    node = api.add_node(name)
    node["status"] = {} if version is None else {"nodeInfo": {"kubeletVersion": version}}
    api.put_object("nodes", node)


@pytest.mark.parametrize(("version", "ok", "why"), [
    ("v1.33.0", True, ""), ("v1.36.1", True, ""),
    ("v1.32.4", False, "is v1.32.4, older than 1.33"),
    ("v1.31.0", False, "older than 1.33"),
    (None, False, "reports no kubelet version"),
    ("garbage", False, "reports no kubelet version")])
def test_surge_needs_kubelet_1_33(api: FakeApiServer, client: Any, version: str | None,
                                  ok: bool, why: str) -> None:
    _node(api, "n1", version)
    got, text = surge_supported(client, "n1")
    assert got == ok
    assert why in text


def test_a_node_that_cannot_be_read_is_no_surge(api: FakeApiServer, client: Any) -> None:
    got, text = surge_supported(client, "absent")
    assert not got and "cannot be read from Node absent" in text


def _args(api: FakeApiServer, tmp_path: Path, node: str) -> Any:
    fixture = FixtureNode(tmp_path / "node")
    return build_parser().parse_args([
        "run", "--node", node, *fixture.args(), "--kubeconfig",
        str(api.write_kubeconfig(tmp_path / "kubeconfig")), "--console",
        str(tmp_path / "console"), "--no-machine-side", "--cdi-dir", str(tmp_path / "cdi"),
        "--state-dir", str(tmp_path / "state"), "--plugin-dir", str(tmp_path / "plugin"),
        "--registry-dir", str(tmp_path / "registry"), "--seamless-upgrade",
        "--pod-uid", "0f8fad5b-d9cb-469f-a165-70867728950e"])


@pytest.mark.parametrize(("version", "seamless"), [("v1.32.4", False), ("v1.33.1", True),
                                                   (None, False)])
def test_run_on_an_older_kubelet_is_a_plain_instance_said_once(
        api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        version: str | None, seamless: bool) -> None:
    _node(api, "n1", version)
    args = _args(api, tmp_path, "n1")
    with caplog.at_level(logging.WARNING):
        built = assemble(run_options(args))
    try:
        plugin = built.agent.plugin
        assert plugin is not None
        assert plugin.config.seamless == seamless
        assert (plugin.config.dra_socket.name == "dra.sock") == (not seamless)
        said = [r.getMessage() for r in caplog.records if "plain single instance" in r.getMessage()]
        assert len(said) == (0 if seamless else 1)
    finally:
        built.close()
