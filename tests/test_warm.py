"""The warm launcher (tests/warm.py): a run forked from it is the run a fresh process gives."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import TINY_RUN_ARGS
from warm import ROOT, Launcher, LauncherError


def timed(key: str) -> bool:
    """A metric that differs between two runs of the same command: how long a part took, or its rate."""
    return key.startswith("t_") or key.endswith("_tok_s")


def lines(path) -> list[str]:
    return path.read_text().splitlines()


@pytest.mark.slow
def test_a_forked_run_is_the_process_run(warm, tiny_run, tmp_path):
    """The first step of the suite's shared tiny run (a process) and of the same command forked from
    the launcher: byte-identical rollouts, and the same metrics but for the timings."""
    args = [a for a in TINY_RUN_ARGS if not a.startswith("max_steps=")]
    result = warm.run(["credo.py", *args, "max_steps=1", f"out_dir={tmp_path}"])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert f"[credo] run written to {tmp_path / 'credo'}" in result.stdout
    forked, process = tmp_path / "credo", tiny_run
    assert lines(forked / "rollouts" / "step_000000.jsonl") == lines(process / "rollouts" / "step_000000.jsonl")
    mine, theirs = (json.loads(lines(run / "metrics.jsonl")[0]) for run in (forked, process))
    assert mine.keys() == theirs.keys()
    untimed = [key for key in mine if not timed(key)]
    assert len(untimed) > 20
    assert {key: mine[key] for key in untimed} == {key: theirs[key] for key in untimed}


def test_a_refused_argument_is_the_processs_exit_and_line(warm):
    argv = ["credo.py", "tiny", "nosuchkey=1"]
    process = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    forked = warm.run(argv)
    assert (forked.returncode, forked.stdout, forked.stderr) == (process.returncode, process.stdout, process.stderr)
    assert forked.returncode == 1 and "unknown config key 'nosuchkey'" in forked.stderr


def test_runs_spawned_from_many_threads_each_get_their_own_child(warm, tmp_path):
    """worlds/toy_tables.py starts its stages from a thread pool: each thread's Child is its own run
    (its pid, its exit status, its log), whatever the others do meanwhile: a thread waiting on its run
    must not take the reply that answers another thread's spawn. Half the runs fail on a key
    named for their thread (exit 1), half print the config's help (exit 0)."""
    results, errors = {}, []

    def one(i: int) -> None:
        try:
            argv = ["credo.py", "tiny", f"nosuchkey{i}=1"] if i % 2 else ["credo.py", "--help-config"]
            time.sleep(0.25 * i)  # staggered: most spawns come while other threads wait on their runs
            child = warm.spawn(argv, tmp_path / f"log{i}")
            results[i] = (child.pid, child.wait(timeout=120))
        except BaseException as error:  # noqa: BLE001  reported below, with the thread it happened in
            errors.append((i, error))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == [] and sorted(results) == list(range(12))
    assert len({pid for pid, _ in results.values()}) == 12
    assert {i: code for i, (_, code) in results.items()} == {i: i % 2 for i in range(12)}
    for i in range(1, 12, 2):
        assert f"nosuchkey{i}" in (tmp_path / f"log{i}").read_text()


def test_a_killed_run_reports_its_signal(warm, tmp_path):
    child = warm.spawn(["credo.py", "tiny", f"out_dir={tmp_path}"], tmp_path / "log")
    child.kill()
    assert child.wait(timeout=60) == -9 and child.returncode == -9


def test_a_run_that_outlives_its_timeout_is_killed(warm, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run(["credo.py", "tiny", f"out_dir={tmp_path}"], timeout=0.5)
    # the killed child's status arrived, and the launcher forks the next run
    assert warm.run(["credo.py", "tiny", "nosuchkey=1"]).returncode == 1


def test_an_environment_the_imports_did_not_see_is_refused(warm):
    launcher = warm.of(dict(os.environ))
    result = launcher.run(["credo.py", "--help"], ROOT, {**os.environ, "CREDO_VERBOSE": "1"}, timeout=60)
    assert result.returncode == 2
    assert result.stderr == "warm launcher: CREDO_VERBOSE differ from the launcher's: start a process\n"


def test_only_the_checkouts_credo_and_eval_are_forked(warm, tmp_path):
    with pytest.raises(LauncherError, match="runs credo.py, eval.py, not '-c'"):
        warm.spawn(["-c", "print(1)"], tmp_path / "log")
    launcher = warm.of(dict(os.environ))
    with pytest.raises(LauncherError, match=f"not of {tmp_path}"):
        launcher.spawn(["credo.py", "--help"], tmp_path, dict(os.environ), tmp_path / "log")


def test_a_launcher_started_by_a_thread_that_has_ended_serves_on():
    """A launcher outlives the thread that started it (worlds/toy_tables.py's runs start it from a pool's
    thread): it forks a run after that thread is gone, as the kernel sees it, and ends when closed."""
    started = []
    thread = threading.Thread(target=lambda: started.append(Launcher.start()))
    thread.start()
    thread.join()
    deadline = time.monotonic() + 60
    while Path(f"/proc/self/task/{thread.native_id}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not Path(f"/proc/self/task/{thread.native_id}").exists(), "the thread never ended"
    (launcher,) = started
    result = launcher.run(["credo.py", "tiny", "nosuchkey=1"], ROOT, dict(os.environ), timeout=120)
    assert result.returncode == 1 and "unknown config key 'nosuchkey'" in result.stderr
    launcher.close()
    assert launcher.proc.returncode == 0


PARENT = """
import os, sys, time
sys.path.insert(0, {tests!r})
from warm import Launcher, ROOT
launcher = Launcher.start()
child = launcher.spawn(["credo.py", "tiny", "out_dir=" + {out!r}], ROOT, dict(os.environ), {log!r})
print(launcher.proc.pid, child.pid, flush=True)
time.sleep(600)
"""


def gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie not yet reaped by its parent counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_launcher_whose_test_process_is_killed_ends_with_its_runs(tmp_path):
    """SIGKILL to the test process: its launcher and the run it forked end too (no orphan run)."""
    code = PARENT.format(tests=str(ROOT / "tests"), out=str(tmp_path), log=str(tmp_path / "log"))
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        launcher_pid, child_pid = map(int, parent.stdout.readline().split())
        parent.kill()
        parent.wait(60)
        deadline = time.monotonic() + 60
        while not (gone(launcher_pid) and gone(child_pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(launcher_pid) and gone(child_pid)
    finally:
        parent.kill()
        parent.wait(60)
        parent.stdout.close()
