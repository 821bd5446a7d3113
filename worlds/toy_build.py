"""The toy's world: its recipe (`WORLD`), the chained-sum problems and their splits (training,
held-out, and the `dev` and `extra` splits worlds/toy_tables.py evaluates on), the scripted solver, the tiny
model and tokenizer, the supervised warm start and its addition check, the AUROC ceiling its levels
and styles allow (`auroc_ceiling`), which evaluated problems are not training problems
(`unseen_problems`), and the cache under
`.cache/toy/` (`.cache/toy-w<seed>/` for another world seed), rebuilt only when the recipe
changes. docs/toy.md describes the world and why it is built this way.

Not here: the demonstration that trains and evaluates on it (worlds/toy.py), the tables (worlds/toy_tables.py).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import platform
import random
import re
import sys
import time
from pathlib import Path

import torch

from metrics import auroc
from policy import RESERVED_TOKENS, add_reserved_tokens, init_reserved_rows
from rollout import build_prompt_ids, system_prompt
from worlds import tiny

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "worlds" / "toy_world"  # the world every run uses unless told (load_world checks it)

# --- the world's recipe (a change needs a new build: load_world refuses a world of another) ----
WORLD = {
    # What the recipe makes, and why (docs/toy.md; docs/journal/toy-protocol-v13.md compares the
    # candidates it was chosen from). `version` names the recipe: load_world refuses a world built
    # from another, and any change to a value here needs a new build and a new version.
    # - Problems: level L chains L + 1 additions of one-digit operands (two to six), so level 1 has
    #   729 problems to hold out from. With one addition at level 1 (81 problems), held-out pairs
    #   were a memorisation test: the model miscopied an unseen pair as a trained one, which alone
    #   cost the readout about 0.1 of AUROC. Held-out means unseen: the held-out generator skips
    #   every training problem (make_splits).
    # - The warm start states its confidence as a real model does, not as an oracle: overconfident
    #   by `overconfidence` logits in both channels, and aware of `noticed` of its slips (then "low"
    #   and the numeral 0.1), so that a readout calibrated after RL is one the loop made.
    # - In the readout format the warm start goes on past the slot with "high" or "low" ("high"
    #   with the solver's rate), so that the slot's hidden state carries a confidence and the rows
    #   that <CONF_HIGH>/<CONF_LOW> copy (policy.RESERVED_INIT_WORDS) mean something, as on a real
    #   model (the loop stops at the slot).
    # - The steps style's accuracy falls with the level steeply enough that, once RL has removed
    #   the direct style, a confidence from level and style can rank at AUROC 0.80 (gentler rates
    #   cap it below: 0.794 for 0.95 / 0.85 / 0.7 / 0.5 / 0.3).
    "version": 13,
    "seed": 1,  # the shipped build's (seed 0's warm start failed its addition check)
    "levels": 5,  # level L: L + first_additions - 1 additions of one-digit operands
    "first_additions": 2,  # additions at level 1
    "n_train": 2000,
    "n_test": 250,
    "held_out_level1": 0,  # where level 1 is one addition: how many of its 81 are held out (a seeded choice)
    "overconfidence": 1.0,  # the warm start states a rate p as sigmoid(logit(p) + this) (stated_rate)
    "noticed": 0.5,  # the share of its slips the solver notices: it then says "low", or the numeral 0.1
    # The scripted solver writes one of two styles, each half of the time (the first token
    # after the prompt tells them apart): "steps" writes every partial sum, "direct" writes the
    # whole sum at once. Per style and level: the probability that it is right (a partial sum
    # or the total slips by 1-2 otherwise), and the verbalized numeral it writes: its stated rate
    # (stated_rate), rounded to a tenth. The direct style is much less reliable from level 2 on:
    # that is what RL on the toy can learn (docs/toy.md).
    "styles": {
        "steps": {
            "p_correct": {"1": 0.98, "2": 0.9, "3": 0.7, "4": 0.4, "5": 0.15},
            "verbal": {"1": "1.0", "2": "1.0", "3": "0.9", "4": "0.6", "5": "0.3"},
        },
        "direct": {
            "p_correct": {"1": 0.9, "2": 0.5, "3": 0.3, "4": 0.1, "5": 0.05},
            "verbal": {"1": "1.0", "2": "0.7", "3": "0.5", "4": "0.2", "5": "0.1"},
        },
    },
    "vocab_size": 1024,
    "hidden": 96,
    "layers": 3,
    "heads": 3,
    "kv_heads": 1,
    "head_dim": 32,
    "intermediate": 256,
    "sft_steps": 1600,  # 800 left some worlds adding badly at level 2 (docs/toy.md)
    "sft_batch": 32,
    "sft_lr": 3e-3,
    # The warm start's channels, in turn: the readout and verbalized formats of the toy's runs.
    # Not the readout format without the analysis (tab:ablation's row): one step in five of it
    # gave a world 0 that could not add (0.71, then 0.74 after 400 more steps; docs/toy.md).
    "sft_channels": ["readout", "verbalized"],
    # The addition check: a warm start that does not add (sampled accuracy at T = 0.7 on training
    # problems of levels 1 and 2 in the steps style; the solver is right 0.98 and 0.9)
    # gives RL nothing to select and the readout little to read (docs/toy.md); level 2 is checked
    # too, since a warm start that adds at level 1 may still carry badly there.
    # Below a bar, more warm-start steps, at most `check_rounds` times; still below, the build
    # fails and says so.
    "check_min_acc": {"1": 0.85, "2": 0.8},
    "check_steps": 400,
    "check_rounds": 2,
}
ANALYSES = [
    "There are {k} additions and any of them could be off by one.",
    "With {k} additions a slip in a partial sum is the most likely error.",
    "The partial sums of the {k} additions are the steps that could be wrong; I cannot find other uncertainties.",
]


def make_problem(rng: random.Random, level: int, first_additions: int = 1) -> tuple[list[int], int]:
    ops = [rng.randint(1, 9) for _ in range(level + first_additions)]
    return ops, sum(ops)


def level_of(ops: list[int], world: dict) -> int:
    """The level of a problem of `ops` (level 1 has world["first_additions"] additions)."""
    return len(ops) - world["first_additions"]


def stated_rate(p: float, world: dict) -> float:
    """The rate the warm start states for a solution right with probability `p`: p itself, or
    overconfident by world["overconfidence"] logits.

    >>> [round(stated_rate(p, {"overconfidence": 1.0}), 3) for p in (0.15, 0.5, 0.9)]
    [0.324, 0.731, 0.961]
    """
    shift = world["overconfidence"]
    if shift == 0 or p in (0.0, 1.0):
        return p
    return 1.0 / (1.0 + math.exp(-(math.log(p / (1 - p)) + shift)))


def problem_text(ops: list[int]) -> str:
    return "What is " + " + ".join(map(str, ops)) + "?"


# The splits besides training (`train.jsonl`) and the held-out `test.jsonl`, all shipped with the world
DEV_SIZE = 250  # "dev": the first DEV_SIZE training problems, as many as the held-out split's
EXTRA_END = 1000  # "extra": the held-out generator's problems n_test .. EXTRA_END - 1
SPLITS = ("train", "test", "dev", "extra")


def held_out_pairs(world: dict) -> set[tuple[int, int]]:
    """The level-1 problems (operand pairs) that no training split holds: `held_out_level1` of
    the 81, a choice seeded by the world's seed."""
    pairs = [(a, b) for a in range(1, 10) for b in range(1, 10)]
    return set(random.Random(world["seed"] + 2).sample(pairs, world["held_out_level1"]))


def make_split(
    n: int, seed: int, prefix: str, levels: int, accept=lambda ops: True, first_additions: int = 1
) -> list[dict]:
    """`n` problems, levels cycled, in the math JSONL schema (plus `level` and `ops`); a problem
    that `accept(ops)` refuses is drawn again (at the same level)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        level = 1 + i % levels
        ops, answer = make_problem(rng, level, first_additions)
        while not accept(ops):
            ops, answer = make_problem(rng, level, first_additions)
        rows.append(
            {"id": f"{prefix}-{i:05d}", "problem": problem_text(ops), "answer": str(answer), "level": level, "ops": ops}
        )
    return rows


def make_splits(world: dict) -> dict[str, list[dict]]:
    """The world's splits: "train" (no level-1 problem of held_out_pairs); "test" and "extra", the
    held-out generator's first n_test and next EXTRA_END - n_test problems, none of them a
    training problem (level 1: only held_out_pairs); "dev", the first DEV_SIZE training problems
    (for tuning: training problems by design)."""
    held = held_out_pairs(world)
    train = make_split(
        world["n_train"],
        world["seed"],
        "toy-train",
        world["levels"],
        lambda ops: len(ops) > 2 or tuple(ops) not in held,
        world["first_additions"],
    )
    seen = {row["problem"] for row in train}
    held_out = make_split(
        EXTRA_END,
        world["seed"] + 1,
        "toy-test",
        world["levels"],
        lambda ops: problem_text(ops) not in seen and (len(ops) > 2 or tuple(ops) in held),
        world["first_additions"],
    )
    n_test = world["n_test"]
    return {"train": train, "test": held_out[:n_test], "dev": train[:DEV_SIZE], "extra": held_out[n_test:]}


def split_file(world_dir: Path, split: str) -> Path:
    """The JSONL of one of the world's SPLITS (each shipped with it: load_world checks them):
    "test", the held-out split; "dev", the first DEV_SIZE training problems (levels cycle, so 50 a
    level); "extra", the held-out generator carried on past `n_test` problems, to EXTRA_END. ValueError
    for another name."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: one of {', '.join(SPLITS)}")
    return world_dir / f"{split}.jsonl"


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


def solution_style(text: str) -> str:
    """The style a completion's solution is written in: "steps" where it writes partial sums
    ("3 + 5 = 8, 8 + 2 = 10"), else "direct" (one-addition solutions are the same text in
    both styles, and read "direct").

    >>> solution_style("3 + 5 = 8, 8 + 2 = 10. The answer is"), solution_style("3 + 5 + 2 = 10. The answer is")
    ('steps', 'direct')
    """
    return "steps" if "," in text.split(". The answer")[0] else "direct"


def auroc_ceiling(records: list[dict], levels: dict[str, int]) -> float | None:
    """AUROC of the best confidence that knows only each sample's level and solution style: every
    sample scored by the accuracy of its (level, style) cell among `records` (level 1 is one cell:
    its two styles are the same text). Samples without a confidence are left out, as the AUROC
    column leaves them out. In-sample, so it slightly flatters; a readout can pass it only by
    ranking right above wrong within a cell, which the toy's completions barely allow.

    >>> recs = [{"problem_id": p, "a": a, "c": 0.5, "text": t + ". The answer is"} for p, a, t in [
    ...     ("x", 1, "1 + 2 = 3"), ("x", 0, "1 + 2 = 4"), ("y", 1, "1 + 2 = 3, 3 + 4 = 7"), ("y", 0, "1 + 2 + 4 = 8")]]
    >>> auroc_ceiling(recs, {"x": 1, "y": 2})  # cells 0.5, 0.5 / 1.0 / 0.0: 3.5 of 4 pairs
    0.875
    """
    scored = [r for r in records if r["c"] is not None]
    cell_of = [
        (levels[r["problem_id"]], solution_style(r["text"]))
        for r in scored  # one addition reads "direct"
    ]
    cells: dict[tuple, list[int]] = {}
    for cell, record in zip(cell_of, scored):
        cells.setdefault(cell, []).append(record["a"])
    accuracy = {cell: sum(a) / len(a) for cell, a in cells.items()}
    return auroc([accuracy[cell] for cell in cell_of], [r["a"] for r in scored])


def levels_of(path: Path) -> dict[str, int]:
    """{problem id: level} of a toy split."""
    return {row["id"]: row["level"] for row in map(json.loads, path.read_text().splitlines())}


def scripted_completion(ops: list[int], channel: str, rng: random.Random, world: dict = WORLD) -> tuple[str, bool]:
    """One scripted solution: a style drawn half-and-half, right with that style's probability at
    this level, then the analysis and, after the slot, what the solver states: (verbalized) the
    style's numeral for the level or (readout) "high" with the style's stated rate (stated_rate),
    else "low"; after a slip it notices (world["noticed"] of them), "0.1" or "low". The loop stops
    readout rollouts at the slot; only the warm start goes on past it."""
    level = str(level_of(ops, world))
    style = rng.choice(sorted(world["styles"]))
    right = rng.random() < world["styles"][style]["p_correct"][level]
    steps, answer = solution_steps(ops, style, right, rng)
    analysis = rng.choice(ANALYSES).format(k=len(ops) - 1)
    noticed = not right and rng.random() < world["noticed"]
    text = steps + f". The answer is \\boxed{{{answer}}}. "
    text += "<confidence>" if channel == "readout_noanalysis" else f"<analysis> {analysis} </analysis> <confidence>"
    if channel == "verbalized":
        text += ("0.1" if noticed else world["styles"][style]["verbal"][level]) + "</confidence>"
    elif channel == "readout":  # the warm start only: a word that is "high" with the stated rate
        p_high = stated_rate(world["styles"][style]["p_correct"][level], world)
        text += ("high" if not noticed and rng.random() < p_high else "low") + "</confidence>"
    return text, answer == sum(ops)


def world_key(world: dict = WORLD) -> str:
    return hashlib.sha256(json.dumps(world, sort_keys=True).encode()).hexdigest()[:16]


def build_model(tokenizer, world: dict):
    """The toy's random Qwen3: tiny.build_model at the sizes of `world`."""
    return tiny.build_model(
        tokenizer,
        world["seed"],
        hidden=world["hidden"],
        intermediate=world["intermediate"],
        layers=world["layers"],
        heads=world["heads"],
        kv_heads=world["kv_heads"],
        head_dim=world["head_dim"],
    )


def _common_prefix(seqs: list[list[int]]) -> int:
    first, k = seqs[0], len(seqs[0])
    for s in seqs[1:]:
        k = next((i for i, (x, y) in enumerate(zip(first[:k], s)) if x != y), min(k, len(s)))
    return k


def warm_start(
    model, tokenizer, rows: list[dict], world: dict, log=print, steps: int | None = None, seed: int | None = None
) -> list[float]:
    """`steps` (default the world's sft_steps) supervised steps on scripted completions, drawn
    afresh each time (so the model learns the solver's distribution, slips included); loss on
    completion tokens only; `seed` (default the world's) seeds the draws.

    Steps take the channels of world["sft_channels"] in turn, and the levels in turn (with two
    channels and five levels every pair comes once in ten steps): a batch of one level pads
    little (a batch of all levels is 22% padding). Every prompt of a channel starts
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
    # tokenizer stays without them, so the loop adds them as on a real checkpoint, and their
    # rows start from those of "high" and "low", which the readout format's warm start trains.
    with_reserved = copy.deepcopy(tokenizer)
    add_reserved_tokens(model, with_reserved)

    def tie_reserved_rows() -> None:
        init_reserved_rows(model, with_reserved, RESERVED_TOKENS)

    prompts = {ch: [build_prompt_ids(with_reserved, r["problem"], ch, "math") for r in rows] for ch in set(channels)}
    shared = {ch: _common_prefix(prompts[ch]) - 1 for ch in prompts}  # leave >= 1 token to each row
    optimizer = torch.optim.AdamW(model.parameters(), lr=world["sft_lr"], weight_decay=0.0)
    steps, bs = world["sft_steps"] if steps is None else steps, world["sft_batch"]
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50) * max(0.05, 1 - s / steps))
    model.train()
    losses, t0 = [], time.perf_counter()
    by_level = [[i for i, r in enumerate(rows) if r["level"] == level] for level in range(1, world["levels"] + 1)]
    for step in range(steps):
        channel = channels[step % len(channels)]
        k = shared[channel]
        batch = []
        for i in rng.sample(by_level[step % len(by_level)], bs):
            text, _ = scripted_completion(rows[i]["ops"], channel, rng, world)
            batch.append(
                (prompts[channel][i][k:], tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id])
            )
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
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        tie_reserved_rows()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if (step + 1) % 100 == 0:
            log(
                f"[toy] warm start {step + 1}/{steps}: loss {sum(losses[-100:]) / 100:.3f} "
                f"({time.perf_counter() - t0:.0f} s)"
            )
    model.eval()
    torch.set_num_threads(threads)
    return losses


def addition_accuracy(
    model, tokenizer, rows: list[dict], seed: int, level: int = 1, n: int = 100, samples: int = 4
) -> float:
    """Accuracy on the first `n` problems of `level` in `rows`, `samples` each, sampled as the
    toy's runs sample (T = 0.7, top-k 50; seeded), through the verbalized prompt; of a problem of
    two or more additions, of the steps-style samples only (the direct style is meant to be unreliable). Whether a warm
    start learned to add: greedy decoding is a weaker test (a development build was right 1.00
    greedy and 0.93 sampled on level 1, 0.58 and 0.51 on level 2). Prompts of one
    length are generated together, without padding."""
    chosen = [r for r in rows if r["level"] == level][:n]
    by_length: dict[int, list[tuple[list[int], str, bool]]] = {}
    for row in chosen:
        ids = build_prompt_ids(tokenizer, row["problem"], "verbalized", "math")
        by_length.setdefault(len(ids), []).append((ids, row["answer"], len(row["ops"]) > 2))
    torch.manual_seed(seed)
    graded = []
    with torch.no_grad():
        for width, group in sorted(by_length.items()):
            out = model.generate(
                input_ids=torch.tensor([ids for ids, _, _ in group]),
                max_new_tokens=48,
                do_sample=True,
                temperature=0.7,
                top_k=50,
                num_return_sequences=samples,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
            for k, completion in enumerate(texts):
                _, answer, steps_only = group[k // samples]
                if steps_only and solution_style(completion) != "steps":
                    continue
                boxed = re.search(r"\\boxed\{(\d+)\}", completion)
                graded.append(boxed is not None and boxed.group(1) == answer)
    if not graded:
        return 0.0
    return sum(graded) / len(graded)


def addition_check(model, tokenizer, rows: list[dict], seed: int, world: dict) -> dict[str, float]:
    """addition_accuracy at each level of world["check_min_acc"] ({level: bar})."""
    return {level: addition_accuracy(model, tokenizer, rows, seed, int(level)) for level in world["check_min_acc"]}


def _check_text(check: dict[str, float], world: dict) -> str:
    return ", ".join(
        f"{check[level]:.2f} at level {level} (needs {bar})" for level, bar in world["check_min_acc"].items()
    )


def _passes(check: dict[str, float], world: dict) -> bool:
    return all(check[level] >= bar for level, bar in world["check_min_acc"].items())


def checked_warm_start(
    model, tokenizer, rows: list[dict], world: dict, log=print
) -> tuple[list[float], list[dict[str, float]]]:
    """The warm start, then the addition check (world["check_*"]): below a bar, `check_steps`
    more steps (fresh draws), at most `check_rounds` times; RuntimeError, in one line, when the
    model still cannot add. Returns the losses and each check's accuracies."""
    losses = warm_start(model, tokenizer, rows, world, log)
    checks = [addition_check(model, tokenizer, rows, world["seed"], world)]
    for extra in range(1, world["check_rounds"] + 1):
        if _passes(checks[-1], world):
            break
        log(
            f"[toy] addition check (sampled at T = 0.7; steps style): the warm start is right "
            f"{_check_text(checks[-1], world)}: {world['check_steps']} more warm-start steps"
        )
        losses += warm_start(
            model, tokenizer, rows, world, log, steps=world["check_steps"], seed=world["seed"] + 1000 * extra
        )
        checks.append(addition_check(model, tokenizer, rows, world["seed"] + extra, world))
    if not _passes(checks[-1], world):
        raise RuntimeError(
            f"toy world seed {world['seed']}: after {len(losses)} warm-start steps the model is right "
            f"{_check_text(checks[-1], world)} (sampled at T = 0.7; steps style), so RL and the "
            f"readout would have little to work with; build another world (--world-seed)"
        )
    log(f"[toy] addition check passed: right {_check_text(checks[-1], world)}")
    return losses, checks


# --- the shipped world, and building another ----------------------------------------------
CHECKSUMS = "SHA256SUMS"  # in the world's folder, in `sha256sum` format: `sha256sum -c SHA256SUMS` checks it too
REBUILD = "python -m worlds.toy_build --rebuild OUT"


class WorldError(RuntimeError):
    """A world folder that is not a complete, intact world of this recipe (one line, says which file)."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_world(world_dir: Path = SHIPPED) -> tuple[dict, Path]:
    """The recipe and folder of a built world (by default the shipped one, worlds/toy_world/),
    after checking every file against its SHA256SUMS and its recipe against this module's WORLD
    (the world seed may differ). Nothing is rebuilt: WorldError, in one line, naming what is wrong."""
    world_dir = Path(world_dir)
    sums = world_dir / CHECKSUMS
    if not sums.is_file():
        raise WorldError(f"{world_dir}: no {CHECKSUMS} there, so not a built toy world (`{REBUILD}` builds one)")
    for line in sums.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        path = world_dir / name.lstrip("*")
        if not path.is_file():
            raise WorldError(f"{path}: missing from the toy world ({CHECKSUMS} lists it)")
        if sha256(path) != digest:
            raise WorldError(
                f"{path}: its SHA-256 is not the one in {sums}: the world was changed or damaged "
                f"(git checkout {world_dir} restores the shipped one)"
            )
    built = json.loads((world_dir / "world.json").read_text())["world"]
    if {**built, "seed": WORLD["seed"]} != WORLD:
        raise WorldError(
            f"{world_dir}: built from recipe version {built.get('version')}, but worlds/toy_build.py's WORLD is "
            f"version {WORLD['version']} (or differs from it): `{REBUILD}` builds this recipe's world"
        )
    return built, world_dir


def build_world(out: Path, world: dict = WORLD, log=print) -> Path:
    """Splits, tokenizer and warm-started model under `out` (a new or empty folder), and last its
    SHA256SUMS. Seeded, but floating point differs between machines and over 1,600 warm-start steps
    the difference compounds: another machine's build is another world (docs/toy.md)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise WorldError(f"{out}: not empty; a world is built into a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    splits = make_splits(world)
    train = splits["train"]
    rng = random.Random(world["seed"])
    corpus = [
        system_prompt(ch, dom) for ch in ("readout", "verbalized", "readout_noanalysis") for dom in ("math", "code")
    ] * 4
    corpus += [
        r["problem"] + " " + scripted_completion(r["ops"], ch, rng, world)[0]
        for r in train
        for ch in ("readout", "verbalized")
    ]
    corpus += ["high low 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.0 </confidence>"] * 8
    tokenizer = tiny.build_tokenizer(corpus, world["vocab_size"])
    model = build_model(tokenizer, world)
    log(
        f"[toy] building a toy world (seed {world['seed']}) under {out} "
        f"({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
        f"{world['sft_steps']} warm-start steps)"
    )
    losses, checks = checked_warm_start(model, tokenizer, train, world, log)
    model.save_pretrained(out / "model", safe_serialization=True)
    tokenizer.save_pretrained(out / "model")
    for name in SPLITS:
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in splits[name]))
    (out / "world.json").write_text(
        json.dumps(
            {
                "key": world_key(world),
                "world": world,
                "built": {
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
                    "seconds": round(time.perf_counter() - t0, 1),
                },
                "sft_first_loss": losses[0],
                "sft_last_loss": sum(losses[-50:]) / 50,
                "sft_steps_run": len(losses),
                "addition_checks": checks,
            },
            indent=1,
        )
        + "\n"
    )
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    (out / CHECKSUMS).write_text("".join(f"{sha256(out / name)}  {name}\n" for name in files))
    log(f"[toy] world built in {time.perf_counter() - t0:.0f} s")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Build a toy world (research on the toy itself; `bash run.sh toy` uses the shipped "
        "worlds/toy_world/ and never builds one). Another machine's build differs from the shipped world."
    )
    parser.add_argument("--rebuild", metavar="OUT", required=True, help="a new or empty folder to build into")
    parser.add_argument(
        "--world-seed", type=int, default=WORLD["seed"], help=f"the world's seed (default {WORLD['seed']})"
    )
    args = parser.parse_args(argv)
    if args.world_seed < 0:
        sys.exit(f"toy_build: --world-seed {args.world_seed}: a seed is a non-negative integer")
    print(
        f"[toy] building a toy world into {args.rebuild}. It will differ from the shipped worlds/toy_world/ "
        f"(floating point differs between machines and compounds over the warm start): its results are "
        f"not the documented ones. Use it with `python -m worlds.toy --world {args.rebuild}`.",
        flush=True,
    )
    try:
        build_world(Path(args.rebuild), {**WORLD, "seed": args.world_seed})
    except (WorldError, RuntimeError) as error:
        sys.exit(f"toy_build: {error}")


if __name__ == "__main__":
    main()
