"""The commands README.md and docs/usage.md print, run exactly as printed, in a shell a new user
has: `.venv` not activated (no .venv/bin on PATH, no VIRTUAL_ENV) and none of run.sh's or the
libraries' settings in the environment.

Every printed command is either run here (it finishes in seconds) or named in SKIPPED with the
reason; a command a doc starts to print fails the test until it is put in one of the two. A run
command exits as documented (0, or, for the bad-input samples, non-zero with the printed line as
its whole stderr), prints no traceback, and its stdout holds no library log line: stdout is the
program's own, library logging goes to stderr (README, "Two commands to start with").

Where a printed command is found: the lines of a ```bash block (a command may continue over
lines), the `$ ` lines of a plain ``` block (the lines under one are what it prints), and a
backticked `bash run.sh ...` in the prose. A backticked command with a placeholder (`<name>`,
`[key=value ...]`, `a,b`) is a template, not a command, and is not run."""

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/usage.md")

# The printed commands that finish in seconds: each is run.
RUN = {
    "bash run.sh",  # the README's "`bash run.sh` shows pip's progress": the help
    "bash run.sh list",
    "bash run.sh table main",
    "bash run.sh --help-config",
    "bash run.sh tiny engine=hf --dry-run",
    "bash run.sh tiny learning_rate=1e-5",  # the bad-input samples: non-zero, the printed line
    "bash run.sh tiny grad_accum=-1",
    "bash run.sh tiny model=/nonexistent",
}
# The printed commands not run here, and why. Minutes on 2 CPU cores:
MINUTES = {
    "bash run.sh toy": "the toy demonstration (docs/toy.md, Times)",
    "bash run.sh toy --tables": "the toy's tables: half an hour",
    "bash run.sh test": "the suite itself",
    "bash run.sh setup": "creates .venv and .cache/tiny on first use",
    "bash run.sh tiny": "a 20-step training run",
    "bash run.sh tiny method=rlcr channel=verbalized alpha=0 kappa=0": "a 20-step training run",
}
# Needing what a clean clone here does not have (GPUs, the hub, a trained checkpoint, a server):
ELSEWHERE = {
    "bash run.sh math": "Qwen3-8B: GPUs and the hub",
    "bash run.sh math seed=44 kappa=0.5 max_steps=100": "Qwen3-8B: GPUs and the hub",
    "NPROC=8 bash run.sh math activation_checkpointing=true": "8 GPUs and the hub",
    "bash run.sh rlcr domain=code seed=44": "Qwen3-8B on DeepCoder: GPUs and the hub",
    "bash run.sh math lora_rank=32 lora_quant=nf4 lr=2e-5": "Qwen3-8B under QLoRA: a GPU and the hub",
    "bash run.sh fixtures": "downloads from the hub",
    "bash run.sh gpucheck": "a GPU machine",
    "bash run.sh eval --ckpt runs/math-s43/ckpt/step_001187,runs/math-s44/ckpt/step_001187 --sets math500,aime24": (
        "two trained math runs"
    ),
    "bash run.sh eval --ckpt Qwen/Qwen3-8B --sets math500 --seed 44": "the hub and the prepared math500",
    "bash run.sh eval --ckpt runs/tiny-s43/ckpt/step_000020 --sets tiny=.cache/tiny/math_test.jsonl:math --n 4": (
        "a 20-step tiny run's checkpoint"
    ),
    "bash run.sh serve runs/tiny-s43/ckpt/step_000020 --port 8000": "a checkpoint; a server runs until stopped",
    (
        "bash run.sh ask --server http://127.0.0.1:8000 --ckpt runs/tiny-s43/ckpt/step_000020 --threshold 0.5 "
        '"What is 12 + 39?"'
    ): "a running server",
    'bash run.sh ask --ckpt runs/tiny-s43/ckpt/step_000020 --json "What is 12 + 39?"': "a tiny run's checkpoint",
    'bash run.sh ask --ckpt runs/toy/credo/ckpt/step_000200 "What is 3 + 2 + 5?"': "the toy run's checkpoint",
    "curl": "the two protocol requests: a running server",
    "python -m vllm.entrypoints.openai.api_server": "vLLM's server (what `serve` runs with the CPU wheel)",
}
# Changing the checkout, which a test must not, or checked elsewhere:
OTHER = {
    "bash run.sh format": "rewrites source files",
    ".venv/bin/python bench/summary.py --write-docs docs/results.md": "rewrites docs/results.md",
    "bash run.sh lint": "CI's lint step runs it; here it would fail on a style slip in the tree, not on the docs",
}
SKIPPED = {**MINUTES, **ELSEWHERE, **OTHER}

TEMPLATE = re.compile(r"<|\[|\.\.\.|a,b")  # a placeholder: the command is a pattern, not one to run
INLINE = re.compile(r"`((?:[A-Z_]+=\S+ )*(?:bash run\.sh|\.venv/bin/python|python)\b[^`]*)`")
FENCED = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# A library's log line: vLLM's and transformers' "INFO 11-29 10:42:10 [...]" / "WARNING ...", torch's
# C++ "[W1129 10:42:10.313 utils.cpp:68]", a Python warning, or an import-time notice.
LIBRARY_LOG = re.compile(
    r"^(\x1b\[[0-9;]*m)?(DEBUG|INFO|WARNING|WARN)\b|^\[[DIWE]\d{4} |Warning: |Triton is installed|^\[transformers\]"
)


def key(command: str) -> str:
    """A command as the lists name it: its words, without a trailing comment."""
    return " ".join(shlex.split(command, comments=True, posix=False)) if command.strip() else ""


def bash_commands(block: str) -> list[str]:
    """The commands of a ```bash block, each as printed (one continues while its quotes are open)."""
    commands, pending = [], ""
    for line in block.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on on the next line
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            commands.append(pending)
        pending = ""
    assert not pending, f"an unclosed quote in a bash block: {pending!r}"
    return commands


def printed_commands(text: str) -> list[tuple[str, str | None]]:
    """(command as printed, its printed output or None) for each command a doc prints."""
    found = []
    for lang, block in FENCED.findall(text):
        if lang == "bash":
            found += [(command, None) for command in bash_commands(block)]
        elif lang == "":  # a transcript: `$ command`, then what it prints
            lines = block.splitlines()
            for i, line in enumerate(lines):
                if line.startswith("$ "):
                    output = []
                    for following in lines[i + 1 :]:
                        if following.startswith("$ "):
                            break
                        output.append(following)
                    found.append((line[2:], "\n".join(output)))
    prose = FENCED.sub("", text)
    found += [(command, None) for command in INLINE.findall(prose) if not TEMPLATE.search(command)]
    return found


def listed_as(command: str) -> str:
    """The name SKIPPED or RUN gives a printed command (curl's requests go by their program)."""
    name = key(command)
    return "curl" if name.startswith("curl ") else name


def all_printed() -> dict[str, tuple[str, str | None]]:
    commands = {}
    for doc in DOCS:
        for command, output in printed_commands((ROOT / doc).read_text()):
            commands.setdefault(listed_as(command), (command, output))
    return commands


PRINTED = all_printed()


def new_users_shell() -> dict[str, str]:
    """The environment of a fresh shell: no virtual environment on PATH, and none of the settings
    run.sh or the tests export (library logging, vLLM's and credo's own)."""
    venv_bin = str(ROOT / ".venv" / "bin")
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("VLLM_", "TRANSFORMERS_", "TORCH_CPP_", "TOKENIZERS_", "CREDO_", "PYTHON"))
        and name != "VIRTUAL_ENV"
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != Path(venv_bin))
    return env


def test_the_reader_by_hand():
    text = (
        "Run `bash run.sh list` or `bash run.sh table <name>`.\n\n```bash\nbash run.sh a   # one\n"
        "curl -d '{\n  \"x\": 1}'\n# a comment\n```\n\n```\n$ bash run.sh b\nit says\n$ bash run.sh c\n```\n\n"
        "```\nsome.py   not a command\n```\n"
    )
    assert printed_commands(text) == [
        ("bash run.sh a   # one", None),
        ("curl -d '{\n  \"x\": 1}'", None),
        ("bash run.sh b", "it says"),
        ("bash run.sh c", ""),
        ("bash run.sh list", None),
    ]
    assert key("bash run.sh a   # one") == "bash run.sh a"
    assert LIBRARY_LOG.search("INFO 11-29 10:42:10 [importing.py:45] Triton ...")
    assert LIBRARY_LOG.search("[W1129 10:42:10.313185020 utils.cpp:68] Warning: NUMA binding")
    assert not LIBRARY_LOG.search("[credo] run written to runs/tiny-s43")


def test_every_printed_command_is_run_or_skipped_with_its_reason():
    assert RUN.isdisjoint(SKIPPED)
    unlisted = sorted(set(PRINTED) - RUN - set(SKIPPED))
    assert unlisted == [], f"printed commands neither run nor skipped here (add each to RUN or SKIPPED): {unlisted}"
    stale = sorted((RUN | set(SKIPPED)) - set(PRINTED))
    assert stale == [], f"listed here, printed in neither doc: {stale}"


@pytest.mark.parametrize("name", sorted(RUN))
def test_a_printed_command_runs_as_printed_without_the_venv(name):
    command, printed = PRINTED[name]
    result = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=new_users_shell(), capture_output=True, text=True, timeout=600
    )
    if printed is not None:  # a bad-input sample: what the doc shows is the whole of stderr
        assert result.returncode != 0 and result.stdout == "", (command, result.stdout, result.stderr[-2000:])
        assert result.stderr == printed + "\n", (command, result.stderr)
        return
    assert result.returncode == 0, (command, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, (command, result.stderr[-2000:])
    logged = [line for line in result.stdout.splitlines() if LIBRARY_LOG.search(line)]
    assert result.stdout.strip() and logged == [], (command, logged)
