"""The sandbox child: every line that runs inside a sandboxed interpreter.

The parent (``grading/sandbox.py``) never imports this file.  It reads it as text,
splices in the text of ``grading/sandbox_lockdown.py`` and ``grading/typed_json.py`` where
the two ``from ... import`` lines below stand (``sandbox._child_script``), has
the sandbox interpreter compile it, and runs the code object with
``python -I -c LOADER TAG harness`` (the loader reads it from stdin).  The script uses
only builtins and standard modules, calls its functions by name and gets no
parent global and no expected output: what a test needs arrives as the
marshalled request on stdin (program, test inputs, limits).

Roles (``argv[2]``):

* ``harness`` (process ``A``): reads the request, confines itself
  (``sandbox_lockdown``: minimal root or Landlock, limits, privileges,
  seccomp), sends the ready frame, then runs the program on the inputs
  (``stdio``, ``call``) or runs the trusted ``check(candidate)`` code
  against program server ``B`` (``assert``).
* ``server`` (process ``B``, assert kind only): loads the program and answers
  candidate calls with typed JSON values; it never holds the test code.

Frames (child -> parent): tag byte + 8-byte length + payload.
  R ready (set-up done, before any program code)   F set-up failed
  L call module loaded   O stdout bytes of one stdio test
  V typed-JSON return value   P assert check passed   X program failed

Not here: starting, limiting and killing the child, reading its frames and
judging them (``grading/sandbox.py``, ``grading/judge.py``).
"""

import builtins
import marshal
import os
import sys

from sandbox_lockdown import drop_privileges, install_seccomp, isolate_filesystem, landlock, set_limits
from typed_json import decode_typed, encode


def main():
    """Run the role named in argv: the harness, or the assert-kind server."""
    if sys.argv[2] == "server":
        serve(int(sys.argv[3]))
    else:
        harness()


def harness():
    """Set the sandbox up, then run the program on the requested tests."""
    request = marshal.loads(read_all(0))
    devnull = os.open("/dev/null", os.O_RDWR)
    channel = os.dup(1)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    kind = request["kind"]
    try:
        if request["namespaces"]:
            isolate_filesystem(request["limits"]["tmpfs"], request["uid"])
        set_limits(request["limits"], processes=kind != "assert")
        drop_privileges(request["uid"])
        os.umask(0o077)  # nothing the program creates is readable by another uid
        if request["landlock"] and landlock() < 1:
            raise OSError("Landlock was detected but is not available")
        if kind == "stdio":
            stdio_files = (os.memfd_create("stdin"), os.memfd_create("stdout"))
        if kind == "assert":
            server = start_server(request["loader"], request["code"], devnull, request["limits"]["processes"])
            set_limits(request["limits"], processes=True)
        install_seccomp()
    except Exception as error:  # noqa: BLE001 (any set-up failure is reported)
        send(channel, b"F", repr(error).encode())
        return
    send(channel, b"R")
    try:
        code = compile(request["program"], "<solution>", "exec")
    except BaseException:  # noqa: BLE001 (a program that does not compile fails)
        send(channel, b"X")
        if kind == "assert":
            end_server(server)
        return
    sys.argv = ["solution.py"]
    if kind == "stdio":
        run_stdio(code, request["inputs"], stdio_files, channel)
    elif kind == "call":
        run_call(code, request["fn_name"], request["inputs"], channel)
    else:
        try:
            run_assert(request, server, channel)
        finally:
            end_server(server)


def read_all(fd):
    """Every byte readable from ``fd`` until EOF."""
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def send(fd, tag, payload=b""):
    """Write one frame to ``fd``."""
    write_all(fd, tag + len(payload).to_bytes(8, "big") + payload)


def write_all(fd, data):
    """Write all of ``data`` to ``fd``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def recv(fd):
    """Read one frame from ``fd``: ``(tag, payload)``; EOFError at the end."""
    header = read_exactly(fd, 9)
    return header[:1], read_exactly(fd, int.from_bytes(header[1:], "big"))


def read_exactly(fd, size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError("peer closed the channel")
        data += chunk
    return bytes(data)


def fresh_stream(fd, mode):
    """A new text stream on ``fd``, installed as sys.std* and sys.__std*__."""
    stream = open(fd, mode, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    name = "stdin" if "r" in mode else "stdout"
    setattr(sys, name, stream)
    setattr(sys, f"__{name}__", stream)
    return stream


def rewind(fd, data):
    """Make memfd ``fd`` hold exactly ``data``, positioned at its start."""
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)


def finish_threads():
    """Join the program's non-daemon threads, as interpreter exit would."""
    threading = sys.modules.get("threading")
    if threading is None:
        return
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()


def exec_main(code):
    """Run the program as ``__main__``; True on a clean exit (incl. exit(0))."""
    import atexit

    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})  # noqa: S102 (the program)
        finish_threads()
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


def run_stdio(code, inputs, files, channel):
    """Run the program once per input; send each test's stdout (frame O)."""
    stdin_fd, stdout_fd = files
    for data in inputs:
        rewind(stdin_fd, data)
        rewind(stdout_fd, b"")
        os.dup2(stdin_fd, 0)
        os.dup2(stdout_fd, 1)
        fresh_stream(0, "r")
        stream = fresh_stream(1, "w")
        ok = exec_main(code)
        flushes = [getattr(sys.stdout, "flush", None), stream.flush]
        for flush in filter(None, flushes):
            try:
                flush()
            except BaseException:  # noqa: BLE001 (output that cannot be flushed is lost)
                ok = False
        if not ok:
            send(channel, b"X")
            return
        send(channel, b"O", os.pread(stdout_fd, os.fstat(stdout_fd).st_size, 0))


def load_module(code):
    """Execute the program's top level; its namespace, or None if it failed."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(code, namespace)  # noqa: S102 (the program)
    except BaseException:  # noqa: BLE001 (whatever the program raises, it failed)
        return None
    return namespace


def resolve(namespace, name):
    """``Solution().name`` when ``class Solution`` has it, else top-level ``name``."""
    solution = namespace.get("Solution")
    if isinstance(solution, type) and hasattr(solution, name):
        return getattr(solution(), name)
    function = namespace.get(name)
    if callable(function):
        return function
    raise LookupError("the program does not define " + name)


def run_call(code, fn_name, inputs, channel):
    """Load the module (frame L), then call once per input (frames V)."""
    namespace = load_module(code)
    if namespace is None:
        send(channel, b"X")
        return
    send(channel, b"L")
    for blob in inputs:
        try:
            value = resolve(namespace, fn_name)(*marshal.loads(blob))
            encoded = encode(value).encode()
        except BaseException:  # noqa: BLE001 (whatever the program raises, it failed)
            send(channel, b"X")
            return
        send(channel, b"V", encoded)


def start_server(loader, code, devnull, processes):
    """Assert kind: start the program server B (``loader`` reads this very
    script's marshalled ``code`` from its stdin); wait for its ready frame.

    SIGCHLD is ignored so that the kernel reaps B as soon as it dies.
    """
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    to_server, server_stdin = os.pipe()
    server_stdout, from_server = os.pipe()
    argv = [sys.executable, "-I", "-c", loader, sys.argv[1], "server", str(processes)]
    os.posix_spawn(
        sys.executable,
        argv,
        dict(os.environ),
        file_actions=[
            (os.POSIX_SPAWN_DUP2, to_server, 0),
            (os.POSIX_SPAWN_DUP2, from_server, 1),
            (os.POSIX_SPAWN_DUP2, devnull, 2),
        ],
    )
    for fd in (to_server, from_server):
        os.close(fd)
    write_all(server_stdin, len(code).to_bytes(8, "big") + code)
    tag, _ = recv(server_stdout)
    if tag != b"R":
        raise OSError("the program server failed to start")
    return server_stdin, server_stdout


def end_server(server):
    """Assert kind, in A: close B's pipes, then wait until B is gone.

    B's next read ends (EOF) and it exits; A exits only after that, so that B
    dies while it is still A's child.  Were A to exit first, B would be
    orphaned: no longer listed below A when the parent stops the sandbox, it
    would be reaped as a zombie by the host's PID 1.  A B that does not exit
    (a program's thread that never ends) keeps A waiting until the parent,
    which has the verdict already, kills B and then A.  SIGCHLD is ignored, so
    the kernel reaps B and ``waitpid`` reports ECHILD once it is gone.
    """
    for fd in server:
        os.close(fd)
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        pass


def run_assert(request, server, channel):
    """Assert kind, in A: run ``check(candidate)`` with a proxy to B."""
    to_server, from_server = server
    send(to_server, b"S", marshal.dumps((request["program"], request["entry_point"])))
    try:
        loaded = recv(from_server)[0] == b"L"
    except EOFError:
        loaded = False
    if not loaded:
        send(channel, b"X")
        return

    def candidate(*args, **kwargs):
        send(to_server, b"C", marshal.dumps((args, kwargs)))
        tag, payload = recv(from_server)
        if tag == b"V":
            return decode_typed(payload.decode("utf-8"))
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
        send(channel, b"X")
        return
    send(channel, b"P")


def serve(processes):
    """Assert kind, in B: load the program, then answer candidate calls.

    B inherits A's limits, no-new-privileges and empty capability sets; fd 2
    is /dev/null (opened by A: /dev is nodev in namespaces mode).
    """
    import resource

    from_harness, to_harness = os.dup(0), os.dup(1)
    os.dup2(2, 0)
    os.dup2(2, 1)
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    install_seccomp()
    send(to_harness, b"R")
    program, entry_point = marshal.loads(recv(from_harness)[1])
    try:
        namespace = load_module(compile(program, "<solution>", "exec"))
        function = resolve(namespace, entry_point)
    except BaseException:  # noqa: BLE001 (whatever the program raises, it failed)
        send(to_harness, b"X")
        return
    send(to_harness, b"L")
    while True:
        args, kwargs = marshal.loads(recv(from_harness)[1])
        try:
            reply = (b"V", encode(function(*args, **kwargs)).encode())
        except BaseException as error:  # noqa: BLE001 (reported to A as an exception name)
            reply = (b"E", builtin_error_name(error).encode("ascii", "replace"))
        send(to_harness, *reply)


def builtin_error_name(error):
    """Name of ``error``'s class if it is a builtin exception, else Exception."""
    for name, value in vars(builtins).items():
        if value is type(error):
            return name
    return "Exception"


if __name__ == "__main__":
    main()
