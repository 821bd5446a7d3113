"""Bad input on the command line: every mistake a new user makes ends in one line
that names the problem and the fix, never a traceback (unless --debug asks for one)."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from processes import sigint_as_at_a_terminal

import config
import credo
import eval as ev
from evaluation import tables
from worlds import toy


def one_line_exit(main, argv, capsys) -> str:
    """Run a CLI main on bad input: it must exit non-zero with exactly one line, no traceback."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    message = stop.value.code
    assert isinstance(message, str) and message.count("\n") == 0, message  # sys.exit(str): status 1, one line
    assert "Traceback" not in message and "--debug" in message
    assert "Traceback" not in capsys.readouterr().err
    return message


@pytest.mark.parametrize(
    "argv, names",
    [
        (["tiny", "lr=abc"], ["'lr'", "float", "'abc'"]),
        (["tiny", "learning_rate=1e-5"], ["'learning_rate'", "did you mean lr"]),
        (["tiny", "num_generations=8"], ["did you mean group_size"]),
        (["no_such_config"], ["no config named 'no_such_config'", "known: "]),
        (["tiny", "train_data=null"], ["train_data is not set"]),
        (["tiny", "model=/nonexistent"], ["model=/nonexistent", "no such directory, and not a hub id"]),
        (["tiny", "model=not a hub id"], ["not a hub id"]),
        (["tiny", "lr"], ["not of the form key=value"]),
        (["tiny", "method=ppo"], ["method='ppo' is not supported"]),
        (["tiny", "report_to=jsonl,mlflow"], ["report_to", "mlflow"]),
        (["tiny", "resume=/nope/ckpt/step_000001"], ["resume=/nope/ckpt/step_000001", "not a complete checkpoint"]),
        # a count out of range names the key the user gave
        (["tiny", "grad_accum=-1"], ["grad_accum=-1 must be a positive integer"]),
        (["tiny", "max_steps=-1"], ["max_steps=-1 must be a positive integer (or null"]),
        (["tiny", "per_device_batch_size=0"], ["per_device_batch_size=0 must be a positive integer"]),
        (["tiny", "per_device_batch_size=-2"], ["per_device_batch_size=-2 must be a positive integer"]),
    ],
)
def test_credo_bad_input_is_one_line(argv, names, capsys):
    message = one_line_exit(credo.main, [*argv, "--dry-run"], capsys)
    assert message.startswith("credo: ")
    for name in names:
        assert name in message


@pytest.mark.parametrize(
    "argv, says",
    [(["--table", "nope"], "no table 'nope'"), (["--tables"], "usage: bash run.sh list | bash run.sh table")],
)
def test_list_and_table_bad_input_is_one_line(argv, says, capsys):
    """bash run.sh list / table (evaluation/tables.py)."""
    message = one_line_exit(tables.main, argv, capsys)
    assert message.startswith("credo: ") and says in message


@pytest.mark.parametrize(
    "text, names",
    [
        ("inherit: tiny\nlr: [1e-5\nseed: 3\n", ["broken YAML at line 3, column 5", "fix the file"]),
        ('"just a string"\n', ["holds a YAML str ('just a string'), not a mapping of `key: value` lines"]),
        ("- lr: 1e-5\n", ["holds a YAML list"]),
    ],
)
def test_a_config_file_that_is_not_a_yaml_mapping_is_one_line(tmp_path, text, names, capsys):
    """Broken YAML, or YAML that is a string or a list: one line naming the file."""
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    message = one_line_exit(credo.main, [str(path), "--dry-run"], capsys)
    assert message.startswith(f"credo: config file {path}")
    for name in names:
        assert name in message


@pytest.mark.parametrize(
    "override", ["grad_accum=-1", "max_steps=-1", "per_device_batch_size=0", "lrr=1", "method=credoo"]
)
def test_a_config_error_leaves_nothing_behind(tmp_path, override, capsys):
    """Not a dry run: refused before any run directory or checkpoint is written."""
    one_line_exit(credo.main, ["tiny", override, f"out_dir={tmp_path / 'runs'}"], capsys)
    assert list(tmp_path.iterdir()) == []


def refused_before_torch(code: str, says: str) -> None:
    """`code` run in a fresh process exits 1 with the one line `says` starts, having imported none
    of torch, transformers and vLLM (what makes a refusal quick: checked as imports, not as a wall
    clock that a loaded machine would break)."""
    check = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules)))\n"
        + code
    )
    result = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and result.stdout == "[]\n", (result.stdout, result.stderr[-2000:])
    assert result.stderr.startswith(says) and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize(
    "override, says",
    [
        ("lrr=1", "credo: unknown config key 'lrr' in the command line; did you mean lr or lora_rank?"),
        # a registry's name, misspelt: refused from methods.py's text, before methods.py (torch) loads
        ("method=credoo", "credo: method='credoo' is not supported; choose one of ('credo', 'grpo', 'rlcr', 'dcpo'"),
        ("advantage=ppo", "credo: advantage='ppo' is not supported; choose one of ('grpo', 'rloo', 'dr_grpo'"),
        # a confidence read and a loss term, from confidence.py's and methods.py's text
        ("confidence=redout", "credo: confidence='redout' is not supported; choose one of ('readout', 'numeral',"),
        ("loss_terms=pg,kll", "credo: loss_terms='kll' is not supported; choose one of ('pg', 'cal', 'kl')"),
        # the model a fresh run starts from, before validation reads the registries
        ("model=/nonexistent", "credo: model=/nonexistent: no such directory, and not a hub id (org/name)"),
    ],
)
def test_a_config_error_comes_before_the_heavy_libraries(override, says):
    """run.sh checks a run's arguments (dataprep.data first-use) before credo.py starts: a typo
    is one line from a process that never imports torch, transformers or vLLM, in well under the
    2 s asked (about 0.6 s idle for the whole `bash run.sh tiny lrr=1`, 0.7 s for `method=credoo`
    beside other jobs; 10 s allows a loaded machine)."""
    refused_before_torch(f"from dataprep import data\ndata.main(['first-use', 'tiny', {override!r}])\n", says)


@pytest.mark.parametrize(
    "override, says",
    [
        ("method=credoo", "credo: method='credoo' is not supported"),
        ("confidence=redout", "credo: confidence='redout' is not supported"),
        ("model=/nonexistent", "credo: model=/nonexistent: no such directory"),
        ("grad_accum=-1", "credo: grad_accum=-1 must be a positive integer"),
    ],
)
def test_credo_py_run_directly_refuses_a_config_before_torch_loads(override, says):
    """`python credo.py tiny <typo>` without run.sh: infra/startup.py, which credo.py imports first,
    checks the arguments before credo.py's own imports load torch (about 0.3 s beside other
    jobs, against 11 s before; 10 s allows a loaded machine)."""
    argv = f"sys.argv = ['credo.py', 'tiny', {override!r}]\n"
    refused_before_torch(f"import runpy\n{argv}runpy.run_path('credo.py', run_name='__main__')\n", says)


def test_a_model_that_run_sh_builds_next_is_not_looked_for_yet(tmp_path):
    """run.sh checks the arguments before it builds the tiny world (`first-use --builds .cache/tiny`):
    a model under that directory may not exist yet; any other missing model is refused."""
    later = tmp_path / "tiny"
    args = ["tiny", f"model={later / 'model'}", f"out_dir={tmp_path / 'runs'}"]
    assert config.check_run_arguments(args, builds=str(later)).model == str(later / "model")
    with pytest.raises(FileNotFoundError, match="no such directory, and not a hub id"):
        config.check_run_arguments(args)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        config.check_run_arguments(["tiny", f"model={tmp_path / 'elsewhere'}"], builds=str(later))


def test_a_registry_name_is_refused_alike_before_and_after_methods_py_loads():
    """The text-read choices and message (config._refuse_unregistered_names) are the registries' own."""
    check = (
        "import config, methods\n"
        "try:\n    config.load_config('tiny', ['method=credoo'])\nexcept ValueError as error:\n    print(error)\n"
    )
    before = subprocess.run(
        [sys.executable, "-m", "dataprep.data", "first-use", "--", "tiny", "method=credoo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    after = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert before.stderr == f"credo: {after.stdout.strip()} (--debug shows the traceback)\n", (before, after)


def test_credo_debug_gives_the_traceback():
    with pytest.raises(TypeError, match="expects float"):
        credo.main(["tiny", "lr=abc", "--dry-run", "--debug"])


def test_a_hub_id_and_a_model_directory_pass(tmp_path, capsys):
    credo.main(["tiny", "model=Qwen/Qwen3-1.7B", "--dry-run"])
    assert "model: Qwen/Qwen3-1.7B" in capsys.readouterr().out
    (tmp_path / "m").mkdir()
    message = one_line_exit(credo.main, ["tiny", f"model={tmp_path / 'm'}", "--dry-run"], capsys)
    assert "has no config.json" in message


@pytest.mark.parametrize(
    "argv, names",
    [
        (["--ckpt", "/nonexistent", "--sets", "math500"], ["/nonexistent", "not a hub id"]),
        (["--ckpt", "Qwen/Qwen3-1.7B", "--sets", "no_such_set"], ["unknown evaluation set 'no_such_set'"]),
        (["--ckpt", "Qwen/Qwen3-1.7B", "--sets", "mine=/nonexistent.jsonl"], ["/nonexistent.jsonl does not exist"]),
    ],
)
def test_eval_bad_input_is_one_line(argv, names, capsys):
    message = one_line_exit(ev.main, argv, capsys)
    assert message.startswith("eval: ")
    for name in names:
        assert name in message


@pytest.mark.parametrize(
    "argv, starts",
    [
        (["-m", "dataprep.data", "prepare", "--only", "nonsense"], "data: unknown set(s) ['nonsense']"),
        (["-m", "worlds.toy", "--methods", "nonsense"], "toy: --methods 'nonsense'"),
        (["bench/run_all.py", "--only", "nope"], "bench: --only ['nope']"),
        (["-m", "infra.memfit", "nope"], "memfit: no config named 'nope'"),
        (["-m", "evaluation.curves", "/nonexistent-run"], "plot: /nonexistent-run: no such run directory"),
    ],
)
def test_the_other_commands_answer_bad_input_in_one_line(argv, starts):
    """What run.sh's prepare, toy, bench, plot targets and infra/parallel.py's fit run (as processes)."""
    result = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(starts) and "Traceback" not in result.stderr, result.stderr[-2000:]


def fresh_clone(root, into):
    """The checkout's tracked files under `into`, with this checkout's .venv (`after pip`), and
    nothing built: no .cache/, no data/, no runs/."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name and (root / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            (into / name).write_bytes((root / name).read_bytes())
    (into / ".venv").symlink_to(root / ".venv")
    return into


@pytest.mark.slow
def test_commands_that_need_no_model_build_nothing_in_a_fresh_clone(tmp_path):
    """`bash run.sh list`, `table`, `--help-config` and a `--dry-run` take seconds in a fresh clone:
    no tiny model is built for them, and a dry run downloads no training split."""
    clone = fresh_clone(ROOT, tmp_path)
    for command in (["list"], ["table", "sens"], ["--help-config"], ["math", "--dry-run"]):
        result = subprocess.run(["bash", "run.sh", *command], cwd=clone, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (command, result.stderr[-2000:])
        assert not (clone / ".cache" / "tiny").exists() and not (clone / "data").exists(), command
    assert "# run directory: runs/math-s43" in result.stdout


# docs/usage.md's sample errors, run as printed and compared byte for byte: tests/test_docs_commands.py.


def test_run_sh_eval_is_eval_py_with_its_one_line_errors():
    """`bash run.sh eval` is eval.py under run.sh's quiet library logging: a bad --ckpt is one
    line on stderr, nothing on stdout."""
    result = subprocess.run(
        ["bash", "run.sh", "eval", "--ckpt", "/nonexistent", "--sets", "math500"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr == (
        "eval: --ckpt=/nonexistent: no such directory, and not a hub id (org/name) (--debug shows the traceback)\n"
    )


def test_ctrl_c_outside_the_loop_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    """A KeyboardInterrupt while the run loads (the loop's own guard stops after a step instead):
    one line, exit 128 + SIGINT, no traceback."""

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(credo, "train", interrupted)
    with pytest.raises(SystemExit) as stop:
        credo.main(["tiny", f"out_dir={tmp_path}"])
    assert stop.value.code == 130
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "credo: interrupted (Ctrl-C); the same command with resume=auto continues from the last checkpoint "
        f"under {tmp_path / 'tiny-s43'}, if there is one"
    )


def loading(proc: subprocess.Popen, library: str = "libtorch", timeout_s: float = 120) -> bool:
    """Wait until the process has mapped `library` (it is importing torch, after infra/startup.py),
    or has ended."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if library in Path(f"/proc/{proc.pid}/maps").read_text():
                return True
        except OSError:  # ended meanwhile
            break
        time.sleep(0.01)
    return False


@pytest.mark.parametrize(
    "argv, says",
    [
        (["credo.py", "tiny", "out_dir={tmp}"], "credo: interrupted (Ctrl-C)"),
        (["eval.py", "--ckpt", ".cache/tiny/model", "--config", "tiny", "--sets", "t=x.jsonl"], "eval: interrupted"),
    ],
)
def test_ctrl_c_while_the_libraries_import_is_one_line_and_exit_130(tmp_path, argv, says):
    """A real SIGINT while torch is being imported (infra/startup.py is imported first): one line on
    stderr, exit 130, no traceback. Arrived later (credo.py's run loading), credo.py's own line."""
    proc = subprocess.Popen(
        [sys.executable, *(a.replace("{tmp}", str(tmp_path)) for a in argv)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_at_a_terminal,
    )
    try:
        assert loading(proc), proc.communicate(timeout=60)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130 and out == "", (proc.returncode, out, err[-2000:])
    assert len(err.splitlines()) == 1 and err.startswith(says) and "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize(
    "where",
    [
        "import atexit\natexit.register(interrupted)",  # the libraries' atexit shutdown (vLLM's engine)
        "class Engine:\n    def __del__(self):\n        interrupted()\nengine = Engine()\ndel engine",  # a finalizer
    ],
)
def test_ctrl_c_while_the_libraries_shut_down_is_one_line_and_exit_130(where):
    """A real SIGINT in a callback Python cannot raise from (it prints "Exception ignored ..." and a
    traceback, and exits 0): one line, and exit 130 once every other atexit callback has run."""
    program = (
        "import os, signal, sys, time\nfrom infra import startup\n"
        "def interrupted():\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(30)\n"
        f"{where}\nprint('done', flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=sigint_as_at_a_terminal,
    )
    assert result.returncode == 130 and result.stdout == "done\n", (result.returncode, result.stdout, result.stderr)
    assert result.stderr == "credo: interrupted (Ctrl-C) while shutting down\n"


def test_eval_of_a_base_model_the_config_does_not_fit_names_the_config_that_does(tiny_dir, capsys):
    """`bash run.sh eval --ckpt .cache/tiny/model` without --config: math's budgets do not fit the
    tiny model's 1,024 positions (vLLM refused it with a pydantic traceback, after loading)."""
    message = one_line_exit(ev.main, ["--ckpt", ".cache/tiny/model", "--sets", "t=/nonexistent.jsonl"], capsys)
    assert message == (
        "eval: --ckpt .cache/tiny/model: --config math asks for 1024 + 8192 = 9216 tokens, more than the model's "
        "1024 positions (max_position_embeddings); pass --config tiny (configs/tiny.yaml trains this model) "
        "(--debug shows the traceback)"
    )


def test_eval_reads_the_config_a_checkpoint_was_trained_with_beside_ckpt(tmp_path):
    """A checkpoint directory without its own config.yaml takes its run's (runs/<name>/config.yaml)."""
    ckpt = tmp_path / "myrun" / "ckpt" / "step_000001"
    ckpt.mkdir(parents=True)
    saved = config.as_dict(config.load_config("tiny", ["seed=7"]))
    (tmp_path / "myrun" / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    described = ev.describe_checkpoint(str(ckpt), None, None)
    assert (described.label, described.method, described.train_domain, described.seed) == (
        "myrun/step_000001",
        "CREDO",
        "math",
        7,
    )


def test_the_toy_says_how_its_trainings_share_the_machine():
    """`bash run.sh toy --quick` trains one method: its line says no "2 at a time"."""
    assert (toy.pace(1, 2), toy.pace(2, 2), toy.pace(3, 2), toy.pace(2, 1)) == (
        "",
        ", 2 at a time",
        ", 2 at a time",
        ", one after the other",
    )
