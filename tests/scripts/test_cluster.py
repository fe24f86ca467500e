"""The test cluster's script (scripts/cluster/cluster.py) signals only its own processes and puts
back only the kernel settings it changed.

A pid in `pids.json` is a number the kernel hands out again once its process is gone (pid_max is
32768 here), so `down`, `restart` and `up` after a killed run signal a recorded pid only while
the record still names the same process: its start time (/proc/PID/stat field 22) on this boot,
the cluster's namespaces, the cluster's cgroup. The pure parts (the stat parser, the decision)
are tested here over made-up /proc text; `down` and `restart` run for real over a planted state
directory, no cluster needed, against a `sleep` of the test's own that plays a reused pid. The
same planting against a running cluster, and `up` after a killed run, are in
tests/cluster/test_host.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "cluster" / "cluster.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("liken_cluster_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


cluster = load()


def stat_line(pid: int, comm: str, state: str, start: int) -> str:
    # Fields 3 to 52 of /proc/PID/stat (proc(5)); field 22 is the start time in clock ticks
    # since boot.
    rest = [state, *[str(n) for n in range(4, 22)], str(start), *["0"] * 30]
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


# --- the stat parser -----------------------------------------------------------------------------

@given(comm=st.text(st.characters(blacklist_characters="\x00"), max_size=16),
       state=st.sampled_from("RSDZTtXI"), start=st.integers(0, 1 << 63))
def test_the_start_time_is_read_after_the_last_parenthesis(comm: str, state: str,
                                                           start: int) -> None:
    # A process names itself (prctl PR_SET_NAME, or its file name): ") R 1 2" is a valid comm
    # and must not shift the fields that follow it.
    assert cluster.parse_stat(stat_line(4242, comm, state, start)) == (state, start)


@pytest.mark.parametrize("text", ["", "4242", "4242 (sleep", "4242 (sleep) S 1 2 3",
                                  "4242 (sleep) S " + "x " * 30])
def test_a_stat_line_it_cannot_read_is_no_process(text: str) -> None:
    assert cluster.parse_stat(text) is None


# --- the cgroup ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "inside"), [
    ("4:memory:/liken-k8s\n0::/\n", True),
    ("4:memory:/\n0::/liken-k8s/kubepods/burstable/pod1\n", True),
    ("4:memory:/process_api/abc\n0::/user.slice\n", False),
    ("4:memory:/liken-k8s-other\n", False),      # a name that begins like ours is not ours
    ("4:memory:/tenant/liken-k8s\n", False),     # nor ours nested under someone else's
    ("", False),
])
def test_the_cluster_cgroup_is_its_own_top_level_directory(text: str, inside: bool) -> None:
    assert cluster.in_cgroup(text, "liken-k8s") is inside


# --- the decision --------------------------------------------------------------------------------

RECORD = {"pid": 4242, "start": 777, "boot": "b-1", "net": 11, "mnt": 12}
SEEN = cluster.Seen(state="S", start=777, boot="b-1", net=11, mnt=12, in_cgroup=True)


def test_a_record_that_still_names_its_process_may_be_signalled() -> None:
    assert cluster.mismatch(RECORD, SEEN) is None


@pytest.mark.parametrize(("seen", "why"), [
    (None, "gone"),
    (SEEN._replace(state="Z"), "gone"),
    (SEEN._replace(start=778), "started at"),           # the pid was handed out again
    (SEEN._replace(boot="b-2"), "another boot"),        # the same start time after a reboot
    (SEEN._replace(net=99), "namespace"),
    (SEEN._replace(mnt=99), "namespace"),
    (SEEN._replace(in_cgroup=False), "cgroup"),         # right time, outside the cluster
])
def test_a_record_that_names_another_process_is_never_signalled(seen: object, why: str) -> None:
    reason = cluster.mismatch(RECORD, seen)
    assert reason is not None and why in reason


@pytest.mark.parametrize("record", [4242, "4242", {"pid": 4242}, {"pid": 4242, "start": "x"},
                                    {"pid": True, "start": 777, "boot": "b-1", "net": 11,
                                     "mnt": 12}, None, []])
def test_a_record_without_its_start_time_is_never_signalled(record: object) -> None:
    # pids.json of an older cluster.py holds bare numbers: nothing proves such a pid is still
    # the component, so it is left alone (the namespace and cgroup sweep still ends the
    # cluster's own processes).
    assert cluster.mismatch(record, SEEN) is not None


# --- down and restart over a planted state directory -------------------------------------------

@pytest.fixture
def reused() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the test's own, outside the cluster's cgroup and namespaces: the job that got
    a dead component's pid."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def start_time(pid: int) -> int:
    # Read here without the script's parser: field 22, the 20th after the comm's ")".
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def ns(pid: int, kind: str) -> int:
    return os.stat(f"/proc/{pid}/ns/{kind}").st_ino


def records(pid: int) -> dict[str, object]:
    """The planted records, one per way a recorded pid can name another process."""
    return {
        # An older cluster.py's pids.json: the bare number.
        "old-format": pid,
        # The pid handed out again: another start time.
        "another-start": {"pid": pid, "start": start_time(pid) + 1, "boot": boot_id(),
                          "net": ns(pid, "net"), "mnt": ns(pid, "mnt")},
        # Its own start time and namespaces, but not in the cluster's cgroup.
        "outside-cgroup": {"pid": pid, "start": start_time(pid), "boot": boot_id(),
                           "net": ns(pid, "net"), "mnt": ns(pid, "mnt")},
    }


def plant(tmp_path: Path, name: str, record: object) -> dict[str, str]:
    """A state directory as a killed run leaves it, with one component's record; the
    environment that points the script at it (and at a cgroup root and lock of the test's own,
    so that a real cluster on this machine is not touched)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "pids.json").write_text(json.dumps({name: record}))
    (state / "commands.json").write_text(json.dumps({name: ["true"]}))
    (state / "host.json").write_text(json.dumps({"sysctls": {}, "set": {}, "created": []}))
    (state / "cluster.json").write_text(json.dumps({"kubernetes": "1.34.4"}))
    (tmp_path / "cgroup").mkdir()
    return {**os.environ, "LIKEN_K8S_STATE": str(state),
            "LIKEN_K8S_CGROUP_ROOT": str(tmp_path / "cgroup"),
            "LIKEN_K8S_LOCK": str(tmp_path / "lock"), "LIKEN_K8S_SYSCTL_ROOT": str(tmp_path)}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("kind", ["old-format", "another-start", "outside-cgroup"])
def test_down_spares_a_reused_pid(tmp_path: Path, reused: subprocess.Popen[bytes],
                                  kind: str) -> None:
    env = plant(tmp_path, "kubelet", records(reused.pid)[kind])
    done = run(env, "down")
    assert done.returncode == 0, done.stderr
    assert reused.poll() is None, f"down signalled pid {reused.pid}, not the kubelet's"
    assert not (tmp_path / "state").exists()
    # The operator is told which pid was left alone and why.
    assert f"pid {reused.pid}" in done.stderr and "not signalled" in done.stderr, done.stderr


@pytest.mark.parametrize("kind", ["old-format", "another-start", "outside-cgroup"])
def test_restart_spares_a_reused_pid(tmp_path: Path, reused: subprocess.Popen[bytes],
                                     kind: str) -> None:
    env = plant(tmp_path, "kubelet", records(reused.pid)[kind])
    done = run(env, "restart", "kubelet")
    assert reused.poll() is None, f"restart signalled pid {reused.pid}, not the kubelet's"
    assert f"pid {reused.pid}" in done.stderr and "not signalled" in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    if kind == "old-format":
        # The component may still run under a pid nothing records: a second one is not
        # started beside it, and the operator is told the way out.
        assert "down, then up" in done.stderr, done.stderr
    else:
        # No namespaces to start it in: the cluster is not running, and restart says so.
        assert "not running" in done.stderr, done.stderr


# --- kernel settings -----------------------------------------------------------------------------

def tree(root: Path, values: dict[str, str]) -> None:
    for key, value in values.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)


def test_down_puts_back_only_what_the_cluster_set_and_still_holds(tmp_path: Path) -> None:
    # Before up, what up left (the kubelet's tunables), and what another program set meanwhile:
    # its hugepages, and kernel.panic after the kubelet's.
    before = {"vm/overcommit_memory": "0\n", "kernel/panic": "0\n",
              "kernel/panic_on_oops": "0\n", "vm/nr_hugepages": "0\n",
              "kernel/hostname": "host\n"}
    tree(tmp_path, before)
    tree(tmp_path, {"vm/overcommit_memory": "1\n", "kernel/panic": "10\n",
                    "kernel/panic_on_oops": "1\n"})
    set_by_cluster = cluster.changed(before, cluster.sysctls(tmp_path))
    assert set_by_cluster == {"vm/overcommit_memory": "1\n", "kernel/panic": "10\n",
                              "kernel/panic_on_oops": "1\n"}
    tree(tmp_path, {"kernel/panic": "30\n", "vm/nr_hugepages": "4\n",
                    "kernel/hostname": "renamed\n"})
    cluster.restore_sysctls({"sysctls": before, "set": set_by_cluster}, tmp_path)
    assert cluster.sysctls(tmp_path) == {
        "vm/overcommit_memory": "0\n", "kernel/panic_on_oops": "0\n",  # the cluster's: back
        "kernel/panic": "30\n",                  # another program's value after the cluster's
        "vm/nr_hugepages": "4\n", "kernel/hostname": "renamed\n",  # never the cluster's
    }


def test_a_killed_up_that_recorded_no_changes_puts_nothing_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # host.json without "set" (up killed before the node was Ready, or an older cluster.py):
    # nothing says which change was the cluster's, so none is undone; each is named.
    before = {"kernel/panic": "0\n", "vm/nr_hugepages": "0\n"}
    tree(tmp_path, {"kernel/panic": "10\n", "vm/nr_hugepages": "0\n"})
    cluster.restore_sysctls({"sysctls": before}, tmp_path)
    assert cluster.sysctls(tmp_path) == {"kernel/panic": "10\n", "vm/nr_hugepages": "0\n"}
    assert "kernel.panic is 10, was 0" in capsys.readouterr().err


def test_a_signal_goes_only_where_the_check_after_the_pidfd_holds(
        reused: subprocess.Popen[bytes]) -> None:
    seen: list[object] = []
    assert not cluster.signal_if(reused.pid, 15, lambda s: seen.append(s) or False)
    assert reused.poll() is None
    # The check saw the process the pidfd names: this sleep, as it is now.
    assert isinstance(seen[0], cluster.Seen) and seen[0].start == start_time(reused.pid)
    assert cluster.signal_if(reused.pid, 15, lambda s: True)
    assert reused.wait(10) == -15


# --- what a failed run keeps -----------------------------------------------------------------

def test_logs_keeps_the_end_of_each_log_and_no_file_a_link_names(tmp_path: Path) -> None:
    # What `down` would remove: the components' logs and the audit log, the pods' logs.
    env = plant(tmp_path, "kubelet", 1)
    state = tmp_path / "state"
    tree(state / "logs", {"kubelet.log": "started\n", "audit.log": "{}\n"})
    pod = state / "roots" / "var" / "log" / "pods" / "liken-system_agent-x_uid" / "agent"
    tree(pod, {"0.log": "a" * 100 + "the failure\n"})
    secret = tmp_path / "secret"
    secret.write_text("not a log\n")
    (pod / "1.log").symlink_to(secret)
    kept = tmp_path / "kept"
    done = run({**env, "LIKEN_K8S_KEEP_BYTES": "40"}, "logs", str(kept))
    assert done.returncode == 0, done.stderr
    assert (kept / "components" / "kubelet.log").read_text() == "started\n"
    assert (kept / "components" / "audit.log").read_text() == "{}\n"
    pod_log = (kept / "pods" / "liken-system_agent-x_uid" / "agent" / "0.log").read_text()
    assert pod_log.endswith("a" * 28 + "the failure\n") and "first 72 bytes left out" in pod_log
    assert not (kept / "pods" / "liken-system_agent-x_uid" / "agent" / "1.log").exists()
    assert str(kept) in done.stderr


def test_logs_without_a_cluster_says_so_in_one_line(tmp_path: Path) -> None:
    done = run({**os.environ, "LIKEN_K8S_STATE": str(tmp_path / "none")}, "logs",
               str(tmp_path / "kept"))
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "no cluster state" in done.stderr
