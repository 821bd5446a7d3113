"""mathpool.py: the math worker pool's behaviour (order, reuse, threads, deadlines,
killing and replacing workers, shutdown, warm-up), driven through verifier.py."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sandbox_cases import SLACK_S, many_descriptors

import verifier
from grading import mathpool

pytestmark = pytest.mark.usefixtures("no_leftovers", "close_math_pool")


def test_verify_math_batch_keeps_order_and_reuses_pool():
    pairs = [(rf"\boxed{{{i}}}", str(i if i % 3 else i + 1)) for i in range(12)]
    first = verifier.verify_math_batch(pairs, workers=2, progress=True)
    pids = sorted(worker.proc.pid for worker in mathpool._POOL.workers)
    second = verifier.verify_math_batch(pairs, workers=2)
    assert first == second == [i % 3 != 0 for i in range(12)]
    assert sorted(worker.proc.pid for worker in mathpool._POOL.workers) == pids


def test_verify_math_works_off_the_main_thread():
    results = []
    thread = threading.Thread(target=lambda: results.append(verifier.verify_math(r"\boxed{4}", "4")))
    thread.start()
    thread.join(60)
    assert results == [True]


def _warm(workers):
    """A pool of ``workers`` that are all ready, so that a bound measured next holds the item's
    deadline and not a worker's start-up (seconds of imports, more on a loaded machine). A batch
    reads the ready messages of the workers it waits on; one per round until all have spoken."""
    while not (
        mathpool._POOL is not None
        and mathpool._POOL.size == workers
        and all(worker.ready for worker in mathpool._POOL.workers)
    ):
        verifier.verify_math_batch([(r"\boxed{1}", "1")] * workers, workers=workers)
        time.sleep(0.05)


def test_power_tower_returns_within_bound():
    _warm(2)
    start = time.monotonic()
    verdicts = verifier.verify_math_batch(
        [(r"\boxed{2^{2^{2^{2^{2^{2}}}}}}", "5"), (r"\boxed{9^{9^{9^{9^{9}}}}}", "5")], workers=2, timeout_s=3.0
    )
    assert verdicts == [False, False]
    assert time.monotonic() - start < 3.0 + SLACK_S


def test_stuck_worker_is_killed_and_replaced():
    _warm(1)
    old_pid = mathpool._POOL.workers[0].proc.pid
    start = time.monotonic()
    # math-verify's alarms are whole seconds (1 s here); the parent's 0.5 s wall clock fires first.
    assert verifier.verify_math_batch([(r"\boxed{2^{2^{2^{2^{2^{2}}}}}}", "5")], timeout_s=0.5) == [False]
    assert time.monotonic() - start < 0.5 + SLACK_S
    assert mathpool._POOL.workers[0].proc.pid != old_pid
    with pytest.raises(ProcessLookupError):
        os.kill(old_pid, 0)
    assert verifier.verify_math_batch([(r"\boxed{7}", "7")]) == [True]


def test_an_item_whose_worker_dies_fails_with_that_reason():
    """A worker that dies while it grades an item costs that item only, and says so: its verdict
    is a grading error naming the dead worker, not a timeout, and the pool grades on. The worker is
    stopped (SIGSTOP) before it is given the item, so it dies holding it however loaded the machine
    is: it can neither grade the item first nor be killed before it has one (``worker.item`` is set
    once the request is in the pipe)."""
    verifier.verify_math_batch([(r"\boxed{1}", "1")], workers=1)
    verdicts = []
    worker = mathpool._POOL.workers[0]
    os.kill(worker.proc.pid, signal.SIGSTOP)
    thread = threading.Thread(
        target=lambda: verdicts.extend(verifier.grade([r"\boxed{5}"], ["5"], "math", workers=1, timeout_s=30.0))
    )
    thread.start()
    deadline = time.monotonic() + 60
    while worker.item is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.item is not None, "the pool never handed the item to its worker"
    os.kill(worker.proc.pid, signal.SIGKILL)
    thread.join(60)
    assert verdicts == [verifier.Verdict(passed=False, reason="error: the math worker died")]
    assert verdicts[0].grading_error
    assert verifier.verify_math_batch([(r"\boxed{7}", "7")], workers=1) == [True]


def test_a_worker_that_died_idle_costs_no_item():
    """A worker that is gone before it is handed an item costs no item: the write to its pipe
    fails, the item goes back to the queue, and the worker's replacement grades it. The worker is
    killed and reaped between two batches, so it is dead, not dying, when the item is sent."""
    verifier.verify_math_batch([(r"\boxed{1}", "1")], workers=1)
    worker = mathpool._POOL.workers[0]
    worker.proc.kill()
    worker.proc.wait(60)
    verdicts = verifier.grade([r"\boxed{5}"], ["5"], "math", workers=1, timeout_s=30.0)
    assert verdicts == [verifier.Verdict(passed=True, reason="correct")]
    assert mathpool._POOL.workers[0] is not worker


def _wait_until_the_thread_is_gone(thread):
    """Until the kernel has released ``thread`` (its /proc/self/task entry goes after the kernel
    has signalled the children it started): ``join`` returns when Python is done with it, before."""
    deadline = time.monotonic() + 60
    while Path(f"/proc/self/task/{thread.native_id}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not Path(f"/proc/self/task/{thread.native_id}").exists(), "the grading thread never ended"


def test_workers_started_while_a_thread_grades_outlive_that_thread():
    """A trainer may grade from any thread, one that ends with its batch. The kernel kills a worker
    when the thread that started it ends (PR_SET_PDEATHSIG), so a pool whose workers a grading
    thread started lost them all with it: idle ones were replaced at the next batch, and one still
    starting made that batch raise "a math worker exited during start-up" (the suite's flaky math
    tests, after the module's threaded tests on the same xdist worker). Every worker is started by
    the pool's own thread: the same workers, alive, grade the next batch."""
    verifier.close()
    thread = threading.Thread(target=lambda: verifier.verify_math_batch([(r"\boxed{1}", "1")] * 4, workers=2))
    thread.start()
    thread.join(120)
    _wait_until_the_thread_is_gone(thread)
    pids = [worker.proc.pid for worker in mathpool._POOL.workers]
    assert [worker.proc.poll() for worker in mathpool._POOL.workers] == [None, None]  # alive (one may still start)
    assert verifier.verify_math_batch([(r"\boxed{4}", "4"), (r"\boxed{5}", "4")], workers=2) == [True, False]
    assert [worker.proc.pid for worker in mathpool._POOL.workers] == pids


@pytest.mark.parametrize(
    "start_up, says",
    [
        (
            "import sys; sys.stderr.write('math-verify missing'); sys.exit(3)",
            "a math worker exited with status 3 during start-up; its stderr ends: math-verify missing",
        ),
        (
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
            "a math worker was killed by SIGKILL during start-up, saying nothing",
        ),
    ],
)
def test_a_worker_that_exits_during_start_up_is_reported_with_its_status_and_stderr(start_up, says):
    verifier.close()
    with pytest.raises(RuntimeError) as failure:
        mathpool.run_batch([(r"\boxed{1}", "1")], 1, 10.0, False, (sys.executable, "-c", start_up))
    assert str(failure.value) == says
    assert mathpool._POOL is None
    assert verifier.verify_math_batch([(r"\boxed{7}", "7")], workers=1) == [True]


def test_close_stops_workers_and_pool_restarts():
    verifier.verify_math_batch([(r"\boxed{1}", "1")], workers=2)
    pids = [worker.proc.pid for worker in mathpool._POOL.workers]
    spawner = [thread for thread in threading.enumerate() if thread.name.startswith("credo-math-spawner")]
    verifier.close()
    assert mathpool._POOL is None
    assert spawner and not any(thread.is_alive() for thread in spawner)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert verifier.verify_math(r"\boxed{1}", "1") is True


def test_math_worker_warms_up_before_ready():
    """The first grade (sympy, the LaTeX parser, math-verify's regex caches) happens before
    the worker says ready, so a cold start never eats an item's alarm budget."""
    code = (
        "import os, sys, verifier\n"
        "sys.stderr = os.fdopen(os.dup(2), 'w')  # serve points fd 2 at /dev/null once it is ready\n"
        "assert verifier._math_worker_main(os.getppid()) == 0\n"
        "from math_verify.parser import lazy_latex_regex\n"
        "sys.stderr.write(str(lazy_latex_regex.cache_info().currsize))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=Path(verifier.__file__).parent,
        timeout=300,
        check=True,
    )
    assert done.stdout == b'{"ready": true}\n'
    assert int(done.stderr.decode().strip().splitlines()[-1]) > 0


def test_math_worker_imports_neither_torch_nor_the_sandbox_child():
    """A worker (this is what `python verifier.py --math-worker PID` runs) grades with
    math-verify and the standard library only: no torch, no code that runs in a sandbox."""
    code = (
        "import os, sys, verifier\n"
        "sys.stderr = os.fdopen(os.dup(2), 'w')  # serve points fd 2 at /dev/null once it is ready\n"
        "assert verifier._math_worker_main(os.getppid()) == 0\n"
        "heavy = ('torch', 'transformers', 'vllm', 'grading.sandbox_child', 'grading.sandbox_lockdown')\n"
        "sys.stderr.write(repr(sorted(name for name in heavy if name in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=b"",
        capture_output=True,
        cwd=Path(verifier.__file__).parent,
        timeout=300,
        check=True,
    )
    assert done.stdout == b'{"ready": true}\n'
    assert done.stderr.decode().strip().splitlines()[-1] == "[]"


def test_a_parent_holding_more_than_1023_descriptors_grades():
    """The pool waits on its workers with poll: select() cannot wait on fd 1024 or above."""
    with many_descriptors():
        assert verifier.verify_math_batch([(r"\boxed{4}", "4"), (r"\boxed{5}", "4")], workers=1) == [True, False]


def _resident_mb(pid):
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


def test_a_worker_whose_memory_passes_the_bound_is_replaced(monkeypatch):
    """Answers that fill sympy's caches keep a worker's memory: each 2^(2^26) against an irrational
    gold leaves about 17 MB behind (60 of 2^(2^28) reach the 4 GiB address-space limit). Once an
    item is done, a worker over MATH_WORKER_RECYCLE_MB (here 150, for a warm worker's 60-70) is
    replaced, so between items every worker of the pool holds less (without it, this one grows
    past 200 MB)."""
    bound = 150
    monkeypatch.setattr(mathpool, "MATH_WORKER_RECYCLE_MB", bound)
    assert verifier.verify_math_batch([(r"\boxed{1}", "1")], workers=1) == [True]
    pids, resident = set(), []
    for k in range(8):
        item = (rf"\boxed{{2^{{2^{{26}}}} + {k}}}", r"\pi")  # against an irrational gold: both proof steps run
        assert verifier.verify_math_batch([item], workers=1, timeout_s=20.0) == [False]
        pid = mathpool._POOL.workers[0].proc.pid
        pids.add(pid)
        resident.append(_resident_mb(pid))
    assert max(resident) <= bound, resident
    assert len(pids) > 1
    assert verifier.verify_math_batch([(r"\boxed{7}", "7")], workers=1) == [True]
