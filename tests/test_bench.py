"""The benchmarks compare equal work: bench_step's reference (full logits, padded batch)
and credo's padded micro-batches give credo's (packed) update on the same rollouts."""

import copy
import sys
from pathlib import Path

import pytest
import torch
from numerics import assert_same_first_adamw_step, assert_same_gradient, grad_atol

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="module")
def setup(tiny_dir):
    import config
    import policy as pol
    from bench import bench_step

    policy = pol.load_policy(str(tiny_dir / "model"), torch.device("cpu"))
    model, high_id, low_id = policy.model, policy.high_id, policy.low_id
    cfg = config.load_config("tiny", ["group_size=4", "per_device_batch_size=4", "grad_accum=2", "precision=fp32"])
    rollouts = bench_step.synthetic_rollouts(8, 4, model.config.vocab_size, (10, 30), (16, 40), seed=1)
    batch = pol.collate(rollouts, policy.tokenizer.pad_token_id)
    valid = batch.slot_pos >= 0
    correct = torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 1])
    return model, batch, correct, valid.float(), valid, cfg, high_id, low_id


def one_step(step, model, cfg, *args):
    """One step on a copy of `model`: (stats, the stepped copy, the gradients AdamW stepped with)."""
    from bench import bench_step

    model = copy.deepcopy(model)
    optimizer = bench_step.make_optimizer(model, cfg)
    grads = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: grads.extend(p.grad.clone() for p in model.parameters()))
    stats = step(model, optimizer, *args)
    return stats, model, grads


@pytest.mark.parametrize("path", ["reference", "padded"])
def test_bench_step_paths_match_credo(setup, path):
    from bench import bench_step

    model, batch, correct, fmt, valid, cfg, high_id, low_id = setup
    args = (batch, correct, fmt, valid, cfg, high_id, low_id)
    ours, ours_model, our_grads = one_step(bench_step.credo_step, model, cfg, *args)
    step = (
        bench_step.reference_step
        if path == "reference"
        else (lambda m, o, *a: bench_step.credo_step(m, o, *a, packed=False))
    )
    theirs, their_model, their_grads = one_step(step, model, cfg, *args)
    assert theirs.loss_pg == pytest.approx(ours.loss_pg, abs=1e-6)
    assert theirs.loss_cal == pytest.approx(ours.loss_cal, abs=1e-6)
    assert theirs.grad_norm == pytest.approx(ours.grad_norm, rel=1e-4)
    names = [n for n, _ in ours_model.named_parameters()]
    for name, p, q, g, h in zip(
        names, ours_model.parameters(), their_model.parameters(), our_grads, their_grads, strict=True
    ):
        assert_same_gradient(h, g, name)  # full vs chunked logits, padded vs packed
        assert_same_first_adamw_step(q, p, g, lr=cfg.lr, grad_atol=grad_atol(g), name=name)


def test_padding_strategies_count_slots():
    from bench import bench_padding

    assert bench_padding.packed_rows_pad([6, 4, 5, 5], capacity=10) == 0.0
    assert bench_padding.packed_rows_pad([6, 6], capacity=10) == pytest.approx(0.4)
    # budget 2 x (4 + 2) = 12 tokens
    out = bench_padding.strategies([[1, 4, 1, 4]], micro=2, group=2, capacity=4)
    assert out["consecutive_pad_fraction"] == pytest.approx(6 / 16)  # [1,4] [1,4]: 16 slots, 10 tokens
    assert out["credo_padded_pad_fraction"] == pytest.approx(6 / 16)  # whole groups: 2 x 4 each, 4 x 4 > 12
    assert out["credo_padded_micro_batches"] == 2 and out["credo_padded_split_group_token_fraction"] == 0
    assert out["credo_packed_pad_fraction"] == 0 and out["credo_packed_micro_batches"] == 1  # 10 tokens <= 12
    free = bench_padding.strategies([[1, 4, 1, 4]], micro=2, group=1, capacity=4)
    assert free["credo_padded_pad_fraction"] == pytest.approx(6 / 16)  # [1,1,4] 3 x 4 = 12, [4] 4: 16 slots
    assert free["credo_padded_micro_batches"] == 2
    long = bench_padding.strategies([[1, 4, 6, 6]], micro=1, group=2, capacity=6)  # budget 8: group 2 splits
    assert long["credo_packed_micro_batches"] == 3 and long["credo_packed_split_group_token_fraction"] == round(
        12 / 17, 4
    )


def test_mfu_flops_count_and_a_real_run(tmp_path):
    """Model FLOPs by hand for a 1-layer shape (h 4, 2 heads x hd 2, 1 kv head, inter 8, V 10;
    2 rows x 3 tokens, 2 of them scored): layer matmuls 4*4 + 2*4*2 + 4*4 + 3*4*8 = 144,
    forward = 2*144*6 + 2*10*4*2*2 + 2*2*1*2*2*2*6 = 1728 + 320 + 192 = 2240, x3 = 6720.
    Then the benchmark itself runs (tiny sequence) and reports achieved FLOP/s."""
    import json
    import os
    import subprocess
    import sys

    from bench import bench_mfu

    shape = {
        "hidden_size": 4,
        "intermediate_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 2,
        "vocab_size": 10,
    }
    assert bench_mfu.model_flops_per_step(shape, rows=2, seq=3, scored=2) == 6720
    env = {**os.environ, "CREDO_BENCH_RESULTS": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "bench/bench_mfu.py", "--iters", "1", "--seq", "64", "--optimizer", "adamw", "--profile"],
        cwd=bench_mfu.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads((tmp_path / "mfu_cpu.json").read_text())
    assert out["tokens"] == 64 and out["achieved_tflop_s"] > 0 and out["mfu"] is None
    top = out["profile"]["top"]  # the profiled step's operators, costliest first
    assert out["profile"]["sorted_by"] == "self_cpu_time_total" and 0 < len(top) <= 30
    assert [op["self_ms"] for op in top] == sorted((op["self_ms"] for op in top), reverse=True)
    assert any(op["name"] == "aten::mm" for op in top)


def test_logprobs_bench_times_the_eager_and_the_compiled_kernel(tmp_path):
    """bench_logprobs runs each kernel in its own process (the compiled one through inductor,
    as the update runs it on a GPU) and reports each against the naive computation; it
    refuses a list of kernels without the reference or with an unknown name."""
    import json
    import os
    import subprocess
    import sys

    from bench import bench_logprobs

    env = {**os.environ, "CREDO_BENCH_RESULTS": str(tmp_path)}
    command = [
        sys.executable,
        "bench/bench_logprobs.py",
        "--seq",
        "64",
        "--vocab",
        "512",
        "--hidden",
        "16",
        "--repeats",
        "1",
        "--compiled-chunk",
        "16",
    ]
    result = subprocess.run(
        [*command, "--impls", "chunked", "compiled", "naive"],
        cwd=bench_logprobs.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads((tmp_path / "logprobs_cpu.json").read_text())
    assert out["chunk_tokens"] == 512 and out["compiled_chunk_tokens"] == 16
    for key in ("time_ratio", "peak_mem_ratio", "compiled_time_ratio", "compiled_peak_mem_ratio"):
        assert out[key] > 0, key
    assert out["by_seq"]["64"]["compiled_seconds"] > 0
    for impls in (["chunked", "compiled"], ["naive", "fused"]):
        refused = subprocess.run(
            [*command, "--impls", *impls], cwd=bench_logprobs.ROOT, env=env, capture_output=True, text=True
        )
        assert refused.returncode == 2 and "--impls must include naive" in refused.stderr


def test_ablation_variants_do_the_same_work(tmp_path, monkeypatch):
    """bench_ablation's variants (no score_mask, row micro-batches, padded) reproduce credo's
    losses on the tiny model (checked inside ablate) and report a ratio for each."""
    from bench import bench_ablation

    assert bench_ablation.row_micro_batches([5, 1, 4, 2, 1, 1], rows=2, group=2) == [[4, 5], [2, 3], [0, 1]]
    out = bench_ablation.ablate("tiny", repeats=1)
    assert {"no_score_mask_vs_credo", "row_micro_batches_vs_credo", "padded_vs_credo", "reference_vs_credo"} <= set(out)


def test_the_ablation_without_the_score_mask_scores_the_prompts_too(monkeypatch):
    """The no_score_mask variant puts more columns through the vocabulary projection than credo's
    step (every prompt token's too): a variant that changed nothing would time nothing."""
    import copy

    from bench import bench_ablation, bench_step
    from kernels import logprobs

    model, _, _, rollouts, args = bench_step.step_inputs("tiny")
    scored, selected = [], logprobs.selected_logprobs
    monkeypatch.setattr(
        logprobs, "selected_logprobs", lambda hidden, *a, **k: scored.append(len(hidden)) or selected(hidden, *a, **k)
    )
    for score_mask in (True, False):
        m = copy.deepcopy(model)
        step = bench_ablation.variant(args, args[4], score_mask=score_mask)
        step(m, bench_step.make_optimizer(m, args[4]), bench_step.engine_reads(m, *args))
    half = len(scored) // 2
    completions = sum(r.sampled_len for r in rollouts)
    prompts = sum(len(r.prompt_ids) - 1 for r in rollouts)
    assert sum(scored[:half]) == completions and sum(scored[half:]) == completions + prompts


def test_sync_counting_runs_its_two_layouts(tmp_path, monkeypatch, capsys):
    """bench_syncs on the CPU (its test hook; nothing synchronises there), in this process:
    the two layouts do the same work in 1 and `rows` micro-batches, and the counting helpers
    hold by hand. Without CUDA and without the hook it says so and exits 2."""
    import doctest
    import json
    import sys

    import torch

    from bench import bench_syncs

    assert doctest.testmod(bench_syncs).failed == 0
    from bench import results_io

    monkeypatch.setattr(results_io, "RESULTS", tmp_path)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "bench_syncs.py",
            "--device",
            "cpu",
            "--shape",
            "test",
            "--rows",
            "2",
            "--seq",
            "64",
            "--compile-layers",
            "off",
        ],
    )
    assert bench_syncs.main() == 0
    out = json.loads((tmp_path / "syncs_cpu.json").read_text())
    assert out["micro_batches"] == {"one": 1, "each_row": 2}
    assert out["syncs"] == {"one": 0, "each_row": 0} and out["meets_target"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", ["bench_syncs.py"])
    assert bench_syncs.main() == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_step_bench_runs_to_its_report(tmp_path):
    """bench_step end to end on the tiny model (one repeat, no TRL): it reports the speedups
    and the equal-work check of each path against credo's step (the step's statistics are a
    record, not a dict)."""
    import json
    import os
    import subprocess
    import sys

    from bench import bench_step

    env = {**os.environ, "CREDO_BENCH_RESULTS": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "bench/bench_step.py", "--models", "tiny", "--repeats", "1", "--no-trl"],
        cwd=bench_step.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    tiny = json.loads((tmp_path / "step_cpu.json").read_text())["by_model"]["tiny"]
    assert tiny["credo_micro_batches"] >= 1 and tiny["credo_pad_fraction"] == 0.0 and tiny["speedup_vs_reference"] > 0
    # The update after one AdamW step, relative over all weights (bench_step.update_rel_diff: the
    # largest single-weight difference is about lr for equal work, whatever the path). Measured:
    # 1.9e-3 (reference) and 3.2e-5 (padded) on the tiny model; a path whose gradient points
    # elsewhere on more than about 1e-4 of the weights passes 0.02.
    for path in ("reference", "padded"):
        assert tiny["equal_work_check"][path]["update_rel_diff"] < 0.02, path


def test_trl_is_fed_credos_per_token_advantages():
    """TRL's loss path trains on credo's first step's per-token advantages (bench_step.trl_inputs):
    one per completion token of every rollout, from the credit the step computed."""
    import copy

    from bench import bench_step

    model, _, saved, rollouts, args = bench_step.step_inputs("tiny")
    batch, cfg = args[0], args[4]
    trained = copy.deepcopy(model)
    first = bench_step.credo_step(trained, bench_step.make_optimizer(trained, cfg), *args)
    spec = bench_step.trl_inputs(saved, rollouts, first, batch, cfg, micro=4)
    assert [len(a) for a in spec["token_advantages"]] == [r.sampled_len for r in rollouts]
    assert spec["completions"] == [r.completion_ids for r in rollouts] and spec["group"] == cfg.group_size
    assert any(a != 0 for row in spec["token_advantages"] for a in row)
