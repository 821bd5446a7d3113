"""The toy demonstration: CREDO's readout learns a calibrated confidence on an ordinary machine.

    python toy.py            # or: bash run.sh toy   (CREDO and RLCR; 2 CPU cores: see docs/toy.md for times)
    python toy.py --methods grpo,credo,rlcr --world-seed 1 seed=44   # GRPO too, another world, another seed
    python toy.py --quick    # the shortened run of tests/test_toy.py (CREDO only, 40 steps)
    python toy_tables.py     # tab:main and tab:ablation in miniature (bash run.sh toy --tables)

What it shows. The same `credo.py` loop, vLLM engine, math-verify verifier and
`eval.py` as the paper's runs, on a world small enough for a CPU:

1. *World* (built once, cached under `.cache/toy/` or `.cache/toy-w<seed>/`, rebuilt
   only when its recipe changes): chained sums of one-digit numbers, difficulty
   level L = 1..5 with L + 1 operands (L additions), deterministic train / held-out
   splits; a byte-level BPE tokenizer trained here (no hub); a tiny
   Qwen3-architecture model (3 layers, hidden 96, head_dim 32); a supervised warm
   start on the completions of a *scripted solver* that writes one of two styles,
   half and half: every partial sum ("steps": reliable on easy problems, often
   wrong on hard ones) or the whole sum at once ("direct": much less reliable
   from level 2 on). Wrong solutions slip by 1-2 and are in the SFT data. The
   rollout formats: readout (`... \\boxed{n} <analysis> ... </analysis> <confidence>`),
   verbalized (`... </analysis> <confidence>0.X</confidence>`, an honest but coarse
   numeral: the style's accuracy at the level, rounded to one of five values). The build
   ends with an addition check (level-1 sums sampled at T = 0.7): a warm start that
   cannot add gets more steps, and fails the build, in one line, if it still cannot.
2. *Training*: CREDO (readout channel), the verbalized baseline RLCR and, with
   `--methods`, plain GRPO: the real loop (`python credo.py configs/toy.yaml ...`),
   the same settings and budget for every method.
3. *Evaluation*: `eval.evaluate` on the held-out split (T = 0.7, n samples per
   problem) of the warm-started model read through each channel ("before") and
   of each trained checkpoint ("after").

Outputs in `runs/toy/` (or `--out`): `report.json`
(`{"CREDO": {"before": {...}, "after": {...}}, "RLCR": {...}}`, the keys of
`eval.calibration_metrics` plus `parse_fail`), `report.md` (the table printed
at the end), `reliability_<method>.png` (before and after panels) and
`collapse.png` (the reported values, `fig:collapse`).

What to expect (docs/toy.md has the measured numbers, over world and training seeds):
RL raises accuracy (the direct style is learned away, GRPO and CREDO alike); CREDO's
readout becomes calibrated with a continuum of values, while the verbalized reports
stay on a handful of values. The toy trains at the evaluation temperature 0.7 (the
paper trains at 1.0): a readout is calibrated to the rollouts it is trained on, and
this small model's accuracy depends strongly on temperature (docs/toy.md).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

import tiny
from figures import plot_collapse, plot_reliability
from metrics import calibration_metrics
from policy import RESERVED_TOKENS, add_reserved_tokens, init_reserved_rows
from report import read_samples
from rollout import build_prompt_ids, system_prompt

ROOT = Path(__file__).resolve().parent
CACHE = ROOT / ".cache" / "toy"

# --- the world's recipe (any change rebuilds the cache) -----------------------------------
WORLD = {
    # 3: prompts end with Qwen3's empty thinking block; 4: two solution styles; 5: the addition
    # check below (the warm start itself is version 4's, step for step)
    "version": 5,
    "seed": 0,
    "levels": 5,                 # level L: L + 1 one-digit operands, L additions
    "n_train": 2000,
    "n_test": 250,
    # The scripted solver writes one of two styles, each half of the time (the first token
    # after the prompt tells them apart): "steps" writes every partial sum, "direct" writes the
    # whole sum at once. Per style and level: the probability that it is right (a partial sum
    # or the total slips by 1-2 otherwise), and the verbalized numeral it writes, honest (its
    # accuracy, rounded to one of five values) but coarse. The direct style is much less
    # reliable from level 2 on: that is what RL on the toy can learn (docs/toy.md).
    "styles": {
        "steps": {"p_correct": {"1": 0.95, "2": 0.85, "3": 0.7, "4": 0.5, "5": 0.3},
                  "verbal": {"1": "0.9", "2": "0.8", "3": "0.8", "4": "0.5", "5": "0.3"}},
        "direct": {"p_correct": {"1": 0.95, "2": 0.5, "3": 0.3, "4": 0.1, "5": 0.05},
                   "verbal": {"1": "0.9", "2": "0.5", "3": "0.3", "4": "0.1", "5": "0.1"}},
    },
    "vocab_size": 1024,
    "hidden": 96, "layers": 3, "heads": 3, "kv_heads": 1, "head_dim": 32, "intermediate": 256,
    "sft_steps": 800, "sft_batch": 32, "sft_lr": 3e-3,
    # The warm start's channels, in turn: the readout and verbalized formats of the toy's runs.
    # Not the readout format without the analysis (tab:ablation's row): one step in five of it
    # gave a world 0 that could not add (0.71, then 0.74 after 400 more steps; docs/toy.md).
    "sft_channels": ["readout", "verbalized"],
    # The addition check: a warm start that does not add one-digit numbers (sampled accuracy at
    # T = 0.7 on level-1 training problems; the solver is right 0.95) gives RL nothing to select
    # and the readout little to read (docs/toy.md, world 1 of version 4). Below the bar, more
    # warm-start steps, at most `check_rounds` times; still below, the build fails and says so.
    "check_min_acc": 0.85, "check_steps": 400, "check_rounds": 2,
}
ANALYSES = [
    "There are {k} additions and any of them could be off by one.",
    "With {k} additions a slip in a partial sum is the most likely error.",
    "The partial sums of the {k} additions are the steps that could be wrong; I cannot find other uncertainties.",
]


def make_problem(rng: random.Random, level: int) -> tuple[list[int], int]:
    ops = [rng.randint(1, 9) for _ in range(level + 1)]
    return ops, sum(ops)


def problem_text(ops: list[int]) -> str:
    return "What is " + " + ".join(map(str, ops)) + "?"


def make_split(n: int, seed: int, prefix: str, levels: int) -> list[dict]:
    """`n` problems, levels cycled, in the math JSONL schema (plus `level` and `ops`)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        level = 1 + i % levels
        ops, answer = make_problem(rng, level)
        rows.append({"id": f"{prefix}-{i:05d}", "problem": problem_text(ops), "answer": str(answer),
                     "level": level, "ops": ops})
    return rows


def slipped(value: int, rng: random.Random) -> int:
    """`value` off by 1-2 (never below 1)."""
    return value + (rng.choice([-2, -1, 1, 2]) if value > 2 else rng.choice([1, 2]))


def solution_steps(ops: list[int], style: str, right: bool, rng: random.Random) -> tuple[str, int]:
    """The worked solution of one style and its final value: every partial sum ("steps"; a wrong
    one slips on one step, and the later sums carry the slip) or the whole sum at once ("direct")."""
    if style == "direct":
        total = sum(ops) if right else slipped(sum(ops), rng)
        return " + ".join(map(str, ops)) + f" = {total}", total
    slip_step = -1 if right else rng.randrange(len(ops) - 1)
    partial, steps = ops[0], []
    for j, d in enumerate(ops[1:]):
        result = partial + d if j != slip_step else slipped(partial + d, rng)
        steps.append(f"{partial} + {d} = {result}")
        partial = result
    return ", ".join(steps), partial


def scripted_completion(ops: list[int], channel: str, rng: random.Random, world: dict = WORLD) -> tuple[str, bool]:
    """One scripted solution: a style drawn half-and-half, right with that style's probability at
    this level, then the analysis and (verbalized) the style's numeral for the level."""
    level = str(len(ops) - 1)
    style = rng.choice(sorted(world["styles"]))
    right = rng.random() < world["styles"][style]["p_correct"][level]
    steps, answer = solution_steps(ops, style, right, rng)
    analysis = rng.choice(ANALYSES).format(k=int(level))
    text = steps + f". The answer is \\boxed{{{answer}}}. "
    text += "<confidence>" if channel == "readout_noanalysis" else f"<analysis> {analysis} </analysis> <confidence>"
    if channel == "verbalized":
        text += f"{world['styles'][style]['verbal'][level]}</confidence>"
    return text, answer == sum(ops)


def world_key(world: dict = WORLD) -> str:
    return hashlib.sha256(json.dumps(world, sort_keys=True).encode()).hexdigest()[:16]


def build_model(tokenizer, world: dict):
    """The toy's random Qwen3: tiny.build_model at the sizes of `world`."""
    return tiny.build_model(tokenizer, world["seed"], hidden=world["hidden"], intermediate=world["intermediate"],
                            layers=world["layers"], heads=world["heads"], kv_heads=world["kv_heads"],
                            head_dim=world["head_dim"])


def _common_prefix(seqs: list[list[int]]) -> int:
    first, k = seqs[0], len(seqs[0])
    for s in seqs[1:]:
        k = next((i for i, (x, y) in enumerate(zip(first[:k], s)) if x != y), min(k, len(s)))
    return k


def warm_start(model, tokenizer, rows: list[dict], world: dict, log=print, steps: int | None = None,
               seed: int | None = None) -> list[float]:
    """`steps` (default the world's sft_steps) supervised steps on scripted completions, drawn
    afresh each time (so the model learns the solver's distribution, slips included); loss on
    completion tokens only; `seed` (default the world's) seeds the draws.

    Steps take the channels of world["sft_channels"] in turn. Every prompt of a channel starts
    with the same system prompt, so it is run once per step (batch 1, with gradients) and its
    key/value cache is repeated over the batch: the same loss and gradients as full sequences,
    ~3x cheaper.
    """
    seed = world["seed"] if seed is None else seed
    torch.manual_seed(seed)
    # One thread: with two, any other busy process on a 2-core machine makes OpenMP spin and
    # a step ~20x slower (measured: 0.3 s vs 6.9 s); one thread loses little when idle.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rng = random.Random(seed + 1)
    channels = world["sft_channels"]
    # The readout system prompt names <CONF_HIGH>/<CONF_LOW>. policy.load_policy adds them as
    # special tokens (at ids len(tokenizer), +1; rows = mean embedding of "high"/"low"), which
    # changes how that prompt tokenizes. Warm-start on the prompts as the loop will see them,
    # with those two rows held at exactly the values load_policy will give them; the saved
    # tokenizer stays without them, so the readout starts untrained, as on a real checkpoint.
    with_reserved = copy.deepcopy(tokenizer)
    add_reserved_tokens(model, with_reserved)

    def tie_reserved_rows() -> None:
        init_reserved_rows(model, with_reserved, RESERVED_TOKENS)

    prompts = {ch: [build_prompt_ids(with_reserved, r["problem"], ch, "math") for r in rows] for ch in set(channels)}
    shared = {ch: _common_prefix(prompts[ch]) - 1 for ch in prompts}       # leave >= 1 token to each row
    optimizer = torch.optim.AdamW(model.parameters(), lr=world["sft_lr"], weight_decay=0.0)
    steps, bs = world["sft_steps"] if steps is None else steps, world["sft_batch"]
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50) * max(0.05, 1 - s / steps))
    model.train()
    losses, t0 = [], time.perf_counter()
    for step in range(steps):
        channel = channels[step % len(channels)]
        k = shared[channel]
        batch = []
        for i in rng.sample(range(len(rows)), bs):
            text, _ = scripted_completion(rows[i]["ops"], channel, rng, world)
            batch.append((prompts[channel][i][k:], tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]))
        width = max(len(p) + len(c) for p, c in batch)
        ids = torch.full((bs, width), tokenizer.pad_token_id)
        labels = torch.full((bs, width), -100)
        mask = torch.zeros((bs, k + width), dtype=torch.long)
        mask[:, :k] = 1
        for row, (p, c) in enumerate(batch):
            ids[row, : len(p) + len(c)] = torch.tensor(p + c)
            labels[row, len(p) : len(p) + len(c)] = torch.tensor(c)
            mask[row, k : k + len(p) + len(c)] = 1
        prefix = model.model(input_ids=torch.tensor([prompts[channel][0][:k]]), use_cache=True)
        cache = prefix.past_key_values
        cache.batch_repeat_interleave(bs)
        logits = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        tie_reserved_rows()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if (step + 1) % 100 == 0:
            log(f"[toy] warm start {step + 1}/{steps}: loss {sum(losses[-100:]) / 100:.3f} ({time.perf_counter() - t0:.0f} s)")
    model.eval()
    torch.set_num_threads(threads)
    return losses


def addition_accuracy(model, tokenizer, rows: list[dict], seed: int, n: int = 100, samples: int = 4) -> float:
    """Accuracy on the first `n` level-1 problems of `rows` (one addition of two one-digit numbers),
    `samples` each, sampled as the toy's runs sample (T = 0.7, top-k 50; seeded), through the
    verbalized prompt: whether a warm start learned to add (world 1 of version 4 was right 0.65 of
    the time at T = 0.7 on level 1). Greedy decoding is a weaker test: a development build of
    version 5 was right 1.00 greedy and 0.93 sampled on level 1, 0.58 and 0.51 on level 2.
    Prompts of one length are generated together, without padding."""
    level1 = [r for r in rows if r["level"] == 1][:n]
    by_length: dict[int, list[tuple[list[int], str]]] = {}
    for row in level1:
        ids = build_prompt_ids(tokenizer, row["problem"], "verbalized", "math")
        by_length.setdefault(len(ids), []).append((ids, row["answer"]))
    torch.manual_seed(seed)
    right = 0
    with torch.no_grad():
        for width, group in sorted(by_length.items()):
            out = model.generate(input_ids=torch.tensor([ids for ids, _ in group]), max_new_tokens=48, do_sample=True,
                                 temperature=0.7, top_k=50, num_return_sequences=samples,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
            for k, completion in enumerate(texts):
                boxed = re.search(r"\\boxed\{(\d+)\}", completion)
                right += boxed is not None and boxed.group(1) == group[k // samples][1]
    return right / (len(level1) * samples)


def checked_warm_start(model, tokenizer, rows: list[dict], world: dict, log=print) -> tuple[list[float], list[float]]:
    """The warm start, then the addition check (world["check_*"]): below the bar, `check_steps`
    more steps (fresh draws), at most `check_rounds` times; RuntimeError, in one line, when the
    model still cannot add. Returns the losses and the accuracy after each check."""
    losses = warm_start(model, tokenizer, rows, world, log)
    checks = [addition_accuracy(model, tokenizer, rows, world["seed"])]
    for extra in range(1, world["check_rounds"] + 1):
        if checks[-1] >= world["check_min_acc"]:
            break
        log(f"[toy] addition check: the warm start adds one-digit numbers right {checks[-1]:.2f} of the time (T = 0.7, "
            f"level 1; the toy needs {world['check_min_acc']}): {world['check_steps']} more warm-start steps")
        losses += warm_start(model, tokenizer, rows, world, log, steps=world["check_steps"], seed=world["seed"] + 1000 * extra)
        checks.append(addition_accuracy(model, tokenizer, rows, world["seed"] + extra))
    if checks[-1] < world["check_min_acc"]:
        raise RuntimeError(f"toy world seed {world['seed']}: after {len(losses)} warm-start steps the model adds one-digit "
                           f"numbers right {checks[-1]:.2f} of the time (T = 0.7, level 1; the toy needs "
                           f"{world['check_min_acc']}), so RL and the readout would have little to work with; "
                           f"build another world (--world-seed)")
    log(f"[toy] addition check passed: one-digit sums right {checks[-1]:.2f} of the time (T = 0.7, level 1)")
    return losses, checks


def world_of(seed: int) -> tuple[dict, Path]:
    """The recipe with world seed `seed` (data splits, model initialisation, warm start) and its
    cache: .cache/toy for the default seed, .cache/toy-w<seed> for the others. ValueError for a
    negative seed."""
    if seed < 0:
        raise ValueError(f"--world-seed {seed}: a seed is a non-negative integer")
    if seed == WORLD["seed"]:
        return WORLD, CACHE
    return {**WORLD, "seed": seed}, CACHE.parent / f"toy-w{seed}"


def stale_world_note(cache: Path, world: dict = WORLD) -> str | None:
    """One line when `cache` holds a world of another recipe (it is then rebuilt), else None."""
    stamp = cache / "world.json"
    if not stamp.exists() or world_is_current(cache, world):
        return None
    try:
        old = json.loads(stamp.read_text()).get("world", {})
    except json.JSONDecodeError:
        old = {}
    return (f"[toy] {cache} holds a world of another recipe (version {old.get('version', '?')}, this one is "
            f"{world['version']}): rebuilding it")


def world_is_current(cache: Path = CACHE, world: dict = WORLD) -> bool:
    """`cache` holds the world of this recipe (its stamp is written last, when the build is done)."""
    stamp = cache / "world.json"
    return stamp.exists() and json.loads(stamp.read_text()).get("key") == world_key(world) and (cache / "model" / "config.json").exists()


def build_world(cache: Path = CACHE, world: dict = WORLD, log=print) -> Path:
    """Data, tokenizer and warm-started model under `cache`; skipped when the cached recipe matches."""
    if world_is_current(cache, world):
        return cache
    with tiny.build_lock(cache):               # another process building it: wait, then use its build
        if world_is_current(cache, world):
            return cache
        return _build_world(cache, world, log)


def _build_world(cache: Path, world: dict, log) -> Path:
    stamp = cache / "world.json"
    note = stale_world_note(cache, world)
    if note:
        log(note)
    t0 = time.perf_counter()
    cache.mkdir(parents=True, exist_ok=True)
    train = make_split(world["n_train"], world["seed"], "toy-train", world["levels"])
    test = make_split(world["n_test"], world["seed"] + 1, "toy-test", world["levels"])
    rng = random.Random(world["seed"])
    corpus = [system_prompt(ch, dom) for ch in ("readout", "verbalized", "readout_noanalysis") for dom in ("math", "code")] * 4
    corpus += [r["problem"] + " " + scripted_completion(r["ops"], ch, rng, world)[0] for r in train for ch in ("readout", "verbalized")]
    corpus += ["high low 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.0 </confidence>"] * 8
    tokenizer = tiny.build_tokenizer(corpus, world["vocab_size"])
    model = build_model(tokenizer, world)
    log(f"[toy] building the toy world under {cache} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
        f"{world['sft_steps']} warm-start steps)")
    losses, checks = checked_warm_start(model, tokenizer, train, world, log)
    model.save_pretrained(cache / "model", safe_serialization=True)
    tokenizer.save_pretrained(cache / "model")
    for name, rows in (("train", train), ("test", test)):
        (cache / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stamp.write_text(json.dumps({"key": world_key(world), "world": world, "sft_first_loss": losses[0],
                                 "sft_last_loss": sum(losses[-50:]) / 50, "sft_steps_run": len(losses), "addition_checks": checks, "seconds": time.perf_counter() - t0}, indent=1))
    log(f"[toy] world built in {time.perf_counter() - t0:.0f} s")
    return cache


# --- stages run as subprocesses (one vLLM engine per process) --------------------------------

def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("VLLM_CACHE_ROOT", str(ROOT / ".cache" / "vllm"))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # One intra-op thread for the trainer: on a 2-core machine shared with anything else, two
    # OpenMP threads spin against each other and a step gets several times slower.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_stage(args: list[str], log_path: Path) -> None:
    with log_path.open("w") as log:
        proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
        raise RuntimeError(f"`{' '.join(args)}` failed (exit {proc.returncode}); last lines of {log_path}:\n{tail}")


def last_checkpoint(run_dir: Path) -> Path:
    ckpts = sorted((run_dir / "ckpt").glob("step_*"))
    if not ckpts:
        raise RuntimeError(f"no checkpoint under {run_dir}")
    return ckpts[-1]


def summarize(records: list[dict], out: Path, labels: dict) -> dict:
    """report.json / report.md / figures from the eval records (each method's own channel)."""
    report, pools = {}, {}
    for method, (before, after, source) in labels.items():
        report[method] = {}
        for when, label in (("before", before), ("after", after)):
            mine = [r for r in records if r["run"] == label and r["source"] == source]
            if not mine:
                continue
            parsed = [r for r in mine if r["c"] is not None]
            metrics = calibration_metrics([r["c"] for r in parsed], [r["a"] for r in parsed]) if parsed else {}
            metrics["parse_fail"] = 1 - len(parsed) / len(mine)
            metrics["acc_all"] = float(np.mean([r["a"] for r in mine]))
            report[method][when] = metrics
            if parsed:
                pools.setdefault(method, {})[f"{method} {when}"] = (
                    np.array([r["c"] for r in parsed], dtype=float), np.array([r["a"] for r in parsed], dtype=float))
    for method, method_pools in pools.items():
        plot_reliability(method_pools, out / f"reliability_{method.lower()}", f"{method} ({labels[method][2]}), held-out toy split")
    if pools:
        plot_collapse({row: pool for method_pools in pools.values() for row, pool in method_pools.items()},
                         out / "collapse", "Reported confidence values, held-out toy split")
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(markdown_table(report))
    return report


def markdown_table(report: dict) -> str:
    cols = [("acc", "Acc"), ("auroc", "AUROC"), ("ece", "ECE"), ("brier", "Brier"), ("effective_levels", "Eff. levels"),
            ("top_share", "Top share"), ("parse_fail", "Parse fail"), ("n", "n")]
    lines = ["| method (channel) | when | " + " | ".join(c for _, c in cols) + " |", "|---|---|" + "---|" * len(cols)]
    channel = {name.upper(): ch for name, (_, ch) in METHODS.items()}
    for method, whens in report.items():
        for when, m in whens.items():
            cells = []
            for key, _ in cols:
                v = m.get(key)
                cells.append("-" if v is None else (str(v) if isinstance(v, int) else f"{v:.3f}"))
            lines.append(f"| {method} ({channel.get(method, '?')}) | {when} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# The methods the toy trains: credo.py overrides on configs/toy.yaml, and the channel evaluated.
METHODS = {
    "credo": ([], "readout"),
    "rlcr": (["method=rlcr", "channel=verbalized", "alpha=0", "kappa=0"], "verbalized"),
    "grpo": (["method=grpo", "channel=verbalized", "alpha=0", "kappa=0"], "verbalized"),
}


def parse_names(text: str, option: str, known) -> list[str]:
    """`credo,rlcr` -> ["credo", "rlcr"], each one of `known`; ValueError naming `option` and what
    is unknown (toy.py's --methods, toy_tables.py's --rows)."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in known]
    if unknown or not names:
        raise ValueError(f"{option} {text!r}: unknown {', '.join(unknown) or '(none given)'}; the choices are "
                         f"{', '.join(known)} (comma-separated)")
    return names


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description="CREDO's toy demonstration (see the module docstring).")
    parser.add_argument("--quick", action="store_true", help="the shortened run of the test: CREDO only, fewer steps, smaller eval")
    parser.add_argument("--out", default=str(ROOT / "runs" / "toy"))
    parser.add_argument("--methods", default=None, help="comma-separated: credo,rlcr,grpo (default: credo,rlcr; --quick: credo)")
    parser.add_argument("--world-seed", type=int, default=WORLD["seed"],
                        help=f"the world's seed (data, initialisation, warm start; default {WORLD['seed']}): another "
                             f"independently built world, cached in .cache/toy-w<seed>")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every training (e.g. alpha=0 for the ablation)")
    args = parser.parse_args(argv)
    try:                                                     # bad input: one line, before the world is built
        methods = parse_names(args.methods or ("credo" if args.quick else "credo,rlcr"), "--methods", METHODS)
        world, cache = world_of(args.world_seed)
    except ValueError as error:
        sys.exit(f"toy: {error}")
    t_start = time.perf_counter()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    build_world(cache, world)
    t_world = time.perf_counter() - t_start
    quick = ["max_steps=40", "save_every=40"] if args.quick else []
    n_eval, test = (2, cache / "test_quick.jsonl") if args.quick else (4, cache / "test.jsonl")
    if args.quick:   # the first 100 held-out problems (20 per level)
        test.write_text("".join(cache.joinpath("test.jsonl").read_text().splitlines(keepends=True)[:100]))
    model_dir = str(cache / "model")
    spec_ckpts, labels, timings = [], {}, {"world_s": round(t_world, 1)}
    for method in methods:
        name = method.upper()
        method_overrides, channel = METHODS[method]
        t0 = time.perf_counter()
        print(f"[toy] training {name} ({channel} channel) with credo.py configs/toy.yaml ...", flush=True)
        shutil.rmtree(out / method, ignore_errors=True)      # a fresh run (credo.py appends to metrics.jsonl)
        run_stage(["credo.py", "configs/toy.yaml", f"out_dir={out}", f"run_name={method}", f"model={model_dir}",
                   f"train_data={cache / 'train.jsonl'}", *method_overrides, *quick, *args.overrides], out / f"train_{method}.log")
        timings[f"train_{method}_s"] = round(time.perf_counter() - t0, 1)
        ckpt = last_checkpoint(out / method)
        spec_ckpts += [{"label": f"{method}/before", "path": model_dir, "channel": channel, "method": name},
                       {"label": f"{method}/after", "path": str(ckpt), "channel": channel, "method": name}]
        labels[name] = (f"{method}/before", f"{method}/after", channel)
    t0 = time.perf_counter()
    print(f"[toy] evaluating {len(spec_ckpts)} models on the held-out split with eval.py ...", flush=True)
    (out / "eval_plan.json").write_text(json.dumps(spec_ckpts, indent=1))
    run_stage(["eval.py", "--plan", str(out / "eval_plan.json"), "--sets", f"toy={test}:math", "--n", str(n_eval),
               "--temperature", "0.7", "--seed", "43", "--config", "toy", "--out", str(out / "eval"), "--no-report"],
              out / "eval.log")
    timings["eval_s"] = round(time.perf_counter() - t0, 1)

    report = summarize(read_samples(out / "eval" / "samples.jsonl"), out, labels)
    timings["total_s"] = round(time.perf_counter() - t_start, 1)
    (out / "timings.json").write_text(json.dumps(timings, indent=1))
    print(markdown_table(report))
    print(f"[toy] {json.dumps(timings)}; report, table and figures under {out}")
    return report


if __name__ == "__main__":
    main()
