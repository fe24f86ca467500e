"""The slice builder and the validator: valid slices pass the official schema and our limits;
each API-server rule is caught."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from liken_devices.inventory.limits import DRIVER
from liken_devices.slices import make_slice, validate_slice
from liken_devices.slices.build import device_json


def good() -> dict[str, Any]:
    devices = [device_json("pci-0000-00-02-0", {"renderNode": True, "address": "0000:00:02.0",
                                                "resource.kubernetes.io/pciBusID": "0000:00:02.0"},
                           shareable=True),
               device_json("usb-1-2-1-0", {"serial": "abc", "bus": "usb"})]
    return make_slice("node-1", DRIVER, devices, generation=3)


def test_built_slice_has_the_shape_the_issue_names() -> None:
    obj = good()
    assert obj["metadata"]["name"] == "node-1-liken.sh"
    spec = obj["spec"]
    assert spec["driver"] == "liken.sh" and spec["nodeName"] == "node-1"
    assert spec["pool"] == {"name": "node-1", "generation": 3, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["pci-0000-00-02-0", "usb-1-2-1-0"]
    assert spec["devices"][0]["allowMultipleAllocations"] is True
    assert "allowMultipleAllocations" not in spec["devices"][1]
    assert validate_slice(obj) == []


def test_a_device_is_a_name_attributes_and_a_sharing_flag() -> None:
    """rules: limits.plain-devices. No capacity, taints, counters or per-device node selection:
    the slice is pinned to its node as a whole."""
    spec = good()["spec"]
    assert set(spec) == {"driver", "nodeName", "pool", "devices"}
    for d in spec["devices"]:
        assert set(d) <= {"name", "attributes", "allowMultipleAllocations"}, d
        assert {"name", "attributes"} <= set(d)


def test_built_slice_passes_the_official_openapi_schema() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    kv.validate(good(), "1.34.0", strict=True)


def mutate(path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(good())
    target: Any = obj
    keys = path.split(".")
    for k in keys[:-1]:
        target = target[int(k)] if k.isdigit() else target[k]
    last = keys[-1]
    if value is KeyError:
        del target[last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return obj


@pytest.mark.parametrize(("path", "value", "needle"), [
    ("spec.devices.0.name", "PCI-upper", "DNS label"),
    ("spec.devices.0.name", "x" * 64, "DNS label"),
    ("spec.devices.1.name", "pci-0000-00-02-0", "duplicate"),
    ("spec.devices.1.attributes.serial", {"string": "é" * 33}, "at most 64"),
    ("spec.devices.1.attributes.serial", {"string": "a", "bool": True}, "exactly one"),
    ("spec.devices.1.attributes.serial", {}, "exactly one"),
    ("spec.devices.1.attributes.serial", {"float": 1.5}, "unknown value field"),
    ("spec.devices.1.attributes.serial", {"version": "v1.2.3"}, "semantic version"),
    ("spec.devices.1.attributes.serial", {"int": "four"}, "integer"),
    ("spec.devices.1.attributes.a/b/c", {"string": "x"}, "more than one slash"),
    ("spec.devices.1.attributes.9bad", {"string": "x"}, "C identifier"),
    ("spec.devices.1.attributes." + "n" * 33, {"string": "x"}, "C identifier"),
    ("spec.driver", "", "driver"),
    ("spec.driver", "x" * 64, "driver"),
    ("spec.pool.generation", -1, "generation"),
    ("spec.pool.resourceSliceCount", 0, "resourceSliceCount"),
    ("spec.pool.name", "Node_1", "pool.name"),
    ("spec.allNodes", True, "exactly one"),
    ("spec.nodeName", KeyError, "exactly one"),
    ("spec.devices.0.nodeName", "node-1", "perDeviceNodeSelection"),
    ("spec.bogus", 1, "unknown field"),
    ("metadata.name", "Bad_Name", "metadata.name"),
    ("apiVersion", "resource.k8s.io/v1beta1", "apiVersion"),
])
def test_each_rule_is_enforced(path: str, value: Any, needle: str) -> None:
    errors = validate_slice(mutate(path, value))
    assert any(needle in e for e in errors), errors


def test_32_attributes_and_128_devices_are_the_limits() -> None:
    attrs = {f"a{i}": f"v{i}" for i in range(32)}
    obj = make_slice("n", DRIVER, [device_json("d", attrs)])
    assert validate_slice(obj) == []
    attrs["a32"] = "one too many"
    assert any("at most 32" in e for e in validate_slice(make_slice("n", DRIVER,
                                                                    [device_json("d", attrs)])))
    many = [device_json(f"d{i}", {}) for i in range(128)]
    assert validate_slice(make_slice("n", DRIVER, many)) == []
    many.append(device_json("d128", {}))
    assert any("at most 128" in e for e in validate_slice(make_slice("n", DRIVER, many)))


def test_every_violation_is_reported_not_just_the_first() -> None:
    obj = mutate("spec.devices.0.name", "UPPER")
    obj["spec"]["pool"]["generation"] = -5
    assert len(validate_slice(obj)) >= 2


def test_topology_attributes_pass_as_the_api_server_takes_them() -> None:
    """rules: attributes.topology. The standard names are qualified names, pcieRoot a string and
    numaNode an int, accepted by our rules and by the official schema of every minor."""
    from tests.deploy.support import MINORS

    kv = pytest.importorskip("kubernetes_validate")

    obj = make_slice("node-1", DRIVER, [device_json("pci-0000-3b-00-0", {
        "address": "0000:3b:00.0", "resource.kubernetes.io/pciBusID": "0000:3b:00.0",
        "resource.kubernetes.io/pcieRoot": "pci0000:3a", "resource.kubernetes.io/numaNode": 1})])
    attrs = obj["spec"]["devices"][0]["attributes"]
    assert attrs["resource.kubernetes.io/numaNode"] == {"int": 1}
    assert attrs["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:3a"}
    assert validate_slice(obj) == []
    for minor in MINORS:
        kv.validate(obj, minor, strict=True)
