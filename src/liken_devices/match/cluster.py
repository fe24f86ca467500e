"""What the match commands read from the cluster: ``fleet``, and the cluster of ``claim-for``
and ``match`` (``--kubeconfig``, or ``kubectl liken``'s default).

The client is made as kubectl finds its configuration (``$KUBECONFIG``, else ``~/.kube/config``),
every list is paginated and held to one budget (kube/listing.py), and an API error is one line.
The commands' options are :mod:`.cli`'s, read once into :mod:`.options`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..cliargs import InputError, dump
from ..inventory.limits import DRIVER
from ..kube.client import NoClusterConfig, Resources, describe, make_client
from ..kube.listing import Budget
from .cel import CelUnavailable, environment
from .fleet import build, list_all, read_cluster, to_json, to_text
from .options import ClusterRead, FleetOptions


def default_kubeconfig() -> Path | None:
    """kubectl's choice: ``$KUBECONFIG`` (its first file), else ``~/.kube/config``."""
    env = os.environ.get("KUBECONFIG")
    if env:
        return Path(env.split(os.pathsep)[0])
    home = Path.home() / ".kube" / "config"
    return home if home.is_file() else None


def client_for(kubeconfig: Path | None) -> Any:
    if kubeconfig is not None and not kubeconfig.is_file():
        raise InputError(f"--kubeconfig {kubeconfig}: no such file")
    try:
        return make_client(kubeconfig, timeout=30.0)
    except NoClusterConfig as exc:
        raise InputError(f"{exc}: pass --kubeconfig FILE") from None
    except Exception as exc:  # a kubeconfig lightkube cannot load
        raise InputError(f"cannot load the kubeconfig {kubeconfig}: {exc}") from None


def api_error(exc: BaseException) -> InputError:
    return InputError(f"the API server: {describe(exc)}")


def cluster_objects(read: ClusterRead, *, with_claims: bool) -> dict[str, list[Any]]:
    client = client_for(read.kubeconfig or default_kubeconfig())
    budget = Budget(seconds=read.timeout)
    out: dict[str, list[Any]] = {}
    fields = None if with_claims else {"spec.driver": DRIVER}
    try:
        out["slices"] = list(list_all(client, Resources.slice(), page=read.page_size,
                                      fields=fields, budget=budget))
        if with_claims:
            out["classes"] = list(list_all(client, Resources.device_class(),
                                           page=read.page_size, budget=budget))
            out["claims"] = list(list_all(client, Resources.claim(), page=read.page_size,
                                          namespaced=True, budget=budget))
            out["templates"] = list(list_all(client, Resources.claim_template(),
                                             page=read.page_size, namespaced=True,
                                             budget=budget))
    except InputError:
        raise
    except Exception as exc:
        raise api_error(exc) from None
    return out


def cmd_fleet(opts: FleetOptions) -> int:
    read = opts.read
    client = client_for(read.kubeconfig or default_kubeconfig())
    try:
        snap = read_cluster(client, page=read.page_size, budget=Budget(seconds=read.timeout))
    except Exception as exc:
        raise api_error(exc) from None
    env = None
    if opts.selector is not None:
        try:
            env = environment()
        except CelUnavailable as exc:
            raise InputError(str(exc)) from None
    fleet = build(snap, nodes=opts.nodes, attributes=opts.attributes, selector=opts.selector,
                  env=env)
    if opts.output in ("table", "wide"):
        sys.stdout.write(to_text(fleet, wide=opts.output == "wide"))
    else:
        sys.stdout.write(dump(to_json(fleet), opts.output))
    return 0
