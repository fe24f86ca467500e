"""The node agent's side of the Kubernetes API: the slice it publishes and the Machine it reports.

:mod:`.client` builds a lightkube client (in-cluster or from a kubeconfig) and names the
resources as generic, dict-valued kinds; :mod:`.publisher` keeps ``<node>-liken.sh`` true;
:mod:`.machine` reads the Machine's spec and writes its status; :mod:`.watch` learns of changes
made by others (the kubelet deleting slices, an operator editing spec.modules) without polling.
"""

from .client import FIELD_MANAGER, NoClusterConfig, Resources, cluster_available, make_client
from .machine import MachineReporter, build_status, facts_condition
from .publisher import GATE_MESSAGE, SlicePublisher
from .retry import ApiMetrics, Backoff, NullMetrics, OutageLog
from .watch import ObjectWatch

__all__ = [
    "FIELD_MANAGER",
    "GATE_MESSAGE",
    "ApiMetrics",
    "Backoff",
    "MachineReporter",
    "NoClusterConfig",
    "NullMetrics",
    "ObjectWatch",
    "OutageLog",
    "Resources",
    "SlicePublisher",
    "build_status",
    "cluster_available",
    "facts_condition",
    "make_client",
]
