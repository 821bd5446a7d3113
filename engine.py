"""Generation engines: vLLM in process (the trainer's colocated engine) and transformers'
`generate` on the trainer's own model (for machines without vLLM).

Both share one interface: `generate(prompts, group_size, seed)` returns `G` samples per
prompt, contiguous (row q*G + i), with every sampling parameter set explicitly (never from
generation_config.json) and each ended exactly at `<confidence>` where the run reads its
confidence there (rollout.close_slot); `next_logprobs(contexts, token_ids)` gives the
log-probs of a few tokens after each context under the full softmax (`probe_logprobs`: what a
model read of c needs at each slot, credit_confidence=engine); `push_weights(model)` copies the trainer's
weights into the engine in memory; `sleep()` frees the GPU during the update.

Holds: the stop strings of a ConfidencePlan (config.py decides where a rollout ends), the sampling settings,
per-rollout seeds, the engines and `make_engine`. Does not hold: prompts and segments
(rollout.py). vLLM and transformers are imported when an engine is built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoConfig

from adapters import lora, quant
from confidence import ConfidencePlan
from rollout import (
    CONF_CLOSE,
    CONF_OPEN,
    PrefixLengths,
    close_slot,
    decode,
    repaired_tokens,
    through_slot,
    tokens_covering,
)
from schema import Config


@dataclass
class Sample:
    """One generated completion as an engine returns it."""

    token_ids: list[int]
    # log-prob of each sampled token under the distribution it was drawn from (logits / T, then
    # top-k / top-p, renormalised: vLLM's "processed_logprobs"); the slot_repaired last ones have none
    logprobs: list[float]
    finish_reason: str  # "stop" or "length"
    slot_repaired: int = 0  # trailing tokens close_slot wrote in place of the last sampled one


def closed_sample(
    tokenizer, token_ids: list[int], logprobs: list[float], finish_reason: str, stop: list[str], cut: bool = False
) -> Sample:
    """An engine's sample, ended exactly at `<confidence>` (close_slot) when the engine stops
    there, or cut right after the tag (through_slot, `cut`: plan.cuts_at_slot). Where generation
    goes on past the tag (a sampled numeral or slot token) the text after it is the sample
    itself and is left as it is."""
    if cut:
        kept, repaired = through_slot(tokenizer, token_ids)
    elif CONF_OPEN in stop:
        kept = close_slot(tokenizer, token_ids)
        repaired = repaired_tokens(token_ids, kept)
    else:
        return Sample(token_ids, logprobs, finish_reason)
    reason = finish_reason if kept == token_ids else "stop"
    return Sample(kept, logprobs[: len(kept) - repaired], reason, repaired)


def stop_strings(plan: ConfidencePlan) -> list[str]:
    """Where a rollout stops (besides EOS and the length budget), as the plan says:

    * at `<confidence>`, kept in the output, when it ends at the slot (plan.stops_at_slot) and
      is not cut there after generation (plan.cuts_at_slot: thinking on);
    * after `</confidence>` when the slot token itself is sampled and scored by the
      reward (plan.samples_slot_token: `conf_train: sampled`);
    * nowhere else on the verbalized channel: the numeral is sampled as text.
    """
    if plan.samples_slot_token:
        return [CONF_CLOSE]
    if plan.stops_at_slot and not plan.cuts_at_slot:
        return [CONF_OPEN]
    return []


def sampling_settings(cfg: Config, plan: ConfidencePlan) -> dict:
    """Every sampling parameter, explicit: nothing may come from generation_config.json."""
    return {
        "temperature": float(cfg.temperature),
        "top_k": int(cfg.top_k),
        "top_p": float(cfg.top_p),
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": int(cfg.max_completion_tokens),
        "stop": stop_strings(plan),
    }


def probe_logprobs(engine, contexts: list[list[int] | None], probes: list[list[int]]) -> torch.Tensor:
    """[N, K] float64: log p(probe_k[-1] | contexts[n] + probe_k[:-1]) under the full softmax at
    T = 1, by `engine.next_logprobs`, one call per distinct forced prefix (probe_k[:-1]); NaN rows
    for a None context. What a model read of c needs at each slot (confidence.Read.probes)."""
    rows = [n for n, context in enumerate(contexts) if context is not None]
    logp = torch.full((len(contexts), len(probes)), float("nan"), dtype=torch.float64)
    for forced in dict.fromkeys(tuple(probe[:-1]) for probe in probes):
        ks = [k for k, probe in enumerate(probes) if tuple(probe[:-1]) == forced]
        got = engine.next_logprobs([contexts[n] + list(forced) for n in rows], [probes[k][-1] for k in ks])
        logp[torch.tensor(rows, dtype=torch.long)[:, None], torch.tensor(ks)] = got  # [n, len(ks)]
    return logp


def rollout_seed(step_seed: int, row: int) -> int:
    """A distinct, reproducible sampling seed for each rollout row of a step."""
    return (step_seed * 1_000_003 + row) % (2**31 - 1)


class VLLMEngine:
    """vLLM in this process: weights pushed in memory, prefix cache reset after each push.

    Each rollout is its own request with its own seed (rollout_seed), so a step's
    samples are reproducible and a resumed run draws the same ones; the shared
    prompt of a group is computed once thanks to the prefix cache.
    """

    def __init__(self, model_dir: str, tokenizer_dir: str, cfg: Config, plan: ConfidencePlan, dtype: str):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM, SamplingParams

        max_model_len = int(cfg.max_prompt_tokens + cfg.max_completion_tokens)
        if torch.cuda.is_available():
            platform = {"gpu_memory_utilization": float(cfg.vllm_gpu_memory_utilization)}
        else:
            platform = {
                # The KV cache must be sized explicitly (vLLM measures NUMA node 0, not the machine).
                "kv_cache_memory_bytes": int(cfg.vllm_cpu_kv_cache_gb * 2**30),
                # A seeded request whose prompt is prefilled in chunks gets its generator rewound,
                # which CPU generators cannot do ("CPU Generator does not use offset"): prefill
                # whole prompts only.
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": max(max_model_len, 8192),
            }

        # Colocated with the trainer: under torchrun every rank runs its own engine (TP = 1) on
        # its own GPU. vLLM then joins the job's process group instead of creating one
        # ("external_launcher": each rank is a TP group of one, on cuda:LOCAL_RANK).
        distributed = (
            torch.distributed.is_available()
            and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1
        )
        if distributed:
            platform["distributed_executor_backend"] = "external_launcher"
            platform["tensor_parallel_size"] = 1
        # Sleep mode frees the engine's GPU memory during the update; vLLM implements it with
        # CUDA's virtual-memory allocator only. On CPU the engine stays resident (sleep/wake_up
        # are no-ops there, on purpose: there is no device memory to hand back).
        self.sleep_mode = torch.cuda.is_available()
        if self.sleep_mode:
            platform["enable_sleep_mode"] = True
        self._asleep: set[str] = set()  # tags ("weights", "kv_cache") currently released

        self._params = SamplingParams
        self.settings, self.cut_at_slot = sampling_settings(cfg, plan), plan.cuts_at_slot
        self.dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(dtype, dtype)
        self.llm = LLM(
            model=model_dir,
            tokenizer=tokenizer_dir,
            dtype=dtype,
            seed=int(cfg.seed),
            max_model_len=max_model_len,
            enable_prefix_caching=True,
            enforce_eager=bool(cfg.vllm_enforce_eager),
            generation_config="vllm",  # explicit SamplingParams are never merged with the file's values
            # The sampled tokens' log-probs under the distribution they were drawn from (after
            # temperature, top-k, top-p), the policy the trainer's pi_T approximates; raw
            # (T = 1) ones would differ from pi_T by the temperature alone. Prompt log-probs
            # (score) stay raw in every mode.
            logprobs_mode="processed_logprobs",
            disable_log_stats=True,
            **platform,
        )
        self.tokenizer = self.llm.get_tokenizer()  # the one that decodes its samples, reserved tokens included

    def _sampling(self, seed: int, **extra):
        """SamplingParams: the run's settings and ours, `extra` overriding either."""
        ours = {
            "n": 1,
            "seed": seed,
            "logprobs": 0,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "include_stop_str_in_output": True,
            "ignore_eos": False,
            "min_tokens": 0,
            "detokenize": True,
        }
        return self._params(**{**ours, **self.settings, **extra})

    def generate(self, prompts: list[list[int]], group_size: int, seed: int) -> list[Sample]:
        requests, params = [], []
        for q, prompt in enumerate(prompts):
            for i in range(group_size):
                requests.append({"prompt_token_ids": list(prompt)})
                params.append(self._sampling(rollout_seed(seed, q * group_size + i)))
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        samples = []
        for out in outputs:
            gen = out.outputs[0]
            ids = list(gen.token_ids)
            logprobs = [entry[tok].logprob for tok, entry in zip(ids, gen.logprobs)]
            reason = "length" if gen.finish_reason == "length" else "stop"
            samples.append(
                closed_sample(self.tokenizer, ids, logprobs, reason, self.settings["stop"], self.cut_at_slot)
            )
        return samples

    def score(self, sequences: list[list[int]]) -> list[list[float]]:
        """log pi(token_k | tokens_<k) for k >= 1 of each sequence (prompt log-probs: raw, T = 1,
        whatever logprobs_mode says)."""
        params = self._sampling(0, max_tokens=1, prompt_logprobs=0, stop=[])
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(s)} for s in sequences], [params] * len(sequences), use_tqdm=False
        )
        return [
            [entry[tok].logprob for tok, entry in zip(seq[1:], out.prompt_logprobs[1:])]
            for seq, out in zip(sequences, outputs)
        ]

    def next_logprobs(self, contexts: list[list[int]], token_ids: list[int]) -> torch.Tensor:
        """[N, K] log p(token_ids[k] | contexts[n]) under the full softmax of the engine's
        current weights at T = 1 (no top-k, top-p or penalty; fp32 log_softmax, vLLM's
        sampler), float64 on the host. One request per context: a context that extends a rollout
        just generated (prompt + completion through its slot) is in the prefix cache, so it
        costs one decode step, plus the tokens of its last partial cache block. Read before
        sleep(), which drops the cache. These requests go in a generate call of their own: vLLM's
        sampler (0.28-0.32 at least) returns the gathered ids' log-probs for every row of a batch
        in which any request asks for logprob_token_ids, so a sampled rollout beside them would
        get wrong log-probs."""
        if self._asleep:
            raise RuntimeError("next_logprobs reads the engine's cache: call it before sleep()")
        if not contexts:
            return torch.empty(0, len(token_ids), dtype=torch.float64)
        ids = list(token_ids)
        # T = 1 and no truncation, so vLLM's processed log-probs are the full softmax's; one token
        # is sampled (and dropped) with a fixed seed
        params = self._sampling(
            0,
            max_tokens=1,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            stop=[],
            logprobs=len(ids),
            logprob_token_ids=ids,
            detokenize=False,
        )
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(c)} for c in contexts], [params] * len(contexts), use_tqdm=False
        )
        return torch.tensor(
            [[out.outputs[0].logprobs[0][tok].logprob for tok in ids] for out in outputs], dtype=torch.float64
        )

    def push_weights(self, model) -> None:
        """Copy the trainer's weights into the engine's model (no disk round trip): its parameters,
        or a LoRA model's merged weights (lora.merged_weights).

        vLLM's in-place reload takes checkpoint-format (HF) names, fuses them
        (q/k/v -> qkv_proj, ...) and re-runs the backend's post-load processing
        (the CPU backend repacks linear weights, so a bare `load_weights` on
        the live model fails). Cached KV blocks were computed by the old
        weights: the prefix cache is reset after every push."""
        self.wake_up(("weights",))  # the KV cache stays released until the push is done
        weights = self._cast(lora.merged_weights(model))
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        self.wake_up(("kv_cache",))
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight push")

    def _cast(self, weights):
        """(HF name, full tensor) in the engine's dtype, one at a time (lora.merged_weights: a sharded
        parameter is all-gathered, a collective, so every rank pushes into its own engine in step)."""
        for name, tensor in weights:
            yield name, tensor.to(self.dtype)

    def sleep(self) -> None:
        """Release the GPU for the update (sleep level 1: weights copied to host memory, KV
        cache dropped). No-op on CPU, where vLLM has no sleep mode."""
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    def wake_up(self, tags=("weights", "kv_cache")) -> None:
        """Re-allocate what sleep released, for the given tags (weights first, so a push
        does not need room for the KV cache too). No-op when awake or on CPU."""
        wanted = [tag for tag in tags if tag in self._asleep]
        if wanted:
            torch.cuda.empty_cache()  # blocks the update freed but torch's allocator still holds
            self.llm.wake_up(tags=wanted)
            self._asleep -= set(wanted)

    def close(self) -> None:
        self.wake_up()
        del self.llm


def sample_next(logits, settings: dict, generators: list) -> tuple:
    """The next token of each row and its log-prob, as vLLM samples (sampling_settings):
    logits / T, then top-k, then top-p; T = 0 is greedy. One uniform draw per row from that
    row's own CPU `torch.Generator`, mapped through the row's cumulative distribution (inverse
    CDF), so a row's tokens do not depend on the other rows. The log-prob is the token's under
    the distribution it was drawn from (log_softmax of the processed logits; of the raw ones
    when greedy), as VLLMEngine reports it (processed_logprobs).

    logits: [N, V] float; returns (tokens [N] long, logprobs [N] float), on logits' device.
    """
    if settings["temperature"] == 0:
        tokens = logits.argmax(-1)  # [N]
        logp = logits.float().log_softmax(-1)  # [N, V]
    else:
        scaled = logits.float() / settings["temperature"]  # [N, V]
        k = settings["top_k"]
        if 0 < k < scaled.shape[-1]:
            kth = scaled.topk(k, dim=-1).values[:, -1:]  # [N, 1]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        if settings["top_p"] < 1.0:
            sorted_logits, order = scaled.sort(-1, descending=True)  # [N, V]
            sorted_probs = sorted_logits.softmax(-1)
            above = sorted_probs.cumsum(-1) - sorted_probs  # mass ranked above each token
            drop_sorted = above >= settings["top_p"]  # [N, V], sorted order
            drop = torch.empty_like(drop_sorted).scatter_(-1, order, drop_sorted)  # [N, V], vocabulary order
            scaled = scaled.masked_fill(drop, float("-inf"))
        logp = scaled.log_softmax(-1)  # [N, V], -inf where cut
        cdf = scaled.softmax(-1).double().cumsum(-1)  # [N, V]
        draws = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])  # [N]
        target = draws.to(cdf.device)[:, None] * cdf[:, -1:]  # [N, 1] in [0, total)
        tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def _all_ranks(device, value: int, op: str) -> int:
    """`value` reduced (min or max) over the ranks of the process group; `value` itself
    when there is no group of more than one process."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return value
    tensor = torch.tensor([value], device=device)
    dist.all_reduce(tensor, op={"min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op])
    return int(tensor.item())


class HFEngine:
    """Generation on the trainer's own model object (so a push is free), for machines
    without vLLM. Same interface as VLLMEngine.

    A step's requests are generated together, `hf_engine_batch` rows at a time (left-padded,
    one KV-cached forward per token for the whole chunk), by a sampling loop of our own
    rather than transformers' `generate`: `generate` draws every row from one torch
    generator, so a row's tokens would depend on what else is in its batch. Here each row
    has its own `torch.Generator` seeded with rollout_seed (on the CPU, so the draws are
    the same on every device), as vLLM gives each request its own seed.

    Reproducibility contract: the same seed, prompt and weights give the same tokens on the
    same machine, whatever batch (chunk size, neighbours, padding) the row is generated in,
    up to floating-point noise: the logits of a row differ across batch compositions only
    by kernel rounding, and that changes a token only when a draw lands within that
    rounding of a boundary of the sampling distribution (rare in fp32: the tests see none;
    more frequent in bf16). Greedy decoding (temperature 0) follows the same rule.

    Sampling matches VLLMEngine's SamplingParams (sampling_settings): temperature, then
    top-k, then top-p, min_p 0, no penalties; stops at EOS, at the length budget, or after
    the token that completes a stop string (kept); the log-probs returned are the sampled
    tokens' under the processed distribution (T, top-k, top-p), as vLLM's (sample_next).
    """

    def __init__(self, model, tokenizer, cfg: Config, plan: ConfidencePlan, dtype=None):
        self.model, self.tokenizer, self.settings = model, tokenizer, sampling_settings(cfg, plan)
        self.cut_at_slot = plan.cuts_at_slot
        self.dtype = dtype or torch.float32
        self.batch = cfg.hf_engine_batch
        if not isinstance(self.batch, int) or isinstance(self.batch, bool) or self.batch < 1:
            raise ValueError(
                f"hf_engine_batch must be a positive integer (rows generated together), got "
                f"{self.batch!r}; set e.g. hf_engine_batch=64"
            )

    def generate(self, prompts: list[list[int]], group_size: int, seed: int) -> list[Sample]:
        rows = [p for p in prompts for _ in range(group_size)]
        seeds = [rollout_seed(seed, r) for r in range(len(rows))]
        chunks = [range(s, min(s + self.batch, len(rows))) for s in range(0, len(rows), self.batch)]
        # Under FSDP2 every forward is a collective: each rank runs as many chunks as the rank with most.
        n_chunks = self._max_over_ranks(len(chunks))
        samples: list[Sample] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for c in range(n_chunks):
                if c < len(chunks):
                    samples += self._generate_chunk([rows[r] for r in chunks[c]], [seeds[r] for r in chunks[c]])
                else:  # this rank has no rows left: keep the others company
                    self._generate_chunk(rows[:1] or [[self.tokenizer.eos_token_id]], [0])
        finally:
            self.model.train(was_training)
        return samples

    def _left_padded(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask, position_ids), each [N, W], of `rows` left-padded to the longest."""
        device, pad = self.model.device, self.tokenizer.pad_token_id
        width = max(len(p) for p in rows)
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in rows], device=device)  # [N, W]
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows], device=device)  # [N, W]
        return input_ids, attention, (attention.cumsum(1) - 1).clamp(min=0)

    def next_logprobs(self, contexts: list[list[int]], token_ids: list[int]) -> torch.Tensor:
        """[N, K] log p(token_ids[k] | contexts[n]) under the full softmax at T = 1, float64 on the
        host (VLLMEngine.next_logprobs): a forward of each context, hf_engine_batch at a time, in
        the engine's dtype. This engine is the trainer's model and keeps no cache, so the read
        costs a forward of the contexts, as the trainer's no-grad pass does."""
        chunks = [contexts[s : s + self.batch] for s in range(0, len(contexts), self.batch)]
        logp = [torch.empty(0, len(token_ids), dtype=torch.float64)]
        was_training = self.model.training
        self.model.eval()
        try:
            with (
                torch.no_grad(),
                torch.autocast(self.model.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32),
            ):
                for c in range(self._max_over_ranks(len(chunks))):  # a sharded forward is a collective
                    rows = chunks[c] if c < len(chunks) else [[self.tokenizer.eos_token_id]]
                    input_ids, attention, positions = self._left_padded(rows)
                    out = self.model(
                        input_ids=input_ids,
                        attention_mask=attention,
                        position_ids=positions,
                        use_cache=False,
                        logits_to_keep=1,
                    )
                    if c < len(chunks):
                        logp.append(out.logits[:, -1].float().log_softmax(-1)[:, token_ids].double().cpu())  # [n, K]
        finally:
            self.model.train(was_training)
        return torch.cat(logp)

    def _generate_chunk(self, rows: list[list[int]], seeds: list[int]) -> list[Sample]:
        """One left-padded batch, a KV-cached forward per generated token."""
        device = self.model.device
        input_ids, attention, positions = self._left_padded(rows)  # [N, W] each
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        token_ids: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        done = [False] * len(rows)
        cache = None
        with torch.no_grad(), torch.autocast(device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            while not self._done_on_every_rank(all(done)):
                out = self.model(
                    input_ids=input_ids,
                    attention_mask=attention,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                cache = out.past_key_values
                logits = out.logits[:, -1].float()  # [N, V]
                tokens, token_logp = sample_next(logits, self.settings, generators)  # [N], [N]
                for i, (tok, lp) in enumerate(zip(tokens.tolist(), token_logp.tolist())):
                    if not done[i]:
                        token_ids[i].append(tok)
                        logprobs[i].append(lp)
                        done[i] = self._finished(token_ids[i])
                input_ids = tokens[:, None]  # [N, 1]
                attention = torch.cat([attention, attention.new_ones(len(rows), 1)], dim=1)  # [N, W+t]
                positions = positions[:, -1:] + 1  # [N, 1]
        samples = []
        for ids, lp in zip(token_ids, logprobs):
            ids, reason = self._trim(ids)
            samples.append(
                closed_sample(self.tokenizer, ids, lp[: len(ids)], reason, self.settings["stop"], self.cut_at_slot)
            )
        return samples

    def _finished(self, ids: list[int]) -> bool:
        """EOS, the length budget, or a stop string that ends in the last token. Only the tail
        is decoded: every token writes at least one character, so a stop string that the last
        token completes starts within the last len(stop) tokens."""
        if ids[-1] == self.tokenizer.eos_token_id or len(ids) >= self.settings["max_tokens"]:
            return True
        return any(stop in decode(self.tokenizer, ids[-len(stop) - 1 :]) for stop in self.settings["stop"])

    def _done_on_every_rank(self, done: bool) -> bool:
        """Whether every rank's chunk is done: a sharded model's forward is a collective, so a
        finished rank keeps stepping until the last one is done."""
        return bool(_all_ranks(self.model.device, int(done), "min"))

    def _max_over_ranks(self, count: int) -> int:
        """The largest `count` of any rank (this rank's own outside a process group)."""
        return _all_ranks(self.model.device, count, "max")

    def _trim(self, ids: list[int]) -> tuple[list[int], str]:
        """Cut a generation at its EOS or the end of its stop string."""
        eos = self.tokenizer.eos_token_id
        if eos in ids:
            return ids[: ids.index(eos) + 1], "stop"
        for stop in self.settings["stop"]:
            text = decode(self.tokenizer, ids)
            at = text.find(stop)
            if at >= 0:
                k = tokens_covering(PrefixLengths(self.tokenizer, ids), at + len(stop))
                return ids[:k], "stop"
        return ids, "length"

    def push_weights(self, model) -> None:
        """Nothing to copy when the engine generates with the trainer's own model object (also
        when it is sharded with FSDP2: generation then keeps the ranks in step, _all_ranks)."""
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())

    def sleep(self) -> None:
        """No-op: the engine is the trainer's model and has no memory of its own."""

    def wake_up(self, tags=("weights", "kv_cache")) -> None:
        """No-op (see sleep)."""

    def close(self) -> None:
        pass


def make_engine(
    cfg: Config, plan: ConfidencePlan, model, tokenizer, model_dir: str, run_dir, dtype
) -> VLLMEngine | HFEngine:
    """The configured engine, holding the trainer's current weights, computing in `dtype`
    (a torch dtype: bf16 or fp32; the trainer's fp32 weights are cast on the push), stopping
    where `plan` says."""
    if cfg.engine == "hf":
        return HFEngine(model, tokenizer, cfg, plan, dtype)
    tokenizer_dir = Path(run_dir) / "tokenizer"
    tokenizer.save_pretrained(tokenizer_dir)  # the engine must see the reserved tokens
    quant.plain_config(model.config).save_pretrained(tokenizer_dir)  # vLLM reads a config.json beside the tokenizer
    source = lora.base_of(model_dir)  # a LoRA checkpoint's base: the push below brings the merged weights
    rows_on_disk = _vocab_rows(source)
    if rows_on_disk != model.get_input_embeddings().weight.shape[0]:
        # The embedding matrix grew (no spare rows): vLLM must load a matrix of the new shape.
        source = str(Path(run_dir) / "engine_init")
        model.save_pretrained(source, state_dict=dict(lora.merged_weights(model)), safe_serialization=True)
    engine = VLLMEngine(
        str(source),
        str(tokenizer_dir),
        cfg,
        plan,
        {"torch.bfloat16": "bfloat16", "torch.float32": "float32"}[str(dtype)],
    )
    engine.push_weights(model)  # e.g. the freshly initialised reserved rows
    return engine


def _vocab_rows(model_dir: str) -> int:
    """Rows of the embedding matrix as stored at `model_dir` (local or hub id)."""
    config = AutoConfig.from_pretrained(model_dir)
    return int(getattr(config, "vocab_size", None) or config.get_text_config().vocab_size)
