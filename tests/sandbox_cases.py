"""Shared by test_verifier.py, test_sandbox.py and test_mathpool.py: the isolation
modes (conftest.py makes them the fixtures ``mode`` and ``any_mode``), the
leftover check, and the programs and tests they grade.

Every attack must score False and finish within its time bound + 2 s.  The
suites run in every isolation mode available on the machine (namespaces;
plain, when a plain sandbox can be started), with the guarantees that hold in
that mode.
"""

import contextlib
import glob
import os
import resource
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest

import verifier
from grading import sandbox

ROOT = Path(__file__).resolve().parent.parent
SLACK_S = 2.0
ATTACK_TIMEOUT_S = 1.0

# A distinctive expected value: no attack can hit it by coincidence.
X, EXPECTED = 1234567, 2469134
STDIO = {"kind": "stdio", "inputs": [f"{X}\n"], "outputs": [f"{EXPECTED}\n"]}
CALL = {"kind": "call", "fn_name": "double", "inputs": [[X]], "outputs": [EXPECTED]}
ASSERT = {
    "kind": "assert",
    "entry_point": "double",
    "test": f"def check(candidate):\n    assert candidate({X}) == {EXPECTED}\n",
}
TESTS = {"stdio": STDIO, "call": CALL, "assert": ASSERT}
PHASES = {"stdio": 1, "call": 2, "assert": 1}  # call: module load + one test

# Appended to every attack: stdio runs print double(input); call/assert runs
# have /dev/null as stdin, so main() returns at once.
STDIO_MAIN = """
def _main():
    try:
        value = int(input())
    except Exception:
        return
    print(double(value))

_main()
"""


def completion(source: str) -> str:
    """A completion whose answer segment holds ``source`` as a python block."""
    body = textwrap.dedent(source).strip()
    return f"Here is my solution.\n```python\n{body}\n```\n<analysis>sure</analysis> <confidence>0.9</confidence>"


def attack(source: str) -> str:
    return completion(textwrap.dedent(source) + STDIO_MAIN)


# ---------------------------------------------------------------------------
# Isolation modes
# ---------------------------------------------------------------------------


def _plain_config(landlock=True):
    """A plain-mode config this machine can run (with Landlock where the kernel
    has it, unless ``landlock`` is false), or None."""
    root = os.geteuid() == 0
    python = "/usr/bin/python3" if root else sys.executable
    if not os.path.exists(python):
        return None
    config = sandbox._SandboxConfig(
        "plain", python, landlock=landlock and sandbox._landlock_abi() >= 1, tmpfs_workdir=sandbox.tmpfs_workdirs_work()
    )
    return config if sandbox._probe(config) is None else None


_MODES = {}


def _namespaces_config():
    """The namespaces-mode config, or None where user namespaces do not work."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    config = sandbox._SandboxConfig("namespaces", sys.executable, unshare=unshare)
    return config if sandbox._probe(config) is None else None


def _mode_config(name):
    """The config of mode ``name``: namespaces, plain, or plain-no-landlock
    (plain mode as on a kernel without Landlock); None where it cannot run."""
    if name not in _MODES:
        makers = {
            "namespaces": _namespaces_config,
            "plain": _plain_config,
            "plain-no-landlock": lambda: _plain_config(landlock=False),
        }
        _MODES[name] = makers[name]()
    return _MODES[name]


def use_mode(name, monkeypatch):
    """Make the sandbox run in mode ``name`` for this test; skip where it cannot run."""
    config = _mode_config(name)
    if config is None:
        pytest.skip(f"{name} sandbox not available on this machine")
    monkeypatch.setattr(sandbox, "_CONFIG", config)


@contextlib.contextmanager
def many_descriptors(count=1100):
    """Hold ``count`` open descriptors (numbers past select()'s 1023) for the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < count + 100:
        pytest.skip(f"the descriptor limit is below {count + 100}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(count)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


OWN_SANDBOX_TAG = f"credo-sandbox:{os.getpid()}\0".encode()


def _sandbox_processes():
    """Live processes of sandboxes started by this test process."""
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if OWN_SANDBOX_TAG in Path(path).read_bytes():
                found.append(path)
        except OSError:
            pass
    return found


def assert_defeated(kind, source, limits=None, timeout_s=ATTACK_TIMEOUT_S):
    """The attack ``source`` scores False on the kind's tests within its time bound plus SLACK_S
    (see ``assert_false_within``)."""
    assert_false_within(
        lambda: verifier.verify_code(attack(source), TESTS[kind], timeout_s=timeout_s, limits=limits),
        timeout_s * PHASES[kind],
        kind,
    )


def assert_false_within(verdict, bound, kind="call"):
    """``verdict()`` is False within ``bound`` (the grading budgets it was given) plus SLACK_S. On a
    machine so loaded that even a correct program's verdict is slow (CI beside other jobs), the
    slack grows by three times what a correct program of ``kind`` takes right now. Load comes in
    bursts that one measurement can miss, so an attempt over its bound is repeated once and the slack
    measured again: a verdict that stalls stalls every time and still fails, a busy CPU rarely twice
    in a row."""
    for _attempt in range(2):
        start = time.monotonic()
        assert verdict() is False
        elapsed = time.monotonic() - start
        if elapsed < bound + SLACK_S:
            return
        start = time.monotonic()
        assert verifier.verify_code(attack(CORRECT["call"]), TESTS[kind]) is True  # double(), for every kind
        busy = time.monotonic() - start
        if elapsed < bound + SLACK_S + 3 * busy:
            return
    raise AssertionError(f"took {elapsed:.2f} s twice over, bound {bound} s (a correct program: {busy:.2f} s)")


# ---------------------------------------------------------------------------
# Correct programs, and the kinds of tests
# ---------------------------------------------------------------------------

CORRECT = {
    "stdio": "print(int(input()) * 2)",
    "call": "def double(x):\n    return 2 * x",
    "assert": "def double(x):\n    return x + x",
}

KINDS = ["stdio", "call", "assert"]
