"""Replays of real capability lists (../shared/vainfo/ beside the checkout) through the fake driver.

Skipped when that folder is absent (the suite must pass without it). The expected flags were worked
out by hand from the capability table (rules: media.capabilities) for each file. For plain dumps,
which carry no RT formats and no video processor formats, the fake driver's documented defaults
apply: AV1 Profile0 states 8 and 10 bit, and the video processor follows the vendor (iHD: NV12 plus
P010; otherwise NV12/P010 from its RT format).
"""

from __future__ import annotations

import pytest

from liken_devices.media.capabilities import NAMES, capability_flags
from liken_devices.media.probe import probe_node
from tests.support.corpus import recording

from .conftest import CAPS, VAINFO_DIR, FakeGPUs
from .vainfo_dump import PartialDump, caps_from_vainfo, is_caps_file

DECODE_ALL = {"decodeH264", "decodeHEVCMain", "decodeHEVCMain10", "decodeVP9",
              "decodeVP9Profile2"}
AV1 = {"decodeAV1Main", "decodeAV1Main10"}
ENC = {"encodeH264", "encodeHEVCMain", "encodeHEVCMain10"}
ENC_LP = {"encodeH264LowPower", "encodeHEVCMainLowPower", "encodeHEVCMain10LowPower"}
SCALE = {"scale8bit", "scale10bit"}

EXPECTED: dict[str, set[str]] = {
    "amd-rdna2-rx6750xt-navi22-mesa-23.1.2.txt":
        DECODE_ALL | AV1 | {"decodeVC1", "decodeMPEG2"} | ENC | SCALE,
    "intel-byt-baytrail-i965-2.4.1.txt":
        {"decodeH264", "decodeVC1", "decodeMPEG2", "encodeH264", "scale8bit"},
    "nvidia-nvdec-driver-direct-backend-libva-2.22.txt":
        DECODE_ALL | {"decodeVP8", "decodeVC1", "decodeMPEG2"},
    "nvidia-nvdec-driver-egl-backend-av1-libva-2.22.txt":
        {"decodeH264", "decodeHEVCMain", "decodeHEVCMain10", "decodeVP8", "decodeVC1",
         "decodeMPEG2"} | AV1,
    "vaapi-fits/vaapifits-ADL.txt":
        DECODE_ALL | AV1 | {"decodeVC1", "decodeMPEG2"} | ENC | ENC_LP | SCALE,
    "vaapi-fits/vaapifits-BMG.txt":
        DECODE_ALL | AV1 | {"decodeVP8", "decodeMPEG2"} | ENC | SCALE,
    "vaapi-fits/vaapifits-ICL.txt":
        DECODE_ALL | {"decodeVP8", "decodeVC1", "decodeMPEG2"} | ENC | ENC_LP | SCALE,
    "vaapi-fits/vaapifits-KBL.txt":
        DECODE_ALL | {"decodeVP8", "decodeVC1", "decodeMPEG2"} | ENC | {"encodeH264LowPower"}
        | SCALE,
    "vaapi-fits/vaapifits-MTL.txt":
        DECODE_ALL | AV1 | {"decodeVP8", "decodeMPEG2"} | ENC | SCALE,
    "vaapi-fits/vaapifits-PTL.txt":
        DECODE_ALL | AV1 | {"decodeVP8", "decodeMPEG2"} | ENC | SCALE,
}
# Facts the plain dump lacks: i965 lists P010 for its video processor only on Gen9 and later
# (HAS_VPP_P010 in the i965 driver), so Bay Trail (Gen7) accepts NV12 but not P010.
EXTRA = {"intel-byt-baytrail-i965-2.4.1.txt": "vpp NV12 I420 YV12 YUY2 UYVY RGBA BGRA\n"}

needs_corpus = pytest.mark.skipif(not VAINFO_DIR.is_dir(),
                                  reason=f"{VAINFO_DIR} is absent (reference data)")


@needs_corpus
def test_every_complete_file_has_an_expectation() -> None:
    # The corpus's layout: the complete captures are the top-level files, vaapi-fits/ holds derived
    # tables; partial/ must not be replayed.
    found = {str(p.relative_to(VAINFO_DIR)) for p in VAINFO_DIR.glob("*.txt")}
    found |= {str(p.relative_to(VAINFO_DIR)) for p in VAINFO_DIR.glob("vaapi-fits/*.txt")}
    assert found == set(EXPECTED)


@needs_corpus
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_replay(gpus: FakeGPUs, name: str) -> None:
    text = (VAINFO_DIR / name).read_text()
    caps = text if is_caps_file(text) else caps_from_vainfo(text)
    node = gpus.add(128, caps + EXTRA.get(name, ""))
    result = probe_node(node, 5.0, gpus.env)
    assert result.error is None, (result.error, result.stderr)
    assert {k for k, v in capability_flags(result.raw).items() if v} == EXPECTED[name]
    if not is_caps_file(text):
        # The vendor string is the dump's "Driver version:" text.
        assert result.raw is not None and result.raw.vendor in text


@needs_corpus
def test_partial_dumps_are_refused() -> None:
    partial = sorted((VAINFO_DIR / "partial").glob("*.PARTIAL.txt"))
    assert partial
    refused = 0
    for p in partial:
        text = p.read_text()
        if "# PARTIAL" in text:
            with pytest.raises(PartialDump):
                caps_from_vainfo(text)
            refused += 1
    assert refused >= len(partial) - 1  # the Raptor Lake file is cut at its start instead


def test_all_dump_gives_rt_formats() -> None:
    # The `vainfo --all` layout: a pair header, then attribute lines, RT formats continuing.
    text = """vainfo: Driver version: Example 1.0
VAProfileAV1Profile0/VAEntrypointVLD
    VAConfigAttribRTFormat                 : VA_RT_FORMAT_YUV420
                                             VA_RT_FORMAT_YUV420_10
    VAConfigAttribMaxPictureWidth          : 8192
VAProfileH264High/VAEntrypointEncSlice
    VAConfigAttribRTFormat                 : VA_RT_FORMAT_YUV420
    VAConfigAttribEncPackedHeaders         : VA_ENC_PACKED_HEADER_SEQUENCE
                                             VA_ENC_PACKED_HEADER_PICTURE
"""
    assert caps_from_vainfo(text) == (
        "vendor Example 1.0\n"
        "VAProfileAV1Profile0 VAEntrypointVLD VA_RT_FORMAT_YUV420 VA_RT_FORMAT_YUV420_10\n"
        "VAProfileH264High VAEntrypointEncSlice VA_RT_FORMAT_YUV420\n")


def test_all_dump_replays_8bit_only_av1(gpus: FakeGPUs) -> None:
    text = ("vainfo: Driver version: Example 1.0\nVAProfileAV1Profile0/VAEntrypointVLD\n"
            "    VAConfigAttribRTFormat                 : VA_RT_FORMAT_YUV420\n")
    result = probe_node(gpus.add(128, caps_from_vainfo(text)), 5.0, gpus.env)
    flags = capability_flags(result.raw)
    assert flags["decodeAV1Main"] and not flags["decodeAV1Main10"]


def _scan_recording(gpus: FakeGPUs, name: str, capsys: pytest.CaptureFixture[str]) -> dict[
        str, dict[str, object]]:
    import json

    from liken_devices.media.cli import main

    rec = recording(name)
    assert main(["scan", "--recording", str(rec), "--facts", "/nonexistent", "--dev",
                 str(gpus.dev), "--node", "rec", "-o", "json", "--timeout", "5"]) == 0
    obj = json.loads(capsys.readouterr().out)
    return {d["name"]: {k: next(iter(v.values())) for k, v in d["attributes"].items()}
            for d in obj["spec"]["devices"]}


def test_recording_kaby_lake_g(fake_env: FakeGPUs, capsys: pytest.CaptureFixture[str]) -> None:
    # A real recording with two GPUs (Intel HD 630 on i915, AMD Polaris 22 on amdgpu), each
    # render node answered by its generation's capability list.
    kbl = VAINFO_DIR / "vaapi-fits" / "vaapifits-KBL.txt"
    if not kbl.is_file():
        pytest.skip(f"{kbl} is absent")
    fake_env.add(128, kbl)
    fake_env.add(129, CAPS / "amd-polaris-mesa.txt")
    devices = _scan_recording(fake_env, "mir-standard-drm-devices.umockdev", capsys)
    intel, amd = devices["pci-0000-00-02-0"], devices["pci-0000-01-00-0"]
    assert (intel["driver"], intel["product"], amd["driver"], amd["vendor"]) == (
        "i915", "591b", "amdgpu", "1002")
    assert intel["resource.kubernetes.io/pciBusID"] == "0000:00:02.0"
    assert {n for n in NAMES if intel[n]} == EXPECTED["vaapi-fits/vaapifits-KBL.txt"]
    assert amd["encodeH264"] is True and amd["decodeVP9"] is False
    assert str(intel["vaDriver"]).startswith("Intel iHD driver")


def test_recording_bay_trail(fake_env: FakeGPUs, capsys: pytest.CaptureFixture[str]) -> None:
    # A real Bay Trail NUC recording (8086:0f31) replaying a real Bay Trail i965 dump.
    name = "intel-byt-baytrail-i965-2.4.1.txt"
    dump = VAINFO_DIR / name
    if not dump.is_file():
        pytest.skip(f"{dump} is absent")
    fake_env.add(128, caps_from_vainfo(dump.read_text()) + EXTRA[name])
    devices = _scan_recording(fake_env, "udevdb-only/checkbox-intel-nuc-snappy-udevdb.umockdev",
                              capsys)
    byt = devices["pci-0000-00-02-0"]
    assert byt["product"] == "0f31"
    assert {n for n in NAMES if byt[n]} == EXPECTED[name]
    assert byt["vaDriver"] == "Intel i965 driver for Intel(R) Bay Trail - 2.4.1"


@pytest.mark.parametrize("caps", ["intel-dg2-ihd.txt", "amd-rdna2-mesa.txt",
                                  "nvidia-ampere-nvdec.txt"])
def test_vainfo_round_trip(gpus: FakeGPUs, caps: str) -> None:
    # Stock vainfo, through the same libva, lists what the fake driver answers; its output read
    # back as a dump and replayed gives the agent the same flags.
    import shutil
    import subprocess

    vainfo = shutil.which("vainfo")
    if vainfo is None:
        pytest.fail("vainfo is missing: run setup.d/50-media.sh")
    node = gpus.add(128, CAPS / caps)
    direct = probe_node(node, 5.0, gpus.env)
    listed = subprocess.run([vainfo, "--display", "drm", "--device", node], env=gpus.env,
                            capture_output=True, text=True, timeout=30, check=True)
    assert direct.raw is not None and direct.raw.vendor in listed.stdout
    replay = caps_from_vainfo(listed.stdout)
    original = (CAPS / caps).read_text().splitlines()
    rt = {" ".join(x.split()[:2]): x for x in original if x.startswith("VAProfile")}
    # vainfo lists exactly the file's pairs, as the agent saw them.
    assert {" ".join(x.split()[:2]) for x in replay.splitlines()[1:]} == set(rt)
    assert len(rt) == len(direct.raw.pairs)
    # A plain dump has no RT formats or VPP list: keep the original file's, as EXTRA does above.
    replay = "\n".join(rt.get(x, x) for x in replay.splitlines()) + "\n"
    again = probe_node(gpus.add(129, replay), 5.0, gpus.env)
    assert capability_flags(again.raw) == capability_flags(direct.raw)
