"""``fleet``: every node's devices, who holds them, what is unclaimed, and which nodes to doubt.

One cluster-wide picture from list calls only (no watch), each paginated with ``limit`` and
``continue`` so that the API server answers thousands of nodes in bounded pages (and each answer
is held to bounds in bytes, pages and time, kube/listing.py): the
ResourceSlices of ``liken.sh`` and ``media.liken.sh`` (one list per driver, by the
``spec.driver`` field selector), the Nodes, the Machines and the ResourceClaims of every
namespace. docs/performance.md has the measured cost on 5,000 nodes.

A node's slice is *stale* (docs/claims.md, "fleet") when the agent that wrote it is gone and
nothing will correct it:

- no Node of that name exists (the node was removed; its slice outlived it), or
- the slice's owner reference names a Node uid other than the current Node's (the node was
  recreated under the same name and its agent has not published since), or
- the Node's ``Ready`` condition is not ``True`` (the kubelet stopped reporting, so the node's
  agent and kubelet plugin cannot be trusted to be running).

An agent gone from a node that still runs leaves no stale slice: the kubelet deletes a driver's
slices once its plugin has been disconnected for 30 seconds, so such a node is one with a Machine
and *no slice*.

A node's facts are *unreadable* when its Machine's ``FactsPublished`` condition is ``False``:
the agent could not read init's storage facts, so it offers no disk (docs/agent.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..inventory.limits import DRIVER, MEDIA_DRIVER
from ..kube.client import Resources
from ..kube.listing import Budget, list_pages
from ..terminal import clean_row
from .cel import CompileError, DeviceInput, Env, environment
from .model import Claim, Device, slice_devices

DRIVERS = (DRIVER, MEDIA_DRIVER)
PAGE = 500


@dataclass
class Snapshot:
    """What the list calls returned."""

    slices: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    machines: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)


def list_all(client: Any, resource: Any, *, page: int = PAGE, namespaced: bool = False,
             fields: dict[str, str] | None = None, budget: Any = None
             ) -> Iterator[dict[str, Any]]:
    """Every object of ``resource``, page by page (``limit``/``continue``), as plain dicts,
    each answer bounded in bytes, pages and time by the command's ``budget``
    (kube/listing.py; a fresh one when none is given)."""
    return list_pages(client, resource, budget if budget is not None else Budget(), page=page,
                      namespaced=namespaced, fields=fields)


def read_cluster(client: Any, page: int = PAGE, budget: Any = None) -> Snapshot:
    """The lists fleet reads, all within one ``budget`` (kube/listing.py)."""
    budget = budget if budget is not None else Budget()
    snap = Snapshot()
    for driver in DRIVERS:
        snap.slices.extend(list_all(client, Resources.slice(), page=page,
                                    fields={"spec.driver": driver}, budget=budget))
    snap.nodes = list(list_all(client, Resources.node(), page=page, budget=budget))
    snap.machines = list(list_all(client, Resources.machine(), page=page, budget=budget))
    snap.claims = list(list_all(client, Resources.claim(), page=page, namespaced=True,
                                budget=budget))
    return snap


@dataclass
class Row:
    device: Device
    held_by: list[str]
    stale: bool


@dataclass
class Fleet:
    rows: list[Row]
    unclaimed: list[dict[str, Any]]
    problems: list[dict[str, str]]
    nodes: int


def _ready(node: dict[str, Any]) -> str | None:
    """Why a Node is not Ready, or None (no conditions reported counts as ready)."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") != "True":
            return f"Node Ready is {c.get('status')}" + (f" ({c['reason']})"
                                                        if c.get("reason") else "")
    return None


def stale_nodes(slices: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]]
                ) -> dict[str, str]:
    """Node name -> why its liken.sh slice is stale (module docstring)."""
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    out: dict[str, str] = {}
    for s in slices:
        spec = s.get("spec") or {}
        node = spec.get("nodeName")
        if spec.get("driver") != DRIVER or not isinstance(node, str):
            continue
        current = by_name.get(node)
        if current is None:
            out[node] = "no Node of this name: the slice outlived its node"
            continue
        uid = (current.get("metadata") or {}).get("uid")
        owners = [o for o in (s.get("metadata") or {}).get("ownerReferences") or []
                  if isinstance(o, dict) and o.get("kind") == "Node"]
        if owners and uid and all(o.get("uid") != uid for o in owners):
            out[node] = "the slice belongs to an earlier Node of this name"
            continue
        why = _ready(current)
        if why is not None:
            out[node] = why
    return out


def build(snap: Snapshot, *, nodes: Sequence[str] = (), attributes: Sequence[str] = (),
          selector: str | None = None, env: Env | None = None) -> Fleet:
    """The fleet view of ``snap``, filtered by node names, attribute equalities and CEL."""
    wanted_attrs = [_parse_attr_filter(a) for a in attributes]
    program = None
    if selector is not None:
        env = env or environment()
        try:
            program = env.compile(selector)
        except CompileError as exc:
            raise InputError(f"--selector: {exc}") from None
    stale = stale_nodes(snap.slices, snap.nodes)
    held: dict[tuple[str, str, str], list[str]] = {}
    for obj in snap.claims:
        try:
            claim = Claim.held(obj)
        except InputError:
            continue  # no name: nothing to show it by
        if claim is None:
            continue
        who = f"{claim.namespace}/{claim.name}"
        if claim.reserved_for:
            who += f" ({', '.join(r.removeprefix('pods/') for r in claim.reserved_for)})"
        for r in claim.allocation or []:
            key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            held.setdefault(key, []).append(who + (" [admin]" if r.get("adminAccess") else ""))
    node_filter = set(nodes)
    rows = []
    for d in slice_devices(s for s in snap.slices
                           if (s.get("spec") or {}).get("driver") in DRIVERS):
        if node_filter and d.node not in node_filter:
            continue
        if wanted_attrs and not all(_attr_matches(d, k, v) for k, v in wanted_attrs):
            continue
        if program is not None and env is not None:
            try:
                data = env.device_data(DeviceInput(d.driver, d.attributes, d.capacity,
                                                   d.allow_multiple))
            except ValueError:
                continue
            if not env.matches(program, data).matched:
                continue
        rows.append(Row(d, held.get(d.key, []), d.node in stale))
    rows.sort(key=lambda r: (r.device.node or "", r.device.driver, r.device.name))
    unclaimed = []
    problems: list[dict[str, str]] = []
    slice_nodes = {(s.get("spec") or {}).get("nodeName") for s in snap.slices
                   if (s.get("spec") or {}).get("driver") == DRIVER}
    for node, why in sorted(stale.items()):
        if not node_filter or node in node_filter:
            problems.append({"node": node, "problem": "stale slice", "detail": why})
    for m in snap.machines:
        name = str((m.get("metadata") or {}).get("name"))
        if node_filter and name not in node_filter:
            continue
        status = m.get("status") or {}
        for c in status.get("conditions") or []:
            if isinstance(c, dict) and c.get("type") == "FactsPublished" \
                    and c.get("status") == "False":
                problems.append({"node": name, "problem": "facts unreadable",
                                 "detail": str(c.get("message") or c.get("reason") or "")})
        if name not in slice_nodes:
            problems.append({"node": name, "problem": "no slice",
                             "detail": "a Machine but no liken.sh ResourceSlice: the agent has "
                                       "not published, or it stopped (the kubelet removes the "
                                       "slices of a plugin gone 30 s)"})
        if wanted_attrs or program is not None:
            continue  # the filters describe devices; unclaimed hardware is not one
        for u in (status.get("hardware") or {}).get("unclaimed") or []:
            if isinstance(u, dict):
                unclaimed.append({"node": name, **u})
    problems.sort(key=lambda p: (p["node"], p["problem"]))
    return Fleet(rows, unclaimed, problems, len({s for s in slice_nodes if s}))


def _parse_attr_filter(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InputError(f"--attribute {text!r}: expected NAME=VALUE (e.g. class=smart-card)")
    return key, value


def _attr_matches(d: Device, key: str, value: str) -> bool:
    v = d.attribute(key if "/" in key else f"{d.driver}/{key}")
    if v is None:
        return False
    kind, raw = v
    if kind == "bool":
        return value == ("true" if raw else "false")
    return str(raw) == value


def _attr(d: Device, name: str) -> str:
    v = d.attribute(f"{d.driver}/{name}")
    if v is None:
        return "-"
    kind, raw = v
    if kind == "bool":
        return "true" if raw else "false"
    return str(raw)


def to_json(fleet: Fleet) -> dict[str, Any]:
    return {
        "nodes": fleet.nodes,
        "devices": [{
            "node": r.device.node, "driver": r.device.driver, "pool": r.device.pool,
            "device": r.device.name, "attributes": r.device.attributes,
            "shared": r.device.allow_multiple, "heldBy": r.held_by, "staleSlice": r.stale,
        } for r in fleet.rows],
        "unclaimed": fleet.unclaimed,
        "problems": fleet.problems,
    }


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    # Every cell is a node's or the API server's words: cleaned before it is measured.
    rows = [clean_row(r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


def to_text(fleet: Fleet, wide: bool = False) -> str:
    head: tuple[str, ...] = ("NODE", "DRIVER", "DEVICE", "CLASS", "SUBSYSTEM", "SHARED",
                             "HELD-BY")
    if wide:
        head += ("VENDOR", "PRODUCT", "SERIAL", "ADDRESS", "HARDWARE")
    rows = [head]
    for r in fleet.rows:
        d = r.device
        row: tuple[str, ...] = (
            (d.node or "*") + (" (stale)" if r.stale else ""), d.driver, d.name,
            _attr(d, "class"), _attr(d, "subsystem"), "yes" if d.allow_multiple else "no",
            ", ".join(r.held_by) or "-")
        if wide:
            row += (_attr(d, "vendor"), _attr(d, "product"), _attr(d, "serial"),
                    _attr(d, "address"), _attr(d, "name"))
        rows.append(row)
    out = _table(rows) if fleet.rows else ["No devices."]
    if fleet.unclaimed:
        out += ["", "Unclaimed hardware (declare a module in the node's Machine spec.modules):"]
        urows: list[tuple[str, ...]] = [("NODE", "BUS", "HARDWARE", "CANDIDATE MODULES")]
        for u in fleet.unclaimed:
            what = ", ".join(str(x) for x in (u.get("name"), u.get("class")) if x) or \
                str(u.get("modalias") or u.get("message") or "")
            urows.append((u["node"], str(u.get("bus", "")), what,
                           ", ".join(u.get("candidates") or []) or "none on the node"))
        out += _table(urows)
    if fleet.problems:
        out += ["", "Nodes to check:"]
        prows: list[tuple[str, ...]] = [("NODE", "PROBLEM", "DETAIL")]
        out += _table(prows
                      + [(p["node"], p["problem"], p["detail"]) for p in fleet.problems])
    held = sum(1 for r in fleet.rows if r.held_by)
    def n(count: int, one: str, many: str) -> str:
        return f"{count} {one if count == 1 else many}"

    out += ["", f"{n(len(fleet.rows), 'device', 'devices')} on {n(fleet.nodes, 'node', 'nodes')}"
                f", {held} held by claims, "
                f"{n(len(fleet.unclaimed), 'piece', 'pieces')} of unclaimed hardware, "
                f"{n(len(fleet.problems), 'node problem', 'node problems')}."]
    return "\n".join(out) + "\n"
