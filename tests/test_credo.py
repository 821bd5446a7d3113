"""The training loop (credo.py): the question stream, credit and its routing per method,
train_step on hand-built groups (one real step per config and per arm of tab:decompose
and tab:sw_baseline), outcomes, and end-to-end runs with resume."""

import copy
import dataclasses
import json
import math

import pytest
import torch
from numerics import assert_same_gradient
from step_cases import (
    PROMPT_2_PLUS_2,
    A,
    GradientRecorder,
    Q,
    copy_policy,
    fake_rollout,
    group_of_four,
    method_rollouts,
    method_step,
    outcomes_of,
    random_qwen3,
    standardized,
    tiny_policy,
)

import confidence
import config
import credo
import engine as eng
import losses
import methods
import policy as pol
import problems
import rollout as ro
import verifier
from confidence import READS
from infra import parallel, runlog
from rollout import Rollout, Segments

# --- the command line ------------------------------------------------------------------------


def test_dry_run_prints_the_resolved_config(capsys):
    credo.main(["tiny", "seed=44", "--dry-run"])
    out = capsys.readouterr().out
    assert "seed: 44" in out and "config_name: tiny" in out
    assert out.rstrip().endswith("# run directory: runs/tiny-s44")


# --- data ---------------------------------------------------------------------------------------


def test_question_stream_is_a_deterministic_sequence_of_epochs():
    stream = problems.QuestionStream(n=5, seed=1)
    first = stream.take(3) + stream.take(4)
    assert sorted(first[:5]) == [0, 1, 2, 3, 4]  # epoch 0 is a permutation
    resumed = problems.QuestionStream(n=5, seed=1, cursor=3)
    assert resumed.take(4) == first[3:]  # the cursor is the whole state


# --- credit and its routing -------------------------------------------------------------------


def read(conf, valid):
    """The detached confidences credit reads when the rewards and eq:sw's weights read the same c."""
    c = torch.where(valid, conf, float("nan"))
    return methods.Confidences(rewards=c, weights=c)


def test_answer_and_analysis_tokens_get_their_advantages():
    """A hand-built group: answer tokens get w * A_ans, analysis tokens A_conf, the slot nothing."""
    cfg = config.load_config("tiny", ["group_size=2", "adv_std=population"])  # +-1 for a group of two
    rollouts = [fake_rollout(2, 4, 2, 4, 4), fake_rollout(2, 4, 1, 4, 4)]
    batch = pol.collate(rollouts, pad_id=0)
    correct, fmt, valid = torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0]), torch.tensor([True, True])
    conf = torch.tensor([0.6, 0.4])
    got = methods.credit(correct, fmt, read(conf, valid), cfg, kappa=0.5)
    # t = [.75, .25]; r_ans = [1.5, .5] -> A_ans = [1, -1]
    # r_conf = 1 - (t - c)^2 = [1 - .0225, 1 - .0225] -> equal -> A_conf = [0, 0]
    # s = |a - c| = [.4, .4] -> w = [1, 1]
    torch.testing.assert_close(got.adv_ans, torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(got.adv_conf, torch.tensor([0.0, 0.0]))
    conf = torch.tensor([0.9, 0.7])  # now r_conf = [1 - .0225, 1 - .2025] and s = [.1, .7]
    got = methods.credit(correct, fmt, read(conf, valid), cfg, kappa=0.5)
    torch.testing.assert_close(got.adv_conf, torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(got.w, torch.tensor([0.85, 1.15]))
    adv_tok = losses.token_advantages(got.adv_ans, got.adv_conf, got.w, batch.ans_mask, batch.conf_mask)
    # columns: 0 = prompt->c0 ... row 0: answer c0,c1 (cols 1,2), analysis c2,c3 (cols 3,4)
    torch.testing.assert_close(adv_tok, torch.tensor([[0.0, 0.85, 0.85, 1.0, 1.0], [0.0, -1.15, -1.0, -1.0, -1.0]]))


def test_the_fused_adamw_takes_the_same_steps_and_reads_the_same_checkpoint():
    """make_optimizer: tab:hyper's AdamW, fused where adam_fused says (auto: CUDA only); the
    fused kernel and torch's default agree to float rounding over several steps (with weight
    decay, so every term of the update is used), and a state saved by one resumes in the other."""
    cfg = config.load_config("credo", ["lr=1e-2", "weight_decay=0.1"])
    torch.manual_seed(0)
    models = [torch.nn.Linear(16, 8) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    default = credo.make_optimizer(models[0], cfg, "cpu")  # auto on a CPU: not fused
    fused = credo.make_optimizer(models[1], dataclasses.replace(cfg, adam_fused=True), "cpu")
    assert not default.defaults["fused"] and fused.defaults["fused"]
    assert (
        default.defaults["lr"],
        default.defaults["betas"],
        default.defaults["eps"],
        default.defaults["weight_decay"],
    ) == (1e-2, (0.9, 0.999), 1e-8, 0.1)
    assert config.fuses_adam(cfg, "cuda") and not config.fuses_adam(dataclasses.replace(cfg, adam_fused=False), "cuda")

    def steps(count: int) -> None:
        for _ in range(count):
            grads = [torch.randn_like(p) for p in models[0].parameters()]
            for model, optimizer in zip(models, (default, fused)):
                for p, g in zip(model.parameters(), grads):
                    p.grad = g.clone()
                optimizer.step()

    steps(3)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-6)  # 3 steps of lr 1e-2: differences ~1e-8
    resumed = credo.make_optimizer(models[1], dataclasses.replace(cfg, adam_fused=True), "cpu")
    resumed.load_state_dict(copy.deepcopy(default.state_dict()))  # a default run's checkpoint, fused
    models[1].load_state_dict(models[0].state_dict())
    fused = resumed
    steps(2)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="adam_fused='sometimes' is not supported"):
        config.load_config("credo", ["adam_fused=sometimes"])


def test_micro_batches_that_split_groups_give_the_same_update(tiny_dir):
    """One micro-batch or a group split over several: credit is computed for the whole batch
    before the update, so the gradients and the losses are the same."""
    policy = tiny_policy(tiny_dir)
    tok = policy.tokenizer
    rollouts = group_of_four(tok)
    batch = pol.collate(rollouts, tok.pad_token_id)
    out = outcomes_of(rollouts, [1.0, 0.0, 1.0, 0.0])
    assert out.valid.tolist() == [True, True, True, False]

    grads, stats = [], []
    cfg = config.load_config("tiny", ["group_size=4", "per_device_batch_size=4", "grad_accum=1"])
    longest = int(batch.attention_mask.sum(dim=1).max())
    for budget in (cfg.micro_batch_tokens, longest):  # auto (4 full-length rollouts): one micro-batch; split
        cfg = dataclasses.replace(cfg, micro_batch_tokens=budget)
        copied = copy_policy(policy)
        recorder = GradientRecorder(copied.model.named_parameters())
        stats.append(credo.train_step(credo.Learner(copied, recorder, cfg), credo.make_step(cfg, 100, batch, out)))
        grads.append(recorder.grads)
    assert stats[0].micro_batches == 1 and stats[1].micro_batches > 1
    assert stats[0].readout_pass_rows == stats[1].readout_pass_rows == 4  # every c from the no-grad pass
    for name in grads[0]:
        assert_same_gradient(grads[1][name], grads[0][name], name)
    for term in ("pg", "cal"):
        assert stats[0].terms[term] == pytest.approx(stats[1].terms[term], abs=1e-6)
    assert stats[0].terms["cal"] > 0


def kl_step(policy, reference, cfg, batch, out):
    """One update with a reference model; (stats, gradients)."""
    recorder = GradientRecorder(policy.model.named_parameters())
    learner = credo.Learner(policy, recorder, cfg, reference=reference)
    return credo.train_step(learner, credo.make_step(cfg, 100, batch, out)), recorder.grads


def test_the_kl_term_against_a_frozen_reference_by_hand(tiny_dir):
    """kl_coef > 0 adds kl_coef x k3(pi || pi_ref). At the first step the reference is the policy:
    k3 and its gradient are 0 (d/dlogp of e^r - r - 1 is 1 - e^r, 0 at r = 0), so the update is the
    one without the term. Against another reference, loss_kl is k3 computed by hand from the two
    models' own log-probs, and the gradient changes by exactly kl_coef x its gradient."""
    policy = tiny_policy(tiny_dir)
    tok = policy.tokenizer
    rollouts = group_of_four(tok)
    batch = pol.collate(rollouts, tok.pad_token_id)
    out = outcomes_of(rollouts, [1.0, 0.0, 1.0, 0.0])
    base = config.load_config("tiny", ["group_size=4", "per_device_batch_size=4", "grad_accum=1", "max_grad_norm=null"])
    with_kl = dataclasses.replace(base, kl_coef=0.5)  # no clipping: the gradients add
    assert methods.needs_reference(with_kl) and not methods.needs_reference(base)

    plain, plain_grads = kl_step(copy_policy(policy), None, base, batch, out)
    assert plain.terms["kl"] is None and "kl" not in plain.coefs  # kl_coef 0: never computed
    same, same_grads = kl_step(copy_policy(policy), copy_policy(policy), with_kl, batch, out)
    assert same.terms["kl"] == 0.0 and same.coefs["kl"] == 0.5
    for name in plain_grads:
        assert_same_gradient(same_grads[name], plain_grads[name], name)

    reference = copy_policy(policy)
    with torch.no_grad():
        for param in reference.model.parameters():
            param.add_(0.02 * torch.randn(param.shape, generator=torch.Generator().manual_seed(0)))
    moved, moved_grads = kl_step(copy_policy(policy), reference, with_kl, batch, out)
    with torch.no_grad():
        logp, ref_logp = (pol.forward(p, batch).logp for p in (policy, reference))  # [N, L-1]
    mask = batch.completion_mask
    r = (ref_logp - logp)[mask]
    per_token = torch.zeros_like(logp)
    per_token[mask] = torch.exp(r) - r - 1
    by_hand = float((per_token.sum(dim=1) / mask.sum(dim=1)).mean())
    assert moved.terms["kl"] == pytest.approx(by_hand, rel=1e-5) and by_hand > 1e-4
    assert moved.terms["pg"] == pytest.approx(plain.terms["pg"], abs=1e-6)
    kl_only = copy_policy(policy)
    logp = pol.forward(kl_only, batch).logp
    term = losses.kl_k3(logp, ref_logp, mask, mask.sum(dim=1).float())
    term.backward()
    for name, param in kl_only.model.named_parameters():
        if param.grad is not None:
            assert_same_gradient(moved_grads[name], plain_grads[name] + 0.5 * param.grad, name)


def test_the_reference_model_is_frozen_in_the_compute_dtype(tiny_dir):
    """credo.load_reference: the run's starting model (never a checkpoint), weights in the
    policy's compute dtype, nothing requires a gradient; eval mode."""
    cfg = config.load_config("tiny", [f"model={tiny_dir / 'model'}", "kl_coef=0.01"])
    policy = tiny_policy(tiny_dir, dtype=torch.bfloat16)
    reference = credo.load_reference(cfg, parallel.single_process(), policy)
    params = list(reference.model.parameters())
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in params)
    assert not reference.model.training and (reference.high_id, reference.low_id) == (policy.high_id, policy.low_id)


def test_a_masked_truncated_rollout_gets_no_policy_gradient_term(tiny_dir):
    """truncated_completions=mask: a rollout that hit the budget keeps its place in its group's
    statistics and in N, and its per-sequence term of J is 0 (TRL's mask_truncated_completions)."""
    policy = tiny_policy(tiny_dir)
    tok = policy.tokenizer
    rollouts = group_of_four(tok, "2 + 2 is 2 + 2 is 2 + 2", "length")  # cut by the budget: no answer, no slot
    batch = pol.collate(rollouts, tok.pad_token_id)
    out = outcomes_of(rollouts, [1.0, 0.0, 1.0, 0.0])
    assert out.truncated.tolist() == [False, False, False, True]
    stats = {}
    for how in ("train", "mask"):
        cfg = config.load_config("tiny", ["group_size=4", "per_device_batch_size=4", "grad_accum=1"])
        cfg = dataclasses.replace(cfg, truncated_completions=how)
        copied = copy_policy(policy)
        learner = credo.Learner(copied, GradientRecorder(copied.model.named_parameters()), cfg)
        stats[how] = credo.train_step(learner, credo.make_step(cfg, 100, batch, out))
    trained, masked = stats["train"].credit, stats["mask"].credit
    assert masked.adv_ans[3] == masked.adv_conf[3] == 0.0 and trained.adv_ans[3] < 0
    assert masked.adv_ans[:3].tolist() == trained.adv_ans[:3].tolist()  # the group's statistics still count it
    # rho = 1: row 3's term of J is the mean of its token advantages, w A^ans over its answer tokens (w = 1: no
    # readout); J is a mean over N = 4 rows, and -J is the loss
    assert stats["mask"].terms["pg"] == pytest.approx(
        stats["train"].terms["pg"] + float(trained.adv_ans[3]) / 4, abs=1e-6
    )


def test_warmup_shapes_of_alpha_and_kappa():
    """tab:hyper's 30 steps: linear from 1/30 (this project) or from 0 (transformers', verl's lr shape)."""
    alpha = 0.03
    assert [credo.warmup(alpha, s, 30, "linear") for s in (0, 14, 29, 30)] == pytest.approx([0.001, 0.015, 0.03, 0.03])
    assert [credo.warmup(alpha, s, 30, "linear_from_zero") for s in (0, 15, 29, 30)] == pytest.approx(
        [0.0, 0.015, 0.029, 0.03]
    )
    assert credo.warmup(alpha, 0, 0, "linear_from_zero") == alpha  # W = 0: no warm-up
    with pytest.raises(ValueError, match="unknown warm-up shape 'cosine'; expected linear or linear_from_zero"):
        credo.warmup(alpha, 0, 30, "cosine")


def test_gradient_clipping_at_max_grad_norm():
    """max_grad_norm (1.0, as TRL, verl and both baselines' codes clip): the norm before clipping is
    returned and logged, the gradient is scaled to the bound; null leaves it."""

    class Layer(torch.nn.Linear):  # a one-process model: its decoder is itself (no FSDP root to release)
        def get_decoder(self):
            return self

    for max_norm, want in ((1.0, [[0.6, 0.8]]), (None, [[3.0, 4.0]]), (10.0, [[3.0, 4.0]])):
        layer = Layer(2, 1, bias=False)
        layer.weight.grad = torch.tensor([[3.0, 4.0]])
        assert parallel.clip_gradients(layer, max_norm) == pytest.approx(5.0)
        torch.testing.assert_close(layer.weight.grad, torch.tensor(want))


def test_the_rollout_records_carry_the_target_and_both_rewards(tmp_path):
    """rollouts/step_*.jsonl: t, r_ans, r_conf, w and both advantages of every rollout, so that a
    change of target, reward or standardisation shows in a run's outputs."""
    rollouts = [fake_rollout(2, 4, 2, 4, 4), fake_rollout(2, 4, 2, 4, None)]
    credit = methods.Credit(
        target=torch.tensor([0.75, 0.25]),
        r_ans=torch.tensor([1.5, 0.0]),
        r_conf=torch.tensor([0.9375, 0.0]),
        w=torch.tensor([1.125, 1.0]),
        adv_ans=torch.tensor([0.5, -0.5]),
        adv_conf=torch.tensor([0.25, -0.25]),
    )
    stats = runlog.StepStats(
        terms={"pg": 0.0, "cal": None},
        coefs={"pg": 1.0},
        alpha=0.0,
        kappa=0.0,
        grad_norm=0.0,
        pad_fraction=0.0,
        micro_batches=1,
        readout_pass_rows=2,
        credit=credit,
        conf=torch.tensor([0.5, float("nan")]),
        conf_valid=torch.tensor([True, False]),
        completion_logp=[None, None],
        conf_engine=torch.tensor([0.5, float("nan")]),
        conf_trainer=torch.tensor([0.5 + 2**-20, float("nan")]),  # exact in fp32
    )
    path = tmp_path / "step_000000.jsonl"
    verdicts = [verifier.Verdict(passed=True, reason="correct"), verifier.Verdict(passed=False, reason="timeout")]
    runlog.write_rollouts(path, rollouts, torch.tensor([1.0, 0.0]), verdicts, stats)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    keys = ("a", "verdict", "c", "t", "r_ans", "r_conf", "w", "adv_ans", "adv_conf", "c_engine")
    assert [tuple(row[k] for k in keys) for row in rows] == [
        (1.0, "correct", 0.5, 0.75, 1.5, 0.9375, 1.125, 0.5, 0.25, 0.5),
        (0.0, "timeout", None, 0.25, 0.0, 0.0, 1.0, -0.5, -0.25, None),
    ]
    assert rows[0]["c_trainer"] == 0.5 + 2**-20 and rows[1]["c_trainer"] is None
    gap = runlog.engine_conf_gap(stats)  # over the rows with both: the first
    assert gap == {"engine_conf_gap": 2**-20, "engine_conf_gap_max": 2**-20}


# --- end to end: the real engine, verifier and loop -------------------------------------------


def run_tiny(warm, out_dir, *overrides):
    """`python credo.py tiny out_dir=... *overrides`, forked from the warm launcher (tests/warm.py)."""
    result = warm.run(["credo.py", "tiny", f"out_dir={out_dir}", *overrides])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_one_step_with_the_hf_engine_reading_c_either_way(warm, tmp_path, tiny_dir):
    """One step with each credit_confidence: the engine's read (the default) takes no trainer pass
    and records both c, which agree to fp32 noise; the trainer's reads all 8 rows in its pass. The
    HF engine samples the same rollouts both times (the same seeds and weights)."""
    run_tiny(warm, tmp_path, "max_steps=1", "engine=hf", "run_name=hf")
    run_tiny(warm, tmp_path, "max_steps=1", "engine=hf", "run_name=hf_trainer", "credit_confidence=trainer")
    (metrics,), (trainer,) = read_metrics(tmp_path / "hf"), read_metrics(tmp_path / "hf_trainer")
    # float noise of two implementations holding the same weights (~4e-7 here; an engine one push behind
    # gives ~8e-3: tests/test_longrun.py's SYNCED_GAP)
    assert metrics["engine_logprob_gap"] < 1e-3 and metrics["t_rollout"] > 0
    # 8 rollouts of >= 241 tokens: they do not all fit the 4 x 386 budget
    assert metrics["micro_batches"] == trainer["micro_batches"] == 2
    assert metrics["readout_pass_rows"] == 0 and trainer["readout_pass_rows"] == 8
    assert metrics["engine_conf_gap_max"] < 1e-5 and trainer["engine_conf_gap_max"] is None
    by_engine, by_trainer = (
        [json.loads(line) for line in (tmp_path / name / "rollouts" / "step_000000.jsonl").read_text().splitlines()]
        for name in ("hf", "hf_trainer")
    )
    assert [r["text"] for r in by_engine] == [r["text"] for r in by_trainer]
    for e, t in zip(by_engine, by_trainer):
        assert (e["c_engine"] is None) == (e["c_trainer"] is None) == (t["c"] is None)
        if t["c"] is not None:
            assert abs(e["c_engine"] - t["c"]) < 1e-5 and abs(e["c_engine"] - e["c_trainer"]) < 1e-5
            assert e["c"] == e["c_engine"] and t["c_trainer"] == t["c"] and t["c_engine"] is None
    assert (tmp_path / "hf" / "ckpt" / "step_000001" / "model.safetensors").exists()


@pytest.mark.slow
def test_one_step_of_a_verbalized_baseline_with_the_engine(warm, tmp_path, tiny_dir):
    run_tiny(warm, tmp_path, "max_steps=1", "method=rlcr", "channel=verbalized", "alpha=0", "kappa=0", "run_name=rlcr")
    (metrics,) = read_metrics(tmp_path / "rlcr")
    assert metrics["readout_rate"] == 0 and metrics["loss_cal"] is None and 0 <= metrics["report_rate"] <= 1
    rows = [
        json.loads(line) for line in (tmp_path / "rlcr" / "rollouts" / "step_000000.jsonl").read_text().splitlines()
    ]
    # RLCR's reward: a - (q - a)^2, with a missing report scored as the worst Brier term
    for row in rows:
        q = row["c"]
        assert row["r_ans"] == pytest.approx(row["a"] - ((q - row["a"]) ** 2 if q is not None else 1.0), abs=1e-6)


# --- methods: each routes its advantages as it defines ---------------------------------------


def expected_routing(name):
    """(A_ans, A_conf, w) worked out by hand for the group a = A, q = Q, lambda = 0.5."""
    if name == "grpo":
        adv = standardized(A)
        return adv, adv, [1.0, 1.0, 1.0]
    if name in ("rlcr", "rlcr_sw"):
        adv = standardized([1 - 0.01, 0 - 0.04, 0 - 1.0])  # a - (q - a)^2, worst term when missing
        # s = |a - q| = [.1, .2] over the valid reports, mean .15; w = 1 + .25 (s - .15)
        w = [1.0, 1.0, 1.0] if name == "rlcr" else [0.9875, 1.0125, 1.0]
        return adv, adv, w
    if name == "dcpo":
        r_ig = [0.5 / 3 + 0.5 * a for a in A]  # lam * mean(a) + (1 - lam) a
        return standardized(A), standardized([-abs(0.9 - r_ig[0]), -abs(0.2 - r_ig[1]), -1.0]), [1.0, 1.0, 1.0]
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["grpo", "rlcr", "dcpo", "rlcr_sw"])
def test_baselines_route_their_advantages(name):
    cfg = config.load_config(name, ["group_size=3", "per_device_batch_size=3", "grad_accum=1"])
    q = torch.tensor(Q)
    got = methods.credit(torch.tensor(A), torch.ones(3), read(q, ~torch.isnan(q)), cfg, kappa=cfg.kappa)
    adv_ans, adv_conf, w = expected_routing(name)
    torch.testing.assert_close(got.adv_ans, torch.tensor(adv_ans))
    torch.testing.assert_close(got.adv_conf, torch.tensor(adv_conf))
    torch.testing.assert_close(got.w, torch.tensor(w))
    # answer tokens (columns 1-2) get w * A_ans, analysis tokens (3-4) A_conf
    batch = pol.collate([fake_rollout(2, 4, 2, 4, None)] * 3, pad_id=0)
    adv_tok = losses.token_advantages(got.adv_ans, got.adv_conf, got.w, batch.ans_mask, batch.conf_mask)
    for i in range(3):
        expected_row = [0.0, w[i] * adv_ans[i], w[i] * adv_ans[i], adv_conf[i], adv_conf[i]]
        torch.testing.assert_close(adv_tok[i], torch.tensor(expected_row))


def test_ablation_without_confidence_advantage_zeroes_the_analysis():
    cfg = config.load_config("credo_noconfadv", ["group_size=3", "per_device_batch_size=3", "grad_accum=1"])
    conf, valid = torch.tensor([0.9, 0.2, 0.5]), torch.tensor([True, True, True])
    got = methods.credit(torch.tensor(A), torch.ones(3), read(conf, valid), cfg, kappa=0.25)
    full = methods.credit(
        torch.tensor(A), torch.ones(3), read(conf, valid), dataclasses.replace(cfg, conf_advantage=True), kappa=0.25
    )
    assert torch.equal(got.adv_conf, torch.zeros(3)) and full.adv_conf.abs().sum() > 0
    torch.testing.assert_close(got.adv_ans, full.adv_ans)


METHOD_CONFIGS = [name for name in config.config_names() if name not in ("base", "math", "code", "tiny", "toy")]


@pytest.mark.parametrize("name", METHOD_CONFIGS)
def test_one_real_training_step_per_method(name, tiny_dir):
    _, cfg, rollouts, batch, out, grads, stats = method_step(name, tiny_dir)
    reported = out.reported
    if cfg.channel == "verbalized" and cfg.method != "credo":
        assert reported[:2].tolist() == pytest.approx([0.9, 0.2]) and torch.isnan(reported[2])
    # At the first step the ratio is 1, so eq:grpo's value is -mean(A): exactly 0 in exact arithmetic
    # wherever one advantage covers every token (GRPO, RLCR), float noise otherwise. The gradient is not.
    assert math.isfinite(stats.terms["pg"]) and stats.grad_norm > 0
    assert all(torch.isfinite(g).all() for g in grads.values())
    has_c = any(r.segments.slot is not None for r in rollouts)
    if cfg.alpha == 0:  # a term at coefficient 0 is left out of the step: never computed, logged as null
        assert stats.terms["cal"] is None and "cal" not in stats.coefs
    else:
        assert (stats.terms["cal"] > 0) == has_c  # L_cal (or the head's BCE) only where the model's c exists


# --- tab:decompose and tab:sw_baseline: what each arm changes, on the hand-built group ---------


def test_sampled_slot_token_is_scored_by_the_reward(tiny_dir):
    """Readout + reward only: q = 1 for <CONF_HIGH>, 0 for <CONF_LOW>; r_conf = F (1 - (t - q)^2)
    with t = 0.5 a + 0.5 mean(a) = [2/3, 1/6, 1/6]; the slot token joins the analysis advantage."""
    policy, cfg, rollouts, batch, out, _, stats = method_step("credo_sampled", tiny_dir)
    tok, reported = policy.tokenizer, out.reported
    assert reported[:2].tolist() == [1.0, 0.0] and torch.isnan(reported[2])
    assert stats.credit.r_conf.tolist() == pytest.approx([1 - (2 / 3 - 1) ** 2, 1 - (1 / 6) ** 2, 0.0])
    assert stats.alpha == 0.0
    for i in range(2):  # the slot column (predicting the sampled token) is in the confidence segment
        slot_col = int(batch.slot_pos[i])
        assert (
            batch.conf_mask[i, slot_col] and batch.conf_mask[i, slot_col - 1] and not batch.conf_mask[i, slot_col + 1]
        )
    plain = pol.collate(rollouts, tok.pad_token_id)
    assert not plain.conf_mask[0, int(plain.slot_pos[0])]  # without conf_train=sampled the slot gets no credit
    adv_conf = standardized([1 - (2 / 3 - 1) ** 2, 1 - (1 / 6) ** 2, 0.0])
    assert stats.credit.adv_conf.tolist() == pytest.approx(adv_conf, abs=1e-6)
    adv_tok = losses.token_advantages(
        stats.credit.adv_ans, stats.credit.adv_conf, stats.credit.w, batch.ans_mask, batch.conf_mask
    )
    for i in range(2):  # the sampled <CONF_HIGH>/<CONF_LOW> token is trained with the analysis advantage
        assert float(adv_tok[i, int(batch.slot_pos[i])]) == pytest.approx(adv_conf[i], abs=1e-6)


def test_digit_expectation_emission_regresses_eq_digitexp(tiny_dir):
    """The verbalized prompt stops at <confidence>; "0." is teacher-forced after it; c is eq:digitexp
    from the same forward (checked against full logits), and L_cal's gradient reaches the trunk."""
    policy, cfg, rollouts, batch, _, grads, stats = method_step("credo_digitexp", tiny_dir)
    model, tok = policy.model, policy.tokenizer
    assert eng.stop_strings(confidence.plan(cfg)) == [ro.CONF_OPEN] and confidence.plan(cfg).segments == "readout"
    digits, dot = [tok.convert_tokens_to_ids(str(d)) for d in range(10)], tok.convert_tokens_to_ids(".")
    for i, r in enumerate(rollouts[:2]):
        seq = r.prompt_ids + r.completion_ids + [digits[0], dot]
        assert batch.input_ids[i, : len(seq)].tolist() == seq
        assert not batch.completion_mask[i, len(seq) - 3 :].any()  # the teacher-forced "0." is not trained on
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0]  # [L, V]
        p_int = torch.softmax(logits[len(seq) - 3, [digits[0], digits[1]]], -1)
        q_dec = torch.softmax(logits[len(seq) - 1, digits], -1)
        expected = float(p_int[1] + p_int[0] * (q_dec * torch.arange(10)).sum() / 10)
        assert float(stats.conf[i]) == pytest.approx(expected, abs=1e-5)
    target = losses.hybrid_target(torch.tensor(A), 0.5, 3)
    assert stats.terms["cal"] == pytest.approx(float(((stats.conf[:2] - target[:2]) ** 2).mean()), abs=1e-6)
    assert grads["model.layers.0.mlp.up_proj.weight"].abs().sum() > 0


def test_auxiliary_head_trains_only_the_reserved_output_rows(tiny_dir):
    """GRPO + auxiliary head: with every rollout correct the GRPO advantages are 0, so the only
    gradient is the head's BCE on the detached trunk: the output rows of H and L, nothing else."""
    policy, cfg, _, _, _, grads, stats = method_step("grpo_head", tiny_dir, correct=[1.0, 1.0, 1.0])
    high, low = (policy.tokenizer.convert_tokens_to_ids(t) for t in pol.RESERVED_TOKENS)
    head = grads.pop("lm_head.weight")
    assert head[[high, low]].abs().sum() > 0
    head[[high, low]] = 0
    assert head.abs().sum() == 0 and all(g.abs().sum() == 0 for g in grads.values())
    c = stats.conf[:2]
    assert stats.terms["cal"] == pytest.approx(float(-torch.log(c).mean()), abs=1e-5)  # BCE against a = 1


def test_baseline_weights_from_the_digit_expectation(tiny_dir):
    """tab:sw_baseline: rewards still read the parsed numeral; eq:sw's weights read eq:digitexp."""
    policy, cfg, rollouts, _, out, _, stats = method_step("rlcr_swd", tiny_dir)
    reported = out.reported
    weight_conf = pol.slot_confidences(policy, rollouts, READS["digit_exp"], cfg.micro_batch_tokens, cfg.pack_sequences)
    assert torch.isfinite(weight_conf[:2]).all() and torch.isnan(weight_conf[2])  # the third has no <confidence>
    correct = torch.tensor(A)
    assert stats.credit.r_ans.tolist() == pytest.approx(losses.rlcr_reward(correct, reported).tolist())
    w = losses.discrepancy_weights(correct, weight_conf, ~torch.isnan(weight_conf), stats.kappa, 3)
    assert stats.credit.w.tolist() == pytest.approx(w.tolist())
    parsed = losses.discrepancy_weights(correct, reported, ~torch.isnan(reported), stats.kappa, 3)
    assert stats.credit.w.tolist() != pytest.approx(parsed.tolist())
    # the trainer's pass reads the rollouts: a step built without them says so
    learner = credo.Learner(policy, torch.optim.SGD(policy.model.parameters(), lr=0.0), cfg)
    batch = pol.training_batch(rollouts, policy.tokenizer, learner.plan)
    with pytest.raises(ValueError, match=r"reads the rollouts: credo.make_step\(rollouts=\)"):
        credo.train_step(learner, credo.make_step(cfg, 100, batch, out))


def test_the_engine_reads_a_baselines_weights_as_the_trainers_pass_does(tiny_dir):
    """credit_confidence=engine for tab:sw_baseline: the engine reads eq:digitexp at the slot of each
    verbalized rollout cut right after its tag ("pass"), and gives the trainer's pass's c to 1e-5."""
    policy = tiny_policy(tiny_dir)
    cfg = config.load_config("rlcr_swd", ["group_size=3", "per_device_batch_size=3", "grad_accum=1"])
    plan = confidence.plan(cfg)
    rollouts = method_rollouts(cfg, policy.tokenizer)
    reads = credo.engine_confidences(eng.HFEngine(policy.model, policy.tokenizer, cfg, plan), rollouts, plan, policy)
    assert plan.model_reads == ["pass"] and set(reads) == {"pass"}
    want = pol.slot_confidences(policy, rollouts, plan.read, cfg.micro_batch_tokens, cfg.pack_sequences)
    assert torch.isfinite(want[:2]).all() and torch.isnan(want[2])  # the third has no <confidence>
    torch.testing.assert_close(reads["pass"], want, atol=1e-5, rtol=0, equal_nan=True)


# --- the code domain: rows, the sandboxed reward, and a real step -------------------------------

DOUBLE_TESTS = {"kind": "stdio", "inputs": ["3\n", "10\n"], "outputs": ["6\n", "20\n"]}


def test_code_rewards_come_from_the_sandbox(tiny_tokenizer):
    cfg = config.load_config("code", ["group_size=2", "per_device_batch_size=2", "grad_accum=1", "verify_workers=2"])
    answers = ["```python\nprint(2 * int(input()))\n```", "```python\nprint(int(input()) + 2)\n```"]
    rollouts = [
        Rollout(
            "c1",
            [1],
            [2],
            text + " <analysis> ok </analysis> <confidence>",
            "stop",
            Segments(
                answer_end=1,
                analysis_start=1,
                analysis_end=1,
                slot=None,
                conf_text=None,
                fmt=False,
                has_answer=True,
                has_analysis=True,
            ),
        )
        for text in answers
    ]
    out = credo.outcomes(
        rollouts,
        [{"id": "c1", "problem": "Double n.", "tests": DOUBLE_TESTS}],
        cfg,
        confidence.plan(cfg),
        tiny_tokenizer,
    )
    assert out.correct.tolist() == [1.0, 0.0]  # n + 2 passes the first test (n = 2 is not in it) but not 10 -> 12
    # F_i and the slot come from the segments (no slot here); CREDO's rewards read c, no report
    assert out.fmt.tolist() == [0.0, 0.0] and out.valid.tolist() == [False, False] and out.reported is None


@pytest.mark.slow
def test_one_step_in_the_code_domain(warm, tmp_path, tiny_dir):
    data = tmp_path / "code_train.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"c{i}",
                    "problem": f"Print {i} times the input.",
                    "tests": {"kind": "stdio", "inputs": ["2\n"], "outputs": [f"{2 * i}\n"]},
                }
            )
            + "\n"
            for i in range(4)
        )
    )
    run_tiny(warm, tmp_path, "max_steps=1", "domain=code", f"train_data={data}", "run_name=code")
    cfg = config.load_config(str(tmp_path / "code" / "config.yaml"))
    assert (cfg.domain, cfg.kappa) == ("code", 0.5)  # kappa from the code profile (tab:hyper)
    (metrics,) = read_metrics(tmp_path / "code")
    assert metrics["acc"] == 0.0 and metrics["t_verify"] > 0  # the tiny model writes no programs: all fail, none crash
    rows = [
        json.loads(line) for line in (tmp_path / "code" / "rollouts" / "step_000000.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 8 and all(row["a"] == 0.0 for row in rows)


def code_rollouts(tok, plan, question_ids: list[str], programs: list[str]) -> list[Rollout]:
    """Readout rollouts answering with each program (question_ids[i] its question), parsed as the
    loop parses them."""
    prompt = tok.encode(PROMPT_2_PLUS_2, add_special_tokens=False)
    rollouts = []
    for question_id, program in zip(question_ids, programs):
        text = f"```python\n{program}\n```\n<analysis> ok </analysis> <confidence>"
        ids = tok.encode(text, add_special_tokens=False)
        segments = ro.parse_segments(tok, ids, plan.segments, ro.ANSWER_MARKERS["code"])
        rollouts.append(Rollout(question_id, prompt, ids, text, "stop", segments))
    return rollouts


MALFORMED_TESTS = {"kind": "stdio", "inputs": ["3\n", "10\n"], "outputs": ["6\n"]}  # two inputs, one output


def test_a_rollout_the_grader_fails_on_costs_only_itself(tiny_dir, tmp_path, capsys):
    """One code step through the loop's own helpers (outcomes graded in the sandbox, the tiny
    model's update, the run log): programs printing numerals whose exponent no Decimal holds
    (the judge raised InvalidOperation, and the step with it, before) are wrong; a question
    whose tests are malformed costs its own rollouts only: a = 0, the reason in
    rollouts/step_*.jsonl, counted in metrics.jsonl and said on stderr; the step goes on."""
    policy = tiny_policy(tiny_dir)
    cfg = config.load_config(
        "tiny", ["domain=code", "group_size=3", "per_device_batch_size=6", "grad_accum=1", "verify_workers=2"]
    )
    plan = confidence.plan(cfg)
    questions = [
        {"id": "double", "problem": "Double n.", "tests": DOUBLE_TESTS},
        {"id": "broken", "problem": "Double n.", "tests": MALFORMED_TESTS},
    ]
    programs = ["print(2 * int(input()))", "print('1e-99999999999999999999')", "print('2469134e99999999999999999999')"]
    rollouts = code_rollouts(policy.tokenizer, plan, ["double"] * 3 + ["broken"] * 3, programs * 2)
    out = credo.outcomes(rollouts, questions, cfg, plan, policy.tokenizer)
    broken = "error: ValueError: 2 inputs but 1 outputs"
    assert out.correct.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert [verdict.reason for verdict in out.verdicts] == ["correct", "wrong", "wrong", broken, broken, broken]

    batch = pol.training_batch(rollouts, policy.tokenizer, plan)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr)
    stats = credo.train_step(credo.Learner(policy, optimizer, cfg, plan), credo.make_step(cfg, 0, batch, out, rollouts))
    with runlog.RunLog(tmp_path, parallel.single_process(), cfg) as log:
        timings = {"rollout": 1.0, "verify": 1.0, "train": 1.0}
        log.step(0, ["double", "broken"], rollouts, out, stats, None, timings, float(batch.attention_mask.sum()))
    (metrics,) = read_metrics(tmp_path)
    assert metrics["grading_errors"] == 3 and metrics["acc"] == pytest.approx(1 / 6)
    rows = [json.loads(line) for line in (tmp_path / "rollouts" / "step_000000.jsonl").read_text().splitlines()]
    assert [(row["question_id"], row["a"], row["verdict"]) for row in rows] == [
        ("double", 1.0, "correct"),
        ("double", 0.0, "wrong"),
        ("double", 0.0, "wrong"),
        ("broken", 0.0, broken),
        ("broken", 0.0, broken),
        ("broken", 0.0, broken),
    ]
    warning = f"[credo] step 0: the grader failed on 3 of 6 completions (a = 0): 3 x {broken}"
    assert warning in capsys.readouterr().err.splitlines()


@pytest.mark.exhaustive  # minutes: the step above holds the same, in process
def test_a_run_goes_on_past_a_question_whose_tests_are_malformed(warm, tmp_path, tiny_dir):
    """The real loop (bash run.sh tiny) in the code domain, one of its two questions with malformed
    tests: before, its grading raised out of the step and the run died; now the step
    completes, each of that question's rollouts has a = 0 and the reason in its record, the step
    counts them in metrics.jsonl and says so on stderr."""
    data = tmp_path / "code_train.jsonl"
    rows = [
        {"id": "double", "problem": "Print twice the input.", "tests": DOUBLE_TESTS},
        {"id": "broken", "problem": "Print twice the input.", "tests": MALFORMED_TESTS},
    ]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = run_tiny(warm, tmp_path, "max_steps=1", "domain=code", f"train_data={data}", "run_name=code")
    (metrics,) = read_metrics(tmp_path / "code")
    records = [
        json.loads(line) for line in (tmp_path / "code" / "rollouts" / "step_000000.jsonl").read_text().splitlines()
    ]
    broken = "error: ValueError: 2 inputs but 1 outputs"
    assert len(records) == 8 and all(record["a"] == 0.0 for record in records)
    assert [record["verdict"] == broken for record in records].count(True) == metrics["grading_errors"] == 4
    assert all(record["verdict"] == broken for record in records if record["question_id"] == "broken")
    assert f"[credo] step 0: the grader failed on 4 of 8 completions (a = 0): 4 x {broken}" in result.stderr


# --- the paper's tables as commands ---------------------------------------------------------------


# --- end to end on Qwen3's real tokenizer ------------------------------------------------------------

GT_TAILS = [">\n", ">", "><", ">The", ">\n\n", ">."]  # one token each in Qwen3's vocabulary


@pytest.fixture(scope="module")
def qwen3_world(qwen3_tokenizer, tmp_path_factory):
    """A small random Qwen3 (real vocabulary, tied) with Qwen3's tokenizer, taught in a few
    supervised steps to write the readout format and to follow `<confidence` with a token
    that starts with ">" (or the lone ">"); its model directory and training data."""
    import random

    tok = copy.deepcopy(qwen3_tokenizer)
    model = random_qwen3(tok, tied=True)
    rows = [
        {"id": f"q{a}{b}", "problem": f"What is {a} + {b}?", "answer": str(a + b)}
        for a, b in [(2, 2), (3, 4), (1, 5), (6, 2)]
    ]
    prompts = torch.tensor(
        [ro.build_prompt_ids(tok, r["problem"], "readout", "math") for r in rows]
    )  # [4, P], equal lengths
    rng = random.Random(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(70):
        completions = torch.tensor(
            [
                tok.encode(
                    f"\\boxed{{{r['answer']}}}\n<analysis>\nok\n</analysis>\n<confidence" + rng.choice(GT_TAILS),
                    add_special_tokens=False,
                )
                + [tok.eos_token_id]
                for r in rows
            ]
        )  # [4, C]
        hidden = model.model(input_ids=torch.cat([prompts, completions], 1)).last_hidden_state  # [4, P + C, H]
        logits = hidden[:, prompts.shape[1] - 1 : -1] @ model.lm_head.weight.T  # [4, C, V]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), completions.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    root = tmp_path_factory.mktemp("qwen3")
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, loss.item()


def reaches_the_slot(text: str) -> bool:
    """<analysis>, then </analysis>, then <confidence> (the readout channel's rules)."""
    opened = text.find(ro.ANALYSIS_OPEN)
    closed = text.find(ro.ANALYSIS_CLOSE, opened) if opened >= 0 else -1
    return closed >= 0 and text.find(ro.CONF_OPEN, closed) >= 0


@pytest.mark.slow
def test_hf_loop_with_qwen3s_tokenizer_keeps_every_readout(warm, qwen3_world, tmp_path):
    """A few steps of the loop (HF engine) and an evaluation: every rollout whose text reaches
    <confidence> (after a closed analysis) has a readout, also those whose ">" the model glued
    to the next token."""
    root, sft_loss = qwen3_world
    assert sft_loss < 0.5
    run_tiny(
        warm,
        tmp_path,
        f"model={root / 'model'}",
        f"train_data={root / 'train.jsonl'}",
        "engine=hf",
        "max_steps=3",
        "max_completion_tokens=24",
        "run_name=qwen3",
    )
    metrics = read_metrics(tmp_path / "qwen3")
    rollouts = [
        json.loads(line)
        for step in range(3)
        for line in (tmp_path / "qwen3" / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines()
    ]
    reached = [r for r in rollouts if reaches_the_slot(r["text"])]
    assert len(rollouts) == 24 and len(reached) >= 6  # 11 of 24 when measured
    assert all(r["c"] is not None and r["text"].endswith(ro.CONF_OPEN) for r in reached)
    assert sum(m["slot_repaired"] for m in metrics) == sum(r["slot_repaired"] for r in rollouts) > 0
    # the engine's and the trainer's log-probs of the sampled tokens agree (1.1e-4 nats on average
    # when measured: fp32 over 151,936 logits, KV-cached vs packed); one token out of place would
    # cost nats
    assert all(m["slot_misaligned"] == 0 and m["engine_logprob_gap"] < 1e-3 for m in metrics)

    out = tmp_path / "eval"
    result = warm.run(
        [
            "eval.py",
            "--ckpt",
            str(tmp_path / "qwen3"),
            "--sets",
            f"t={root / 'train.jsonl'}:math",
            "--n",
            "4",
            "--engine",
            "hf",
            "--out",
            str(out),
        ]
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 16 and {r["source"] for r in records} == {"readout"}
    assert all(r["c"] is not None for r in records if reaches_the_slot(r["text"]))
    assert all(r["c"] is None for r in records if not reaches_the_slot(r["text"]))
    assert any(r["slot_repaired"] for r in records) and all(isinstance(r["slot_repaired"], bool) for r in records)


def test_the_sampled_slot_token_is_read_as_text(tiny_dir):
    tok = tiny_policy(tiny_dir).tokenizer
    high, low = (tok.convert_tokens_to_ids(t) for t in pol.RESERVED_TOKENS)
    prompt = tok.encode(PROMPT_2_PLUS_2, add_special_tokens=False)
    rollouts = []
    for text, slot_token in (("\\boxed{4} <analysis> ok </analysis> <confidence>", high), ("\\boxed{5}", None)):
        ids = tok.encode(text, add_special_tokens=False) + ([slot_token] if slot_token is not None else [])
        rollouts.append(Rollout("q", prompt, ids, text, "stop", ro.parse_segments(tok, ids, "readout", "\\boxed")))
    plan = confidence.plan(config.load_config("credo_sampled"))
    q = plan.report_read.from_text(rollouts, tok)
    assert q[0] == 1.0 and torch.isnan(q[1])  # <CONF_HIGH> sampled; no slot
    assert confidence.plan(config.load_config("credo")).report_read is None  # the rewards read the model's c
    with pytest.raises(ValueError, match="confidence read 'numeral' is registered twice"):
        confidence.register_text_read("numeral", ("verbalized",))(lambda rollouts, tokenizer: None)
