"""Reward verifiers for math answers and untrusted Python programs.

The reward of an RL run is only as good as its verifier: a policy that finds a
way to make the grader say "pass" will learn it.  This module is the bottom
layer of credo (it imports nothing from the rest of the project) and is built
so that the only way to get ``True`` is to produce the right answer, and so
that no input can make it hang.

Threat model
============
Completions are adversarial.  For code we assume the program does anything
Python allows: exits early (``sys.exit``, ``os._exit``, ``atexit``), returns
objects whose ``__eq__`` is always true, walks frames and the garbage collector
looking for expected values, monkeypatches builtins, prints "passed" markers or
forged protocol frames, kills its parent, forks, loops forever inside C code,
allocates all memory, writes files, replaces signal handlers and opens sockets.
For math we assume answers crafted to make sympy hang (power towers, huge
factorials), including inside C code where ``signal.alarm`` cannot interrupt.

Design
======
Math.  ``verify_math_batch`` sends items to a persistent pool of worker
processes (one interpreter each, started with ``subprocess``, never forked
from the caller).  Each item is bounded twice: by math-verify's own whole-second
``signal.alarm`` timeouts, which run in the worker's main thread where they
work, and by a wall-clock deadline kept by the parent.  A worker that misses
its deadline is killed with its whole process group and replaced; its item is
``False``.  The parent never holds a sympy object: workers return booleans.

Code.  *Expected outputs never enter the sandbox; the parent compares.*  Each
program runs in a fresh ``python -I`` child started in its own session.  The
child receives the program and the test *inputs* only, runs the program, and
sends back what the program produced: raw stdout bytes (``stdio`` tests) or
the returned value encoded as typed JSON built from exact builtin types
(``call`` tests; an ``int`` subclass is sent as its integer value, an object
with a custom ``__eq__`` cannot be encoded at all).  The parent decodes this
data and compares it with the expected outputs it kept.  The verdict is never
the child's exit code or a marker the child prints: a program that takes over
the child can make it send anything, but without the expected values anything
it sends is a guess.  A missing, late, malformed or extra frame is a failure.

``assert`` tests (HumanEval-style ``check(candidate)`` code) have no separate
expected outputs, so the test code must run somewhere.  It runs in the
sandbox's harness process ``A``; the program runs in a second interpreter
``B`` started by ``A``, and ``candidate`` is a proxy that sends arguments to
``B`` and decodes the typed JSON value it answers.  ``B`` never holds the test
code, so frame walking, ``gc`` scans and monkeypatching in ``B`` see nothing,
and an always-equal object cannot cross the process boundary.  The guarantee
is weaker than for ``stdio``/``call``: the pass verdict is sent by ``A``, and
``A``'s integrity rests on ``B`` being unable to reach it (different process,
no capabilities, ``A`` not dumpable, ``ptrace``/``process_vm_*``/``kill``
blocked by seccomp).  A kernel or interpreter exploit in ``B`` that reaches
``A`` could forge a pass; tests that check in-place mutation of arguments or
pass non-builtin objects to ``candidate`` are not supported (they fail).

Isolation of every sandbox child (all modes):

* a fresh interpreter (``python -I``: no user site, no ``PYTHON*``
  variables, no current directory on ``sys.path``), ``start_new_session``,
  scrubbed environment, an empty private writable working directory;
* an unprivileged identity: under a root parent every sandbox gets a uid/gid
  of its own (``_UidPool``), so ``RLIMIT_NPROC`` counts only its own threads
  and no sandbox can read, write or signal another's; under a non-root
  parent the program has the parent's uid;
* resource limits set by the trusted harness before any program code runs:
  address space, CPU seconds, processes (threads count), file size, open
  files, no core dumps;
* ``PR_SET_NO_NEW_PRIVS``, all capabilities dropped, not dumpable, and a
  seccomp filter (``_child_seccomp_program``) that denies process creation
  (threads are allowed), ``execve``, ``setsid``/``setpgid``, signals to any
  process but itself (``kill(0, sig)`` and signal-on-I/O targets included),
  ``ptrace``/``process_vm_*``/pidfds, ``socket()`` (``socketpair`` stays:
  a connected pair cannot reach anything outside the process), the kernel
  keyring, ``memfd_create``, System V and POSIX IPC objects, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, ``io_uring`` and ``unshare``/``setns``;
* a per-test time limit and a total wall-clock cap enforced by the parent,
  which ends every run, on every exit path, by killing the sandbox's
  processes deepest first and then its process group.  Since the program can
  neither fork nor leave its process group, that reaches every process it
  could have started.

What the parent reads back is bounded before anything is built from it: a
frame is at most ``file_size_mb`` + 1 MiB; a returned value at most 8 times
the length and 4 times the element count of the expectation's JSON (plus
constants), decoded in one pass of the C JSON decoder without hashing a
number; stdout is compared in time linear in its length, splitting off only
as many lines and tokens as the expectation has.

Namespaces mode (used when ``unshare`` works, detected at the first call):
the harness runs under ``unshare --pid --fork --kill-child --net --ipc --uts
--mount --mount-proc`` (plus ``--user --map-root-user`` under a non-root
parent), sees only its own processes and has no network interface.  Before
any program code runs it pivots into a minimal root: a read-only tmpfs with
read-only binds of ``/usr``, ``/bin``, ``/lib*``, the interpreter's prefixes
and executable, its own ``/proc``, five device nodes (null, zero, full,
random, urandom) and a size-limited writable tmpfs ``/tmp`` that is its
working directory.  No home, project checkout, data set, ``/etc``,
``/dev/shm`` or host socket is in it.  Under a root parent it then switches
to its own uid (the program never holds the host's root identity; no user
namespace is created).

Plain mode (no namespaces): no PID, network or mount isolation.  The seccomp
filter still blocks sockets, signals to other processes and process creation.
Where the kernel has Landlock (Linux 5.13+; ``_child_landlock``) the harness
restricts file access before any program code runs: read and execute only
below the system's program directories and the interpreter's prefixes and
executable, the five device nodes, and everything in the private working
directory; nothing else can be opened, listed or created (a warning is
logged at detection when Landlock is missing).  Under a root parent the
program runs as its sandbox's own uid: it cannot read root-only files, open
any socket or signal other processes; without Landlock it *can* read
world-readable files (datasets included, if world-readable) and write
world-writable places (``/tmp``; such files outlive the verdict, and a later
sandbox given the same uid can read them).  The sandbox interpreter must be
readable by that uid (see ``CREDO_SANDBOX_PYTHON``).  Under a non-root parent
the program has the parent's uid: it can read and write everything that user
can (within Landlock's limits where the kernel has it), and shares that user's process limit with the trainer and every other
sandbox (a program parking threads can make a concurrent one fail).  Plain
mode never runs untrusted code as root.

Not a container.  No mode limits the kernel attack surface beyond the
seccomp list above.  Math workers are not sandboxed: they get an
address-space limit, die with their parent, and use math-verify's LaTeX
extraction only (``ExprExtractionConfig`` would feed text to sympy's
``eval``-based ``parse_expr``).  For RL at scale, run the whole training job
inside a container or VM as well.

Environment variables
=====================
``CREDO_SANDBOX``: ``auto`` (default: namespaces if they work, else plain with
a logged warning), ``namespaces`` (refuse to run without them) or ``plain``.
``CREDO_SANDBOX_PYTHON``: interpreter for sandboxed programs (default
``sys.executable``).

Linux only (x86-64 and aarch64 seccomp tables).
"""

from __future__ import annotations

import atexit
import builtins
import collections
import inspect
import json
import logging
import marshal
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Self

__all__ = [
    "SandboxError",
    "SandboxLimits",
    "answer_segment",
    "call_outputs",
    "close",
    "extract_boxed",
    "extract_boxed_answers",
    "extract_program",
    "grade",
    "sandbox_mode",
    "verify_code",
    "verify_math",
    "verify_math_batch",
]

logger = logging.getLogger(__name__)

DEFAULT_MATH_TIMEOUT_S = 5.0
DEFAULT_TEST_TIMEOUT_S = 6.0
PROGRESS_MIN_ITEMS = 256
MATH_WORKER_MEMORY_MB = 4096
MATH_WORKER_STARTUP_TIMEOUT_S = 120.0
SANDBOX_UID_BASE = 1 << 30  # sandbox uids under a root parent; see _UidPool
SANDBOX_UID_SLOTS = 1024
_THIS_FILE = os.path.abspath(__file__)


# ---------------------------------------------------------------------------
# Parsing completions
# ---------------------------------------------------------------------------

_ANALYSIS_TAG = "<analysis>"
# Possessive quantifiers: a match never backtracks, so it is linear in the token.
_NUMBER_TOKEN = re.compile(r"[+-]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][+-]?+\d++)?+")
_TOKEN = re.compile(r"\S+")
_BOXED_MACRO = re.compile(r"\\boxed(?![A-Za-z])")
_BARE_BOXED_TOKEN = re.compile(r"[^\s$]+")
_BOX_SEPARATOR = re.compile(r"\b(?:and|or)\b|,|;")
_PYTHON_BLOCK = re.compile(
    r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE
)


def answer_segment(completion: str) -> str:
    """Return the part of a completion that holds the answer.

    Completions end with ``<analysis>...</analysis> <confidence>...``; the
    answer is everything before the first ``<analysis>`` (the whole text when
    there is none).

    >>> answer_segment("x = \\\\boxed{4} <analysis>maybe 5</analysis>")
    'x = \\\\boxed{4} '
    >>> answer_segment("no tags")
    'no tags'
    """
    head, _, _ = completion.partition(_ANALYSIS_TAG)
    return head


def extract_boxed(text: str) -> str | None:
    """Return the content of the last ``\\boxed`` in ``text``, or ``None``.

    Nested braces are balanced; escaped braces (``\\{``, ``\\}``) do not count.
    Only the last ``\\boxed`` macro is considered: if it is unterminated (a
    truncated completion), the result is ``None`` even when an earlier one is
    complete.  The brace-less TeX form ``\\boxed 5`` is accepted only for one
    plain token: the run of characters up to the next whitespace or ``$``,
    minus a trailing period.

    >>> extract_boxed(r"so \\boxed{1} then \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> extract_boxed(r"\\boxed{\\{1,2\\}}")
    '\\\\{1,2\\\\}'
    >>> extract_boxed(r"\\boxed 42.") , extract_boxed(r"\\boxed{1") , extract_boxed("none")
    ('42', None, None)
    """
    answers = extract_boxed_answers(text)
    return answers[-1] if answers else None


def extract_boxed_answers(text: str) -> list[str] | None:
    """The boxes math-verify grades together: the last ``\\boxed`` and the run of
    boxes just before it, in order; ``None`` when the last box has no content.

    math-verify (``extract_boxed_content``, mode ``last``) walks back from the
    last box and keeps an earlier box while the text between the two is shorter
    than 10 characters, or shorter than 70 characters, holds a separator
    (``and``, ``or``, ``,``, ``;``) and the two contents differ; a box equal to
    the one after it is kept once.  Several boxes are then graded as one set, so
    ``\\boxed{1}, \\boxed{2}`` answers ``{1, 2}``, never ``1``.

    >>> extract_boxed_answers(r"\\boxed{1},\\boxed{2} and \\boxed{3}")
    ['1', '2', '3']
    >>> extract_boxed_answers(r"\\boxed{1} was my first guess but checking it again gives \\boxed{2}")
    ['2']
    >>> extract_boxed_answers(r"\\boxed{2}, \\boxed{2}"), extract_boxed_answers(r"\\boxed{1}, \\boxed{2")
    (['2'], None)
    """
    answers: list[str] = []
    later_start = None
    for match in reversed(list(_BOXED_MACRO.finditer(text))):
        content, end = _boxed_content(text, match.end())
        if content is None:
            break
        content = content.strip()
        if answers:
            between = text[end:later_start]
            close = len(between) < 10 or (
                content != answers[-1] and len(between) < 70 and _BOX_SEPARATOR.search(between)
            )
            if not close:
                break
        if not answers or answers[-1] != content:
            answers.append(content)
        later_start = match.start()
    return answers[::-1] or None


def _boxed_content(text: str, after: int) -> tuple[str | None, int]:
    """Content of the ``\\boxed`` whose name ends at ``after`` and the index just
    past it; ``(None, after)`` when it is unterminated or empty."""
    index = after
    while index < len(text) and text[index].isspace():
        index += 1
    if index < len(text) and text[index] == "{":
        content = _braced_content(text, index)
        if content is None:
            return None, after
        return content, index + len(content) + 2
    if index == after:
        return None, after
    token = _BARE_BOXED_TOKEN.match(text, index)
    if token is None:
        return None, after
    value = token.group(0).rstrip(".")
    return (value or None), token.end()


def _braced_content(text: str, open_index: int) -> str | None:
    """Content of the brace group opening at ``text[open_index]``, or None.

    >>> _braced_content("{a{b}c}d", 0)
    'a{b}c'
    >>> _braced_content("{a\\\\}", 0) is None
    True
    """
    depth = 0
    index = open_index
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : index]
        index += 1
    return None


def extract_program(text: str) -> str | None:
    """Return the last complete python code block of ``text``, or ``None``.

    A block opens with a fence tagged ``python``, ``python3`` or ``py`` (any
    case) and closes with the next ```` ``` ````.  Untagged blocks and an
    unclosed final block are not programs.

    >>> extract_program("```python\\nprint(1)\\n```\\n```py\\nprint(2)\\n```")
    'print(2)\\n'
    >>> extract_program("```\\nprint(1)\\n```") is None
    True
    """
    blocks = _PYTHON_BLOCK.findall(text)
    return blocks[-1] if blocks else None


# ---------------------------------------------------------------------------
# Math verification
# ---------------------------------------------------------------------------


def verify_math(
    completion: str, gold: str, timeout_s: float = DEFAULT_MATH_TIMEOUT_S
) -> bool:
    """Whether the boxed answer of ``completion`` equals ``gold``.

    The prediction is the last ``\\boxed{...}`` of the answer segment, with the
    boxes math-verify joins to it (``extract_boxed_answers``: several boxes are
    one set, so listing candidates never matches a single gold answer); it and
    the gold answer are parsed as LaTeX by math-verify and compared with
    ``verify(gold, prediction)``.  A missing or unparseable answer is
    ``False``.  The work runs in the worker pool (see ``verify_math_batch``),
    so this is safe to call from any thread and returns within about
    ``timeout_s``.

    >>> verify_math(r"The sum is \\boxed{\\frac{1}{2}}", "0.5")  # doctest: +SKIP
    True
    """
    return verify_math_batch([(completion, gold)], timeout_s=timeout_s)[0]


def verify_math_batch(
    pairs: Sequence[tuple[str, str]],
    workers: int | None = None,
    timeout_s: float = DEFAULT_MATH_TIMEOUT_S,
    progress: bool | None = None,
) -> list[bool]:
    """Verify ``(completion, gold)`` pairs in a pool of worker processes.

    Returns one bool per pair, in order.  ``workers`` sets the pool size (the
    persistent pool is created on first use and resized when a different
    size is asked for; ``None`` keeps the current size, or uses
    ``os.cpu_count()`` for a new pool).  Each item gets ``timeout_s`` seconds
    of wall-clock time from the moment it is handed to a worker; a worker
    that overruns is killed and replaced and its item is ``False``.  Inside
    the worker math-verify's own alarms are set to
    ``max(1, int(timeout_s // 3))`` seconds per parse/compare step so that
    most slow items end gracefully before the wall clock.  ``progress``
    shows a tqdm bar (default: only for batches of at least
    ``PROGRESS_MIN_ITEMS`` items).

    >>> verify_math_batch([(r"\\boxed{2}", "2"), (r"\\boxed{3}", "2")], workers=2)  # doctest: +SKIP
    [True, False]
    """
    items = _validate_math_pairs(pairs)
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
    if not items:
        return []
    show = len(items) >= PROGRESS_MIN_ITEMS if progress is None else bool(progress)
    with _POOL_LOCK:
        pool = _math_pool(workers)
        try:
            return pool.run(items, float(timeout_s), show)
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


def _validate_math_pairs(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Check that ``pairs`` is a sequence of ``(str, str)``; return a list."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise ValueError("pairs must be a sequence of (completion, gold) tuples")  # noqa: TRY004 (bad input is a ValueError)
    items = []
    for index, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"pairs[{index}] is not a (completion, gold) pair")
        completion, gold = pair
        if not isinstance(completion, str) or not isinstance(gold, str):
            raise ValueError(f"pairs[{index}] must hold two strings")  # noqa: TRY004 (bad input is a ValueError)
        items.append((completion, gold))
    return items


def _math_alarm_seconds(timeout_s: float) -> int:
    """Whole seconds for each math-verify alarm inside a ``timeout_s`` budget.

    >>> _math_alarm_seconds(5.0), _math_alarm_seconds(0.5), _math_alarm_seconds(9)
    (1, 1, 3)
    """
    return max(1, int(timeout_s // 3))


def _verify_math_inprocess(completion: str, gold: str, timeout_s: float) -> str:
    """Grade one item in this process (a math worker's main thread).

    Returns a status: ``correct``, ``wrong``, ``no_answer``,
    ``gold_unparsed`` or ``error``.  Parsed sympy objects are never turned
    into strings or logged (that can hang outside any timeout).
    """
    from math_verify import LatexExtractionConfig, parse, verify
    from math_verify.errors import TimeoutException

    answers = extract_boxed_answers(answer_segment(completion))
    if answers is None:
        return "no_answer"
    seconds = _math_alarm_seconds(timeout_s)
    config = [LatexExtractionConfig(boxed_match_priority=0)]
    # Several boxes are rebuilt as a comma-separated run, which math-verify
    # parses as the set of their contents (as it does for the original text).
    prediction = ", ".join("\\boxed{" + answer + "}" for answer in answers)
    try:
        gold_parsed = parse("\\boxed{" + gold + "}", config, parsing_timeout=seconds)
        if not gold_parsed:
            return "gold_unparsed"
        predicted = parse(prediction, config, parsing_timeout=seconds)
        if not predicted:
            return "no_answer"
        equal = verify(gold_parsed, predicted, timeout_seconds=seconds)
    except (Exception, TimeoutException):  # noqa: BLE001 (any failure grades False)
        return "error"
    return "correct" if equal is True else "wrong"


class _MathWorker:
    """One math worker process and the parent's view of it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, _THIS_FILE, "--math-worker", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self.started = time.monotonic()
        self.ready = False
        self.item: int | None = None
        self.deadline = math.inf
        self._buffer = bytearray()

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def send(self, index: int, completion: str, gold: str, timeout_s: float) -> None:
        """Hand item ``index`` to this (idle, ready) worker."""
        request = {"i": index, "completion": completion, "gold": gold, "timeout_s": timeout_s}
        self.item = index
        self.deadline = time.monotonic() + timeout_s
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()

    def read_messages(self) -> list[dict] | None:
        """Messages that are complete now; ``None`` once the worker is gone."""
        chunk = os.read(self.fileno(), 1 << 16)
        if not chunk:
            return None
        self._buffer += chunk
        *lines, rest = self._buffer.split(b"\n")
        self._buffer = bytearray(rest)
        return [json.loads(line) for line in lines if line]

    def kill(self) -> None:
        """Kill the worker's process group and reap it."""
        _kill_group(self.proc)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        _reap(self.proc)


class _MathPool:
    """A persistent pool of math workers owned by one parent process."""

    def __init__(self, size: int) -> None:
        self.owner_pid = os.getpid()
        self.workers = [_MathWorker() for _ in range(size)]

    @property
    def size(self) -> int:
        return len(self.workers)

    def resize(self, size: int) -> None:
        """Start or stop workers so that exactly ``size`` exist."""
        while len(self.workers) > size:
            self.workers.pop().kill()
        while len(self.workers) < size:
            self.workers.append(_MathWorker())

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.workers = []

    def run(self, items: list[tuple[str, str]], timeout_s: float, show: bool) -> list[bool]:
        """Grade ``items``; see ``verify_math_batch``."""
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
        return [status == "correct" for status in batch.statuses]

    def _dispatch(self, batch: _MathBatch, timeout_s: float) -> None:
        """Hand queued items to idle, ready workers."""
        for worker in list(self.workers):
            if batch.queue and worker.ready and worker.item is None:
                index = batch.queue.popleft()
                try:
                    worker.send(index, *batch.items[index], timeout_s)
                except (BrokenPipeError, ValueError):  # died while idle: not the item's fault
                    batch.queue.appendleft(index)
                    worker.item = None
                    self._replace(worker, batch)

    def _wait(self) -> list[tuple[_MathWorker, list[dict] | None]]:
        """Block until a worker speaks or the next deadline passes."""
        now = time.monotonic()
        horizon = [w.deadline for w in self.workers if w.item is not None]
        horizon += [w.started + MATH_WORKER_STARTUP_TIMEOUT_S for w in self.workers if not w.ready]
        timeout = max(0.0, min(horizon, default=now + 1.0) - now)
        readable, _, _ = select.select(self.workers, [], [], timeout)
        return [(worker, _read_worker(worker)) for worker in readable]

    def _handle(self, worker: _MathWorker, messages: list[dict] | None, batch: _MathBatch) -> None:
        """Record a worker's results, or replace it if it died."""
        if messages is None:
            if not worker.ready:
                raise RuntimeError("a math worker exited during start-up (is math-verify installed?)")
            self._replace(worker, batch)
            return
        for message in messages:
            if "fatal" in message:
                raise RuntimeError(f"math worker failed to start: {message['fatal']}")
            if message.get("ready"):
                worker.ready = True
            elif worker.item is not None and message.get("i") == worker.item:
                batch.finish(worker.item, str(message.get("status")))
                worker.item, worker.deadline = None, math.inf

    def _expire(self, batch: _MathBatch) -> None:
        """Kill and replace workers past their item deadline."""
        now = time.monotonic()
        for worker in list(self.workers):
            if worker.item is not None and now >= worker.deadline:
                self._replace(worker, batch)
            elif not worker.ready and now >= worker.started + MATH_WORKER_STARTUP_TIMEOUT_S:
                raise RuntimeError("a math worker did not start within "
                                   f"{MATH_WORKER_STARTUP_TIMEOUT_S:.0f} s")

    def _replace(self, worker: _MathWorker, batch: _MathBatch) -> None:
        """Kill ``worker`` (its item, if any, fails) and start a new one."""
        if worker.item is not None:
            batch.finish(worker.item, "timeout")
        worker.kill()
        self.workers[self.workers.index(worker)] = _MathWorker()


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


def _read_worker(worker: _MathWorker) -> list[dict] | None:
    """A worker's pending messages; ``None`` if it died or spoke garbage."""
    try:
        return worker.read_messages()
    except (OSError, ValueError):
        return None


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="verify_math", leave=False)


_POOL: _MathPool | None = None
_POOL_LOCK = threading.Lock()


def _math_pool(workers: int | None) -> _MathPool:
    """The process's pool, created lazily, resized on request (lock held)."""
    global _POOL
    if _POOL is not None and _POOL.owner_pid != os.getpid():
        _POOL = None  # inherited through fork: the workers belong to the parent
    if _POOL is None:
        _POOL = _MathPool(workers or os.cpu_count() or 1)
    elif workers is not None and workers != _POOL.size:
        _POOL.resize(workers)
    return _POOL


atexit.register(close)


def _math_worker_main(parent_pid: int) -> int:
    """Entry point of a math worker: serve JSON lines on stdin/stdout."""
    channel = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # stray prints must not corrupt the protocol
    try:
        _die_with_parent(parent_pid)
        import resource

        limit = MATH_WORKER_MEMORY_MB << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        # Warm up before "ready": the first grade imports sympy and the LaTeX
        # parser (seconds on a loaded machine), which must not eat the alarm
        # budget of a real item.
        if _verify_math_inprocess(r"\boxed{\frac{1}{2}}", "0.5", MATH_WORKER_STARTUP_TIMEOUT_S) != "correct":
            raise RuntimeError("math-verify failed its warm-up item (1/2 = 0.5)")
    except Exception as error:  # noqa: BLE001 (reported to the parent, which raises)
        channel.write(json.dumps({"fatal": repr(error)}).encode() + b"\n")
        channel.flush()
        return 1
    channel.write(b'{"ready": true}\n')
    channel.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            status = _verify_math_inprocess(
                request["completion"], request["gold"], request["timeout_s"]
            )
        except MemoryError:
            status = "error"
        channel.write(json.dumps({"i": request["i"], "status": status}).encode() + b"\n")
        channel.flush()
    return 0


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        raise RuntimeError("parent exited before the worker started")


# ---------------------------------------------------------------------------
# Code verification: public API
# ---------------------------------------------------------------------------


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program): set-up, start-up, config."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed program run.

    ``memory_mb`` bounds the address space; ``processes`` is
    ``RLIMIT_NPROC`` (threads count; the program never runs as uid 0, and
    under a root parent each sandbox has a uid of its own, see the module
    docstring); ``file_size_mb`` bounds every file written and the captured
    stdout of one test; ``open_files`` is ``RLIMIT_NOFILE``; ``tmpfs_mb``
    sizes the private working directory in namespaces mode; the interpreter
    must start and the harness be ready within ``startup_grace_s``, which is
    not counted in any test's time.
    """

    memory_mb: int = 2048
    processes: int = 64
    file_size_mb: int = 64
    open_files: int = 256
    tmpfs_mb: int = 64
    startup_grace_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("memory_mb", "processes", "file_size_mb", "open_files", "tmpfs_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SandboxLimits.{name} must be a positive int, got {value!r}")
        if not self.startup_grace_s > 0:
            raise ValueError("SandboxLimits.startup_grace_s must be positive")


def grade(completions: Sequence[str], references: Sequence, domain: str, *, workers: int, timeout_s: float) -> list[bool]:
    """a_i for a batch of completions: the one grading entry of training and evaluation.

    math: `references` are gold answers, graded by math-verify in `workers` killable worker
    processes (verify_math_batch, timeout_s per item). code: `references` are test dicts in
    verify_code's schema, each program run in the sandbox with timeout_s per test, `workers`
    programs at once. The answer segment of each completion is what is graded.
    """
    if len(completions) != len(references):
        raise ValueError(f"grade: {len(completions)} completions but {len(references)} references")
    if domain == "math":
        return verify_math_batch(list(zip(completions, references)), workers=workers, timeout_s=timeout_s)
    if domain != "code":
        raise ValueError(f"grade: unknown domain {domain!r}; expected 'math' or 'code'")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda item: verify_code(item[0], item[1], timeout_s=timeout_s), zip(completions, references)))


def verify_code(
    completion: str,
    tests: dict,
    timeout_s: float = DEFAULT_TEST_TIMEOUT_S,
    *,
    total_timeout_s: float | None = None,
    limits: SandboxLimits | None = None,
) -> bool:
    """Whether the last python block of the answer segment passes ``tests``.

    ``tests`` uses one normalized schema:

    * ``{"kind": "stdio", "inputs": [str], "outputs": [str]}``: the program
      reads stdin and writes stdout.  Outputs match when, after stripping,
      they have the same lines and each line is equal or token-wise equal,
      tokens in plain decimal/scientific notation compared as ``Decimal``
      (``1.0`` equals ``1``, ``1e3`` equals ``1000``; no tolerance).
    * ``{"kind": "call", "fn_name": str, "inputs": [[args...]],
      "outputs": [value]}``: calls ``Solution().fn_name(*args)`` when the
      program defines ``class Solution`` with that attribute, else the
      top-level function.  Values are compared after JSON normalization
      (tuples become lists, dict keys strings): an integer output exactly
      (an equal int, or a float of exactly that value), a float output with
      ``math.isclose(rel_tol=1e-6, abs_tol=1e-6)`` against an int or float,
      everything else by exact type and value (see ``_values_match``).
      Instead of ``outputs`` a test may name a ``property`` checked in the
      parent by trusted code, e.g. ``{"name": "polynomial_root", "atol": 1e-4}``
      (HumanEval/32: the polynomial ``inputs[i][0]`` is within ``atol`` of zero
      at the value).
    * ``{"kind": "assert", "entry_point": str, "test": str, "prelude": str}``:
      HumanEval-style test code defining ``check(candidate)``; passes when
      ``check`` returns.  The optional ``prelude`` (trusted dataset code, e.g.
      HumanEval's prompt) runs first in the test's namespace, so the test can
      call the helpers it defines; the entry point's name is then bound to the
      candidate.  Weaker guarantee: see the module docstring.

    ``timeout_s`` is the per-test wall-clock limit (for ``call`` the module's
    top-level code gets one more; for ``assert`` the whole ``check`` gets one);
    ``total_timeout_s`` caps all tests together (default: their sum).  An empty
    test list, a missing code block, a wrong output, an exception, a crash or
    a timeout give ``False``.  Malformed ``tests`` raise ``ValueError``; a
    broken sandbox raises ``SandboxError``.

    >>> verify_code("```python\\nprint(int(input()) * 2)\\n```",
    ...             {"kind": "stdio", "inputs": ["2\\n"], "outputs": ["4\\n"]})  # doctest: +SKIP
    True
    """
    if not isinstance(completion, str):
        raise ValueError("completion must be a str")  # noqa: TRY004 (bad input is a ValueError)
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
    if total_timeout_s is not None and not (
        isinstance(total_timeout_s, (int, float)) and total_timeout_s > 0
    ):
        raise ValueError(f"total_timeout_s must be a positive number, got {total_timeout_s!r}")
    limits = SandboxLimits() if limits is None else limits
    if not isinstance(limits, SandboxLimits):
        raise ValueError("limits must be a SandboxLimits")  # noqa: TRY004 (bad input is a ValueError)
    spec = _parse_tests(tests)
    program = extract_program(answer_segment(completion))
    if program is None or spec.phases == spec.setup_phases:
        return False
    budget = timeout_s * spec.phases if total_timeout_s is None else total_timeout_s
    return _run_tests(_sandbox_config(), program, spec, float(timeout_s), budget, limits)


def call_outputs(
    program: str,
    fn_name: str,
    inputs: list[list],
    timeout_s: float = DEFAULT_TEST_TIMEOUT_S,
    limits: SandboxLimits | None = None,
) -> list[tuple[Any, int]]:
    """What a trusted reference ``program`` returns for ``call`` inputs, run in
    the sandbox (dataset preparation: expected outputs computed by running the
    canonical solution, as evalplus does).

    One ``(value, size)`` pair per input: the value JSON-normalized (tuples as
    lists) and the size in bytes of the typed JSON it was sent as.  The list
    stops at the first input whose call raises, times out or returns a value
    the sandbox cannot send (an object, an int over Python's 4300-digit str
    limit), so its length is the number of leading inputs that succeeded.
    """
    spec = _parse_call_tests({"kind": "call", "fn_name": fn_name, "inputs": inputs,
                              "outputs": [None] * len(inputs)})
    values: list[tuple[Any, int]] = []

    def keep(index: int, tag: bytes, payload: bytes) -> bool:
        if index == 0:
            return tag == b"L"
        if tag != b"V":
            return False
        try:
            # Without any object ({...}) typed JSON is plain JSON: parse it directly
            # (a list of a million floats decodes 50x faster).
            value = json.loads(payload) if b"{" not in payload else _json_normalize(
                _decode_typed(payload.decode("utf-8")))
        except (ValueError, TypeError, OverflowError, RecursionError, UnicodeDecodeError):
            return False
        values.append((value, len(payload)))
        return True

    limits = SandboxLimits() if limits is None else limits
    capture = _TestSpec(spec.request, spec.phases, spec.setup_phases, keep)
    _run_tests(_sandbox_config(), program, capture, float(timeout_s), timeout_s * spec.phases, limits)
    return values


def sandbox_mode() -> str:
    """The isolation mode in use: ``"namespaces"`` or ``"plain"``.

    Detected (by running a probe program) on first use and cached; see the
    ``CREDO_SANDBOX`` environment variable in the module docstring.
    """
    return _sandbox_config().mode


# ---------------------------------------------------------------------------
# Code verification: test schema (parent side)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _TestSpec:
    """Validated tests: what the child gets and how the parent judges.

    ``request`` goes to the sandbox and never contains expected outputs.
    After the ready frame the child sends ``phases`` frames; frame ``i`` is
    accepted when ``judge(i, tag, payload)`` is true.  ``setup_phases``
    counts the phases that are not tests (``call``: loading the module).
    """

    request: dict
    phases: int
    setup_phases: int
    judge: Callable[[int, bytes, bytes], bool]


def _parse_tests(tests: dict) -> _TestSpec:
    """Validate ``tests`` (see ``verify_code``) and build its ``_TestSpec``."""
    if not isinstance(tests, dict):
        raise ValueError(f"tests must be a dict, got {type(tests).__name__}")  # noqa: TRY004 (bad input is a ValueError)
    parsers = {"stdio": _parse_stdio_tests, "call": _parse_call_tests, "assert": _parse_assert_tests}
    kind = tests.get("kind")
    if kind not in parsers:
        raise ValueError(f"unknown test kind {kind!r}; expected one of {sorted(parsers)}")
    return parsers[kind](tests)


def _require(tests: dict, key: str, kind: type) -> Any:
    """``tests[key]``, which must exist and be a ``kind``."""
    if key not in tests:
        raise ValueError(f"{tests['kind']} tests are missing the key {key!r}")
    value = tests[key]
    if not isinstance(value, kind):
        raise ValueError(f"tests[{key!r}] must be a {kind.__name__}, got {type(value).__name__}")  # noqa: TRY004 (bad input is a ValueError)
    return value


def _paired_lists(tests: dict) -> tuple[list, list]:
    """``tests["inputs"]`` and ``tests["outputs"]``: lists of equal length."""
    inputs, outputs = _require(tests, "inputs", list), _require(tests, "outputs", list)
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    return inputs, outputs


def _parse_stdio_tests(tests: dict) -> _TestSpec:
    inputs, outputs = _paired_lists(tests)
    for name, values in (("inputs", inputs), ("outputs", outputs)):
        if not all(isinstance(value, str) for value in values):
            raise ValueError(f"stdio {name} must all be str")
    expected = list(outputs)

    def judge(index: int, tag: bytes, payload: bytes) -> bool:
        return tag == b"O" and _stdio_output_matches(
            expected[index], payload.decode("utf-8", "replace")
        )

    request = {"kind": "stdio", "inputs": [value.encode() for value in inputs]}
    return _TestSpec(request, len(inputs), 0, judge)


def _parse_call_tests(tests: dict) -> _TestSpec:
    fn_name = _require(tests, "fn_name", str)
    if not fn_name.isidentifier():
        raise ValueError(f"fn_name {fn_name!r} is not an identifier")
    if "property" in tests:
        inputs = _require(tests, "inputs", list)
        if "outputs" in tests:
            raise ValueError("call tests with a 'property' take no 'outputs'")
        holds = _property_judge(_require(tests, "property", dict))
    else:
        inputs, outputs = _paired_lists(tests)
    if not all(isinstance(args, list) for args in inputs):
        raise ValueError("call inputs must be lists of positional arguments")
    try:
        arg_blobs = [marshal.dumps(args) for args in inputs]
        if "property" not in tests:
            expected = [_json_normalize(value) for value in outputs]
    except (TypeError, ValueError) as error:
        raise ValueError(f"call inputs/outputs must be plain JSON data: {error}") from None

    def judge(index: int, tag: bytes, payload: bytes) -> bool:
        if index == 0:
            return tag == b"L"
        if tag != b"V":
            return False
        if "property" in tests:
            return _returned_value_has(holds, inputs[index - 1], payload)
        return _returned_value_matches(expected[index - 1], payload)

    request = {"kind": "call", "fn_name": fn_name, "inputs": arg_blobs}
    return _TestSpec(request, 1 + len(inputs), 1, judge)


def _property_judge(spec: dict) -> Callable[[list, Any], bool]:
    """The trusted check a ``property`` names, with its parameters bound.

    >>> _property_judge({"name": "polynomial_root", "atol": 1e-4})([[-6, 11, -6, 1]], 3.0)
    True
    """
    name = spec.get("name")
    if name not in _PROPERTIES:
        raise ValueError(f"unknown call property {name!r}; known: {sorted(_PROPERTIES)}")
    check, parameters = _PROPERTIES[name]
    given = set(spec) - {"name"}
    if given != parameters:
        raise ValueError(f"property {name!r} takes parameters {sorted(parameters)}, got {sorted(given)}")
    for key in parameters:
        if not _is_number(spec[key]) or not spec[key] >= 0:
            raise ValueError(f"property {name!r}: {key} must be a non-negative number, got {spec[key]!r}")
    return lambda args, value: check(args, value, **{key: spec[key] for key in parameters})


def _returned_value_has(holds: Callable[[list, Any], bool], args: list, payload: bytes) -> bool:
    """Whether a child's typed-JSON value has the property, judged here in the parent."""
    try:
        return holds(args, _decode_typed(payload.decode("utf-8"))) is True
    except (ValueError, TypeError, OverflowError, RecursionError, UnicodeDecodeError):
        return False


def _is_polynomial_root(args: list, value: Any, atol: float) -> bool:
    """HumanEval/32 ``find_zero(xs)``: any ``x`` with ``|sum_i xs[i] * x**i| <= atol``
    (evalplus's oracle; the recorded root is one of many right answers).

    >>> _is_polynomial_root([[1, 2]], -0.5, 1e-4), _is_polynomial_root([[1, 2]], -0.4, 1e-4)
    (True, False)
    >>> _is_polynomial_root([[1, 2]], True, 1e-4), _is_polynomial_root([[1, 2]], float("nan"), 1e-4)
    (False, False)
    """
    if not _is_number(value) or len(args) != 1 or not isinstance(args[0], list):
        return False
    coefficients = args[0]
    if not all(_is_number(c) for c in coefficients):
        return False
    total = sum(c * math.pow(value, i) for i, c in enumerate(coefficients))
    return abs(total) <= atol


# Properties a ``call`` test may name instead of expected outputs: trusted
# checks of (arguments, returned value), run in the parent, with their parameters.
_PROPERTIES: dict[str, tuple[Callable[..., bool], set[str]]] = {
    "polynomial_root": (_is_polynomial_root, {"atol"}),
}


def _parse_assert_tests(tests: dict) -> _TestSpec:
    entry_point = _require(tests, "entry_point", str)
    if not entry_point.isidentifier():
        raise ValueError(f"entry_point {entry_point!r} is not an identifier")
    test = _require(tests, "test", str)
    _check_defines_check(test)
    prelude = _require(tests, "prelude", str) if "prelude" in tests else ""
    try:
        compile(prelude, "<prelude>", "exec")
    except SyntaxError as error:
        raise ValueError(f"assert prelude does not parse: {error}") from None

    def judge(index: int, tag: bytes, payload: bytes) -> bool:
        return tag == b"P"

    request = {"kind": "assert", "entry_point": entry_point, "test": test, "prelude": prelude}
    return _TestSpec(request, 1, 0, judge)


def _check_defines_check(test: str) -> None:
    """Raise ValueError unless ``test`` parses and defines ``check``."""
    import ast

    try:
        tree = ast.parse(test)
    except SyntaxError as error:
        raise ValueError(f"assert test code does not parse: {error}") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body):
        raise ValueError("assert test code must define a top-level function check(candidate)")


# ---------------------------------------------------------------------------
# Code verification: comparisons (parent side)
# ---------------------------------------------------------------------------


def _stdio_output_matches(expected: str, actual: str) -> bool:
    """LiveCodeBench-style stdout comparison, linear in the output's length.

    Only as many lines and tokens as ``expected`` has are ever split off
    ``actual``, so a flood of short lines or tokens costs one scan, not one
    object each.

    >>> _stdio_output_matches("1 2\\n3.0\\n", "  1 2 \\n3\\n\\n")
    True
    >>> _stdio_output_matches("1 2", "1  3")
    False
    """
    expected_lines = [line.strip() for line in expected.strip().split("\n")]
    actual = actual.strip()
    if actual.count("\n") + 1 != len(expected_lines):
        return False
    start = 0
    for want in expected_lines:
        end = actual.find("\n", start)
        got = actual[start : len(actual) if end < 0 else end].strip()
        start = end + 1
        if want != got and not _tokens_numerically_equal(want, got):
            return False
    return True


def _tokens_numerically_equal(expected_line: str, actual_line: str) -> bool:
    """Whether two lines have the same tokens, numbers compared as Decimals.

    Only plain decimal or scientific notation counts as a number (not
    ``inf``, ``nan``, ``1_000`` or ``0x10``); other tokens must be equal.
    Tokens of ``actual_line`` are taken one at a time, at most one more than
    ``expected_line`` has.

    >>> _tokens_numerically_equal("1.50 x", "1.5 x"), _tokens_numerically_equal("1", "1.01")
    (True, False)
    >>> _tokens_numerically_equal("1e3", "1000"), _tokens_numerically_equal("1_000", "1000")
    (True, False)
    """
    expected_tokens = expected_line.split()
    actual_tokens = _TOKEN.finditer(actual_line)
    for want in expected_tokens:
        got = next(actual_tokens, None)
        if got is None or not _tokens_equal(want, got.group()):
            return False
    return next(actual_tokens, None) is None


def _tokens_equal(want: str, got: str) -> bool:
    """Equal strings, or both plain numbers with the same Decimal value."""
    if want == got:
        return True
    if not (_NUMBER_TOKEN.fullmatch(want) and _NUMBER_TOKEN.fullmatch(got)):
        return False
    try:
        return Decimal(want) == Decimal(got)
    except InvalidOperation:
        return False


def _json_normalize(value: Any) -> Any:
    """The value as JSON would give it back: tuples become lists, keys strings.

    >>> _json_normalize({1: (2, 3.5)})
    {'1': [2, 3.5]}
    """
    return json.loads(json.dumps(value))


def _returned_value_matches(expected: Any, payload: bytes) -> bool:
    """Whether a child's typed-JSON value equals the (normalized) expectation.

    The payload is bounded before anything is built from it: its length and
    an upper estimate of its element count may exceed those of the
    expectation's JSON only by constant factors (``_within_bounds``).  It is
    then decoded in one pass of the C JSON decoder (nesting limited by the
    interpreter's recursion limit), whose object hook normalizes the typed
    wrappers without hashing any number (``_normalize_typed_object``).
    """
    if not _within_bounds(json.dumps(expected).encode(), payload):
        return False
    try:
        actual = json.loads(payload.decode("utf-8"), object_pairs_hook=_normalize_typed_object)
    except (ValueError, TypeError, OverflowError, RecursionError, UnicodeDecodeError):
        return False
    return _values_match(expected, actual)


def _within_bounds(expected_json: bytes, payload: bytes) -> bool:
    """Whether ``payload`` is small enough to be an encoding of the expectation.

    The child's encoding of an equal value is longer than ``json.dumps`` of
    the expectation only by its wrappers (``{"tuple": [...]}``, dict pairs as
    ``[key, value]``) and longer float spellings: less than 8 times the
    length and 4 times the count of brackets and commas (which bounds the
    number of values), plus constants.

    >>> _within_bounds(b"[1, 2]", b'{"tuple": [1, 2.0000000000000004]}')
    True
    >>> _within_bounds(b"[1, 2]", b"[" + b"[], " * 4096 + b"]")
    False
    """
    def elements(text: bytes) -> int:
        return text.count(b"[") + text.count(b"{") + text.count(b",")

    return (len(payload) <= 8 * len(expected_json) + 4096
            and elements(payload) <= 4 * elements(expected_json) + 64)


def _normalize_typed_object(pairs: list[tuple[str, Any]]) -> Any:
    """JSON-decoder object hook: a typed wrapper as ``_json_normalize`` gives it.

    Tuples become lists and dict keys their JSON strings, so no number is
    ever hashed (a set or dict of integers that all hash alike would take
    quadratic time to build).  Values JSON cannot hold (sets, bytes,
    complex, non-scalar keys) raise TypeError: they never equal an
    expectation.
    """
    if len(pairs) != 1:
        raise ValueError("a typed object must have exactly one key")
    ((tag, body),) = pairs
    if tag not in ("tuple", "dict") or type(body) is not list:
        raise TypeError(f"a {tag!r} value never equals a JSON expectation")
    if tag == "tuple":
        return body
    normalized = {}
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise ValueError("malformed dict item")
        normalized[_json_key(pair[0])] = pair[1]
    return normalized


def _json_key(key: Any) -> str:
    """The string ``json.dumps`` makes of a dict key; TypeError if it has none.

    >>> [_json_key(key) for key in ("a", 1, 2.5, True, None)]
    ['a', '1', '2.5', 'true', 'null']
    """
    if type(key) is str:
        return key
    if type(key) in (bool, int, float) or key is None:
        return json.dumps(key)
    raise TypeError("dict key of a type JSON cannot hold")


def _values_match(expected: Any, actual: Any) -> bool:
    """Compare JSON-normalized values.

    An integer expectation is matched exactly: by an equal ``int`` or a
    ``float`` of exactly the same value (``2.0`` for ``2``, never
    ``2500002.0`` for ``2500000``).  A float expectation ``e`` is matched by
    an int or float ``a`` with ``|a - e| <= max(1e-6 * max(|a|, |e|), 1e-6)``
    (``math.isclose``; NaN matches nothing).  Everything else must have the
    same type and value (``True`` never equals ``1``).

    >>> _values_match([1, 2.0], [1, 2.0000001]), _values_match(1, True), _values_match(2, 2.0)
    (True, False, True)
    >>> _values_match(2500000, 2500002.0), _values_match(10**18, 1e18), _values_match(10**18 + 1, 1e18)
    (False, True, False)
    """
    if _is_number(expected) and _is_number(actual):
        if type(expected) is int:
            return expected == actual  # int == float is exact in Python
        return math.isclose(expected, actual, rel_tol=1e-6, abs_tol=1e-6)
    if type(expected) is not type(actual):
        return False
    if type(expected) is list:
        return len(expected) == len(actual) and all(map(_values_match, expected, actual))
    if type(expected) is dict:
        return expected.keys() == actual.keys() and all(
            _values_match(expected[key], actual[key]) for key in expected
        )
    return expected == actual


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


# ---------------------------------------------------------------------------
# Code verification: sandbox configuration (parent side)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _SandboxConfig:
    """How sandbox children are started: mode and interpreter."""

    mode: str  # "namespaces" or "plain"
    python: str
    unshare: str | None = None


_CONFIG: _SandboxConfig | None = None
_CONFIG_LOCK = threading.Lock()


def _sandbox_config() -> _SandboxConfig:
    """The cached sandbox configuration, detected on first use."""
    global _CONFIG
    with _CONFIG_LOCK:
        if _CONFIG is None:
            _CONFIG = _detect_sandbox_config()
        return _CONFIG


def _forget_sandbox_config() -> None:
    """Drop the cached configuration (tests use this after changing env vars)."""
    global _CONFIG
    with _CONFIG_LOCK:
        _CONFIG = None


def _detect_sandbox_config() -> _SandboxConfig:
    """Pick namespaces or plain mode by probing; see ``CREDO_SANDBOX``."""
    if not sys.platform.startswith("linux"):
        raise SandboxError("the code sandbox needs Linux")
    wanted = os.environ.get("CREDO_SANDBOX", "auto")
    if wanted not in ("auto", "namespaces", "plain"):
        raise ValueError(f"CREDO_SANDBOX must be auto, namespaces or plain, not {wanted!r}")
    python = os.environ.get("CREDO_SANDBOX_PYTHON") or sys.executable
    if wanted != "plain":
        unshare = shutil.which("unshare")
        problem = "the unshare command is not installed"
        if unshare is not None:
            candidate = _SandboxConfig("namespaces", python, unshare=unshare)
            problem = _probe(candidate)
            if problem is None:
                return candidate
        if wanted == "namespaces":
            raise SandboxError(f"CREDO_SANDBOX=namespaces but namespaces do not work: {problem}")
        logger.warning("code sandbox: namespaces unavailable (%s); using plain mode "
                       "(no PID, network or file-system isolation)", problem)
    if _landlock_abi() < 1:
        logger.warning("code sandbox: plain mode without Landlock (Linux 5.13+): programs "
                       "can read world-readable files and write world-writable places")
    candidate = _SandboxConfig("plain", python)
    problem = _probe(candidate)
    if problem is not None:
        hint = " (as root the sandbox runs as an unprivileged uid, which must be able to run "
        hint += f"{python}; set CREDO_SANDBOX_PYTHON)" if os.geteuid() == 0 else ""
        raise SandboxError(f"the plain code sandbox does not work: {problem}{hint}")
    return candidate


def _landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 without Landlock); the plain-mode
    harness restricts file access with it (see ``_child_landlock``)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    landlock_create_ruleset, version_flag = 444, 1
    return max(0, libc.syscall(landlock_create_ruleset, None, ctypes.c_size_t(0),
                               ctypes.c_uint32(version_flag)))


def _probe(config: _SandboxConfig) -> str | None:
    """Run a known program under ``config``; ``None`` if it works, else why."""
    spec = _parse_tests({"kind": "stdio", "inputs": ["probe\n"], "outputs": ["eborp\n"]})
    try:
        passed = _run_tests(config, "print(input()[::-1])", spec, 30.0, 30.0,
                            SandboxLimits(), capture_stderr=True)
    except SandboxError as error:
        return str(error)
    return None if passed else "the probe program did not produce its output"


# ---------------------------------------------------------------------------
# Code verification: running a sandbox (parent side)
# ---------------------------------------------------------------------------

_FRAME_HEADER = 9  # one tag byte, then the payload length as 8 big-endian bytes


def _run_tests(
    config: _SandboxConfig,
    program: str,
    spec: _TestSpec,
    timeout_s: float,
    budget_s: float,
    limits: SandboxLimits,
    capture_stderr: bool = False,
) -> bool:
    """Run ``program`` on ``spec`` in a sandbox and judge the frames it sends."""
    request = dict(spec.request, program=program, namespaces=config.mode == "namespaces",
                   limits=_child_limits(limits, budget_s))
    if spec.request["kind"] == "assert":
        request["script"] = _child_script()
    with _Sandbox(config, request, limits, capture_stderr) as sandbox:
        _wait_until_ready(sandbox, limits.startup_grace_s)
        end = time.monotonic() + budget_s
        for index in range(spec.phases):
            frame = sandbox.next_frame(min(time.monotonic() + timeout_s, end))
            if frame is None or not spec.judge(index, *frame):
                return False
        return True


def _wait_until_ready(sandbox: _Sandbox, grace_s: float) -> None:
    """Wait for the harness's ready frame; raise SandboxError if it fails.

    Only frames sent before the ready frame can raise: until then no program
    code has run, so a program cannot make the parent raise.
    """
    frame = sandbox.next_frame(time.monotonic() + grace_s)
    if frame is None:
        raise SandboxError("the sandbox did not become ready within "
                           f"{grace_s:.1f} s{sandbox.diagnostics()}")
    tag, payload = frame
    if tag == b"F":
        raise SandboxError(f"sandbox set-up failed: {payload.decode(errors='replace')}")
    if tag != b"R":
        raise SandboxError(f"unexpected first frame {tag!r} from the sandbox")


def _child_limits(limits: SandboxLimits, budget_s: float) -> dict:
    """Resource limits as the child harness applies them (bytes, seconds)."""
    return {
        "memory": limits.memory_mb << 20,
        "cpu_s": math.ceil(limits.startup_grace_s + budget_s) + 1,
        "processes": limits.processes,
        "file_size": limits.file_size_mb << 20,
        "open_files": limits.open_files,
        "tmpfs": limits.tmpfs_mb << 20,
    }


class _Sandbox:
    """One sandboxed child: started on enter, killed (whole group) on exit."""

    def __init__(self, config: _SandboxConfig, request: dict, limits: SandboxLimits,
                 capture_stderr: bool) -> None:
        self.config = config
        self.request = request
        self.max_payload = (limits.file_size_mb << 20) + (1 << 20)
        self.capture_stderr = capture_stderr
        self.proc: subprocess.Popen | None = None
        self.uid: int | None = None  # this sandbox's own uid (root parent only)
        self.workdir: str | None = None
        self.stderr_file = None
        self.buffer = bytearray()
        self.eof = False

    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        namespaces = self.config.mode == "namespaces"
        if os.geteuid() == 0:
            self.uid = _SANDBOX_UIDS.acquire()
        cwd = "/" if namespaces else self._make_workdir()
        home = "/tmp" if namespaces else cwd
        command = [self.config.python, "-I", "-c", _child_script(), _sandbox_tag(), "harness"]
        identity, switch_to = {}, None
        if namespaces:
            command = _namespace_command(self.config.unshare, as_root=self.uid is not None) + command
            switch_to = self.uid  # the harness switches after building the mount namespace
        elif self.uid is not None:
            identity = {"user": self.uid, "group": self.uid, "extra_groups": []}
        if self.capture_stderr:
            self.stderr_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__)
        with tempfile.TemporaryFile() as request_file:
            request_file.write(marshal.dumps(dict(self.request, uid=switch_to)))
            request_file.seek(0)
            try:
                self.proc = subprocess.Popen(
                    command, stdin=request_file, stdout=subprocess.PIPE,
                    stderr=self.stderr_file or subprocess.DEVNULL, cwd=cwd,
                    env=_scrubbed_environment(home), start_new_session=True,
                    close_fds=True, **identity,
                )
            except OSError as error:
                raise SandboxError(f"cannot start the sandbox: {error}") from None

    def _make_workdir(self) -> str:
        """Private ``base/work`` directory; ``base`` stays owned by the parent
        (traverse-only: ``work``'s absolute path, the program's ``TMPDIR``,
        must resolve for the program's uid)."""
        self.workdir = tempfile.mkdtemp(prefix="credo-sandbox-")
        os.chmod(self.workdir, 0o711)
        work = os.path.join(self.workdir, "work")
        os.mkdir(work, 0o700)
        if self.uid is not None:
            os.chown(work, self.uid, self.uid)
        return work

    def next_frame(self, deadline: float) -> tuple[bytes, bytes] | None:
        """The next complete frame, or ``None`` on EOF, deadline or garbage."""
        while True:
            frame = self._pop_frame()
            if frame is not None or self.eof:
                return frame if frame is not False else None
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(remaining):
                return None

    def _pop_frame(self) -> tuple[bytes, bytes] | None | bool:
        """Take one frame off the buffer; ``False`` if the stream is bad."""
        if len(self.buffer) < _FRAME_HEADER:
            return None
        length = int.from_bytes(self.buffer[1:_FRAME_HEADER], "big")
        if length > self.max_payload:
            self.eof = True
            return False
        end = _FRAME_HEADER + length
        if len(self.buffer) < end:
            return None
        frame = (bytes(self.buffer[:1]), bytes(self.buffer[_FRAME_HEADER:end]))
        del self.buffer[:end]
        return frame

    def _read(self, timeout: float) -> bool:
        """Read what arrives within ``timeout``; False on timeout or EOF."""
        stream = self.proc.stdout
        readable, _, _ = select.select([stream], [], [], timeout)
        if not readable:
            return False
        chunk = os.read(stream.fileno(), 1 << 20)
        if not chunk:
            self.eof = True
            return True
        self.buffer += chunk
        return True

    def diagnostics(self) -> str:
        """Captured stderr of the child (probe runs only), for error messages."""
        if self.stderr_file is None or self.proc is None:
            return ""
        self._stop()
        self.stderr_file.seek(0)
        text = self.stderr_file.read()[-2000:].decode(errors="replace").strip()
        return f": {text}" if text else ""

    def _stop(self) -> None:
        """Kill every process of the sandbox, then reap the child (once).

        Processes below the leader die first, deepest first, each reaped by
        its own parent (the assert harness ignores SIGCHLD; ``unshare`` waits
        for the namespace's init, whose death makes the kernel kill and reap
        the rest of the namespace).  Killing the whole group at once would
        orphan them as zombies for the host's PID 1, and a PID 1 that never
        reaps (a container without an init) would collect them.
        """
        if self.proc is None or self.proc.returncode is not None:
            return
        for pid in reversed(_descendants(self.proc.pid)):
            _kill_and_wait(pid)
        _kill_group(self.proc)  # before reaping: the pgid cannot be reused yet
        _reap(self.proc)

    def __exit__(self, *exc_info) -> None:
        self._stop()
        if self.proc is not None:
            self.proc.stdout.close()
        if self.stderr_file is not None:
            self.stderr_file.close()
        if self.workdir is not None:
            _remove_tree(self.workdir)
        if self.uid is not None:
            _SANDBOX_UIDS.release(self.uid)  # every process of the sandbox is dead
            self.uid = None


def _namespace_command(unshare: str, as_root: bool) -> list[str]:
    """The ``unshare`` prefix of a namespaces-mode child.

    Under a root parent no user namespace is made: the harness builds its
    mount namespace as root, then switches to its own unprivileged uid.
    Otherwise a user namespace maps the parent's uid to root inside it.
    """
    user = [] if as_root else ["--user", "--map-root-user"]
    return [unshare, *user, "--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts",
            "--mount", "--mount-proc"]


class _UidPool:
    """Distinct host uids for the concurrent sandboxes of this process.

    Under a root parent every sandbox runs as a uid of its own, so that
    ``RLIMIT_NPROC`` counts only its own threads (one program cannot use up a
    limit a concurrent program needs) and no sandbox can signal or read the
    files of another.  The range is ``SANDBOX_UID_BASE + (pid mod 2**20) *
    SANDBOX_UID_SLOTS + slot``: processes of one host get disjoint ranges
    unless their pids agree modulo 2**20.  A uid is reused only after every
    process of its previous sandbox is dead.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.taken: set[int] = set()

    def acquire(self) -> int:
        with self.lock:
            free = next((slot for slot in range(SANDBOX_UID_SLOTS) if slot not in self.taken), None)
            if free is None:
                raise SandboxError(f"more than {SANDBOX_UID_SLOTS} concurrent sandboxes")
            self.taken.add(free)
        return SANDBOX_UID_BASE + (os.getpid() % (1 << 20)) * SANDBOX_UID_SLOTS + free

    def release(self, uid: int) -> None:
        with self.lock:
            self.taken.discard((uid - SANDBOX_UID_BASE) % SANDBOX_UID_SLOTS)


_SANDBOX_UIDS = _UidPool()


def _sandbox_tag() -> str:
    """argv[1] of every sandbox process: names the parent that owns it.

    >>> _sandbox_tag() == f"credo-sandbox:{os.getpid()}"
    True
    """
    return f"credo-sandbox:{os.getpid()}"


def _scrubbed_environment(home: str) -> dict:
    """The only environment variables a sandboxed program sees."""
    threads = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8", **threads}


def _descendants(pid: int) -> list[int]:
    """Processes below ``pid``, parents before children (empty if the kernel
    does not list children: then the group kill alone ends the sandbox)."""
    found, queue = [], [pid]
    while queue:
        parent = queue.pop(0)
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as listing:
                children = [int(child) for child in listing.read().split()]
        except OSError:
            children = []
        found += children
        queue += children
    return found


def _kill_and_wait(pid: int, timeout_s: float = 1.0) -> None:
    """SIGKILL ``pid`` and wait (bounded) until its parent has reaped it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.001)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group led by ``proc`` (before it is reaped)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(proc: subprocess.Popen) -> None:
    """Wait for a killed child so that no zombie is left behind."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        logger.warning("process %d did not exit 10 s after SIGKILL", proc.pid)


def _remove_tree(path: str) -> None:
    """Delete a sandbox work directory, whatever permissions the program set."""

    def make_writable_and_retry(function, failed_path, _exc_info):
        os.chmod(os.path.dirname(failed_path), 0o700)
        if os.path.isdir(failed_path) and not os.path.islink(failed_path):
            os.chmod(failed_path, 0o700)
        function(failed_path)

    shutil.rmtree(path, onerror=make_writable_and_retry)


# ---------------------------------------------------------------------------
# Sandbox child.  The functions below run *inside* the sandbox: the parent
# sends their source (see _child_script) to ``python -I -c``.  They use only
# builtins, the modules imported by _CHILD_HEADER and modules they import
# themselves, and call one another by name.
#
# Frames (child -> parent): tag byte + 8-byte length + payload.
#   R ready (set-up done, before any program code)   F set-up failed
#   L call module loaded   O stdout bytes of one stdio test
#   V typed-JSON return value   P assert check passed   X program failed
# ---------------------------------------------------------------------------

_CHILD_HEADER = "import builtins, marshal, os, sys\n"


def _child_main():
    """Run the role named in argv: the harness, or the assert-kind server."""
    if sys.argv[2] == "server":
        _child_serve(int(sys.argv[3]))
    else:
        _child_harness()


def _child_harness():
    """Set the sandbox up, then run the program on the requested tests."""
    request = marshal.loads(_child_read_all(0))
    devnull = os.open("/dev/null", os.O_RDWR)
    channel = os.dup(1)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    kind = request["kind"]
    try:
        if request["namespaces"]:
            _child_isolate_filesystem(request["limits"]["tmpfs"], request["uid"])
        _child_set_limits(request["limits"], processes=kind != "assert")
        _child_drop_privileges(request["uid"])
        if not request["namespaces"]:
            _child_landlock()
        if kind == "stdio":
            stdio_files = (os.memfd_create("stdin"), os.memfd_create("stdout"))
        if kind == "assert":
            server = _child_start_server(request["script"], devnull,
                                         request["limits"]["processes"])
            _child_set_limits(request["limits"], processes=True)
        _child_install_seccomp()
    except Exception as error:  # noqa: BLE001 (any set-up failure is reported)
        _child_send(channel, b"F", repr(error).encode())
        return
    _child_send(channel, b"R")
    try:
        code = compile(request["program"], "<solution>", "exec")
    except BaseException:  # noqa: BLE001 (a program that does not compile fails)
        _child_send(channel, b"X")
        return
    sys.argv = ["solution.py"]
    if kind == "stdio":
        _child_run_stdio(code, request["inputs"], stdio_files, channel)
    elif kind == "call":
        _child_run_call(code, request["fn_name"], request["inputs"], channel)
    else:
        _child_run_assert(request, server, channel)


def _child_read_all(fd):
    """Every byte readable from ``fd`` until EOF."""
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _child_send(fd, tag, payload=b""):
    """Write one frame to ``fd``."""
    data = memoryview(tag + len(payload).to_bytes(8, "big") + payload)
    while data:
        data = data[os.write(fd, data):]


def _child_recv(fd):
    """Read one frame from ``fd``: ``(tag, payload)``; EOFError at the end."""
    header = _child_read_exactly(fd, 9)
    return header[:1], _child_read_exactly(fd, int.from_bytes(header[1:], "big"))


def _child_read_exactly(fd, size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError("peer closed the channel")
        data += chunk
    return bytes(data)


def _child_libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def _child_check(ctypes, result, what):
    """Raise OSError with errno when a libc call returned -1."""
    if result == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, what + ": " + os.strerror(errno))


def _child_isolate_filesystem(tmpfs_bytes, owner):
    """Namespaces mode: pivot into a minimal read-only root, cwd a private tmpfs.

    The new root is a tmpfs holding only: read-only binds of the system's
    program directories (``/usr``, ``/bin``, ``/lib*``; symlinks copied as
    symlinks), of this interpreter's prefixes (a venv and its base
    installation) and of its executable, this PID namespace's ``/proc``, the
    device nodes null, zero, full, random and urandom, and ``/tmp``: a
    size-limited writable tmpfs owned by ``owner`` (None: the current user),
    which is the working directory.  No home, no project checkout, no data,
    no sockets, no ``/etc``.
    """
    ctypes, libc = _child_libc()
    ms_bind, ms_rec, ms_nosuid, ms_nodev, read_only_nosuid = 0x1000, 0x4000, 0x2, 0x4, 0x1 | 0x2
    system, binds, devices = _child_visible_paths()
    # Open every source first: the new root is assembled on /tmp, which may hold them.
    sources = {path: os.open(path, os.O_PATH) for path in binds + devices + ["/proc"]}
    _child_mount(ctypes, libc, "tmpfs", "/tmp", "tmpfs", ms_nosuid | ms_nodev,
                 "size=1048576,nr_inodes=4096,mode=0755")
    os.mkdir("/tmp/tmp")
    options = f"size={tmpfs_bytes},nr_inodes=4096,mode=0700"
    if owner is not None:
        options += f",uid={owner},gid={owner}"
    _child_mount(ctypes, libc, "tmpfs", "/tmp/tmp", "tmpfs", ms_nosuid | ms_nodev, options)
    for path in system:
        if os.path.islink(path):
            os.symlink(os.readlink(path), "/tmp" + path)
    for path, fd in sources.items():
        target = "/tmp" + path
        _child_make_path(os.path.dirname(target))
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            _child_make_path(target)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
        _child_mount(ctypes, libc, f"/proc/self/fd/{fd}", target, None, ms_bind | ms_rec, None)
        _child_mount_setattr(ctypes, libc, target, read_only_nosuid, recursive=True)
        os.close(fd)
    _child_mount_setattr(ctypes, libc, "/tmp", read_only_nosuid, recursive=False)
    os.chdir("/tmp")
    sys_pivot_root = {"x86_64": 155, "aarch64": 41}[os.uname().machine]
    _child_check(ctypes, libc.syscall(sys_pivot_root, b".", b"."), "pivot_root")
    mnt_detach = 2
    _child_check(ctypes, libc.umount2(b".", mnt_detach), "umount old root")
    os.chdir("/tmp")


def _child_visible_paths():
    """What a program may see: ``(system, binds, devices)``.

    ``system`` names the system's program directories (some may be symlinks
    or absent); ``binds`` the existing real directories among them, then this
    interpreter's prefixes and executable where not already inside one;
    ``devices`` five harmless device nodes.
    """
    system = ["/usr", "/bin", "/lib", "/lib32", "/lib64", "/libx32"]
    prefixes = {os.path.normpath(path) for path in (sys.prefix, sys.exec_prefix, sys.base_prefix,
                                                     sys.base_exec_prefix)}
    if "/" in prefixes:
        raise OSError("the sandbox interpreter's prefix is /; it cannot be isolated")
    binds = [path for path in system if os.path.lexists(path)]
    for path in sorted(prefixes) + [os.path.normpath(sys.executable)]:
        if not any(path == outer or path.startswith(outer + "/") for outer in binds):
            binds.append(path)
    binds = [path for path in binds if not os.path.islink(path) or path not in system]
    devices = ["/dev/" + name for name in ("null", "zero", "full", "random", "urandom")]
    return system, binds, devices


def _child_landlock():
    """Plain mode: restrict file access with Landlock, where the kernel has it.

    Read and execute only below ``_child_visible_paths`` (symlinked system
    entries are followed), read and write the device nodes, everything in the
    working directory; nothing else can be opened, listed or created.  With
    Landlock ABI 4+ TCP is denied too, with 6+ abstract unix sockets and
    signals outside the sandbox.  Returns the ABI version (0: no Landlock).
    """
    ctypes, libc = _child_libc()
    create, add_rule, restrict = 444, 445, 446
    abi = libc.syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return 0
    execute, write_file, read_file, read_dir = 1, 2, 4, 8
    handled = (1 << 13) - 1
    for version, right in ((2, 1 << 13), (3, 1 << 14), (5, 1 << 15)):
        if abi >= version:
            handled |= right

    class Ruleset(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]  # noqa: RUF012

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]  # noqa: RUF012

    ruleset = Ruleset(handled, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset_fd = libc.syscall(create, ctypes.byref(ruleset), ctypes.c_size_t(size), ctypes.c_uint32(0))
    _child_check(ctypes, ruleset_fd, "landlock_create_ruleset")
    system, binds, devices = _child_visible_paths()
    rules = [(path, execute | read_file | read_dir) for path in binds]
    rules += [(path, read_file | write_file) for path in devices]
    rules += [(".", handled)]  # the working directory (its parent is not searchable)
    for path, allowed in rules:
        fd = os.open(path, os.O_PATH)
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            allowed &= execute | read_file | write_file | (1 << 14) | (1 << 15)
        rule = PathBeneath(allowed & handled, fd)
        path_beneath = 1
        _child_check(ctypes, libc.syscall(add_rule, ctypes.c_int(ruleset_fd), ctypes.c_int(path_beneath),
                                          ctypes.byref(rule), ctypes.c_uint32(0)), "landlock " + path)
        os.close(fd)
    _child_check(ctypes, libc.syscall(restrict, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
                 "landlock_restrict_self")
    os.close(ruleset_fd)
    return abi


def _child_make_path(path):
    """Create ``path`` and missing parents as traverse-only (0711) directories,
    so that the way to a bound prefix (e.g. /root/.pyenv) cannot be listed."""
    if os.path.isdir(path):
        return
    _child_make_path(os.path.dirname(path))
    os.mkdir(path)
    os.chmod(path, 0o711)


def _child_mount(ctypes, libc, source, target, fstype, flags, options):
    """mount(2); raise OSError naming the target on failure."""
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    _child_check(ctypes, libc.mount(encode(source), encode(target), encode(fstype),
                                    ctypes.c_ulong(flags), encode(options)), "mount " + target)


def _child_mount_setattr(ctypes, libc, path, flags, recursive):
    """Set mount attributes ``flags`` on the mount at ``path`` (and those below)."""

    class MountAttr(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clear", "propagation", "userns")]  # noqa: RUF012

    attr = MountAttr(flags, 0, 0, 0)
    at_fdcwd, at_recursive, sys_mount_setattr = -100, 0x8000, 442
    _child_check(ctypes, libc.syscall(sys_mount_setattr, ctypes.c_int(at_fdcwd), path.encode(),
                                      ctypes.c_uint(at_recursive if recursive else 0),
                                      ctypes.byref(attr),
                                      ctypes.c_size_t(ctypes.sizeof(attr))), "mount_setattr")


def _child_set_limits(limits, processes):
    """Apply the resource limits (soft = hard, except CPU: hard = soft + 1)."""
    import resource

    pairs = [
        (resource.RLIMIT_AS, limits["memory"]),
        (resource.RLIMIT_FSIZE, limits["file_size"]),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
        (resource.RLIMIT_CORE, 0),
    ]
    if processes:
        pairs.append((resource.RLIMIT_NPROC, limits["processes"]))
    for which, value in pairs:
        resource.setrlimit(which, (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))


def _child_drop_privileges(uid):
    """Become ``uid`` (None: stay), no new privileges, no capabilities, not dumpable."""
    ctypes, libc = _child_libc()
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    pr_set_dumpable, pr_set_no_new_privs = 4, 38
    _child_check(ctypes, libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0), "no_new_privs")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]  # noqa: RUF012

    class Data(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]  # noqa: RUF012

    capability_version_3 = 0x20080522
    _child_check(ctypes, libc.capset(ctypes.byref(Header(capability_version_3, 0)),
                                     (Data * 2)()), "capset")
    _child_check(ctypes, libc.prctl(pr_set_dumpable, 0, 0, 0, 0), "dumpable")


def _child_seccomp_program(pid):
    """The seccomp BPF program as ``(code, jt, jf, k)`` tuples.

    Denied with EPERM: process creation (fork, vfork, clone without
    CLONE_THREAD), execve, setsid/setpgid, ptrace and process_vm_*, pidfds,
    sigqueue, kill/tkill/tgkill aimed at anything but this process (the
    process group ``kill(0, sig)`` included), signal-on-I/O targets
    (fcntl F_SETOWN/F_SETOWN_EX/F_SETSIG, ioctl FIOSETOWN/SIOCSPGRP), the
    kernel keyring (add_key, request_key, keyctl), socket() of any family
    (a unix socket could reach an abstract or world-writable host socket;
    socketpair stays allowed), memfd_create, System V and POSIX IPC objects (shmget, semget,
    msgget, mq_open: in plain mode they would outlive the sandbox), bpf,
    perf_event_open, userfaultfd, io_uring, unshare/setns.  clone3 gets
    ENOSYS so that the C library falls back to clone for threads.  Foreign
    system-call ABIs (x32, i386 on x86-64) kill the process.
    """
    tables = {
        "x86_64": (0xC000003E, {
            "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59, "execveat": 322,
            "setsid": 112, "setpgid": 109, "ptrace": 101, "process_vm_readv": 310,
            "process_vm_writev": 311, "pidfd_open": 434, "pidfd_getfd": 438,
            "pidfd_send_signal": 424, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
            "kill": 62, "tkill": 200, "tgkill": 234, "socket": 41, "memfd_create": 319,
            "shmget": 29, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "unshare": 272, "setns": 308, "add_key": 248,
            "request_key": 249, "keyctl": 250, "fcntl": 72, "ioctl": 16, "semget": 64,
            "msgget": 68, "mq_open": 240, "bpf": 321, "perf_event_open": 298,
            "userfaultfd": 323}),
        "aarch64": (0xC00000B7, {
            "clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "setsid": 157,
            "setpgid": 154, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
            "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424,
            "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "kill": 129, "tkill": 130,
            "tgkill": 131, "socket": 198, "memfd_create": 279, "shmget": 194,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "unshare": 97, "setns": 268, "add_key": 217, "request_key": 218, "keyctl": 219,
            "fcntl": 25, "ioctl": 29, "semget": 190, "msgget": 186, "mq_open": 180,
            "bpf": 280, "perf_event_open": 241, "userfaultfd": 282}),
    }
    machine = os.uname().machine
    if machine not in tables:
        raise OSError("no seccomp table for architecture " + machine)
    arch, nr = tables[machine]
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill_process, errno = 0x7FFF0000, 0x80000000, 0x00050000
    eperm, enosys, clone_thread = 1, 38, 0x10000
    f_setown, f_setsig, f_setown_ex, fiosetown, siocspgrp = 8, 10, 15, 0x8901, 0x8902
    filtered = {"clone", "clone3", "kill", "tgkill", "fcntl", "ioctl"}
    # Instructions with symbolic jump targets, resolved below.
    program = [(load, 0, 0, 4), (jeq, 0, "KILL", arch), (load, 0, 0, 0),
               (jge, "KILL", 0, 0x40000000)]
    for name, number in nr.items():
        if name not in filtered:
            program.append((jeq, "EPERM", 0, number))
    program += [(jeq, "ENOSYS", 0, nr["clone3"]), (jeq, "CLONE", 0, nr["clone"]),
                (jeq, "KILLCALL", 0, nr["kill"]), (jeq, "TGKILL", 0, nr["tgkill"]),
                (jeq, "FCNTL", 0, nr["fcntl"]),
                (jeq, "IOCTL", 0, nr["ioctl"]), (ret, 0, 0, allow)]
    blocks = {
        "CLONE": [(load, 0, 0, 16), (jset, "ALLOW", "EPERM", clone_thread)],
        "KILLCALL": [(load, 0, 0, 16), (jeq, "ALLOW", "EPERM", pid)],
        "TGKILL": [(load, 0, 0, 16), (jeq, "ALLOW", "EPERM", pid)],
        # The command is the second argument (its low 32 bits, as the kernel reads it).
        "FCNTL": [(load, 0, 0, 24), (jeq, "EPERM", 0, f_setown), (jeq, "EPERM", 0, f_setsig),
                  (jeq, "EPERM", "ALLOW", f_setown_ex)],
        "IOCTL": [(load, 0, 0, 24), (jeq, "EPERM", 0, fiosetown),
                  (jeq, "EPERM", "ALLOW", siocspgrp)],
        "ALLOW": [(ret, 0, 0, allow)],
        "EPERM": [(ret, 0, 0, errno | eperm)],
        "ENOSYS": [(ret, 0, 0, errno | enosys)],
        "KILL": [(ret, 0, 0, kill_process)],
    }
    labels = {}
    for label, block in blocks.items():
        labels[label] = len(program)
        program += block

    def offset(target, index):
        return target if isinstance(target, int) else labels[target] - index - 1

    return [(code, offset(jt, i), offset(jf, i), k) for i, (code, jt, jf, k) in enumerate(program)]


def _child_install_seccomp():
    """Install the filter of _child_seccomp_program for this process."""
    ctypes, libc = _child_libc()
    program = _child_seccomp_program(os.getpid())

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),  # noqa: RUF012
                    ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]  # noqa: RUF012

    instructions = (Instruction * len(program))(*[Instruction(*row) for row in program])
    fprog = Program(len(program), instructions)
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    _child_check(ctypes, libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog),
                                    0, 0), "seccomp")


def _child_fresh_stream(fd, mode):
    """A new text stream on ``fd``, installed as sys.std* and sys.__std*__."""
    stream = open(fd, mode, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    name = "stdin" if "r" in mode else "stdout"
    setattr(sys, name, stream)
    setattr(sys, f"__{name}__", stream)
    return stream


def _child_rewind(fd, data):
    """Make memfd ``fd`` hold exactly ``data``, positioned at its start."""
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)


def _child_finish_threads():
    """Join the program's non-daemon threads, as interpreter exit would."""
    threading = sys.modules.get("threading")
    if threading is None:
        return
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()


def _child_exec_main(code):
    """Run the program as ``__main__``; True on a clean exit (incl. exit(0))."""
    import atexit

    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})  # noqa: S102 (the program)
        _child_finish_threads()
        ok = True
    except SystemExit as stop:
        ok = stop.code is None or stop.code == 0
    except BaseException:  # noqa: BLE001 (whatever the program raises, it failed)
        ok = False
    try:
        atexit._run_exitfuncs()  # e.g. output buffers the program flushes at exit
    except BaseException:  # noqa: BLE001
        ok = False
    atexit._clear()
    return ok


def _child_run_stdio(code, inputs, files, channel):
    """Run the program once per input; send each test's stdout (frame O)."""
    stdin_fd, stdout_fd = files
    for data in inputs:
        _child_rewind(stdin_fd, data)
        _child_rewind(stdout_fd, b"")
        os.dup2(stdin_fd, 0)
        os.dup2(stdout_fd, 1)
        _child_fresh_stream(0, "r")
        stream = _child_fresh_stream(1, "w")
        ok = _child_exec_main(code)
        flushes = [getattr(sys.stdout, "flush", None), stream.flush]
        for flush in filter(None, flushes):
            try:
                flush()
            except BaseException:  # noqa: BLE001 (output that cannot be flushed is lost)
                ok = False
        if not ok:
            _child_send(channel, b"X")
            return
        _child_send(channel, b"O", os.pread(stdout_fd, os.fstat(stdout_fd).st_size, 0))


def _child_load_module(code):
    """Execute the program's top level; its namespace, or None if it failed."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(code, namespace)  # noqa: S102 (the program)
    except BaseException:  # noqa: BLE001 (whatever the program raises, it failed)
        return None
    return namespace


def _child_resolve(namespace, name):
    """``Solution().name`` when ``class Solution`` has it, else top-level ``name``."""
    solution = namespace.get("Solution")
    if isinstance(solution, type) and hasattr(solution, name):
        return getattr(solution(), name)
    function = namespace.get(name)
    if callable(function):
        return function
    raise LookupError("the program does not define " + name)


def _child_run_call(code, fn_name, inputs, channel):
    """Load the module (frame L), then call once per input (frames V)."""
    namespace = _child_load_module(code)
    if namespace is None:
        _child_send(channel, b"X")
        return
    _child_send(channel, b"L")
    for blob in inputs:
        try:
            value = _child_resolve(namespace, fn_name)(*marshal.loads(blob))
            encoded = _child_encode(value).encode()
        except BaseException:  # noqa: BLE001 (whatever the program raises, it failed)
            _child_send(channel, b"X")
            return
        _child_send(channel, b"V", encoded)


def _child_encode(value):
    """Typed JSON text of ``value``, built from exact builtin types only.

    Subclasses of int/float/str/list/... are encoded as their base value
    (their methods are bypassed); any other type raises TypeError.  JSON
    lists are lists; tuples, sets, frozensets, dicts, bytes and complex
    numbers are one-key objects, e.g. ``{"tuple": [1, 2]}``.
    """
    from _json import encode_basestring_ascii

    parts = []
    _child_encode_into(value, parts, encode_basestring_ascii)
    return "".join(parts)


def _child_encode_into(value, parts, quote):
    kind = type(value)
    if value is None:
        parts.append("null")
    elif kind is bool:
        parts.append("true" if value else "false")
    elif issubclass(kind, int):
        parts.append(int.__repr__(value))
    elif issubclass(kind, float):
        text = float.__repr__(value)
        parts.append({"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(text, text))
    elif issubclass(kind, str):
        parts.append(quote(str.__str__(value)))
    elif issubclass(kind, list):
        _child_encode_items(list.__iter__(value), parts, quote, "[", "]")
    elif issubclass(kind, dict):
        pairs = ([key, item] for key, item in dict.items(value))
        _child_encode_items(pairs, parts, quote, '{"dict": [', "]}")
    elif issubclass(kind, (tuple, set, frozenset)):
        base = next(b for b in (tuple, frozenset, set) if issubclass(kind, b))
        opening = '{"' + base.__name__ + '": ['
        _child_encode_items(base.__iter__(value), parts, quote, opening, "]}")
    elif issubclass(kind, (bytes, bytearray)):
        parts.append('{"bytes": "' + bytes(value).hex() + '"}')
    elif issubclass(kind, complex):
        exact = complex.__add__(value, 0j)  # bypasses a subclass's real/imag
        _child_encode_items([exact.real, exact.imag], parts, quote, '{"complex": [', "]}")
    else:
        raise TypeError("cannot send a value of type " + kind.__name__)


def _child_encode_items(items, parts, quote, opening, closing):
    parts.append(opening)
    for index, item in enumerate(items):
        if index:
            parts.append(", ")
        _child_encode_into(item, parts, quote)
    parts.append(closing)


def _decode_typed(text):
    """Inverse of _child_encode; used by the assert harness (the parent never
    builds these values: see _normalize_typed).

    >>> _decode_typed('[1, {"tuple": [2.5, "x"]}, {"dict": [[1, {"set": [3]}]]}]')
    [1, (2.5, 'x'), {1: {3}}]
    """
    import json

    return _decode_typed_node(json.loads(text))


def _decode_typed_node(node):
    kind = type(node)
    if kind is list:
        return [_decode_typed_node(item) for item in node]
    if kind is not dict:
        return node
    if len(node) != 1:
        raise ValueError("a typed object must have exactly one key")
    ((tag, body),) = node.items()
    if tag == "bytes" and type(body) is str:
        return bytes.fromhex(body)
    if type(body) is not list:
        raise ValueError("malformed typed value")
    items = [_decode_typed_node(item) for item in body]
    if tag == "dict":
        return {key: item for key, item in items}
    if tag == "complex":
        return complex(*items)
    builders = {"tuple": tuple, "set": set, "frozenset": frozenset}
    if tag not in builders:
        raise ValueError("unknown typed tag " + repr(tag))
    return builders[tag](items)


def _child_start_server(script, devnull, processes):
    """Assert kind: start the program server B; wait for its ready frame.

    SIGCHLD is ignored so that the kernel reaps B as soon as it dies.
    """
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    to_server, server_stdin = os.pipe()
    server_stdout, from_server = os.pipe()
    argv = [sys.executable, "-I", "-c", script, sys.argv[1], "server", str(processes)]
    os.posix_spawn(sys.executable, argv, dict(os.environ), file_actions=[
        (os.POSIX_SPAWN_DUP2, to_server, 0),
        (os.POSIX_SPAWN_DUP2, from_server, 1),
        (os.POSIX_SPAWN_DUP2, devnull, 2),
    ])
    for fd in (to_server, from_server):
        os.close(fd)
    tag, _ = _child_recv(server_stdout)
    if tag != b"R":
        raise OSError("the program server failed to start")
    return server_stdin, server_stdout


def _child_run_assert(request, server, channel):
    """Assert kind, in A: run ``check(candidate)`` with a proxy to B."""
    to_server, from_server = server
    _child_send(to_server, b"S", marshal.dumps((request["program"], request["entry_point"])))
    try:
        loaded = _child_recv(from_server)[0] == b"L"
    except EOFError:
        loaded = False
    if not loaded:
        _child_send(channel, b"X")
        return

    def candidate(*args, **kwargs):
        _child_send(to_server, b"C", marshal.dumps((args, kwargs)))
        tag, payload = _child_recv(from_server)
        if tag == b"V":
            return _decode_typed(payload.decode("utf-8"))
        error = getattr(builtins, payload.decode("ascii", "replace"), None)
        # StopIteration would silently end a loop over map(candidate, ...).
        if error in (StopIteration, StopAsyncIteration):
            raise RuntimeError("the candidate raised " + error.__name__)
        if isinstance(error, type) and issubclass(error, Exception):
            raise error("raised by the candidate")
        raise RuntimeError("the candidate failed")

    # The test may call helpers the prompt defines (HumanEval's poly,
    # encode_cyclic) and the entry point by name: the trusted prelude runs
    # first, then the entry point's name is bound to the proxy.
    namespace = {"__name__": "__check__", "__builtins__": builtins}
    try:
        exec(compile(request["prelude"], "<prelude>", "exec"), namespace)  # noqa: S102 (dataset prompt code)
        namespace[request["entry_point"]] = candidate
        exec(compile(request["test"], "<test>", "exec"), namespace)  # noqa: S102 (dataset test code)
        namespace["check"](candidate)
    except BaseException:  # noqa: BLE001 (any failure of check fails the test)
        _child_send(channel, b"X")
        return
    _child_send(channel, b"P")


def _child_serve(processes):
    """Assert kind, in B: load the program, then answer candidate calls.

    B inherits A's limits, no-new-privileges and empty capability sets; fd 2
    is /dev/null (opened by A: /dev is nodev in namespaces mode).
    """
    import resource

    from_harness, to_harness = os.dup(0), os.dup(1)
    os.dup2(2, 0)
    os.dup2(2, 1)
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    _child_install_seccomp()
    _child_send(to_harness, b"R")
    program, entry_point = marshal.loads(_child_recv(from_harness)[1])
    try:
        namespace = _child_load_module(compile(program, "<solution>", "exec"))
        function = _child_resolve(namespace, entry_point)
    except BaseException:  # noqa: BLE001 (whatever the program raises, it failed)
        _child_send(to_harness, b"X")
        return
    _child_send(to_harness, b"L")
    while True:
        args, kwargs = marshal.loads(_child_recv(from_harness)[1])
        try:
            reply = (b"V", _child_encode(function(*args, **kwargs)).encode())
        except BaseException as error:  # noqa: BLE001 (reported to A as an exception name)
            reply = (b"E", _child_builtin_error_name(error).encode("ascii", "replace"))
        _child_send(to_harness, *reply)


def _child_builtin_error_name(error):
    """Name of ``error``'s class if it is a builtin exception, else Exception."""
    for name, value in vars(builtins).items():
        if value is type(error):
            return name
    return "Exception"


_CHILD_FUNCTIONS = (
    _child_main, _child_harness, _child_read_all, _child_send, _child_recv,
    _child_read_exactly, _child_libc, _child_check, _child_isolate_filesystem,
    _child_visible_paths, _child_landlock, _child_make_path, _child_mount, _child_mount_setattr,
    _child_set_limits, _child_drop_privileges, _child_seccomp_program,
    _child_install_seccomp, _child_fresh_stream, _child_rewind, _child_finish_threads,
    _child_exec_main, _child_run_stdio, _child_load_module, _child_resolve,
    _child_run_call, _child_encode, _child_encode_into, _child_encode_items,
    _decode_typed, _decode_typed_node, _child_start_server, _child_run_assert,
    _child_serve, _child_builtin_error_name,
)
_CHILD_SCRIPT: str | None = None


def _child_script() -> str:
    """Source of the sandbox child program (built once from the functions above)."""
    global _CHILD_SCRIPT
    if _CHILD_SCRIPT is None:
        sources = [inspect.getsource(function) for function in _CHILD_FUNCTIONS]
        _CHILD_SCRIPT = _CHILD_HEADER + "\n\n".join(sources) + "\n_child_main()\n"
    return _CHILD_SCRIPT


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--math-worker":
        sys.exit(_math_worker_main(int(sys.argv[2])))
    sys.exit(f"usage: {sys.argv[0]} --math-worker PARENT_PID (internal)")
