"""Test helper: a process a test starts ends with the test process, even when pytest is killed."""

import ctypes
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_parent() -> None:
    """`preexec_fn` of a long-lived child (the `vllm serve` of test_client.py): the kernel sends it
    SIGTERM when the process that started it dies, by SIGKILL included, so that no server outlives
    a killed test run. SIGTERM, not SIGKILL: the server's own shutdown then ends its engine. The
    setting survives `exec` (run.sh and evaluation/client.py exec into the server), not `fork`."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def sigint_as_at_a_terminal() -> None:
    """`preexec_fn` of a child a test interrupts with SIGINT: its SIGINT back to the default. A
    shell starts a background job (`cmd &`, without job control) with SIGINT ignored, every child
    inherits that, and a Python started so never sees the signal: the Ctrl-C tests would fail only
    for how the suite was launched."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
