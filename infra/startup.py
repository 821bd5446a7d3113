"""What an entry point sets before torch, transformers and vLLM load. credo.py, eval.py and
evaluation/client.py import this module first, so that `python credo.py ...` run directly behaves
as `bash run.sh ...` does (run.sh exports the same settings for the other processes it starts).

* Library logging goes to stderr and shows errors only; `CREDO_VERBOSE=1` (run.sh's `--verbose`)
  shows the libraries' INFO lines and warnings too. vLLM's loggers (`VLLM_LOGGING_LEVEL`,
  `VLLM_LOGGING_STREAM`; and before vLLM configures them, when an engine starts, its import-time
  notices such as "Triton is installed, but doesn't include CPU backend"), transformers'
  (`TRANSFORMERS_VERBOSITY`), torch's C++ warnings (`TORCH_CPP_LOG_LEVEL`: the NUMA-binding
  notice), the tokenizers' fork notice (`TOKENIZERS_PARALLELISM`), and the Python warnings the
  libraries raise from their own code (deprecation notices). A variable already set wins.
  Errors are never silenced, and a warning raised from our own code is shown.
* `python credo.py <config> [key=value ...]` run directly: its arguments are checked as a config
  here (config.exit_on_bad_run_arguments, which imports no torch), so a mistake is one line in
  well under a second instead of after torch, transformers and vLLM load (run.sh checks them
  the same way first, dataprep.data first-use).
* Ctrl-C is one line and exit 130 (128 + SIGINT) where the command has no handling of its own:
  while the libraries import (an uncaught KeyboardInterrupt), and while they shut down (in an
  atexit callback or a finalizer, where Python prints a traceback and exits 0). The exit comes
  after every other atexit callback has run (this one is registered first, so it runs last).

Holds no state of a run. Not here: the loop's preemption guard (infra/checkpoint.py), credo.py's
own line for a Ctrl-C while a run loads, and run.sh's copy of the environment settings.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import warnings
from pathlib import Path

import config

VERBOSE = os.environ.get("CREDO_VERBOSE", "0") == "1"
# The libraries whose own logging and warnings are quiet unless VERBOSE (module-name prefixes).
LIBRARIES = ("vllm", "transformers", "torch", "triton", "huggingface_hub", "tokenizers", "safetensors")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process that Ctrl-C ended


def environment(verbose: bool) -> dict[str, str]:
    """The environment variables the libraries read when they load: errors only, on stderr, or
    (verbose) their INFO lines, with torch's C++ logging left at its default."""
    level = "INFO" if verbose else "ERROR"
    settings = {
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
        "VLLM_LOGGING_LEVEL": level,
        "TRANSFORMERS_VERBOSITY": level.lower(),
        "TOKENIZERS_PARALLELISM": "false",
    }
    return settings if verbose else {**settings, "TORCH_CPP_LOG_LEVEL": "ERROR"}


def quiet_libraries(verbose: bool) -> None:
    """Library logging on stderr, errors only unless `verbose`; a variable already set wins."""
    for name, value in environment(verbose).items():
        os.environ.setdefault(name, value)
    if verbose:
        return
    # vLLM attaches its handler only when an engine starts; until then a warning of its import (Triton's
    # CPU-backend notice) would reach Python's last-resort handler on stderr.
    logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"].upper())
    for library in LIBRARIES:
        warnings.filterwarnings("ignore", module=rf"{library}(\.|$)")


interrupted = False  # a Ctrl-C was reported: the process exits 130 once its atexit callbacks have run


def program() -> str:
    """The command's name for its one line: credo, eval, ask, serve."""
    name = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c", "-m") else "credo"
    if name == "client" and len(sys.argv) > 1 and sys.argv[1] in ("ask", "serve"):
        return sys.argv[1]
    return name


def report_interrupt(where: str) -> None:
    """One line on stderr, for the first Ctrl-C only; exit 130 follows at the end of shutdown."""
    global interrupted
    if not interrupted:
        print(f"{program()}: interrupted (Ctrl-C){where}", file=sys.stderr, flush=True)
    interrupted = True


def excepthook(kind, error, traceback) -> None:
    """An uncaught KeyboardInterrupt (Ctrl-C while the libraries import): one line, not a traceback."""
    if issubclass(kind, KeyboardInterrupt):
        report_interrupt("")
    else:
        previous_excepthook(kind, error, traceback)


def unraisablehook(unraisable) -> None:
    """A KeyboardInterrupt where Python cannot raise it (an atexit callback, a finalizer: the libraries'
    shutdown): one line, and exit 130 at the end instead of 0."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt):
        report_interrupt(" while shutting down")
    else:
        previous_unraisablehook(unraisable)


def exit_if_interrupted() -> None:
    """The last atexit callback: exit 130 where a Ctrl-C was reported (after every library's own
    shutdown ran; os._exit, because an atexit callback cannot change the exit status otherwise)."""
    if interrupted:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed, or a closed pipe: nothing more can be said
                pass
        os._exit(EXIT_INTERRUPTED)


def check_credo_arguments() -> None:
    """credo.py run as the program (directly, or by torchrun): its arguments, checked now."""
    main = sys.modules.get("__main__")
    if Path(getattr(main, "__file__", None) or "").name == "credo.py":
        config.exit_on_bad_run_arguments(sys.argv[1:])


quiet_libraries(VERBOSE)
previous_excepthook, previous_unraisablehook = sys.excepthook, sys.unraisablehook
sys.excepthook = excepthook
sys.unraisablehook = unraisablehook
atexit.register(exit_if_interrupted)
check_credo_arguments()  # after the hooks: validating a config loads torch, and Ctrl-C may come then
