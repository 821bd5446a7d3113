"""memfit.py: the parameter counts, the per-GPU estimate, the activation_checkpointing=auto
decision (its docstring examples) and the fit table."""

import dataclasses
import doctest

import pytest
import torch

import config
import policy as pol
from infra import memfit


def test_docstring_examples_hold():
    result = doctest.testmod(memfit, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 4 and result.failed == 0


def test_parameter_count_of_the_memory_estimate(tiny_dir):
    """The count from config.json is exact for the tiny model, and gives the published sizes of
    Qwen3 (0.6 B, 8.2 B); 8B's fp32 AdamW state alone exceeds one 80 GiB GPU, not eight."""
    model = pol.load_policy(str(tiny_dir / "model"), torch.device("cpu")).model
    counted, _ = memfit.parameter_counts(memfit.model_shape(str(tiny_dir / "model")))
    assert counted == sum(p.numel() for p in model.parameters())
    assert memfit.parameter_counts(memfit.QWEN3_SHAPES["Qwen/Qwen3-0.6B"])[0] == pytest.approx(0.596e9, rel=0.01)
    assert memfit.parameter_counts(memfit.QWEN3_SHAPES["Qwen/Qwen3-8B"])[0] == pytest.approx(8.19e9, rel=0.01)
    cfg = config.load_config("math")
    one_gpu = memfit.estimate_memory(cfg, memfit.QWEN3_SHAPES["Qwen/Qwen3-8B"], 1, 80.0, checkpointing=True)
    eight = memfit.estimate_memory(cfg, memfit.QWEN3_SHAPES["Qwen/Qwen3-8B"], 8, 80.0, checkpointing=True)
    assert not one_gpu["fits"] and one_gpu["update_gib"] > 16 * 8.19e9 / 2**30  # AdamW in fp32 alone: 122 GiB
    assert eight["fits"]


def test_the_fit_table_has_a_cell_for_every_model_memory_and_world():
    table = memfit.fit_table(config.load_config("math"), list(memfit.QWEN3_SHAPES), [24.0, 80.0], [1, 8])
    rows = table.splitlines()[2:]
    assert len(rows) == 2 * len(memfit.QWEN3_SHAPES)
    assert all(row.count("|") == 6 for row in rows)
    assert "| Qwen3-8B | 8.2 B | 80 GiB | no (" in table  # the row docs/distributed.md cites


def test_a_reference_model_is_counted_in_both_phases():
    """kl_coef > 0 holds a frozen bf16 reference: 2 P / W more in the rollout phase, and in the
    update also its gathered root unit and two layers under FSDP2 (P = 8.19 B: 15.3 GiB on one GPU)."""
    cfg, shape = config.load_config("math"), memfit.QWEN3_SHAPES["Qwen/Qwen3-8B"]
    params, layer_params = memfit.parameter_counts(shape)
    root_params = params - shape["num_hidden_layers"] * layer_params
    kl = dataclasses.replace(cfg, kl_coef=1e-3)
    for world in (1, 8):
        without, with_ref = (memfit.estimate_memory(c, shape, world, 80.0, checkpointing=True) for c in (cfg, kl))
        shards = 2 * params / world / 2**30
        gathered = 0 if world == 1 else (2 * root_params + 4 * layer_params) / 2**30
        assert without["reference_gib"] == 0
        assert with_ref["rollout_gib"] - without["rollout_gib"] == pytest.approx(shards, rel=1e-9)
        assert with_ref["update_gib"] - without["update_gib"] == pytest.approx(shards + gathered, rel=1e-9)
    assert memfit.estimate_memory(kl, shape, 1, 80.0)["reference_gib"] == pytest.approx(15.26, abs=0.01)


# A made-up shape small enough to count by hand: q = 2 heads x 4 = 8, kv = 1 head x 4 = 4.
SMALL = dict(
    hidden_size=8,
    num_hidden_layers=2,
    intermediate_size=16,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
    vocab_size=32,
    tie_word_embeddings=True,
)


def test_lora_trainable_parameters_counted_by_hand():
    """Rank 2 on q_proj [8 -> 8] and down_proj [16 -> 8]: A [2, 8] + B [8, 2] = 16 + 16 = 32 and
    A [2, 16] + B [8, 2] = 32 + 16 = 48, 80 a layer, 160 over 2 layers; the reserved rows: 2 x 8 = 16
    of the tied embedding (176), and 16 more of an untied head (192). On k_proj [8 -> 4] and
    gate_proj [8 -> 16]: 16 + 8 = 24 and 16 + 32 = 48, 72 a layer, 144 + 16 = 160."""
    untied = {**SMALL, "tie_word_embeddings": False}
    assert memfit.lora_parameter_count(SMALL, 2, "q_proj,down_proj") == 176
    assert memfit.lora_parameter_count(untied, 2, "q_proj, down_proj") == 192
    assert memfit.lora_parameter_count(SMALL, 2, ["k_proj", "gate_proj"]) == 160
    assert memfit.reserved_row_count(SMALL) == 16 and memfit.reserved_row_count(untied) == 32
    # Qwen3-8B, rank 32 on all seven (in + out: q 4096 + 4096, k and v 4096 + 1024, o 4096 + 4096,
    # gate and up 4096 + 12288, down 12288 + 4096 = 75,776): 32 x 75,776 x 36 layers = 87,293,952,
    # plus 2 x 4,096 rows of the embedding and of the untied head = 16,384.
    assert memfit.lora_parameter_count(memfit.QWEN3_SHAPES["Qwen/Qwen3-8B"], 32, config.Config().lora_targets) == (
        87_310_336
    )
    with pytest.raises(ValueError, match="not a projection of a decoder layer"):
        memfit.lora_parameter_count(SMALL, 2, "q_proj,lm_head")
    with pytest.raises(ValueError, match="lora_targets is empty"):
        memfit.lora_parameter_count(SMALL, 2, " , ")
    with pytest.raises(ValueError, match="0 is full fine-tuning"):
        memfit.lora_parameter_count(SMALL, 0, "q_proj")


def test_full_fine_tuning_estimates_are_those_before_lora():
    """lora_rank=0 (the default) gives exactly what the estimate gave before LoRA was counted
    (the values it returned at commit 4b93dd3)."""
    cfg = config.load_config("math", ["lora_rank=0"])
    q8, q17 = memfit.QWEN3_SHAPES["Qwen/Qwen3-8B"], memfit.QWEN3_SHAPES["Qwen/Qwen3-1.7B"]
    assert memfit.estimate_memory(cfg, q8, 1, 80.0, checkpointing=True) == {
        "params_b": 8.19073536,
        "reference_gib": 0.0,
        "update_gib": 148.83297157287598,
        "rollout_gib": 122.53860092163086,
        "kv_cache_gib": 11.743566513061523,
        "concurrent_sequences": 9.278867368344907,
        "fits": False,
    }
    assert memfit.estimate_memory(dataclasses.replace(cfg, kl_coef=1e-3), q8, 8, 80.0, checkpointing=True) == {
        "params_b": 8.19073536,
        "reference_gib": 4.944202661514282,
        "update_gib": 39.39958882331848,
        "rollout_gib": 44.34937930107117,
        "kv_cache_gib": 11.743566513061523,
        "concurrent_sequences": 9.278867368344907,
        "fits": True,
    }
    assert memfit.estimate_memory(cfg, q17, 8, 80.0, checkpointing=False) == {
        "params_b": 1.720574976,
        "reference_gib": 0.0,
        "update_gib": 44.576308250427246,
        "rollout_gib": 33.40361547470093,
        "kv_cache_gib": 23.79517936706543,
        "concurrent_sequences": 24.17288062686012,
        "fits": True,
    }


def test_lora_holds_training_state_for_the_trainable_parameters_only():
    """Qwen3-8B at rank 32 (T = 87,310,336 trainable, R = 16,384 of them reserved rows, P = 8,190,735,360;
    the seven projections' weights: 36 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 12288) = 6,945,767,424,
    and the untied head's 151,936 x 4,096, both frozen in bf16): the rollout phase holds 12 T + 2 x those
    + 4 x the rest (P - those - R) bytes of weights and state over W ranks instead of 12 P, 2 bytes more
    per bf16 weight with precision=fp32; the
    update is far below full fine-tuning's and fits one 80 GiB GPU with activation checkpointing, where
    full fine-tuning does not."""
    full, shape = config.load_config("math"), memfit.QWEN3_SHAPES["Qwen/Qwen3-8B"]
    lora = dataclasses.replace(full, lora_rank=32)
    trainable, projections = 87_310_336, 6_945_767_424 + 151_936 * 4096
    rest = 8_190_735_360 - projections - 16_384
    for world in (1, 8):
        est = memfit.estimate_memory(lora, shape, world, 80.0, checkpointing=True)
        engine = 0.35 * 80.0 + memfit.CUDA_OVERHEAD_GIB
        held = 12 * trainable + 2 * projections + 4 * rest
        assert est["rollout_gib"] == pytest.approx(held / world / 2**30 + engine, rel=1e-12)
        fp32 = memfit.estimate_memory(dataclasses.replace(lora, precision="fp32"), shape, world, 80.0, True)
        assert fp32["rollout_gib"] - est["rollout_gib"] == pytest.approx(2 * projections / world / 2**30, rel=1e-9)
        for checkpointing in (True, False):
            with_lora, without = (
                memfit.estimate_memory(c, shape, world, 80.0, checkpointing=checkpointing) for c in (lora, full)
            )
            assert with_lora["update_gib"] < without["update_gib"]
            assert with_lora["rollout_gib"] < without["rollout_gib"]
    one_gpu = memfit.estimate_memory(lora, shape, 1, 80.0, checkpointing=True)
    assert one_gpu["fits"] and one_gpu["update_gib"] < 40
    assert not memfit.estimate_memory(full, shape, 1, 80.0, checkpointing=True)["fits"]


def test_qlora_packs_every_projection_in_nf4_bytes():
    """Qwen3-8B at rank 32 with lora_quant=nf4: the seven projections (6,945,767,424 weights, all of
    them, whatever lora_targets says) at 4.127 / 8 bytes each, the untied head in bf16, the rest in
    fp32; one GPU's update and rollout hold that much less than LoRA's: (2 - 4.127 / 8) bytes a
    projection weight; the CLI names the base and shows one process only."""
    shape, lora = memfit.QWEN3_SHAPES["Qwen/Qwen3-8B"], dataclasses.replace(config.load_config("math"), lora_rank=32)
    qlora = dataclasses.replace(lora, lora_quant="nf4")
    trainable, projections, head = 87_310_336, 6_945_767_424, 151_936 * 4096
    rest = 8_190_735_360 - projections - head - 16_384
    held = memfit.training_state_bytes(qlora, shape)["rollout"]
    assert held == pytest.approx(12 * trainable + 4.127 / 8 * projections + 2 * head + 4 * rest, rel=1e-12)
    one_q, one_l = (memfit.estimate_memory(c, shape, 1, 80.0, checkpointing=True) for c in (qlora, lora))
    saved = (2 - 4.127 / 8) * projections / 2**30
    assert one_l["rollout_gib"] - one_q["rollout_gib"] == pytest.approx(saved, rel=1e-9)
    q_only = dataclasses.replace(qlora, lora_targets="q_proj")
    assert (
        memfit.training_state_bytes(q_only, shape)["rollout"]
        < memfit.training_state_bytes(dataclasses.replace(q_only, lora_quant="none"), shape)["rollout"] - projections
    )  # every projection packed, not only the targets


def test_the_cli_shows_qlora_in_one_process(capsys):
    memfit._fit_cli(["math", "model=Qwen/Qwen3-8B", "lora_rank=64", "lora_quant=nf4", "activation_checkpointing=true"])
    out = capsys.readouterr().out
    assert "over QLoRA's base: every projection packed in 4 bits (NF4), an untied head in bf16" in out
    assert "GPU    80 GiB x  1: update    22.1 GiB, rollout   39.8 GiB" in out and " x  8:" not in out


def test_lora_adds_its_rank_r_intermediates_to_the_activations():
    """r values a target module a token in the compute dtype: 2 x 32 x 7 = 448 bytes a layer, x 36 layers
    = 16,128 for Qwen3-8B without checkpointing; one live layer's 448 with it."""
    shape, targets = memfit.QWEN3_SHAPES["Qwen/Qwen3-8B"], config.Config().lora_targets
    assert memfit.lora_activation_bytes_per_token(shape, 32, targets, False, 2) == 16_128
    assert memfit.lora_activation_bytes_per_token(shape, 32, targets, True, 2) == 448


def test_the_cli_takes_lora_overrides(capsys):
    memfit._fit_cli(["math", "model=Qwen/Qwen3-8B", "lora_rank=32", "activation_checkpointing=true"])
    out = capsys.readouterr().out
    assert "87.3 M trainable parameters (1.07%)" in out
    assert "GPU    80 GiB x  1: update    30.4 GiB, rollout   48.4 GiB" in out and "-> fits" in out
    memfit._fit_cli(["math", "--table", "lora_rank=32"])
    out = capsys.readouterr().out
    assert "LoRA rank 32 on q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" in out
    assert "| Qwen3-8B | 8.2 B, 87.3 M trained | 80 GiB | yes, AC (30 / 48 GiB, KV 9 seqs) |" in out
