"""Model FLOPs utilisation of the training step (forward + backward with the project's
loss) for a Qwen3-1.7B-shaped model at 4k tokens in bf16 (CUDA); on a CPU a small shape,
reporting achieved FLOP/s only (no MFU claim: no meaningful dense peak).

    python bench/bench_mfu.py [--shape qwen3-1.7b|small] [--rows 1] [--seq 4096] [--iters 5]
                              [--prompt 256] [--activation-checkpointing]
                              [--compile-layers auto|on|off] [--optimizer none|adamw] [--profile]

The step is `credo.train_step` on one collated batch (`--rows` rollouts of `--seq`
tokens, the first `--prompt` of them the prompt (default 256, or seq/4 up to 512 tokens), a readout
slot near the end; group_size = rows): forward, readout, credit, loss, backward, gradient
norm, and with `--optimizer adamw` a real AdamW step (credo.make_optimizer: fused on CUDA, as
in training; its fp32 moments count in the peak memory; `none`, the default, times forward +
backward only). Weights are fp32
with bf16 autocast on CUDA (precision=bf16, as the paper's runs), fp32 on CPU. Decoder layers
and log-prob blocks run compiled (policy.compile_update) as training's compile_layers=auto decides: on CUDA, not
on a CPU; `--compile-layers` forces it. The two warm-up steps include the compilation. Random
weights (the shape is what matters). Model FLOPs per token = 6 x (matmul parameters of
the layers) + 6 x 2 x layers x heads x head_dim x (causal attention: mean context
(T+1)/2) x 2, plus 6 x V x hidden for each completion token (only those are scored: the
prompt's columns never meet lm_head); the lm_head recomputation of the chunked log-probs
and the readout are not counted (hardware work, not model work).
MFU = achieved model FLOP/s / dense bf16 peak of the GPU, looked up from its name
(unknown GPU: `mfu` null). Median over `--iters` timed steps after 2 warm-up steps.
Prints one JSON line and writes bench/results/mfu_<device>.json.
"""

import argparse
import os
import platform
import statistics
import sys
import time
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
from bench.results_io import report  # noqa: E402
from infra import memfit, parallel  # noqa: E402
from schema import Config  # noqa: E402

SHAPES = {
    "qwen3-1.7b": memfit.QWEN3_SHAPES["Qwen/Qwen3-1.7B"],  # its config.json: tied embeddings
    "small": dict(
        vocab_size=151936,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        tie_word_embeddings=False,
    ),
    # for the tests of the benchmarks' own logic: the figures mean nothing
    "test": dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        tie_word_embeddings=False,
    ),
}

# Dense (no sparsity) bf16 tensor-core peak, FLOP/s, by a substring of torch.cuda.get_device_name().
DENSE_BF16_PEAK = [
    ("H200", 989e12),
    ("GH200", 989e12),
    ("H100 NVL", 835e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
]


def dense_bf16_peak(name: str) -> float | None:
    for key, peak in DENSE_BF16_PEAK:
        if key in name:
            return peak
    return None


def model_flops_per_step(shape: dict, rows: int, seq: int, scored: int) -> float:
    """scored: tokens per row whose log-prob is computed (the completion): only they meet lm_head."""
    h, inter, layers = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    heads, kv, hd, vocab = (
        shape["num_attention_heads"],
        shape["num_key_value_heads"],
        shape["head_dim"],
        shape["vocab_size"],
    )
    per_layer = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * inter
    tokens = rows * seq
    attention = 2 * 2 * layers * heads * hd * (seq + 1) / 2 * tokens  # QK^T and AV, causal, forward
    forward = 2 * layers * per_layer * tokens + 2 * vocab * h * rows * scored + attention
    return 3 * forward  # forward + backward (2x)


class NoStep:
    """An optimizer whose step does nothing: the benchmark times forward + backward."""

    def __init__(self, model):
        self.model = model

    def step(self):
        pass

    def zero_grad(self, set_to_none=True):
        self.model.zero_grad(set_to_none=set_to_none)


def profile_step(step, cuda: bool, top: int = 30) -> dict:
    """One more step under torch.profiler: its operators and kernels by self time on the
    device (CUDA; the host's time on a CPU), the `top` first, as the profiler's own table
    lists them (an operator's self device time includes its kernels, which are listed too,
    as in the H100 profile of 2026-11-24)."""
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        step()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key), reverse=True)
    return {
        "sorted_by": key,
        "top": [
            {"name": e.key[:100], "self_ms": round(getattr(e, key) / 1e3, 3), "calls": e.count} for e in events[:top]
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--shape", choices=list(SHAPES), default="qwen3-1.7b" if cuda else "small")
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--seq", type=int, default=4096 if cuda else 512)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument(
        "--prompt", type=int, default=None, help="prompt tokens of each row (default 256, seq/4 up to 512)"
    )
    parser.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute each decoder layer in backward (parallel.enable_activation_checkpointing)",
    )
    parser.add_argument(
        "--compile-layers",
        choices=["auto", "on", "off"],
        default="auto",
        help="torch.compile the decoder layers and log-prob blocks (policy.compile_update); "
        "auto: as training, on CUDA only",
    )
    parser.add_argument(
        "--optimizer",
        choices=["none", "adamw"],
        default="none",
        help="adamw: a real AdamW step (its state counts in the peak memory); none: no step",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the timed steps, profile one more (torch.profiler) and report its top operators",
    )
    args = parser.parse_args()
    if args.prompt is not None and not 0 < args.prompt < args.seq - 12:
        parser.error(
            f"--prompt must leave a completion of more than 12 tokens: 0 < prompt < seq - 12, got {args.prompt}"
        )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    device = torch.device("cuda" if cuda else "cpu")
    shape = SHAPES[args.shape]
    torch.manual_seed(0)
    model_config = Qwen3Config(**shape, max_position_embeddings=max(40960, args.seq), pad_token_id=0)
    with torch.device(device):
        model = Qwen3ForCausalLM(model_config).float()
    if args.activation_checkpointing:
        parallel.enable_activation_checkpointing(model)
    compiled = config.compiles_layers(
        Config(compile_layers={"on": True, "off": False}.get(args.compile_layers, "auto")), device.type
    )
    prompt = args.prompt or (256 if args.seq > 512 else args.seq // 4)
    cfg = config.load_config(
        "tiny",
        [
            f"group_size={args.rows}",
            "adv_std=population",  # a group of one (--rows 1) has no sample std; the cost is the same
            f"per_device_batch_size={args.rows}",
            "grad_accum=1",
            f"precision={'bf16' if cuda else 'fp32'}",
            f"max_prompt_tokens={prompt}",
            f"max_completion_tokens={args.seq - prompt}",
        ],
    )
    rng = torch.Generator().manual_seed(0)
    rollouts = []
    for _ in range(args.rows):
        ids = torch.randint(3, shape["vocab_size"] - 2, (args.seq,), generator=rng).tolist()
        c = args.seq - prompt
        seg = ro.Segments(c - 12, c - 11, c - 3, c - 2, None, True, True, True)
        rollouts.append(ro.Rollout("q0", ids[:prompt], ids[prompt:], "", "stop", seg))
    batch = pol.collate(rollouts, 0)
    correct = torch.tensor([float(i % 2) for i in range(args.rows)])
    valid = batch.slot_pos >= 0
    high_id, low_id = shape["vocab_size"] - 2, shape["vocab_size"] - 1
    optimizer = (
        NoStep(model) if args.optimizer == "none" else credo.make_optimizer(model, cfg, device.type)
    )  # as training's
    policy = pol.Policy(model, None, high_id, low_id, pol.compute_dtype(cfg))  # random weights: no tokenizer
    if compiled:
        pol.compile_update(policy)
    verdicts = [verifier.Verdict(passed=a == 1, reason="set by hand") for a in correct.tolist()]
    out = credo.Outcomes(
        correct=correct,
        verdicts=verdicts,
        fmt=valid.float(),
        valid=valid,
        reported=None,
        truncated=torch.zeros_like(valid),
    )
    plan = confidence.plan(cfg)

    def step():
        credo.train_step(credo.Learner(policy, optimizer, cfg, plan), credo.make_step(cfg, 1000, batch, out))
        if cuda:
            torch.cuda.synchronize()

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    warmup, times = [], []
    for i in range(2 + args.iters):
        start = time.perf_counter()
        step()
        (times if i >= 2 else warmup).append(time.perf_counter() - start)
    seconds = statistics.median(times)
    flops = model_flops_per_step(shape, args.rows, args.seq, args.seq - prompt)
    name = torch.cuda.get_device_name() if cuda else f"{platform.machine()} {os.cpu_count()} cpus"
    peak = dense_bf16_peak(name) if cuda else None
    result = {
        "bench": "mfu",
        "command": " ".join(["python"] + sys.argv),
        "device": device.type,
        "device_name": name,
        "shape": args.shape,
        **{k: shape[k] for k in ("num_hidden_layers", "hidden_size", "vocab_size")},
        "rows": args.rows,
        "seq": args.seq,
        "prompt": prompt,
        "tokens": args.rows * args.seq,
        "precision": cfg.precision,
        "activation_checkpointing": args.activation_checkpointing,
        "compile_layers": compiled,
        "optimizer": args.optimizer,
        "step_s": round(seconds, 4),
        "step_s_all": [round(t, 4) for t in times],
        "warmup_s": [round(t, 2) for t in warmup],
        # four significant digits: a small model on a busy CPU achieves well under 0.001 TFLOP/s
        "model_tflop_per_step": float(f"{flops / 1e12:.4g}"),
        "achieved_tflop_s": float(f"{flops / seconds / 1e12:.4g}"),
        "tokens_per_s": round(args.rows * args.seq / seconds, 1),
        "dense_bf16_peak_tflop_s": peak / 1e12 if peak else None,
        "mfu": round(flops / seconds / peak, 4) if peak else None,
        "target_mfu": 0.40,
    }
    if cuda:
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    else:
        result["note"] = "CPU: achieved FLOP/s only, no MFU (no dense bf16 peak)"
    if args.profile:
        result["profile"] = profile_step(step, cuda)
    report(result, f"mfu_{device.type}")


if __name__ == "__main__":
    main()
