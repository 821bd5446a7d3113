"""LoRA (adapters/lora.py): what trains and holds optimizer state; with the adapters at zero the model,
its gradients and a run's first step are full fine-tuning's; a run's adapter loads in PEFT with the
slot logits of the merged weights the engine was pushed; `ask` and eval.py read a LoRA checkpoint;
two ranks train and resume exactly."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from step_cases import A, method_batch, method_rollouts, outcomes_of, random_qwen3, tiny_policy

import confidence
import config
import credo
import policy as pol
import rollout as ro
from adapters import lora
from confidence import READS
from evaluation import client

ROOT = Path(__file__).resolve().parent.parent
ENV = {
    **os.environ,
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "CUDA_VISIBLE_DEVICES": "",
}
for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
    ENV.pop(var, None)
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
QUESTION = "What is 12 + 39?"
READOUT = (  # teacher-forced: whether a sample of the tiny model reaches the slot depends on its weights
    "12 + 39 = 51. The answer is \\boxed{51}. <analysis> I may have slipped on a carry when adding "
    "the digits. </analysis> <confidence>"
)


def lora_config(*extra: str) -> config.Config:
    return config.load_config(
        "credo", ["group_size=3", "per_device_batch_size=3", "grad_accum=1", "precision=fp32", "lora_rank=2", *extra]
    )


def one_update(policy: pol.Policy, cfg, optimizer) -> credo.StepStats:
    """One real update of `policy` on the hand-built group of three, through the loop's own helpers."""
    plan = confidence.plan(cfg)
    rollouts = method_rollouts(cfg, policy.tokenizer)
    batch = method_batch(cfg, policy.tokenizer, rollouts)
    step = credo.make_step(cfg, 100, batch, outcomes_of(rollouts, A), rollouts)
    return credo.train_step(credo.Learner(policy, optimizer, cfg, plan), step)


class Keep(torch.optim.Optimizer):
    """An optimizer that keeps each parameter's gradient (the update's step, then zero_grad, frees it)."""

    def __init__(self, params):
        super().__init__(list(params), {})

    def step(self, closure=None):
        self.grads = {p: p.grad.clone() for p in self.param_groups[0]["params"] if p.grad is not None}


def with_untied_and_tied(tiny_dir) -> list[pol.Policy]:
    """The tiny model (untied head) and a random tied Qwen3 with the tiny tokenizer."""
    untied = tiny_policy(tiny_dir)
    tok = untied.tokenizer
    tied_model = random_qwen3(tok, tied=True)
    high, low = pol.add_reserved_tokens(tied_model, tok)
    return [untied, pol.Policy(tied_model, tok, high, low, torch.float32)]


# --- what trains --------------------------------------------------------------------------------


def test_only_the_adapters_and_the_reserved_rows_train_and_hold_optimizer_state(tiny_dir):
    cfg = lora_config()
    for policy in with_untied_and_tied(tiny_dir):
        model = policy.model
        tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        lora.apply(model, cfg, (policy.high_id, policy.low_id))
        layers = len(model.get_decoder().layers)
        adapters = {
            f"model.layers.{i}.{part}.{t}.lora_{ab}.weight"
            for i in range(layers)
            for t in TARGETS
            for ab in "AB"
            for part in (("self_attn",) if t in TARGETS[:4] else ("mlp",))
        }
        rows = {"model.credo_embed_rows.rows"} | (set() if tied else {"model.credo_head_rows.rows"})
        assert {name for name, _ in lora.trainable(model)} == adapters | rows
        # One real update: a gradient for what trains, none for anything else
        keep = Keep(p for _, p in lora.trainable(model))
        one_update(policy, cfg, keep)
        named = dict(model.named_parameters())
        assert {id(p) for p in keep.grads} == {id(named[n]) for n in adapters | rows}
        assert all(p.grad is None and not p.requires_grad for n, p in named.items() if n not in adapters | rows)
        head_rows = lora.head_rows(model).rows
        assert keep.grads[head_rows].abs().sum() > 0  # the readout's rows learn from eq:readout and the softmax
        assert any(keep.grads[named[n]].abs().sum() > 0 for n in adapters if ".lora_B." in n)
        # The loop's optimizer holds state for exactly those parameters after a step
        optimizer = credo.make_optimizer(model, cfg, "cpu")
        one_update(policy, cfg, optimizer)
        assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(named[n]) for n in adapters | rows}
        assert {id(p) for p in optimizer.state} == {id(named[n]) for n in adapters | rows}


def test_with_zero_adapters_the_loss_and_gradients_are_full_fine_tunings(tiny_dir):
    """B = 0 and the rows copied: the same loss exactly, and by the chain rule each trained tensor's
    gradient is full fine-tuning's: the rows' the rows of the embedding's and head's gradients, B's
    (alpha / r) dL/dW A^T, and A's zero (before clipping: the global norm runs over what trains)."""
    cfg = lora_config("max_grad_norm=null")
    for full in with_untied_and_tied(tiny_dir):
        adapted = dataclasses.replace(full, model=copy.deepcopy(full.model))
        torch.manual_seed(0)  # A's initialisation: the same draw whatever ran before in this process
        lora.apply(adapted.model, cfg, (full.high_id, full.low_id))
        keep_full, keep_lora = Keep(full.model.parameters()), Keep(p for _, p in lora.trainable(adapted.model))
        stats_full, stats_lora = one_update(full, cfg, keep_full), one_update(adapted, cfg, keep_lora)
        assert stats_lora.terms == stats_full.terms
        torch.testing.assert_close(stats_lora.conf, stats_full.conf, rtol=0, atol=0, equal_nan=True)
        ids = [full.high_id, full.low_id]
        embed, head = full.model.get_input_embeddings().weight, full.model.get_output_embeddings().weight
        decoder = adapted.model.get_decoder()
        if head is embed:  # tied: one pair of rows, both uses' gradients summed
            torch.testing.assert_close(keep_lora.grads[decoder.credo_embed_rows.rows], keep_full.grads[embed][ids])
        else:
            torch.testing.assert_close(keep_lora.grads[decoder.credo_embed_rows.rows], keep_full.grads[embed][ids])
            torch.testing.assert_close(keep_lora.grads[decoder.credo_head_rows.rows], keep_full.grads[head][ids])
        q_full = full.model.get_decoder().layers[0].self_attn.q_proj.weight
        q = adapted.model.get_decoder().layers[0].self_attn.q_proj
        expected_b = q.scaling * keep_full.grads[q_full] @ q.lora_A.weight.T  # [out, r]
        # fp32 sums over the layer's inputs in two orders: an element near 0 can differ by a few ulps of
        # the largest terms, so the bound is relative to the tensor's scale, not to each element
        scale = float(expected_b.abs().max())
        torch.testing.assert_close(keep_lora.grads[q.lora_B.weight], expected_b, rtol=1e-4, atol=1e-5 * scale)
        assert keep_lora.grads[q.lora_A.weight].abs().max() == 0


def test_the_kl_reference_with_the_adapters_off_is_a_frozen_copy_of_the_starting_model(tiny_dir):
    """Under LoRA the update reads the KL term's reference through adapters_off (learner.reference
    None, no second model): after a real update has moved the adapters and rows, its log-probs are
    a frozen deep copy's of the starting model to 1e-6, the k3 KL from the two readings agrees to
    1e-6 and is > 0, and the policy is the trained one again after the context."""
    cfg = lora_config("lr=0.05")
    start = tiny_policy(tiny_dir)
    frozen = dataclasses.replace(start, model=copy.deepcopy(start.model).requires_grad_(False))
    lora.apply(start.model, cfg, (start.high_id, start.low_id))
    one_update(start, cfg, credo.make_optimizer(start.model, cfg, "cpu"))  # the adapters and rows move
    rollouts = method_rollouts(cfg, start.tokenizer)
    batch = method_batch(cfg, start.tokenizer, rollouts)
    with torch.no_grad():
        trained = pol.forward(start, batch).logp  # [N, L-1]
        with lora.adapters_off(start.model):
            off = pol.forward(start, batch).logp
        copy_logp = pol.forward(frozen, batch).logp
        again = pol.forward(start, batch).logp
    completion = batch.completion_mask.bool()
    torch.testing.assert_close(off[completion], copy_logp[completion], atol=1e-6, rtol=0)
    assert (trained[completion] - copy_logp[completion]).abs().max() > 1e-3  # the update did move the policy
    torch.testing.assert_close(again, trained, atol=0, rtol=0)
    # The loop's KL term, with the reference read each way
    kl_cfg = dataclasses.replace(cfg, kl_coef=0.5)
    kl = {}
    for name, learner_policy, reference in (("off", start, None), ("copy", copy.deepcopy(start), frozen)):
        step = credo.make_step(kl_cfg, 100, batch, outcomes_of(rollouts, A), rollouts)
        learner = credo.Learner(learner_policy, Keep(p for _, p in lora.trainable(learner_policy.model)), kl_cfg)
        learner.reference = reference
        kl[name] = credo.train_step(learner, step).terms["kl"]
    assert kl["off"] > 0 and kl["off"] == pytest.approx(kl["copy"], abs=1e-6)


def test_adapters_off_needs_a_lora_model_and_does_not_nest(tiny_dir):
    policy = tiny_policy(tiny_dir)
    with pytest.raises(ValueError, match="adapters_off needs a LoRA model"):
        with lora.adapters_off(policy.model):
            pass
    lora.apply(policy.model, lora_config(), (policy.high_id, policy.low_id))
    with lora.adapters_off(policy.model):
        assert lora.output_head(policy.model).ids == ()
        with pytest.raises(RuntimeError, match="already off"):
            with lora.adapters_off(policy.model):
                pass
    assert lora.output_head(policy.model).ids == (policy.high_id, policy.low_id)


def test_a_kl_term_from_a_lora_adapter_directory_is_refused_at_config_load(tmp_path):
    """Where `model` holds adapters, the base with them off is not the starting model: kl_coef > 0
    with lora_rank > 0 is refused in one line naming both keys, before torch loads."""
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"kl_coef=0\.01 with lora_rank=2: model=.* holds LoRA adapters"):
        lora_config(f"model={tmp_path}", "kl_coef=0.01")
    assert lora_config(f"model={tmp_path}").kl_coef == 0  # without the KL term it loads


def test_a_target_that_is_not_a_linear_module_is_refused_with_the_ones_there_are(tiny_dir):
    policy = tiny_policy(tiny_dir)
    with pytest.raises(ValueError, match=r"lora_targets names \['qkv'\].*its linear modules: \['down_proj'"):
        lora.apply(policy.model, lora_config("lora_targets=q_proj,qkv"), (policy.high_id, policy.low_id))


def test_a_checkpoint_of_other_lora_settings_is_refused_on_resume(tiny_dir):
    policy = tiny_policy(tiny_dir)
    lora.apply(policy.model, lora_config(), (policy.high_id, policy.low_id))
    with pytest.raises(ValueError, match="LoRA settings .* are not this run's .*lora_rank=4"):
        lora.for_run(policy.model, lora_config("lora_rank=4"), (policy.high_id, policy.low_id), torch.float32)
    with pytest.raises(ValueError, match="are not this run's .*lora_rank=0"):
        lora.for_run(policy.model, lora_config("lora_rank=0"), (policy.high_id, policy.low_id), torch.float32)


# --- a run --------------------------------------------------------------------------------------


def run_ok(command: list[str], env: dict = ENV) -> None:
    """Run a command of ours in the checkout; it must succeed (its output's tail says why not)."""
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def warm_ok(warm, argv: list[str]) -> None:
    """`python *argv` forked from the warm launcher (tests/warm.py); it must succeed."""
    result = warm.run(argv, env=ENV)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def train_tiny(warm, out_dir: Path, name: str, *overrides: str) -> Path:
    warm_ok(warm, ["credo.py", "tiny", f"out_dir={out_dir}", f"run_name={name}", *overrides])
    return out_dir / name


def train_tiny_ranks(out_dir: Path, name: str, *overrides: str, nproc: int) -> Path:
    """`NPROC=nproc bash run.sh tiny ...`: torchrun's ranks, real processes."""
    run_ok(
        ["bash", "run.sh", "tiny", f"out_dir={out_dir}", f"run_name={name}", *overrides], {**ENV, "NPROC": str(nproc)}
    )
    return out_dir / name


def rows_of(run_dir: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def lora_run(warm, tmp_path_factory) -> Path:
    """Two steps of the tiny world with rank-4 adapters (vLLM engine, pushed merged weights), a
    checkpoint after each."""
    return train_tiny(warm, tmp_path_factory.mktemp("lora"), "lora", "max_steps=2", "save_every=1", "lora_rank=4")


@pytest.mark.slow
@pytest.mark.xdist_group("test_lora")  # the tests of lora_run share one worker: it trains once
def test_the_first_step_of_a_lora_run_is_full_fine_tunings(lora_run, tiny_run):
    """Adapters at zero: the engine is pushed the base weights, so the same rollouts, verdicts, c (the
    engine's and the trainer's), targets, rewards, weights and advantages, and the same loss, as the
    shared full fine-tuning run of the tiny world (conftest's tiny_run: its first of three steps, the same config).
    After every push the engine reads the trainer's c: the merged weights are the trained ones."""
    assert rows_of(lora_run, 0) == rows_of(tiny_run, 0)
    first = [json.loads((run / "metrics.jsonl").read_text().splitlines()[0]) for run in (lora_run, tiny_run)]
    for key in ("loss", "loss_pg", "loss_cal", "reward_ans", "reward_conf", "acc", "mean_c", "ece", "w_std"):
        assert first[0][key] == first[1][key], key
    metrics = [json.loads(line) for line in (lora_run / "metrics.jsonl").read_text().splitlines()]
    gaps = [m["engine_conf_gap_max"] for m in metrics if m["engine_conf_gap_max"] is not None]
    assert gaps and max(gaps) < 1e-5  # fp32 kernels' rounding, as full fine-tuning's (tests/test_rollout.py)
    assert all(m["engine_logprob_gap"] < 1e-3 for m in metrics)


def slot_logits(model, tokenizer, high: int, low: int) -> torch.Tensor:
    """[2] z_H, z_L at the slot of READOUT after QUESTION's prompt."""
    prompt = ro.build_prompt_ids(tokenizer, QUESTION, "readout", "math", False)
    ids = torch.tensor([prompt + tokenizer.encode(READOUT, add_special_tokens=False)])
    with torch.no_grad():
        return model(ids).logits[0, -1, [high, low]].float()


@pytest.mark.slow
@pytest.mark.xdist_group("test_lora")
def test_a_run_s_adapter_loads_in_peft_with_the_served_slot_logits_and_ask_reads_its_c(lora_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ckpt = lora_run / "ckpt" / "step_000002"
    saved = lora.read_adapter_config(ckpt)
    assert saved["r"] == 4 and saved["trainable_token_indices"].keys() == {"embed_tokens", "lm_head"}  # untied
    trained = pol.load_policy(str(ckpt), torch.device("cpu"))  # base + adapters, as a resume loads it
    assert any(m.lora_B.weight.abs().max() > 0 for m in trained.model.modules() if isinstance(m, lora.LoRALinear))
    ids = (trained.high_id, trained.low_id)
    # What the engine was pushed after step 2: the merged weights, in a plain model of the base's class
    served = AutoModelForCausalLM.from_pretrained(lora.base_of(ckpt))
    pol.add_reserved_tokens(served, trained.tokenizer)
    merged = dict(lora.merged_weights(trained.model))
    served.load_state_dict(merged, strict=True)
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(lora.base_of(ckpt)), str(ckpt))
    z_served = slot_logits(served, trained.tokenizer, *ids)
    z_peft = slot_logits(peft_model, trained.tokenizer, *ids)
    z_ours = slot_logits(trained.model, trained.tokenizer, *ids)
    # fp32 sums in another order (W x + s B A x against (W + s B A) x): logits of size ~10, 1e-5 apart
    torch.testing.assert_close(z_peft, z_served, rtol=0, atol=1e-4)
    torch.testing.assert_close(z_ours, z_served, rtol=0, atol=1e-4)
    # ask, in process: vLLM on the merged weights (written once under the checkpoint) reads the same c
    local = client.open_client(str(ckpt))
    try:
        prompt = local.prompt_ids(QUESTION)
        answer = local.read(prompt, trained.tokenizer.encode(READOUT, add_special_tokens=False), "stop")
    finally:
        local.close()
    expected = torch.sigmoid(z_served[0] - z_served[1]).item()
    assert answer.reason is None and answer.c == pytest.approx(expected, abs=1e-5)
    assert (ckpt / "merged" / "config.json").exists()
    command = client.serve_command(str(ckpt))  # `bash run.sh serve <ckpt>`: vLLM's server on the same weights
    assert str(ckpt / "merged") in command and command[command.index("--tokenizer") + 1] == str(ckpt / "merged")
    completion = trained.tokenizer.encode(READOUT, add_special_tokens=False)
    segments = ro.parse_segments(trained.tokenizer, completion, "readout", "\\boxed{")
    rollout = ro.Rollout("q", prompt, completion, READOUT, "stop", segments)
    (c_eval,) = pol.slot_confidences(trained, [rollout], READS["readout"], budget=4096, packed=False).tolist()
    assert c_eval == pytest.approx(expected, abs=1e-5)  # eval.py's read of the same checkpoint


@pytest.mark.slow
@pytest.mark.xdist_group("test_lora")
def test_a_lora_run_resumes_exactly(warm, lora_run, tmp_path):
    """A straight 2-step run against step 1's checkpoint resumed: the same step-2 rollouts, loss and adapters."""
    resumed = tmp_path / "resumed"
    shutil.copytree(lora_run, resumed)
    shutil.rmtree(resumed / "ckpt" / "step_000002")
    (resumed / "metrics.jsonl").write_text((lora_run / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    train_tiny(warm, tmp_path, "resumed", "max_steps=2", "save_every=1", "lora_rank=4", "resume=auto")
    assert rows_of(resumed, 1) == rows_of(lora_run, 1)
    got, want = (json.loads((r / "metrics.jsonl").read_text().splitlines()[1]) for r in (resumed, lora_run))
    assert got["loss"] == want["loss"] and got["grad_norm"] == want["grad_norm"]
    adapters = [load_file(r / "ckpt" / "step_000002" / lora.ADAPTER_WEIGHTS) for r in (resumed, lora_run)]
    assert adapters[0].keys() == adapters[1].keys()
    for key in adapters[0]:
        assert torch.equal(adapters[0][key], adapters[1][key]), key


@pytest.mark.slow
def test_two_ranks_train_and_resume_exactly_with_lora(tmp_path):
    """NPROC=2 on CPU (FSDP2 over gloo) with adapters: the engine of each rank is pushed the gathered,
    merged weights; a resume of step 1's checkpoint takes the straight run's step 2."""
    run = train_tiny_ranks(tmp_path, "run", "max_steps=2", "save_every=1", "lora_rank=4", nproc=2)
    straight = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["world_size"] for m in straight] == [2, 2]
    assert all(m["engine_logprob_gap"] < 1e-3 for m in straight)  # the engines sample from the trained weights
    ckpt = run / "ckpt" / "step_000001"
    assert (ckpt / lora.ADAPTER_CONFIG).exists() and (ckpt / "sharded" / ".metadata").exists()
    shutil.copytree(run / "ckpt" / "step_000002", tmp_path / "straight_step2")
    straight_rollouts = rows_of(run, 1)
    train_tiny_ranks(tmp_path, "run", "max_steps=2", "lora_rank=4", f"resume={ckpt}", nproc=2)
    resumed = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows_of(run, 1) == straight_rollouts
    for key in ("loss_pg", "loss_cal", "grad_norm", "acc", "mean_c"):
        assert resumed[1][key] == pytest.approx(straight[1][key], abs=1e-6), key
    want = load_file(tmp_path / "straight_step2" / lora.ADAPTER_WEIGHTS)
    got = load_file(run / "ckpt" / "step_000002" / lora.ADAPTER_WEIGHTS)
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=0, msg=key)


@pytest.mark.slow
@pytest.mark.xdist_group("test_lora")
def test_eval_reads_a_lora_checkpoint(warm, lora_run, tiny_dir, tmp_path):
    """eval.py on a LoRA checkpoint: base + adapters for the trainer's reads, the base for vLLM to start
    from and the merged weights pushed (engine.make_engine, as a LoRA run's engine)."""
    ckpt = lora_run / "ckpt" / "step_000002"
    (tmp_path / "small.jsonl").write_text("".join((tiny_dir / "math_test.jsonl").read_text().splitlines(True)[:3]))
    warm_ok(
        warm,
        ["eval.py", "--ckpt", f"CREDO={ckpt}", "--sets", f"tiny={tmp_path / 'small.jsonl'}:math"]
        + ["--n", "2", "--out", str(tmp_path / "eval"), "--config", "tiny", "--no-report"],
    )
    records = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    readout = [r for r in records if r["source"] == "readout"]
    assert len(readout) == 3 * 2 and {r["run"] for r in readout} == {"lora/step_000002"}
    assert all(r["c"] is None or 0 < r["c"] < 1 for r in readout) and all(r["a"] in (0, 1) for r in readout)
