"""The node agent's side of the Kubernetes API: the slice it publishes and the Machine it reports.

:mod:`.client` builds a lightkube client (in-cluster or from a kubeconfig) and names the
resources as generic, dict-valued kinds; :mod:`.publisher` keeps ``<node>-liken.sh`` true;
:mod:`.machine` reads the Machine's spec and writes its status; :mod:`.watch` learns of changes
made by others (the kubelet deleting slices, an operator editing spec.modules) without polling;
:mod:`.retry` is the one retry schedule every writer uses, and every failed request reaches it as
:class:`.client.ApiError`; :mod:`.evict` evicts a pod through the Eviction API (only the media
agent imports it); :mod:`.endpoint` serves /metrics, /healthz and /readyz, bounded.
"""

from .client import (
    FIELD_MANAGER,
    ApiError,
    NoClusterConfig,
    Resources,
    cluster_available,
    make_client,
)
from .machine import MachineReporter, build_status, facts_condition, sharing_condition
from .publisher import GATE_MESSAGE, SlicePublisher
from .retry import ApiMetrics, Backoff, NullMetrics, OutageLog, RetrySchedule
from .watch import ObjectWatch

__all__ = [
    "FIELD_MANAGER",
    "GATE_MESSAGE",
    "ApiError",
    "ApiMetrics",
    "Backoff",
    "MachineReporter",
    "NoClusterConfig",
    "NullMetrics",
    "ObjectWatch",
    "OutageLog",
    "Resources",
    "RetrySchedule",
    "SlicePublisher",
    "build_status",
    "cluster_available",
    "facts_condition",
    "make_client",
    "sharing_condition",
]
