"""Test helper: a warm launcher for the tests' runs of credo.py and eval.py.

A run of `python credo.py tiny ...` spends about 11 of its 16 seconds importing torch, transformers
and vLLM. The launcher (tests/warm_launcher.py) is one process per pytest worker that has imported
them, and forks a child for each run: the child takes the run's argv, working directory,
environment and output files, and runs the script as `python <script> <args>` would (runpy, as
`__main__`, then the atexit callbacks), so a test sees the same exit status, output and files as
a fresh process gives.

What a fork cannot give, it refuses: it forks only while the launcher has one thread (a fork copies
only the forking thread; another thread's locks would stay held in the child), and a run whose
environment differs from the launcher's in a variable read while the libraries import (IMPORT_TIME)
fails with a line naming it. The launcher ends with the test process (it watches its parent: a
PR_SET_PDEATHSIG would end it with the thread that started it), and each child with the launcher.

Not here: the tests of run.sh, of signals (SIGTERM, Ctrl-C) and of torchrun: they start real processes.

    launcher = Launcher.start()
    done = launcher.run(["credo.py", "tiny", "max_steps=1"], cwd=ROOT, env=os.environ, timeout=900)
    handle = launcher.spawn(["eval.py", ...], cwd=ROOT, env=env, log=path)  # Popen-like: poll, wait, kill
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Variables the launcher's imports have already read: a run that sets them otherwise is refused.
IMPORT_TIME = (
    "CREDO_VERBOSE",
    "VLLM_LOGGING_LEVEL",
    "VLLM_LOGGING_STREAM",
    "TRANSFORMERS_VERBOSITY",
    "TORCH_CPP_LOG_LEVEL",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "CUDA_VISIBLE_DEVICES",
)
SCRIPTS = ("credo.py", "eval.py")  # what the launcher has imported, and so what it runs


class LauncherError(RuntimeError):
    pass


# --- the test side ---------------------------------------------------------------------------------


class Launcher:
    """The test side: requests go to the launcher's stdin, one JSON line each; its replies (a child's
    pid, then its exit status) come back on its stdout. Threads may share it (worlds/toy_tables.py
    starts its stages from a thread pool): one lock orders the requests and the reading of replies,
    so that a "started" reply reaches the thread whose request it answers."""

    POLL_S = 0.2  # how long a wait holds the lock at a time, so that other threads can spawn

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.buffer = b""
        self.status: dict[int, int] = {}  # pid -> exit status, as its reply arrives
        self.lock = threading.Lock()

    @classmethod
    def start(cls, env: dict | None = None) -> Launcher:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "warm_launcher.py")],
            cwd=ROOT,
            env=dict(os.environ if env is None else env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        launcher = cls(proc)
        ready = launcher._reply(timeout=600)
        if ready != {"ready": True}:
            raise LauncherError(f"the launcher did not start: {ready}")
        return launcher

    def _reply(self, timeout: float | None) -> dict:
        """The launcher's next reply; LauncherError where it ended, TimeoutError after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self.proc.stdout], [], [], left)
            if not readable:
                raise TimeoutError
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise LauncherError(f"the launcher ended (exit {self.proc.wait()})")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        reply = json.loads(line)
        if "error" in reply:
            raise LauncherError(reply["error"])
        if "exited" in reply:
            self.status[reply["exited"]] = reply["status"]
        return reply

    def _pending(self, timeout: float) -> None:
        """Take the replies that have arrived (waiting up to `timeout` s for the first)."""
        with self.lock:
            try:
                self._reply(timeout)
                while b"\n" in self.buffer or select.select([self.proc.stdout], [], [], 0)[0]:
                    self._reply(0)
            except TimeoutError:
                pass

    def spawn(self, argv: list[str], cwd: Path, env: dict, log: Path, stderr: Path | None = None) -> Child:
        """Start `python *argv` in `cwd` with `env`, stdout to `log` and stderr to `stderr` (or `log`)."""
        if argv[0] not in SCRIPTS:
            raise LauncherError(f"the launcher runs {', '.join(SCRIPTS)}, not {argv[0]!r}: start a process")
        if Path(cwd).resolve() != ROOT:  # its imports are this checkout's: a copy's scripts need a process
            raise LauncherError(f"the launcher runs the scripts of {ROOT}, not of {cwd}: start a process")
        request = {"argv": argv, "cwd": str(cwd), "env": dict(env), "stdout": str(log), "stderr": str(stderr or log)}
        with self.lock:  # the launcher answers requests in order: the next "started" is this one's
            try:
                self.proc.stdin.write(json.dumps(request).encode() + b"\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                raise LauncherError(
                    f"the launcher ended (exit {self.proc.wait()}) before {argv[0]} could start"
                ) from None
            while True:
                reply = self._reply(timeout=60)
                if "started" in reply:
                    return Child(self, reply["started"])

    def run(self, argv: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
        """As subprocess.run(python *argv, capture_output=True, text=True, timeout=timeout)."""
        with tempfile.TemporaryDirectory(prefix="credo-warm-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            child = self.spawn(argv, cwd, env, out, err)
            try:
                code = child.wait(timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
                raise
            return subprocess.CompletedProcess(["python", *argv], code, out.read_text(), err.read_text())

    def close(self) -> None:
        """End the launcher: its stdin closes, it waits for its children and exits."""
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class Child:
    """A run the launcher started: subprocess.Popen's poll, wait, kill and returncode."""

    def __init__(self, launcher: Launcher, pid: int):
        self.launcher, self.pid = launcher, pid

    @property
    def returncode(self) -> int | None:
        return self.launcher.status.get(self.pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.launcher._pending(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = Launcher.POLL_S if deadline is None else min(Launcher.POLL_S, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            self.launcher._pending(left)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:  # it has ended; its status is on the way
                pass


class Launchers:
    """The launchers of one test process, one per value of the IMPORT_TIME variables a run asks for
    (each started on first use): `run` and `spawn` as Launcher's, in the checkout, with `env`
    (default: this process's environment)."""

    def __init__(self):
        self.started: dict[tuple, Launcher] = {}
        self.lock = threading.Lock()  # two threads asking for one launcher start it once

    def of(self, env: dict) -> Launcher:
        key = tuple(env.get(var) for var in IMPORT_TIME)
        with self.lock:
            if key not in self.started:
                self.started[key] = Launcher.start(env)
            return self.started[key]

    def run(self, argv: list[str], env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
        env = dict(os.environ if env is None else env)
        return self.of(env).run(argv, ROOT, env, timeout)

    def spawn(self, argv: list[str], log: Path, env: dict | None = None) -> Child:
        env = dict(os.environ if env is None else env)
        return self.of(env).spawn(argv, ROOT, env, log)

    def close(self) -> None:
        for launcher in self.started.values():
            launcher.close()
