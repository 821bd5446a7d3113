"""Rollouts: prompts, generation engines, and the segments of each completion.

A rollout is `prompt + completion`, and a completion has three segments
(`sec:readout`)::

    <answer ... \\boxed{42}> <analysis> why it may be wrong </analysis> <confidence>SLOT

* answer   - tokens before `<analysis>`; scored by A^ans (times w, `eq:sw`)
* analysis - `<analysis>` up to the slot (tags included); scored by A^conf
* slot     - the position right after `<confidence>`; its next-token logits give
             the readout c (`eq:readout`) and it gets no policy-gradient credit.

Segments are found **on token ids**, never by regex over re-encoded text:
special tokens vanish from `skip_special_tokens` decoding, and BPE merges cross
tag boundaries (`}<`, `>\\n`). We decode once, find the tags in the text, and map
each character offset back to a token boundary by binary search on
`len(decode(ids[:k]))`.

For the readout channel the engines stop generating at the stop string
`<confidence>` (kept in the output), so the slot is the position right after the
last generated token (with thinking on they generate on and cut the completion
there afterwards: a reasoning trace may mention the tag). The stop string may end inside the last token: Qwen's
vocabulary has 265 tokens that start with `>` and go on (`>\\n`, `><`, `>The`).
`close_slot` then replaces that token by the tokens of the characters that complete
the tag, so the completion ends exactly at `<confidence>`; those tokens were not
sampled (`Sample.slot_repaired`): no policy-gradient credit, no engine log-prob.
A rollout that never reaches the tag has no readout.

With thinking enabled, Qwen3 first writes `<think> ... </think>`: the segments start
after that block, whatever tags the reasoning mentions. (With the default
enable_thinking=false the chat template ends the prompt with an empty block.)

Engines (`VLLMEngine`, `HFEngine`) share one interface: `generate(prompts,
group_size, seed)` returns `G` samples per prompt, contiguous, with every
sampling parameter set explicitly; `push_weights(model)` copies the trainer's
weights into the engine in memory.
"""

from __future__ import annotations

import bisect
import math
import os
import re
from dataclasses import dataclass, field

CONF_HIGH = "<CONF_HIGH>"
CONF_LOW = "<CONF_LOW>"
ANALYSIS_OPEN, ANALYSIS_CLOSE = "<analysis>", "</analysis>"
CONF_OPEN, CONF_CLOSE = "<confidence>", "</confidence>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

CHANNELS = ("readout", "verbalized", "readout_noanalysis")
DOMAINS = ("math", "code")

# --- Prompts (app:model) -------------------------------------------------------------------
# The two system prompts of the paper differ only in the slot instruction; the
# code versions differ only in carrying the answer in a python block. The
# no-analysis variant (ablation of tab:ablation) drops the analysis instruction.

_INTRO = "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
_SOLVE = {
    "math": "Solve the problem step by step, and put your final answer within \\boxed{}. ",
    "code": "Solve the problem step by step, and put your final answer, a complete Python program, "
    "within a ```python``` code block. ",
}
_ANALYZE = (
    "After the final answer, analyze the uncertainty of your solution within <analysis> </analysis> tags. "
    "This analysis is the basis for the confidence level you will report next, and must follow these rules: "
    "(1) point out specific steps that could be wrong or ambiguous, including alternative approaches that "
    "might lead to different answers; (2) do not solve the problem again and do not revise or change your "
    "answer; (3) be specific \u2014 if you cannot find more uncertainties, say so explicitly. "
)
_SLOT = {
    "verbalized": "Then provide your confidence that the final answer is correct, as a decimal number between "
    "0 and 1 (e.g. 0.3 or 0.8), within <confidence> </confidence> tags. ",
    "readout": "Then, within <confidence> </confidence> tags, output exactly one token: <CONF_HIGH> if your "
    "final answer is more likely correct than not, otherwise <CONF_LOW>. ",
}
_SOLUTION_SHAPE = {
    "math": "{step-by-step solution with \\boxed{final answer}}",
    "code": "{step-by-step solution with the final program in a ```python``` block}",
}
_SLOT_SHAPE = {
    "verbalized": "<confidence> confidence here </confidence>",
    "readout": "<confidence><CONF_HIGH></confidence>",
}


def system_prompt(channel: str, domain: str) -> str:
    """The system prompt of `app:model` for a confidence channel and a domain.

    channel: "readout" (CREDO), "verbalized" (GRPO/RLCR/DCPO), or
    "readout_noanalysis" (the readout channel without the analysis segment).
    """
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}; expected one of {CHANNELS}")
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; expected one of {DOMAINS}")
    analysis = channel != "readout_noanalysis"
    slot = "readout" if channel.startswith("readout") else "verbalized"
    slot_text = _SLOT[slot] if analysis else _SLOT[slot].replace("Then, within", "After the final answer, within")
    shape = _SOLUTION_SHAPE[domain] + (" <analysis> uncertainty analysis here </analysis> " if analysis else " ")
    return (
        _INTRO
        + _SOLVE[domain]
        + (_ANALYZE if analysis else "")
        + slot_text
        + "The final format that must be followed is: "
        + shape
        + _SLOT_SHAPE[slot]
    )


def build_prompt_ids(tokenizer, problem: str, channel: str, domain: str, enable_thinking: bool = False) -> list[int]:
    """Token ids of `system + user(problem)` through the tokenizer's chat template,
    ending with the assistant generation prompt."""
    messages = [
        {"role": "system", "content": system_prompt(channel, domain)},
        {"role": "user", "content": problem},
    ]
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
    )
    return tokenizer.encode(text, add_special_tokens=False)


# --- Segments on token ids -------------------------------------------------------------------


def decode(tokenizer, ids: list[int]) -> str:
    """Decode keeping special tokens (the reserved pair must stay visible) and spacing."""
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


class _PrefixLengths:
    """Lazily evaluated `k -> len(decode(ids[:k]))`, for binary search over token boundaries."""

    def __init__(self, tokenizer, ids: list[int]):
        self.tokenizer, self.ids, self.cache = tokenizer, ids, {}

    def __len__(self) -> int:
        return len(self.ids) + 1

    def __getitem__(self, k: int) -> int:
        if k not in self.cache:
            self.cache[k] = len(decode(self.tokenizer, self.ids[:k]))
        return self.cache[k]


def tokens_before(prefix: _PrefixLengths, char_pos: int) -> tuple[int, bool]:
    """The number k of leading tokens that end at or before `char_pos`, and whether
    they end exactly there. A token straddling `char_pos` (a BPE merge such as
    " <" that opens a tag) is left to the segment that starts at `char_pos`."""
    k = bisect.bisect_right(prefix, char_pos) - 1
    return k, prefix[k] == char_pos


def tokens_covering(prefix: _PrefixLengths, char_pos: int) -> int:
    """The smallest k such that the first k tokens decode to at least `char_pos` characters."""
    return bisect.bisect_left(prefix, char_pos)


def tokenizer_name(tokenizer) -> str:
    """How an error message names a tokenizer: its class and where it was loaded from."""
    return f"{type(tokenizer).__name__}({getattr(tokenizer, 'name_or_path', '') or 'in memory'!r})"


def close_slot(tokenizer, completion_ids: list[int]) -> list[int]:
    """The completion, ended exactly at `<confidence>` when the tag ends inside its last token.

    The last token is then replaced by the tokens of the characters that complete the
    tag (under Qwen3 ">\\n" after "...<confidence" becomes the single token ">"), so the
    slot is the next position. Any other completion comes back unchanged (a copy): one
    that never reaches the tag, or whose tag ends on a token boundary or before the last
    token. A tokenizer that cannot write those characters raises ValueError.
    """
    ids = list(completion_ids)
    if not ids:
        return ids
    text, head = decode(tokenizer, ids), decode(tokenizer, ids[:-1])
    # the first tag that ends past the head, i.e. inside the last token or at the very end
    open_at = text.find(CONF_OPEN, max(len(head) - len(CONF_OPEN) + 1, 0))
    tag_end = open_at + len(CONF_OPEN)
    if open_at < 0 or tag_end == len(text):
        return ids
    if not text.startswith(head):   # the head ends inside a character that the last token completes
        raise ValueError(f"close_slot: with tokenizer {tokenizer_name(tokenizer)} the completion's last token "
                         f"rewrites the text before it ({head[-20:]!r} -> {text[len(head) - 20:tag_end]!r})")
    rest = text[len(head) : tag_end]                    # e.g. ">": what the tag still needs
    tail = tokenizer.encode(rest, add_special_tokens=False)
    if decode(tokenizer, ids[:-1] + tail) != text[:tag_end]:
        raise ValueError(f"close_slot: tokenizer {tokenizer_name(tokenizer)} cannot encode {rest!r}, the text that "
                         f"completes {CONF_OPEN} after {head[-40:]!r} (it gives {tail}, which decodes to "
                         f"{decode(tokenizer, tail)!r})")
    return ids[:-1] + tail


def repaired_tokens(sampled_ids: list[int], closed_ids: list[int]) -> int:
    """How many trailing tokens of `closed_ids` close_slot wrote in place of the last sampled one.

    >>> repaired_tokens([5, 6, 7], [5, 6, 7]), repaired_tokens([5, 6, 7], [5, 6, 8]), repaired_tokens([5, 6, 7], [5, 6, 8, 9])
    (0, 1, 2)
    """
    return 0 if closed_ids == sampled_ids else len(closed_ids) - len(sampled_ids) + 1


def segments_start(text: str) -> int | None:
    """The character offset where the segments start: after a leading `<think> ... </think>`
    block (Qwen3 with thinking enabled), 0 without one, None when the block never closes.

    >>> segments_start("<think>I will write <analysis> later</think>\\n\\nx = 1"), segments_start("x = 1")
    (44, 0)
    >>> segments_start("\\n<think>still thinking") is None
    True
    """
    stripped = text.lstrip()
    if not stripped.startswith(THINK_OPEN):
        return 0
    close = text.find(THINK_CLOSE, len(text) - len(stripped) + len(THINK_OPEN))
    return None if close < 0 else close + len(THINK_CLOSE)


def after_thinking(text: str) -> str:
    """The text the segments are found in (what the verifier grades): everything after a
    leading thinking block; "" while the block is unfinished (there is no answer yet)."""
    start = segments_start(text)
    return "" if start is None else text[start:]


@dataclass
class Segments:
    """Token-index spans of one completion (half-open, indices into completion ids).

    answer:   [0, answer_end)
    analysis: [analysis_start, analysis_end) - empty when missing
    slot:     completion index k such that the readout is the next-token
              distribution after token k-1 (the slot token, if generated, is
              token k); None when the rollout has no readout.
    conf_text: the text between <confidence> and </confidence> (verbalized).
    fmt:      F_i - every segment the channel requires is present and parseable.
    """

    answer_end: int
    analysis_start: int
    analysis_end: int
    slot: int | None
    conf_text: str | None
    fmt: bool
    has_answer: bool
    has_analysis: bool
    slot_misaligned: bool = False   # <confidence> ends inside a token (one the text goes on past)
    tag_token: int | None = None    # that token's index, when slot_misaligned


def parse_segments(tokenizer, completion_ids: list[int], channel: str, answer_marker: str) -> Segments:
    """Split a completion into answer / analysis / slot on token ids.

    answer_marker: the substring that makes an answer parseable ("\\boxed{" for
    math, "```python" for code); it must occur in the answer segment.

    Rules (after a leading `<think> ... </think>` block, if any: first `<analysis>`, then
    the first `</analysis>` after it, then the first `<confidence>` after that):
    * a thinking block that never closes: no answer, no analysis, no slot, F = 0 (the
      block itself belongs to the answer segment, which it precedes, when it closes);
    * no `<analysis>` (readout/verbalized channels): the whole completion is the
      answer, there is no analysis and no slot, F = 0;
    * `<analysis>` without `</analysis>` (e.g. truncated): answer before it,
      analysis to the end, no slot, F = 0;
    * readout channels: the slot is where `<confidence>` ends, if that is a
      token boundary; the analysis runs up to the slot (closing tag included);
    * verbalized: the analysis runs to the end of the completion (the numeral
      and its tags are part of the confidence segment, as DCPO scores them).
    """
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}; expected one of {CHANNELS}")
    text = decode(tokenizer, completion_ids)
    prefix = _PrefixLengths(tokenizer, completion_ids)
    n = len(completion_ids)
    uses_analysis = channel != "readout_noanalysis"

    start = segments_start(text)
    if start is None:                                 # still thinking: nothing after the block
        return Segments(n, n, n, None, None, False, False, False)

    # Where the answer ends: at <analysis>, or (no-analysis variant) at <confidence>.
    answer_stop_tag = ANALYSIS_OPEN if uses_analysis else CONF_OPEN
    answer_stop = text.find(answer_stop_tag, start)
    if answer_stop < 0:
        has_answer = answer_marker in text[start:]
        return Segments(n, n, n, None, None, False, has_answer, False)
    answer_end, _ = tokens_before(prefix, answer_stop)
    has_answer = answer_marker in text[start:answer_stop]

    # Where the analysis ends (char offset of the text after </analysis>).
    if uses_analysis:
        close = text.find(ANALYSIS_CLOSE, answer_stop + len(ANALYSIS_OPEN))
        if close < 0:
            return Segments(answer_end, answer_end, n, None, None, False, has_answer, False)
        after_analysis = close + len(ANALYSIS_CLOSE)
    else:
        after_analysis = answer_stop

    conf_open = text.find(CONF_OPEN, after_analysis)
    if conf_open < 0:
        return Segments(answer_end, answer_end, n, None, None, False, has_answer, uses_analysis)
    conf_end_char = conf_open + len(CONF_OPEN)

    if channel == "verbalized":
        conf_close = text.find(CONF_CLOSE, conf_end_char)
        conf_text = text[conf_end_char:conf_close] if conf_close >= 0 else None
        ok = has_answer and conf_text is not None and not math.isnan(parse_verbalized_confidence(conf_text))
        return Segments(answer_end, answer_end, n, None, conf_text, ok, has_answer, True)

    slot, exact = tokens_before(prefix, conf_end_char)
    if not exact:  # the tag ends inside token `slot`: there is no clean slot position
        return Segments(answer_end, answer_end, n, None, None, False, has_answer, uses_analysis, True, slot)
    analysis_end = slot if uses_analysis else answer_end  # no-analysis variant: no confidence segment
    return Segments(answer_end, answer_end, analysis_end, slot, None, has_answer, has_answer, uses_analysis)


def through_slot(tokenizer, completion_ids: list[int]) -> tuple[list[int], int]:
    """The completion cut right after its `<confidence>` tag (the readout channel's rules) and
    closed there (close_slot), with the number of tokens close_slot wrote: the prefix after
    which eq:digitexp teacher-forces "0." on a verbalized rollout, whose sampled text may have
    merged with the tag (Qwen3: `>.` of ">.8", `>\\n` of ">\\n0.8"; digits never merge). Without
    the tag the completion comes back unchanged."""
    seg = parse_segments(tokenizer, completion_ids, "readout", "")
    if seg.slot is not None:
        return list(completion_ids[: seg.slot]), 0
    if seg.slot_misaligned:
        cut = list(completion_ids[: seg.tag_token + 1])
        closed = close_slot(tokenizer, cut)
        return closed, repaired_tokens(cut, closed)
    return list(completion_ids), 0


_NUMERAL = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*")


def parse_verbalized_confidence(conf_text: str | None) -> float:
    """Parse a verbalized confidence ("0.9", ".9", "1", "0.95") into [0, 1]; NaN if it is not one.

    A missing or malformed report is NaN (a format failure), never 0.

    >>> [parse_verbalized_confidence(s) for s in ["0.9", " .9 ", "1", "0.95"]]
    [0.9, 0.9, 1.0, 0.95]
    >>> [parse_verbalized_confidence(s) for s in ["high", "1.5", "", None]]
    [nan, nan, nan, nan]
    """
    if conf_text is None:
        return float("nan")
    m = _NUMERAL.fullmatch(conf_text)
    if m is None:
        return float("nan")
    value = float(m.group(1))
    return value if 0.0 <= value <= 1.0 else float("nan")


@dataclass
class Rollout:
    """One sampled completion with everything the loss needs.

    Rows are laid out group by group: rollout `i` of question `q` is row q*G + i.
    """

    question_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    finish_reason: str                       # "stop" (EOS or stop string) or "length" (truncated)
    segments: Segments
    engine_logprobs: list[float] = field(default_factory=list)   # of the sampled tokens
    slot_repaired: int = 0                   # trailing tokens close_slot wrote (not sampled)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def sampled_len(self) -> int:
        """Completion tokens the policy sampled (the repaired tail excepted): the scored ones."""
        return len(self.completion_ids) - self.slot_repaired


# --- Engines -----------------------------------------------------------------------------------


@dataclass
class Sample:
    """One generated completion as an engine returns it."""

    token_ids: list[int]
    logprobs: list[float]          # log pi(token) under the engine's weights, raw (T = 1, no top-k), of
                                   # each sampled token: the slot_repaired last ones have none
    finish_reason: str             # "stop" or "length"
    slot_repaired: int = 0         # trailing tokens close_slot wrote in place of the last sampled one


def closed_sample(tokenizer, token_ids: list[int], logprobs: list[float], finish_reason: str,
                  stop: list[str], cut: bool = False) -> Sample:
    """An engine's sample, ended exactly at `<confidence>` (close_slot) when the engine stops
    there, or cut right after the tag (through_slot, `cut`: cuts_at_slot). Where generation
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


def reads_at_slot(cfg: dict) -> bool:
    """Whether rollouts end at the slot, where the confidence is read from the logits: the
    readout channels, and the digit-expectation emission of `app:decompose` (`method: credo`
    on the verbalized prompt, `confidence: digit_exp`); not when the slot token itself is
    sampled (`conf_train: sampled`)."""
    if cfg.get("conf_train") == "sampled":
        return False
    return cfg["channel"].startswith("readout") or (cfg.get("method") == "credo" and cfg.get("confidence") == "digit_exp")


def cuts_at_slot(cfg: dict) -> bool:
    """With thinking on, a rollout that ends at the slot is cut there by the engine after
    generation (through_slot) instead of stopped by the string `<confidence>`: a reasoning
    trace may mention the tag, and the stop string would end the rollout inside it."""
    return reads_at_slot(cfg) and bool(cfg.get("enable_thinking"))


def stop_strings(cfg: dict) -> list[str]:
    """Where a rollout stops (besides EOS and the length budget).

    * at `<confidence>`, kept in the output, when it ends at the slot (reads_at_slot) and
      thinking is off (with thinking on it is cut there afterwards, cuts_at_slot);
    * after `</confidence>` when the slot token itself is sampled and scored by the
      reward (`conf_train: sampled`, the "readout + reward only" arm);
    * nowhere else on the verbalized channel: the numeral is sampled as text.
    """
    if cfg.get("conf_train") == "sampled":
        return [CONF_CLOSE]
    if reads_at_slot(cfg) and not cuts_at_slot(cfg):
        return [CONF_OPEN]
    return []


def sampling_settings(cfg: dict) -> dict:
    """Every sampling parameter, explicit: nothing may come from generation_config.json."""
    stop = stop_strings(cfg)
    return {
        "temperature": float(cfg["temperature"]),
        "top_k": int(cfg["top_k"]),
        "top_p": float(cfg["top_p"]),
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": int(cfg["max_completion_tokens"]),
        "stop": stop,
    }


def rollout_seed(step_seed: int, row: int) -> int:
    """A distinct, reproducible sampling seed for each rollout row of a step."""
    return (step_seed * 1_000_003 + row) % (2**31 - 1)


class VLLMEngine:
    """vLLM in this process: weights pushed in memory, prefix cache reset after each push.

    Each rollout is its own request with its own seed (rollout_seed), so a step's
    samples are reproducible and a resumed run draws the same ones; the shared
    prompt of a group is computed once thanks to the prefix cache.
    """

    def __init__(self, model_dir: str, tokenizer_dir: str, cfg: dict, dtype: str):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        import torch
        from vllm import LLM, SamplingParams

        max_model_len = int(cfg["max_prompt_tokens"] + cfg["max_completion_tokens"])
        if torch.cuda.is_available():
            platform = {"gpu_memory_utilization": float(cfg["vllm_gpu_memory_utilization"])}
        else:
            platform = {
                # The KV cache must be sized explicitly (vLLM measures NUMA node 0, not the machine).
                "kv_cache_memory_bytes": int(cfg["vllm_cpu_kv_cache_gb"] * 2**30),
                # A seeded request whose prompt is prefilled in chunks gets its generator rewound,
                # which CPU generators cannot do ("CPU Generator does not use offset"): prefill
                # whole prompts only.
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": max(max_model_len, 8192),
            }

        # Colocated with the trainer: under torchrun every rank runs its own engine (TP = 1) on
        # its own GPU. vLLM then joins the job's process group instead of creating one
        # ("external_launcher": each rank is a TP group of one, on cuda:LOCAL_RANK).
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_world_size() > 1
        if distributed:
            platform["distributed_executor_backend"] = "external_launcher"
            platform["tensor_parallel_size"] = 1
        # Sleep mode frees the engine's GPU memory during the update; vLLM implements it with
        # CUDA's virtual-memory allocator only. On CPU the engine stays resident (sleep/wake_up
        # are no-ops there, on purpose: there is no device memory to hand back).
        self.sleep_mode = torch.cuda.is_available()
        if self.sleep_mode:
            platform["enable_sleep_mode"] = True
        self._asleep: set[str] = set()   # tags ("weights", "kv_cache") currently released

        self._params = SamplingParams
        self.settings, self.cut_at_slot = sampling_settings(cfg), cuts_at_slot(cfg)
        self.dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(dtype, dtype)
        self.llm = LLM(
            model=model_dir,
            tokenizer=tokenizer_dir,
            dtype=dtype,
            seed=int(cfg["seed"]),
            max_model_len=max_model_len,
            enable_prefix_caching=True,
            enforce_eager=bool(cfg["vllm_enforce_eager"]),
            generation_config="vllm",   # explicit SamplingParams are never merged with the file's values
            disable_log_stats=True,
            **platform,
        )
        self.tokenizer = self.llm.get_tokenizer()     # the one that decodes its samples, reserved tokens included

    def _sampling(self, seed: int, **extra):
        return self._params(
            n=1, seed=seed, logprobs=0, skip_special_tokens=False, spaces_between_special_tokens=False,
            include_stop_str_in_output=True, ignore_eos=False, min_tokens=0, detokenize=True,
            **{**self.settings, **extra},
        )

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
            samples.append(closed_sample(self.tokenizer, ids, logprobs, reason, self.settings["stop"], self.cut_at_slot))
        return samples

    def score(self, sequences: list[list[int]]) -> list[list[float]]:
        """log pi(token_k | tokens_<k) for k >= 1 of each sequence (prompt log-probs)."""
        params = self._sampling(0, max_tokens=1, prompt_logprobs=0, stop=[])
        outputs = self.llm.generate([{"prompt_token_ids": list(s)} for s in sequences], [params] * len(sequences), use_tqdm=False)
        return [[entry[tok].logprob for tok, entry in zip(seq[1:], out.prompt_logprobs[1:])] for seq, out in zip(sequences, outputs)]

    def push_weights(self, model) -> None:
        """Copy the trainer's parameters into the engine's model (no disk round trip).

        vLLM's in-place reload takes checkpoint-format (HF) names, fuses them
        (q/k/v -> qkv_proj, ...) and re-runs the backend's post-load processing
        (the CPU backend repacks linear weights, so a bare `load_weights` on
        the live model fails). Cached KV blocks were computed by the old
        weights: the prefix cache is reset after every push."""
        self.wake_up(("weights",))                    # the KV cache stays released until the push is done

        def full_weights():
            """(HF name, full tensor in the engine's dtype), one parameter at a time in module
            order (layer by layer). A sharded (FSDP2 DTensor) parameter is all-gathered: a
            collective, so every rank pushes into its own engine in the same order."""
            from torch.distributed.tensor import DTensor

            for name, param in model.named_parameters():
                tensor = param.detach()
                if isinstance(tensor, DTensor):
                    tensor = tensor.full_tensor()
                yield name, tensor.to(self.dtype)

        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": full_weights(), "is_checkpoint_format": True})
        self.wake_up(("kv_cache",))
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight push")

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
            import torch

            torch.cuda.empty_cache()   # blocks the update freed but torch's allocator still holds
            self.llm.wake_up(tags=wanted)
            self._asleep -= set(wanted)

    def close(self) -> None:
        self.wake_up()
        del self.llm


def sample_next(logits, settings: dict, generators: list) -> tuple:
    """The next token of each row and its raw log-prob, as vLLM samples (sampling_settings):
    logits / T, then top-k, then top-p; T = 0 is greedy. One uniform draw per row from that
    row's own CPU `torch.Generator`, mapped through the row's cumulative distribution (inverse
    CDF), so a row's tokens do not depend on the other rows. The log-prob is log_softmax of
    the raw logits (T = 1, no top-k), as VLLMEngine reports it.

    logits: [N, V] float; returns (tokens [N] long, logprobs [N] float), on logits' device.
    """
    import torch

    raw_logp = logits.float().log_softmax(-1)                                          # [N, V]
    if settings["temperature"] == 0:
        tokens = logits.argmax(-1)                                                     # [N]
    else:
        scaled = logits.float() / settings["temperature"]                              # [N, V]
        k = settings["top_k"]
        if 0 < k < scaled.shape[-1]:
            kth = scaled.topk(k, dim=-1).values[:, -1:]                                # [N, 1]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        if settings["top_p"] < 1.0:
            sorted_logits, order = scaled.sort(-1, descending=True)                    # [N, V]
            sorted_probs = sorted_logits.softmax(-1)
            above = sorted_probs.cumsum(-1) - sorted_probs                             # mass ranked above each token
            drop_sorted = above >= settings["top_p"]                                   # [N, V], sorted order
            drop = torch.empty_like(drop_sorted).scatter_(-1, order, drop_sorted)      # [N, V], vocabulary order
            scaled = scaled.masked_fill(drop, float("-inf"))
        cdf = scaled.softmax(-1).double().cumsum(-1)                                   # [N, V]
        draws = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])   # [N]
        target = draws.to(cdf.device)[:, None] * cdf[:, -1:]                           # [N, 1] in [0, total)
        tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
    return tokens, raw_logp.gather(-1, tokens[:, None]).squeeze(-1)


def _all_ranks(device, value: int, op: str) -> int:
    """`value` reduced (min or max) over the ranks of the process group; `value` itself
    when there is no group of more than one process."""
    import torch
    import torch.distributed as dist

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
    the token that completes a stop string (kept); the log-probs returned are the raw ones
    (T = 1, no top-k) of the sampled tokens, as vLLM's.
    """

    def __init__(self, model, tokenizer, cfg: dict, dtype=None):
        import torch

        self.model, self.tokenizer, self.settings = model, tokenizer, sampling_settings(cfg)
        self.cut_at_slot = cuts_at_slot(cfg)
        self.dtype = dtype or torch.float32
        self.batch = cfg["hf_engine_batch"]
        if not isinstance(self.batch, int) or isinstance(self.batch, bool) or self.batch < 1:
            raise ValueError(f"hf_engine_batch must be a positive integer (rows generated together), got "
                             f"{self.batch!r}; set e.g. hf_engine_batch=64")

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
                else:                                  # this rank has no rows left: keep the others company
                    self._generate_chunk(rows[:1] or [[self.tokenizer.eos_token_id]], [0])
        finally:
            self.model.train(was_training)
        return samples

    def _generate_chunk(self, rows: list[list[int]], seeds: list[int]) -> list[Sample]:
        """One left-padded batch, a KV-cached forward per generated token."""
        import torch

        device, pad = self.model.device, self.tokenizer.pad_token_id
        width = max(len(p) for p in rows)
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in rows], device=device)                   # [N, W]
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows], device=device)          # [N, W]
        positions = (attention.cumsum(1) - 1).clamp(min=0)                                                       # [N, W]
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        token_ids: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        done = [False] * len(rows)
        cache = None
        with torch.no_grad(), torch.autocast(device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            while not self._done_on_every_rank(all(done)):
                out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                                 past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                logits = out.logits[:, -1].float()                                                               # [N, V]
                tokens, token_logp = sample_next(logits, self.settings, generators)                              # [N], [N]
                for i, (tok, lp) in enumerate(zip(tokens.tolist(), token_logp.tolist())):
                    if not done[i]:
                        token_ids[i].append(tok)
                        logprobs[i].append(lp)
                        done[i] = self._finished(token_ids[i])
                input_ids = tokens[:, None]                                                                      # [N, 1]
                attention = torch.cat([attention, attention.new_ones(len(rows), 1)], dim=1)                       # [N, W+t]
                positions = positions[:, -1:] + 1                                                                # [N, 1]
        samples = []
        for ids, lp in zip(token_ids, logprobs):
            ids, reason = self._trim(ids)
            samples.append(closed_sample(self.tokenizer, ids, lp[: len(ids)], reason, self.settings["stop"], self.cut_at_slot))
        return samples

    def _finished(self, ids: list[int]) -> bool:
        """EOS, the length budget, or a stop string that ends in the last token. Only the tail
        is decoded: every token writes at least one character, so a stop string that the last
        token completes starts within the last len(stop) tokens."""
        if ids[-1] == self.tokenizer.eos_token_id or len(ids) >= self.settings["max_tokens"]:
            return True
        return any(stop in decode(self.tokenizer, ids[-len(stop) - 1:]) for stop in self.settings["stop"])

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
                k = tokens_covering(_PrefixLengths(self.tokenizer, ids), at + len(stop))
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


def make_engine(cfg: dict, model, tokenizer, model_dir: str, run_dir, dtype) -> VLLMEngine | HFEngine:
    """The configured engine, holding the trainer's current weights, computing in `dtype`
    (a torch dtype: bf16 or fp32; the trainer's fp32 weights are cast on the push)."""
    if cfg["engine"] == "hf":
        return HFEngine(model, tokenizer, cfg, dtype)
    from pathlib import Path

    tokenizer_dir = Path(run_dir) / "tokenizer"
    tokenizer.save_pretrained(tokenizer_dir)          # the engine must see the reserved tokens
    model.config.save_pretrained(tokenizer_dir)       # vLLM reads a config.json beside the tokenizer
    source = model_dir
    rows_on_disk = _vocab_rows(model_dir)
    if rows_on_disk != model.get_input_embeddings().weight.shape[0]:
        # The embedding matrix grew (no spare rows): vLLM must load a matrix of the new shape.
        source = str(Path(run_dir) / "engine_init")
        model.save_pretrained(source, safe_serialization=True)
    engine = VLLMEngine(str(source), str(tokenizer_dir), cfg, {"torch.bfloat16": "bfloat16", "torch.float32": "float32"}[str(dtype)])
    engine.push_weights(model)                        # e.g. the freshly initialised reserved rows
    return engine


def _vocab_rows(model_dir: str) -> int:
    """Rows of the embedding matrix as stored at `model_dir` (local or hub id)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    return int(getattr(config, "vocab_size", None) or config.get_text_config().vocab_size)
