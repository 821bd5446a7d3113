"""eval.py: what a checkpoint is evaluated as (describe_checkpoint), the evaluation sets,
the command line (--ckpt, --plan, --no-report), and eval.py end to end on the tiny model
through the real engine and verifier."""

import json

import pytest
import yaml

import config
import eval as ev


def write_run(root, name: str, cfg: config.Config, steps) -> None:
    """A run directory as training leaves it: ckpt/step_N/config.yaml for each finished step."""
    for step in steps:
        ckpt = root / name / "ckpt" / f"step_{step:06d}"
        ckpt.mkdir(parents=True)
        (ckpt / "config.yaml").write_text(yaml.safe_dump(config.as_dict(cfg), sort_keys=False))


def test_describe_checkpoint_reads_the_runs_config(tmp_path):
    """A run directory stands for its latest finished checkpoint (not one still being written);
    its table row comes from the method, its channel from the config; both can be overridden."""
    write_run(tmp_path, "credo-s44", config.load_config("credo_noanalysis", ["seed=44"]), (1, 2))
    (tmp_path / "credo-s44" / "ckpt" / "step_000003.tmp").mkdir()
    ckpt = ev.describe_checkpoint(str(tmp_path / "credo-s44"), None, None)
    assert ckpt.path == str(tmp_path / "credo-s44" / "ckpt" / "step_000002")
    assert (ckpt.label, ckpt.method, ckpt.channel, ckpt.train_domain, ckpt.seed) == (
        "credo-s44/step_000002",
        "CREDO",
        "readout",
        "math",
        44,
    )
    assert ckpt.cfg.channel == "readout_noanalysis"
    write_run(tmp_path, "rlcr-s43", config.load_config("rlcr", ["domain=code"]), (5,))
    rlcr = ev.describe_checkpoint(str(tmp_path / "rlcr-s43" / "ckpt" / "step_000005"), None, None)
    assert (rlcr.method, rlcr.channel, rlcr.train_domain, rlcr.seed) == ("RLCR", "verbalized", "code", 43)
    mine = ev.describe_checkpoint(str(tmp_path / "rlcr-s43"), "readout", "RLCR-r")
    assert (mine.method, mine.channel) == ("RLCR-r", "readout")


def test_describe_checkpoint_of_a_base_model():
    """Anything without a config.yaml is a base model: the Base row, the verbalized channel, the
    budgets of --config, no training domain or seed."""
    base = ev.describe_checkpoint("Qwen/Qwen3-8B", None, None, "tiny")
    assert (base.path, base.label, base.method, base.channel, base.train_domain, base.seed) == (
        "Qwen/Qwen3-8B",
        "Qwen3-8B",
        "Base",
        "verbalized",
        None,
        None,
    )
    assert (
        base.cfg.model == "Qwen/Qwen3-8B"
        and base.cfg.max_completion_tokens == config.load_config("tiny").max_completion_tokens
    )


def test_a_run_without_a_finished_checkpoint_is_refused(tmp_path):
    (tmp_path / "run" / "ckpt" / "step_000001.tmp").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="without a finished checkpoint under ckpt/"):
        ev.describe_checkpoint(str(tmp_path / "run"), None, None)


def test_evaluation_sets_resolve(tmp_path):
    assert ev.resolve_set("math500") == ("math500", "math", ev.DATA_DIR / "math" / "math500.jsonl")
    assert ev.resolve_set(f"t={tmp_path / 'a.jsonl'}:code") == ("t", "code", tmp_path / "a.jsonl")
    assert ev.resolve_set(f"t={tmp_path / 'a.jsonl'}") == ("t", "math", tmp_path / "a.jsonl")
    with pytest.raises(ValueError, match="unknown evaluation set 'nope'"):
        ev.resolve_set("nope")
    with pytest.raises(FileNotFoundError, match="evaluation set 't'.*does not exist"):
        ev.load_set("t", "math", tmp_path / "a.jsonl")


def test_ckpt_and_plan_are_one_or_the_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        ev.main(["--ckpt", "x", "--plan", str(tmp_path / "plan.json"), "--sets", "math500"])
    assert exit_info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


# --- end to end: eval.py on the tiny model, through the real engine and verifier ---------------


@pytest.mark.slow
def test_eval_cli_writes_every_table_and_figure(warm, tmp_path, tiny_dir, tiny_run):
    # a CREDO run (the shared tiny run: its run directory stands for its last checkpoint) and the base model
    ckpt = tiny_run / "ckpt" / "step_000003"
    problems = (tiny_dir / "math_test.jsonl").read_text().splitlines()[:6]
    (tmp_path / "small.jsonl").write_text("\n".join(problems) + "\n")
    out = tmp_path / "eval"
    result = warm.run(
        [
            "eval.py",
            "--ckpt",
            f"{tiny_dir / 'model'},Tiny CREDO={ckpt.parent.parent}",
            "--sets",
            f"tiny={tmp_path / 'small.jsonl'}:math",
            "--n",
            "3",
            "--out",
            str(out),
            "--config",
            "tiny",
            "--base-seeds",
            "43,44",
        ]
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]

    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    by_source = {s: [r for r in records if r["source"] == s] for s in ("readout", "verbalized", "digit")}
    # the base model once per evaluation seed; the run directory stands for its latest checkpoint
    assert len(by_source["readout"]) == 6 * 3 and len(by_source["verbalized"]) == len(by_source["digit"]) == 2 * 6 * 3
    assert {(r["method"], r["run"]) for r in by_source["readout"]} == {("Tiny CREDO", "credo/step_000003")}
    assert {(r["method"], r["run"], r["seed"]) for r in by_source["digit"]} == {
        ("Base", "model/e43", 43),
        ("Base", "model/e44", 44),
    }
    readouts = [r["c"] for r in by_source["readout"] if r["c"] is not None]
    digits = [r["c"] for r in by_source["digit"] if r["c"] is not None]
    assert readouts and all(0 < c < 1 for c in readouts)
    assert digits and all(0 <= c <= 1 for c in digits)
    assert all(r["a"] in (0, 1) for r in records)
    for name in ("main.md", "main.csv", "main.json"):
        assert (out / name).stat().st_size > 0, name
    pngs, pdfs = list(out.rglob("*.png")), list(out.rglob("*.pdf"))
    assert pngs and len(pngs) == len(pdfs)
    table = (out / "main.md").read_text()
    assert "Tiny CREDO" in table and "Base-d" in table


@pytest.mark.slow
def test_eval_plan_gives_each_checkpoint_its_own_settings(warm, tmp_path, tiny_dir):
    """--plan: one model read through both channels under labels of its own; --no-report writes
    the records only."""
    model = str(tiny_dir / "model")
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            [
                {"label": "as-readout", "path": model, "channel": "readout", "method": "Tiny-r"},
                {"label": "as-verbalized", "path": model},
            ]
        )
    )
    problems = (tiny_dir / "math_test.jsonl").read_text().splitlines()[:2]
    (tmp_path / "small.jsonl").write_text("\n".join(problems) + "\n")
    out = tmp_path / "eval"
    result = warm.run(
        [
            "eval.py",
            "--plan",
            str(plan),
            "--sets",
            f"tiny={tmp_path / 'small.jsonl'}:math",
            "--n",
            "2",
            "--engine",
            "hf",
            "--config",
            "tiny",
            "--out",
            str(out),
            "--no-report",
        ]
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert f"[eval] 12 records in {out / 'samples.jsonl'}" in result.stdout  # 2 x 2 readout, 2 x (2 x 2) verbalized
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert {(r["run"], r["method"], r["source"]) for r in records} == {
        ("as-readout", "Tiny-r", "readout"),
        ("as-verbalized", "Base", "verbalized"),
        ("as-verbalized", "Base", "digit"),
    }
    assert sorted(p.name for p in out.iterdir()) == ["samples.jsonl"]  # no tables, no figures
