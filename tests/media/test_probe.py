"""The query through the real libva, one child process per render node (docs/media.md).

Each test runs the agent's own child (:func:`liken_devices.media.probe.child_command`) against
fake render nodes answered by the fake VA driver, and checks the capability table on the answer
(rules: media.capabilities, media.failed-query).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from liken_devices.media import va
from liken_devices.media.capabilities import NAMES, capability_flags, log_line
from liken_devices.media.probe import MAX_MESSAGES, MAX_TEXT, probe_node, probe_nodes

from .conftest import CAPS, FakeGPUs

SHORT = 3.0  # seconds: the timeout most tests use (the real 20 s case is marked slow)


def true_flags(result_flags: dict[str, bool]) -> set[str]:
    return {k for k, v in result_flags.items() if v}


def test_parent_never_loads_libva(gpus: FakeGPUs) -> None:
    gpus.add(128, CAPS / "amd-rdna2-mesa.txt")
    probe_nodes([str(gpus.dev / "dri/renderD128")], SHORT, gpus.env)
    maps = Path("/proc/self/maps").read_text()
    assert "libva.so" not in maps and "libva-drm.so" not in maps


def test_one_gpu_rdna2(gpus: FakeGPUs) -> None:
    node = gpus.add(128, CAPS / "amd-rdna2-mesa.txt")
    result = probe_node(node, SHORT, gpus.env)
    assert result.error is None, result
    assert result.raw is not None
    assert result.raw.vendor.startswith("Mesa Gallium driver 23.1.2 for AMD Radeon RX 6800")
    assert (va.VAProfileAV1Profile0, va.VAEntrypointVLD, 0x101) in result.raw.pairs
    assert result.raw.vpp_formats is not None
    assert {va.VA_FOURCC_NV12, va.VA_FOURCC_P010} <= set(result.raw.vpp_formats)
    assert true_flags(capability_flags(result.raw)) == {
        "decodeH264", "decodeHEVCMain", "decodeHEVCMain10", "decodeAV1Main", "decodeAV1Main10",
        "decodeVP9", "decodeVP9Profile2", "decodeVC1", "decodeMPEG2", "encodeH264",
        "encodeHEVCMain", "encodeHEVCMain10", "scale8bit", "scale10bit"}
    # libva's own log lines come back as data.
    assert any("vafake_drv_video.so" in m for m in result.messages)


@pytest.mark.parametrize(("caps", "expected"), [
    ("amd-polaris-mesa.txt", {"decodeH264", "decodeHEVCMain", "decodeHEVCMain10", "decodeVC1",
                              "decodeMPEG2", "encodeH264", "scale8bit", "scale10bit"}),
    # DG2 encodes only through VDEnc (EncSliceLP): the LowPower flags, not the full encoder.
    ("intel-dg2-ihd.txt", {"decodeH264", "decodeHEVCMain", "decodeHEVCMain10", "decodeAV1Main",
                           "decodeAV1Main10", "decodeVP9", "decodeVP9Profile2", "decodeMPEG2",
                           "encodeH264LowPower", "encodeHEVCMainLowPower",
                           "encodeHEVCMain10LowPower", "scale8bit", "scale10bit"}),
    # nvidia-vaapi-driver: decode only, no video processor.
    ("nvidia-ampere-nvdec.txt", {"decodeH264", "decodeHEVCMain", "decodeHEVCMain10",
                                 "decodeAV1Main", "decodeAV1Main10", "decodeVP9",
                                 "decodeVP9Profile2", "decodeVP8", "decodeVC1", "decodeMPEG2"}),
    # AV1 Profile0 listed with YUV420 only: 8-bit AV1 but not 10-bit; VPP without P010.
    ("av1-8bit-only.txt", {"decodeH264", "decodeAV1Main", "scale8bit"}),
    ("no-video-processor.txt", {"decodeH264", "decodeHEVCMain", "decodeHEVCMain10",
                                "decodeVP9Profile2"}),
])
def test_generations(gpus: FakeGPUs, caps: str, expected: set[str]) -> None:
    node = gpus.add(128, CAPS / caps)
    result = probe_node(node, SHORT, gpus.env)
    assert result.error is None, result
    assert true_flags(capability_flags(result.raw)) == expected


def test_no_video_processor_reports_none(gpus: FakeGPUs) -> None:
    node = gpus.add(128, CAPS / "no-video-processor.txt")
    result = probe_node(node, SHORT, gpus.env)
    assert result.raw is not None and result.raw.vpp_formats is None


def test_rt_format_not_supported_is_no_bit_depth(gpus: FakeGPUs) -> None:
    # VA_ATTRIB_NOT_SUPPORTED (0x80000000) shares its bit with VA_RT_FORMAT_PROTECTED; it states
    # no format, so AV1 is listed but neither AV1 flag is true.
    node = gpus.add(128, "vendor x\nVAProfileAV1Profile0 VAEntrypointVLD none\n")
    result = probe_node(node, SHORT, gpus.env)
    assert result.raw is not None
    assert result.raw.pairs == ((va.VAProfileAV1Profile0, va.VAEntrypointVLD, 0x80000000),)
    flags = capability_flags(result.raw)
    assert not flags["decodeAV1Main"] and not flags["decodeAV1Main10"]


def test_protected_bit_with_formats_still_counts(gpus: FakeGPUs) -> None:
    node = gpus.add(128, "vendor x\nVAProfileAV1Profile0 VAEntrypointVLD YUV420_10 PROTECTED\n")
    flags = capability_flags(probe_node(node, SHORT, gpus.env).raw)
    assert flags["decodeAV1Main10"] and not flags["decodeAV1Main"]


def test_video_processor_formats_filter_on_type(gpus: FakeGPUs) -> None:
    # The driver's list also has sizes and a memory type; only PixelFormat entries are formats.
    node = gpus.add(128, "vendor x\nVAProfileNone VAEntrypointVideoProc\nvpp P010\n")
    result = probe_node(node, SHORT, gpus.env)
    assert result.raw is not None and result.raw.vpp_formats == (va.VA_FOURCC_P010,)
    flags = capability_flags(result.raw)
    assert flags["scale10bit"] and not flags["scale8bit"]


def test_ihd_video_processor_has_p010(gpus: FakeGPUs) -> None:
    # iHD always lists P010 for VPP, even where VideoProc's RT format lacks YUV420_10 (its fixed
    # list of formats).
    node = gpus.add(128, "vendor Intel iHD driver for Intel(R) Gen Graphics - 23.1.1 ()\n"
                         "VAProfileH264High VAEntrypointVLD\n"
                         "VAProfileNone VAEntrypointVideoProc YUV420\n")
    flags = capability_flags(probe_node(node, SHORT, gpus.env).raw)
    assert flags["scale8bit"] and flags["scale10bit"]


@pytest.mark.parametrize("call", ["vaInitialize", "vaQueryConfigProfiles",
                                  "vaQueryConfigEntrypoints", "vaGetConfigAttributes",
                                  "vaCreateConfig", "vaQuerySurfaceAttributes"])
def test_fail_in_any_call(gpus: FakeGPUs, call: str) -> None:
    node = gpus.add(128, (CAPS / "amd-rdna2-mesa.txt").read_text() + f"fail {call} 0x2\n")
    result = probe_node(node, SHORT, gpus.env)
    assert result.raw is None
    assert result.error is not None
    assert result.error.startswith(f"{call} failed: resource allocation failed (0x2)")
    assert capability_flags(result.raw) == dict.fromkeys(NAMES, False)
    line = log_line("pci-0000-00-02-0", node, result.raw, result.error)
    assert line == f"capabilities: pci-0000-00-02-0 ({node}): {result.error}"


def test_unknown_status_is_masked(gpus: FakeGPUs) -> None:
    node = gpus.add(128, "vendor x\nVAProfileH264High VAEntrypointVLD\n"
                         "fail vaQueryConfigProfiles 0xffffffff\n")
    result = probe_node(node, SHORT, gpus.env)
    assert result.error is not None
    assert result.error.startswith("vaQueryConfigProfiles failed: unknown libva error (0xffffffff)")


def test_unsupported_profile_is_skipped_like_vainfo(gpus: FakeGPUs) -> None:
    # vaQueryConfigEntrypoints answering UNSUPPORTED_PROFILE skips that profile, as vainfo does.
    node = gpus.add(128, "vendor x\nVAProfileH264High VAEntrypointVLD\n"
                         "fail vaQueryConfigEntrypoints 0xc\n")
    result = probe_node(node, SHORT, gpus.env)
    assert result.error is None and result.raw is not None and result.raw.pairs == ()


def test_crash(gpus: FakeGPUs) -> None:
    node = gpus.add(128, (CAPS / "amd-rdna2-mesa.txt").read_text() + "crash vaCreateConfig\n")
    result = probe_node(node, SHORT, gpus.env)
    assert result.raw is None
    assert result.error == "crashed: signal 6"
    assert "vafake: crashing in vaCreateConfig" in result.stderr


def test_missing_driver_gives_libva_text(gpus: FakeGPUs) -> None:
    node = gpus.add(128, CAPS / "amd-rdna2-mesa.txt")
    env = gpus.env | {"LIBVA_DRIVER_NAME": "nosuch"}
    result = probe_node(node, SHORT, env)
    assert result.error is not None
    assert result.error.startswith("vaInitialize failed: unknown libva error (0xffffffff)")
    assert "va_openDriver() returns -1" in result.error


def test_node_that_is_not_drm(gpus: FakeGPUs, tmp_path: Path) -> None:
    other = tmp_path / "renderD129"
    other.touch()
    result = probe_node(str(other), SHORT, gpus.env)
    assert result.error is not None and result.error.startswith("vaGetDisplayDRM")


def test_absent_node(gpus: FakeGPUs) -> None:
    result = probe_node(str(gpus.dev / "dri/renderD200"), SHORT, gpus.env)
    assert result.error is not None
    assert result.error.endswith("renderD200: No such file or directory")


def test_driver_printing_on_stdout_cannot_corrupt_the_answer(gpus: FakeGPUs) -> None:
    # The child moves fd 1 onto stderr before loading libva; libva's info lines and anything the
    # driver prints land on stderr, and the answer still parses.
    node = gpus.add(128, (CAPS / "nvidia-ampere-nvdec.txt").read_text()
                    + 'say {"ok": false, "error": "not me"}\n')
    result = probe_node(node, SHORT, gpus.env)
    assert result.error is None
    assert '"not me"' in result.stderr


def test_hang_times_out(gpus: FakeGPUs) -> None:
    node = gpus.add(128, "vendor x\nVAProfileH264High VAEntrypointVLD\nhang vaInitialize\n")
    start = time.monotonic()
    result = probe_node(node, 1.0, gpus.env)
    elapsed = time.monotonic() - start
    assert result.raw is None and result.error == "timed out after 1 s"
    assert 1.0 <= elapsed < 1.0 + 2.0


def test_slow_but_in_time(gpus: FakeGPUs) -> None:
    node = gpus.add(128, "vendor x\nVAProfileH264High VAEntrypointVLD\n"
                         "hang vaQueryConfigProfiles 0.5\n")
    result = probe_node(node, SHORT, gpus.env)
    assert result.error is None and capability_flags(result.raw)["decodeH264"]


def test_four_gpus_one_hanging_cost_one_timeout(gpus: FakeGPUs) -> None:
    timeout = 3.0
    nodes = [gpus.add(128, CAPS / "amd-rdna2-mesa.txt"),
             gpus.add(129, CAPS / "intel-dg2-ihd.txt"),
             gpus.add(130, (CAPS / "nvidia-ampere-nvdec.txt").read_text()
                      + "hang vaQuerySurfaceAttributes\nhang vaGetConfigAttributes\n"),
             gpus.add(131, CAPS / "amd-polaris-mesa.txt")]
    start = time.monotonic()
    results = probe_nodes(nodes, timeout, gpus.env)
    elapsed = time.monotonic() - start
    assert [results[n].error for n in nodes] == [None, None, "timed out after 3 s", None]
    # In parallel: about one timeout in all, far from two (let alone four).
    assert timeout <= elapsed < 2 * timeout
    assert capability_flags(results[nodes[1]].raw)["encodeH264LowPower"]
    assert not capability_flags(results[nodes[2]].raw)["decodeH264"]


def test_killed_child_leaves_no_process(gpus: FakeGPUs) -> None:
    node = gpus.add(128, "vendor x\nVAProfileH264High VAEntrypointVLD\nhang vaInitialize\n")
    probe_node(node, 0.5, gpus.env)
    # The child ran with the node as its last argument; none may be left.
    survivors = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if node.encode() in cmdline:
                survivors.append(proc.name)
    assert survivors == []


@pytest.mark.slow
def test_default_timeout_is_twenty_seconds(gpus: FakeGPUs) -> None:
    node = gpus.add(128, "vendor x\nVAProfileH264High VAEntrypointVLD\n"
                         "hang vaQueryConfigProfiles\n")
    start = time.monotonic()
    result = probe_node(node, env=gpus.env)
    elapsed = time.monotonic() - start
    assert result.error == "timed out after 20 s"
    assert 20.0 <= elapsed < 23.0


# The same query with no LD_PRELOAD at all: in a private mount namespace the node is /dev/null
# bind-mounted over the fake node, and libdrm's view of sysfs holds only /sys/dev/char/1:3/
# device/drm (where libdrm looks to accept an fd as DRM), so the real libdrm accepts the fd.
NAMESPACE_SCRIPT = """set -e
for last in "$@"; do :; done
mount --bind /dev/null "$last"
mount -t tmpfs none /sys/dev/char
mkdir -p /sys/dev/char/1:3/device/drm
exec "$@"
"""


@pytest.mark.root
def test_namespace_node_without_preload(gpus: FakeGPUs) -> None:
    import os
    import shutil

    from liken_devices.media.probe import child_command

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1)")
    node = gpus.add(128, CAPS / "amd-rdna2-mesa.txt")
    env = {k: v for k, v in gpus.env.items() if k not in ("LD_PRELOAD", "VAFAKE_DRM_PREFIX")}
    command = ["unshare", "-m", "--propagation", "private", "sh", "-c", NAMESPACE_SCRIPT, "sh",
               *child_command()]
    result = probe_node(node, SHORT, env, command)
    assert result.error is None, (result.error, result.stderr)
    assert capability_flags(result.raw)["decodeAV1Main10"]
    assert not Path("/sys/dev/char/1:3/device/drm").exists()  # the host's sysfs is untouched


def test_kernel_driver_name_picks_the_va_driver(gpus: FakeGPUs, tmp_path: Path) -> None:
    # As in production (no LIBVA_DRIVER_NAME): libva maps the kernel driver's name from
    # drmGetVersion to VA driver names, i915 -> iHD first (libva's driver map). The shim answers
    # "i915", and the fake driver is installed under iHD's file name.
    drivers = tmp_path / "dri"
    drivers.mkdir()
    (drivers / "iHD_drv_video.so").symlink_to(gpus.build.driver_dir / "vafake_drv_video.so")
    node = gpus.add(128, CAPS / "intel-dg2-ihd.txt")
    env = {k: v for k, v in gpus.env.items() if k != "LIBVA_DRIVER_NAME"}
    env |= {"VAFAKE_DRM_NAME": "i915", "LIBVA_DRIVERS_PATH": str(drivers)}
    result = probe_node(node, SHORT, env)
    assert result.error is None, (result.error, result.messages)
    assert any("iHD_drv_video.so" in m for m in result.messages)
    assert capability_flags(result.raw)["encodeHEVCMain10LowPower"]


# ---- a driver that misbehaves: everything it says is bounded and cleaned -----------------------

LACE_CHARS = ("\x1b", "\u202e", "\u2028", "\n")


def _clean(text: str) -> bool:
    return not any(ch in text for ch in LACE_CHARS)


def test_a_flood_of_libva_messages_is_counted_not_kept(gpus: FakeGPUs) -> None:
    node = gpus.add(128, (CAPS / "amd-rdna2-mesa.txt").read_text() + "spam 200000 300\n")
    result = probe_node(node, 30.0, gpus.env)
    assert result.error is None, result.error
    assert len(result.messages) == MAX_MESSAGES + 1
    assert result.messages[-1].startswith("(") and "more messages not kept" in result.messages[-1]
    more = int(result.messages[-1][1:].split()[0])
    assert more > 199000
    assert all(len(m) <= MAX_TEXT + 16 and _clean(m) for m in result.messages)
    assert any("\\x1b" in m and "\\u202e" in m for m in result.messages)  # shown, escaped


def test_a_huge_vendor_string_is_cut_and_cleaned(gpus: FakeGPUs) -> None:
    from liken_devices.media.capabilities import log_line

    node = gpus.add(128, (CAPS / "amd-rdna2-mesa.txt").read_text() + "bigvendor 50000000\n")
    result = probe_node(node, 30.0, gpus.env)
    assert result.raw is not None, result.error
    assert len(result.raw.vendor) <= 256 + 3 and _clean(result.raw.vendor)
    assert result.raw.vendor.startswith("\\x1b[31m\\u202e\\u2028\\n")
    line = log_line("pci-0000-00-02-0", node, result.raw, None)
    assert len(line) < 2000 and _clean(line)
    assert capability_flags(result.raw)["decodeAV1Main10"]  # the answer itself is intact


def test_child_stderr_is_kept_as_a_short_tail_in_memory(gpus: FakeGPUs,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    def no_files(*_: object, **__: object) -> None:
        raise AssertionError("the child's stderr must not go to a temporary file")

    for name in ("TemporaryFile", "NamedTemporaryFile", "SpooledTemporaryFile", "mkstemp"):
        monkeypatch.setattr(tempfile, name, no_files)
    node = gpus.add(128, (CAPS / "amd-rdna2-mesa.txt").read_text() + "noise 50000000\n")
    result = probe_node(node, 30.0, gpus.env)
    assert result.error is None, result.error
    assert result.stderr.endswith("n" * 100) and len(result.stderr) <= MAX_TEXT + 3


def test_a_setsid_helper_neither_loses_the_answer_nor_survives(gpus: FakeGPUs,
                                                              tmp_path: Path) -> None:
    pidfile = tmp_path / "helper.pid"
    node = gpus.add(128, (CAPS / "intel-dg2-ihd.txt").read_text() + f"daemon {pidfile}\n")
    start = time.monotonic()
    result = probe_node(node, 10.0, gpus.env)
    elapsed = time.monotonic() - start
    assert result.error is None, result.error
    assert capability_flags(result.raw)["encodeH264LowPower"]
    assert elapsed < 10.0  # the answer came when the child exited, not at the timeout
    helper = int(pidfile.read_text())
    assert not Path(f"/proc/{helper}").exists()  # killed and reaped


def test_a_setsid_helper_of_a_hanging_driver_is_ended_too(gpus: FakeGPUs,
                                                          tmp_path: Path) -> None:
    pidfile = tmp_path / "helper.pid"
    node = gpus.add(128, "vendor x\nVAProfileH264High VAEntrypointVLD\n"
                         f"daemon {pidfile}\nhang vaQueryConfigProfiles\n")
    result = probe_node(node, 1.0, gpus.env)
    assert result.error == "timed out after 1 s"
    helper = int(pidfile.read_text())
    assert not Path(f"/proc/{helper}").exists()


def test_parallel_queries_keep_each_other_and_end_only_the_helpers(gpus: FakeGPUs,
                                                                    tmp_path: Path) -> None:
    """The stray sweep after one query never takes another query that is still running."""
    pidfiles = [tmp_path / f"helper{i}.pid" for i in range(3)]
    caps = (CAPS / "amd-rdna2-mesa.txt").read_text()
    nodes = [gpus.add(128 + i, caps + f"daemon {pidfiles[i]}\n"
                      + ("hang vaQueryConfigProfiles 0.3\n" if i == 1 else ""))
             for i in range(3)]
    nodes.append(gpus.add(131, caps + "hang vaQueryConfigProfiles 0.6\n"))
    results = probe_nodes(nodes, 10.0, gpus.env)
    assert [results[n].error for n in nodes] == [None, None, None, None]
    for pidfile in pidfiles:
        assert not Path(f"/proc/{int(pidfile.read_text())}").exists()
