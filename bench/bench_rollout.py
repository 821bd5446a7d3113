"""Rollout: the vLLM engine against the HF engine on the same prompts and lengths, and
the share of step time spent in rollout, verify, train and sync on `configs/tiny.yaml`.

    python bench/bench_rollout.py [--questions 8] [--repeats 3] [--steps 10] [--no-loop]

Engines: both built by `rollout.make_engine` from the tiny model, same prompts (the
first `--questions` of the tiny data, G = group_size samples each), same sampling
settings and max_completion_tokens. Rounds run each engine once, in turn (the first
round is a warm-up); tokens/s = generated tokens / generate() wall time, medians.
Shares: a `--steps`-step tiny run (bench_tiny.tiny_run, vLLM engine), medians of
metrics.jsonl after the first step. Prints one JSON line and writes
bench/results/rollout_<device>.json.
"""

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.bench_tiny import tiny_run  # noqa: E402
from bench.results_io import report  # noqa: E402


def engines_side_by_side(questions: int, repeats: int) -> dict:
    import torch

    import confidence
    import config
    import engine as eng
    import policy as pol
    import problems
    import rollout as ro

    cfg = config.load_config("tiny")
    policy = pol.load_policy(cfg.model, torch.device("cpu"))
    model, tokenizer = policy.model, policy.tokenizer
    rows = problems.load_rows(cfg.train_data, cfg.domain)[:questions]
    prompts = [ro.build_prompt_ids(tokenizer, r["problem"], cfg.channel, cfg.domain, cfg.enable_thinking) for r in rows]
    times = {"vllm": [], "hf": []}
    tokens = {"vllm": [], "hf": []}
    with tempfile.TemporaryDirectory() as tmp:
        engines = {
            name: eng.make_engine(
                dataclasses.replace(cfg, engine=name),
                confidence.plan(cfg),
                model,
                tokenizer,
                cfg.model,
                Path(tmp) / name,
                torch.float32,
            )
            for name in times
        }
        for round_ in range(repeats + 1):
            for name, engine in engines.items():
                start = time.perf_counter()
                samples = engine.generate(prompts, cfg.group_size, seed=round_)
                elapsed = time.perf_counter() - start
                if round_:  # round 0: warm-up
                    times[name].append(elapsed)
                    tokens[name].append(sum(len(s.token_ids) for s in samples))
    tok_s = {name: statistics.median(t / s for t, s in zip(tokens[name], times[name])) for name in times}
    return {
        "questions": questions,
        "group_size": cfg.group_size,
        "max_completion_tokens": cfg.max_completion_tokens,
        "prompt_tokens_mean": round(sum(map(len, prompts)) / len(prompts), 1),
        **{f"{name}_tok_s": round(v, 1) for name, v in tok_s.items()},
        **{f"{name}_generated_tokens": tokens[name] for name in times},
        **{f"{name}_s": [round(s, 3) for s in times[name]] for name in times},
        "vllm_vs_hf_tok_s_ratio": round(tok_s["vllm"] / tok_s["hf"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-loop", action="store_true", help="skip the tiny run (step-time shares)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    result = {
        "bench": "rollout",
        "command": " ".join(["python"] + sys.argv),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        **engines_side_by_side(args.questions, args.repeats),
    }
    if not args.no_loop:
        loop = tiny_run(args.steps, [])
        result["tiny_loop"] = {k: v for k, v in loop.items() if k not in ("bench", "machine")}
        result.update({k: loop[k] for k in ("share_rollout", "share_verify", "share_train", "share_sync")})
        result["device"] = loop["device"]
    result["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    report(result, f"rollout_{result.get('device', 'cpu')}")


if __name__ == "__main__":
    main()
