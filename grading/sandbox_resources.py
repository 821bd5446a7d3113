"""What the parent takes for one sandbox and gives back: its uid, its disk,
its processes.

``UidPool``: under a root parent every sandbox runs as a uid of its own.
Ending the processes: ``descendants`` lists them, ``kill_and_wait`` kills
one and waits until its parent has reaped it, ``kill_group`` and ``reap``
end the leader's group and the leader (``sandbox._Sandbox._stop`` uses them
in that order).

The working directory, plain mode only (in namespaces mode it is a tmpfs
inside the sandbox's own mount namespace, gone with it).  ``make_workdir`` creates
``/tmp/credo-sandbox-*/work``; where the parent may mount (a root parent:
``tmpfs_workdirs_work`` probes once), ``work`` is a tmpfs of ``tmpfs_mb``
and 4,096 inodes, so disk and inodes are bounded as in namespaces mode, and
removing it is one unmount.  Elsewhere ``work`` is a plain directory: each
file is bounded by ``RLIMIT_FSIZE`` but their number and total size are not
(documented in docs/verifier.md).  ``remove_workdir`` unmounts and deletes
the directory whatever the program left in it: any depth (iteratively, one
open directory at a time, never following a link), any permissions, and
raises only for what no program can cause.

How a sandbox process starts: ``namespace_command`` (the ``unshare`` prefix of namespaces
mode), ``sandbox_tag`` (its argv[1], naming the parent that owns it) and
``scrubbed_environment`` (the only variables a program sees).

Not here: starting, limiting and killing the sandbox (``grading/sandbox.py``), the
limits the child applies to itself (``grading/sandbox_lockdown.py``).  Imports
nothing of ours.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import stat
import subprocess
import tempfile
import threading
import time

logger = logging.getLogger(__name__)

SANDBOX_UID_BASE = 1 << 30  # sandbox uids under a root parent; see UidPool
SANDBOX_UID_SLOTS = 1024
_LIBC = ctypes.CDLL(None, use_errno=True)
_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 0x2, 0x4, 0x2
WORKDIR_INODES = 4096


class UidPool:
    """Distinct host uids for the concurrent sandboxes of this process.

    Under a root parent every sandbox runs as a uid of its own, so that
    ``RLIMIT_NPROC`` counts only its own threads (one program cannot use up a
    limit a concurrent program needs) and no sandbox can signal or read the
    files of another.  The range is ``SANDBOX_UID_BASE + (pid mod 2**20) *
    SANDBOX_UID_SLOTS + slot``: processes of one host get disjoint ranges
    unless their pids agree modulo 2**20.  A uid is reused only after every
    process of its previous sandbox is dead, and slots are taken in turn (a
    file left where another uid could find it is found by the same uid only
    1,024 sandboxes later; see docs/verifier.md).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.taken: set[int] = set()
        self.cursor = 0  # slots are handed out in turn, so a uid recurs only every 1,024 sandboxes

    def acquire(self) -> int | None:
        """A free uid, or None when every slot is taken."""
        with self.lock:
            order = [(self.cursor + step) % SANDBOX_UID_SLOTS for step in range(SANDBOX_UID_SLOTS)]
            free = next((slot for slot in order if slot not in self.taken), None)
            if free is None:
                return None
            self.taken.add(free)
            self.cursor = (free + 1) % SANDBOX_UID_SLOTS
        return SANDBOX_UID_BASE + (os.getpid() % (1 << 20)) * SANDBOX_UID_SLOTS + free

    def release(self, uid: int) -> None:
        with self.lock:
            self.taken.discard((uid - SANDBOX_UID_BASE) % SANDBOX_UID_SLOTS)


def tmpfs_workdirs_work() -> bool:
    """Whether this process can give plain-mode sandboxes a tmpfs working
    directory (it can mount: root with ``CAP_SYS_ADMIN``); probed by mounting one."""
    if os.geteuid() != 0:
        return False
    probe = tempfile.mkdtemp(prefix="credo-sandbox-probe-")
    try:
        if not _mount_tmpfs(probe, 1 << 20, None):
            return False
        _unmount(probe)
        return True
    finally:
        os.rmdir(probe)


def make_workdir(uid: int | None, tmpfs_bytes: int | None) -> tuple[str, str]:
    """``(base, work)``: a fresh ``base`` owned by the parent, traverse-only
    (``work``'s absolute path, the program's ``TMPDIR``, must resolve for the
    program's uid), and ``work`` (0700, owned by ``uid``; a tmpfs of
    ``tmpfs_bytes`` unless that is None)."""
    base = tempfile.mkdtemp(prefix="credo-sandbox-")
    os.chmod(base, 0o711)
    work = os.path.join(base, "work")
    os.mkdir(work, 0o700)
    if tmpfs_bytes is not None and not _mount_tmpfs(work, tmpfs_bytes, uid):
        error = ctypes.get_errno()
        remove_workdir(base)
        raise OSError(error, f"cannot mount the sandbox's tmpfs on {work}: {os.strerror(error)}")
    if uid is not None:
        os.chown(work, uid, uid)
    return base, work


def _mount_tmpfs(path: str, size: int, owner: int | None) -> bool:
    """Mount a tmpfs of ``size`` bytes and ``WORKDIR_INODES`` inodes on ``path``."""
    options = f"size={size},nr_inodes={WORKDIR_INODES},mode=0700"
    if owner is not None:
        options += f",uid={owner},gid={owner}"
    return _LIBC.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV), options.encode()) == 0


def _unmount(path: str) -> None:
    if _LIBC.umount2(path.encode(), _MNT_DETACH) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"cannot unmount {path}: {os.strerror(error)}")


def remove_workdir(base: str) -> None:
    """Unmount ``base/work`` where it is a mount point, then delete ``base``."""
    work = os.path.join(base, "work")
    if os.path.ismount(work):
        _unmount(work)
    remove_tree(base)


def remove_tree(root: str) -> None:
    """Delete the directory ``root`` and everything below it, whatever the
    permissions and however deep: one directory open at a time (climbing back
    through ``..``), never following a symbolic link, each directory made
    0700 before it is read.  No process may still be writing below ``root``."""
    os.chmod(root, 0o700)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    pending = [_clear_files(fd)]  # per open level: subdirectories left to remove
    names: list[str] = []  # the name of each level below root
    try:
        while True:
            if pending[-1]:
                name = pending[-1].pop()
                os.chmod(name, 0o700, dir_fd=fd)
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = child
                names.append(name)
                pending.append(_clear_files(fd))
                continue
            pending.pop()
            if not names:
                break
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(root)


def _clear_files(fd: int) -> list[str]:
    """Unlink every entry of directory ``fd`` that is not a directory; return
    the names of its subdirectories."""
    directories = []
    for entry in os.scandir(fd):
        if stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode):
            directories.append(entry.name)
        else:
            os.unlink(entry.name, dir_fd=fd)
    return directories


def descendants(pid: int) -> list[int]:
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


STOP_ROUNDS = 3  # listings of the processes below a sandbox's leader when it is stopped


def kill_and_wait(pid: int, timeout_s: float = 10.0) -> None:
    """SIGKILL ``pid`` and wait (bounded) until its parent has reaped it.

    The bound is generous on purpose: on a starved machine a killed process can take
    over a second to go, and the group kill that follows would orphan it as a zombie
    if its parent died first. A process that goes at once costs no wait."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.001)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group led by ``proc`` (before it is reaped)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def reap(proc: subprocess.Popen) -> None:
    """Wait for a killed child so that no zombie is left behind."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        logger.warning("process %d did not exit 10 s after SIGKILL", proc.pid)


# ---------------------------------------------------------------------------
# How a sandbox process starts
# ---------------------------------------------------------------------------


def namespace_command(unshare: str, as_root: bool) -> list[str]:
    """The ``unshare`` prefix of a namespaces-mode child.

    Under a root parent no user namespace is made: the harness builds its
    mount namespace as root, then switches to its own unprivileged uid.
    Otherwise a user namespace maps the parent's uid to root inside it.
    """
    user = [] if as_root else ["--user", "--map-root-user"]
    return [unshare, *user, "--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts", "--mount", "--mount-proc"]


def sandbox_tag() -> str:
    """argv[1] of every sandbox process: names the parent that owns it.

    >>> sandbox_tag() == f"credo-sandbox:{os.getpid()}"
    True
    """
    return f"credo-sandbox:{os.getpid()}"


def scrubbed_environment(home: str) -> dict:
    """The only environment variables a sandboxed program sees."""
    threads = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8", **threads}
