"""What the deploy tests share: the manifests as the cluster receives them, the Kubernetes minors
they are validated against, and a ValidatingAdmissionPolicy evaluated with a real CEL
implementation (cel-python) the way the API server applies one."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
# The minors whose API has resource.k8s.io/v1 (DRA's GA), up to the newest schema we hold.
MINORS = ("1.34.0", "1.35.0", "1.36.0", "1.37.0")


VERSIONS = REPO / "scripts" / "cluster" / "versions.env"
CACHE = Path(os.environ.get("LIKEN_K8S_CACHE", "/var/cache/liken-k8s"))


def versions() -> dict[str, str]:
    """scripts/cluster/versions.env: every pinned version of the tools the suite builds."""
    out: dict[str, str] = {}
    for line in VERSIONS.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[name.strip()] = value.strip()
    return out


def built(directory: str, name: str) -> str | None:
    """A binary that scripts/cluster/build.sh built into the cache (its .done stamp there)."""
    path = CACHE / directory / name
    done = (CACHE / directory / ".done").is_file()
    return str(path) if done and os.access(path, os.X_OK) else None


def kubectl() -> str | None:
    """The cache's kubectl of the pinned Kubernetes (what CI builds), else one on PATH."""
    return built(f"bin-k8s-{versions()['KUBERNETES_VERSION']}", "kubectl") or \
        shutil.which("kubectl")


def helm() -> str | None:
    """The cache's helm of the pinned version (scripts/cluster/build.sh), else one on PATH."""
    return built(f"bin-helm-{versions()['HELM_VERSION']}", "helm") or shutil.which("helm")


def rendered(directory: Path = DEPLOY) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of a directory: what ``kubectl apply -k`` sends."""
    exe = kubectl()
    assert exe is not None
    out = subprocess.run([exe, "kustomize", str(directory)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def files(directory: Path) -> list[dict[str, Any]]:
    """The objects of every YAML file under ``directory`` except kustomizations."""
    docs: list[dict[str, Any]] = []
    for path in sorted(directory.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


# ---- a ValidatingAdmissionPolicy with cel-python -------------------------------------------


@dataclass
class Verdict:
    allowed: bool
    message: str = ""


def _cel(env: celpy.Environment, text: str, activation: Mapping[str, Any]) -> Any:
    return env.program(env.compile(text)).evaluate(dict(activation))


def _matches(rules: list[dict[str, Any]], request: dict[str, Any]) -> bool:
    res = request["resource"]
    full = res["resource"] + (f"/{request['subResource']}" if request.get("subResource") else "")
    return any(res["group"] in r["apiGroups"] and request["operation"] in r["operations"]
               and full in r["resources"] for r in rules)


def admit(policy: dict[str, Any], request: dict[str, Any], obj: dict[str, Any] | None,
          old: dict[str, Any] | None) -> Verdict:
    """The policy's answer to one request: matchConstraints, then matchConditions, variables
    in order (each sees the ones before it), then every validation."""
    spec = policy["spec"]
    if not _matches(spec["matchConstraints"]["resourceRules"], request):
        return Verdict(True, "not matched")
    env = celpy.Environment()
    base = {"request": celpy.json_to_cel(request),
            "object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old)}
    for cond in spec.get("matchConditions", []):
        if not bool(_cel(env, cond["expression"], base)):
            return Verdict(True, "condition " + cond["name"] + " false")
    variables: dict[str, Any] = {}
    for var in spec.get("variables", []):
        act = {**base, "variables": celpy.json_to_cel(variables)}
        variables[var["name"]] = _to_json(_cel(env, var["expression"], act))
    act = {**base, "variables": celpy.json_to_cel(variables)}
    for rule in spec["validations"]:
        if not bool(_cel(env, rule["expression"], act)):
            text = rule.get("message", "")
            if "messageExpression" in rule:
                text = str(_cel(env, rule["messageExpression"], act))
            return Verdict(False, " ".join(text.split()))
    return Verdict(True)


def _to_json(value: Any) -> Any:
    """A CEL value back to plain data, so a later expression gets it as JSON."""
    if isinstance(value, celpy.celtypes.BoolType):
        return bool(value)
    if isinstance(value, celpy.celtypes.StringType):
        return str(value)
    if isinstance(value, (celpy.celtypes.IntType, celpy.celtypes.UintType)):
        return int(value)
    if isinstance(value, dict):  # MapType
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, list):  # ListType, or a list that + made
        return [_to_json(v) for v in value]
    if value is None:
        return None
    raise TypeError(f"unexpected CEL value {value!r}")


# ---- claims: which devices a claim's requests can be allocated -------------------------------


def cel_device(driver: str, device: dict[str, Any]) -> Any:
    """The CEL ``device`` of a slice device (KEP-4381): ``driver``, and attributes by domain,
    a bare name under the driver's own domain."""
    attrs: dict[str, dict[str, Any]] = {}
    for key, value in device.get("attributes", {}).items():
        domain, _, ident = key.rpartition("/")
        attrs.setdefault(domain or driver, {})[ident] = next(iter(value.values()))
    attrs.setdefault(driver, {})
    return celpy.json_to_cel({"driver": driver, "attributes": attrs})


def selected(selectors: list[dict[str, Any]], driver: str, device: dict[str, Any]) -> bool:
    env = celpy.Environment()
    dev = cel_device(driver, device)
    return all(bool(_cel(env, s["cel"]["expression"], {"device": dev})) for s in selectors)


def allocations(template: dict[str, Any], classes: dict[str, dict[str, Any]],
                slices: dict[str, list[dict[str, Any]]]) -> list[tuple[str, ...]]:
    """Every way the scheduler could allocate the claim of a ResourceClaimTemplate: one device
    per request (``exactly``, count 1), each matching its class's and its own selectors, with
    the constraints' matchAttribute equal (and present) across their requests. A device is
    named ``driver/name``."""
    spec = template["spec"]["spec"]["devices"]
    candidates: list[list[tuple[str, dict[str, Any]]]] = []
    for req in spec["requests"]:
        ex = req["exactly"]
        cls = classes[ex["deviceClassName"]]
        sels = cls["spec"].get("selectors", []) + ex.get("selectors", [])
        candidates.append([(drv, d) for drv, devs in slices.items() for d in devs
                           if selected(sels, drv, d)])
    names = [r["name"] for r in spec["requests"]]
    out: list[tuple[str, ...]] = []

    def attr(drv: str, d: dict[str, Any], key: str) -> Any:
        domain, _, ident = key.rpartition("/")
        full = key if domain != drv else ident
        value = d.get("attributes", {}).get(full)
        return None if value is None else next(iter(value.values()))

    def walk(i: int, chosen: list[tuple[str, dict[str, Any]]]) -> None:
        if i == len(candidates):
            for con in spec.get("constraints", []):
                picked = [chosen[names.index(r)] for r in con.get("requests", names)]
                values = [attr(drv, d, con["matchAttribute"]) for drv, d in picked]
                if None in values or len(set(values)) != 1:
                    return
            out.append(tuple(f"{drv}/{d['name']}" for drv, d in chosen))
            return
        for c in candidates[i]:
            if all(c[1] is not o[1] for o in chosen):
                walk(i + 1, [*chosen, c])

    walk(0, [])
    return out
