"""The liken-devices commands: scan, deliveries, explain, report, and bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from liken_devices.cli import main
from liken_devices.slices import validate_slice
from tests.support.corpus import recording
from tests.support.sysfs_builder import SysfsBuilder


@pytest.fixture
def machine(tmp_path: Path) -> list[str]:
    b = SysfsBuilder(tmp_path / "sys")
    b.gpu()
    b.hda()
    b.pci("0000:00:14.3", vendor="8086", device="51f0", cls=0x028000)  # wifi, no driver
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "modules.alias").write_text("alias pci:v00008086d000051F0sv*sd*bc*sc*i* iwlwifi\n")
    facts = tmp_path / "facts"
    (facts / "storage" / "root").mkdir(parents=True)
    (facts / "storage" / "root" / "device").write_text("nvme0n1p3\n")
    return ["--sysfs", str(tmp_path / "sys"), "--facts", str(facts), "--modules-dir", str(mods),
            "--hwdata-dir", str(tmp_path / "hw"), "--node", "mini-1"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_scan_prints_a_valid_slice(capsys: pytest.CaptureFixture[str], machine: list[str]) -> None:
    code, out, _ = run(capsys, "scan", *machine)
    assert code == 0
    obj = yaml.safe_load(out)
    assert obj["metadata"]["name"] == "mini-1-liken.sh"
    assert [d["name"] for d in obj["spec"]["devices"]] == [
        "pci-0000-00-02-0", "pci-0000-00-02-0-display", "pci-0000-00-1f-3"]
    assert validate_slice(obj) == []
    code, out_json, _ = run(capsys, "scan", "-o", "json", *machine)
    assert json.loads(out_json) == obj


def test_scan_table_is_for_people(capsys: pytest.CaptureFixture[str], machine: list[str]) -> None:
    _code, out, _ = run(capsys, "scan", "-o", "table", *machine)
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["NAME", "SUBSYSTEM", "DRIVER"]
    assert any(line.startswith("pci-0000-00-02-0 ") and " yes " in line for line in lines)


def test_deliveries_json(capsys: pytest.CaptureFixture[str], machine: list[str]) -> None:
    _code, out, _ = run(capsys, "deliveries", "-o", "json", *machine)
    obj = json.loads(out)
    assert obj["pci-0000-00-02-0"] == [{"path": "/dev/dri/renderD128", "type": "c",
                                        "major": 226, "minor": 128}]
    assert {"path": "/dev/snd/controlC0", "type": "c", "major": 116, "minor": 2} in \
        obj["pci-0000-00-1f-3"]


def test_explain_gives_every_outcome(capsys: pytest.CaptureFixture[str],
                                     machine: list[str]) -> None:
    code, out, _ = run(capsys, "explain", "-o", "json", *machine)
    assert code == 0
    obj = json.loads(out)
    by_addr = {h["address"]: h for h in obj["hardware"]}
    assert by_addr["0000:00:14.3"]["reason"] == "no driver"
    assert by_addr["0000:00:02.0"]["devices"] == ["pci-0000-00-02-0", "pci-0000-00-02-0-display"]
    [u] = obj["unclaimed"]
    assert u["candidates"] == ["iwlwifi"] and "iwlwifi" in u["message"]
    _code, text, _ = run(capsys, "explain", *machine)
    assert "0000:00:14.3 [no driver]: not published: no driver" in text
    assert "declare iwlwifi in spec.modules" in text


def test_explain_names_every_device_a_gpu_became_and_why(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    """rules: sharing.gpu-cec, sharing.gpu-unnamed-kind. An i915 with a DP-CEC adapter and a
    node of no subsystem: explain names each of its devices with what it is, and the node left
    out with why; -o json gives the same per device."""
    b = SysfsBuilder(tmp_path / "sys")
    gpu = b.gpu()
    b.dp_cec(gpu)
    nameless = b.dir(gpu) / "mystery0"
    nameless.mkdir()
    (nameless / "uevent").write_text("MAJOR=250\nMINOR=9\nDEVNAME=mystery0\n")
    (b.root / "dev" / "char" / "250:9").symlink_to("../../devices/pci0000:00/0000:00:02.0/"
                                                    "mystery0")
    args = ["--sysfs", str(b.root), "--facts", str(tmp_path), "--node", "n"]
    code, text, _ = run(capsys, "explain", *args)
    assert code == 0
    [line] = [x for x in text.replace("\n    ", " ").splitlines()
              if x.startswith("pci 0000:00:02.0")]
    assert line == (
        "pci 0000:00:02.0 [i915]: published as pci-0000-00-02-0 (render node, shared), "
        "pci-0000-00-02-0-display (card node, exclusive), pci-0000-00-02-0-cec (CEC adapter, "
        "exclusive), pci-0000-00-02-0-drm-dp-aux-dev (DP AUX channels, exclusive), "
        "pci-0000-00-02-0-i2c-dev (i2c buses, exclusive), pci-0000-00-02-0-input (input nodes, "
        "a kind the GPU split does not name, exclusive); left out /dev/mystery0 (a node of no "
        "subsystem)")
    _, out, _ = run(capsys, "explain", "-o", "json", *args)
    [gpu_json] = [h for h in json.loads(out)["hardware"] if h["address"] == "0000:00:02.0"]
    assert gpu_json["devices"][:2] == ["pci-0000-00-02-0", "pci-0000-00-02-0-display"]
    assert gpu_json["parts"][:3] == ["render node, shared", "card node, exclusive",
                                     "CEC adapter, exclusive"]
    assert len(gpu_json["parts"]) == len(gpu_json["devices"]) == 6


def test_report_is_a_machine_ready_to_uncomment(capsys: pytest.CaptureFixture[str],
                                                machine: list[str]) -> None:
    _code, out, _ = run(capsys, "report", *machine)
    doc = yaml.safe_load(out)
    assert doc["apiVersion"] == "liken.sh/v1alpha1" and doc["kind"] == "Machine"
    assert doc["metadata"]["name"] == "mini-1"
    assert "  # pci 0000:00:14.3" in out and "  # - iwlwifi" in out
    uncommented = out.replace("  # - iwlwifi", "  - iwlwifi")
    assert yaml.safe_load(uncommented)["spec"]["modules"] == ["iwlwifi"]


def test_report_keeps_declared_modules(capsys: pytest.CaptureFixture[str], machine: list[str],
                                       tmp_path: Path) -> None:
    m = tmp_path / "machine.yaml"
    m.write_text("spec:\n  modules: [uhid]\n  serio:\n  - {protocol: pulse8-cec, vendor: '2548',"
                 " product: '1002'}\n")
    _code, out, _ = run(capsys, "report", "--machine", str(m), *machine)
    doc = yaml.safe_load(out)
    assert doc["spec"]["modules"] == ["uhid"]
    assert doc["spec"]["serio"] == [{"protocol": "pulse8-cec", "vendor": "2548",
                                     "product": "1002"}]


@pytest.mark.parametrize(("args", "needle"), [
    (["--sysfs", "/nonexistent-root"], "has no devices/ directory"),
    (["--recording", "/nonexistent.umockdev"], "does not exist"),
])
def test_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                         needle: str) -> None:
    code, out, err = run(capsys, "scan", *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err


@pytest.mark.parametrize("content", [
    "spec: [not, a, mapping]\n",
    "kind: Pod\nspec: {}\n",
    "spec:\n  modules: ['../../evil.ko']\n",
    "spec:\n  modules: ['-o option']\n",
    "spec:\n  serio: [{protocol: other, vendor: '2548', product: '1002'}]\n",
    "spec:\n  serio: [{protocol: pulse8-cec, vendor: 'xyz', product: '1002'}]\n",
    "spec: {modules: [\n",
])
def test_malformed_machine_file_exits_2(capsys: pytest.CaptureFixture[str], machine: list[str],
                                       tmp_path: Path, content: str) -> None:
    m = tmp_path / "bad.yaml"
    m.write_text(content)
    code, out, err = run(capsys, "scan", "--machine", str(m), *machine)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and str(m) in err


def test_recording_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rec = recording("mir-standard-drm-devices.umockdev")
    code, out, _ = run(capsys, "scan", "--recording", str(rec), "--node", "n",
                       "--facts", str(tmp_path))
    names = [d["name"] for d in yaml.safe_load(out)["spec"]["devices"]]
    assert code == 0 and any(n.endswith("-display") for n in names)


def test_console_script_and_help() -> None:
    exe = Path(sys.executable).with_name("liken-devices")
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=True).stdout
    for cmd in ("scan", "deliveries", "explain", "report"):
        assert cmd in out
    out = subprocess.run([str(exe), "scan", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "--recording" in out and "--machine" in out and "-o" in out


def test_explain_yaml_is_the_json_object(capsys: pytest.CaptureFixture[str],
                                         machine: list[str]) -> None:
    _, as_json, _ = run(capsys, "explain", "-o", "json", *machine)
    code, as_yaml, _ = run(capsys, "explain", "-o", "yaml", *machine)
    assert code == 0 and yaml.safe_load(as_yaml) == json.loads(as_json)


def test_version_and_log_lines(machine: list[str]) -> None:
    """--version; every log line has the time and level, or is one JSON object per line."""
    exe = str(Path(sys.executable).with_name("liken-devices"))
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    from liken_devices import __version__

    assert out.split() == ["liken-devices", __version__]
    at = machine.index("--facts")
    args = ["scan", *machine[:at], *machine[at + 2:], "--facts", "/nonexistent-facts"]
    text = subprocess.run([exe, *args], capture_output=True, text=True, check=True).stderr
    [line] = [x for x in text.splitlines() if "storage facts unreadable" in x]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING liken_devices: "
                        r"storage facts unreadable .*", line), line
    err = subprocess.run([exe, *args, "--log-format", "json"], capture_output=True, text=True,
                         check=True).stderr
    records = [json.loads(x) for x in err.splitlines()]
    [rec] = [r for r in records if "storage facts unreadable" in r["msg"]]
    assert rec["level"] == "WARNING" and rec["logger"] == "liken_devices"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", rec["time"])


def _commands(parser: Any) -> list[str]:
    sub = next(a for a in parser._actions if a.dest == "command")
    return list(sub.choices)


def test_the_subcommand_table_names_what_each_module_registers() -> None:
    from liken_devices.cli import SUBCOMMANDS, build_parser

    table = [name for names, _ in SUBCOMMANDS for name in names]
    assert _commands(build_parser()) == table  # every command, in --help's order
    for name in table:
        assert _commands(build_parser(name)) == [name]
    assert _commands(build_parser("no-such-command")) == table  # the error lists them all


def test_a_command_imports_only_its_own_module() -> None:
    probe = ("import sys; from liken_devices.cli import build_parser; build_parser('scan'); "
             "print(sorted(m for m in sys.modules if m.endswith('.cli')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "['liken_devices.cli']"


# -- a typed door per command ---------------------------------------------------------------------

SRC = Path(__file__).resolve().parents[1] / "src" / "liken_devices"


def namespace_readers(src: Path = SRC) -> tuple[set[tuple[str, str]], list[str]]:
    """Every function that takes the parsed arguments (a parameter annotated
    ``argparse.Namespace``), as (module path, function), and every statement that changes them
    (an assignment to one of their attributes, or a ``setattr`` on them)."""
    import ast

    takers: set[tuple[str, str]] = set()
    changes: list[str] = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            names = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
                     if a.annotation is not None and "Namespace" in ast.unparse(a.annotation)}
            if names:
                takers.add((rel, fn.name))
            # ... and what a parse returns here (kubectl liken's main parses its own)
            names |= {t.id for node in ast.walk(fn) if isinstance(node, ast.Assign)
                      and isinstance(node.value, ast.Call)
                      and isinstance(node.value.func, ast.Attribute)
                      and node.value.func.attr in ("parse_args", "parse_known_args")
                      for t in node.targets if isinstance(t, ast.Name)}
            for node in ast.walk(fn):
                targets = (node.targets if isinstance(node, ast.Assign) else
                           [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign)
                           else [])
                changed = [t for t in targets if isinstance(t, ast.Attribute)
                           and isinstance(t.value, ast.Name) and t.value.id in names]
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in ("setattr", "delattr") and node.args
                        and isinstance(node.args[0], ast.Name) and node.args[0].id in names):
                    changed.append(node)
                changes += [f"{rel}:{node.lineno} ({fn.name})" for _ in changed[:1]]
    return takers, changes


def test_only_a_commands_parser_reads_the_parsed_arguments() -> None:
    """Each command's parser (a ``cli.py``) reads its command line once into the command's
    options, typed and immutable; the shared inputs are ``cliargs.Inputs``. No other module takes
    the parsed arguments, and nothing changes them after the parse."""
    takers, changes = namespace_readers()
    assert ("agent/cli.py", "run_options") in takers  # the walk sees the doors
    assert ("cliargs.py", "from_args") in takers
    elsewhere = sorted(f"{m}: {f}" for m, f in takers
                       if Path(m).name != "cli.py" and m != "cliargs.py")
    assert not elsewhere, "functions outside the parsers that take the parsed arguments: " + \
        ", ".join(elsewhere)
    assert not changes, "the parsed arguments changed after the parse: " + ", ".join(changes)


def test_the_options_are_immutable(machine: list[str]) -> None:
    """A command's options cannot be changed once read: a decision made later (the kubelet's
    answer to --seamless-upgrade) is a new value."""
    from liken_devices.agent.cli import run_options
    from liken_devices.cli import build_parser

    opts = run_options(build_parser("run").parse_args(["run", *machine, "--no-api"]))
    with pytest.raises(AttributeError):
        opts.no_api = False  # type: ignore[misc]
    assert opts._replace(no_api=False).no_api is False and opts.no_api is True


# -- another machine's facts are its own (docs/inventory.md) --------------------------------------


def disk_machine(tmp_path: Path) -> Path:
    """A machine with one SATA disk and one partition."""
    b = SysfsBuilder(tmp_path / "other" / "sys")
    sata = b.pci("0000:00:17.0", driver="ahci", cls=0x010601)
    disk = b.node(sata, "block", "sda", 8, 0, block=True, subdir="block")
    b.node(disk, "block", "sda1", 8, 1, block=True)
    return b.root


@pytest.mark.parametrize("command", ["scan", "explain", "report", "deliveries"])
def test_another_machines_facts_are_its_own(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            command: str) -> None:
    """With --sysfs (another machine) the host's facts root is never read: here it says the
    disk backs no role, and yet the recorded machine's disk is withheld, with one plain line."""
    from liken_devices import cliargs

    monkeypatch.setenv("COLUMNS", "1000")  # explain's lines unwrapped
    host = tmp_path / "host-facts"
    (host / "storage").mkdir(parents=True)  # the host's facts: no roles at all
    monkeypatch.setattr(cliargs, "HOST_FACTS", host)
    read: list[str] = []
    real_read = cliargs.Sources.context

    def context(self: Any, *a: Any, **k: Any) -> Any:
        read.append(str(self.facts))
        return real_read(self, *a, **k)

    monkeypatch.setattr(cliargs.Sources, "context", context)
    sysfs = disk_machine(tmp_path)
    code, out, err = run(capsys, command, "--sysfs", str(sysfs), "--node", "n1",
                         "--modules-dir", str(tmp_path), "--hwdata-dir", str(tmp_path))
    assert code == 0
    assert read == ["None"]  # no facts root at all, the host's least of all
    assert "pci-0000-00-17-0" not in out.replace("pci 0000:00:17.0", "")
    assert str(host) not in out + err and "/run/liken/facts" not in out + err
    lines = [x for x in err.splitlines() if x]
    if command == "scan":
        assert lines == ["liken-devices: no facts were given for this machine (another "
                         "machine's facts are its own: --facts DIR), so its disks are withheld"]
    else:
        assert "WARNING" not in err
    if command == "explain":
        assert out.lower().count("no facts were given for this machine") == 2  # disk, summary

    # Given --facts, that machine's facts decide: a spare disk is offered.
    own = tmp_path / "its-facts"
    (own / "storage").mkdir(parents=True)
    code, out, err = run(capsys, "scan", "--sysfs", str(sysfs), "--facts", str(own),
                         "--node", "n1", "--modules-dir", str(tmp_path),
                         "--hwdata-dir", str(tmp_path))
    assert code == 0 and "pci-0000-00-17-0" in out and err == ""


def test_this_hosts_facts_are_read_for_this_host(tmp_path: Path) -> None:
    from liken_devices.cliargs import HOST_FACTS, Inputs, Parser, add_inputs

    p = Parser()
    add_inputs(p)

    def facts(argv: list[str]) -> Path | None:
        return Inputs.from_args(p.parse_args(argv)).facts_dir()

    assert facts([]) == HOST_FACTS == Path("/run/liken/facts")
    assert facts(["--sysfs", "/sys"]) == HOST_FACTS
    assert facts(["--sysfs", str(tmp_path)]) is None
    assert facts(["--recording", str(tmp_path / "r")]) is None
    assert facts(["--recording", "r", "--facts", "f"]) == Path("f")


# -- what a newcomer meets ------------------------------------------------------------------------


def wifi_without_catalog(tmp_path: Path) -> list[str]:
    b = SysfsBuilder(tmp_path / "sys")
    b.pci("0000:00:14.3", vendor="8086", device="51f0", cls=0x028000)  # wifi, no driver
    return ["--sysfs", str(tmp_path / "sys"), "--facts", str(tmp_path), "--modules-dir",
            str(tmp_path / "no-modules"), "--hwdata-dir", str(tmp_path), "--node", "n1"]


def test_a_module_catalog_not_read_is_said_once(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Not "no module on this machine matches it": the truth, that no catalog was read."""
    monkeypatch.setenv("COLUMNS", "1000")
    args = wifi_without_catalog(tmp_path)
    missing = f"{tmp_path / 'no-modules' / 'modules.alias'}: No such file or directory"
    code, out, err = run(capsys, "scan", *args)
    assert err.splitlines() == [
        f"liken-devices: the module catalog was not read ({missing}): no module can be named "
        "for unclaimed hardware (--modules-dir DIR)"]
    code, out, err = run(capsys, "explain", *args)
    assert "no module on this machine" not in out
    assert ("pci 0000:00:14.3 has no driver bound; no module can be named for it: the module "
            "catalog was not read") in out
    assert out.count(missing) == 1
    code, out, err = run(capsys, "report", *args)
    assert "no module on this machine" not in out and out.count(missing) == 1
    assert "  #   no module named: the module catalog was not read" in out
    code, out, _ = run(capsys, "explain", "-o", "json", *args)
    assert json.loads(out)["moduleCatalog"] == {"read": False, "error": missing}
    # With the catalog there, nothing of this is said.
    (tmp_path / "no-modules").mkdir()
    (tmp_path / "no-modules" / "modules.alias").write_text("")
    code, out, err = run(capsys, "explain", *args)
    assert code == 0
    assert "catalog" not in out + err and "no module on this machine matches it" in out


def test_report_with_nothing_unclaimed_says_so(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path / "sys")
    b.gpu()
    code, out, _ = run(capsys, "report", "--sysfs", str(tmp_path / "sys"), "--facts",
                       str(tmp_path), "--modules-dir", str(tmp_path), "--hwdata-dir",
                       str(tmp_path), "--node", "n1")
    assert code == 0
    assert out.splitlines()[-2:] == [
        "  modules:",
        "  # nothing unclaimed: every piece of hardware has a driver or needs none"]
    assert yaml.safe_load(out)["kind"] == "Machine"


def test_explain_of_a_whole_usb_device_a_program_holds(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A line for the held whole device, and its interface's line says nothing twice."""
    monkeypatch.setenv("COLUMNS", "1000")
    b = SysfsBuilder(tmp_path / "sys")
    usb = b.usb_device("1-3", devnum=5)
    b.usb_interface(usb, "1.0", driver="usbfs", cls=0x0B)
    code, out, _ = run(capsys, "explain", "--sysfs", str(tmp_path / "sys"), "--facts",
                       str(tmp_path), "--modules-dir", str(tmp_path), "--hwdata-dir",
                       str(tmp_path))
    assert code == 0
    lines = out.splitlines()
    assert "usb 1-3 [usb]: not published: held by a program through usbfs (1-3:1.0 held; "\
        "published whole again when the program lets go)" in lines
    assert "usb 1-3:1.0 [usbfs]: not published: held by a program through usbfs (until the "\
        "program lets go)" in lines
    for line in lines:  # no phrase of four words or more said twice in one line
        words = line.replace("(", " ").replace(")", " ").split()
        grams = [" ".join(words[i:i + 4]) for i in range(len(words) - 3)]
        assert len(grams) == len(set(grams)), line


def test_explain_lines_fit_the_terminal(capsys: pytest.CaptureFixture[str], machine: list[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = run(capsys, "explain", *machine)
    assert code == 0 and max(len(x) for x in out.splitlines()) <= 58
    assert any(x.startswith("    ") for x in out.splitlines())  # a long one continued


def test_a_sysfs_name_too_long_is_one_line_not_a_traceback() -> None:
    # Path.is_dir lets ENAMETOOLONG through; found by tests/test_cli_fuzz.py.
    done = subprocess.run([sys.executable, "-m", "liken_devices.cli", "scan", "--sysfs",
                           "x" * 5000], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
