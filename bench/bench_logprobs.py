"""Peak memory and time of `logprobs.token_logprobs` (+ `readout_logits` at the slot) against a
naive full-vocabulary fp32 `log_softmax` + gather, forward and backward, each run in a fresh process (CPU or GPU).

    python bench/bench_logprobs.py [--seq 1024 4096 8192] [--vocab 151936] [--hidden 256]
                                   [--repeats 2] [--warmup 1] [--iters 1] [--chunk 512]
                                   [--impls chunked naive]

For every sequence length the implementations run in separate child processes,
interleaved (chunked, naive, chunked, naive, ...) `--repeats` times; each child runs
forward + backward `--warmup` untimed times (first-call costs: CUDA context, kernel
selection, allocator growth), then `--iters` timed times, and reports the median time
and its peak memory. On CUDA each timed iteration is bracketed by
`torch.cuda.synchronize()` (kernels are asynchronous) and the peak is
`torch.cuda.max_memory_allocated()` over the timed iterations, after a reset that
follows the warm-up. Ratios are chunked / naive of the medians over the repeats, taken
side by side. Memory is the peak above a baseline taken after the inputs exist: CUDA's
allocator peak on a GPU, the process's peak RSS (ru_maxrss) on a CPU (which includes
the warm-up: RSS has no reset). `--chunk` is the chunked kernel's rows per chunk
(chunk_tokens), reported with the results. `--impls` may add `compiled`, what the
update runs on a GPU (logprobs.compile_logprob_blocks: the per-block work under
torch.compile with inductor, `--compiled-chunk` rows per block; the warm-up compiles), and
`checkpointed`, the previous formulation (row chunks under torch.utils.checkpoint),
kept here to measure what the hand-written backward changed, and `grad_in_forward`,
a prototype that computes the gradients during the forward (3 vocabulary matmuls
instead of 4) for when the upstream gradient is known before it (fp32, CPU only).
Prints one JSON line (peak_mem_ratio, time_ratio: the worst over the lengths for
`chunked`, prefixed by the implementation's name for the others; and per length) and
writes it to bench/results/logprobs_<device>.json.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import report  # noqa: E402


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def checkpointed(hidden, lm_head, input_ids, slot_pos, high_id, low_id, chunk_tokens=512):
    """An earlier version of the chunked log-probs: row chunks under activation checkpointing."""
    import torch
    from torch.utils.checkpoint import checkpoint

    def chunk_logprobs(h, w, y):
        logits = (h @ w.T).float()
        return logits.gather(1, y[:, None]).squeeze(1) - torch.logsumexp(logits, dim=1)

    n_seq, seq_len, dim = hidden.shape
    flat_hidden, flat_targets = hidden[:, :-1].reshape(-1, dim), input_ids[:, 1:].reshape(-1)
    pieces = [
        checkpoint(
            chunk_logprobs,
            flat_hidden[s : s + chunk_tokens],
            lm_head,
            flat_targets[s : s + chunk_tokens],
            use_reentrant=False,
        )
        for s in range(0, flat_hidden.shape[0], chunk_tokens)
    ]
    logp = torch.cat(pieces).reshape(n_seq, seq_len - 1)
    h_slot = hidden[torch.arange(n_seq), slot_pos.clamp(min=0)]
    z = (h_slot @ (lm_head[high_id] - lm_head[low_id])).float()
    return logp, torch.where(slot_pos >= 0, z, torch.zeros_like(z))


def grad_in_forward(hidden, lm_head, input_ids, upstream, chunk=512):
    """Prototype: the log-probs and their gradients in one pass, for when the upstream
    gradient of every log-prob is known before the forward (the on-policy surrogate:
    d loss / d logp = -A mask / |o| / N at rho = 1). Three vocabulary matmuls instead of
    four (no recomputation). Returns (logp, grad_hidden, grad_lm_head), all without autograd."""
    import torch

    _, seq_len, dim = hidden.shape
    h_all, y_all, c_all = hidden[0, :-1].detach(), input_ids[0, 1:], upstream[0]
    w = lm_head.detach()
    rows = h_all.shape[0]
    buf = torch.empty(min(chunk, rows), w.shape[0], dtype=torch.float32, device=hidden.device)
    out, grad_h, grad_w = torch.empty(rows, device=hidden.device), torch.empty_like(h_all), torch.zeros_like(w)
    for s in range(0, rows, chunk):
        h, y, g = h_all[s : s + chunk], y_all[s : s + chunk], c_all[s : s + chunk, None]
        logits = torch.mm(h, w.T, out=buf[: h.shape[0]])
        target = logits.gather(1, y[:, None]).squeeze(1)
        top = logits.amax(1, keepdim=True)
        sumexp = logits.sub_(top).exp_().sum(1, keepdim=True)
        out[s : s + chunk] = target - (top + sumexp.log()).squeeze(1)
        logits.mul_(-g / sumexp).scatter_add_(1, y[:, None], g)  # g (onehot - softmax)
        grad_h[s : s + chunk] = logits @ w
        grad_w.addmm_(logits.T, h)
    return out, grad_h, grad_w


IMPLS = ["naive", "chunked", "compiled", "checkpointed", "grad_in_forward"]


def child(
    impl: str,
    seq: int,
    vocab: int,
    hidden: int,
    iters: int,
    warmup: int = 0,
    chunk: int = 512,
    compiled_chunk: int = 2048,
) -> dict:
    import torch

    import losses
    from kernels import logprobs

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    h = torch.randn(1, seq, hidden, device=device, dtype=dtype, requires_grad=True)
    w = (torch.randn(vocab, hidden, device=device, dtype=dtype) * 0.02).requires_grad_()
    ids = torch.randint(0, vocab, (1, seq), device=device)
    slot = torch.tensor([seq - 1], device=device)
    grad_out = torch.randn(1, seq - 1, device=device)

    def naive():
        logits = (h @ w.T).float()  # [1, T, V] fp32
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        z = logits[0, seq - 1, 7] - logits[0, seq - 1, 11]
        return logp, z

    def chunked(h, w, ids, slot, blocks=None):
        """What policy.forward computes: the chunked log-probs, z_H - z_L at the slot (fp32)."""
        z = losses.readout_logits(h[torch.arange(1), slot.clamp(min=0)], w, 7, 11)  # [1]
        return logprobs.token_logprobs(h, w, ids, chunk_tokens=chunk, blocks=blocks), torch.where(slot >= 0, z, 0.0)

    blocks = logprobs.compile_logprob_blocks("inductor", compiled_chunk) if impl == "compiled" else None

    fn = {
        "naive": naive,
        "chunked": lambda: chunked(h, w, ids, slot),
        "compiled": lambda: chunked(h, w, ids, slot, blocks),
        "checkpointed": lambda: checkpointed(h, w, ids, slot, 7, 11, chunk_tokens=chunk),
        "grad_in_forward": lambda: grad_in_forward(h, w, ids, grad_out, chunk=chunk),
    }[impl]

    def once() -> float:
        """One forward + backward, its seconds (CUDA: from an idle device to an idle device)."""
        h.grad = w.grad = None
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        if impl == "grad_in_forward":  # fp32 CPU prototype: gradients come out of the forward
            logp, z = fn()[0], None
        else:
            logp, z = fn()
            ((logp * grad_out).sum() + z.sum()).backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    base = rss_mib()  # CPU: RSS has no reset, so its baseline precedes the warm-up
    for _ in range(warmup):
        once()
    h.grad = w.grad = None
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    times = [once() for _ in range(iters)]
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else rss_mib()
    return {
        "impl": impl,
        "peak_mib": peak - base,
        "seconds": statistics.median(times),
        "device": str(device),
        "seconds_all": times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--iters", type=int, default=1, help="timed iterations per child (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations per child before timing")
    parser.add_argument("--chunk", type=int, default=512, help="rows per chunk of the chunked kernel (chunk_tokens)")
    parser.add_argument("--compiled-chunk", type=int, default=2048, help="rows per block of the compiled kernel")
    parser.add_argument("--impls", nargs="+", default=["chunked", "naive"])
    parser.add_argument("--child", choices=IMPLS)
    args = parser.parse_args()
    if args.iters < 1 or args.warmup < 0 or args.chunk < 1 or args.compiled_chunk < 1 or args.repeats < 1:
        parser.error(
            f"--iters, --repeats, --chunk and --compiled-chunk must be >= 1 and --warmup >= 0; got "
            f"iters={args.iters} repeats={args.repeats} chunk={args.chunk} "
            f"compiled_chunk={args.compiled_chunk} warmup={args.warmup}"
        )
    unknown = sorted(set(args.impls) - set(IMPLS))
    if unknown or "naive" not in args.impls:
        parser.error(f"--impls must include naive (the reference) and name only {', '.join(IMPLS)}; got {args.impls}")
    if args.child:
        print(
            json.dumps(
                child(
                    args.child,
                    args.seq[0],
                    args.vocab,
                    args.hidden,
                    args.iters,
                    args.warmup,
                    args.chunk,
                    args.compiled_chunk,
                )
            )
        )
        return
    load_before = os.getloadavg()[0]
    per_seq, device = {}, "cpu"
    for seq in args.seq:
        runs = {impl: [] for impl in args.impls}
        for _ in range(args.repeats):
            for impl in args.impls:
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        impl,
                        "--seq",
                        str(seq),
                        "--vocab",
                        str(args.vocab),
                        "--hidden",
                        str(args.hidden),
                        "--iters",
                        str(args.iters),
                        "--warmup",
                        str(args.warmup),
                        "--chunk",
                        str(args.chunk),
                        "--compiled-chunk",
                        str(args.compiled_chunk),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs[impl].append(json.loads(out.stdout.strip().splitlines()[-1]))
        device = runs["naive"][0]["device"]
        med = {
            impl: {
                "peak_mib": round(statistics.median(r["peak_mib"] for r in rs), 1),
                "seconds": round(statistics.median(r["seconds"] for r in rs), 3),
            }
            for impl, rs in runs.items()
        }
        entry = {f"{impl}_{key}": value for impl, m in med.items() for key, value in m.items()}
        for impl in args.impls:
            if impl != "naive":
                prefix = "" if impl == "chunked" else f"{impl}_"
                entry[f"{prefix}peak_mem_ratio"] = round(med[impl]["peak_mib"] / med["naive"]["peak_mib"], 4)
                entry[f"{prefix}time_ratio"] = round(med[impl]["seconds"] / med["naive"]["seconds"], 4)
        per_seq[str(seq)] = entry
        print(json.dumps({"seq": seq, **entry}), file=sys.stderr)
    result = {
        "bench": "logprobs_readout",
        "command": " ".join(["python"] + sys.argv),
        "device": device,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "vocab": args.vocab,
        "hidden": args.hidden,
        "repeats": args.repeats,
        "iters": args.iters,
        "warmup": args.warmup,
        "chunk_tokens": args.chunk,
        "compiled_chunk_tokens": args.compiled_chunk,
        **{
            key: max(e[key] for e in per_seq.values()) for key in next(iter(per_seq.values())) if key.endswith("_ratio")
        },
        "target_peak_mem_ratio": 0.25,
        "target_time_ratio": 1.0,
        "by_seq": per_seq,
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    report(result, f"logprobs_{device}")


if __name__ == "__main__":
    main()
