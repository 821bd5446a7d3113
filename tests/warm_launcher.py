"""The warm launcher's process (tests/warm.py starts it, one per pytest worker): it imports what
credo.py and eval.py import, says it is ready, then forks one child per request read from stdin,
until stdin closes and its last child has ended.

A request is one JSON line: argv (the script and its arguments), cwd, env, and the stdout and stderr
files. The replies, one JSON line each on stdout: {"ready": true}, {"started": pid}, {"exited": pid,
"status": code} (the code as subprocess reports it: minus the signal for a killed child), or
{"error": why} for a request that cannot be forked.

The child becomes `python <script> <args>`: stdin from /dev/null, its output to the files, the
run's environment and working directory, the unseeded generators of a fresh process, credo.py's
argument check of infra/startup.py, the script run as `__main__`, the atexit callbacks, then
os._exit with the status Python would exit with. It ends with the launcher (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

START_ENV = dict(os.environ)  # as the launcher was started: the IMPORT_TIME variables its imports read
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # after tests/, as pytest's rootdir conftest sees it

from infra import startup  # noqa: E402  first, as credo.py and eval.py import it

# isort: split

import atexit  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import runpy  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import vllm  # noqa: E402, F401  what engine.py loads when an engine starts
from warm import IMPORT_TIME  # noqa: E402

import config  # noqa: E402
import credo  # noqa: E402, F401
import eval as evaluate  # noqa: E402, F401

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def redirect(request: dict) -> None:
    """The child's stdin from /dev/null, stdout and stderr to the request's files."""
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    out = os.open(request["stdout"], flags, 0o644)
    err = out if request["stderr"] == request["stdout"] else os.open(request["stderr"], flags, 0o644)
    os.dup2(out, 1)
    os.dup2(err, 2)


def run_script(argv: list[str], cwd: str) -> int:
    """`python *argv` in this process: the exit status Python would give it."""
    script = Path(cwd) / argv[0]
    sys.argv = list(argv)
    sys.path[0] = str(script.parent)
    try:
        if script.name == "credo.py":
            config.exit_on_bad_run_arguments(argv[1:])  # infra/startup.py's check when credo.py is __main__
        runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:  # sys.exit("message"): the message on stderr, exit 1
            print(done.code, file=sys.stderr)
            code = 1
    except BaseException:  # an uncaught error: its traceback (or startup's one line for Ctrl-C), exit 1
        sys.excepthook(*sys.exc_info())
        code = 1
    atexit._run_exitfuncs()  # the libraries' shutdown; an interrupted run's os._exit(130) is in here
    return code


def run_child(request: dict, channels: tuple[int, int]) -> None:
    """In the forked child: become `python <argv>` and run it; never returns."""
    code = 1
    try:
        for fd in channels:
            os.close(fd)
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        redirect(request)
        env = request["env"]
        changed = [var for var in IMPORT_TIME if env.get(var) != START_ENV.get(var)]
        if changed:
            print(f"warm launcher: {', '.join(changed)} differ from the launcher's: start a process", file=sys.stderr)
            code = 2
            return
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        startup.quiet_libraries(startup.VERBOSE)  # what its import did, for this environment
        if "OMP_NUM_THREADS" in env:
            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        random.seed()  # a fresh process's unseeded generators
        np.random.seed()
        code = run_script(request["argv"], request["cwd"])
    except BaseException:
        sys.excepthook(*sys.exc_info())
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def settle() -> None:
    """Stop the thread pool numpy's OpenBLAS started at import: its pthread_atfork handler stops the
    pool at any fork (a child starts its own on first use, of the size a fresh process's has), so
    one fork of a child that exits at once leaves the launcher with one thread."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def serve() -> None:
    """Fork one child per request until stdin closes and the last child has ended. The launcher
    ends with the test process by watching its parent (polled with the requests): a parent that is
    gone kills every child and ends it. Not PR_SET_PDEATHSIG: the kernel sends that when the *thread*
    that started the launcher ends, and a test may start it from a pool's thread (worlds/toy_tables.py)."""
    parent = os.getppid()
    settle()
    requests, replies = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDWR), 0)
    os.dup2(2, 1)  # nothing the launcher prints can reach the replies

    def reply(message: dict) -> None:
        os.write(replies, json.dumps(message).encode() + b"\n")

    reply({"ready": True})
    children, buffer, reading = set(), b"", True
    while reading or children:
        if os.getppid() != parent:  # the test process is gone (killed): so are its runs
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            os._exit(1)
        readable, _, _ = select.select([requests] if reading else [], [], [], 0.05)
        if readable:
            chunk = os.read(requests, 65536)
            reading = bool(chunk)
            buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            if threads() != 1:  # a fork copies only the forking thread: another's locks stay held
                reply({"error": f"the launcher has {threads()} threads; it forks only with one"})
                continue
            pid = os.fork()
            if pid == 0:
                run_child(request, (requests, replies))
            children.add(pid)
            reply({"started": pid})
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                reply({"exited": pid, "status": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
