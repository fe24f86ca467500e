"""The shared CLI inputs: one rule for the node's name, validated with the reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liken_devices import cli
from liken_devices.cliargs import InputError, check_node_name, dump, node_name
from liken_devices.media import cli as media_cli
from tests.support.hostile import assert_fails_closed, examples, run_cli
from tests.support.sysfs_builder import SysfsBuilder


def test_one_rule_option_then_environment_then_host() -> None:
    env = {"NODE_NAME": "from-env"}
    assert node_name("given", env, "host") == "given"
    assert node_name(None, env, "host") == "from-env"
    assert node_name(None, {}, "Mini-PC.example.org\n") == "mini-pc.example.org"
    assert node_name(None, {"NODE_NAME": ""}, "host") == "host"


@pytest.mark.parametrize(("name", "reason"), [
    ("mini_pc", "contains '_'"),
    ("Mini", "upper-case"),
    ("-mini", "must start and end with a letter or digit"),
    ("mini.", "empty label"),
    ("a" * 64, "longer than 63"),
    ("a." * 130, "characters"),
    ("", "empty"),
    ("mini\n", "contains '\\n'"),
    ("mini pc", "contains ' '"),
])
def test_a_name_that_cannot_name_a_node_says_why(name: str, reason: str) -> None:
    why = check_node_name(name)
    assert why is not None and reason in why


def test_good_names() -> None:
    for name in ("mini-1", "node.example.org", "a", "1", "x" * 63):
        assert check_node_name(name) is None


def test_the_slice_name_must_fit() -> None:
    long = ".".join(["a" * 60] * 4)  # 243 characters: a Node, but <node>-media.liken.sh is not
    assert check_node_name(long) is None
    assert "room for the ResourceSlice" in str(check_node_name(long, "media.liken.sh"))


def test_a_hostname_with_underscore_is_bad_input(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(InputError, match=r"'_'.*DNS subdomain"):
        node_name(None, hostname="build_host")


def _tree(tmp_path: Path) -> str:
    b = SysfsBuilder(tmp_path / "sys")
    b.gpu()
    return str(tmp_path / "sys")


def test_scan_with_a_bad_node_exits_2_with_one_line(tmp_path: Path) -> None:
    sysfs = _tree(tmp_path)
    for argv in (["-m", "liken_devices.cli", "scan", "--sysfs", sysfs, "--node", "my_host"],
                 ["-c", "import sys; from liken_devices.media.cli import main; "
                        "sys.exit(main(sys.argv[1:]))", "scan", "--sysfs", sysfs,
                  "--node", "my_host"]):
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "'_'" in lines[0], done.stderr
        assert "Traceback" not in done.stderr


def test_every_command_takes_the_shared_inputs() -> None:
    parser = cli.build_parser()
    for argv in (["scan"], ["deliveries"], ["explain"], ["report"], ["plugin"], ["claims"],
                 ["run"], ["machine", "apply"]):
        args = parser.parse_args([*argv, "--sysfs", "/x", "--node", "n", "--machine", "/m"])
        assert (args.sysfs, args.node, args.machine) == (Path("/x"), "n", Path("/m"))


def test_media_takes_the_same_node_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    args = media_cli.build_parser().parse_args(["scan"])
    from liken_devices.cliargs import Inputs

    assert Inputs.from_args(args).node_name() == "from-env"


@pytest.mark.parametrize("argv", [["scan", "--node"], ["bogus"], ["scan", "-o", "xml"],
                                  ["machine", "apply", "--nope"], []])
def test_a_usage_error_is_one_line_and_exit_2(argv: list[str]) -> None:
    out = run_cli(argv)
    assert_fails_closed(out, allowed=(2,))
    assert out.lines[0].startswith("liken-devices") and "--help" in out.lines[0]


@pytest.mark.fuzz
@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet=st.sampled_from("abz09-._A_ \n\u2028é"), max_size=80)
       | st.text(max_size=300))
def test_an_accepted_node_name_makes_a_valid_slice_name(name: str) -> None:
    from liken_devices.inventory.limits import MEDIA_DRIVER as MEDIA
    from liken_devices.slices.validate import is_dns_subdomain

    for driver in ("liken.sh", MEDIA):
        # The rule both ways (a Node's name is a DNS subdomain of labels of at most 63
        # characters, short enough for the slice's name <node>-<driver>), judged by the slice
        # validator and the numbers, not by the check itself.
        rule = is_dns_subdomain(name) and len(name) <= 253 - len(f"-{driver}") \
            and all(len(label) <= 63 for label in name.split("."))
        assert (check_node_name(name, driver) is None) == rule, (name, driver)
        if rule:
            assert is_dns_subdomain(f"{name}-{driver}")
        else:
            with pytest.raises(InputError):
                node_name(name, {}, "h", driver)


def test_liken_media_usage_errors_are_one_line_too() -> None:
    from liken_devices.media.cli import main as media_main

    for argv in (["scan", "--timeout", "-1"], ["nope"], ["run", "--node"]):
        out = run_cli(argv, media_main)
        assert_fails_closed(out, allowed=(2,))
        assert out.lines[0].startswith("liken-media")


@pytest.mark.parametrize("root", ["\r", "a\nb", "x\u2028y", "\x1b[31mred"])
def test_an_error_naming_a_hostile_path_stays_one_line(root: str) -> None:
    """Found by the fuzz suite: a path with a carriage return made the error two lines."""
    out = run_cli(["scan", "--sysfs", root, "--node", "n"])
    assert_fails_closed(out, allowed=(2,))
    assert "\x1b" not in out.stderr
    out = run_cli(["scan", "-o", root])
    assert_fails_closed(out, allowed=(2,))


@pytest.mark.parametrize("value", ["0249", "1e10", "089", "0x1f", "1_000", "12:30", ".5", "-7",
                                   "yes", "On", "NULL", "~", "true"])
def test_yaml_quotes_strings_that_a_reader_takes_for_another_type(value: str) -> None:
    # kubectl reads `0249` (a USB product ID) and `1e10` as numbers where PyYAML leaves them
    # plain; the real API server then refuses the slice (seen with kubectl apply).
    assert dump({"product": value}, "yaml") == f'product: "{value}"\n'


# Controls and line separators are PyYAML's own business (it folds some of them); the property is
# about the scalars' types.
@given(st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=20))
def test_yaml_text_reads_back_as_the_same_strings(value: str) -> None:
    import yaml

    assert yaml.safe_load(dump({"v": value, "w": [value]}, "yaml")) == {"v": value, "w": [value]}
    # Anything Go or Python would parse as a number is quoted (a plain model of the rule).
    try:
        float(value.replace("_", ""))
        number = value.strip() == value and value != ""
    except ValueError:
        number = False
    if number and value.isascii():
        assert '"' in dump(value, "yaml") or "'" in dump(value, "yaml")
