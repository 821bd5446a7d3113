"""The warm, killable pool of math-verify worker processes.

Each worker is a fresh interpreter started with ``subprocess`` (never forked
from the caller) as ``python verifier.py --math-worker PARENT_PID``: the
caller names that command, so this module knows nothing of how an item is
graded.  The worker runs ``serve``, which warms the grading function up,
says ready and then answers one JSON line per item on stdin/stdout.  It
imports neither torch nor anything the trainer loaded: only the standard
library, ``verifier`` (whose imports are standard-library modules and this
project's stdlib-only modules) and math-verify.

Each item is bounded twice: by math-verify's own whole-second
``signal.alarm`` timeouts, which run in the worker's main thread where they
work, and by a wall-clock deadline kept by the parent.  A worker that misses
its deadline is killed with its whole process group and replaced; its item's
status is ``timeout`` (``error: ...`` where a worker died).  The parent never
holds a sympy object: workers return statuses.  Workers are not sandboxed:
they get an address-space limit and die with their parent (the kernel's
``PR_SET_PDEATHSIG``, whose "parent" is the *thread* that started the
worker: so every worker of a pool is started by one thread that lives as
long as the pool, never by the thread that happens to grade).  A worker whose
resident memory, reported with each status, is over ``MATH_WORKER_RECYCLE_MB``
after an item is replaced by a fresh one: answers that fill sympy's caches
(a 2^(2^26) costs about 20 MB that stays) would otherwise keep it at its 4 GiB
limit for the rest of a run.

Not here: answer extraction and the math-verify calls (``verifier.py``), the
code sandbox (``grading/sandbox.py``).  Imports nothing of ours.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import json
import logging
import math
import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

logger = logging.getLogger(__name__)

MATH_WORKER_MEMORY_MB = 4096  # address space, during an item
# Resident memory above which a worker is replaced once its item is done (a warm worker holds
# 60-70 MB, and as much after 600 items of bench_verifier.py): with the default worker count
# (os.cpu_count()), the pool holds at most this much per worker between items.
MATH_WORKER_RECYCLE_MB = 512
MATH_WORKER_STARTUP_TIMEOUT_S = 120.0
WORKER_DIED = "error: the math worker died"  # the status of an item whose worker exited or spoke garbage
# One item per parsing path a worker warms before it says ready (serve): a fraction,
# a set, an interval, a root and a polynomial, each graded correct.
WARM_UP_ITEMS = (
    (r"\boxed{\frac{1}{2}}", "0.5"),
    (r"\boxed{\{1,2\}}", r"\{2,1\}"),
    (r"\boxed{(0,1]}", "(0,1]"),
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}"),
    (r"\boxed{1+x^2}", "x^2+1"),
)


def run_batch(
    items: list[tuple[str, str]], workers: int | None, timeout_s: float, show: bool, command: Sequence[str]
) -> list[str]:
    """Grade validated ``(completion, gold)`` items in this process's pool
    (see ``verifier.verify_math_batch``): the status of each, its worker's
    (``correct`` passes), ``timeout`` where the worker missed its deadline or
    ``error: ...`` where it died; ``command`` starts one worker, to which the
    parent's pid is appended."""
    with _POOL_LOCK:
        pool = _math_pool(workers, command)
        try:
            return pool.run(items, timeout_s, show)
        except BaseException:
            # Interrupted (KeyboardInterrupt, a worker that cannot start...):
            # in-flight answers must not leak into the next batch.
            _discard_pool()
            raise


def close() -> None:
    """Shut the math worker pool down (registered with ``atexit``).

    Idempotent; a later ``verify_math*`` call starts a fresh pool.
    """
    with _POOL_LOCK:
        _discard_pool()


def _discard_pool() -> None:
    """Kill this process's pool, if any (lock held)."""
    global _POOL
    if _POOL is not None and _POOL.owner_pid == os.getpid():
        _POOL.close()
    _POOL = None


STDERR_TAIL_CHARS = 2000  # of a worker's start-up errors, quoted when it exits before it is ready


class _MathWorker:
    """One math worker process and the parent's view of it. Its stderr goes to a temporary file
    until it is ready (``serve`` then points it at /dev/null), so that a worker that exits during
    start-up can be reported with its exit status and its last words."""

    def __init__(self, proc: subprocess.Popen, stderr) -> None:
        self.proc = proc
        self.stderr = stderr
        self.started = time.monotonic()
        self.ready = False
        self.item: int | None = None
        self.deadline = math.inf
        self._buffer = bytearray()

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def send(self, index: int, completion: str, gold: str, timeout_s: float) -> None:
        """Hand item ``index`` to this (idle, ready) worker. The item is the worker's only once
        its request is in the pipe: a worker that dies before the write has cost no item."""
        request = {"i": index, "completion": completion, "gold": gold, "timeout_s": timeout_s}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        self.item = index
        self.deadline = time.monotonic() + timeout_s

    def read_messages(self) -> list[dict] | None:
        """Messages that are complete now; ``None`` once the worker is gone."""
        chunk = os.read(self.fileno(), 1 << 16)
        if not chunk:
            return None
        self._buffer += chunk
        *lines, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest)
        return [json.loads(line) for line in lines if line]

    def start_up_failure(self) -> str:
        """Why this worker, gone before it said ready, is gone: its exit status and the end of
        what it wrote to stderr."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            status = "closed its output without exiting"
        elif code < 0:
            status = f"was killed by {signal.Signals(-code).name}"
        else:
            status = f"exited with status {code}"
        self.stderr.seek(0)
        said = self.stderr.read().decode(errors="replace").strip()[-STDERR_TAIL_CHARS:]
        return f"a math worker {status} during start-up" + (
            f"; its stderr ends: {said}" if said else ", saying nothing"
        )

    def kill(self) -> None:
        """Kill the worker's process group and reap it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.warning("process %d did not exit 10 s after SIGKILL", self.proc.pid)


class _MathPool:
    """A persistent pool of math workers owned by one parent process.

    Every worker is started by the pool's one spawner thread, which lives until ``close``: the
    kernel kills a worker when the thread that started it ends (``PR_SET_PDEATHSIG``), and the
    thread that grades may be any thread of the caller's, one that ends as soon as its batch is
    done (a grading call in a short-lived thread killed its pool's workers, in start-up or idle).
    """

    def __init__(self, size: int, command: Sequence[str]) -> None:
        self.owner_pid = os.getpid()
        self.command = tuple(command)
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="credo-math-spawner")
        self.workers = [self._start() for _ in range(size)]

    def _start(self) -> _MathWorker:
        """A new worker, started by the spawner thread (the worker's parent for the kernel)."""
        return self._spawner.submit(_spawn, self.command).result()

    @property
    def size(self) -> int:
        return len(self.workers)

    def resize(self, size: int) -> None:
        """Start or stop workers so that exactly ``size`` exist."""
        while len(self.workers) > size:
            self.workers.pop().kill()
        while len(self.workers) < size:
            self.workers.append(self._start())

    def close(self) -> None:
        """Kill every worker, then end the spawner thread."""
        for worker in self.workers:
            worker.kill()
        self.workers = []
        self._spawner.shutdown(wait=True)

    def run(self, items: list[tuple[str, str]], timeout_s: float, show: bool) -> list[str]:
        """The statuses of ``items``; see ``run_batch``."""
        batch = _MathBatch(items)
        bar = _progress_bar(len(items)) if show else None
        try:
            while batch.finished < len(items):
                self._dispatch(batch, timeout_s)
                for worker, messages in self._wait():
                    self._handle(worker, messages, batch)
                self._expire(batch)
                if bar is not None:
                    bar.update(batch.finished - bar.n)
        finally:
            if bar is not None:
                bar.close()
        unparsed = batch.statuses.count("gold_unparsed")
        if unparsed:
            logger.warning("math-verify could not parse %d gold answer(s)", unparsed)
        return batch.statuses

    def _dispatch(self, batch: _MathBatch, timeout_s: float) -> None:
        """Hand queued items to idle, ready workers."""
        for worker in list(self.workers):
            if batch.queue and worker.ready and worker.item is None:
                index = batch.queue.popleft()
                try:
                    worker.send(index, *batch.items[index], timeout_s)
                except (BrokenPipeError, ValueError):  # died while idle: not the item's fault
                    batch.queue.appendleft(index)
                    self._replace(worker, batch, WORKER_DIED)

    def _wait(self) -> list[tuple[_MathWorker, list[dict] | None]]:
        """Block until a worker speaks or the next deadline passes."""
        now = time.monotonic()
        horizon = [w.deadline for w in self.workers if w.item is not None]
        horizon += [w.started + MATH_WORKER_STARTUP_TIMEOUT_S for w in self.workers if not w.ready]
        timeout = max(0.0, min(horizon, default=now + 1.0) - now)
        return [(worker, _read_worker(worker)) for worker in _readable(self.workers, timeout)]

    def _handle(self, worker: _MathWorker, messages: list[dict] | None, batch: _MathBatch) -> None:
        """Record a worker's results, or replace it if it died."""
        if messages is None:
            if not worker.ready:
                raise RuntimeError(worker.start_up_failure())
            self._replace(worker, batch, WORKER_DIED)
            return
        for message in messages:
            if "fatal" in message:
                raise RuntimeError(f"math worker failed to start: {message['fatal']}")
            if message.get("ready"):
                worker.ready = True
            elif worker.item is not None and message.get("i") == worker.item:
                batch.finish(worker.item, str(message.get("status")))
                worker.item, worker.deadline = None, math.inf
                if message["rss"] > MATH_WORKER_RECYCLE_MB << 20:
                    self._replace(worker, batch, "recycled")  # idle: no item of the batch is lost
                    return

    def _expire(self, batch: _MathBatch) -> None:
        """Kill and replace workers past their item deadline."""
        now = time.monotonic()
        for worker in list(self.workers):
            if worker.item is not None and now >= worker.deadline:
                self._replace(worker, batch, "timeout")
            elif not worker.ready and now >= worker.started + MATH_WORKER_STARTUP_TIMEOUT_S:
                raise RuntimeError(f"a math worker did not start within {MATH_WORKER_STARTUP_TIMEOUT_S:.0f} s")

    def _replace(self, worker: _MathWorker, batch: _MathBatch, why: str) -> None:
        """Kill ``worker`` and start a new one; its item, if any, fails with the status ``why``."""
        if worker.item is not None:
            batch.finish(worker.item, why)
        worker.kill()
        self.workers[self.workers.index(worker)] = self._start()


def _spawn(command: tuple[str, ...]) -> _MathWorker:
    """Start one worker: ``command`` with this process's pid appended, in a session of its own
    (so that a kill reaches its whole process group), stderr to a temporary file."""
    stderr = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [*command, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        start_new_session=True,
        close_fds=True,
    )
    return _MathWorker(proc, stderr)


class _MathBatch:
    """Book-keeping of one ``verify_math_batch`` call."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self.items = items
        self.statuses: list[str | None] = [None] * len(items)
        self.queue = collections.deque(range(len(items)))
        self.finished = 0

    def finish(self, index: int, status: str) -> None:
        if self.statuses[index] is None:
            self.statuses[index] = status
            self.finished += 1


def _readable(workers: list[_MathWorker], timeout: float) -> list[_MathWorker]:
    """The workers with output to read within ``timeout`` seconds (``poll``-based:
    any descriptor number works, unlike ``select.select``'s limit of 1023)."""
    with selectors.PollSelector() as selector:
        for worker in workers:
            selector.register(worker, selectors.EVENT_READ)
        return [key.fileobj for key, _ in selector.select(timeout)]


def _read_worker(worker: _MathWorker) -> list[dict] | None:
    """A worker's pending messages; ``None`` if it died or spoke garbage."""
    try:
        return worker.read_messages()
    except (OSError, ValueError):
        return None


def _progress_bar(total: int):
    # Deferred: a worker imports this module, and workers (like the sandbox's grader, verifier.py)
    # run on the standard library alone, under any Python 3 (tests/test_sandbox.py's non-root user).
    from tqdm import tqdm

    return tqdm(total=total, desc="verify_math", leave=False)


_POOL: _MathPool | None = None
_POOL_LOCK = threading.Lock()


def _math_pool(workers: int | None, command: Sequence[str]) -> _MathPool:
    """The process's pool, created lazily, resized on request (lock held)."""
    global _POOL
    if _POOL is not None and _POOL.owner_pid != os.getpid():
        _POOL = None  # inherited through fork: the workers belong to the parent
    if _POOL is not None and _POOL.command != tuple(command):
        raise ValueError(
            f"the math pool runs {list(_POOL.command)}, not {list(command)}; "
            "call mathpool.close() first to change the worker command"
        )
    if _POOL is None:
        _POOL = _MathPool(workers or os.cpu_count() or 1, command)
    elif workers is not None and workers != _POOL.size:
        _POOL.resize(workers)
    return _POOL


atexit.register(close)


def serve(parent_pid: int, grade: Callable[[str, str, float], str]) -> int:
    """Main of a math worker: serve JSON lines on stdin/stdout.

    ``grade(completion, gold, timeout_s)`` returns an item's status
    (``correct`` passes; ``gold_unparsed`` is counted and logged by the
    parent).  It runs once on a warm-up item before the worker says ready.
    """
    channel = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # stray prints must not corrupt the protocol
    try:
        _die_with_parent(parent_pid)
        limit = MATH_WORKER_MEMORY_MB << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        # Warm up before "ready": the first grade imports sympy and the LaTeX
        # parser (seconds on a loaded machine), and the first set, interval,
        # root or polynomial takes its own lazy path (0.03-0.1 s idle, over the
        # 1-s alarm on a starved CPU: a CI run graded {1,2} = {2,1} False, its gold
        # unparsed, most likely that first set parse timing out).
        # None of that may eat the alarm budget of a real item.
        for completion, gold in WARM_UP_ITEMS:
            if grade(completion, gold, MATH_WORKER_STARTUP_TIMEOUT_S) != "correct":
                raise RuntimeError(f"math-verify failed its warm-up item ({completion} = {gold})")
    except Exception as error:  # noqa: BLE001 (reported to the parent, which raises)
        channel.write(json.dumps({"fatal": repr(error)}).encode() + b"\n")
        channel.flush()
        return 1
    os.dup2(devnull, 2)  # start-up went well: what the parent keeps of stderr is for start-up failures
    channel.write(b'{"ready": true}\n')
    channel.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            status = grade(request["completion"], request["gold"], request["timeout_s"])
        except Exception as error:  # noqa: BLE001 (the item's status says why; the worker serves on)
            status = f"error: {type(error).__name__}: {error}"[:300]
        reply = {"i": request["i"], "status": status, "rss": _resident_bytes()}
        channel.write(json.dumps(reply).encode() + b"\n")
        channel.flush()
    return 0


def _resident_bytes() -> int:
    """This process's resident memory (``/proc/self/statm``), in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies: when the thread that started
    it ends, that is, which the pool's spawner thread does only in ``close``."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        raise RuntimeError("parent exited before the worker started")
