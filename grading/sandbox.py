"""The code sandbox, parent side: start a sandboxed interpreter, bound it, read
its frames, kill it.

``run_tests`` runs one program on one ``TestSpec`` (built by ``grading/judge.py``)
and passes each frame the child sends to the spec's judge; this module never
sees an expected output.  The code that runs inside the sandbox lives in
``grading/sandbox_child.py``, ``grading/sandbox_lockdown.py`` and ``grading/typed_json.py``: this
module never imports them; it reads them as text once, has each sandbox
interpreter compile the script once (``_child_code``), and sends the code
object ahead of the request to a small ``python -I -c`` loader.

Isolation of every sandbox child (all modes):

* a fresh interpreter (``python -I``: no user site, no ``PYTHON*``
  variables, no current directory on ``sys.path``), ``start_new_session``,
  scrubbed environment, an empty private writable working directory;
* an unprivileged identity: under a root parent every sandbox gets a uid/gid
  of its own (``sandbox_resources.UidPool``), so ``RLIMIT_NPROC`` counts only
  its own threads and no sandbox can read, write or signal another's; under
  a non-root parent the program has the parent's uid;
* resource limits set by the trusted harness before any program code runs:
  address space (``memory_mb`` for the whole sandbox, shared out among its
  interpreters), CPU seconds, processes (threads count), file size, open
  files, no core dumps; umask 077;
* ``PR_SET_NO_NEW_PRIVS``, all capabilities dropped, not dumpable, and a
  seccomp filter (``sandbox_lockdown.seccomp_program`` lists it) that denies
  process creation, ``execve``, signals to and acting on any process but
  itself, sockets other than a connected ``AF_UNIX`` stream pair, the kernel
  keyring, IPC objects, and the shared kernel state through which one
  sandbox could leave a signal for another (file locks, inotify, page-cache
  eviction and residency probes, non-private futexes, KSM merging, the
  huge-page pool, permission bits for others);
* a per-test time limit and a total wall-clock cap enforced by the parent,
  which ends every run, on every exit path, by killing the sandbox's
  processes deepest first and then its process group.  Since the program can
  neither fork nor leave its process group, that reaches every process it
  could have started.

What the parent reads back is bounded before anything is built from it: a
frame's payload is at most ``file_size_mb`` + 1 MiB and at most what its
judge could accept (``TestSpec.payload_bound``, set by the expectation); a
larger one is refused from its header, unread (``_Sandbox.next_frame``).  A
payload over 1 MiB is received into an anonymous mmap of its announced size,
whose pages cost memory only as bytes arrive, and is never copied.

The clock measures the program, never the parent.  The child's fd 1 is a
stream socket, and the parent receives each header and each payload in one
``recv`` (``MSG_WAITALL``), in the kernel, with the interpreter lock released:
a header is on time when it arrives by the test's deadline or is waiting when
the parent looks, however late the parent looks, and a payload's bytes may
keep the parent waiting for at most the per-test limit in all, counted by the
kernel (``SO_RCVTIMEO``).  Time the parent spends judging other programs or
waiting for the interpreter lock is never charged to a program.

Namespaces mode (used when ``unshare`` works, detected at the first call):
the harness runs under ``unshare`` (``namespace_command``) with its own PID,
network, IPC, UTS and mount namespaces, and pivots into a minimal read-only
root (``sandbox_lockdown.isolate_filesystem``) whose only writable place is a
size-limited tmpfs, its working directory.  Under a root parent it then
switches to its own uid; no user namespace is created.

Plain mode (no namespaces): no PID, network or mount isolation.  The seccomp
filter still applies.  Where the kernel has Landlock (Linux 5.13+;
``sandbox_lockdown.landlock``) the harness restricts file access before any
program code runs: read and execute only below the system's program
directories and the interpreter's prefixes and executable, the five device
nodes, and everything in the private working directory (a size-limited
tmpfs where the parent may mount, ``sandbox_resources``).  Without Landlock
(a warning is logged) a program can read world-readable files and create
files in world-writable places, which outlive the verdict; others cannot
read their contents (umask 077, no permission bits for others) but can see
their names.  Under a root parent the program runs as its sandbox's own
uid, which must be able to run the interpreter (``CREDO_SANDBOX_PYTHON``);
under a non-root parent it has the parent's uid and shares that user's
process limit.  What remains open in each mode: docs/verifier.md.

Not a container: no mode limits the kernel attack surface beyond the
seccomp list; run the training job inside a container or VM as well.

Environment: ``CREDO_SANDBOX`` is ``auto`` (default: namespaces if they work,
else plain with a logged warning), ``namespaces`` (refuse to run without them)
or ``plain``; ``CREDO_SANDBOX_PYTHON`` the interpreter for sandboxed programs
(default ``sys.executable``).

Linux only (x86-64 and aarch64 seccomp tables).

Not here: the test schemas and the comparisons of outputs (``grading/judge.py``),
the code that runs inside the sandbox (see above), the uid pool and the
working directory (``grading/sandbox_resources.py``), math grading (``verifier.py``,
``grading/mathpool.py``).
"""

from __future__ import annotations

import ctypes
import logging
import marshal
import math
import mmap
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from grading.sandbox_resources import (
    STOP_ROUNDS,
    UidPool,
    descendants,
    kill_and_wait,
    kill_group,
    make_workdir,
    namespace_command,
    reap,
    remove_workdir,
    sandbox_tag,
    scrubbed_environment,
    tmpfs_workdirs_work,
)

logger = logging.getLogger(__name__)

_HERE = Path(os.path.abspath(__file__)).parent  # where the child's files are (fixed at import)


# ---------------------------------------------------------------------------
# Public API
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


def sandbox_mode() -> str:
    """The isolation mode in use: ``"namespaces"`` or ``"plain"``.

    Detected (by running a probe program) on first use and cached; see the
    ``CREDO_SANDBOX`` environment variable in the module docstring.
    """
    return sandbox_config().mode


@dataclass(frozen=True)
class TestSpec:
    """Validated tests: what the child gets and how the parent judges.

    ``request`` goes to the sandbox and never contains expected outputs.
    After the ready frame the child sends ``phases`` frames; frame ``i`` is
    accepted when ``judge(i, tag, payload)`` is true.  A frame whose payload
    is longer than ``payload_bound(i)`` bytes is refused unread: the judge
    must reject every such payload.  The payload is a read-only bytes-like
    buffer (``bytes`` up to 1 MiB, an ``mmap`` above: judges use ``len``,
    indexing, slicing, ``find`` and ``re``).  ``setup_phases`` counts the
    phases that are not tests (``call``: loading the module).
    """

    request: dict
    phases: int
    setup_phases: int
    judge: Callable[[int, bytes, bytes], bool]
    payload_bound: Callable[[int], int]


# ---------------------------------------------------------------------------
# Configuration: mode and interpreter, detected once
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _SandboxConfig:
    """How sandbox children are started: mode and interpreter."""

    mode: str  # "namespaces" or "plain"
    python: str
    unshare: str | None = None
    landlock: bool = False  # plain mode: the harness restricts file access with Landlock
    tmpfs_workdir: bool = False  # plain mode: the working directory is a tmpfs (sandbox_workdir)


_CONFIG: _SandboxConfig | None = None
_CONFIG_LOCK = threading.Lock()


def sandbox_config() -> _SandboxConfig:
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
        logger.warning(
            "code sandbox: namespaces unavailable (%s); using plain mode (no PID, network or file-system isolation)",
            problem,
        )
    landlock = _landlock_abi() >= 1
    if not landlock:
        logger.warning(
            "code sandbox: plain mode without Landlock (Linux 5.13+): programs "
            "can read world-readable files and write world-writable places"
        )
    tmpfs = tmpfs_workdirs_work()
    if not tmpfs:
        logger.warning(
            "code sandbox: plain mode cannot mount a tmpfs working directory (not "
            "root): the number and total size of a program's files are unbounded"
        )
    candidate = _SandboxConfig("plain", python, landlock=landlock, tmpfs_workdir=tmpfs)
    problem = _probe(candidate)
    if problem is not None:
        hint = " (as root the sandbox runs as an unprivileged uid, which must be able to run "
        hint += f"{python}; set CREDO_SANDBOX_PYTHON)" if os.geteuid() == 0 else ""
        raise SandboxError(f"the plain code sandbox does not work: {problem}{hint}")
    return candidate


def _landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 without Landlock); the plain-mode
    harness restricts file access with it (see ``sandbox_lockdown.landlock``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    landlock_create_ruleset, version_flag = 444, 1
    return max(0, libc.syscall(landlock_create_ruleset, None, ctypes.c_size_t(0), ctypes.c_uint32(version_flag)))


def _probe(config: _SandboxConfig) -> str | None:
    """Run a known program under ``config``; ``None`` if it works, else why."""
    spec = TestSpec(
        {"kind": "stdio", "inputs": [b"probe\n"]},
        1,
        0,
        lambda index, tag, payload: (tag, payload) == (b"O", b"eborp\n"),
        lambda index: 6,
    )
    try:
        passed = run_tests(config, "print(input()[::-1])", spec, 30.0, 30.0, SandboxLimits(), capture_stderr=True)
    except SandboxError as error:
        return str(error)
    return None if passed else "the probe program did not produce its output"


# ---------------------------------------------------------------------------
# Running one sandbox
# ---------------------------------------------------------------------------

_FRAME_HEADER = 9  # one tag byte, then the payload length as 8 big-endian bytes
_SMALL_PAYLOAD = 1 << 20  # a payload up to this size is received into memory; above, into an anonymous mmap
_SETUP_PAYLOAD = 1 << 20  # the most a frame sent before any program code runs may hold (F: an error)


def run_tests(
    config: _SandboxConfig,
    program: str,
    spec: TestSpec,
    timeout_s: float,
    budget_s: float,
    limits: SandboxLimits,
    capture_stderr: bool = False,
) -> bool:
    """Run ``program`` on ``spec`` in a sandbox and judge the frames it sends."""
    interpreters = 2 if spec.request["kind"] == "assert" else 1
    request = dict(
        spec.request,
        program=program,
        namespaces=config.mode == "namespaces",
        landlock=config.landlock,
        limits=_child_limits(limits, budget_s, interpreters),
    )
    if spec.request["kind"] == "assert":
        request.update(loader=_CODE_LOADER, code=_child_code(config.python))
    with _Sandbox(config, request, limits, capture_stderr) as sandbox:
        _wait_until_ready(sandbox, limits.startup_grace_s)
        end = time.monotonic() + budget_s
        for index in range(spec.phases):
            deadline = min(time.monotonic() + timeout_s, end)
            frame = sandbox.next_frame(deadline, spec.payload_bound(index), timeout_s)
            if frame is None or not spec.judge(index, *frame):
                return False
        return True


def _wait_until_ready(sandbox: _Sandbox, grace_s: float) -> None:
    """Wait for the harness's ready frame; raise SandboxError if it fails.

    Only frames sent before the ready frame can raise: until then no program
    code has run, so a program cannot make the parent raise.
    """
    frame = sandbox.next_frame(time.monotonic() + grace_s, _SETUP_PAYLOAD, grace_s)
    if frame is None:
        raise SandboxError(f"the sandbox did not become ready within {grace_s:.1f} s{sandbox.diagnostics()}")
    tag, payload = frame
    if tag == b"F":
        raise SandboxError(f"sandbox set-up failed: {payload.decode(errors='replace')}")
    if tag != b"R":
        raise SandboxError(f"unexpected first frame {tag!r} from the sandbox")


def _child_limits(limits: SandboxLimits, budget_s: float, interpreters: int) -> dict:
    """Resource limits as the child harness applies them (bytes, seconds).

    ``memory_mb`` bounds the sandbox as a whole: each of its ``interpreters``
    (two for ``assert``: harness and program server) gets an equal share of
    address space, and a program cannot start another process.
    """
    return {
        "memory": (limits.memory_mb << 20) // interpreters,
        "cpu_s": math.ceil(limits.startup_grace_s + budget_s) + 1,
        "processes": limits.processes,
        "file_size": limits.file_size_mb << 20,
        "open_files": limits.open_files,
        "tmpfs": limits.tmpfs_mb << 20,
    }


class _Sandbox:
    """One sandboxed child: started on enter, killed (whole group) on exit."""

    def __init__(self, config: _SandboxConfig, request: dict, limits: SandboxLimits, capture_stderr: bool) -> None:
        self.config = config
        self.request = request
        self.max_payload = (limits.file_size_mb << 20) + (1 << 20)
        self.capture_stderr = capture_stderr
        self.proc: subprocess.Popen | None = None
        self.uid: int | None = None  # this sandbox's own uid (root parent only)
        self.tmpfs_bytes = limits.tmpfs_mb << 20
        self.workdir: str | None = None
        self.stderr_file = None
        self.channel: socket.socket | None = None  # the parent's end of the child's fd 1

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
            if self.uid is None:
                raise SandboxError("more than 1,024 concurrent sandboxes")
        cwd = "/" if namespaces else self._make_workdir()
        home = "/tmp" if namespaces else cwd
        code = _child_code(self.config.python)
        command = [self.config.python, "-I", "-c", _CODE_LOADER, sandbox_tag(), "harness"]
        identity, switch_to = {}, None
        if namespaces:
            command = namespace_command(self.config.unshare, as_root=self.uid is not None) + command
            switch_to = self.uid  # the harness switches after building the mount namespace
        elif self.uid is not None:
            identity = {"user": self.uid, "group": self.uid, "extra_groups": []}
        if self.capture_stderr:
            self.stderr_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__)
        # The child's fd 1 is a stream socket, not a pipe: the parent receives a whole frame in one
        # call, in the kernel, with the kernel's clock on the waits (_Sandbox._receive).
        self.channel, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.channel.setblocking(True)
        with tempfile.TemporaryFile() as request_file, child_end:
            request_file.write(len(code).to_bytes(8, "big") + code)
            request_file.write(marshal.dumps(dict(self.request, uid=switch_to)))
            request_file.seek(0)
            try:
                self.proc = subprocess.Popen(
                    command,
                    stdin=request_file,
                    stdout=child_end.fileno(),
                    stderr=self.stderr_file or subprocess.DEVNULL,
                    cwd=cwd,
                    env=scrubbed_environment(home),
                    start_new_session=True,
                    close_fds=True,
                    **identity,
                )
            except OSError as error:
                raise SandboxError(f"cannot start the sandbox: {error}") from None

    def _make_workdir(self) -> str:
        """The private working directory of plain mode (``sandbox_resources``)."""
        tmpfs = self.tmpfs_bytes if self.config.tmpfs_workdir else None
        try:
            self.workdir, work = make_workdir(self.uid, tmpfs)
        except OSError as error:
            raise SandboxError(f"cannot make the sandbox's working directory: {error}") from None
        return work

    def next_frame(self, deadline: float, max_payload: int, wait_s: float) -> tuple[bytes, bytes | mmap.mmap] | None:
        """The next frame ``(tag, payload)``, or ``None``: its header is not there by ``deadline``
        (nor waiting when this process looks, however late), its payload is longer than
        ``max_payload`` bytes (refused unread), or its bytes keep the parent waiting for more than
        ``wait_s`` in all (the kernel's count: time this process spends elsewhere, judging or
        waiting for the interpreter lock, is never charged), or the stream ends or is garbage."""
        header = bytearray(_FRAME_HEADER)
        if not self._receive(header, deadline - time.monotonic()):
            return None
        length = int.from_bytes(header[1:], "big")
        if length > min(max_payload, self.max_payload):
            return None
        if length == 0:
            return bytes(header[:1]), b""
        # An mmap's pages cost memory only once written: a payload announced but never sent costs nothing.
        payload = bytearray(length) if length <= _SMALL_PAYLOAD else mmap.mmap(-1, length)
        if not self._receive(payload, wait_s):
            return None
        return bytes(header[:1]), bytes(payload) if length <= _SMALL_PAYLOAD else payload

    def _receive(self, buffer: bytearray | mmap.mmap, wait_s: float) -> bool:
        """Fill ``buffer`` from the child in one ``recv`` (``MSG_WAITALL``): the kernel copies the
        bytes as they come, the interpreter lock released throughout, and its receive timeout
        bounds the time spent waiting for them to ``wait_s`` in all (``SO_RCVTIMEO`` is a budget
        across the call's waits). Not positive: only what is there already. False unless filled:
        on the end of the stream, the timeout, or a program's ancillary data (which stops the call
        short; its descriptors are closed by the kernel unread)."""
        flags = socket.MSG_WAITALL
        if wait_s <= 0:
            flags |= socket.MSG_DONTWAIT
        else:
            seconds = min(int(wait_s), 1 << 30)
            timeout = struct.pack("@ll", seconds, max(1, int((wait_s - seconds) * 1_000_000)))
            self.channel.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeout)
        try:
            with memoryview(buffer) as view:
                return self.channel.recv_into(view, len(view), flags) == len(view)
        except OSError:  # EAGAIN: the timeout passed with nothing received
            return False

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
        the rest of the namespace), listed again until none is left (one
        started meanwhile is caught by the next listing).  Killing the whole group at once would
        orphan them as zombies for the host's PID 1, and a PID 1 that never
        reaps (a container without an init) would collect them.
        """
        if self.proc is None or self.proc.returncode is not None:
            return
        for _ in range(STOP_ROUNDS):  # a process started while the listed ones died is listed next round
            below = descendants(self.proc.pid)
            if not below:
                break
            for pid in reversed(below):
                kill_and_wait(pid)
        kill_group(self.proc)  # before reaping: the pgid cannot be reused yet
        reap(self.proc)

    def __exit__(self, *exc_info) -> None:
        try:
            self._stop()
            if self.channel is not None:
                self.channel.close()
            if self.stderr_file is not None:
                self.stderr_file.close()
            if self.workdir is not None:
                _remove_workdir(self.workdir)
        finally:
            if self.uid is not None:
                _SANDBOX_UIDS.release(self.uid)  # every process of the sandbox is dead
                self.uid = None


def _remove_workdir(base: str) -> None:
    """Remove a working directory; no program can make that fail (its processes
    are dead, and whatever it left is removed), so a failure is the sandbox's."""
    try:
        remove_workdir(base)
    except OSError as error:
        raise SandboxError(f"cannot remove the sandbox's working directory: {error}") from None


_SANDBOX_UIDS = UidPool()


# ---------------------------------------------------------------------------
# The child's script (read as text, never imported)
# ---------------------------------------------------------------------------

# The child-side modules spliced into grading/sandbox_child.py's text, each in place of
# its one ``from MODULE import ...`` line; none of them imports a module of ours.
_SPLICED_MODULES = ("sandbox_lockdown", "typed_json")
_CHILD_SCRIPT: str | None = None
_CHILD_CODE: dict[str, bytes] = {}  # interpreter -> the child script compiled by it
_CHILD_CODE_LOCK = threading.Lock()
# The harness's ``-c`` program: it reads the child script's code object from
# stdin, ahead of the request, and runs it as ``__main__`` (compiling the
# script in every sandbox was about a third of its start-up).
_CODE_LOADER = """import marshal, os
size, code = int.from_bytes(os.read(0, 8), "big"), b""
while len(code) < size:
    code += os.read(0, size - len(code))
exec(marshal.loads(code), {"__name__": "__main__", "__builtins__": __builtins__})
"""
_COMPILER = (
    "import marshal, sys\nsys.stdout.buffer.write(marshal.dumps(compile(sys.stdin.read(), '<sandbox-child>', 'exec')))"
)


def _child_script() -> str:
    """Source of the sandbox child program (read once from grading/sandbox_child.py)."""
    global _CHILD_SCRIPT
    if _CHILD_SCRIPT is None:
        _CHILD_SCRIPT = _assemble_child_script(_HERE)
    return _CHILD_SCRIPT


def _child_code(python: str) -> bytes:
    """The child script compiled and marshalled by the sandbox interpreter
    ``python`` itself (once per interpreter: marshal formats differ between versions)."""
    with _CHILD_CODE_LOCK:
        if python not in _CHILD_CODE:
            done = subprocess.run(
                [python, "-I", "-c", _COMPILER],
                input=_child_script().encode(),
                capture_output=True,
                timeout=120,
                check=False,
            )
            if done.returncode != 0 or not done.stdout:
                raise SandboxError(
                    f"{python} cannot compile the sandbox child script: {done.stderr.decode(errors='replace')[-500:]}"
                )
            _CHILD_CODE[python] = done.stdout
        return _CHILD_CODE[python]


def _assemble_child_script(directory: Path) -> str:
    """``grading/sandbox_child.py`` with each spliced module's text in place of its import line."""
    script = (directory / "sandbox_child.py").read_text()
    for name in _SPLICED_MODULES:
        lines = re.findall(rf"^from {name} import (?:[\w, ]+|\([\w,\s]+\))$", script, flags=re.MULTILINE)
        if len(lines) != 1:
            raise SandboxError(
                f"sandbox_child.py must have exactly one 'from {name} import' statement, found {len(lines)}"
            )
        script = script.replace(lines[0], (directory / f"{name}.py").read_text())
    return script
