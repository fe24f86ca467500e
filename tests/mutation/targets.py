"""The modules that protect the machine, which part of each is mutated, and which tests judge it.

Each target is one module's rules (``functions``: whole functions by qualified name, with what
nests in them; ``"<module>"`` is the module's top level, its constants; None is everything) and
the module's own test files, run in the order given (the sharpest first, so a mutant dies fast).
``security`` names the functions whose rules keep a pod from what the machine holds: the sampled
floor in ``./tasks test`` fails when a mutant of one of them survives unexplained.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str  # short, used on the command line and in docs/quality.md
    module: str
    tests: tuple[str, ...]
    functions: tuple[str, ...] | None = None
    security: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return "src/" + self.module.replace(".", "/") + ".py"


# The inventory's rules through the whole policy, one file per module: every target judged by
# them runs them all (a mutant of one module may show in another module's rule).
RULE_TESTS = tuple(f"tests/inventory/test_{m}.py" for m in (
    "publish", "reserved", "sharing", "usb", "hardware", "policy", "names", "attributes",
    "ledger"))


def _files(*paths: str) -> tuple[str, ...]:
    """``paths`` in order, each once (a module's own file first, then RULE_TESTS)."""
    return tuple(dict.fromkeys(paths))

TARGETS: tuple[Target, ...] = (
    Target("reserved", "liken_devices.inventory.reserved",
           _files("tests/inventory/test_reserved_rules.py", "tests/inventory/test_reserved.py",
                  *RULE_TESTS, "tests/inventory/test_properties.py"),
           security=("<module>", "reserved_kind", "block_names", "role_partitions", "backing")),
    Target("storage-roles", "liken_devices.inventory.sources",
           ("tests/inventory/test_facts_rules.py", "tests/inventory/test_sources.py",
            "tests/inventory/test_properties.py"),
           functions=("<module>", "read_facts", "_storage_roles", "_role_partition"),
           security=("<module>", "read_facts", "_storage_roles", "_role_partition")),
    Target("sharing", "liken_devices.inventory.sharing",
           _files("tests/inventory/test_sharing_rules.py", "tests/inventory/test_sharing.py",
                  *RULE_TESTS, "tests/inventory/test_properties.py"),
           security=("<module>", "split", "_gpu", "drm_role", "node_kind")),
    Target("bluetooth", "liken_devices.inventory.bluetooth",
           _files("tests/inventory/test_bluetooth_numbers.py", "tests/inventory/test_bluetooth.py",
                  "tests/inventory/test_bluetooth_owner.py", "tests/inventory/test_usb.py",
                  *RULE_TESTS),
           security=("<module>", "is_legacy_event", "legacy_event_devices", "event_owner",
                     "bluetooth_nodes")),
    Target("usbfs", "liken_devices.inventory.usb",
           _files("tests/inventory/test_usbfs_rules.py", "tests/inventory/test_usb.py",
                  "tests/inventory/test_claimed_shape.py", *RULE_TESTS,
                  "tests/inventory/test_bluetooth.py"),
           functions=("UsbRules.decide", "UsbRules.machine_depends", "UsbRules._whole",
                      "UsbRules._held_whole", "UsbRules._held_interface", "UsbRules._interface",
                      "UsbRules._bluetooth"),
           security=("UsbRules.decide", "UsbRules.machine_depends", "UsbRules._whole",
                     "UsbRules._interface")),
    Target("cdi", "liken_devices.plugin.cdi",
           ("tests/plugin/test_cdi_rules.py", "tests/plugin/test_cdi_state.py"),
           security=("<module>", "check_uid", "check_device", "spec_path", "absent_path",
                     "host_owner", "HostNodes", "Delivery", "write_spec", "read_claim_spec",
                     "_read_node", "check_node_name")),
    # The state file's contents: what is written and what a restart trusts. The instance and
    # write locks around it (acquire, write_lock, holder identity) are the plugin's concurrency,
    # judged by tests/plugin/test_state.py and test_restart.py, not rules of what a pod touches.
    Target("state", "liken_devices.plugin.state",
           ("tests/plugin/test_state_rules.py", "tests/plugin/test_state.py"),
           functions=("<module>", "PreparedClaim", "_str", "_bool", "_number", "_list", "_dict",
                      "parse_state", "render_state", "rebuild_from_specs", "StateStore.open",
                      "StateStore.load", "StateStore.save", "read_state"),
           security=("<module>", "PreparedClaim.from_json", "_str", "_bool", "_number", "_list",
                     "_dict", "parse_state", "StateStore.save", "rebuild_from_specs")),
)

BY_NAME = {t.name: t for t in TARGETS}
