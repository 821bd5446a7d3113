"""Bad input on the command line (issue 19): every mistake a new user makes ends in one line
that names the problem and the fix, never a traceback (unless --debug asks for one)."""

import pytest

import credo
import eval as ev
from evaluation import tables


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
    import subprocess
    import sys

    from conftest import ROOT

    result = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(starts) and "Traceback" not in result.stderr, result.stderr[-2000:]
