"""A claim as the kubelet names it, and the one pattern of a Kubernetes UID.

The kubelet's NodePrepareResources and NodeUnprepareResources name each claim by namespace, UID
and name (the DRA gRPC ``Claim`` message). The UID is hostile until parsed, and it becomes file
names (the claim's CDI spec ``liken.sh-<uid>.json``, ``names/<uid>`` beside the plugin's state)
and CDI device names. So it is parsed where it enters, by :meth:`ClaimRef.parse` (the gRPC
requests; ``--pod-uid`` by :func:`parse_uid`), and checked again only where it becomes a name
on disk (``cdi.check_uid``: the CDI spec's file and device names, and the state, whose claims
pass it when the state file is read); between the two it travels as a parsed :class:`ClaimRef`.

The namespace and name are checked where they reach the API server's URL (``claims.check_ref``):
an unprepare needs only the UID, and succeeds for a claim whose name could never be read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A Kubernetes UID is a UUID; accept the characters the CDI specification allows at the start and
# in the middle of a device name, and nothing that could leave a directory.
UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}[A-Za-z0-9]")  # fullmatch: no trailing "\n"


class UidError(ValueError):
    """Text that is not a Kubernetes UID; the message says whose, in one line."""


def parse_uid(text: str, what: str = "claim UID") -> str:
    """``text`` when it is a UID, else :class:`UidError` naming ``what`` it should have been."""
    if not UID.fullmatch(text):
        raise UidError(f"{what} {text[:80]!r} is not a UID (letters, digits and '-')")
    return text


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it, its UID parsed (:meth:`parse`)."""

    namespace: str
    uid: str
    name: str

    @classmethod
    def parse(cls, namespace: str, uid: str, name: str) -> ClaimRef:
        """The claim of a kubelet request, or :class:`UidError` when its UID is not a UID."""
        return cls(namespace, parse_uid(uid), name)
