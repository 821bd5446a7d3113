"""bench/summary.py: the benchmark table is read from the JSONs, each figure exactly as written,
and the committed bench/results/summary.md is the table of the committed JSONs."""

import json
import os
import subprocess

import pytest

import config
from bench import summary

ROWS = {
    "logprobs_cpu": {
        "command": "python bench/bench_logprobs.py --seq 1024 2048",
        "machine": "x86_64 2 cpus",
        "vocab": 151936,
        "hidden": 256,
        "by_seq": {
            "2048": {"peak_mem_ratio": 0.1234, "time_ratio": 0.666},
            "1024": {"peak_mem_ratio": 0.25, "time_ratio": 0.5049},
        },
    },
    "step_cpu": {
        "command": "python bench/bench_step.py --repeats 5",
        "machine": "x86_64 2 cpus",
        "by_model": {
            "tiny": {
                "layers": 2,
                "hidden": 64,
                "vocab": 1088,
                "speedup_vs_reference": 1.636,
                "speedup_vs_trl": None,
                "speedup_pass_vs_reference": 1.274,
            },
            "big": {"layers": 4, "hidden": 256, "vocab": 151936, "speedup_vs_reference": 3.0, "speedup_vs_trl": 5.511},
        },
    },
    "padding": {
        "machine": "x86_64 2 cpus",
        "pad_fraction": 0.0,
        "math_g8_mb2": {"group": 8, "micro": 2, "credo_padded_pad_fraction": 0.0695},
    },
    "rollout_cpu": {
        "command": "python bench/bench_rollout.py",
        "machine": "x86_64 2 cpus",
        "questions": 8,
        "group_size": 4,
        "max_completion_tokens": 64,
        "vllm_tok_s": 3175.1,
        "hf_tok_s": 2834.6,
        "vllm_vs_hf_tok_s_ratio": 1.12,
    },
    "verifier": {
        "command": "python bench/bench_verifier.py --math-items 300",
        "machine": {"cpus": 2, "processor": "x86_64", "python": "3.11.7"},
        "math": {"items": 300, "by_workers": {"1": {"items_per_s": 87.2}, "2": {"items_per_s": 158.5}}},
        "code": {"sandbox_mode": "namespaces", "stdio_1_test_ms": 25.2},
    },
    "credit_source_cpu": {
        "command": "python bench/bench_credit_source.py --configs tiny",
        "machine": "x86_64 2 cpus",
        "by_config": {
            "tiny": {
                "c_gap_max": 3.5762786865234375e-07,
                "train_phase_engine_vs_trainer": 0.791,
                "step_engine_vs_trainer": 1.017,
            }
        },
    },
    "lora_cpu": {
        "command": "python bench/bench_lora.py --before abc1234 --models tiny",
        "machine": "x86_64 2 cpus",
        "rows": [
            {"model": "tiny", "lora": lora, "kl": kl, "peak_mib": peak, "step_s": s, "commit": commit}
            for commit, cells in (
                ("def5678", [(0, 0, 50.0, 0.1), (0, 1, 60.0, 0.2), (1, 0, 30.0, 0.1), (1, 1, 31.4, 0.12)]),
                ("abc1234", [(0, 0, 50.0, 0.1), (0, 1, 60.0, 0.2), (1, 0, 40.0, 0.1), (1, 1, 80.6, 0.25)]),
            )
            for lora, kl, peak, s in cells
        ],
    },
}


def test_the_table_of_hand_made_results(tmp_path):
    for name, result in ROWS.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
    table = summary.table(tmp_path, dated=lambda path: f"date of {path.name}")
    assert table.splitlines() == [
        "| what | command | result | machine | date, commit |",
        "|---|---|---|---|---|",
        "| the log-prob kernel against naive fp32 `log_softmax` + gather, forward and backward, V = 151,936, "
        "hidden 256, T = 1,024 / 2,048 | `.venv/bin/python bench/bench_logprobs.py --seq 1024 2048` | "
        "peak memory **0.250 / 0.123** of the naive path's, time **0.50 / 0.67** | x86_64 2 cpus | "
        "date of logprobs_cpu.json |",
        "| training step without rollout, against a padded full-logits reference and TRL's GRPOTrainer loss path, "
        "equal work checked | `.venv/bin/python bench/bench_step.py --repeats 5` | "
        "tiny (2 layers / hidden 64 / V 1,088): **1.64x** the reference, TRL not run "
        "(with credit_confidence=trainer's pass: 1.27x the reference); "
        "big (4 layers / hidden 256 / V 151,936): **3.00x** the reference, **5.51x** TRL's | x86_64 2 cpus | "
        "date of step_cpu.json |",
        "| padded share of the micro-batches (the paper's math layout, group 8, micro-batch 2, synthetic lengths) | "
        "not recorded | **0%** packed (the default); 7.0% padded | x86_64 2 cpus | date of padding.json |",
        "| rollout engines, tiny model (8 questions x 4, at most 64 tokens each) | "
        "`.venv/bin/python bench/bench_rollout.py` | vLLM 3,175 tok/s, HF 2,835: **1.12x** | x86_64 2 cpus | "
        "date of rollout_cpu.json |",
        "| verifier: math on 300 items, the code sandbox (namespaces) | "
        "`.venv/bin/python bench/bench_verifier.py --math-items 300` | "
        "math 87 items/s with 1 worker, 158 items/s with 2 workers; code 25 ms for one stdio test | "
        "x86_64 2 cpus | date of verifier.json |",
        "| credit's c read by the engine at each slot against the trainer's no-grad pass, real training runs | "
        "`.venv/bin/python bench/bench_credit_source.py --configs tiny` | "
        "tiny: \\|c_engine - c_trainer\\| max 3.6e-07, training phase **0.79x**, step 1.02x | x86_64 2 cpus | "
        "date of credit_source_cpu.json |",
        "| peak memory (CPU resident set above the libraries) and time of one update, LoRA and KL on and off | "
        "`.venv/bin/python bench/bench_lora.py --before abc1234 --models tiny` | abc1234 -> def5678: "
        "tiny LoRA + KL: peak 81 -> **31 MiB**, step 0.25 -> 0.12 s; tiny LoRA: peak 40 -> **30 MiB**, "
        "step 0.10 -> 0.10 s; tiny full + KL: peak 60 -> **60 MiB**, step 0.20 -> 0.20 s | x86_64 2 cpus | "
        "date of lora_cpu.json |",
    ]


def test_a_result_without_its_figures_is_named(tmp_path):
    for name, result in ROWS.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({} if name == "padding" else result))
    try:
        summary.table(tmp_path, dated=str)
    except ValueError as error:
        assert str(error) == f"{tmp_path / 'padding.json'}: no 'math_g8_mb2' in it; is it padding's result?"
    else:
        raise AssertionError("no error")


def test_the_date_is_the_files_last_commit_and_a_changed_file_is_not_committed(tmp_path):
    env = {**os.environ, "GIT_COMMITTER_DATE": "2026-01-02T03:04:05Z", "GIT_AUTHOR_DATE": "2026-01-02T03:04:05Z"}
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    result = tmp_path / "padding.json"
    assert summary.git_dated(result) == "not committed"  # not a repository
    subprocess.run([*git, "init", "-q"], check=True, env=env)
    result.write_text("{}\n")
    assert summary.git_dated(result) == "not committed"  # untracked
    subprocess.run([*git, "add", "padding.json"], check=True, env=env)
    subprocess.run([*git, "commit", "-q", "-m", "r"], check=True, env=env)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    assert summary.git_dated(result) == f"2026-01-02, `{head.stdout.strip()}`"
    result.write_text('{"changed": 1}\n')
    assert summary.git_dated(result) == "not committed"


def test_the_committed_summary_is_the_table_of_the_committed_results():
    """Every cell but the date (the JSONs' commits, which a shallow clone does not have)."""
    without_date = lambda text: [line.rsplit(" | ", 1)[0] for line in text.splitlines()]
    assert without_date(summary.OUT.read_text()) == without_date(summary.table(dated=lambda path: ""))


def test_a_result_older_than_the_code_it_measures_is_stale(tmp_path, monkeypatch):
    env = {**os.environ, "GIT_COMMITTER_DATE": "2026-01-02T03:04:05Z", "GIT_AUTHOR_DATE": "2026-01-02T03:04:05Z"}
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    commit = lambda message: subprocess.run([*git, "commit", "-q", "-am", message], check=True, env=env)
    monkeypatch.setattr(summary, "MEASURES", {"padding": ("kernels/packing.py", "bench")})
    results, kernels = tmp_path / "bench" / "results", tmp_path / "kernels"
    results.mkdir(parents=True)
    kernels.mkdir()
    subprocess.run([*git, "init", "-q"], check=True, env=env)
    (kernels / "packing.py").write_text("x = 1\n")
    (kernels / "other.py").write_text("y = 1\n")
    (results / "padding.json").write_text('{"command": "python bench/bench_padding.py --steps 6"}\n')
    subprocess.run([*git, "add", "."], check=True, env=env)
    commit("code and its result")
    assert summary.stale(results, tmp_path) == []
    (kernels / "other.py").write_text("y = 2\n")  # not what it measures
    commit("other code")
    assert summary.stale(results, tmp_path) == []
    (kernels / "packing.py").write_text("x = 2\n")
    commit("faster packing")
    (found,) = summary.stale(results, tmp_path)
    assert found.startswith("padding: measured at ") and "1 later commit(s) changed kernels/packing.py, bench" in found
    assert "faster packing); re-run `.venv/bin/python bench/bench_padding.py --steps 6`" in found
    (results / "padding.json").write_text('{"command": "python bench/bench_padding.py --steps 6", "new": 1}\n')
    assert summary.stale(results, tmp_path) == ["padding: bench/results/padding.json is not committed as it is"]
    commit("re-run")
    assert summary.stale(results, tmp_path) == []


def test_the_committed_results_are_newer_than_the_code_they_measure():
    """Each committed benchmark figure is one of the code as it is (summary.MEASURES). A clone
    without the history (shallow, or no .git) cannot tell, and says so."""
    if not (config.ROOT / ".git").exists():
        pytest.skip("no git history in this copy: the results' commits cannot be compared")
    shallow = subprocess.run(
        ["git", "-C", str(config.ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True
    )
    if shallow.stdout.strip() != "false":
        pytest.skip("a shallow clone: the results' commits are not in it")
    assert summary.stale() == []
