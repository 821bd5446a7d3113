"""Padding waste of the micro-batches the update builds: credo's `micro_batches` against
the old consecutive-rows batching, and packing.

    python bench/bench_padding.py [--steps 6] [--no-loop] [--batches 20]

Length sources:
* tiny: the training batches of a real `--steps`-step run of configs/tiny.yaml
  (lengths recorded from every batch train_step receives; G = 4, micro-batch 4,
  so every micro-batch is one whole group);
* math_g8_mb2: the paper's math layout (tab:hyper: G = 8, micro-batch 2, 128 rollouts a
  step) with synthetic lengths: prompts uniform in [60, 400] tokens (one per group),
  completions log-normal (median 1,500) capped at 8,192 (truncated), `--batches` steps;
* math_g8_mb16: the same lengths with micro-batches of 16 rows (budget of 16 rows).
Strategies: `consecutive` (rows in order, `micro` at a time: plain row micro-batches),
`credo_padded` / `credo_packed` (packing.micro_batches as make_step builds them, with
micro_batch_tokens=auto = micro full-length rows: whole groups where they fit the budget,
the rows of the others length-sorted; padded to the longest row, or packed into one row
(pack_sequences, the default), which has no padding), `packed_rows` (first-fit-decreasing
packing of the sequences into rows of max_prompt + max_completion tokens).
pad_fraction = padded token slots / all token slots. Also per strategy: micro-batches per
batch (fewer = fewer, fuller forwards), and for credo the share of tokens whose group was
split (their prompt is then packed once per micro-batch that holds some of them). Prints one JSON line and writes
bench/results/padding.json; `pad_fraction` is credo's on the paper's layout.
"""

import argparse
import os
import platform
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import config  # noqa: E402
from bench.results_io import report  # noqa: E402
from kernels import packing  # noqa: E402


def consecutive(n: int, micro: int) -> list[list[int]]:
    return [list(range(k, min(k + micro, n))) for k in range(0, n, micro)]


def packed_rows_pad(lengths: list[int], capacity: int) -> float:
    free: list[int] = []
    for length in sorted(lengths, reverse=True):
        for i, room in enumerate(free):
            if room >= length:
                free[i] -= length
                break
        else:
            free.append(capacity - length)
    return 1.0 - sum(lengths) / (len(free) * capacity)


def holds_whole_groups(rows: list[int], group: int) -> bool:
    """`rows` are whole groups, each in order (qG, ..., qG + G - 1): their prompts are packed once.

    >>> holds_whole_groups([4, 5, 0, 1], 2), holds_whole_groups([1, 3], 2)
    (True, False)
    """
    starts = rows[::group]
    return (
        len(rows) % group == 0
        and rows == [s + i for s in starts for i in range(group)]
        and all(s % group == 0 for s in starts)
    )


def strategies(batches: list[list[int]], micro: int, group: int, capacity: int) -> dict:
    """Pad fractions over all batches (token slots summed over batches), the mean number of
    micro-batches per batch, and for credo the share of tokens in groups split over several
    micro-batches (their shared prompt is packed once per micro-batch that holds some of them). credo's budget is
    micro_batch_tokens=auto: `micro` rows of capacity + 2 tokens."""
    budget = micro * (capacity + 2)
    slots = {"consecutive": 0, "credo_padded": 0, "credo_packed": 0, "packed_rows": 0}
    counts = {name: 0 for name in ("consecutive", "credo_padded", "credo_packed")}
    split = {name: 0 for name in ("credo_padded", "credo_packed")}
    tokens = 0
    for lengths in batches:
        n = len(lengths)
        tokens += sum(lengths)
        plans = {
            "consecutive": consecutive(n, micro),
            "credo_padded": packing.micro_batches(lengths, budget, group, packed=False),
            "credo_packed": packing.micro_batches(lengths, budget, group, packed=True),
        }
        for name, plan in plans.items():
            counts[name] += len(plan)
            slots[name] += (
                sum(lengths[i] for b in plan for i in b)
                if name == "credo_packed"
                else sum(len(b) * max(lengths[i] for i in b) for b in plan)
            )
            if name in split:
                split[name] += sum(lengths[i] for b in plan if not holds_whole_groups(b, group) for i in b)
        slots["packed_rows"] += sum(lengths) / (1 - packed_rows_pad(lengths, capacity))
    return (
        {f"{name}_pad_fraction": round(1 - tokens / s, 4) for name, s in slots.items()}
        | {f"{name}_micro_batches": round(c / len(batches), 2) for name, c in counts.items()}
        | {f"{name}_split_group_token_fraction": round(t / tokens, 4) for name, t in split.items()}
        | {
            "micro": micro,
            "group": group,
            "budget_tokens": budget,
            "batches": len(batches),
            "rows_per_batch": len(batches[0]),
            "packed_row_capacity": capacity,
        }
    )


def synthetic_math(batches: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(batches):
        lengths = []
        for _ in range(16):  # 16 questions x G = 8
            prompt = rng.randint(60, 400)
            lengths += [prompt + min(8192, max(16, int(rng.lognormvariate(7.31, 0.8)))) for _ in range(8)]
        out.append(lengths)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--no-loop", action="store_true", help="skip the real tiny run")
    args = parser.parse_args()
    result = {
        "bench": "padding",
        "command": " ".join(["python"] + sys.argv),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
    }
    math_batches = synthetic_math(args.batches)
    result["math_g8_mb2"] = strategies(math_batches, 2, 8, 1024 + 8192)
    result["math_g8_mb16"] = strategies(math_batches, 16, 8, 1024 + 8192)
    if not args.no_loop:
        from bench.bench_tiny import tiny_run

        seen: list[tuple[list[int], int, int]] = []
        tiny_run(
            args.steps,
            [],
            on_batch=lambda batch, cfg: seen.append(
                (batch.attention_mask.sum(dim=1).tolist(), cfg.per_device_batch_size, cfg.group_size)
            ),
        )
        cfg = config.load_config("tiny")
        result["tiny"] = strategies(
            [lengths for lengths, _, _ in seen],
            seen[0][1],
            seen[0][2],
            cfg.max_prompt_tokens + cfg.max_completion_tokens,
        )
    result["pad_fraction"] = result["math_g8_mb2"]["credo_packed_pad_fraction"]
    result["target_pad_fraction"] = 0.10
    report(result, "padding")


if __name__ == "__main__":
    main()
