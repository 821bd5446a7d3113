"""sandbox.py and the code that runs inside it: isolation, limits, killing, zombies,
the uid pool, typed JSON, the child script, and the exploit suite.

Every attack in the exploit suite must score False and finish within its time
bound + 2 s, in every isolation mode available on the machine (see
sandbox_cases.py).  Attacks that would succeed against a naive in-process
grader are shown to do so (the "control" tests), so the suite cannot pass
vacuously.
"""

import ast
import collections
import dataclasses
import doctest
import glob
import json
import marshal
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sandbox_cases import (
    ASSERT,
    CALL,
    CORRECT,
    EXPECTED,
    KINDS,
    ROOT,
    SLACK_S,
    STDIO,
    STDIO_MAIN,
    TESTS,
    X,
    _mode_config,
    _sandbox_processes,
    assert_defeated,
    assert_false_within,
    attack,
    completion,
    many_descriptors,
    use_mode,
)

import verifier
from grading import sandbox, sandbox_lockdown, sandbox_resources, typed_json

pytestmark = pytest.mark.usefixtures("no_leftovers")


def test_typed_encoding_round_trip_and_sanitization():
    value = [
        1,
        -2.5,
        float("inf"),
        "s\u00e9\n",
        None,
        True,
        (1, (2,)),
        {3: [4]},
        {frozenset({1})},
        b"\x00\xff",
        1 + 2j,
        {"k": {"v"}},
    ]
    assert typed_json.decode_typed(typed_json.encode(value)) == value

    class Sneaky(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

        def __repr__(self):
            return "6"

    decoded = typed_json.decode_typed(typed_json.encode([Sneaky(2)]))
    assert decoded == [2] and type(decoded[0]) is int

    class AlwaysEqual:
        def __eq__(self, other):
            return True

    with pytest.raises(TypeError):
        typed_json.encode([AlwaysEqual()])


@pytest.mark.parametrize("kind", ["stdio", "call", "assert"])
def test_interpreter_under_tmp_stays_reachable(monkeypatch, kind):
    """A checkout (and its venv) under /tmp, as CI clones it: the sandbox must still start
    its interpreters after isolating the file system (regression: a tmpfs over /tmp hid it)."""
    config = _mode_config("namespaces")
    if config is None:
        pytest.skip("namespaces sandbox not available on this machine")
    home = tempfile.mkdtemp(dir="/tmp", prefix="credo-test-python-")
    try:
        python = os.path.join(home, "python3")
        os.symlink(os.path.realpath(sys.executable), python)
        monkeypatch.setattr(sandbox, "_CONFIG", sandbox._SandboxConfig("namespaces", python, unshare=config.unshare))
        assert verifier.verify_code(completion(CORRECT[kind]), TESTS[kind]) is True
    finally:
        shutil.rmtree(home)


def test_time_limits_are_per_test_and_total(any_mode):
    source = "import time\ntime.sleep(0.4)\nprint(input())"
    tests = {"kind": "stdio", "inputs": ["a", "b", "c"], "outputs": ["a", "b", "c"]}
    assert verifier.verify_code(completion(source), tests, timeout_s=1.0) is True  # 3 x 0.4 s: each test has 1 s
    assert_false_within(
        lambda: verifier.verify_code(completion(source), tests, timeout_s=1.0, total_timeout_s=0.6), 0.6
    )
    assert_false_within(lambda: verifier.verify_code(completion(source), tests, timeout_s=0.2), 0.2)


def test_sandbox_mode_follows_the_environment(monkeypatch):
    monkeypatch.setenv("CREDO_SANDBOX", "bogus")
    sandbox._forget_sandbox_config()
    try:
        with pytest.raises(ValueError, match="CREDO_SANDBOX"):
            verifier.sandbox_mode()
        for name in ("namespaces", "plain"):
            config = _mode_config(name)
            if config is not None:
                monkeypatch.setenv("CREDO_SANDBOX", name)
                monkeypatch.setenv("CREDO_SANDBOX_PYTHON", config.python)
                sandbox._forget_sandbox_config()
                assert verifier.sandbox_mode() == name
    finally:
        monkeypatch.undo()
        sandbox._forget_sandbox_config()


def _children(state: str | None = None) -> list[int]:
    """Pids of this process's children (in `state`, e.g. "Z" for zombies; any if None)."""
    found = []
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(path).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and state in (None, fields[0]):
            found.append(int(path.split("/")[2]))
    return found


def _command(pid: int) -> str:
    """The command name of process `pid` as /proc/<pid>/stat gives it (a zombie keeps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split("(", 1)[1].rsplit(")", 1)[0]
    except OSError:
        return "(gone)"


def _orphans_of(action):
    """Run ``action`` as a child subreaper; the zombies orphaned to this process.

    While this process is a child subreaper, anything a sandbox orphans is
    reparented to it and shows up as a zombie child (instead of for PID 1).
    Children this process had before (math workers of earlier tests, which may
    die and wait for their pool to reap them) are not orphans and are left alone.
    Nor is a zombie that this process's own code reaps within 2 s (a reaper slowed
    by a starved machine): with two test runs side by side (load 5-9 on 2 cores)
    this check found one zombie 0.2 s after the action in each of four runs, and
    passed alone; where it came from was not recorded. An orphan handed to this
    process is reaped by nobody else, so it is still there after 2 s. Each is
    named by its pid and command, so that a failure says what it was.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_child_subreaper = 36
    before = set(_children())
    assert libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0
    orphans = []
    try:
        action()
        deadline = time.monotonic() + 2.0
        while True:
            time.sleep(0.2)
            orphans = [pid for pid in _children("Z") if pid not in before]
            if not orphans or time.monotonic() > deadline:
                break
        return [f"{pid} {_command(pid)}" for pid in orphans]
    finally:
        libc.prctl(pr_set_child_subreaper, 0, 0, 0, 0)
        for pid in orphans:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:  # reaped after all, between the scan and here
                pass


def test_no_orphaned_zombies(mode):
    """Sandbox processes are reaped, not orphaned for PID 1 to reap."""

    def runs():
        assert verifier.verify_code(completion(CORRECT["stdio"]), STDIO) is True
        assert verifier.verify_code(completion(C_LOOP), STDIO, timeout_s=0.3) is False

    assert _orphans_of(runs) == []


# Program servers that do not exit when the harness closes their pipes: a thread that never
# ends keeps the interpreter alive, so does an exit handler that never returns, and a program
# can replace the os.read that the server's own loop calls.
STUBBORN_SERVERS = {
    "plain": CORRECT["assert"],
    "endless_thread": "import threading, time\n"
    "threading.Thread(target=lambda: time.sleep(10 ** 6)).start()\n" + CORRECT["assert"],
    "endless_exit_handler": "import atexit, time\natexit.register(lambda: time.sleep(10 ** 6))\n" + CORRECT["assert"],
    "never_reads_eof": "import os, time\n"  # B's own next read never returns
    "def double(x):\n"
    "    os.read = lambda *args: time.sleep(10 ** 6)\n"
    "    return x + x\n",
}


@pytest.mark.parametrize("server", sorted(STUBBORN_SERVERS))
def test_no_orphaned_zombies_of_the_assert_kind(mode, server):
    """As above for the assert kind, whose harness A starts a program server B. A waits for
    B before it exits (``sandbox_child.end_server``); before it did, B was orphaned (one
    `python3` zombie) in 4 of 6 runs beside 8 busy loops (0 of 12 since), and in every run of
    two test suites side by side. A B that never exits keeps A waiting, not the verdict: the
    parent, which has it, kills B and then A."""
    source = STUBBORN_SERVERS[server]
    results = []
    assert _orphans_of(lambda: results.append(verifier.verify_code(completion(source), ASSERT))) == []
    assert results == [True]


def test_a_killed_process_is_waited_for_until_its_parent_reaps_it():
    """kill_and_wait returns only once the process is gone from /proc, even when its parent
    reaps it 2 s after the kill (a starved machine looks like this): returning earlier lets
    the sandbox's group kill orphan it as a zombie."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import subprocess, sys, time\n"
                "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                "print(child.pid, flush=True)\n"
                "sys.stdin.readline()\n"  # told the child was killed: reap it 2 s later
                "time.sleep(2.0)\n"
                "child.wait()\n"
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid = int(parent.stdout.readline())
        os.kill(pid, 0)
        threading.Timer(0.1, lambda: (parent.stdin.write("killed\n"), parent.stdin.flush())).start()
        start = time.monotonic()
        sandbox_resources.kill_and_wait(pid)
        assert not os.path.exists(f"/proc/{pid}")  # gone: reaped by its own parent
        assert time.monotonic() - start >= 1.5  # which took its 2 s
    finally:
        parent.kill()
        parent.wait()


def test_child_script_fits_in_one_argument():
    """The child program travels as one argv string (Linux: at most 128 KiB)."""
    script = sandbox._child_script()
    compile(script, "<sandbox-child>", "exec")
    assert len(script.encode()) < 128 * 1024 - 1


CHILD_FILES = ("sandbox_child.py", "sandbox_lockdown.py", "typed_json.py")


def test_child_script_is_the_child_files_and_nothing_else():
    """The script is grading/sandbox_child.py with the two spliced modules in place of their
    imports: at its top level only docstrings, standard-library imports, functions
    and the call of main; no constant, no parent global, no import of ours."""
    script = sandbox._child_script()
    for name in CHILD_FILES:
        assert (ROOT / "grading" / name).read_text().split('"""', 2)[2].split("\nfrom ")[0] in script
    tree = ast.parse(script)
    kinds = collections.Counter(type(node).__name__ for node in tree.body)
    assert kinds["Expr"] == len(CHILD_FILES)  # the three module docstrings
    assert kinds["If"] == 1 and set(kinds) == {"Expr", "Import", "FunctionDef", "If"}  # no "from": all spliced
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"builtins", "marshal", "os", "sys", "ctypes", "resource", "atexit", "signal", "json", "_json"}
    functions = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert (
        len(functions) == len(set(functions)) == 41
    )  # 35 before the split, + the seccomp tables, search tree, assembler, write_all and end_server
    assert script.endswith('\n\nif __name__ == "__main__":\n    main()\n')


def test_the_shipped_code_is_the_child_script_compiled_by_the_sandbox_interpreter():
    """What the loader runs is exactly the script compiled by that interpreter; one that
    cannot compile it is a SandboxError, not a program's failure."""
    shipped = marshal.loads(sandbox._child_code(sys.executable))
    assert shipped == compile(sandbox._child_script(), "<sandbox-child>", "exec")
    with pytest.raises(sandbox.SandboxError, match="cannot compile the sandbox child script"):
        sandbox._child_code(shutil.which("false"))


def test_the_parent_never_imports_the_child_code():
    """Grading a program of each kind (and a math item) loads grading/sandbox.py but neither
    grading/sandbox_child.py nor grading/sandbox_lockdown.py, nor torch, nor sympy (math workers
    import it; grading/mathjudge.py does only in them)."""
    code = textwrap.dedent("""
        import sys, verifier
        from sandbox_cases import CORRECT, TESTS, completion
        for kind in ("stdio", "call", "assert"):
            assert verifier.verify_code(completion(CORRECT[kind]), TESTS[kind]) is True
        assert verifier.verify_math(r"\\boxed{2}", "2") is True
        verifier.close()
        names = ("grading.sandbox", "grading.sandbox_child", "grading.sandbox_lockdown", "torch", "sympy")
        print(sorted(name for name in names if name in sys.modules))
    """)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "['grading.sandbox']"


def test_sandbox_docstring_examples():
    for module in (sandbox_resources, typed_json):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted == 1, module.__name__


def test_concurrent_calls_from_threads(any_mode):
    jobs = [
        (CORRECT["stdio"], STDIO, True),
        ("print(7)", STDIO, False),
        (CORRECT["call"], CALL, True),
        (CORRECT["assert"], ASSERT, True),
    ] * 2
    results = [None] * len(jobs)

    def work(index):
        source, tests, _ = jobs[index]
        results[index] = verifier.verify_code(completion(source), tests)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [expected for _, _, expected in jobs]


EXIT_ZERO = """
import sys
sys.exit(0)
def double(x):
    return 2 * x
"""

OS_EXIT_ZERO = """
import os
import re
os._exit(0)
def double(x):
    return 2 * x
"""

ATEXIT_EXIT = """
import atexit
def _force_success():
    raise SystemExit(0)
atexit.register(_force_success)
def double(x):
    raise SystemExit(0)
"""

ALWAYS_EQUAL = """
class AlwaysEqual:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
def double(x):
    return AlwaysEqual()
"""

INT_ALWAYS_EQUAL = """
class Int(int):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = int.__hash__
def double(x):
    return Int(0)
"""

SNOOP = """
import gc, inspect, sys

def _found(value, x):
    return type(value) is int and value != x

def double(x):
    # The caller's locals (an `expected` variable) and code constants
    # (`assert candidate(x) == 2469134`), through sys._getframe...
    caller = sys._getframe(1)
    for value in list(caller.f_locals.values()) + list(caller.f_code.co_consts):
        if _found(value, x):
            return value
    # ... every frame on the stack, through inspect ...
    for info in inspect.stack()[1:]:
        for value in list(info.frame.f_locals.values()):
            if _found(value, x):
                return value
    # ... and grader functions anywhere in memory, through gc.
    for obj in gc.get_objects():
        if inspect.isfunction(obj) and obj.__name__ == "check":
            for const in obj.__code__.co_consts:
                if _found(const, x):
                    return const
    return -1
"""

PASS_MARKERS = """
import os
import re
def _forge():
    print("All tests passed!")
    print("PASSED")
    for fd in range(1, 64):
        for tag in (b"P", b"R", b"L"):
            try:
                os.write(fd, tag + bytes(8))
            except OSError:
                pass
_forge()
def double(x):
    _forge()
    return None
"""

MONKEYPATCH = """
import builtins, json, marshal
builtins.AssertionError = type("Harmless", (Exception,), {})
builtins.isinstance = lambda *args: True
builtins.type = lambda *args: int
builtins.len = lambda obj: 0
json.dumps = lambda *args, **kwargs: "6"
json.loads = lambda *args, **kwargs: 6
marshal.dumps = lambda *args: b""
def double(x):
    return None
"""

FORK_STORM = """
import os, time
def _storm():
    for _ in range(300):
        try:
            if os.fork() == 0:
                try:
                    os.setsid()
                except OSError:
                    pass
                time.sleep(60)
                os._exit(0)
        except OSError:
            pass
_storm()
def double(x):
    _storm()
    return None
"""

C_LOOP = """
sum(range(10 ** 12))
def double(x):
    return 2 * x
"""

MEMORY_BOMB = """
hoard = []
while True:
    hoard.append(bytearray(1 << 24))
def double(x):
    return 2 * x
"""

SIGNALS = """
import signal
for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGXCPU", "SIGALRM", "SIGUSR1", "SIGXFSZ"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
while True:
    pass
def double(x):
    return 2 * x
"""


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "name", ["exit_zero", "os_exit_zero", "atexit_exit", "snoop", "pass_markers", "monkeypatch", "fork_storm"]
)
def test_attack_is_defeated(mode, kind, name):
    source = {
        "exit_zero": EXIT_ZERO,
        "os_exit_zero": OS_EXIT_ZERO,
        "atexit_exit": ATEXIT_EXIT,
        "snoop": SNOOP,
        "pass_markers": PASS_MARKERS,
        "monkeypatch": MONKEYPATCH,
        "fork_storm": FORK_STORM,
    }[name]
    assert_defeated(kind, source)


@pytest.mark.parametrize("kind", ["call", "assert"])
@pytest.mark.parametrize("source", [ALWAYS_EQUAL, INT_ALWAYS_EQUAL], ids=["object", "int_subclass"])
def test_always_equal_objects_are_defeated(mode, kind, source):
    assert_defeated(kind, source)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("source", [C_LOOP, SIGNALS], ids=["c_loop", "signal_handlers"])
def test_unkillable_loops_are_killed_on_time(mode, kind, source):
    assert_defeated(kind, source)


@pytest.mark.parametrize("kind", KINDS)
def test_memory_bomb_is_bounded(mode, kind):
    assert_defeated(kind, MEMORY_BOMB, limits=verifier.SandboxLimits(memory_mb=256))


@pytest.mark.parametrize("kind", KINDS)
def test_killing_the_parent_fails(mode, kind):
    received = []
    previous = signal.signal(signal.SIGUSR1, lambda *args: received.append(args))
    try:
        source = f"""
        import os, signal
        def _attack():
            targets = [({os.getpid()}, signal.SIGUSR1), (os.getppid(), signal.SIGUSR1)]
            if {mode == "namespaces"}:  # kill(-1) only where the child has its own PID namespace
                targets.append((-1, signal.SIGKILL))
            for pid, sig in targets:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        _attack()
        def double(x):
            _attack()
            return None
        """
        assert_defeated(kind, source)
        time.sleep(0.1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == []


@pytest.mark.parametrize("kind", KINDS)
def test_writing_outside_the_work_directory_fails(mode, kind, tmp_path):
    token = uuid.uuid4().hex
    targets = [
        tmp_path / f"escape-{token}",
        ROOT / f"escape-{token}",
        Path(f"/escape-{token}"),
        Path("..") / f"escape-{token}",
    ]
    if mode == "namespaces" or sandbox._landlock_abi() >= 1:  # else /tmp stays writable (documented)
        targets.append(Path("/tmp") / f"escape-{token}")
    source = f"""
    def _attack():
        for path in {[str(path) for path in targets]!r}:
            try:
                with open(path, "w") as handle:
                    handle.write("pwned")
            except OSError:
                pass
    _attack()
    def double(x):
        _attack()
        return None
    """
    try:
        assert_defeated(kind, source)
        absolute = [path for path in targets if path.is_absolute()]
        assert [path for path in absolute if path.exists()] == []
        assert glob.glob(f"/tmp/**/escape-{token}", recursive=True) == []
    finally:
        for path in glob.glob(f"/tmp/**/escape-{token}", recursive=True) + [str(ROOT / f"escape-{token}")]:
            if os.path.exists(path):
                os.remove(path)


@pytest.mark.parametrize("kind", KINDS)
def test_network_is_unreachable(mode, kind):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.2)
        port = server.getsockname()[1]
        source = f"""
        import socket
        def _attack():
            for family in (socket.AF_INET, socket.AF_INET6):
                try:
                    with socket.socket(family) as client:
                        client.settimeout(0.5)
                        client.connect(("127.0.0.1" if family == socket.AF_INET else "::1", {port}))
                        client.sendall(b"leak")
                except OSError:
                    pass
        _attack()
        def double(x):
            _attack()
            return None
        """
        assert_defeated(kind, source)
        with pytest.raises(socket.timeout):
            server.accept()


STOP_ITERATION_CHECKS = {
    "for_map": "    for got in map(candidate, [{x}]):\n        assert got == {y}\n",
    "all_map": "    assert all(map(lambda v: candidate(v) == 2 * v, [{x}]))\n",
    "zip_map": "    for got, want in zip(map(candidate, [{x}]), [{y}]):\n        assert got == want\n",
    "iter_sentinel": "    for got in iter(lambda: candidate({x}), None):\n        assert got == {y}\n        break\n",
}


@pytest.mark.parametrize("form", sorted(STOP_ITERATION_CHECKS))
def test_stop_iteration_from_the_candidate_fails_the_check(any_mode, form):
    test = "def check(candidate):\n" + STOP_ITERATION_CHECKS[form].format(x=X, y=EXPECTED)
    tests = {"kind": "assert", "entry_point": "double", "test": test}
    assert verifier.verify_code(completion(CORRECT["assert"]), tests) is True
    for error in ("StopIteration", "StopAsyncIteration"):
        wrong = f"def double(x):\n    raise {error}"
        assert verifier.verify_code(completion(wrong), tests) is False


def _answer_if(condition_source):
    """An attack whose double() returns the answer when ``condition_source`` holds."""
    body = textwrap.indent(textwrap.dedent(condition_source).strip(), "    ")
    return "def _attack():\n" + body + "\ndef double(x):\n    return 2 * x if _attack() else None\n"


def _at_load_and_each_call(body_source):
    """An attack that runs ``body_source`` at import and in every double() call."""
    body = textwrap.indent(textwrap.dedent(body_source).strip(), "    ")
    return "def _attack():\n" + body + "\n_attack()\ndef double(x):\n    _attack()\n    return None\n"


@pytest.fixture
def secrets(tmp_path):
    """The expected answer where a program should not find it: a root-only file,
    a world-readable file in a world-readable directory, a root-only socket, a
    world-writable socket and an abstract socket, each answering EXPECTED."""
    shared = Path(tempfile.mkdtemp(prefix="credo-test-secret-"))
    shared.chmod(0o755)
    (shared / "open.txt").write_text(str(EXPECTED))
    (shared / "open.txt").chmod(0o644)
    (tmp_path / "root-only.txt").write_text(str(EXPECTED))
    (tmp_path / "root-only.txt").chmod(0o600)
    servers = []
    abstract = f"\0credo-test-{uuid.uuid4().hex}"
    for path, mode_bits in ((tmp_path / "root.sock", 0o600), (shared / "open.sock", 0o777), (abstract, None)):
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        if mode_bits is not None:
            path.chmod(mode_bits)
        server.listen(4)
        server.settimeout(0.05)
        servers.append(server)
    stop = threading.Event()

    def answer():
        while not stop.is_set():
            for server in servers:
                try:
                    connection, _ = server.accept()
                except OSError:
                    continue
                with connection:
                    connection.sendall(str(EXPECTED).encode())

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        yield {
            "root_file": tmp_path / "root-only.txt",
            "open_file": shared / "open.txt",
            "root_socket": tmp_path / "root.sock",
            "open_socket": shared / "open.sock",
            "abstract_socket": abstract,
        }
    finally:
        stop.set()
        thread.join()
        for server in servers:
            server.close()
        shutil.rmtree(shared)


@pytest.mark.parametrize("kind", KINDS)
def test_program_cannot_read_what_it_should_not(mode, kind, secrets):
    """Runs as an unprivileged identity that can open no socket in every mode (no
    root-only file, no /root, no host socket, abstract ones included); namespaces
    mode, and plain mode where the kernel has Landlock, also hide the project and
    world-readable data, and show no /dev/shm or home."""
    if os.geteuid() != 0:
        pytest.skip("the root-only targets need a root test process")
    files = [secrets["root_file"], "/root/.bashrc", "/proc/1/environ"]
    sockets = [secrets["root_socket"], secrets["open_socket"], secrets["abstract_socket"]]
    listings = ["/root"]
    if mode == "namespaces" or sandbox._landlock_abi() >= 1:
        files += [secrets["open_file"], ROOT / "README.md", ROOT / "verifier.py"]
        listings += ["/dev/shm", "/home", "/etc", "/run", "/var"]
    source = _answer_if(f"""
    import os, socket
    if os.getuid() == 0 or os.geteuid() == 0:
        return True
    for path in {[str(path) for path in files]!r}:
        try:
            with open(path, "rb") as handle:
                handle.read(1)
            return True
        except OSError:
            pass
    for path in {[str(path) for path in sockets]!r}:
        try:
            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(0.5)
                client.connect(path)
                return True
        except OSError:
            pass
    for path in {listings!r}:
        try:
            os.listdir(path)
            return True
        except OSError:
            pass
    return False
    """)
    assert_defeated(kind, source)


@pytest.mark.parametrize("kind", ["stdio", "assert"])
def test_kernel_objects_are_denied(mode, kind):
    """The keyring (add_key, request_key, keyctl) and IPC objects that would outlive
    the sandbox (msgget, semget, mq_open) are denied; so is naming a signal-on-I/O
    target (fcntl F_SETOWN/F_SETSIG, ioctl FIOSETOWN)."""
    numbers = {"x86_64": (248, 249, 250, 68, 64, 240), "aarch64": (217, 218, 219, 186, 190, 180)}
    add_key, request_key, keyctl, msgget, semget, mq_open = numbers[os.uname().machine]
    tag = f"credo-test-{uuid.uuid4().hex[:8]}"
    source = _answer_if(f"""
    import ctypes, fcntl, os, socket
    libc = ctypes.CDLL(None, use_errno=True)
    user_keyring, session_keyring, ipc_private, ipc_creat = -4, -3, 0, 0o1000
    calls = [
        (({add_key}, b"user", b"{tag}", b"{EXPECTED}", 3, session_keyring)),
        (({add_key}, b"user", b"{tag}", b"{EXPECTED}", 3, user_keyring)),
        (({request_key}, b"user", b"{tag}", None, 0)),
        (({keyctl}, 0, user_keyring, 1)),             # KEYCTL_GET_KEYRING_ID
        (({msgget}, ipc_private, ipc_creat | 0o600)),
        (({semget}, ipc_private, 1, ipc_creat | 0o600)),
        (({mq_open}, b"{tag}", os.O_CREAT | os.O_RDWR, 0o600, None)),
    ]
    for call in calls:
        if libc.syscall(*[ctypes.c_long(a) if type(a) is int else a for a in call]) >= 0:
            return True
    read, write = os.pipe()
    for command, argument in ((fcntl.F_SETOWN, os.getpid()), (10, 0), (15, 0)):
        try:
            fcntl.fcntl(read, command, argument)
            return True
        except OSError:
            pass
    with socket.socket(socket.AF_UNIX) as unix:
        try:
            fcntl.ioctl(unix, 0x8901, bytes(4))  # FIOSETOWN
            return True
        except OSError:
            pass
    return False
    """)
    assert_defeated(kind, source)
    if os.path.exists("/proc/keys"):
        assert tag not in Path("/proc/keys").read_text()


FUTEX_CALLS = """
import ctypes, errno, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
futex, waitv, wake2, wait2, requeue2, prctl = {
    "x86_64": (202, 449, 454, 455, 456, 157), "aarch64": (98, 449, 454, 455, 456, 167)}[os.uname().machine]

def call(number, *args):
    result = libc.syscall(number, *[ctypes.c_long(a) if type(a) is int else a for a in args])
    return result if result >= 0 else -ctypes.get_errno()

def _calls():
    base = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, os.open(os.__file__, os.O_RDONLY), 0)
    shared, value = ctypes.c_void_p(base), ctypes.c_uint32.from_address(base).value
    own = ctypes.c_uint32(0)
    ms = (ctypes.c_long * 2)(0, 1_000_000)
    anon = libc.mmap(None, 4 << 20, 3, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    return [
        # Without FUTEX_PRIVATE_FLAG: WAIT on the word's own value, no timeout, returns at
        # once (the kernel would sleep for ever), WAIT_BITSET too; WAKE, WAKE_BITSET,
        # REQUEUE, CMP_REQUEUE wake nobody; WAKE_OP: ENOSYS.
        call(futex, shared, 0, value, None, None, 0),
        call(futex, shared, 9, value, None, None, -1),
        call(futex, shared, 1, 1 << 30, None, None, 0),
        call(futex, shared, 10, 1 << 30, None, None, -1),
        call(futex, shared, 3, 1, 1, shared, 0),
        call(futex, shared, 4, 1, 1, shared, value),
        call(futex, shared, 5, 1, 1, shared, 0),
        # With it the kernel answers: EAGAIN (the word differs), ETIMEDOUT, a wake of nobody.
        call(futex, ctypes.byref(own), 128 | 0, 1, None, None, 0),
        call(futex, ctypes.byref(own), 128 | 0, 0, ms, None, 0),
        call(futex, ctypes.byref(own), 128 | 9, 0, ms, None, -1),
        call(futex, ctypes.byref(own), 128 | 1, 1, None, None, 0),
        # PI commands, private or not (LOCK_PI would take the free lock): ENOSYS.
        *[call(futex, ctypes.byref(own), op, 0, ms, ctypes.byref(own), 0) for op in (6, 134, 135, 136, 139, 140, 141)],
        # futex2: futex_waitv, futex_wake, futex_wait, futex_requeue: ENOSYS.
        call(waitv, None, 0, 0, None, 1),
        call(wake2, shared, -1, 1, 2 | 128),
        call(wait2, shared, value, -1, 2 | 128, ms, 1),
        call(requeue2, None, 0, 1, 0),
        # KSM: MADV_MERGEABLE, PR_SET_MEMORY_MERGE; MADV_COLLAPSE; the huge-page pool.
        call(28 if futex == 202 else 233, anon, 4 << 20, 12),
        call(prctl, 67, 1, 0, 0, 0),
        call(28 if futex == 202 else 233, anon, 4 << 20, 25),
        hugetlb(),
    ]

def hugetlb():
    address = libc.mmap(None, 2 << 20, 3, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000, -1, 0)
    return -ctypes.get_errno() if address == ctypes.c_void_p(-1).value else 0

E = errno
EXPECTED_CALLS = [0, 0, 0, 0, 0, 0, -E.ENOSYS, -E.EAGAIN, -E.ETIMEDOUT, -E.ETIMEDOUT, 0] + [-E.ENOSYS] * 11
EXPECTED_CALLS += [-E.EPERM, -E.EPERM, -E.EPERM, -E.ENOMEM]

def double(x):
    return 2 * x if _calls() == EXPECTED_CALLS else None
"""


@pytest.mark.parametrize("kind", ["stdio", "assert"])
def test_futexes_are_private_and_pages_are_not_merged(every_mode, kind):
    """A futex call without FUTEX_PRIVATE_FLAG (which a file-backed page would key by
    inode and offset, shared by every sandbox) is skipped and returns 0: a wait returns at once
    as on a spurious wake-up, a wake wakes nobody; the PI commands and futex2's futex_waitv,
    futex_wake, futex_wait, futex_requeue are refused with ENOSYS; private futexes work. KSM
    (MADV_MERGEABLE, PR_SET_MEMORY_MERGE) and MADV_COLLAPSE are denied, MAP_HUGETLB fails
    with ENOMEM (as with an empty huge-page pool). The program answers only if every call
    returned what is expected. Before the futex rule its first wait slept until the time limit: False
    in every mode."""
    assert verifier.verify_code(attack(FUTEX_CALLS), TESTS[kind], timeout_s=10.0) is True


THREADED = """
import ctypes, queue, threading, time
from concurrent.futures import ThreadPoolExecutor
libc = ctypes.CDLL(None)
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)

@CALLBACK
def body(argument):
    time.sleep(0.2)  # meanwhile pthread_join waits on the thread's tid (a shared futex)
    return argument

def pthreads():
    handles, returned = [], []
    for value in (1, 2, 3):
        handles.append(ctypes.c_ulong())
        assert libc.pthread_create(ctypes.byref(handles[-1]), None, body, ctypes.c_void_p(value)) == 0
    for handle in handles:
        result = ctypes.c_void_p()
        assert libc.pthread_join(handle, ctypes.byref(result)) == 0
        returned.append(result.value)
    return returned

def python_threads():
    lock, ready, start, done = threading.Lock(), threading.Condition(), threading.Event(), queue.Queue()
    counts = []
    def work(index):
        start.wait()
        with lock:
            counts.append(index)
        with ready:
            ready.notify_all()
        done.put(index)
    workers = [threading.Thread(target=work, args=(index,)) for index in range(6)]
    for worker in workers:
        worker.start()
    start.set()
    with ready:
        ready.wait_for(lambda: len(counts) == 6)
    for worker in workers:
        worker.join()
    with ThreadPoolExecutor(max_workers=4) as pool:
        squares = sum(pool.map(lambda v: v * v, range(10)))
    return sorted(counts) == list(range(6)) and done.qsize() == 6 and squares == 285

def process_shared():  # glibc then uses shared futexes: a semaphore and a contended mutex
    semaphore, attributes, mutex = (ctypes.create_string_buffer(64) for _ in range(3))
    assert libc.sem_init(semaphore, 1, 0) == 0 and libc.pthread_mutexattr_init(attributes) == 0
    assert libc.pthread_mutexattr_setpshared(attributes, 1) == 0 and libc.pthread_mutex_init(mutex, attributes) == 0
    def post():
        time.sleep(0.2)  # sem_wait waits meanwhile; sem_post then wakes its waiter
        libc.pthread_mutex_lock(mutex)  # contended: an untimed wait
        libc.pthread_mutex_unlock(mutex)
        libc.sem_post(semaphore)
    poster = threading.Thread(target=post)
    libc.pthread_mutex_lock(mutex)
    poster.start()
    time.sleep(0.4)
    libc.pthread_mutex_unlock(mutex)
    waited = libc.sem_wait(semaphore)
    poster.join()
    return waited == 0

def blas():  # multithreaded BLAS where numpy is importable (it joins its threads at exit)
    try:
        import numpy
    except ImportError:
        return True
    ones = numpy.ones((400, 400))
    return float((ones @ ones)[0, 0]) == 400.0

x = int(input())
print(2 * x if pthreads() == [1, 2, 3] and python_threads() and process_shared() and blas() else 0)
"""


def test_threaded_programs_pass(every_mode):
    """Threads, locks, conditions, events, queues, a thread pool, pthread_join through ctypes, and a
    process-shared semaphore and mutex pass, with numpy's BLAS threads where numpy is importable.
    glibc waits on a joined thread's tid, and on process-shared objects, with shared futexes, which
    the filter skips: each such wait returns at once, and glibc re-checks and waits again (spins).
    Answering them with an errno instead fails this test: EPERM (pthread_join and numpy's exit
    abort in futex_fatal_error), EAGAIN (sem_post's wake aborts), EINVAL (the mutex's wait aborts),
    each measured in every mode. It passed before the futex rule too."""
    assert verifier.verify_code(completion(THREADED), STDIO, timeout_s=20.0) is True


@pytest.mark.parametrize("kind", KINDS)
def test_process_group_signals_cannot_reach_the_launcher(mode, kind):
    """kill(0, sig) and killpg of its own group are denied: SIGSTOP or SIGHUP there
    used to stop or kill the namespace launcher and orphan a zombie."""
    source = "import os, signal\n" + _at_load_and_each_call("""
    for sig in (signal.SIGSTOP, signal.SIGHUP, signal.SIGTERM):
        for send in (lambda: os.kill(0, sig), lambda: os.killpg(os.getpgrp(), sig),
                     lambda: os.killpg(0, sig)):
            try:
                send()
            except OSError:
                pass
    """)
    assert _orphans_of(lambda: assert_defeated(kind, source)) == []


THREAD_HOARD = """
import threading
_hold = threading.Event()
def _hoard(count):
    started = 0
    for _ in range(count):
        try:
            threading.Thread(target=_hold.wait, daemon=True).start()
        except RuntimeError:
            break
        started += 1
    return started
"""


@pytest.mark.parametrize("kind", KINDS)
def test_thread_count_is_bounded(mode, kind):
    """RLIMIT_NPROC bounds threads in every mode (it is not enforced for uid 0)."""
    source = THREAD_HOARD + "def double(x):\n    return 2 * x if _hoard(200) > 16 else None\n"
    assert_defeated(kind, source, limits=verifier.SandboxLimits(processes=16))


def test_uid_pool_gives_each_live_sandbox_its_own_uid():
    pool = sandbox_resources.UidPool()
    first, second = pool.acquire(), pool.acquire()
    base = sandbox_resources.SANDBOX_UID_BASE + (os.getpid() % (1 << 20)) * sandbox_resources.SANDBOX_UID_SLOTS
    assert (first, second) == (base, base + 1)
    pool.release(first)
    assert pool.acquire() == base + 2  # slots in turn: a released uid is not the next one given
    for _ in range(sandbox_resources.SANDBOX_UID_SLOTS - 3):
        pool.release(pool.acquire())
    assert pool.acquire() == first  # reused only once released, and after every other slot
    assert 0 < first < second < 2**31 - 1


def _sandbox_threads():
    """Threads of this test process's live sandbox processes."""
    total = 0
    for path in _sandbox_processes():
        try:
            status = Path(path).with_name("status").read_text()
        except OSError:
            continue
        total += int(status.split("Threads:")[1].split()[0])
    return total


def test_parked_threads_do_not_starve_a_concurrent_program(mode):
    """One program holding all of its thread limit does not make a concurrent
    correct program that uses threads fail (sandboxes do not share a limit)."""
    limits = verifier.SandboxLimits(processes=16)
    hoarder = THREAD_HOARD + "\nimport time\n_hoard(200)\ntime.sleep(3)\n"
    threaded = (
        "import threading\nresults = []\n"
        "workers = [threading.Thread(target=lambda: results.append(1)) for _ in range(8)]\n"
        "[w.start() for w in workers]\n[w.join() for w in workers]\n"
        "print(int(input()) * len(results) // 4)"
    )
    parked = threading.Thread(target=verifier.verify_code, args=(completion(hoarder), STDIO), kwargs={"limits": limits})
    parked.start()
    try:
        deadline = time.monotonic() + 10
        while _sandbox_threads() < 14 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _sandbox_threads() >= 14
        assert verifier.verify_code(completion(threaded), STDIO, limits=limits) is True
    finally:
        parked.join(20)


@pytest.mark.parametrize("kind", KINDS)
def test_programs_write_temporary_files(mode, kind):
    source = """
    import os, tempfile
    def double(x):
        with open("scratch.txt", "w") as handle:
            handle.write(str(x))
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t")
            with open(path, "w") as handle:
                handle.write(open("scratch.txt").read())
            value = int(open(path).read())
        os.remove("scratch.txt")
        return 2 * value
    """
    assert verifier.verify_code(attack(source), TESTS[kind]) is True


def test_forged_frame_from_a_program_fails_on_time(any_mode):
    """A call program that writes its own huge V frame on the harness's channel:
    the verdict is on time, and no other thread of this process stalls meanwhile."""
    source = """
    import os
    def double(x):
        body = ("[" + ", ".join(["[]"] * 8_000_000) + "]").encode()
        frame = b"V" + len(body).to_bytes(8, "big") + body
        for fd in range(3, 12):
            try:
                os.write(fd, frame)
            except OSError:
                pass
        os._exit(0)
    """
    gaps, done = [], threading.Event()

    def tick():
        last = time.monotonic()
        while not done.wait(0.01):
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        assert_defeated("call", source)
    finally:
        done.set()
        ticker.join()
    assert max(gaps) < SLACK_S


# ---------------------------------------------------------------------------
# Controls: the attacks are real (they beat a naive in-process grader)
# ---------------------------------------------------------------------------


def _load(source):
    namespace = {"__name__": "attack"}
    exec(textwrap.dedent(source) + STDIO_MAIN, namespace)  # noqa: S102 (a naive in-process grader)
    return namespace["double"]


def test_control_snooper_beats_an_in_process_grader():
    double = _load(SNOOP)

    def judge(candidate):
        expected = EXPECTED
        return candidate(X) == expected

    assert judge(double)
    checker = {}
    exec(ASSERT["test"], checker)  # noqa: S102
    checker["check"](double)  # no AssertionError: the snooper read EXPECTED from check's code


def test_control_always_equal_beats_a_naive_comparison():
    assert _load(ALWAYS_EQUAL)(X) == EXPECTED
    assert _load(INT_ALWAYS_EQUAL)(X) == EXPECTED


# ---------------------------------------------------------------------------
# Channels between rollouts: a writer sandbox and a reader sandbox,
# sequential and concurrent; the reader prints the right answer only if the
# channel carried the writer's signal, so its verdict must stay False.
# ---------------------------------------------------------------------------

HOLD_S, PROBE_S = 1.2, 1.0  # the writer keeps its state this long; the reader probes this long
PERSISTENT = {"page_cache", "files"}  # channels whose state outlives the writer: also tried in turn
SHARED_IN_NAMESPACES = {"page_cache", "file_locks", "inotify", "futex"}  # the others need a shared /tmp, net or pid
TOPICS = 'os.path.join(os.path.dirname(os.__file__), "pydoc_data", "topics.py")'  # both can read it

CHANNELS = {
    # Page cache of a shared read-only file: evict it, load pages 1, 3, 5; the reader
    # probes residency (preadv2 RWF_NOWAIT, mincore).
    "page_cache": (
        f"""
        fd = os.open({TOPICS}, os.O_RDONLY)
        for advice in (os.POSIX_FADV_RANDOM, os.POSIX_FADV_DONTNEED):
            try:
                os.posix_fadvise(fd, 0, 0, advice)
            except OSError:
                pass
        for page in (1, 3, 5):
            os.pread(fd, 1, page * 4096)
        """,
        f"""
        import ctypes, mmap
        fd = os.open({TOPICS}, os.O_RDONLY)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        def nowait(page):
            try:
                os.preadv(fd, [bytearray(1)], page * 4096, os.RWF_NOWAIT)
                return True
            except BlockingIOError:
                return False
            except OSError:
                return None
        def mincore():
            base = libc.mmap(None, 8 * 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            vector = (ctypes.c_ubyte * 8)()
            if libc.mincore(ctypes.c_void_p(base), ctypes.c_size_t(8 * 4096), vector) != 0:
                return None
            return [bool(v & 1) for v in vector[1:7]]
        pattern = [True, False, True, False, True, False]
        while time.monotonic() < deadline:
            if [nowait(page) for page in range(1, 7)] == pattern or mincore() == pattern:
                return True
            time.sleep(0.02)
        return False
        """,
    ),
    # Record, open-file-description and flock locks on a shared read-only file.
    "file_locks": (
        f"""
        import fcntl, struct
        fd = os.open({TOPICS}, os.O_RDONLY)
        for command, pid in ((fcntl.F_SETLK, 0), (37, 0)):  # 37: F_OFD_SETLK
            try:
                fcntl.fcntl(fd, command, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 4242 + command, 1, pid))
            except OSError:
                pass
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            pass
        time.sleep({HOLD_S})
        """,
        f"""
        import fcntl, struct
        fd = os.open({TOPICS}, os.O_RDONLY)
        while time.monotonic() < deadline:
            for command, query in ((fcntl.F_GETLK, fcntl.F_GETLK), (37, 36)):  # 36: F_OFD_GETLK
                try:
                    answer = fcntl.fcntl(fd, query, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 4242 + command, 1, 0))
                    if struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK:
                        return True
                except OSError:
                    pass
            other = os.open({TOPICS}, os.O_RDONLY)
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError:
                pass
            os.close(other)
            time.sleep(0.02)
        return False
        """,
    ),
    # inotify: the reader watches the shared directory for the writer's opens.
    "inotify": (
        f"""
        end = time.monotonic() + {HOLD_S}
        while time.monotonic() < end:
            os.close(os.open({TOPICS}, os.O_RDONLY))
            time.sleep(0.01)
        """,
        f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        watcher = libc.inotify_init1(os.O_NONBLOCK)
        if watcher < 0 or libc.inotify_add_watch(watcher, os.path.dirname({TOPICS}).encode(), 0x20) < 0:
            return False
        while time.monotonic() < deadline:
            try:
                if b"topics.py" in os.read(watcher, 65536):
                    return True
            except BlockingIOError:
                time.sleep(0.02)
        return False
        """,
    ),
    # Datagram sockets: a socketpair end sent to (or bound at) a name the other can reach.
    "datagram_sockets": (
        f"""
        import socket
        end = time.monotonic() + {HOLD_S}
        try:
            sender, _ = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        except OSError:
            end = 0
        while time.monotonic() < end:
            for address in (NAME, "/tmp/" + NAME[1:] + ".sock", HOST_PATH, HOST_ABSTRACT):
                try:
                    sender.sendto(b"signal", address)
                except OSError:
                    pass
            time.sleep(0.02)
        """,
        """
        import socket
        receivers = []
        for address in (NAME, "/tmp/" + NAME[1:] + ".sock"):
            try:
                receiver, _ = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
                receiver.bind(address)
                receiver.setblocking(False)
                receivers.append(receiver)
            except OSError:
                pass
        while time.monotonic() < deadline:
            for receiver in receivers:
                try:
                    if receiver.recv(64) == b"signal":
                        return True
                except BlockingIOError:
                    pass
            time.sleep(0.02)
        return False
        """,
    ),
    # Files another sandbox created, where both can reach (plain mode without Landlock).
    "files": (
        f"""
        for path in ("/tmp/" + NAME[1:], "/dev/shm/" + NAME[1:]):
            try:
                with open(path, "w") as handle:
                    handle.write("signal")
                os.chmod(path, 0o644)
            except OSError:
                pass
        time.sleep({HOLD_S})
        """,
        """
        while time.monotonic() < deadline:
            for path in ("/tmp/" + NAME[1:], "/dev/shm/" + NAME[1:]):
                try:
                    with open(path) as handle:
                        if handle.read() == "signal":
                            return True
                except OSError:
                    pass
            time.sleep(0.02)
        return False
        """,
    ),
    # Futexes on a shared read-only file: a non-private futex on a file-backed page
    # is keyed by inode and offset, whatever the namespaces or uid.  The writer maps the
    # interpreter's os.py and parks a thread in FUTEX_WAIT on word i for each 1-bit i of 16
    # random bits (the token's), and one on word 16; the reader wakes each word of its own
    # mapping (private, where the writer's is shared) and counts the waiters woken.
    "futex": (
        f"""
        import ctypes, mmap, threading
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        futex = {{"x86_64": 202, "aarch64": 98}}[os.uname().machine]
        base = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, os.open(os.__file__, os.O_RDONLY), 0)
        end = time.monotonic() + {HOLD_S}
        def park(word):
            address = ctypes.c_void_p(base + 4 * word)
            value = ctypes.c_uint32.from_address(base + 4 * word).value
            while time.monotonic() < end:
                timeout = (ctypes.c_long * 2)(0, 50_000_000)
                libc.syscall(futex, address, 0, ctypes.c_uint32(value), timeout, None, 0)  # FUTEX_WAIT
                time.sleep(0.001)
        secret = int(NAME[-4:], 16)
        parked = [threading.Thread(target=park, args=(word,)) for word in range(17)
                  if word == 16 or secret >> word & 1]
        for thread in parked:
            thread.start()
        for thread in parked:
            thread.join()
        """,
        """
        import ctypes, mmap
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        futex = {"x86_64": 202, "aarch64": 98}[os.uname().machine]
        base = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE, os.open(os.__file__, os.O_RDONLY), 0)
        def wake(word):  # FUTEX_WAKE: the number of waiters woken
            return libc.syscall(futex, ctypes.c_void_p(base + 4 * word), 1, 1 << 30, None, None, 0)
        heard = 0
        while time.monotonic() < deadline:
            if wake(16) > 0:
                heard |= sum(1 << word for word in range(16) if wake(word) > 0)
                if heard == int(NAME[-4:], 16):
                    return True
            time.sleep(0.005)
        return False
        """,
    ),
    # Attributes of another process: its priority and CPU affinity, read by pid.
    "process_attributes": (
        f"""
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 17)
        except OSError:
            pass
        time.sleep({HOLD_S})
        """,
        """
        me = os.getpid()
        while time.monotonic() < deadline:
            for pid in range(max(2, me - 20000), me + 200):
                try:
                    if pid != me and os.getpriority(os.PRIO_PROCESS, pid) == 17:
                        return True
                except OSError:
                    pass
            time.sleep(0.02)
        return False
        """,
    ),
}


def _channel_programs(name, token, host):
    """The writer's and the reader's completions for channel ``name``."""
    write, read = (textwrap.dedent(part) for part in CHANNELS[name])
    names = f"NAME = {chr(0) + 'credo-chan-' + token!r}\nHOST_PATH, HOST_ABSTRACT = {host!r}\n"
    writer = f"import os, time\n{names}{write}\nprint(int(input()) * 2)\n"
    reader = (
        f"import os, time\n{names}def _probe():\n    deadline = time.monotonic() + {PROBE_S}\n"
        + textwrap.indent(read, "    ")
        + "\nprint(int(input()) * 2 if _probe() else 0)\n"
    )
    return completion(writer), completion(reader)


@pytest.mark.parametrize("name", sorted(CHANNELS))
@pytest.mark.parametrize("channel_mode", ["namespaces", "plain", "plain-no-landlock"])
def test_no_channel_between_sandboxes(channel_mode, name, monkeypatch):
    """The reader learns nothing from the writer, after it (sequential) or beside it
    (concurrent).  Open in plain mode without Landlock, as documented: process
    attributes through /proc (so only the pid-taking calls are tried there)."""
    if name == "process_attributes" and channel_mode == "plain-no-landlock":
        pytest.skip("documented: /proc shows every process in plain mode without Landlock")
    if channel_mode == "namespaces" and name not in SHARED_IN_NAMESPACES:
        pytest.skip("namespaces mode has its own /tmp, network and pid namespaces")
    use_mode(channel_mode, monkeypatch)
    token = uuid.uuid4().hex[:12]
    shared = Path(tempfile.mkdtemp(prefix="credo-test-chan-"))
    shared.chmod(0o755)
    host = [socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    host_names = (str(shared / "host.sock"), f"\0credo-chan-host-{token}")
    for server, address in zip(host, host_names):
        server.bind(address)
        server.setblocking(False)
    os.chmod(host_names[0], 0o777)
    writer, reader = _channel_programs(name, token, host_names)
    try:
        if name in PERSISTENT:
            assert verifier.verify_code(writer, STDIO, timeout_s=HOLD_S + 3) is True
            assert verifier.verify_code(reader, STDIO, timeout_s=PROBE_S + 3) is False
        results = {}
        threads = [
            threading.Thread(
                target=lambda key, text, limit: results.__setitem__(
                    key, verifier.verify_code(text, STDIO, timeout_s=limit)
                ),
                args=args,
            )
            for args in (("writer", writer, HOLD_S + 3), ("reader", reader, PROBE_S + 3))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert results == {"writer": True, "reader": False}
        for server in host:
            with pytest.raises(BlockingIOError):
                server.recv(64)  # no host socket heard from a sandbox
    finally:
        for server in host:
            server.close()
        shutil.rmtree(shared)
        for path in glob.glob(f"/tmp/credo-chan-{token}*") + glob.glob(f"/dev/shm/credo-chan-{token}*"):
            os.remove(path)


def test_no_futex_channel_under_a_non_root_trainer():
    """``test_no_channel_between_sandboxes[...-futex]`` with the trainer an unprivileged user:
    plain mode, both sandboxes of the trainer's uid, with Landlock where the kernel has it and
    without (the channel was reproduced in both before the futex rule)."""
    writer, reader = _channel_programs("futex", uuid.uuid4().hex[:12], ("", ""))
    script = "\n".join(
        [
            "import json, threading",
            "results = {}",
            "def grade(key, text, limit):",
            f"    results[key] = verifier.verify_code(text, {STDIO!r}, timeout_s=limit)",
            "for landlock in sorted({False, sandbox._landlock_abi() >= 1}):",
            "    sandbox._CONFIG = sandbox._SandboxConfig('plain', sys.executable, landlock=landlock)",
            f"    runs = [('writer', {writer!r}, {HOLD_S + 3}), ('reader', {reader!r}, {PROBE_S + 3})]",
            "    threads = [threading.Thread(target=grade, args=(f'{key} {landlock}', text, limit))",
            "               for key, text, limit in runs]",
            "    for thread in threads:",
            "        thread.start()",
            "    for thread in threads:",
            "        thread.join(30)",
            "print(json.dumps(results))",
        ]
    )
    results = _as_a_non_root_trainer(script)
    landlock = sorted({False, sandbox._landlock_abi() >= 1})
    assert results == {f"{role} {flag}": role == "writer" for flag in landlock for role in ("writer", "reader")}


# ---------------------------------------------------------------------------
# The grader never raises on what a program does; every resource is bounded
# per sandbox
# ---------------------------------------------------------------------------


def test_an_int_too_large_for_a_float_is_a_false_verdict(any_mode):
    tests = {"kind": "call", "fn_name": "f", "inputs": [[1]], "outputs": [0.5]}
    assert verifier.verify_code(completion("def f(x):\n    return 10 ** 400"), tests) is False


DEEP_TREE = """
import os
import re
def _attack():
    os.chdir(os.environ["TMPDIR"])
    for _ in range(1200):  # deeper than the recursion limit of a recursive removal
        os.mkdir("d")
        os.chdir("d")
    os.mkdir("locked")
    open("locked/file", "w").close()
    os.chmod("locked", 0o500)
_attack()
def double(x):
    return None
"""


def test_a_deep_or_locked_tree_is_removed_and_the_uid_released(mode, monkeypatch):
    """1,200 nested directories and one without write permission: a False verdict, the
    working directory gone and the uid slot free, also where it is no tmpfs."""
    monkeypatch.setattr(sandbox, "_CONFIG", dataclasses.replace(sandbox._CONFIG, tmpfs_workdir=False))
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "credo-sandbox-*")))
    assert_defeated("stdio", DEEP_TREE, timeout_s=5.0)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "credo-sandbox-*"))) <= before
    assert sandbox._SANDBOX_UIDS.taken == set()


def test_remove_tree_never_follows_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "link").symlink_to(outside)
    (root / "a" / "b").chmod(0)
    sandbox_resources.remove_tree(str(root))
    assert not root.exists() and (outside / "keep").exists()


def test_a_grader_holding_more_than_1023_descriptors_grades(any_mode):
    with many_descriptors():
        assert verifier.verify_code(completion(CORRECT["stdio"]), STDIO) is True


def test_memory_bounds_the_sandbox_as_a_whole(mode):
    """An assert-kind sandbox holds two interpreters: 250 MB in each is over a 400 MB
    sandbox, though under 400 MB per process (and passes with 1,024 MB)."""
    hoard = "_hoard = b'x' * (250 << 20)\n"
    tests = dict(
        ASSERT, test=f"def check(candidate):\n    _big = b'y' * (250 << 20)\n    assert candidate({X}) == {EXPECTED}\n"
    )
    program = completion(hoard + CORRECT["assert"])
    for memory_mb, verdict in ((1024, True), (400, False)):
        limits = verifier.SandboxLimits(memory_mb=memory_mb)
        assert verifier.verify_code(program, tests, timeout_s=5.0, limits=limits) is verdict


def test_disk_and_inodes_are_bounded(mode):
    """With a 64 MiB working directory a program can neither allocate 1 GiB nor make
    10,000 files (plain mode: where the parent may mount; else documented as open)."""
    if mode == "plain" and not sandbox._CONFIG.tmpfs_workdir:
        pytest.skip("this parent cannot mount a tmpfs working directory (documented)")
    for body in (
        "for i in range(16):\n        with open(f'f{i}', 'wb') as out:\n"
        "            os.posix_fallocate(out.fileno(), 0, 64 << 20)",
        "for i in range(10000):\n        open(f'n{i}', 'w').close()",
    ):
        source = f"import os\ndef _fill():\n    {body}\n    return True\n"
        source += "def double(x):\n    try:\n        return 2 * x if _fill() else None\n"
        source += "    except OSError:\n        return None\n"
        assert verifier.verify_code(completion(source), CALL, limits=verifier.SandboxLimits(tmpfs_mb=64)) is False


def test_a_program_acts_on_itself_only_under_a_non_root_parent(tmp_path):
    """Run as an unprivileged user, the grader's own priority, descriptor limit and CPU
    affinity are out of a program's reach, and a directory it leaves unremovable is
    removed (plain mode: the only one a non-root parent without user namespaces has)."""
    attack = "\n".join(
        [
            "import os, resource",
            f"for act in (lambda: os.setpriority(os.PRIO_PROCESS, {os.getpid()}, 19),",
            "            lambda: os.setpriority(os.PRIO_USER, 0, 19),",
            f"            lambda: resource.prlimit({os.getpid()}, resource.RLIMIT_NOFILE, (64, 64)),",
            f"            lambda: os.sched_setaffinity({os.getpid()}, {{0}})):",
            "    try:",
            "        act()",
            "    except OSError:",
            "        pass",
            "os.mkdir('locked')",
            "open('locked/file', 'w').close()",
            "os.chmod('locked', 0o500)",
            "print(int(input()) * 2)",
        ]
    )
    script = "\n".join(
        [
            "import json, os, resource",
            "completion = lambda source: '```python\\n' + source + '\\n```'",
            "sandbox._CONFIG = sandbox._SandboxConfig('plain', sys.executable, landlock=sandbox._landlock_abi() >= 1)",
            "state = lambda: (os.getpriority(os.PRIO_PROCESS, 0), resource.getrlimit(resource.RLIMIT_NOFILE),",
            "                 sorted(os.sched_getaffinity(0)))",
            "before = state()",
            f"verdict = verifier.verify_code(completion({attack!r}), {STDIO!r})",
            "print(json.dumps([verdict, before == state(), before, state()]))",
        ]
    )
    verdict, unchanged, before, after = _as_a_non_root_trainer(script)
    assert verdict is True and unchanged, (before, after)


def _as_a_non_root_trainer(script):
    """Run ``script`` as user nobody with ``/usr/bin/python3``, after ``sys``, ``verifier`` and
    ``grading.sandbox`` are imported; return what it printed last, read as JSON. Skips where this
    process is not root or setpriv or /usr/bin/python3 is missing (as _plain_config: any user can
    run that interpreter)."""
    setpriv, python = shutil.which("setpriv"), "/usr/bin/python3"
    if os.geteuid() != 0 or setpriv is None or not os.path.exists(python):
        pytest.skip("needs a root test process, setpriv and /usr/bin/python3")
    # The unprivileged user imports the grader from a copy it can read: a checkout under a
    # private directory (mktemp -d is 0700) is out of its reach.
    readable = Path(tempfile.mkdtemp(prefix="credo-nobody-"))
    readable.chmod(0o755)
    for module in ROOT.glob("*.py"):
        shutil.copy(module, readable / module.name)
    shutil.copytree(ROOT / "grading", readable / "grading", ignore=shutil.ignore_patterns("__pycache__"))
    prelude = f"import sys\nsys.path[:0] = [{str(readable)!r}]\nimport verifier\nfrom grading import sandbox\n"
    try:
        done = subprocess.run(
            [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", prelude + script],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/tmp",
        )
    finally:
        shutil.rmtree(readable)
    if done.returncode != 0 and "Permission denied" in done.stderr:
        pytest.skip(f"the unprivileged user cannot run this checkout: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_filter(program, nr, args=(0,) * 6):
    """What the classic-BPF ``program`` returns for a call ``nr(*args)`` on this machine."""
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[os.uname().machine]
    words = {0: nr, 4: arch} | {16 + 8 * i: value & 0xFFFFFFFF for i, value in enumerate(args)}
    accumulator, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code == 0x20:
            accumulator = words[k]
        elif code == 0x54:
            accumulator &= k
        elif code == 0x05:
            pc += k
        elif code in (0x15, 0x35, 0x45):
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: bool(accumulator & k)}[code]
            pc += jt if taken else jf
        elif code == 0x06:
            verdicts = {0x7FFF0000: "allow", 0x00050001: "EPERM", 0x00050026: "ENOSYS", 0x0005000C: "ENOMEM"}
            return verdicts.get(k, "returns 0" if k == 0x00050000 else hex(k))
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


def test_the_seccomp_search_tree_decides_every_call():
    """Every listed call reaches its own check, every other call is allowed (simulated)."""
    pid = 4242
    program = sandbox_lockdown.seccomp_program(pid)
    column = 0 if os.uname().machine == "x86_64" else 1
    numbers = {
        name: pair[column] for name, pair in sandbox_lockdown.syscall_numbers().items() if pair[column] is not None
    }
    checked = sandbox_lockdown.checked_calls()
    for nr in set(range(500)) - set(numbers.values()):
        assert _run_filter(program, nr) == "allow", nr
    for name, nr in numbers.items():
        if name not in checked:
            assert _run_filter(program, nr) == "EPERM", name
    expectations = {  # (call, args): verdict
        ("clone", (0x10000,)): "allow",
        ("clone", (0,)): "EPERM",
        ("clone3", ()): "ENOSYS",
        ("kill", (pid, 9)): "allow",
        ("kill", (0, 9)): "EPERM",
        ("tgkill", (pid + 1,)): "EPERM",
        ("fcntl", (3, 6)): "EPERM",
        ("fcntl", (3, 37)): "EPERM",
        ("fcntl", (3, 1)): "allow",
        ("socketpair", (1, 1 | 0x80000)): "allow",
        ("socketpair", (1, 2)): "EPERM",
        ("socketpair", (2, 1)): "EPERM",
        ("madvise", (0, 0, 21)): "EPERM",
        ("madvise", (0, 0, 4)): "allow",
        ("preadv2", (3, 0, 1, 0, 0, 8)): "EPERM",
        ("preadv2", (3, 0, 1, 0, 0, 0)): "allow",
        ("fchmodat", (3, 0, 0o600)): "allow",
        ("fchmodat", (3, 0, 0o604)): "EPERM",
        ("fchmod", (3, 0o640)): "EPERM",
        ("umask", (0o077,)): "allow",
        ("umask", (0o022,)): "EPERM",
        ("setpriority", (0, 0, 5)): "allow",
        ("setpriority", (0, pid, 5)): "allow",
        ("setpriority", (0, 1, 5)): "EPERM",
        ("setpriority", (2, 0, 5)): "EPERM",
        ("ioprio_set", (1, 0, 0)): "allow",
        ("ioprio_set", (3, 0, 0)): "EPERM",
        ("prlimit64", (0,)): "allow",
        ("prlimit64", (pid,)): "allow",
        ("prlimit64", (1,)): "EPERM",
        ("sched_setaffinity", (7,)): "EPERM",
        ("sched_getaffinity", (0,)): "allow",
        ("futex", (0, 128)): "allow",  # FUTEX_WAIT_PRIVATE
        ("futex", (0, 129)): "allow",  # FUTEX_WAKE_PRIVATE
        ("futex", (0, 128 | 256 | 9)): "allow",  # FUTEX_WAIT_BITSET_PRIVATE | FUTEX_CLOCK_REALTIME
        ("futex", (0, 128 | 10)): "allow",
        ("futex", (0, 128 | 4)): "allow",
        ("futex", (0, 128 | 5)): "allow",
        ("futex", (0, 0)): "returns 0",  # FUTEX_WAIT (shared)
        ("futex", (0, 1)): "returns 0",
        ("futex", (0, 256 | 9)): "returns 0",
        ("futex", (0, 10)): "returns 0",
        ("futex", (0, 3)): "returns 0",
        ("futex", (0, 4)): "returns 0",
        ("futex", (0, 2)): "ENOSYS",
        ("futex", (0, 5)): "ENOSYS",
        **{("futex", (0, flag | command)): "ENOSYS" for flag in (0, 128) for command in (6, 7, 8, 11, 12, 13, 14)},
        ("futex_waitv", ()): "ENOSYS",
        ("futex_wake", (0, 0, 1, 128)): "ENOSYS",
        ("futex_wait", ()): "ENOSYS",
        ("futex_requeue", ()): "ENOSYS",
        ("madvise", (0, 0, 12)): "EPERM",
        ("madvise", (0, 0, 25)): "EPERM",
        ("madvise", (0, 0, 14)): "allow",
        ("prctl", (67, 1)): "EPERM",
        ("prctl", (15, 0)): "allow",  # PR_SET_NAME
        ("mmap", (0, 4096, 3, 0x22 | 0x40000)): "ENOMEM",
        ("mmap", (0, 4096, 3, 0x22)): "allow",
    }
    for (name, args), verdict in expectations.items():
        if name in numbers:
            padded = tuple(args) + (0,) * (6 - len(args))
            assert _run_filter(program, numbers[name], padded) == verdict, (name, args)


# ---------------------------------------------------------------------------
# The cost of output: one program's output never costs the grader more than its own size,
# and never costs a concurrent program its verdict
# ---------------------------------------------------------------------------


@pytest.fixture(params=["namespaces", "plain", "plain-no-landlock"])
def every_mode(request, monkeypatch):
    """Each isolation mode, and plain mode as on a kernel without Landlock (skipped where unavailable)."""
    use_mode(request.param, monkeypatch)
    return request.param


def _resident_kb(field):
    """``VmRSS`` or ``VmHWM`` (the peak since the last reset) of this process, in kB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/self/status has no {field}")


def _peak_growth_mb(action):
    """(result of action(), how far this process's resident memory rose above where it was, in MB)."""
    Path("/proc/self/clear_refs").write_text("5")  # the peak is now the current size
    before = _resident_kb("VmRSS")
    result = action()
    return result, (_resident_kb("VmHWM") - before) / 1024


BIG_EXPECTED = "3\n" + "4 " * (2 << 20)  # 4 MiB: the stdio bound (16 times, plus 64 KiB) admits 60 MiB
BIG_STDIO = {"kind": "stdio", "inputs": [""], "outputs": [BIG_EXPECTED]}
# Programs and the size of what each prints: valid UTF-8 four bytes a character (an earlier judge
# decoded it to text of 4 bytes a character, and made two more copies of it), a 60 MiB
# number, 60 MiB of whitespace around the right answer, and a 60 MiB answer to a 2-byte
# expectation (refused from its frame's header: the sandbox never reads it).
OUTPUT_COSTS = {
    "non_bmp": ("import sys\nsys.stdout.write('3 ' + chr(0x1F600) * (15 << 20))", 2 + (60 << 20), BIG_STDIO, False),
    "long_number": ("import sys\nsys.stdout.write('3\\n' + '1' * (60 << 20))", 2 + (60 << 20), BIG_STDIO, False),
    "spaces_around_the_answer": (
        # built by the program, not written into it: a 4 MiB source costs the grader its own copies
        "import sys\nsys.stdout.write(chr(0x3000) * (18 << 20) + '3\\n' + '4 ' * (2 << 20))",
        (54 << 20) + len(BIG_EXPECTED),
        BIG_STDIO,
        True,
    ),
    "over_its_bound": ("import sys\nsys.stdout.write('1' * (60 << 20))", 60 << 20, {**STDIO, "outputs": ["6"]}, False),
}


@pytest.mark.parametrize("case", sorted(OUTPUT_COSTS))
def test_grading_one_program_grows_the_grader_by_at_most_its_output_plus_16_mb(every_mode, case):
    """Measured as the process's peak resident memory (VmHWM, reset before the call), around one
    verify_code call. An earlier grader failed every case, in every mode: 174 to 285 MB for 58 to
    60 MiB of output (it copied the frame twice, then decoded and copied it again)."""
    source, output_bytes, tests, verdict = OUTPUT_COSTS[case]
    result, growth = _peak_growth_mb(lambda: verifier.verify_code(completion(source), tests, timeout_s=20.0))
    assert result is verdict
    assert growth <= output_bytes / 2**20 + 16, f"{growth:.0f} MB for {output_bytes / 2**20:.0f} MiB of output"
    if case == "over_its_bound":
        assert growth <= 16  # refused unread


def test_the_parents_slowness_is_not_charged_to_the_program(every_mode, monkeypatch):
    """A correct program prints 4 MiB (more than the kernel buffers) with a 1-s limit while the parent is
    late for each read of its frame by 0.6 s (1.2 s in all, made here by a sleep before each
    receive, so the premise holds on any machine), and another thread of the grader holds the
    interpreter lock in C calls of about 0.3 s, as judges of other programs did. The program was
    done on time, so it passes. An earlier grader checked the deadline between the reads of one
    frame: False."""
    expected = "x" * (4 << 20)
    tests = {"kind": "stdio", "inputs": [""], "outputs": [expected]}
    program = completion(f"print('x' * {4 << 20})")
    assert verifier.verify_code(program, tests) is True  # warm: the sandbox's interpreter is compiled
    late = threading.Event()  # set once the harness is ready: only the program's frames are read late
    real_ready, real_receive = sandbox._wait_until_ready, sandbox._Sandbox._receive

    def ready_then_late(box, grace_s):
        real_ready(box, grace_s)
        late.set()

    def receive_late(box, buffer, wait_s):
        if late.is_set():
            time.sleep(0.6)
        return real_receive(box, buffer, wait_s)

    monkeypatch.setattr(sandbox, "_wait_until_ready", ready_then_late)
    monkeypatch.setattr(sandbox._Sandbox, "_receive", receive_late)
    haystack, hog = b"x" * (8 << 20), re.compile(b"(?:(?=x)(?!y)x)*+z")  # one match: about 0.3 s, in C
    stop = threading.Event()

    def hold_the_lock():
        while not stop.is_set():
            hog.match(haystack)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        start = time.monotonic()
        assert verifier.verify_code(program, tests, timeout_s=1.0) is True
        assert time.monotonic() - start > 1.2  # two late receives: the parent was slow indeed
    finally:
        stop.set()
        holder.join()


# Seven adversaries of one expected output (a number, then 4 MiB: a correct answer takes 64 pipe
# buffers), each within the output's bound (64 MiB + 64 KiB), each the kind of output that cost an
# earlier judge C calls holding the interpreter lock (a 14 MiB number: 0.2-0.3 s), or the CPU.
FAIR_EXPECTED = "7\n" + "x" * (4 << 20)
FAIR_CORRECT = "import time\ntime.sleep(0.4)\nprint('7'); print('x' * (4 << 20))"  # done as the judging starts
FAIR_ADVERSARIES = [
    "print('1' * (14 << 20)); print('x' * (4 << 20))",  # a 14 MiB number
    "print('7.' + '0' * (14 << 20)); print('x' * (4 << 20))",  # a 14 MiB number equal to 7
    "print('1e' + '9' * (14 << 20)); print('x' * (4 << 20))",  # a 14 MiB exponent
    "print('1' * (7 << 20) + '.' + '1' * (7 << 20)); print('x' * (4 << 20))",  # a 14 MiB decimal
    "print('7'); print(chr(0x1F600) * (7 << 19))",  # 14 MiB of valid UTF-8, 4 bytes a character
    "print(chr(0x3000) * ((14 << 20) // 3) + '8'); print('x' * (4 << 20))",  # 14 MiB of whitespace, wrong
    "import time\nend = time.monotonic() + 0.5\nwhile time.monotonic() < end:\n    pass\nprint(8)",  # CPU
]


@pytest.mark.slow
def test_a_correct_program_passes_beside_seven_adversaries_every_time(every_mode):
    """Eight graders at once (verifier.grade runs 8), seven of them adversarial: in 20 rounds the
    correct program passes every time and every adversary fails. On an earlier grader the correct
    program failed in 8 of 20 rounds (the parent, busy judging the adversaries, read its 4 MiB late
    and was charged for it), and the 14 MiB number equal to 7 passed in 7. What this guards is the
    parent's reading and judging, the same code in every mode: the 20 rounds run in namespaces mode
    (the sandbox's choice wherever user namespaces work, as on CI), 5 in each plain mode, where
    that failure rate is caught with probability 1 - 0.6^5 = 92% a run."""
    tests = {"kind": "stdio", "inputs": [""], "outputs": [FAIR_EXPECTED]}
    programs = [FAIR_CORRECT, *FAIR_ADVERSARIES]
    assert verifier.verify_code(completion(FAIR_CORRECT), tests) is True
    rounds = []
    with ThreadPoolExecutor(max_workers=len(programs)) as pool:
        for _ in range(20 if every_mode == "namespaces" else 5):
            verdicts = pool.map(lambda source: verifier.verify_code(completion(source), tests, timeout_s=2.0), programs)
            rounds.append(list(verdicts))
    assert [verdicts for verdicts in rounds if verdicts != [True] + [False] * len(FAIR_ADVERSARIES)] == []
