"""toy_diagnose.py: direct-style shares and AdamW second-moment ratios, with exact values on
hand-built jobs (a world's splits, saved rollouts, evaluation samples, checkpoints whose
optimizer state is written by hand), and bad input."""

import doctest
import json
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, Qwen3Config

from worlds import toy_diagnose

DIRECT2, STEPS2 = "1 + 2 + 3 = 6. The answer is \\boxed{6}.", "1 + 2 = 3, 3 + 3 = 6. The answer is \\boxed{6}."
ONE = "4 + 5 = 9. The answer is \\boxed{9}."  # level 1: one text in both styles, not counted


def test_doctests():
    assert doctest.testmod(toy_diagnose).failed == 0


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_job(job: Path, world: Path, steps: list[list[tuple[str, str]]], evals: list[tuple[str, str, int]]) -> Path:
    (job / "run").mkdir(parents=True)
    (job / "run" / "config.yaml").write_text(yaml.safe_dump({"train_data": str(world / "train.jsonl")}))
    for i, recs in enumerate(steps):
        write_jsonl(job / "run" / "rollouts" / f"step_{i:06d}.jsonl", [{"question_id": q, "text": t} for q, t in recs])
    write_jsonl(
        job / "eval" / "samples.jsonl",
        [{"problem_id": p, "sample": i, "source": "readout", "text": t, "a": a} for i, (p, t, a) in enumerate(evals)],
    )
    return job


@pytest.fixture()
def world(tmp_path):
    write_jsonl(tmp_path / "world" / "train.jsonl", [{"id": "tr-1", "level": 1}, {"id": "tr-2", "level": 2}])
    write_jsonl(tmp_path / "world" / "extra.jsonl", [{"id": "te-2", "level": 2}, {"id": "te-3", "level": 3}])
    return tmp_path / "world"


def test_styles_pool_seeds_by_bins_of_steps_and_count_only_two_additions_or_more(tmp_path, world):
    row = tmp_path / "out" / "credo"
    # seed 1: step 0 has 2 direct of 3 counted (level 1 left out), step 1 has 0 of 2, step 2 has 1 of 1
    make_job(
        row / "s1",
        world,
        [
            [("tr-2", DIRECT2), ("tr-2", DIRECT2), ("tr-2", STEPS2), ("tr-1", ONE)],
            [("tr-2", STEPS2), ("tr-2", STEPS2)],
            [("tr-2", DIRECT2)],
        ],
        [("te-2", DIRECT2, 0), ("te-3", STEPS2, 1)],
    )
    # seed 2: step 0 has 1 of 1; no bin beyond; evaluation 0 of 2 (and one level-1 sample)
    make_job(row / "s2", world, [[("tr-2", DIRECT2)]], [("te-2", STEPS2, 1), ("te-3", STEPS2, 0), ("tr-1", ONE, 1)])
    table = toy_diagnose.style_table(row, bin_steps=2)
    assert table == {"steps 0-1": 3 / 6, "steps 2-3": 1.0, "eval": 1 / 4}
    assert list(table) == ["steps 0-1", "steps 2-3", "eval"]
    assert toy_diagnose.style_table(row / "s2", bin_steps=2) == {"steps 0-1": 1.0, "eval": 0.0}
    # the same evaluation samples by level and style, pooled over both seeds
    assert toy_diagnose.cell_accuracy(row) == {
        "L1": (1.0, 1),
        "L2 direct": (0.0, 1),
        "L2 steps": (1.0, 1),
        "L3 steps": (0.5, 2),
    }


def test_a_row_without_jobs_rollouts_or_samples_is_refused(tmp_path, world):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="neither a toy_tables job"):
        toy_diagnose.jobs_of(tmp_path / "empty")
    job = make_job(tmp_path / "s1", world, [], [])
    with pytest.raises(SystemExit, match="no run/rollouts/"):
        toy_diagnose.style_table(job, bin_steps=5)
    with pytest.raises(SystemExit, match="no evaluation samples"):
        toy_diagnose.cell_accuracy(job)


def tiny_config() -> Qwen3Config:
    return Qwen3Config(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=8,
        tie_word_embeddings=False,
    )


def make_ckpt(job: Path, trunk_scale: float, outer_scale: float, drop: int = 0) -> None:
    """A checkpoint whose second moments are trunk_scale^2 in the trunk and outer_scale^2 in the
    embeddings and output projection (in model.parameters() order, as torch's AdamW keeps them)."""
    ckpt = job / "run" / "ckpt" / "step_000010"
    ckpt.mkdir(parents=True)
    cfg = tiny_config()
    cfg.save_pretrained(ckpt)
    with torch.device("meta"):
        params = list(AutoModelForCausalLM.from_config(cfg).named_parameters())
    state = {
        i: {
            "step": torch.tensor(10.0),
            "exp_avg": torch.zeros(p.shape),
            "exp_avg_sq": torch.full(p.shape, (outer_scale if ("embed" in n or "lm_head" in n) else trunk_scale) ** 2),
        }
        for i, (n, p) in enumerate(params[: len(params) - drop])
    }
    torch.save({"state": state, "param_groups": [{"params": list(state)}]}, ckpt / "optimizer.pt")


def test_adam_ratio_is_the_trunks_and_pairs_jobs_by_seed(tmp_path):
    mine, base = tmp_path / "a1" / "credo", tmp_path / "grpo" / "grpo"
    for seed, scale in (("s53", 3.0), ("s54", 2.0)):
        make_ckpt(mine / seed, trunk_scale=scale, outer_scale=50.0)  # output projection left out
        make_ckpt(base / seed, trunk_scale=1.0, outer_scale=1.0)
    assert toy_diagnose.adam_ratios(mine, base) == pytest.approx({"s53": 3.0, "s54": 2.0}, rel=1e-6)


def test_adam_refuses_unpaired_seeds_and_a_state_of_another_model(tmp_path):
    make_ckpt(tmp_path / "mine" / "s53", 2.0, 1.0)
    make_ckpt(tmp_path / "base" / "s54", 1.0, 1.0)
    with pytest.raises(SystemExit, match="has no job s53"):
        toy_diagnose.adam_ratios(tmp_path / "mine", tmp_path / "base")
    make_ckpt(tmp_path / "short" / "s53", 1.0, 1.0, drop=1)
    with pytest.raises(SystemExit, match="optimizer state holds"):
        toy_diagnose.adam_ratios(tmp_path / "mine", tmp_path / "short")


def test_the_command_line_prints_each_row(tmp_path, world, capsys):
    make_job(tmp_path / "r" / "s1", world, [[("tr-2", DIRECT2), ("tr-2", STEPS2)]], [])
    toy_diagnose.main(["styles", str(tmp_path / "r"), "--bin", "10"])
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'r'} steps 0-9: 0.500  eval: -"
    with pytest.raises(SystemExit, match="--bin must be at least 1"):
        toy_diagnose.main(["styles", str(tmp_path / "r"), "--bin", "0"])


def test_an_evaluation_sample_counts_once_whatever_the_sources_that_read_it(tmp_path, world):
    job = make_job(tmp_path / "s1", world, [[("tr-2", STEPS2)]], [])
    # eval.py's records for GRPO: each generated sample once per confidence source
    rows = [
        {"problem_id": p, "sample": i, "source": src, "text": t, "a": 1}
        for i, (p, t) in enumerate([("te-2", DIRECT2), ("te-3", STEPS2)])
        for src in ("verbalized", "digit")
    ]
    write_jsonl(job / "eval" / "samples.jsonl", rows + [rows[0] | {"source": "logprob"}])  # a third source, one sample
    assert [(r["problem_id"], r["text"]) for r in toy_diagnose.eval_records(job)] == [
        ("te-2", DIRECT2),
        ("te-3", STEPS2),
    ]
    assert toy_diagnose.style_table(job, bin_steps=1)["eval"] == 0.5
