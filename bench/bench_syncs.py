"""Where the training step makes the host wait for the GPU (CUDA): host synchronisations per
micro-batch and per step, and the lines that cause them.

    python bench/bench_syncs.py [--shape small] [--rows 4] [--seq 512] [--compile-layers auto|on|off]

A synchronisation (a `.item()`, a `.cpu()`, a `.tolist()`, a blocking copy, a data-dependent
shape) lets the GPU's queue drain: the host then launches the next kernels while the GPU
idles. A few per micro-batch are harmless; one per layer makes the step launch-bound.

`credo.train_step` runs on `--rows` rollouts of about `--seq` tokens, packed, in
bf16 over fp32 weights as training runs on CUDA, twice with the rows in one micro-batch and
twice with each row its own (micro_batch_tokens = seq): a warm-up (compilation, allocator
growth), then a counted run under torch.cuda.set_sync_debug_mode("warn"). Every warning is
attributed to the frame that issued it (file:line). The difference between the two counted
runs, divided by the extra micro-batches, is the cost per micro-batch; what is left is per step.
Prints one JSON line and writes bench/results/syncs_cuda.json. Needs CUDA: without it, it
says so and exits 2. Target: at most 3 per micro-batch (MAX_PER_MICRO_BATCH).
"""

import argparse
import collections
import dataclasses
import os
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import confidence  # noqa: E402
import config  # noqa: E402
import credo  # noqa: E402
import policy as pol  # noqa: E402
import rollout as ro  # noqa: E402
import verifier  # noqa: E402
from bench.bench_mfu import SHAPES, NoStep  # noqa: E402
from bench.results_io import report  # noqa: E402
from schema import Config  # noqa: E402

# The method's own: credit reads the group's c between forward and backward (eq:disc needs
# |a - c|), and transformers checks the packed row's all-ones mask once per forward.
MAX_PER_MICRO_BATCH = 3


def sync_sites(records: list[warnings.WarningMessage]) -> collections.Counter:
    """Counts of synchronising call sites, `path:line` relative to the project (or to the
    installed package for a library's frame), from recorded sync-debug warnings.

    >>> w = warnings.WarningMessage("called a synchronizing CUDA operation", UserWarning, str(ROOT / "credo.py"), 7)
    >>> other = warnings.WarningMessage("unrelated", UserWarning, "/x/site-packages/transformers/masking_utils.py", 3)
    >>> dict(sync_sites([w, w, other]))
    {'credo.py:7': 2}
    """
    sites = collections.Counter()
    for record in records:
        if "synchroniz" not in str(record.message):
            continue
        path = Path(record.filename)
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(*path.parts[-2:])
        sites[f"{where}:{record.lineno}"] += 1
    return sites


def per_micro_batch(one: int, many: int, extra: int) -> float:
    """Synchronisations that each micro-batch adds: (many - one) / extra micro-batches.

    >>> per_micro_batch(one=7, many=13, extra=3)
    2.0
    """
    return (many - one) / extra


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="small")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--compile-layers", choices=["auto", "on", "off"], default="auto")
    # test hook (tests/test_bench.py): the same runs on the CPU, where nothing synchronises
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_syncs: torch sees no CUDA device; host synchronisations are a CUDA matter", file=sys.stderr)
        return 2
    if args.rows < 2 or args.seq < 64:
        parser.error(f"--rows must be >= 2 and --seq >= 64; got {args.rows}, {args.seq}")
    from transformers import Qwen3Config, Qwen3ForCausalLM

    device, shape = torch.device(args.device), SHAPES[args.shape]
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(
            Qwen3Config(**shape, max_position_embeddings=max(4096, args.seq), pad_token_id=0)
        ).float()
    compiled = config.compiles_layers(
        Config(compile_layers={"on": True, "off": False}.get(args.compile_layers, "auto")), device.type
    )
    prompt = args.seq // 4
    # groups of one rollout: each micro-batch holds whole groups in both layouts, so the two
    # runs do the same work (a row's c comes from its own training forward) in 1 or `rows` pieces
    cfg = config.load_config(
        "tiny",
        [
            "group_size=1",
            "adv_std=population",  # a group of one has no sample std
            f"per_device_batch_size={args.rows}",
            "grad_accum=1",
            f"precision={'bf16' if cuda else 'fp32'}",
            f"max_prompt_tokens={prompt}",
            f"max_completion_tokens={args.seq - prompt}",
        ],
    )
    rng = torch.Generator().manual_seed(0)
    rollouts = []
    for i in range(args.rows):
        length = args.seq - 8 * i  # distinct lengths, as real rollouts have
        ids = torch.randint(3, shape["vocab_size"] - 2, (length,), generator=rng).tolist()
        c = length - prompt
        rollouts.append(
            ro.Rollout(
                "q0",
                ids[:prompt],
                ids[prompt:],
                "",
                "stop",
                ro.Segments(c - 12, c - 11, c - 3, c - 2, None, True, True, True),
            )
        )
    batch = pol.collate(rollouts, 0)
    valid = batch.slot_pos >= 0
    out = credo.Outcomes(
        correct=torch.tensor([float(i % 2) for i in range(args.rows)]),
        verdicts=[verifier.Verdict(passed=i % 2 == 1, reason="set by hand") for i in range(args.rows)],
        fmt=valid.float(),
        valid=valid,
        reported=None,
        truncated=torch.zeros_like(valid),
    )
    policy = pol.Policy(model, None, shape["vocab_size"] - 2, shape["vocab_size"] - 1, pol.compute_dtype(cfg))
    if compiled:
        pol.compile_update(policy)
    plan, optimizer = confidence.plan(cfg), NoStep(model)
    layouts = {
        "one": dataclasses.replace(cfg, pack_sequences=True, micro_batch_tokens=args.rows * args.seq),
        "each_row": dataclasses.replace(cfg, pack_sequences=True, micro_batch_tokens=args.seq),
    }
    counted, micro_batches = {}, {}
    for name, layout in layouts.items():
        credo.train_step(
            credo.Learner(policy, optimizer, layout, plan), credo.make_step(layout, 1000, batch, out)
        )  # warm-up
        if cuda:
            torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            try:
                stats = credo.train_step(
                    credo.Learner(policy, optimizer, layout, plan), credo.make_step(layout, 1000, batch, out)
                )
            finally:
                if cuda:
                    torch.cuda.set_sync_debug_mode("default")
        counted[name], micro_batches[name] = sync_sites(records), stats.micro_batches
    extra = micro_batches["each_row"] - micro_batches["one"]
    total = {name: sum(sites.values()) for name, sites in counted.items()}
    per_mb = per_micro_batch(total["one"], total["each_row"], extra)
    result = {
        "bench": "syncs",
        "command": " ".join(["python"] + sys.argv),
        "device": device.type,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "shape": args.shape,
        "rows": args.rows,
        "seq": args.seq,
        "compile_layers": compiled,
        "micro_batches": micro_batches,
        "syncs": total,
        "per_micro_batch": round(per_mb, 2),
        "per_step": round(total["one"] - per_mb * micro_batches["one"], 2),
        "sites": {name: dict(sites.most_common()) for name, sites in counted.items()},
        "target_per_micro_batch": MAX_PER_MICRO_BATCH,
        "meets_target": per_mb <= MAX_PER_MICRO_BATCH,
        "host": f"{os.uname().nodename}",
    }
    report(result, f"syncs_{device.type}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
