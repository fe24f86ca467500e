"""A loopback HTTP server that answers like the Kubernetes API server for the objects we touch.

No kube-apiserver can be had on the test machine, and the project's
standards ask for a loopback server that *enforces the API's rules* rather than a mock that
accepts anything. This one speaks plain HTTP/1.1 JSON on 127.0.0.1 and keeps, per object kind:

* ResourceSlices (``resource.k8s.io/v1``, cluster-scoped): create (name or generateName), get,
  list and watch with the ``spec.nodeName``/``spec.driver`` field selectors, update (PUT, 409 on
  a stale resourceVersion), merge patch, server-side apply (``application/apply-patch+yaml``
  with ``fieldManager``/``force`` and field ownership), delete (with uid/resourceVersion
  preconditions) and delete-collection (what the kubelet does when it starts).
  Every write is checked with ``kubernetes_validate`` (strict, against 1.34 by default) and
  with the API server's hand-written limits (resource.k8s.io/v1 validation), through the
  project's own ``liken_devices.slices.validate_slice``; a violation answers 422 with a Status body.
  Immutable fields (driver, pool name, node name) are enforced. ``metadata.generation`` rises
  when ``spec`` changes.
* ResourceClaims (namespaced): get and list; tests set, re-UID, de-allocate and delete them.
  Their ``status`` subresource takes server-side apply of ``status.devices`` (AllocatedDeviceStatus,
  KEP-4817) as the API server merges it: a list-map keyed by driver, device, pool and shareID,
  each manager owning its entries (an empty apply removes that manager's only), every entry
  matching an allocated device (422 otherwise), ``data`` at most 10 KiB, and ``metadata.uid``
  a precondition (409 when the claim was replaced). ``claim_device_status = False`` drops the
  field silently, as a server with DRAResourceClaimDeviceStatus off does.
* DeviceClasses (cluster-scoped) and ResourceClaimTemplates (namespaced): get and list; tests put
  them.
* Every list is paginated as the API server paginates: ``limit`` and ``continue`` (a token of
  the first page's resourceVersion, each later page served from the store as it was then, 410
  Expired when the history no longer reaches back), ``remainingItemCount``.
* Nodes: get (tests add them; each has a uid for owner references).
* Pods (namespaced): get, and the ``eviction`` subresource (``POST``, a ``policy/v1``
  Eviction checked against the strict schema, its name and namespace those of the URL's pod);
  an accepted eviction deletes the pod. ``evictions_blocked = N`` answers the next N with 429,
  as a PodDisruptionBudget that allows no disruption does.
* Machines (``liken.sh/v1alpha1``, cluster-scoped): get, list, watch, create, and the
  ``/status`` subresource (GET, PUT, merge PATCH, apply PATCH). Writes are checked against the
  CRD's ``openAPIV3Schema`` in deploy/liken-devices/ when that file exists.

Knobs for tests: ``gate_consumable_capacity = False`` drops ``allowMultipleAllocations`` (and
``requestPolicy``) silently, as an API server with DRAConsumableCapacity off does (KEP-5075);
``fail_next(code, count, ...)`` injects 409/429/500/503 answers; ``delay`` makes every answer
slow; ``watch_lifetime`` ends every watch early (0: at once); ``stop()``/``start()`` take the
server down and up on the same port while its store survives (an outage).
``write_kubeconfig(path)`` gives a file lightkube can load.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import itertools
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import yaml

from liken_devices.slices import validate_slice
from tests.support.wait import wait_until

JSON = dict[str, Any]

SLICES = ("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)
CLAIMS = ("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
CLASSES = ("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False)
TEMPLATES = ("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True)
NODES = ("", "v1", "nodes", "Node", False)
MACHINES = ("liken.sh", "v1alpha1", "machines", "Machine", False)
PODS = ("", "v1", "pods", "Pod", True)
KINDS = {k[2]: k for k in (SLICES, CLAIMS, CLASSES, TEMPLATES, NODES, MACHINES, PODS)}

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "deploy" / "liken-devices" / "machine-crd.yaml"

_VALUE_MEMBERS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")


class ApiFailure(Exception):
    """An answer other than success, with a Kubernetes Status body."""

    REASONS: ClassVar[dict[int, str]] = {
               400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict",
               410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
               429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}

    def __init__(self, code: int, message: str, reason: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or self.REASONS.get(code, "Unknown")
        self.headers = headers or {}

    def status(self) -> JSON:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


def _leaves(obj: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Field paths of an applied configuration: maps recurse, lists are atomic values."""
    if isinstance(obj, dict) and obj:
        for key, value in obj.items():
            yield from _leaves(value, (*prefix, key))
    else:
        yield prefix, obj


def _get_path(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def _set_path(obj: JSON, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = copy.deepcopy(value)


def _del_path(obj: JSON, path: tuple[str, ...]) -> None:
    parents = []
    cur: Any = obj
    for key in path[:-1]:
        if not isinstance(cur, dict) or key not in cur:
            return
        parents.append((cur, key))
        cur = cur[key]
    if isinstance(cur, dict):
        cur.pop(path[-1], None)
    for parent, key in reversed(parents):  # drop maps left empty
        if parent[key] == {}:
            del parent[key]


_MISSING = object()
# Fields the server owns; an applied configuration never manages them.
_SERVER_FIELDS = {("metadata", k) for k in ("resourceVersion", "uid", "generation",
                                             "creationTimestamp", "managedFields", "name",
                                             "generateName", "namespace")}
_SERVER_FIELDS |= {("apiVersion",), ("kind",)}


@dataclass
class Fault:
    code: int
    remaining: int
    methods: frozenset[str] | None
    path_contains: str | None
    retry_after: int | None


@dataclass
class Watcher:
    plural: str
    namespace: str | None
    selector: dict[str, str]
    events: list[bytes] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    closed: bool = False
    deadline: float = 0.0


class FakeApiServer:
    """The store, the rules and the HTTP front end (see the module docstring)."""

    def __init__(self, version: str = "1.34", port: int = 0) -> None:
        self.version = version
        self.port = port
        self.gate_consumable_capacity = True
        self.claim_device_status = True  # DRAResourceClaimDeviceStatus
        self.delay = 0.0
        # Seconds after which every watch is ended by the server (0: at once, after the events
        # it replays); None: at the client's timeoutSeconds, as a healthy server does.
        self.watch_lifetime: float | None = None
        # A hostile server's list answers (GET without a name, not a watch, on a path holding
        # ``hostile_path``): "endless-pages" (every page a fresh continue token), "repeat-continue"
        # (every page the same token), "endless-body" (a body that never ends), "trickle" (a
        # valid page, one byte every ``trickle_gap`` seconds), "raw" (``hostile_body`` as the
        # answer, status 200), "flood" (every page valid, a fresh continue token, and
        # ``hostile_item`` repeated to ``hostile_page_bytes``). None: a healthy server.
        self.hostile_list: str | None = None
        self.hostile_body = b""
        self.hostile_path = ""
        self.trickle_gap = 0.05
        self.hostile_bytes_sent = 0  # body bytes the hostile answers got out
        self.hostile_item = b"{}"
        self.raw_chunk = 0  # "raw": 0 sends the body whole, N in chunks of N bytes
        self.hostile_page_bytes = 1 << 20
        self.evictions_blocked = 0  # the next N evictions answer 429 (a disruption budget)
        self.evictions: list[tuple[str, str]] = []  # (namespace, name) of accepted evictions
        self.requests: list[tuple[str, str, str]] = []  # (method, path, content type)
        # (time.monotonic(), plural, ADDED|MODIFIED|DELETED, name) of every stored change: the
        # clock is the system's monotonic one, comparable with another process's.
        self.changes: list[tuple[float, str, str, str]] = []
        # (RBAC verb, resource[/subresource]) of every routed request, to check a ClusterRole.
        self.verbs: list[tuple[str, str]] = []
        self._lock = threading.RLock()
        self._objects: dict[tuple[str, str | None, str], JSON] = {}
        self._managed: dict[tuple[str, str | None, str], dict[str, set[tuple[str, ...]]]] = {}
        # claim -> manager -> the status.devices keys it owns (a list-map's ownership)
        self._device_owners: dict[tuple[str, str | None, str], dict[str, set[tuple[str, ...]]]] \
            = {}
        self._rv = itertools.count(1000)
        self._last_rv = 999
        self._history: list[tuple[int, str, str, JSON]] = []  # rv, plural, type, object
        self._faults: list[Fault] = []
        self._watchers: list[Watcher] = []
        self._connections: set[Any] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._slice_limits = validate_slice
        self._machine_schema = self._load_machine_schema()
        self._machine_validator: Any = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        """Listen on 127.0.0.1 (the same port as before after a stop)."""
        server = self
        handler = type("Handler", (_Handler,), {"api": server})
        deadline = time.monotonic() + 10
        while True:
            try:
                httpd = _Server(("127.0.0.1", self.port), handler)
                break
            except OSError:
                if self.port == 0 or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        httpd.daemon_threads = True
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fakeapi-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Refuse connections from now on; open watches end. The store is kept."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        with self._lock:
            watchers, self._watchers = self._watchers, []
        for w in watchers:
            with w.cond:
                w.closed = True
                w.cond.notify_all()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:  # kept-alive client connections end too: the server is down
            conns, self._connections = self._connections, set()
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path, token: str = "fake-token") -> Path:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # ---- knobs -----------------------------------------------------------------------------

    def fail_next(self, code: int, count: int = 1, methods: tuple[str, ...] | None = None,
                  path_contains: str | None = None, retry_after: int | None = None) -> None:
        """Answer the next ``count`` matching requests with ``code`` (409/429/500/503...)."""
        with self._lock:
            self._faults.append(Fault(code, count, frozenset(methods) if methods else None,
                                      path_contains, retry_after))

    # ---- direct store access for tests ----------------------------------------------------

    def add_node(self, name: str, uid: str | None = None) -> JSON:
        """A Node whose kubelet is of the server's version, as a node of the cluster reports."""
        meta = {"name": name, "uid": uid or str(uuid.uuid4())}
        status = {"nodeInfo": {"kubeletVersion": f"v{self.version}.0"}}
        return self.put_object("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": meta,
                                         "status": status})

    def add_machine(self, name: str, spec: JSON | None = None) -> JSON:
        return self.put_object("machines", {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                                            "metadata": {"name": name}, "spec": spec or {}})

    def set_machine_spec(self, name: str, spec: JSON) -> JSON:
        obj = self.get_object("machines", name)
        assert obj is not None, f"no machine {name}"
        obj["spec"] = spec
        return self.put_object("machines", obj)

    def add_pod(self, namespace: str, name: str, node: str | None = None) -> JSON:
        obj: JSON = {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
                     "spec": {"containers": [{"name": "c", "image": "x"}]}}
        if node:
            obj["spec"]["nodeName"] = node
        return self.put_object("pods", obj)

    def add_claim(self, namespace: str, name: str, uid: str | None = None,
                  results: list[JSON] | None = None, driver: str = "liken.sh",
                  node: str | None = None) -> JSON:
        """A ResourceClaim allocated (when ``results`` is given) to devices of our pool."""
        obj: JSON = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                     "metadata": {"name": name, "namespace": namespace,
                                  "uid": uid or str(uuid.uuid4())},
                     "spec": {"devices": {"requests": [
                         {"name": r.get("request", "req"),
                          "exactly": {"deviceClassName": "liken"}} for r in results or []]}}}
        if results is not None:
            alloc: JSON = {"devices": {"results": [
                {"request": r.get("request", "req"), "driver": r.get("driver", driver),
                 "pool": r.get("pool", node or ""), "device": r["device"]}
                | ({"shareID": r["shareID"]} if r.get("shareID") else {}) for r in results]}}
            if node:
                alloc["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
            obj["status"] = {"allocation": alloc}
        return self.put_object("resourceclaims", obj)

    def remove_allocation(self, namespace: str, name: str) -> JSON:
        obj = self.get_object("resourceclaims", name, namespace)
        assert obj is not None
        obj.get("status", {}).pop("allocation", None)
        return self.put_object("resourceclaims", obj)

    def set_claim_uid(self, namespace: str, name: str, uid: str) -> JSON:
        obj = self.get_object("resourceclaims", name, namespace)
        assert obj is not None
        obj["metadata"]["uid"] = uid
        return self.put_object("resourceclaims", obj)

    def put_object(self, plural: str, obj: JSON) -> JSON:
        """Store ``obj`` as is (no validation): the test's own arrangement of the cluster."""
        with self._lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            key = (plural, meta.get("namespace"), meta["name"])
            existed = key in self._objects
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta.setdefault("generation", 1)
            meta["resourceVersion"] = self._next_rv()
            self._objects[key] = obj
            self._notify(plural, "MODIFIED" if existed else "ADDED", obj)
            return copy.deepcopy(obj)

    def get_object(self, plural: str, name: str, namespace: str | None = None) -> JSON | None:
        with self._lock:
            obj = self._objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def delete_object(self, plural: str, name: str, namespace: str | None = None) -> bool:
        with self._lock:
            obj = self._objects.pop((plural, namespace, name), None)
            self._managed.pop((plural, namespace, name), None)
            if obj is None:
                return False
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._notify(plural, "DELETED", obj)
            return True

    def objects(self, plural: str) -> list[JSON]:
        with self._lock:
            return [copy.deepcopy(o) for (p, _, _), o in sorted(self._objects.items(),
                                                                key=lambda kv: str(kv[0]))
                    if p == plural]

    def slices(self, node: str | None = None) -> list[JSON]:
        return [s for s in self.objects("resourceslices")
                if node is None or s["spec"].get("nodeName") == node]

    def kubelet_restart_wipe(self, node: str) -> int:
        """What the kubelet does when it starts: delete every slice of its node."""
        gone = 0
        for s in self.slices(node):
            gone += self.delete_object("resourceslices", s["metadata"]["name"])
        return gone

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0,
                 what: str = "a condition on the fake API server's store") -> Any:
        """Poll the store (test side only) until ``predicate()`` is truthy; return its value."""
        return wait_until(predicate, timeout, what)

    # ---- internals ------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    def _notify(self, plural: str, kind: str, obj: JSON) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._history.append((rv, plural, kind, copy.deepcopy(obj)))
        del self._history[:-2000]
        self.changes.append((time.monotonic(), plural, kind, obj["metadata"]["name"]))
        line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
        for w in list(self._watchers):
            if w.plural == plural and _selected(obj, w.namespace, w.selector):
                with w.cond:
                    w.events.append(line)
                    w.cond.notify_all()

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for f in self._faults:
                if (f.methods is None or method in f.methods) and \
                        (f.path_contains is None or f.path_contains in path):
                    f.remaining -= 1
                    if f.remaining <= 0:
                        self._faults.remove(f)
                    return f
        return None

    def _load_machine_schema(self) -> JSON | None:
        if not CRD_PATH.exists():
            return None
        crd = yaml.safe_load(CRD_PATH.read_text())
        for v in crd["spec"]["versions"]:
            if v["name"] == "v1alpha1":
                return v["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]
        return None

    def _validate(self, plural: str, obj: JSON) -> None:
        if plural == "resourceslices":
            import jsonschema

            try:
                _strict_validator(self.version, "ResourceSlice", "resource-v1").validate(obj)
            except jsonschema.ValidationError as exc:
                where = ".".join(str(p) for p in exc.absolute_path)
                raise ApiFailure(422, f"ResourceSlice {obj.get('metadata', {}).get('name')!r} "
                                 f"is invalid: {where}: {exc.message}") from None
            problems = self._slice_limits(obj)
            if problems:
                raise ApiFailure(422, f"ResourceSlice {obj['metadata'].get('name')!r} is "
                                 f"invalid: {'; '.join(problems)}")
        elif plural == "machines" and self._machine_schema is not None:
            import jsonschema

            if self._machine_validator is None:
                schema = _openapi_to_jsonschema(self._machine_schema)
                self._machine_validator = jsonschema.validators.validator_for(schema)(schema)
            try:
                self._machine_validator.validate(obj)
            except jsonschema.ValidationError as exc:
                where = ".".join(str(p) for p in exc.absolute_path)
                raise ApiFailure(422, f"Machine {obj['metadata'].get('name')!r} is invalid: "
                                 f"{where}: {exc.message}") from None

    def _drop_gated(self, plural: str, obj: JSON) -> None:
        """An API server with DRAConsumableCapacity off drops the field silently (KEP-5075)."""
        if plural != "resourceslices" or self.gate_consumable_capacity:
            return
        for dev in (obj.get("spec") or {}).get("devices") or []:
            dev.pop("allowMultipleAllocations", None)
            for cap in (dev.get("capacity") or {}).values():
                if isinstance(cap, dict):
                    cap.pop("requestPolicy", None)

    def _check_immutable(self, plural: str, old: JSON, new: JSON) -> None:
        if plural != "resourceslices":
            return
        for path in (("spec", "driver"), ("spec", "pool", "name"), ("spec", "nodeName")):
            if _get_path(old, path) != _get_path(new, path):
                raise ApiFailure(422, f"ResourceSlice {old['metadata']['name']!r} is invalid: "
                                 f"{'.'.join(path)}: field is immutable")

    def _store_write(self, plural: str, key: tuple[str, str | None, str], new: JSON,
                     old: JSON | None, subresource: str | None = None) -> JSON:
        """Validate and store ``new`` (create when ``old`` is None); the caller holds the lock."""
        kind = KINDS[plural]
        new["apiVersion"] = f"{kind[0]}/{kind[1]}" if kind[0] else kind[1]
        new["kind"] = kind[3]
        meta = new.setdefault("metadata", {})
        if old is not None:
            # Server-owned metadata cannot be changed by a client.
            for k in ("uid", "creationTimestamp", "generation", "name", "namespace"):
                if k in old["metadata"]:
                    meta[k] = old["metadata"][k]
                else:
                    meta.pop(k, None)
            if subresource == "status":
                new["spec"] = copy.deepcopy(old.get("spec"))
                for k in ("labels", "annotations", "ownerReferences"):
                    if k in old["metadata"]:
                        meta[k] = copy.deepcopy(old["metadata"][k])
                    else:
                        meta.pop(k, None)
            elif plural == "machines" and "status" in old:
                new["status"] = copy.deepcopy(old["status"])  # main resource ignores status
            elif plural == "machines":
                new.pop("status", None)
            self._check_immutable(plural, old, new)
        else:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            meta["generation"] = 1
            if plural == "machines":
                new.pop("status", None)
        self._drop_gated(plural, new)
        meta.pop("resourceVersion", None)
        meta.pop("managedFields", None)
        self._validate(plural, new)
        if old is not None:
            if new == _strip_volatile(old):
                return copy.deepcopy(old)  # a no-op write keeps the resourceVersion
            if new.get("spec") != old.get("spec"):
                meta["generation"] = old["metadata"].get("generation", 1) + 1
        meta["resourceVersion"] = self._next_rv()
        self._objects[key] = new
        self._notify(plural, "MODIFIED" if old is not None else "ADDED", new)
        return copy.deepcopy(new)

    # ---- request handling -----------------------------------------------------------------

    def handle(self, method: str, raw_path: str, headers: dict[str, str],
               body: bytes) -> tuple[int, JSON | Watcher, dict[str, str]]:
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        path = parts.path.rstrip("/")
        ctype = headers.get("content-type", "").split(";")[0].strip()
        self.requests.append((method, path, ctype))
        if self.delay:
            time.sleep(self.delay)
        fault = self._take_fault(method, path)
        if fault is not None:
            extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after else {}
            raise ApiFailure(fault.code, f"injected failure {fault.code}", headers=extra)
        if path in ("/version",):
            major, minor = self.version.split(".")[:2]
            return 200, {"major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0"}, {}
        route = _route(path)
        if route is None:
            raise ApiFailure(404, f"the server could not find the requested resource ({path})")
        plural, namespace, name, sub = route
        self.verbs.append((_verb(method, name, query), plural + (f"/{sub}" if sub else "")))
        if method == "GET" and name is None:
            if query.get("watch") in ("true", "1"):
                return 200, self._watch(plural, namespace, query), {}
            return 200, self._list(plural, namespace, query), {}
        if method == "GET":
            return 200, self._get(plural, namespace, name), {}
        if method == "POST" and name is None:
            return 201, self._create(plural, namespace, _decode(body, ctype), query), {}
        if method == "POST" and plural == "pods" and sub == "eviction" and name is not None:
            return 201, self._evict(namespace, name, _decode(body, ctype)), {}
        if method == "PUT" and name is not None:
            return 200, self._update(plural, namespace, name, sub, _decode(body, ctype)), {}
        if method == "PATCH" and name is not None:
            return 200, self._patch(plural, namespace, name, sub, ctype, body, query), {}
        if method == "DELETE" and name is not None:
            return 200, self._delete(plural, namespace, name, body), {}
        if method == "DELETE" and name is None and plural == "resourceslices":
            return 200, self._delete_collection(plural, query), {}
        raise ApiFailure(405, f"{method} is not supported on {path}")

    def _evict(self, namespace: str | None, name: str, obj: JSON) -> JSON:
        """The Eviction API: the object is checked, then a budget may refuse (429)."""
        import jsonschema

        try:
            _strict_validator(self.version, "Eviction", "policy-v1").validate(obj)
        except jsonschema.ValidationError as exc:
            where = ".".join(str(p) for p in exc.absolute_path)
            raise ApiFailure(422, f"Eviction is invalid: {where}: {exc.message}") from None
        if (obj.get("apiVersion"), obj.get("kind")) != ("policy/v1", "Eviction"):
            raise ApiFailure(400, f"expected a policy/v1 Eviction, got {obj.get('apiVersion')} "
                             f"{obj.get('kind')}")
        meta = obj.get("metadata") or {}
        if meta.get("name") != name:
            raise ApiFailure(400, f"name in URL does not match name in Eviction object: "
                             f"{name!r} != {meta.get('name')!r}")
        if meta.get("namespace") not in (None, namespace):
            raise ApiFailure(400, "namespace in URL does not match namespace in Eviction object")
        if self.get_object("pods", name, namespace) is None:
            raise ApiFailure(404, f'pods "{name}" not found')
        with self._lock:
            if self.evictions_blocked > 0:
                self.evictions_blocked -= 1
                raise ApiFailure(429, "Cannot evict pod as it would violate the pod's "
                                 "disruption budget.")
            self.evictions.append((str(namespace), name))
        self.delete_object("pods", name, namespace)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "code": 201}

    def _writable(self, plural: str, sub: str | None) -> None:
        if plural == "resourceclaims" and sub == "status":
            return
        if plural in ("nodes", "resourceclaims", "deviceclasses", "resourceclaimtemplates",
                      "pods"):
            raise ApiFailure(405, f"this fake server only reads {plural}")
        if sub is not None and not (plural == "machines" and sub == "status"):
            raise ApiFailure(404, f"no subresource {sub} on {plural}")

    def _get(self, plural: str, namespace: str | None, name: str) -> JSON:
        obj = self.get_object(plural, name, namespace)
        if obj is None:
            raise ApiFailure(404, f'{plural} "{name}" not found')
        return obj

    def _list(self, plural: str, namespace: str | None, query: dict[str, str]) -> JSON:
        """A list, in pages when ``limit`` is given (the API's chunking rules).

        A page ends with ``metadata.continue`` (an opaque token: the resourceVersion of the
        first page and the last key served) and, without a selector, ``remainingItemCount``.
        Every later page is served from the store as it was at that resourceVersion, rebuilt
        from the change history; a token older than the history answers 410 Expired, as a
        compacted etcd does. ``continue`` with ``resourceVersion`` is a 400, as is a token the
        server did not issue.
        """
        selector = _field_selector(query.get("fieldSelector", ""))
        limit = _limit(query.get("limit"))
        token = query.get("continue")
        if self.hostile_list in ("endless-pages", "repeat-continue", "flood", "raw"):
            token = None  # its own tokens are not real: every page is the first again
        with self._lock:
            if token:
                if query.get("resourceVersion") not in (None, ""):
                    raise ApiFailure(400, "specifying resource version is not allowed when "
                                     "using continue", reason="BadRequest")
                rv, start = _decode_continue(token)
                objects = self._state_at(plural, rv)
            else:
                rv, start = self._last_rv, ""
                objects = {k: o for k, o in self._objects.items() if k[0] == plural}
            keys = sorted((str(k), k) for k in objects
                          if str(k) > start and (namespace is None or k[1] == namespace)
                          and _selected(objects[k], None, selector))
            meta: JSON = {"resourceVersion": str(rv)}
            if limit and len(keys) > limit:
                rest = len(keys) - limit
                keys = keys[:limit]
                meta["continue"] = _encode_continue(rv, keys[-1][0])
                if not selector:
                    meta["remainingItemCount"] = rest
            items = [copy.deepcopy(objects[k]) for _, k in keys]
            kind = KINDS[plural]
            return {"apiVersion": f"{kind[0]}/{kind[1]}" if kind[0] else kind[1],
                    "kind": f"{kind[3]}List", "metadata": meta, "items": items}

    def _state_at(self, plural: str, rv: int) -> dict[tuple[str, str | None, str], JSON]:
        """The objects of ``plural`` as they were at resourceVersion ``rv`` (lock held)."""
        current = {k: o for k, o in self._objects.items() if k[0] == plural}
        later = [h for h in self._history if h[0] > rv and h[1] == plural]
        if not later:
            return current
        if not self._history or self._history[0][0] > rv + 1:
            raise ApiFailure(410, "The provided continue parameter is too old to display a "
                             "consistent list result. You can start a new list without the "
                             "continue parameter.", reason="Expired")
        state = dict(current)
        for key in {_history_key(h) for h in later}:
            before = [h for h in self._history if h[0] <= rv and _history_key(h) == key]
            if before:
                last = before[-1]
                if last[2] == "DELETED":
                    state.pop(key, None)
                else:
                    state[key] = last[3]
                continue
            first_after = next(h for h in later if _history_key(h) == key)
            if first_after[2] != "ADDED":  # its state at rv fell out of the history
                raise ApiFailure(410, "The provided continue parameter is too old to display "
                                 "a consistent list result.", reason="Expired")
            state.pop(key, None)  # created after rv
        return state

    def _watch(self, plural: str, namespace: str | None, query: dict[str, str]) -> Watcher:
        w = Watcher(plural, namespace, _field_selector(query.get("fieldSelector", "")))
        with self._lock:
            since = query.get("resourceVersion")
            if since not in (None, "", "0"):
                rv = int(since)  # type: ignore[arg-type]
                if self._history and rv < self._history[0][0] - 1:
                    raise ApiFailure(410, f"too old resource version: {rv}")
                for hrv, p, kind, obj in self._history:
                    if hrv > rv and p == plural and _selected(obj, namespace, w.selector):
                        w.events.append(json.dumps({"type": kind, "object": obj}).encode()
                                        + b"\n")
            else:
                for (p, _ns, _), obj in sorted(self._objects.items(), key=lambda kv: str(kv[0])):
                    if p == plural and _selected(obj, namespace, w.selector):
                        w.events.append(json.dumps({"type": "ADDED", "object": obj}).encode()
                                        + b"\n")
            self._watchers.append(w)
        timeout = query.get("timeoutSeconds")
        lifetime = float(timeout) if timeout else 3600.0
        if self.watch_lifetime is not None:
            lifetime = min(lifetime, self.watch_lifetime)
        w.deadline = time.monotonic() + lifetime
        return w

    def _end_watch(self, w: Watcher) -> None:
        with self._lock:
            if w in self._watchers:
                self._watchers.remove(w)

    def _create(self, plural: str, namespace: str | None, obj: JSON, query: dict[str, str]) -> JSON:
        self._writable(plural, None)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                base = meta["generateName"][:58]
                meta["name"] = base + uuid.uuid4().hex[:5]
            else:
                raise ApiFailure(422, "metadata.name: Required value: name or generateName "
                                 "is required")
        with self._lock:
            key = (plural, namespace, meta["name"])
            if key in self._objects:
                raise ApiFailure(409, f'{plural} "{meta["name"]}" already exists',
                                 reason="AlreadyExists")
            out = self._store_write(plural, key, obj, None)
            manager = query.get("fieldManager")
            if manager:
                self._managed[key] = {manager: {p for p, _ in _leaves(out)
                                                if p[:2] not in _SERVER_FIELDS
                                                and p[:1] not in _SERVER_FIELDS}}
            return out

    def _update(self, plural: str, namespace: str | None, name: str, sub: str | None,
                obj: JSON) -> JSON:
        self._writable(plural, sub)
        with self._lock:
            key = (plural, namespace, name)
            old = self._objects.get(key)
            if old is None:
                raise ApiFailure(404, f'{plural} "{name}" not found')
            meta = obj.get("metadata") or {}
            if meta.get("name") not in (None, name):
                raise ApiFailure(400, "the name of the object does not match the URL")
            rv = meta.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise ApiFailure(409, f'Operation cannot be fulfilled on {plural} "{name}": the '
                                 "object has been modified; please apply your changes to the "
                                 "latest version and try again")
            return self._store_write(plural, key, copy.deepcopy(obj), old, sub)

    def _patch(self, plural: str, namespace: str | None, name: str, sub: str | None,
               ctype: str, body: bytes, query: dict[str, str]) -> JSON:
        self._writable(plural, sub)
        with self._lock:
            key = (plural, namespace, name)
            old = self._objects.get(key)
            if ctype == "application/apply-patch+yaml":
                return self._apply(plural, key, old, sub, body, query)
            if ctype not in ("application/merge-patch+json",
                             "application/strategic-merge-patch+json"):
                raise ApiFailure(415, f"unsupported patch type {ctype!r}")
            if old is None:
                raise ApiFailure(404, f'{plural} "{name}" not found')
            patch = _decode(body, ctype)
            rv = (patch.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise ApiFailure(409, f'Operation cannot be fulfilled on {plural} "{name}": the '
                                 "object has been modified")
            new = _merge_patch(_strip_volatile(old), patch)
            return self._store_write(plural, key, new, old, sub)

    def _apply(self, plural: str, key: tuple[str, str | None, str], old: JSON | None,
               sub: str | None, body: bytes, query: dict[str, str]) -> JSON:
        """Server-side apply with per-manager field ownership (maps merge, lists atomic)."""
        manager = query.get("fieldManager")
        if not manager:
            raise ApiFailure(400, "PATCH with application/apply-patch+yaml requires fieldManager")
        force = query.get("force") in ("true", "1")
        try:
            config = json.loads(body)  # JSON is YAML, and what clients send; much faster
        except ValueError:
            try:
                config = yaml.safe_load(body)
            except yaml.YAMLError as exc:
                raise ApiFailure(400, f"apply body is not YAML: {exc}") from None
        if not isinstance(config, dict):
            raise ApiFailure(400, "apply body must be an object")
        kind = KINDS[plural]
        want_api = f"{kind[0]}/{kind[1]}" if kind[0] else kind[1]
        if config.get("apiVersion") != want_api or config.get("kind") != kind[3]:
            raise ApiFailure(400, f"apply needs apiVersion {want_api} and kind {kind[3]}")
        cmeta = config.get("metadata") or {}
        if cmeta.get("name") not in (None, key[2]):
            raise ApiFailure(400, "the name of the object does not match the URL")
        if old is None and cmeta.get("resourceVersion"):
            # The API server's create-on-update refuses a precondition on an object that is
            # not there: NotFound.
            raise ApiFailure(404, f'{plural} "{key[2]}" not found')
        if old is not None and cmeta.get("resourceVersion") not in (
                None, old["metadata"]["resourceVersion"]):
            raise ApiFailure(409, f'Operation cannot be fulfilled on {plural} "{key[2]}": the '
                             "object has been modified")
        if sub == "status":
            if old is None:
                raise ApiFailure(404, f'{plural} "{key[2]}" not found')
            if plural == "resourceclaims":
                return self._apply_claim_devices(key, old, config, manager)
            config = {"status": config.get("status") or {}}
        elif plural == "machines":
            config.pop("status", None)
        paths = {p: v for p, v in _leaves(config) if p and p[:2] not in _SERVER_FIELDS
                 and p[:1] not in _SERVER_FIELDS}
        managed = self._managed.setdefault(key, {})
        base = _strip_volatile(old) if old is not None else {"metadata": {"name": key[2]}}
        conflicts = []
        for mgr, owned in managed.items():
            if mgr == manager:
                continue
            for p, v in paths.items():
                if p in owned and _get_path(base, p) != v:
                    conflicts.append((mgr, ".".join(p)))
        if conflicts and not force:
            raise ApiFailure(409, "Apply failed with conflicts: " + ", ".join(
                f'conflict with "{m}": .{p}' for m, p in conflicts), reason="Conflict")
        new = copy.deepcopy(base)
        for p in managed.get(manager, set()) - set(paths):
            if not any(p in owned for m, owned in managed.items() if m != manager):
                _del_path(new, p)
        for p, v in paths.items():
            _set_path(new, p, v)
        for mgr, owned in managed.items():
            if mgr != manager:
                owned -= set(paths)
        managed[manager] = set(paths)
        if "name" not in new.get("metadata", {}):
            new.setdefault("metadata", {})["name"] = key[2]
        if old is None:  # an apply that creates is authorized as a create too
            self.verbs.append(("create", plural))
        return self._store_write(plural, key, new, old, sub)

    def _apply_claim_devices(self, key: tuple[str, str | None, str], old: JSON, config: JSON,
                             manager: str) -> JSON:
        """Apply to a claim's status: ``status.devices`` merged as the list-map it is."""
        uid = (config.get("metadata") or {}).get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise ApiFailure(409, f"Precondition failed: UID in precondition: {uid}, UID in "
                             f"object meta: {old['metadata']['uid']}")
        status = config.get("status") or {}
        if set(status) - {"devices"}:
            raise ApiFailure(422, "this fake server applies only status.devices of a claim")
        entries = status.get("devices") or []
        if not isinstance(entries, list):
            raise ApiFailure(422, "status.devices: must be a list")
        alloc = ((old.get("status") or {}).get("allocation") or {}).get("devices") or {}
        allocated = {(r.get("driver"), r.get("device"), r.get("pool"), r.get("shareID") or "")
                     for r in alloc.get("results") or []}
        mine: dict[tuple[str, ...], JSON] = {}
        for i, e in enumerate(entries):
            where = f"status.devices[{i}]"
            if not isinstance(e, dict) or not all(isinstance(e.get(k), str) and e.get(k)
                                                  for k in ("driver", "pool", "device")):
                raise ApiFailure(422, f"{where}: driver, pool and device are required")
            if set(e) - {"driver", "pool", "device", "shareID", "conditions", "data",
                         "networkData"}:
                raise ApiFailure(422, f"{where}: unknown field")
            k = (e["driver"], e["device"], e["pool"], e.get("shareID") or "")
            if k in mine:
                raise ApiFailure(422, f"{where}: Duplicate value")
            if k not in allocated:
                raise ApiFailure(422, f"{where}: Invalid value: must match an allocated "
                                 "device of the claim")
            if "data" in e and (not isinstance(e["data"], dict)
                                or len(json.dumps(e["data"])) > 10 * 1024):
                raise ApiFailure(422, f"{where}.data: must be an object of at most 10 KiB")
            mine[k] = copy.deepcopy(e)
        # Kubernetes 1.37 authorizes a write of status.devices once more: the driver's
        # permission on resourceclaims/driver (resourceName: the driver), verb
        # "associated-node:patch" for a claim on the requester's node. Recorded, as every verb
        # is, for tests that compare what was asked with a ClusterRole.
        self.verbs.append(("associated-node:patch", "resourceclaims/driver"))
        owners = self._device_owners.setdefault(key, {})
        others = {k for m, keys in owners.items() if m != manager for k in keys}
        new = _strip_volatile(old)
        kept = [d for d in (new.get("status") or {}).get("devices") or []
                if (k := (d["driver"], d["device"], d["pool"], d.get("shareID") or ""))
                not in mine and (k in others or k not in owners.get(manager, set()))]
        devices = kept + list(mine.values())
        if not self.claim_device_status:
            devices = []
        else:
            owners[manager] = set(mine)
        st = new.setdefault("status", {})
        if devices:
            st["devices"] = devices
        else:
            st.pop("devices", None)
        return self._store_write("resourceclaims", key, new, old, "status")

    def _delete(self, plural: str, namespace: str | None, name: str, body: bytes) -> JSON:
        self._writable(plural, None)
        with self._lock:
            key = (plural, namespace, name)
            old = self._objects.get(key)
            if old is None:
                raise ApiFailure(404, f'{plural} "{name}" not found')
            opts = json.loads(body) if body.strip() else {}
            pre = opts.get("preconditions") or {}
            if pre.get("uid") not in (None, old["metadata"]["uid"]) or pre.get(
                    "resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
                raise ApiFailure(409, f'Precondition failed for {plural} "{name}"')
            self.delete_object(plural, name, namespace)
            return {"kind": "Status", "apiVersion": "v1", "status": "Success",
                    "details": {"name": name, "kind": plural, "uid": old["metadata"]["uid"]}}

    def _delete_collection(self, plural: str, query: dict[str, str]) -> JSON:
        selector = _field_selector(query.get("fieldSelector", ""))
        with self._lock:
            doomed = [o for (p, _, _), o in self._objects.items()
                      if p == plural and _selected(o, None, selector)]
            for o in doomed:
                self.delete_object(plural, o["metadata"]["name"])
            return {"kind": f"{KINDS[plural][3]}List", "apiVersion": "resource.k8s.io/v1",
                    "metadata": {}, "items": doomed}


def _limit(text: str | None) -> int:
    if text in (None, ""):
        return 0
    assert text is not None
    try:
        value = int(text)
    except ValueError:
        raise ApiFailure(400, f"invalid limit {text!r}: not an integer",
                         reason="BadRequest") from None
    if value < 0:
        raise ApiFailure(400, f"invalid limit {value}: must be non-negative", reason="BadRequest")
    return value


def _encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError("unknown version")
        rv, start = int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ApiFailure(400, f"continue key is not valid: {exc}", reason="BadRequest") from None
    return rv, start


def _history_key(h: tuple[int, str, str, JSON]) -> tuple[str, str | None, str]:
    meta = h[3].get("metadata", {})
    return (h[1], meta.get("namespace"), meta.get("name"))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _strip_volatile(obj: JSON) -> JSON:
    out = copy.deepcopy(obj)
    out.get("metadata", {}).pop("resourceVersion", None)
    out.get("metadata", {}).pop("managedFields", None)
    return out


def _decode(body: bytes, ctype: str) -> JSON:
    try:
        value = json.loads(body or b"{}")
    except json.JSONDecodeError as exc:
        raise ApiFailure(400, f"request body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ApiFailure(400, "request body must be a JSON object")
    return value


def _field_selector(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for term in filter(None, text.split(",")):
        k, sep, v = term.partition("=")
        if not sep:
            raise ApiFailure(400, f"invalid field selector term {term!r}")
        k, v = k.strip(), v.lstrip("=").strip()
        if k not in ("spec.nodeName", "spec.driver", "metadata.name", "metadata.namespace"):
            raise ApiFailure(400, f'field label not supported: {k}')
        out[k] = v
    return out


def _selected(obj: JSON, namespace: str | None, selector: dict[str, str]) -> bool:
    if namespace is not None and obj.get("metadata", {}).get("namespace") != namespace:
        return False
    for k, v in selector.items():
        value = _get_path(obj, tuple(k.split(".")))
        if (value if value is not _MISSING else "") != v:
            return False
    return True


def _verb(method: str, name: str | None, query: dict[str, str]) -> str:
    """The RBAC verb the API server's authorizer would check for this request."""
    if method == "GET":
        if name is not None:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    if method == "DELETE":
        return "delete" if name is not None else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def _route(path: str) -> tuple[str, str | None, str | None, str | None] | None:
    """(plural, namespace, name, subresource) for the paths this server knows."""
    p = path.strip("/").split("/")
    if p[:2] == ["api", "v1"]:
        rest = p[2:]
    elif len(p) >= 3 and p[0] == "apis" and (p[1], p[2]) in (("resource.k8s.io", "v1"),
                                                              ("liken.sh", "v1alpha1")):
        rest = p[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or rest[0] not in KINDS:
        return None
    plural = rest[0]
    if KINDS[plural][4] != (namespace is not None) and not (
            namespace is None and len(rest) == 1):  # namespaced list over all namespaces is ok
        return None
    group = KINDS[plural][0]
    if (group == "" and p[0] != "api") or (group and p[1] != group):
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if len(rest) > 3:
        return None
    return plural, namespace, name, sub


@functools.lru_cache(maxsize=8)
def _strict_validator(version: str, kind: str, api: str) -> Any:
    """kubernetes_validate's strict schema for ``kind`` at ``version``, compiled once.

    ``kubernetes_validate.validate`` reloads the schema and its definitions on every call (tens
    of milliseconds), which would make this server, not the agent, the slow part of a publish.
    Same files, same Draft 2020-12 validator, kept.
    """
    import jsonschema
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    schema_version = [v for v in utils.all_versions()
                      if utils.major_minor(v) <= utils.major_minor(version)][-1]
    folder = f"kubernetes-json-schema/v{schema_version}-local-strict"
    schema = utils.schema_contents(f"{folder}/{kind.lower()}-{api}.json", version)
    defs = utils.schema_contents(f"{folder}/_definitions.json", version)
    registry: Any = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _openapi_to_jsonschema(schema: Any) -> Any:
    """A CRD's structural schema as plain JSON Schema (drop the x-kubernetes-* keys)."""
    if isinstance(schema, dict):
        out = {k: _openapi_to_jsonschema(v) for k, v in schema.items()
               if not k.startswith("x-kubernetes-")}
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            out.pop("additionalProperties", None)
        elif out.get("type") == "object" and "properties" in out \
                and "additionalProperties" not in out:
            out["additionalProperties"] = False  # structural schemas prune unknown fields
        if schema.get("nullable"):
            out.pop("nullable", None)
        return out
    if isinstance(schema, list):
        return [_openapi_to_jsonschema(v) for v in schema]
    return schema


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (or a connection cut by ``stop()``) is no error to print."""
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the client's delayed ACK adds
    # ~40 ms to every answer on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.api._lock:
            self.api._connections.add(self.connection)

    def finish(self) -> None:
        with self.api._lock:
            self.api._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, code: int, payload: JSON, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _hostile(self, payload: JSON) -> bool:
        """Answer a list the hostile way the server is set to; False when it is healthy."""
        mode = self.api.hostile_list
        if mode is None or not isinstance(payload, dict) or "items" not in payload \
                or self.api.hostile_path not in self.path:
            return False
        if mode == "raw" and self.api.raw_chunk:  # the same body, sent a few bytes a chunk
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            body, n = self.api.hostile_body, self.api.raw_chunk
            for i in range(0, len(body), n):
                self.wfile.write(f"{len(body[i:i + n]):x}\r\n".encode() + body[i:i + n]
                                 + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return True
        if mode == "raw":
            body = self.api.hostile_body
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return True
        if mode in ("endless-pages", "repeat-continue"):
            token = "again" if mode == "repeat-continue" else uuid.uuid4().hex
            payload["metadata"] = {**payload["metadata"], "continue": token}
            self._answer(200, payload)
            return True
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")  # the client must not send on it again
        self.end_headers()
        try:
            if mode == "endless-body":
                filler = json.dumps(payload["items"][:1] or [{}])[1:-1].encode() + b","
                block = b'{"metadata":{},"items":[' + filler * (65536 // len(filler))
                while self.api.running:
                    self.wfile.write(f"{len(block):x}\r\n".encode() + block + b"\r\n")
                    self.api.hostile_bytes_sent += len(block)
                    block = filler * (65536 // len(filler))
            elif mode == "flood":
                head = (b'{"kind":"List","metadata":{"continue":"' + uuid.uuid4().hex.encode()
                        + b'"},"items":[' + self.api.hostile_item)
                block = (b"," + self.api.hostile_item) * max(1, 65536 // len(
                    self.api.hostile_item))
                sent, chunk = 0, head
                while self.api.running and sent + len(chunk) < self.api.hostile_page_bytes:
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    sent += len(chunk)
                    self.api.hostile_bytes_sent += len(chunk)
                    chunk = block
                self.wfile.write(b"2\r\n]}\r\n0\r\n\r\n")
            elif mode == "trickle":
                for byte in json.dumps(payload).encode():
                    if not self.api.running:
                        break
                    self.wfile.write(b"1\r\n" + bytes([byte]) + b"\r\n")
                    self.wfile.flush()
                    self.api.hostile_bytes_sent += 1
                    time.sleep(self.api.trickle_gap)
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client hung up: what a bounded client does
        return True

    def _serve(self, method: str) -> None:
        body = self._body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            code, payload, extra = self.api.handle(method, self.path, headers, body)
        except ApiFailure as exc:
            self._answer(exc.code, exc.status(), exc.headers)
            return
        except Exception as exc:  # a bug in the fake shows as a 500, not a hung client
            self._answer(500, ApiFailure(500, f"fake server error: {exc!r}").status())
            return
        if isinstance(payload, Watcher):
            self._stream(payload)
        elif not (method == "GET" and self._hostile(payload)):
            self._answer(code, payload, extra)

    def _stream(self, w: Watcher) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        try:
            while True:
                with w.cond:
                    while not w.events and not w.closed \
                            and time.monotonic() < w.deadline:
                        w.cond.wait(0.1)
                    events, w.events = w.events, []
                    done = w.closed or time.monotonic() >= w.deadline
                for line in events:
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
                if done:
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass
        finally:
            self.api._end_watch(w)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")
