"""QLoRA (adapters/quant.py, lora_quant=nf4): the tiny model's base loads with every projection
packed in 4 bits and the head in full precision; LoRA's adapters train over it; the engine is pushed
exactly the model the trainer scores (dequantized base + adapters); a KL term's reference is the
quantized base with the adapters off; the key's bad combinations are refused in one line; a real run
trains with the engine reading the trainer's c."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from step_cases import A, method_batch, method_rollouts, outcomes_of
from test_lora import Keep, lora_config, one_update, train_tiny
from transformers import AutoModelForCausalLM

import config
import credo
import policy as pol
from adapters import lora, quant
from infra import parallel

PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def qlora_policy(tiny_dir: Path, cfg) -> pol.Policy:
    """The tiny model as a QLoRA run loads it: a 4-bit base, the reserved tokens, LoRA applied."""
    policy = pol.load_policy(str(tiny_dir / "model"), torch.device("cpu"), torch.float32, quantize="nf4")
    lora.apply(policy.model, cfg, (policy.high_id, policy.low_id))
    return policy


def plain_model_of(tiny_dir: Path, weights: dict[str, torch.Tensor], rows: int):
    """A full-precision tiny model holding `weights` (what the engine would load)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir / "model")
    model.resize_token_embeddings(rows)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert unexpected == [] and set(missing) <= {"lm_head.weight"} - set(weights), (missing, unexpected)
    return model


def test_the_base_is_packed_but_the_head_and_the_engine_gets_the_model_the_trainer_scores(tiny_dir):
    """Every decoder projection is a packed 4-bit weight, the head and embedding are fp32; after the
    adapters move, lora.merged_weights gives the full-precision names and shapes, each projection
    dequantized(W) + (alpha / r) B A, and a plain model of those weights has the QLoRA model's
    logits (fp32 both ways: only the order of the sums differs, 1e-5 on logits of order 1)."""
    cfg = lora_config()
    policy = qlora_policy(tiny_dir, cfg)
    model = policy.model
    packed = {name.rsplit(".", 3)[-3] for name, p in model.named_parameters() if quant.is_quantized(p)}
    assert packed == PROJECTIONS
    assert model.get_output_embeddings().weight.dtype == torch.float32
    assert not quant.is_quantized(model.get_output_embeddings().weight)
    torch.manual_seed(0)
    with torch.no_grad():
        for _, p in lora.trainable(model):
            p.add_(0.05 * torch.randn_like(p))  # B != 0: the adapters contribute; the rows moved
    merged = dict(lora.merged_weights(model))
    plain = plain_model_of(tiny_dir, merged, model.get_input_embeddings().weight.shape[0])
    assert {n: t.shape for n, t in merged.items()} == {n: t.shape for n, t in plain.state_dict().items() if n in merged}
    q = model.get_decoder().layers[0].self_attn.q_proj
    by_hand = quant.dequantized(q.base_layer.weight) + q.scaling * q.lora_B.weight @ q.lora_A.weight
    torch.testing.assert_close(merged["model.layers.0.self_attn.q_proj.weight"], by_hand, rtol=0, atol=1e-6)
    ids = torch.tensor([[5, 17, policy.high_id, 42, policy.low_id, 9]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, plain(ids).logits, rtol=0, atol=1e-5)
    # What the engine is told the model is: the full-precision architecture, no quantization settings
    assert "quantization_config" in model.config.to_dict()
    assert "quantization_config" not in quant.plain_config(model.config).to_dict()


def test_one_update_trains_the_adapters_and_rows_over_a_base_that_stays_as_packed(tiny_dir):
    cfg = lora_config()
    policy = qlora_policy(tiny_dir, cfg)
    named = dict(policy.model.named_parameters())
    packed_before = {n: p.data.clone() for n, p in named.items() if quant.is_quantized(p)}
    keep = Keep(p for _, p in lora.trainable(policy.model))
    stats = one_update(policy, cfg, keep)
    assert math.isfinite(stats.terms["pg"]) and math.isfinite(stats.terms["cal"])
    trained = {id(p) for _, p in lora.trainable(policy.model)}
    assert {id(p) for p in keep.grads} == trained
    assert any(g.abs().sum() > 0 for p, g in keep.grads.items() if p.shape[0] > 2)  # an adapter B learns
    for name, before in packed_before.items():
        assert not named[name].requires_grad and torch.equal(named[name].data, before), name


def test_the_kl_reference_is_the_quantized_base_with_the_adapters_off(tiny_dir):
    """After an update has moved the adapters, the no-grad read with them off is the 4-bit base
    loaded afresh (to 1e-6), and the loop's KL term from it is > 0."""
    cfg = lora_config("lr=0.05")
    policy = qlora_policy(tiny_dir, cfg)
    one_update(policy, cfg, credo.make_optimizer(policy.model, cfg, "cpu"))
    fresh = pol.load_policy(str(tiny_dir / "model"), torch.device("cpu"), torch.float32, quantize="nf4")
    rollouts = method_rollouts(cfg, policy.tokenizer)
    batch = method_batch(cfg, policy.tokenizer, rollouts)
    with torch.no_grad():
        with lora.adapters_off(policy.model):
            off = pol.forward(policy, batch).logp  # [N, L-1]
        base = pol.forward(fresh, batch).logp
        trained = pol.forward(policy, batch).logp
    completion = batch.completion_mask.bool()
    torch.testing.assert_close(off[completion], base[completion], atol=1e-6, rtol=0)
    assert (trained[completion] - base[completion]).abs().max() > 1e-3
    kl_cfg = dataclasses.replace(cfg, kl_coef=0.5)
    step = credo.make_step(kl_cfg, 100, batch, outcomes_of(rollouts, A), rollouts)
    learner = credo.Learner(policy, Keep(p for _, p in lora.trainable(policy.model)), kl_cfg)
    assert credo.train_step(learner, step).terms["kl"] > 0


def test_lora_quant_without_adapters_or_across_ranks_or_of_another_type_is_refused():
    with pytest.raises(ValueError, match=r"^lora_quant=nf4 needs lora_rank > 0"):
        lora_config("lora_rank=0", "lora_quant=nf4")
    with pytest.raises(ValueError, match="lora_quant"):
        lora_config("lora_quant=int8")
    world = parallel.World(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"))
    with pytest.raises(ValueError, match=r"^lora_quant=nf4 runs in one process"):
        parallel.check_world(lora_config("lora_quant=nf4", "per_device_batch_size=6"), world)
    with pytest.raises(ValueError, match="not a 4-bit type"):
        quant.quantization_config("none", torch.float32)


def test_lora_quant_without_bitsandbytes_is_one_line_before_torch_loads(monkeypatch):
    """Where bitsandbytes is not installed (find_spec finds nothing), the config is refused by name."""
    find_spec = config.importlib.util.find_spec
    monkeypatch.setattr(
        config.importlib.util, "find_spec", lambda name: None if name == "bitsandbytes" else find_spec(name)
    )
    with pytest.raises(ValueError, match=r"^lora_quant=nf4 needs bitsandbytes, which is not installed"):
        lora_config("lora_quant=nf4")


@pytest.mark.slow
def test_a_qlora_run_trains_with_the_engine_reading_the_trainer_s_c(warm, tmp_path):
    """A real step of the tiny world under QLoRA (vLLM engine, loaded from the full-precision base,
    then pushed the merged weights): a finite loss, and the engine's c is the trainer's (fp32
    rounding, as LoRA's) and so are its log-probs: the push made it the 4-bit model the trainer
    scores. (The push after an update is merged_weights again: the first test here.)"""
    run = train_tiny(warm, tmp_path, "qlora", "max_steps=1", "lora_rank=4", "lora_quant=nf4")
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1 and all(torch.isfinite(torch.tensor(m["loss"])) for m in metrics)
    gaps = [m["engine_conf_gap_max"] for m in metrics if m["engine_conf_gap_max"] is not None]
    assert gaps and max(gaps) < 1e-5
    assert all(m["engine_logprob_gap"] < 1e-3 for m in metrics)
