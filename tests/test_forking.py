"""docs/forking.md's worked example, applied as the page says: its function appended to
methods.py (executed in that module's namespace), its config, and one real training step."""

import json
import re

import pytest
import torch
import yaml

import config
import credo
import methods

DOC = config.ROOT / "docs" / "forking.md"


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


@pytest.fixture
def brier():
    """The page's method, registered as the page says (its second python block: the first is
    the signature), and removed again afterwards."""
    example = doc_blocks("python")[1]
    assert '@register_method("brier"' in example
    exec(compile(example, f"{DOC} (the worked example)", "exec"), vars(methods))  # noqa: S102 (our own docs)
    try:
        yield methods.METHODS["brier"]
    finally:
        methods.METHODS.pop("brier", None)
        vars(methods).pop("brier", None)


@pytest.fixture
def brier_config(tmp_path, brier):
    """The page's YAML block, as configs/credo_brier.yaml would hold it (inherit: credo)."""
    (text,) = doc_blocks("yaml")
    path = tmp_path / "credo_brier.yaml"
    path.write_text(text)
    return path


def test_the_example_rewards_by_hand(brier):
    assert brier.reads == "model" and brier.help.startswith("Brier:")
    g = methods.GroupOutcomes(
        correct=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        fmt=torch.ones(4),
        conf=torch.tensor([0.9, 0.2, float("nan"), 0.5]),
        target=torch.zeros(4),
        group_size=4,
    )
    rewards = brier.rewards(g, {})
    assert rewards.answer.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert rewards.confidence.tolist() == pytest.approx([-0.01, -0.04, -1.0, -0.25])


def test_the_example_config_is_a_credo_run_with_the_new_rewards(brier_config):
    cfg = config.load_config(str(brier_config))
    assert cfg.method == "brier" and cfg.channel == "readout"
    # the same confidence plan as CREDO's: derived from `reads`, nothing else was edited
    assert config.confidence_plan(cfg) == config.confidence_plan(config.load_config("credo"))
    with pytest.raises(ValueError, match="method=brier needs a confidence with logits"):
        config.load_config(str(brier_config), ["channel=verbalized"])
    with pytest.raises(ValueError, match=r"method='nope' is not supported; choose one of \(.*'brier'"):
        config.load_config(str(brier_config), ["method=nope"])


def test_the_example_trains_one_tiny_step(tiny_dir, brier_config, tmp_path):
    """One real step of the loop (HF engine, the verifier, the forward, credit, the update) with
    the page's method: every rollout's rewards are the example's, from its own a and c."""
    keys = {key: value for key, value in yaml.safe_load(brier_config.read_text()).items() if key != "inherit"}
    overrides = [f"{key}={value}" for key, value in keys.items()]
    cfg = config.load_config(
        "tiny", [*overrides, "max_steps=1", "engine=hf", f"out_dir={tmp_path / 'runs'}", "save_rollouts=true"]
    )
    run_dir = credo.train(cfg)
    (metrics,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics["step"] == 0 and metrics["loss"] == metrics["loss"]  # one step, a finite loss
    rows = [json.loads(line) for line in (run_dir / "rollouts" / "step_000000.jsonl").read_text().splitlines()]
    assert len(rows) == cfg.per_device_batch_size * cfg.grad_accum
    for row in rows:
        assert row["r_ans"] == row["a"]
        expected = -1.0 if row["c"] is None else -((row["c"] - row["a"]) ** 2)
        assert row["r_conf"] == pytest.approx(expected, abs=1e-6)
