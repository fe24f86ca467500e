"""The real-cluster tier: a single-node Kubernetes built here (scripts/cluster/cluster.py).

Runs as its own pytest session (`./tasks test` runs it after the rest; `./tasks e2e` alone):
`pytest tests/cluster -p no:xdist`. The session brings the cluster up once, unless one is
already running (a developer's `./tasks cluster up`, which it then leaves running), and takes
it down at the end. A tier that cannot run fails: without the cluster every test errors.

A failed test keeps what the cluster saw before `down` removes it: the components' logs, the
audit log and the pods' logs (`cluster.py logs`) go to build/cluster-logs/<test>/ of the
checkout (git-ignored; $LIKEN_CLUSTER_LOGS elsewhere), and the failure's report says where.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from .support import STATE, cluster, info, keep_logs


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    report = yield
    assert isinstance(report, pytest.TestReport)
    if report.failed and report.when in ("setup", "call") and STATE.exists():
        report.sections.append(("cluster logs", keep_logs(item.nodeid)))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The host checks bring their own cluster up and down: they run before the shared one exists.
    items.sort(key=lambda item: 0 if item.get_closest_marker("own_cluster") else 1)


@pytest.fixture(scope="session")
def k8s() -> Iterator[dict[str, str]]:
    """The running cluster's facts (cluster.json): node, nodeIP, apiServer, kubernetes."""
    status = cluster("status")
    ours = status.returncode != 0
    if ours:
        up = cluster("up", timeout=3600)
        assert up.returncode == 0, f"./tasks cluster up failed:\n{up.stderr[-4000:]}"
    else:
        # A developer's cluster: the images of this checkout, as ./tasks image last built them.
        images = cluster("images", timeout=900)
        assert images.returncode == 0, images.stderr[-4000:]
    try:
        yield info()
    finally:
        if ours:
            down = cluster("down")
            assert down.returncode == 0, down.stderr
