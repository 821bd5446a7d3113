"""Reward verifiers for math answers and untrusted Python programs.

The reward of an RL run is only as good as its verifier: a policy that finds a
way to make the grader say "pass" will learn it.  This module and the ones it
imports (see Modules) are the bottom layer of credo, and are built so that the
only way to get ``True`` is to produce the right answer, and so that no input
can make it hang.

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
Math.  ``verify_math_batch`` hands items to a persistent pool of worker
processes (``grading/mathpool.py``; each worker runs this file with ``--math-worker``
and grades with ``_verify_math_inprocess``, which compares with
``grading/mathjudge.py``: math-verify, configured so that True needs a proof
of equality).  Every item is bounded by math-verify's own alarms inside the
worker and by a wall-clock deadline in the parent, which kills a late worker;
a worker holding too much memory after an item is replaced; the parent never
holds a sympy object.

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

How the sandbox isolates a program, its modes and the environment variables
that choose them: ``grading/sandbox.py``.  Math workers are not sandboxed: they get
an address-space limit, die with their parent, and use math-verify's LaTeX
extraction only (``ExprExtractionConfig`` would feed text to sympy's
``eval``-based ``parse_expr``).

Modules
=======
``verifier.py`` (this file): answer extraction and the public entry points.
``grading/judge.py``: test schemas and the parent's comparisons.
``grading/mathjudge.py``: how a math worker compares an answer with its gold.
``grading/mathpool.py``: the math worker pool.  ``grading/sandbox.py``: the sandbox, parent
side; ``grading/sandbox_resources.py``: the uid, working directory and processes it
takes and gives back.  ``grading/sandbox_child.py``, ``grading/sandbox_lockdown.py``,
``grading/typed_json.py``: the code that runs inside the sandbox, shipped compiled
(the parent imports only ``typed_json``, to decode a trusted reference's
values in ``call_outputs``).

Not here: anything of training or evaluation; this file and the modules above
import nothing else of the project.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from grading import mathjudge, mathpool
from grading.judge import json_normalize, parse_call_tests, parse_tests
from grading.mathpool import close
from grading.sandbox import SandboxError, SandboxLimits, TestSpec, run_tests, sandbox_config, sandbox_mode
from grading.typed_json import decode_typed
from rollout import answer_text

__all__ = [
    "SandboxError",
    "SandboxLimits",
    "Verdict",
    "answer_segment",
    "call_outputs",
    "close",
    "extract_boxed",
    "extract_boxed_answers",
    "extract_program",
    "failure_summary",
    "grade",
    "sandbox_mode",
    "verify_code",
    "verify_math",
    "verify_math_batch",
]

DEFAULT_MATH_TIMEOUT_S = 5.0
DEFAULT_TEST_TIMEOUT_S = 6.0
PROGRESS_MIN_ITEMS = 256
REASON_CHARS = 300  # the most of an exception's message a Verdict's reason keeps
# How the math pool starts a worker (it appends the parent's pid): this file's __main__.
_MATH_WORKER_COMMAND = (sys.executable, os.path.abspath(__file__), "--math-worker")


# ---------------------------------------------------------------------------
# Parsing completions
# ---------------------------------------------------------------------------

_BOXED_MACRO = re.compile(r"\\boxed(?![A-Za-z])")
_BARE_BOXED_TOKEN = re.compile(r"[^\s$]+")
_BOX_SEPARATOR = re.compile(r"\b(?:and|or)\b|,|;")
_PYTHON_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


def answer_segment(completion: str) -> str:
    """Return the part of a completion that holds the answer: everything before the first
    ``<analysis>`` (the whole text when there is none), by rollout.answer_text, the one
    definition of the answer segment. The loop passes answers already cut (on the channel's
    own rule); cutting again here keeps a caller that passes a whole completion from being
    graded on a ``\\boxed`` or a program inside its analysis.

    >>> answer_segment("x = \\\\boxed{4} <analysis>maybe 5</analysis>")
    'x = \\\\boxed{4} '
    >>> answer_segment("no tags")
    'no tags'
    """
    return answer_text(completion, "readout")


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


def verify_math(completion: str, gold: str, timeout_s: float = DEFAULT_MATH_TIMEOUT_S) -> bool:
    """Whether the boxed answer of ``completion`` equals ``gold``.

    The prediction is the last ``\\boxed{...}`` of the answer segment, with the
    boxes math-verify joins to it (``extract_boxed_answers``: several boxes are
    one set, so listing candidates never matches a single gold answer); it and
    the gold answer are parsed as LaTeX by math-verify and compared with
    ``verify(gold, prediction)``, configured so that True needs a proof of
    equality and any failure is False (``grading/mathjudge.py``).  A
    missing or unparseable answer is
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
    return [status == "correct" for status in _math_statuses(pairs, workers, timeout_s, progress)]


def _math_statuses(
    pairs: Sequence[tuple[str, str]], workers: int | None, timeout_s: float, progress: bool | None
) -> list[str]:
    """The status of each pair (``_verify_math_inprocess``'s, or the pool's ``timeout`` or
    ``error: ...``), graded as ``verify_math_batch`` grades them."""
    items = _validate_math_pairs(pairs)
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
    if not items:
        return []
    show = len(items) >= PROGRESS_MIN_ITEMS if progress is None else bool(progress)
    return mathpool.run_batch(items, workers, float(timeout_s), show, _MATH_WORKER_COMMAND)


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
    ``gold_unparsed`` or ``error``; the boxes are compared with the gold by
    ``grading/mathjudge.py``.  Parsed sympy objects are never turned into
    strings or logged (that can hang outside any timeout).
    """
    answers = extract_boxed_answers(answer_segment(completion))
    if answers is None:
        return "no_answer"
    return mathjudge.grade(answers, gold, _math_alarm_seconds(timeout_s))


def _math_worker_main(parent_pid: int) -> int:
    """Entry point of a math worker (``python verifier.py --math-worker PID``)."""
    return mathpool.serve(parent_pid, _verify_math_inprocess)


# ---------------------------------------------------------------------------
# Code verification
# ---------------------------------------------------------------------------


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
      tokens in plain decimal/scientific notation compared by exact value
      (``1.0`` equals ``1``, ``1e3`` equals ``1000``, any exponent; no tolerance).  A
      stdout longer than 16 times the output's UTF-8 length plus 64 KiB,
      or a numeric token over 100 bytes longer than the expected one,
      never matches (``grading/judge.py``).
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
    if total_timeout_s is not None and not (isinstance(total_timeout_s, (int, float)) and total_timeout_s > 0):
        raise ValueError(f"total_timeout_s must be a positive number, got {total_timeout_s!r}")
    limits = SandboxLimits() if limits is None else limits
    if not isinstance(limits, SandboxLimits):
        raise ValueError("limits must be a SandboxLimits")  # noqa: TRY004 (bad input is a ValueError)
    return _program_verdict(completion, parse_tests(tests), float(timeout_s), total_timeout_s, limits).passed


def _program_verdict(
    completion: str, spec: TestSpec, timeout_s: float, total_timeout_s: float | None, limits: SandboxLimits
) -> Verdict:
    """The verdict on the last python block of ``completion``'s answer segment, run on ``spec``
    (arguments as ``verify_code`` takes them, validated); a broken sandbox raises ``SandboxError``."""
    program = extract_program(answer_segment(completion))
    if program is None:
        return Verdict(passed=False, reason="no_answer")
    if spec.phases == spec.setup_phases:
        return Verdict(passed=False, reason="no_tests")
    budget = timeout_s * spec.phases if total_timeout_s is None else total_timeout_s
    passed = run_tests(sandbox_config(), program, spec, timeout_s, budget, limits)
    return Verdict(passed=passed, reason="correct" if passed else "wrong")


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
    spec = parse_call_tests({"kind": "call", "fn_name": fn_name, "inputs": inputs, "outputs": [None] * len(inputs)})
    values: list[tuple[Any, int]] = []

    def keep(index: int, tag: bytes, payload: bytes) -> bool:
        if index == 0:
            return tag == b"L"
        if tag != b"V":
            return False
        text = payload[:]  # bytes (an mmap's copy: a trusted program's value)
        try:
            # Without any object ({...}) typed JSON is plain JSON: parse it directly
            # (a list of a million floats decodes 50x faster).
            value = json.loads(text) if b"{" not in text else json_normalize(decode_typed(text.decode("utf-8")))
        except (ValueError, TypeError, OverflowError, RecursionError, UnicodeDecodeError):
            return False
        values.append((value, len(text)))
        return True

    limits = SandboxLimits() if limits is None else limits
    # A trusted program's values have no expectation to bound them: the sandbox's frame limit does.
    capture = TestSpec(spec.request, spec.phases, spec.setup_phases, keep, lambda index: sys.maxsize)
    run_tests(sandbox_config(), program, capture, float(timeout_s), timeout_s * spec.phases, limits)
    return values


# ---------------------------------------------------------------------------
# The grading entry of training and evaluation
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What the grader made of one completion (``grade``): whether it passed (a_i), and why.

    ``reason`` is ``correct``, ``wrong`` (a program's crash or timeout included) or ``no_answer``
    (no boxed answer math-verify parses, no python block) when the grader judged the completion;
    where it could not (``grading_error``, ``passed`` False whatever the completion holds):
    ``timeout`` (a math item past its deadline, its worker killed), ``error`` (math-verify
    raised or timed out inside the worker), ``gold_unparsed`` (math-verify cannot parse the
    gold), ``no_tests`` (the tests list no case) or ``error: <exception>: <message>`` (malformed
    tests, a broken sandbox, a judge that raised, a math worker that died).
    """

    passed: bool
    reason: str

    @property
    def grading_error(self) -> bool:
        """The grader reached no verdict on the completion (its reason says why).

        >>> Verdict(passed=False, reason="wrong").grading_error
        False
        >>> Verdict(passed=False, reason="error: ValueError: 2 inputs but 1 outputs").grading_error
        True
        """
        return self.reason in ("timeout", "error", "gold_unparsed", "no_tests") or self.reason.startswith("error: ")


def grade(
    completions: Sequence[str], references: Sequence, domain: str, *, workers: int, timeout_s: float
) -> list[Verdict]:
    """a_i and why, for a batch of completions: the one grading entry of training and evaluation.

    math: `references` are gold answers, graded by math-verify in `workers` killable worker
    processes (verify_math_batch, timeout_s per item). code: `references` are test dicts in
    verify_code's schema, each program run in the sandbox with timeout_s per test, `workers`
    programs at once. The answer segment of each completion is what is graded.

    A grading failure costs its completion only: a = 0 and the reason (``Verdict``), never an
    exception. What raises is what is no completion's: bad arguments, a math worker pool that
    cannot start.
    """
    if len(completions) != len(references):
        raise ValueError(f"grade: {len(completions)} completions but {len(references)} references")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"grade: timeout_s must be a positive number, got {timeout_s!r}")
    if domain == "math":
        statuses = _math_statuses(list(zip(completions, references)), workers, timeout_s, None)
        return [Verdict(passed=status == "correct", reason=status) for status in statuses]
    if domain != "code":
        raise ValueError(f"grade: unknown domain {domain!r}; expected 'math' or 'code'")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda item: _grade_program(*item, float(timeout_s)), zip(completions, references)))


def _grade_program(completion: str, tests: dict, timeout_s: float) -> Verdict:
    """``grade``'s verdict on one program, as ``verify_code`` reaches it; what would raise there
    (malformed tests, a broken sandbox, a judge that raised) is this completion's grading error."""
    try:
        return _program_verdict(completion, parse_tests(tests), timeout_s, None, SandboxLimits())
    except Exception as error:  # noqa: BLE001 (a grading failure costs its completion only, and says why)
        return Verdict(passed=False, reason=f"error: {type(error).__name__}: {error}"[:REASON_CHARS])


def failure_summary(verdicts: Sequence[Verdict]) -> str | None:
    """One line on the completions the grader failed on (``grading_error``; a = 0 for each), their
    commonest reasons first; None when it failed on none. Training and evaluation print it.

    >>> failure_summary([Verdict(passed=False, reason="timeout"), Verdict(passed=True, reason="correct")])
    'the grader failed on 1 of 2 completions (a = 0): 1 x timeout'
    """
    failed = collections.Counter(verdict.reason for verdict in verdicts if verdict.grading_error)
    if not failed:
        return None
    reasons = "; ".join(f"{count} x {reason}" for reason, count in failed.most_common(3))
    more = f"; {len(failed) - 3} other reasons" if len(failed) > 3 else ""
    return f"the grader failed on {failed.total()} of {len(verdicts)} completions (a = 0): {reasons}{more}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--math-worker":
        sys.exit(_math_worker_main(int(sys.argv[2])))
    sys.exit(f"usage: {sys.argv[0]} --math-worker PARENT_PID (internal)")
