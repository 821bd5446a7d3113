"""The confinement a sandbox child applies to itself before any program code runs.

Runs inside the sandbox only: the parent (``grading/sandbox.py``) never imports this
file; it splices its text into ``grading/sandbox_child.py``'s script in place of the
``from sandbox_lockdown import ...`` line.  It imports nothing of ours and,
at the top, only ``os`` and ``sys``.

Holds, in the order the harness applies them: the minimal root of namespaces
mode (``isolate_filesystem``: pivot_root into a read-only tmpfs with binds of
the system's program directories, the interpreter, ``/proc``, five device
nodes and a size-limited private ``/tmp``), resource limits
(``set_limits``), the unprivileged identity (``drop_privileges``: own uid,
no new privileges, no capabilities, not dumpable), Landlock in plain mode
(``landlock``) and the seccomp filter (``seccomp_program``,
``install_seccomp``).

Not here: the harness and the program server (``grading/sandbox_child.py``), the
parent's side of the sandbox (``grading/sandbox.py``).
"""

import os
import sys


def load_libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def check(ctypes, result, what):
    """Raise OSError with errno when a libc call returned -1."""
    if result == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, what + ": " + os.strerror(errno))


def isolate_filesystem(tmpfs_bytes, owner):
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
    ctypes, libc = load_libc()
    ms_bind, ms_rec, ms_nosuid, ms_nodev, read_only_nosuid = 0x1000, 0x4000, 0x2, 0x4, 0x1 | 0x2
    system, binds, devices = visible_paths()
    # Open every source first: the new root is assembled on /tmp, which may hold them.
    sources = {path: os.open(path, os.O_PATH) for path in binds + devices + ["/proc"]}
    mount(ctypes, libc, "tmpfs", "/tmp", "tmpfs", ms_nosuid | ms_nodev, "size=1048576,nr_inodes=4096,mode=0755")
    os.mkdir("/tmp/tmp")
    options = f"size={tmpfs_bytes},nr_inodes=4096,mode=0700"
    if owner is not None:
        options += f",uid={owner},gid={owner}"
    mount(ctypes, libc, "tmpfs", "/tmp/tmp", "tmpfs", ms_nosuid | ms_nodev, options)
    for path in system:
        if os.path.islink(path):
            os.symlink(os.readlink(path), "/tmp" + path)
    for path, fd in sources.items():
        target = "/tmp" + path
        make_path(os.path.dirname(target))
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            make_path(target)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
        mount(ctypes, libc, f"/proc/self/fd/{fd}", target, None, ms_bind | ms_rec, None)
        mount_setattr(ctypes, libc, target, read_only_nosuid, recursive=True)
        os.close(fd)
    mount_setattr(ctypes, libc, "/tmp", read_only_nosuid, recursive=False)
    os.chdir("/tmp")
    sys_pivot_root = {"x86_64": 155, "aarch64": 41}[os.uname().machine]
    check(ctypes, libc.syscall(sys_pivot_root, b".", b"."), "pivot_root")
    mnt_detach = 2
    check(ctypes, libc.umount2(b".", mnt_detach), "umount old root")
    os.chdir("/tmp")


def visible_paths():
    """What a program may see: ``(system, binds, devices)``.

    ``system`` names the system's program directories (some may be symlinks
    or absent); ``binds`` the existing real directories among them, then this
    interpreter's prefixes and executable where not already inside one;
    ``devices`` five harmless device nodes.
    """
    system = ["/usr", "/bin", "/lib", "/lib32", "/lib64", "/libx32"]
    prefixes = {os.path.normpath(path) for path in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)}
    if "/" in prefixes:
        raise OSError("the sandbox interpreter's prefix is /; it cannot be isolated")
    binds = [path for path in system if os.path.lexists(path)]
    for path in sorted(prefixes) + [os.path.normpath(sys.executable)]:
        if not any(path == outer or path.startswith(outer + "/") for outer in binds):
            binds.append(path)
    binds = [path for path in binds if not os.path.islink(path) or path not in system]
    devices = ["/dev/" + name for name in ("null", "zero", "full", "random", "urandom")]
    return system, binds, devices


def landlock():
    """Plain mode: restrict file access with Landlock, where the kernel has it.

    Read and execute only below ``visible_paths`` (symlinked system
    entries are followed), read and write the device nodes, everything in the
    working directory; nothing else can be opened, listed or created.  With
    Landlock ABI 4+ TCP is denied too, with 6+ abstract unix sockets and
    signals outside the sandbox.  Returns the ABI version (0: no Landlock).
    """
    ctypes, libc = load_libc()
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
    check(ctypes, ruleset_fd, "landlock_create_ruleset")
    system, binds, devices = visible_paths()
    rules = [(path, execute | read_file | read_dir) for path in binds]
    rules += [(path, read_file | write_file) for path in devices]
    rules += [(".", handled)]  # the working directory (its parent is not searchable)
    for path, allowed in rules:
        fd = os.open(path, os.O_PATH)
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            allowed &= execute | read_file | write_file | (1 << 14) | (1 << 15)
        rule = PathBeneath(allowed & handled, fd)
        path_beneath = 1
        check(
            ctypes,
            libc.syscall(
                add_rule, ctypes.c_int(ruleset_fd), ctypes.c_int(path_beneath), ctypes.byref(rule), ctypes.c_uint32(0)
            ),
            "landlock " + path,
        )
        os.close(fd)
    check(ctypes, libc.syscall(restrict, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)), "landlock_restrict_self")
    os.close(ruleset_fd)
    return abi


def make_path(path):
    """Create ``path`` and missing parents as traverse-only (0711) directories,
    so that the way to a bound prefix (e.g. /root/.pyenv) cannot be listed."""
    if os.path.isdir(path):
        return
    make_path(os.path.dirname(path))
    os.mkdir(path)
    os.chmod(path, 0o711)


def mount(ctypes, libc, source, target, fstype, flags, options):
    """mount(2); raise OSError naming the target on failure."""
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    check(
        ctypes,
        libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(options)),
        "mount " + target,
    )


def mount_setattr(ctypes, libc, path, flags, recursive):
    """Set mount attributes ``flags`` on the mount at ``path`` (and those below)."""

    class MountAttr(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clear", "propagation", "userns")]  # noqa: RUF012

    attr = MountAttr(flags, 0, 0, 0)
    at_fdcwd, at_recursive, sys_mount_setattr = -100, 0x8000, 442
    check(
        ctypes,
        libc.syscall(
            sys_mount_setattr,
            ctypes.c_int(at_fdcwd),
            path.encode(),
            ctypes.c_uint(at_recursive if recursive else 0),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        ),
        "mount_setattr",
    )


def set_limits(limits, processes):
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


def drop_privileges(uid):
    """Become ``uid`` (None: stay), no new privileges, no capabilities, not dumpable."""
    ctypes, libc = load_libc()
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    pr_set_dumpable, pr_set_no_new_privs = 4, 38
    check(ctypes, libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0), "no_new_privs")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]  # noqa: RUF012

    class Data(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]  # noqa: RUF012

    capability_version_3 = 0x20080522
    check(ctypes, libc.capset(ctypes.byref(Header(capability_version_3, 0)), (Data * 2)()), "capset")
    check(ctypes, libc.prctl(pr_set_dumpable, 0, 0, 0, 0), "dumpable")


def syscall_numbers():
    """System-call numbers the filter names: ``(x86-64, aarch64)``; None where
    the architecture lacks the call (its newer form is listed too)."""
    return {
        "fork": (57, None),
        "vfork": (58, None),
        "clone": (56, 220),
        "clone3": (435, 435),
        "execve": (59, 221),
        "execveat": (322, 281),
        "setsid": (112, 157),
        "setpgid": (109, 154),
        "ptrace": (101, 117),
        "process_vm_readv": (310, 270),
        "process_vm_writev": (311, 271),
        "pidfd_open": (434, 434),
        "pidfd_getfd": (438, 438),
        "pidfd_send_signal": (424, 424),
        "rt_sigqueueinfo": (129, 138),
        "rt_tgsigqueueinfo": (297, 240),
        "kill": (62, 129),
        "tkill": (200, 130),
        "tgkill": (234, 131),
        "socket": (41, 198),
        "socketpair": (53, 199),
        "bind": (49, 200),
        "connect": (42, 203),
        "listen": (50, 201),
        "memfd_create": (319, 279),
        "shmget": (29, 194),
        "shmat": (30, 196),
        "shmctl": (31, 195),
        "semget": (64, 190),
        "semop": (65, 193),
        "semctl": (66, 191),
        "semtimedop": (220, 192),
        "msgget": (68, 186),
        "msgsnd": (69, 189),
        "msgrcv": (70, 188),
        "msgctl": (71, 187),
        "mq_open": (240, 180),
        "mq_unlink": (241, 181),
        "io_uring_setup": (425, 425),
        "io_uring_enter": (426, 426),
        "io_uring_register": (427, 427),
        "unshare": (272, 97),
        "setns": (308, 268),
        "add_key": (248, 217),
        "request_key": (249, 218),
        "keyctl": (250, 219),
        "bpf": (321, 280),
        "perf_event_open": (298, 241),
        "userfaultfd": (323, 282),
        "fcntl": (72, 25),
        "ioctl": (16, 29),
        "flock": (73, 32),
        "inotify_init": (253, None),
        "inotify_init1": (294, 26),
        "inotify_add_watch": (254, 27),
        "fanotify_init": (300, 262),
        "fadvise64": (221, 223),
        "mincore": (27, 232),
        "cachestat": (451, 451),
        "madvise": (28, 233),
        "preadv2": (327, 286),
        "pwritev2": (328, 287),
        "chmod": (90, None),
        "fchmod": (91, 52),
        "fchmodat": (268, 53),
        "fchmodat2": (452, 452),
        "umask": (95, 166),
        "setxattr": (188, 5),
        "lsetxattr": (189, 6),
        "fsetxattr": (190, 7),
        "setxattrat": (463, 463),
        "prlimit64": (302, 261),
        "getpriority": (140, 141),
        "setpriority": (141, 140),
        "sched_setparam": (142, 118),
        "sched_getparam": (143, 121),
        "sched_setscheduler": (144, 119),
        "sched_getscheduler": (145, 120),
        "sched_rr_get_interval": (148, 127),
        "sched_setaffinity": (203, 122),
        "sched_getaffinity": (204, 123),
        "sched_setattr": (314, 274),
        "sched_getattr": (315, 275),
        "ioprio_set": (251, 30),
        "ioprio_get": (252, 31),
        "migrate_pages": (256, 238),
        "move_pages": (279, 239),
        "get_robust_list": (274, 100),
        "kcmp": (312, 272),
        "process_madvise": (440, 440),
        "process_mrelease": (448, 448),
        "futex": (202, 98),
        "futex_waitv": (449, 449),
        "futex_wake": (454, 454),
        "futex_wait": (455, 455),
        "futex_requeue": (456, 456),
        "prctl": (157, 167),
        "mmap": (9, 222),
    }


def checked_calls():
    """The calls the filter does not simply deny: the block that checks their
    arguments (see ``seccomp_program``)."""
    return {
        "clone3": "ENOSYS",
        "clone": "CLONE",
        "kill": "SELF_ARG0",
        "tgkill": "SELF_ARG0",
        "fcntl": "FCNTL",
        "ioctl": "IOCTL",
        "socketpair": "SOCKETPAIR",
        "madvise": "MADVISE",
        "preadv2": "NOWAIT",
        "pwritev2": "NOWAIT",
        "chmod": "MODE_ARG1",
        "fchmod": "MODE_ARG1",
        "fchmodat": "MODE_ARG2",
        "fchmodat2": "MODE_ARG2",
        "umask": "UMASK",
        "getpriority": "PRIORITY",
        "setpriority": "PRIORITY",
        "ioprio_set": "IOPRIO",
        "ioprio_get": "IOPRIO",
        "prlimit64": "SELF_OR_ZERO",
        "sched_setparam": "SELF_OR_ZERO",
        "sched_getparam": "SELF_OR_ZERO",
        "sched_setscheduler": "SELF_OR_ZERO",
        "sched_getscheduler": "SELF_OR_ZERO",
        "sched_rr_get_interval": "SELF_OR_ZERO",
        "sched_setaffinity": "SELF_OR_ZERO",
        "sched_getaffinity": "SELF_OR_ZERO",
        "sched_setattr": "SELF_OR_ZERO",
        "sched_getattr": "SELF_OR_ZERO",
        "futex": "FUTEX",
        "futex_waitv": "ENOSYS",
        "futex_wake": "ENOSYS",
        "futex_wait": "ENOSYS",
        "futex_requeue": "ENOSYS",
        "prctl": "PRCTL",
        "mmap": "MMAP",
    }


def seccomp_program(pid):
    """The seccomp BPF program as ``(code, jt, jf, k)`` tuples.

    Denied with EPERM: process creation (fork, vfork, clone without
    CLONE_THREAD), execve, setsid/setpgid, ptrace and process_vm_*, pidfds,
    sigqueue, kill/tgkill aimed at anything but this process (the process
    group ``kill(0, sig)`` included), tkill, signal-on-I/O targets
    (fcntl F_SETOWN/F_SETOWN_EX/F_SETSIG, ioctl FIOSETOWN/SIOCSPGRP), the
    kernel keyring, socket() of any family, socketpair other than an
    AF_UNIX stream pair, bind/connect/listen (a datagram or named socket
    could reach a host socket or be found by another sandbox), memfd_create,
    System V and POSIX IPC, bpf, perf_event_open, userfaultfd, io_uring,
    unshare/setns.  Channels between sandboxes through shared kernel
    objects: file locks (flock, fcntl record, OFD and lease locks,
    F_NOTIFY), inotify/fanotify, page-cache eviction and residency probes
    (fadvise64, mincore, cachestat, madvise MADV_COLD/MADV_PAGEOUT,
    preadv2/pwritev2 with RWF_NOWAIT), permission bits for group or others
    (chmod family with any 0o077 bit, umask that clears one, extended
    attributes, hence ACLs), KSM page merging (madvise MADV_MERGEABLE,
    prctl PR_SET_MEMORY_MERGE), madvise MADV_COLLAPSE.  Acting on another
    process: priorities, scheduling, affinity, I/O priority and resource
    limits of any pid but 0 or this process (and of process groups or
    users), migrate_pages, move_pages, get_robust_list, kcmp,
    process_madvise, process_mrelease.

    Futexes: a futex call without FUTEX_PRIVATE_FLAG (keyed, on a
    file-backed page, by inode and offset: shared with every sandbox that
    maps the file) is skipped and returns 0, a spurious wake-up or a wake of
    nobody (see the FUTEX blocks for why not an errno); the PI commands
    (which name an owner thread by id, of any process) and the futex2 calls
    futex_waitv, futex_wake, futex_wait and futex_requeue (flags in memory
    or per call) get ENOSYS, as on a kernel without them.  mmap with
    MAP_HUGETLB (the host's huge-page pool) gets ENOMEM, as with an empty
    pool.  clone3 gets ENOSYS so that the C library falls back to clone for
    threads.  Foreign system-call ABIs (x32, i386 on x86-64) kill the process.
    """
    machine = os.uname().machine
    if machine not in ("x86_64", "aarch64"):
        raise OSError("no seccomp table for architecture " + machine)
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[machine]
    column = 0 if machine == "x86_64" else 1
    nr = {name: numbers[column] for name, numbers in syscall_numbers().items() if numbers[column] is not None}
    checked = checked_calls()
    load, jeq, jge, jset, ret, alu_and = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54
    allow, errno = 0x7FFF0000, 0x00050000
    eperm = ret, 0, 0, errno | 1

    def arg(index):  # the low 32 bits of argument ``index`` (both tables are little-endian)
        return (load, 0, 0, 16 + 8 * index)

    program = [
        (load, 0, 0, 4),
        (jeq, 1, 0, arch),
        (ret, 0, 0, 0x80000000),
        (load, 0, 0, 0),
        (jge, 0, 1, 0x40000000),
        (ret, 0, 0, 0x80000000),
    ]
    actions = sorted((number, checked.get(name, "EPERM")) for name, number in nr.items())
    labels = {}
    dispatch(actions, program, labels)
    f_commands = (8, 10, 15, 5, 6, 7, 36, 37, 38, 1024, 1026)  # owner/signal, locks, lease, notify
    blocks = {
        "CLONE": [arg(0), (jset, "ALLOW", "EPERM", 0x10000)],
        "SELF_ARG0": [arg(0), (jeq, "ALLOW", "EPERM", pid)],
        "SELF_OR_ZERO": [arg(0), (jeq, "ALLOW", 0, 0), (jeq, "ALLOW", "EPERM", pid)],
        "PRIORITY": [arg(0), (jeq, 0, "EPERM", 0), arg(1), (jeq, "ALLOW", 0, 0), (jeq, "ALLOW", "EPERM", pid)],
        "IOPRIO": [arg(0), (jeq, 0, "EPERM", 1), arg(1), (jeq, "ALLOW", 0, 0), (jeq, "ALLOW", "EPERM", pid)],
        # The command is the second argument (its low 32 bits, as the kernel reads it).
        "FCNTL": [arg(1)] + [(jeq, "EPERM", 0, command) for command in f_commands] + [(ret, 0, 0, allow)],
        "IOCTL": [arg(1), (jeq, "EPERM", 0, 0x8901), (jeq, "EPERM", "ALLOW", 0x8902)],
        "SOCKETPAIR": [arg(0), (jeq, 0, "EPERM", 1), arg(1), (alu_and, 0, 0, 0xF), (jeq, "ALLOW", "EPERM", 1)],
        # MADV_MERGEABLE (KSM), MADV_COLD, MADV_PAGEOUT, MADV_COLLAPSE.
        "MADVISE": [arg(2)] + [(jeq, "EPERM", 0, advice) for advice in (12, 20, 21, 25)] + [(ret, 0, 0, allow)],
        "NOWAIT": [arg(5), (jset, "EPERM", "ALLOW", 0x8)],
        "MODE_ARG1": [arg(1), (jset, "EPERM", "ALLOW", 0o077)],
        "MODE_ARG2": [arg(2), (jset, "EPERM", "ALLOW", 0o077)],
        "UMASK": [arg(0), (alu_and, 0, 0, 0o077), (jeq, "ALLOW", "EPERM", 0o077)],
        "PRCTL": [arg(0), (jeq, "EPERM", "ALLOW", 67)],  # PR_SET_MEMORY_MERGE (KSM for the whole process)
        "MMAP": [arg(3), (jset, "ENOMEM", "ALLOW", 0x40000)],  # MAP_HUGETLB: the host's huge-page pool
        # futex(uaddr, op, ...): the command is op & 0x7F (bit 7 FUTEX_PRIVATE_FLAG, bit 8
        # FUTEX_CLOCK_REALTIME; an op with higher bits the kernel refuses itself).  With the
        # private flag the futex is keyed by this process's mm: allowed, but for the PI
        # commands (6-8 LOCK/UNLOCK/TRYLOCK_PI, 11-13 WAIT_REQUEUE_PI, CMP_REQUEUE_PI,
        # LOCK_PI2), which name their owner by a thread id of any process in the pid
        # namespace (LOCK_PI tells an existing one, EPERM, from a free one, ESRCH): ENOSYS,
        # as on a kernel without PI futexes (glibc's PRIO_INHERIT mutexes report ENOTSUP).
        "FUTEX": [
            arg(1),
            (jset, 0, "FUTEX_SHARED", 128),
            (alu_and, 0, 0, 0x7F),
            (jge, "ENOSYS", 0, 11),
            (jge, "ALLOW", 0, 9),
            (jge, "ENOSYS", "ALLOW", 6),
        ],
        # Without the private flag a futex on a file-backed page is keyed by inode and
        # offset, shared by every process that maps the file, whatever its namespaces or
        # uid.  Such a call is skipped and returns 0, which is true for every
        # command that can be faked: WAIT and WAIT_BITSET return as on a spurious wake-up,
        # after which every caller re-checks its word and waits again (glibc's pthread_join
        # waits on the thread's tid with a shared futex, the kernel's wake at thread exit
        # being shared, so it spins until the kernel clears the tid); WAKE, WAKE_BITSET,
        # REQUEUE and CMP_REQUEUE found no waiter, the truth once no shared waiter can
        # exist.  No errno would do: glibc (2.36) calls futex_fatal_error (abort) on any
        # but EAGAIN/EINTR from an untimed wait (a contended process-shared mutex), on any
        # but EFAULT/EINVAL from a wake (sem_post of a process-shared semaphore), and on
        # EPERM, ENOSYS or EFAULT from a timed one (pthread_join): measured, EPERM, EAGAIN
        # and EINVAL each abort a program of test_threaded_programs_pass, 0 none.  WAKE_OP
        # (an atomic update 0 would skip), FUTEX_FD (gone from Linux) and PI: ENOSYS.
        "FUTEX_SHARED": [
            (alu_and, 0, 0, 0x7F),
            (jge, "ENOSYS", 0, 11),
            (jge, "NOTHING", 0, 9),
            (jge, "ENOSYS", 0, 5),
            (jeq, "ENOSYS", "NOTHING", 2),
        ],
        "ALLOW": [(ret, 0, 0, allow)],
        "EPERM": [eperm],
        "ENOSYS": [(ret, 0, 0, errno | 38)],
        "ENOMEM": [(ret, 0, 0, errno | 12)],
        "NOTHING": [(ret, 0, 0, errno | 0)],  # the call is skipped and returns 0
    }
    for label, block in blocks.items():
        labels[label] = len(program)
        program += block
    return [resolve_jumps(row, index, labels) for index, row in enumerate(program)]


def dispatch(actions, program, labels):
    """Append a search tree over sorted ``(number, label)`` pairs: a call
    listed jumps to its label's block, any other is allowed; a call costs
    about log2(len(actions)) comparisons, not one per listed call."""
    jeq, jge, ja, ret, allow = 0x15, 0x35, 0x05, 0x06, 0x7FFF0000
    if len(actions) <= 4:
        for number, label in actions:
            program += [(jeq, 0, 1, number), (ja, 0, 0, label)]
        program.append((ret, 0, 0, allow))
        return
    middle = len(actions) // 2
    right = "TREE" + str(len(labels)) + "_" + str(actions[middle][0])
    labels[right] = None
    program += [(jge, 0, 1, actions[middle][0]), (ja, 0, 0, right)]
    dispatch(actions[:middle], program, labels)
    labels[right] = len(program)
    dispatch(actions[middle:], program, labels)


def resolve_jumps(row, index, labels):
    """One instruction with its symbolic targets turned into relative offsets."""
    code, jt, jf, k = row

    def offset(target, limit):
        if isinstance(target, int):
            return target
        distance = labels[target] - index - 1
        if not 0 <= distance <= limit:
            raise OSError("seccomp jump out of range")
        return distance

    if code == 0x05:
        return code, 0, 0, offset(k, 0xFFFFFFFF)
    return code, offset(jt, 255), offset(jf, 255), k


def install_seccomp():
    """Install the filter of seccomp_program for this process."""
    ctypes, libc = load_libc()
    program = seccomp_program(os.getpid())

    class Instruction(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_uint16),
            ("jt", ctypes.c_uint8),  # noqa: RUF012
            ("jf", ctypes.c_uint8),
            ("k", ctypes.c_uint32),
        ]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]  # noqa: RUF012

    instructions = (Instruction * len(program))(*[Instruction(*row) for row in program])
    fprog = Program(len(program), instructions)
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    check(ctypes, libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0), "seccomp")
