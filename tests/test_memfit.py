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
