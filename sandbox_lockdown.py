"""The confinement a sandbox child applies to itself before any program code runs.

Runs inside the sandbox only: the parent (``sandbox.py``) never imports this
file; it splices its text into ``sandbox_child.py``'s script in place of the
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

Not here: the harness and the program server (``sandbox_child.py``), the
parent's side of the sandbox (``sandbox.py``).
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
    mount(ctypes, libc, "tmpfs", "/tmp", "tmpfs", ms_nosuid | ms_nodev,
                 "size=1048576,nr_inodes=4096,mode=0755")
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
        check(ctypes, libc.syscall(add_rule, ctypes.c_int(ruleset_fd), ctypes.c_int(path_beneath),
                                          ctypes.byref(rule), ctypes.c_uint32(0)), "landlock " + path)
        os.close(fd)
    check(ctypes, libc.syscall(restrict, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
                 "landlock_restrict_self")
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
    check(ctypes, libc.mount(encode(source), encode(target), encode(fstype),
                                    ctypes.c_ulong(flags), encode(options)), "mount " + target)


def mount_setattr(ctypes, libc, path, flags, recursive):
    """Set mount attributes ``flags`` on the mount at ``path`` (and those below)."""

    class MountAttr(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clear", "propagation", "userns")]  # noqa: RUF012

    attr = MountAttr(flags, 0, 0, 0)
    at_fdcwd, at_recursive, sys_mount_setattr = -100, 0x8000, 442
    check(ctypes, libc.syscall(sys_mount_setattr, ctypes.c_int(at_fdcwd), path.encode(),
                                      ctypes.c_uint(at_recursive if recursive else 0),
                                      ctypes.byref(attr),
                                      ctypes.c_size_t(ctypes.sizeof(attr))), "mount_setattr")


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
    check(ctypes, libc.capset(ctypes.byref(Header(capability_version_3, 0)),
                                     (Data * 2)()), "capset")
    check(ctypes, libc.prctl(pr_set_dumpable, 0, 0, 0, 0), "dumpable")


def seccomp_program(pid):
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


def install_seccomp():
    """Install the filter of seccomp_program for this process."""
    ctypes, libc = load_libc()
    program = seccomp_program(os.getpid())

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),  # noqa: RUF012
                    ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]  # noqa: RUF012

    instructions = (Instruction * len(program))(*[Instruction(*row) for row in program])
    fprog = Program(len(program), instructions)
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    check(ctypes, libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog),
                                    0, 0), "seccomp")
