"""The Kubernetes client the node agent talks through, and the resources it names.

The agent runs in a DaemonSet pod (in-cluster: the service account's token and the API
server's address from the environment) or, for tests and offline use, against a kubeconfig.
lightkube is the client (pyproject); every object is handled as a plain dict through its
generic resources, so what we send is exactly the API's JSON and what the server stored can be
compared with it field by field (an API server drops the fields of a feature gate that is off,
docs/agent.md, "Publishing").

Every failure of a request leaves this module as one type, :class:`ApiError` (the HTTP status,
or None when no answer came; the API's message; a ``Retry-After`` hint), so the writers above
decide on one shape whatever the client library raised.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

FIELD_MANAGER = "liken-devices"
# What the HTTP transport would load for HTTP/2 and asynchronous I/O (see make_client).
UNUSED_BY_THE_CLIENT = ("h2", "anyio")
# In-cluster: the kubelet mounts the token here and sets these variables in every pod.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class NoClusterConfig(Exception):
    """Neither a kubeconfig nor an in-cluster service account is available."""


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and \
        (SERVICE_ACCOUNT_DIR / "token").exists()


def cluster_available(kubeconfig: Path | None) -> bool:
    """Whether :func:`make_client` can build a client (a kubeconfig given or in a pod)."""
    return kubeconfig is not None or in_cluster() or bool(os.environ.get("KUBECONFIG"))


def make_client(kubeconfig: Path | None = None, timeout: float = 10.0) -> Any:
    """A lightkube ``Client`` from ``kubeconfig``, else the in-cluster config, else $KUBECONFIG.

    ``timeout`` bounds every request except watches (a slow API server must not hang a walk).

    The client is synchronous and speaks HTTP/1.1, lightkube's default. Its HTTP library's
    transport imports, as soon as a client is made, the libraries of two things this client
    never does: the ``h2`` protocol stack (lightkube depends on the HTTP/2 extra all the same)
    and ``anyio``'s asynchronous networking. Together about 1.5 MiB resident in every agent on
    every node, for code that never runs. Unless something in the process imported them
    already, they are marked absent (``sys.modules``), and the transport leaves them out as it
    does where they are not installed (docs/performance.md, "Node agent").
    """
    for unused in UNUSED_BY_THE_CLIENT:
        sys.modules.setdefault(unused, None)  # type: ignore[arg-type]
    # deferred: lightkube and its HTTP stack, 90-190 ms, load only for what talks to the API
    # server; an offline agent (--no-api) never does (tests/test_layers.py)
    import httpx2
    from lightkube import Client, KubeConfig

    if kubeconfig is not None:
        config = KubeConfig.from_file(kubeconfig)
    elif in_cluster():
        config = KubeConfig.from_service_account()
    elif os.environ.get("KUBECONFIG"):
        config = KubeConfig.from_env()
    else:
        raise NoClusterConfig("no kubeconfig given and not running in a pod")
    return Client(config, field_manager=FIELD_MANAGER, timeout=httpx2.Timeout(timeout),
                  trust_env=False)


def _resource(namespaced: bool, group: str, version: str, kind: str, plural: str) -> Any:
    # deferred: lightkube, as in make_client (tests/test_layers.py)
    from lightkube.core import resource_registry as registry_mod
    from lightkube.generic_resource import create_global_resource, create_namespaced_resource

    make = create_namespaced_resource if namespaced else create_global_resource
    try:
        return make(group, version, kind, plural)
    except ValueError:
        # Someone registered this kind with other verbs first; use theirs.
        api = f"{group}/{version}" if group else version
        return registry_mod.resource_registry.get(api, kind)


class Resources:
    """The generic (dict-valued) lightkube resources for the kinds the agent reads and writes."""

    _cache: dict[str, Any] = {}  # noqa: RUF012 - a process-wide registry of classes

    @classmethod
    def slice(cls) -> Any:
        return cls._get("slice", False, "resource.k8s.io", "v1", "ResourceSlice", "resourceslices")

    @classmethod
    def node(cls) -> Any:
        return cls._get("node", False, "", "v1", "Node", "nodes")

    @classmethod
    def machine(cls) -> Any:
        return cls._get("machine", False, "liken.sh", "v1alpha1", "Machine", "machines")

    @classmethod
    def claim(cls) -> Any:
        return cls._get("claim", True, "resource.k8s.io", "v1", "ResourceClaim", "resourceclaims")

    @classmethod
    def pod(cls) -> Any:
        return cls._get("pod", True, "", "v1", "Pod", "pods")

    @classmethod
    def device_class(cls) -> Any:
        return cls._get("class", False, "resource.k8s.io", "v1", "DeviceClass", "deviceclasses")

    @classmethod
    def claim_template(cls) -> Any:
        return cls._get("template", True, "resource.k8s.io", "v1", "ResourceClaimTemplate",
                        "resourceclaimtemplates")

    @classmethod
    def _get(cls, key: str, namespaced: bool, group: str, version: str, kind: str,
             plural: str) -> Any:
        if key not in cls._cache:
            cls._cache[key] = _resource(namespaced, group, version, kind, plural)
        return cls._cache[key]


def as_dict(obj: Any) -> dict[str, Any]:
    """A generic resource (a dict subclass) or a lightkube model as a plain dict."""
    if isinstance(obj, dict):
        return dict(obj)
    to_dict = getattr(obj, "to_dict", None)
    if to_dict is not None:
        return dict(to_dict())
    raise TypeError(f"cannot read {type(obj).__name__} as a dict")


class ApiError(Exception):
    """A request that failed: ``code`` is the HTTP status (None: no answer, a connection error or
    a timeout), ``message`` the API's own words, ``retry_after`` a 429/503 answer's hint."""

    def __init__(self, code: int | None, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{code} {message}" if code is not None else message)
        self.code = code
        self.message = message
        self.retry_after = retry_after

    @classmethod
    def of(cls, exc: BaseException) -> ApiError:
        """``exc`` (a lightkube ``ApiError``, an httpx error, anything) as an :class:`ApiError`."""
        if isinstance(exc, ApiError):
            return exc
        code = _status_code(exc)
        status = getattr(exc, "status", None)
        message = getattr(status, "message", None)
        if not isinstance(message, str) or not message:
            message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        hint = _retry_after(exc) if code in (429, 503) else None
        return cls(code, message, hint)


def _status_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    code = getattr(status, "code", None)
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from the answer's Retry-After header, when it has a number there."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("Retry-After")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    # A hostile or broken header must not park the agent for a day, nor go negative.
    return None if seconds is None or seconds != seconds else min(max(seconds, 0.0), 300.0)


def error_code(exc: BaseException) -> int | None:
    """The HTTP status of a failed request (None for connection errors and others)."""
    return ApiError.of(exc).code


def describe(exc: BaseException) -> str:
    """One line for a log: the API's message or the connection error."""
    return str(ApiError.of(exc))
