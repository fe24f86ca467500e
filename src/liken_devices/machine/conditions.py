"""The Machine status conditions the node side sets, and the shape they share.

Each condition is ``{type, status: "True"|"False", reason, message}``; the agent adds
``lastTransitionTime`` when it writes them (docs/machine.md). ``SpecValid`` says whether the
Machine's spec (the object's, or ``--machine FILE``'s) could be used: when it cannot, the node
keeps the last good spec, logs the error once, and this condition carries it.
"""

from __future__ import annotations

SPEC_VALID = "SpecValid"


def condition(type_: str, ok: bool, reason: str, message: str) -> dict[str, str]:
    return {"type": type_, "status": "True" if ok else "False", "reason": reason,
            "message": message}


def spec_condition(error: str | None) -> dict[str, str]:
    """True (``SpecRead``) or False (``SpecMalformed``, with the error) for the current spec."""
    if error is None:
        return condition(SPEC_VALID, True, "SpecRead", "the spec is in use")
    return condition(SPEC_VALID, False, "SpecMalformed",
                     f"{error}; the last good spec stays in use")
