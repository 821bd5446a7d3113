"""The training step without rollout (forward, loss, backward, optimizer) in tokens/s:
credo's `train_step` against a straightforward reference and TRL's GRPOTrainer loss path.

    python bench/bench_step.py [--models tiny l4h256] [--repeats 3] [--no-trl] [--no-padded]

Every path trains a copy of the same model, from the same weights, on the same
rollouts (synthetic, varied lengths, groups of G):

* credo:     `credo.train_step` on `policy.collate`d rollouts, as configured by
             default: micro-batches of whole groups up to micro_batch_tokens=auto
             (`micro` rollouts of the shapes' maximum length, the reference's worst case),
             each one padding-free packed row attended per sequence, log-probs of the
             completion tokens only (chunked, with the readout), and the detached c of
             credit read by the engine (credit_confidence=engine): that read is one
             decode step a rollout in the rollout phase, not the step's, so here it is
             computed before the timer starts (`engine_reads`), from the current weights.
* credo_pass: the same with credit_confidence=trainer: credit's c from a no-grad pass of
             the layers inside the step (what every run did before the engine's read).
* reference: in this file: consecutive micro-batches padded to the batch's widest
             row, the model's full [n, T, V] fp32 logits, log_softmax + gather, the
             readout from those logits, and the same credit and loss (losses.py).
             Before timing, one step of each is compared: same losses and gradient
             norm, same weights after the step (so the speedup compares equal work).
* padded:    credo's step with pack_sequences=false (micro-batches padded to their
             longest row, the same token budget counting padding), to show what packing buys.
* trl:       bench/trl_step_worker.py in .cache/bench-trl-venv (TRL is never a
             dependency of the project), fed the same token ids and credo's per-token
             advantages, as a step server so that its steps interleave with the others.

Models: `tiny` (.cache/tiny, 2 layers, hidden 64, vocab 1,088) and `l4h256` (Qwen3
architecture, 4 layers, hidden 256, Qwen3's vocabulary of 151,936, random weights).
Rounds run every path once, in turn (after one warm-up step each); medians over
`--repeats` rounds; one torch thread per path on a CPU by default (`--threads`).
tokens/s counts the real (unpadded) prompt+completion tokens.
Prints one JSON line and writes bench/results/step_<device>.json.
"""

import argparse
import copy
import dataclasses
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import confidence  # noqa: E402
import config  # noqa: E402
import credo  # noqa: E402
import losses  # noqa: E402
import methods  # noqa: E402
import policy as pol  # noqa: E402
import rollout as ro  # noqa: E402
import verifier  # noqa: E402
from bench.results_io import report  # noqa: E402
from kernels import packing  # noqa: E402

TRL_PY = ROOT / ".cache" / "bench-trl-venv" / "bin" / "python"
STEP = 1000  # past warm-up: alpha and kappa at their full values

# name: (prompt tokens range, completion tokens range, rollouts, micro-batch)
SHAPES = {"tiny": ((20, 60), (16, 64), 16, 4), "l4h256": ((32, 192), (32, 384), 8, 4)}


def build_model(name: str):
    """(model, tokenizer, high_id, low_id, saved dir) for a benchmark model, fp32 on CPU."""
    tiny_dir = ROOT / ".cache" / "tiny" / "model"
    if not (tiny_dir / "config.json").exists():
        from worlds import tiny

        tiny.ensure(ROOT / ".cache" / "tiny")
    policy = pol.load_policy(str(tiny_dir), torch.device("cpu"))
    model, tokenizer, high_id, low_id = policy.model, policy.tokenizer, policy.high_id, policy.low_id
    if name == "l4h256":
        from transformers import Qwen3Config, Qwen3ForCausalLM

        torch.manual_seed(0)
        config = Qwen3Config(
            vocab_size=151936,
            hidden_size=256,
            intermediate_size=768,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            max_position_embeddings=4096,
            tie_word_embeddings=False,
            pad_token_id=tokenizer.pad_token_id,
        )
        model = Qwen3ForCausalLM(config).float()
        high_id, low_id = 151934, 151935
    saved = ROOT / ".cache" / "bench" / name
    saved.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    return model, tokenizer, high_id, low_id, saved


def synthetic_rollouts(n: int, group: int, vocab: int, prompt_range, completion_range, seed: int = 0):
    """Groups of rollouts with varied lengths; one in eight never reached the slot (truncated)."""
    rng = random.Random(seed)
    rollouts = []
    for q in range(n // group):
        prompt = [rng.randrange(3, vocab - 2) for _ in range(rng.randint(*prompt_range))]
        for _ in range(group):
            c = rng.randint(*completion_range)
            completion = [rng.randrange(3, vocab - 2) for _ in range(c)]
            if rng.random() < 0.125:
                seg = ro.Segments(c, c, c, None, None, False, True, False)
            else:
                seg = ro.Segments(c - 12, c - 11, c - 3, c - 2, None, True, True, True)
            rollouts.append(ro.Rollout(f"q{q}", prompt, completion, "", "stop", seg))
    return rollouts


class ReferenceStats(NamedTuple):
    """What every step path reports: its losses and gradient norm (credo's: also its micro-batch plan)."""

    loss_pg: float
    loss_cal: float
    grad_norm: float
    micro_batches: int | None = None
    pad_fraction: float | None = None
    credit: methods.Credit | None = None  # credo's (TRL's loss path is fed its per-token advantages)


def reference_step(model, optimizer, batch, correct, fmt, valid, cfg, high_id, low_id) -> ReferenceStats:
    """The same update written plainly: consecutive micro-batches at the full batch width,
    full fp32 logits, log_softmax + gather."""
    n, micro = len(batch), cfg.per_device_batch_size
    alpha, kappa = (credo.warmup(v, STEP, cfg.warmup_steps, cfg.warmup_shape) for v in (cfg.alpha, cfg.kappa))
    n_valid = max(float(valid.sum()), 1.0)
    loss_pg = loss_cal = 0.0
    model.train()
    for k in range(0, n, micro):
        rows = list(range(k, min(k + micro, n)))
        ids, attention = batch.input_ids[rows], batch.attention_mask[rows]
        logits = model(input_ids=ids, attention_mask=attention).logits.float()  # [n, T, V]
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        slot = batch.slot_pos[rows]
        at_slot = logits[torch.arange(len(rows)), slot.clamp(min=0)]  # [n, V]
        z = torch.where(slot >= 0, at_slot[:, high_id] - at_slot[:, low_id], 0.0)
        conf = losses.readout(z, torch.zeros_like(z))
        detached = torch.where(valid[rows], conf.detach(), float("nan"))  # [n]
        c = methods.credit(correct[rows], fmt[rows], methods.Confidences(detached, detached), cfg, kappa)
        adv_tok = losses.token_advantages(c.adv_ans, c.adv_conf, c.w, batch.ans_mask[rows], batch.conf_mask[rows])
        pg = losses.clipped_policy_loss(logp, logp.detach(), adv_tok, batch.completion_mask[rows], cfg.clip_eps)
        cal = losses.calibration_loss(conf, c.target, valid[rows])
        n_valid_mb = int(valid[rows].sum())
        (pg * len(rows) / n + alpha * cal * n_valid_mb / n_valid).backward()
        loss_pg += pg.item() * len(rows) / n
        loss_cal += cal.item() * n_valid_mb / n_valid
    max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return ReferenceStats(loss_pg=loss_pg, loss_cal=loss_cal, grad_norm=grad_norm)


def engine_reads(model, batch, correct, fmt, valid, cfg, high_id, low_id) -> dict:
    """What the engine's read at each slot gives credit (credo.engine_confidences), here from a
    no-grad pass of the current weights: equal to the engine's to fp32 noise (tests/test_rollout.py),
    computed outside the timed step because the engine reads it in the rollout phase."""
    policy = pol.Policy(model, None, high_id, low_id, pol.compute_dtype(cfg))
    lengths = batch.attention_mask.sum(dim=1).tolist()
    micro = packing.micro_batches(lengths, cfg.micro_batch_tokens, cfg.group_size, packed=cfg.pack_sequences)
    return {"model": pol.confidences(policy, batch, micro, cfg.pack_sequences, confidence.plan(cfg).model_read)}


def credo_step(
    model, optimizer, batch, correct, fmt, valid, cfg, high_id, low_id, packed=True, reads=None
) -> ReferenceStats:
    """credo's update, with padding-free packed micro-batches (pack_sequences=true) or padded ones;
    reads: the engine's reads of c for credit (engine_reads), or None for the trainer's no-grad pass."""
    cfg = dataclasses.replace(cfg, pack_sequences=packed)
    policy = pol.Policy(model, None, high_id, low_id, pol.compute_dtype(cfg))  # the update reads no tokenizer
    verdicts = [verifier.Verdict(passed=a == 1, reason="set by hand") for a in correct.tolist()]
    out = credo.Outcomes(
        correct=correct, verdicts=verdicts, fmt=fmt, valid=valid, reported=None, truncated=torch.zeros_like(valid)
    )
    step = credo.make_step(cfg, STEP, batch, out, engine_reads=reads)
    stats = credo.train_step(credo.Learner(policy, optimizer, cfg), step)
    return ReferenceStats(
        loss_pg=stats.terms["pg"],
        loss_cal=stats.terms["cal"],
        grad_norm=stats.grad_norm,
        micro_batches=stats.micro_batches,
        pad_fraction=stats.pad_fraction,
        credit=stats.credit,
    )


def make_optimizer(model, cfg):
    return torch.optim.AdamW(
        model.parameters(),
        lr=cfg.lr,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
    )


def update_rel_diff(start, a, b) -> float:
    """||update_a - update_b|| / ||update_b||, the updates being each model's weights minus `start`'s.

    Relative and over all weights, because AdamW's first step is about lr * sign(grad) per weight: a
    weight whose gradient is at float noise (~1e-7 relative) moves by up to lr either way, so the
    largest single-weight difference is about lr however equal the work (8.4e-5 at lr 1e-4 on the
    tiny model, 2026-11-26), while a path that did other work differs on the whole update."""
    with torch.no_grad():
        params = list(zip(start.parameters(), a.parameters(), b.parameters()))
        diff = sum(float(((pa - p0) - (pb - p0)).square().sum()) for p0, pa, pb in params)
        norm = sum(float((pb - p0).square().sum()) for p0, _, pb in params)
        return (diff / norm) ** 0.5


def trl_inputs(saved: Path, rollouts, stats: ReferenceStats, batch, cfg, micro: int) -> dict:
    """What bench/trl_step_worker.py trains on: the same token ids and credo's per-token advantages
    (from `stats`, credo's first step)."""
    adv = losses.token_advantages(
        stats.credit.adv_ans, stats.credit.adv_conf, stats.credit.w, batch.ans_mask, batch.conf_mask
    )
    token_adv = [adv[i][batch.completion_mask[i]].tolist() for i in range(len(rollouts))]
    spec = {
        "model_dir": str(saved),
        "tokenizer_dir": str(saved),
        "micro": micro,
        "group": cfg.group_size,
        "prompts": [r.prompt_ids for r in rollouts],
        "completions": [r.completion_ids for r in rollouts],
        "token_advantages": token_adv,
        "lr": cfg.lr,
        "betas": [cfg.adam_beta1, cfg.adam_beta2],
        "adam_eps": cfg.adam_eps,
        "weight_decay": cfg.weight_decay,
        "clip_eps": cfg.clip_eps,
        "threads": torch.get_num_threads(),
    }
    return spec


def start_trl(saved: Path, rollouts, stats: ReferenceStats, batch, cfg, micro: int) -> subprocess.Popen:
    path = saved / "trl_inputs.json"
    path.write_text(json.dumps(trl_inputs(saved, rollouts, stats, batch, cfg, micro)))
    return subprocess.Popen(
        [str(TRL_PY), str(ROOT / "bench" / "trl_step_worker.py"), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def trl_step(proc: subprocess.Popen) -> float:
    proc.stdin.write("step\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError("TRL worker exited: " + proc.stderr.read()[-3000:])
    return json.loads(line)["seconds"]


def step_inputs(name: str, group: int = 4) -> tuple:
    """(model, tokenizer, saved dir, rollouts, args) for a benchmark model; args are the
    arguments after (model, optimizer) of every step path: (batch, correct, fmt, valid, cfg,
    high_id, low_id). The length limits are the shapes' maxima, so credo's
    micro_batch_tokens=auto (micro rows of full length) bounds a micro-batch's tokens as the
    reference's `micro` rows are bounded."""
    prompt_range, completion_range, n, micro = SHAPES[name]
    model, tokenizer, high_id, low_id, saved = build_model(name)
    cfg = config.load_config(
        "tiny",
        [
            f"group_size={group}",
            f"per_device_batch_size={micro}",
            f"grad_accum={n // micro}",
            "precision=fp32",
            f"max_prompt_tokens={prompt_range[1]}",
            f"max_completion_tokens={completion_range[1]}",
        ],
    )
    rollouts = synthetic_rollouts(n, group, model.config.vocab_size, prompt_range, completion_range)
    batch = pol.collate(rollouts, tokenizer.pad_token_id)
    valid = batch.slot_pos >= 0
    correct = torch.tensor([float(i % 3 == 0) for i in range(n)])
    return model, tokenizer, saved, rollouts, (batch, correct, valid.float(), valid, cfg, high_id, low_id)


def bench_model(name: str, repeats: int, use_trl: bool, use_padded: bool) -> dict:
    model, _, saved, rollouts, args = step_inputs(name)
    batch, cfg, n, micro = args[0], args[4], len(rollouts), SHAPES[name][3]
    lengths = batch.attention_mask.sum(dim=1).tolist()
    tokens = int(sum(lengths))

    # each path: (its reads of c for credit, prepared before the timer; the step)
    paths = {
        "credo": (lambda m: engine_reads(m, *args), lambda m, o, r: credo_step(m, o, *args, reads=r)),
        "credo_pass": (lambda m: None, lambda m, o, r: credo_step(m, o, *args)),
        "reference": (lambda m: None, lambda m, o, r: reference_step(m, o, *args)),
    }
    if use_padded:
        padded_cfg = dataclasses.replace(args[4], pack_sequences=False)
        padded_args = (*args[:4], padded_cfg, *args[5:])
        paths["padded"] = (
            lambda m: engine_reads(m, *padded_args),
            lambda m, o, r: credo_step(m, o, *args, packed=False, reads=r),
        )
    models = {key: copy.deepcopy(model) for key in paths}
    optimizers = {key: make_optimizer(models[key], cfg) for key in paths}

    # Equal work: the first step (also the warm-up) of each path from the same weights.
    first = {key: step(models[key], optimizers[key], reads(models[key])) for key, (reads, step) in paths.items()}
    check = {}
    for key in paths:
        if key != "credo":
            check[key] = {
                "loss_pg_diff": abs(first[key].loss_pg - first["credo"].loss_pg),
                "loss_cal_diff": abs(first[key].loss_cal - first["credo"].loss_cal),
                "grad_norm_rel_diff": abs(first[key].grad_norm / first["credo"].grad_norm - 1),
                "update_rel_diff": update_rel_diff(model, models[key], models["credo"]),
            }
    trl, trl_error = None, None
    if use_trl:
        if not TRL_PY.exists():
            trl_error = f"no TRL environment at {TRL_PY} (see docs/performance.md to create it)"
        else:
            try:
                trl = start_trl(saved, rollouts, first["credo"], batch, cfg, micro)
                trl_step(trl)  # warm-up
            except Exception as error:  # report why, never a made-up number
                trl_error = f"{type(error).__name__}: {error}"[-2000:]
                trl = None
    times = {key: [] for key in [*paths, *(["trl"] if trl else [])]}
    for _ in range(repeats):
        for key, (reads, step) in paths.items():
            prepared = reads(models[key])  # the engine's share: the rollout phase's, not the step's
            start = time.perf_counter()
            step(models[key], optimizers[key], prepared)
            times[key].append(time.perf_counter() - start)
        if trl:
            times["trl"].append(trl_step(trl))
    if trl:
        trl.stdin.close()
        trl.wait(timeout=60)
    med = {key: statistics.median(v) for key, v in times.items()}
    widths = [len(range(k, min(k + micro, n))) * max(lengths) for k in range(0, n, micro)]
    result = {
        "model": name,
        "layers": model.config.num_hidden_layers,
        "hidden": model.config.hidden_size,
        "vocab": model.config.vocab_size,
        "rollouts": n,
        "micro_batch": micro,
        "tokens": tokens,
        "micro_batch_tokens": cfg.micro_batch_tokens,
        "credo_micro_batches": first["credo"].micro_batches,
        "reference_micro_batches": len(widths),
        "credo_pad_fraction": round(first["credo"].pad_fraction, 4),
        "reference_pad_fraction": round(1 - tokens / sum(widths), 4),
        **{f"{key}_tok_s": round(tokens / s, 1) for key, s in med.items()},
        **{f"{key}_s": [round(t, 3) for t in v] for key, v in times.items()},
        "speedup_vs_reference": round(med["reference"] / med["credo"], 3),
        "speedup_pass_vs_reference": round(med["reference"] / med["credo_pass"], 3),
        "speedup_engine_read_vs_pass": round(med["credo_pass"] / med["credo"], 3),
        "speedup_vs_trl": round(med["trl"] / med["credo"], 3) if trl else None,
        "equal_work_check": check,
    }
    if use_padded:
        result["speedup_packed_vs_padded"] = round(med["padded"] / med["credo"], 3)
    if trl_error:
        result["trl_error"] = trl_error
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "l4h256"], choices=list(SHAPES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-trl", action="store_true")
    parser.add_argument("--no-padded", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=0 if torch.cuda.is_available() else 1,
        help="torch threads of every path (0: torch's default). 1 on a CPU: on a shared machine "
        "OpenMP barriers of 2+ threads collapse when other jobs take the cores",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    per_model = {name: bench_model(name, args.repeats, not args.no_trl, not args.no_padded) for name in args.models}
    for r in per_model.values():
        print(json.dumps(r), file=sys.stderr)
    trl_values = [r["speedup_vs_trl"] for r in per_model.values()]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result = {
        "bench": "train_step",
        "command": " ".join(["python"] + sys.argv),
        "device": device,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "threads": torch.get_num_threads(),
        "speedup_vs_reference": min(r["speedup_vs_reference"] for r in per_model.values()),
        "speedup_vs_trl": min(trl_values) if all(v is not None for v in trl_values) else None,
        "target_speedup": 1.5,
        "by_model": per_model,
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    errors = {name: r["trl_error"] for name, r in per_model.items() if "trl_error" in r}
    if errors:
        result["trl_error"] = errors
    report(result, f"step_{device}")


if __name__ == "__main__":
    main()
