"""Data parallelism (infra/parallel.py): real 2-process gloo jobs on CPU against 1-process runs.

The 2-rank jobs are real torchrun launches (FSDP2 `fully_shard` works with gloo on CPU in
this torch). The exact-resume test runs the real engine (one vLLM CPU engine per rank,
joined to the job through vLLM's `external_launcher`); a short generation covers the HF engine
(transformers `generate` on the sharded model, ranks kept in step by `synced_gpus`),
inside the gradient test's job.

Run as a script by torchrun (see test_two_ranks_give_the_one_process_loss_and_gradient):
    torchrun --standalone --nproc_per_node 2 tests/test_parallel.py OUT_FILE MODEL_DIR
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
import torch  # noqa: E402
from numerics import assert_same_first_adamw_step, assert_same_gradient, grad_atol  # noqa: E402

import confidence  # noqa: E402
import config  # noqa: E402
import credo  # noqa: E402
import engine as eng  # noqa: E402
import policy as pol  # noqa: E402
import rollout as ro  # noqa: E402
import verifier  # noqa: E402
from infra import checkpoint, parallel, runlog  # noqa: E402

# The ranks here are CPU ranks over gloo: GPUs are hidden from them, or on a GPU machine
# init_world would take the CUDA path (two ranks on one GPU).
ENV = {
    **os.environ,
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_CACHE_ROOT": str(ROOT / ".cache" / "vllm"),
    "CUDA_VISIBLE_DEVICES": "",
}
for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
    ENV.pop(var, None)
TORCHRUN = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "2"]


@pytest.fixture(autouse=True)
def cpu_only(monkeypatch):
    """These tests compare CPU ranks with a CPU process: in this process too the GPU is hidden
    (init_world takes the CUDA path when torch sees one), as ENV hides it from the ranks."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# Two questions x G = 4: some right, some wrong, one without a readout, so that A^ans,
# A^conf, w and L_cal are all non-trivial.
GROUPS = [
    (
        "What is 2 + 2?",
        [
            "2 + 2 = 4. \\boxed{4} <analysis> fine </analysis> <confidence>",
            "2 + 2 = 5. \\boxed{5} <analysis> a carry </analysis> <confidence>",
            "2 + 2 = 4. \\boxed{4} <analysis> sure </analysis> <confidence>",
            "\\boxed{3}",
        ],
        [1.0, 0.0, 1.0, 0.0],
    ),
    (
        "What is 3 * 5?",
        [
            "3 * 5 = 15. \\boxed{15} <analysis> the product </analysis> <confidence>",
            "3 * 5 = 35. \\boxed{35} <analysis> a slip </analysis> <confidence>",
            "3 * 5 = 8. \\boxed{8} <analysis> I added </analysis> <confidence>",
            "3 * 5 = 15. \\boxed{15} <analysis> none </analysis> <confidence>",
        ],
        [1.0, 0.0, 0.0, 1.0],
    ),
]


LR = 1e-3


class RecordingAdamW(torch.optim.AdamW):
    """AdamW that records the full gradients (gathered from their shards) before stepping."""

    def __init__(self, named_params, **kwargs):
        named = list(named_params)
        self.names = [n for n, _ in named]
        super().__init__([p for _, p in named], **kwargs)

    def step(self, closure=None):
        params = self.param_groups[0]["params"]
        self.grads = {n: parallel.full_tensor(p.grad).clone() for n, p in zip(self.names, params)}
        return super().step(closure)


def group_rollouts(tokenizer, problem: str, texts: list[str]) -> list[ro.Rollout]:
    prompt = tokenizer.encode(
        f"<|im_start|>user\n{problem}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    out = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        out.append(
            ro.Rollout(problem, prompt, ids, text, "stop", ro.parse_segments(tokenizer, ids, "readout", "\\boxed"))
        )
    return out


def one_update(
    model_dir: str,
    activation_checkpointing: bool,
    overrides: list[str],
    split_groups: bool = False,
    compiled: bool = False,
) -> dict:
    """One optimizer step on GROUPS, as credo.train runs it: this rank's groups, global
    denominators, the root unit gathered for the update. Full tensors of the gradients and
    of the weights after the step, and the rank-averaged losses. split_groups: micro-batches
    of the longest rollout's tokens, so no group fits one (readouts from a no-grad pass).
    compiled: the decoder layers and log-prob blocks under compile_update (aot_eager on the
    CPU), then sharded."""
    world = parallel.init_world()
    cfg = config.load_config(
        "tiny", [f"activation_checkpointing={activation_checkpointing}", "max_grad_norm=0.5", *overrides]
    )
    torch.manual_seed(0)
    policy = pol.load_policy(model_dir, world.load_device)
    tokenizer = policy.tokenizer
    policy.model.config.use_cache = False
    if activation_checkpointing:
        parallel.enable_activation_checkpointing(policy.model)
    if compiled:
        pol.compile_update(policy, backend="aot_eager")
    policy.model = parallel.shard_model(policy.model, world, torch.float32)
    model = policy.model
    optimizer = RecordingAdamW(model.named_parameters(), lr=LR)

    mine = parallel.rank_slice(GROUPS, world)
    rollouts = [r for problem, texts, _ in mine for r in group_rollouts(tokenizer, problem, texts)]
    out = credo.Outcomes(
        correct=torch.tensor([a for _, _, answers in mine for a in answers]),  # [N_rank]
        verdicts=[verifier.Verdict(passed=a == 1, reason="set by hand") for _, _, answers in mine for a in answers],
        fmt=torch.tensor([float(r.segments.fmt) for r in rollouts]),
        valid=torch.tensor([r.segments.slot is not None for r in rollouts]),
        reported=None,
        truncated=torch.tensor([r.truncated for r in rollouts]),
    )
    counts = parallel.all_reduce({"rows": len(rollouts), "valid": float(out.valid.sum())}, world)
    counts = {key: value / world.world_size for key, value in counts.items()} if world.distributed else None

    plan = confidence.plan(cfg)
    batch = pol.training_batch(rollouts, tokenizer, plan)
    if split_groups:
        cfg = dataclasses.replace(cfg, micro_batch_tokens=int(batch.attention_mask.sum(dim=1).max()))
    parallel.gather_root(model)
    stats = credo.train_step(
        credo.Learner(policy, optimizer, cfg, plan), credo.make_step(cfg, 100, batch, out, None, counts)
    )
    losses = parallel.all_reduce({"loss_pg": stats.terms["pg"], "loss_cal": stats.terms["cal"]}, world, "mean")
    weights = {name: parallel.full_tensor(p.detach()).clone() for name, p in model.named_parameters()}
    assert (stats.micro_batches > len(mine)) == split_groups
    return {"grads": optimizer.grads, "weights": weights, "grad_norm": stats.grad_norm, **losses}


def generate_on_shards(model_dir: str) -> dict:
    """The HF engine on the FSDP2-sharded model, each rank its own prompt and seed: ranks stop
    at different lengths, so generate must keep them in step (synced_gpus) or the job hangs.
    Returns this rank's samples and how far the engine's log-probs are from the trainer's."""
    world = parallel.init_world()
    # Rank 0 may write 2 tokens, rank 1 up to 64: rank 0 is done long before rank 1, by
    # construction rather than by what the random model happens to sample on this machine.
    cfg = config.load_config("tiny", [f"max_completion_tokens={[2, 64][world.rank]}"])
    policy = pol.load_policy(model_dir, world.load_device)
    tokenizer = policy.tokenizer
    policy.model = model = parallel.shard_model(policy.model, world, torch.float32)
    problem = ["What is 2 + 2?", "What is 31 * 7 + 12?"][world.rank]
    prompt = tokenizer.encode(
        f"<|im_start|>user\n{problem}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    samples = eng.HFEngine(model, tokenizer, cfg, confidence.plan(cfg)).generate([prompt], 4, seed=world.rank_seed(2))
    rollouts = [
        ro.Rollout(
            problem,
            prompt,
            s.token_ids,
            "",
            s.finish_reason,
            ro.parse_segments(tokenizer, s.token_ids, "readout", "\\boxed"),
            engine_logprobs=s.logprobs,
            slot_repaired=s.slot_repaired,
        )
        for s in samples
    ]
    parallel.gather_root(model)
    plan = confidence.plan(cfg)
    batch = pol.training_batch(rollouts, tokenizer, plan)
    with torch.no_grad():
        fwd = pol.forward(policy, batch)
    trainer_logp = [row[mask] for row, mask in zip(fwd.logp, batch.completion_mask)]
    parallel.release_root(model)
    return {
        "lengths": [len(s.token_ids) for s in samples],
        "gap": runlog.engine_logprob_gap(rollouts, trainer_logp, world),
    }


def worker(out_file: str, model_dir: str) -> None:
    """torchrun entry: the update without and with activation checkpointing (and compiled
    layers), and with micro-batches that split groups (advantages from a separate no-grad
    readout pass); then the HF engine generating on the shards."""
    results = {
        "plain": one_update(model_dir, False, []),
        "checkpointed": one_update(model_dir, True, []),
        "compiled_checkpointed": one_update(model_dir, True, [], compiled=True),
        "split_groups": one_update(model_dir, False, [], split_groups=True),
    }
    world = parallel.init_world()
    results["generate"] = parallel.gather_on_main(generate_on_shards(model_dir), world)
    if world.is_main:
        torch.save(results, out_file)
    parallel.shutdown(world)


def assert_same_update(got: dict, want: dict) -> None:
    assert got["loss_pg"] == pytest.approx(want["loss_pg"], abs=1e-6)
    assert got["loss_cal"] == pytest.approx(want["loss_cal"], abs=1e-6)
    assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5)
    assert set(got["grads"]) == set(want["grads"])
    for name in want["grads"]:
        assert_same_gradient(got["grads"][name], want["grads"][name], name)
        assert_same_first_adamw_step(
            got["weights"][name],
            want["weights"][name],
            want["grads"][name],
            lr=LR,
            grad_atol=grad_atol(want["grads"][name]),
            name=name,
        )


def test_two_ranks_give_the_one_process_loss_and_gradient(tmp_path, tiny_dir):
    """2 ranks x 1 group (FSDP2 over gloo) == 1 process x 2 groups: losses, every parameter's
    gradient, the clipped norm, and the weights after a real AdamW step; also with the layers
    checkpointed, and checkpointed around compiled forwards (compile_layers)."""
    model_dir = str(tiny_dir / "model")
    out = tmp_path / "two_ranks.pt"
    result = subprocess.run(
        [*TORCHRUN, str(Path(__file__)), str(out), model_dir],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    two = torch.load(out, weights_only=False)

    one = one_update(model_dir, False, [])  # this process: no launcher, no process group
    assert one["grad_norm"] > 0.5 and one["loss_cal"] > 0 and one["loss_pg"] != 0  # non-trivial, and clipped (0.5)
    moved = sum(
        float((one["weights"][n] - w0).abs().max() > 0)
        for n, w0 in pol.load_policy(model_dir, torch.device("cpu")).model.named_parameters()
    )
    assert moved == len(one["weights"])  # every parameter took the step
    for variant in ("plain", "checkpointed", "compiled_checkpointed"):
        assert_same_update(two[variant], one)
    assert_same_update(two["split_groups"], one_update(model_dir, False, [], split_groups=True))
    # the HF engine on the shards: 4 samples per rank, the trainer's log-probs (all ranks' tokens)
    assert [len(g["lengths"]) for g in two["generate"]] == [4, 4]
    # rank 0 stopped after 2 tokens and kept stepping with rank 1 (synced_gpus) instead of hanging
    assert max(two["generate"][0]["lengths"]) <= 2 < max(two["generate"][1]["lengths"])
    assert two["generate"][0]["gap"] == two["generate"][1]["gap"] < 1e-4


# --- the whole loop under torchrun -----------------------------------------------------------


def run_tiny_ranks(out_dir: Path, *overrides: str, nproc: int = 2) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["bash", "run.sh", "tiny", f"out_dir={out_dir}", *overrides],
        cwd=ROOT,
        env={**ENV, "NPROC": str(nproc)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_two_rank_checkpoint_resumes_exactly(tmp_path, tiny_dir):
    """A straight 2-step run on 2 ranks with vLLM (checkpoint after step 1) vs resuming that
    checkpoint on 2 ranks: the same questions, samples, losses and weights at step 2. With a KL
    term (kl_coef > 0), so the frozen reference is sharded like the policy, read under FSDP2 and
    rebuilt from the run's model on resume."""
    kl = "kl_coef=0.05"
    result = run_tiny_ranks(tmp_path, "max_steps=2", "save_every=1", "run_name=run", kl)
    assert "[credo] world size 2" in result.stdout
    run_dir = tmp_path / "run"
    straight = read_metrics(run_dir)
    assert [m["step"] for m in straight] == [0, 1]
    assert all(m["world_size"] == 2 for m in straight)
    # after every push of gathered shards both engines sample from the trainer's weights
    assert all(m["engine_logprob_gap"] < 1e-3 for m in straight)  # float noise, not a stale engine (SYNCED_GAP)
    assert all(len(m["questions"]) == 2 for m in straight)  # the step's questions, over both ranks
    assert len((run_dir / "rollouts" / "step_000001.jsonl").read_text().splitlines()) == 8  # both ranks' rollouts
    ckpt = run_dir / "ckpt" / "step_000001"
    for name in (
        "model.safetensors",
        "tokenizer.json",
        "sharded/.metadata",
        "sharded/__0_0.distcp",
        "sharded/__1_0.distcp",
        "rng/rank_00000.pt",
        "rng/rank_00001.pt",
        "config.yaml",
    ):
        assert (ckpt / name).exists(), name
    assert json.loads((ckpt / "trainer_state.json").read_text()) == {"step": 1, "data_cursor": 2, "world_size": 2}
    straight_rollouts = (run_dir / "rollouts" / "step_000001.jsonl").read_text()
    shutil.copytree(run_dir / "ckpt" / "step_000002", tmp_path / "straight_step2")

    assert straight[0]["loss_kl"] == 0.0 < straight[1]["loss_kl"]  # the policy equals the reference at step 0 only
    run_tiny_ranks(tmp_path, "max_steps=2", f"resume={ckpt}", kl)  # continues in the same run directory
    resumed = read_metrics(run_dir)
    assert [m["step"] for m in resumed] == [0, 1]
    assert resumed[1]["questions"] == straight[1]["questions"]
    assert (run_dir / "rollouts" / "step_000001.jsonl").read_text() == straight_rollouts  # the same samples
    for key in ("loss_pg", "loss_cal", "loss_kl", "grad_norm", "acc", "mean_c"):
        assert resumed[1][key] == pytest.approx(straight[1][key], abs=1e-6), key
    from safetensors.torch import load_file

    want = load_file(tmp_path / "straight_step2" / "model.safetensors")
    got = load_file(run_dir / "ckpt" / "step_000002" / "model.safetensors")
    assert set(got) == set(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-6, rtol=0, msg=name)

    # The same checkpoint on another world size is refused with the numbers.
    with pytest.raises(ValueError, match="written by 2 process.*this run has 1"):
        checkpoint.restore_state(ckpt, None)


@pytest.mark.slow
def test_two_ranks_with_the_hf_engine_read_credits_c_at_the_slot(tmp_path, tiny_dir):
    """credit_confidence=engine with the HF engine under FSDP2: each rank's engine reads its own
    rollouts' slots by forwards of the sharded model, a collective that keeps the ranks in step
    (HFEngine.next_logprobs); no trainer pass, and the update's c agrees."""
    run_tiny_ranks(tmp_path, "max_steps=2", "engine=hf", "run_name=hf")
    metrics = read_metrics(tmp_path / "hf")
    assert [m["world_size"] for m in metrics] == [2, 2] and all(m["readout_pass_rows"] == 0 for m in metrics)
    assert all(m["engine_conf_gap_max"] is not None and m["engine_conf_gap_max"] < 1e-5 for m in metrics)


# --- cheap checks -----------------------------------------------------------------------------


def test_a_world_size_that_does_not_divide_the_questions_is_refused():
    cfg = config.load_config("tiny")  # 4 x 2 rollouts / G = 4 -> 2 questions
    parallel.check_world(cfg, parallel.World(1, 2, 1, torch.device("cpu")))
    with pytest.raises(
        ValueError, match=r"3 ranks cannot share 2 questions per step.*per_device_batch_size 4 x grad_accum 2"
    ):
        parallel.check_world(cfg, parallel.World(0, 3, 0, torch.device("cpu")))


def test_rank_slices_cover_the_step_and_rank_zero_samples_like_one_process():
    step = list(range(8))
    worlds = [parallel.World(r, 4, r, torch.device("cpu")) for r in range(4)]
    assert [parallel.rank_slice(step, w) for w in worlds] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [w.rank_seed(43) for w in worlds] == [43, 43 + 7919, 43 + 2 * 7919, 43 + 3 * 7919]


def test_run_sh_refuses_a_bad_nproc():
    result = subprocess.run(
        ["bash", "run.sh", "tiny"], cwd=ROOT, env={**ENV, "NPROC": "two"}, capture_output=True, text=True
    )
    assert result.returncode == 2 and "NPROC must be a positive integer, got 'two'" in result.stderr


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2])
