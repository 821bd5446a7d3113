"""Rollouts: the prompts, the segments of each completion, and the Rollout record.

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

Holds: the prompts (`app:model`), the segment rules on token ids, the `Rollout` record, built
from an engine's samples (`from_samples`) and cut at its slot (`at_slot`).
Does not hold: generation (engine.py), grading (verifier.py), the forward (policy.py).
Imports nothing of ours.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field, replace

CONF_HIGH = "<CONF_HIGH>"
CONF_LOW = "<CONF_LOW>"
ANALYSIS_OPEN, ANALYSIS_CLOSE = "<analysis>", "</analysis>"
CONF_OPEN, CONF_CLOSE = "<confidence>", "</confidence>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

CHANNELS = ("readout", "verbalized", "readout_noanalysis")
DOMAINS = ("math", "code")
ANSWER_MARKERS = {"math": "\\boxed", "code": "```python"}  # what makes an answer segment parseable, per domain

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
    messages = [{"role": "system", "content": system_prompt(channel, domain)}, {"role": "user", "content": problem}]
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
    )
    return tokenizer.encode(text, add_special_tokens=False)


# --- Segments on token ids -------------------------------------------------------------------


def decode(tokenizer, ids: list[int]) -> str:
    """Decode keeping special tokens (the reserved pair must stay visible) and spacing."""
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


class PrefixLengths:
    """Lazily evaluated `k -> len(decode(ids[:k]))`, for binary search over token boundaries."""

    def __init__(self, tokenizer, ids: list[int]):
        self.tokenizer, self.ids, self.cache = tokenizer, ids, {}

    def __len__(self) -> int:
        return len(self.ids) + 1

    def __getitem__(self, k: int) -> int:
        if k not in self.cache:
            self.cache[k] = len(decode(self.tokenizer, self.ids[:k]))
        return self.cache[k]


def tokens_before(prefix: PrefixLengths, char_pos: int) -> tuple[int, bool]:
    """The number k of leading tokens that end at or before `char_pos`, and whether
    they end exactly there. A token straddling `char_pos` (a BPE merge such as
    " <" that opens a tag) is left to the segment that starts at `char_pos`."""
    k = bisect.bisect_right(prefix, char_pos) - 1
    return k, prefix[k] == char_pos


def tokens_covering(prefix: PrefixLengths, char_pos: int) -> int:
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
    if not text.startswith(head):  # the head ends inside a character that the last token completes
        raise ValueError(
            f"close_slot: with tokenizer {tokenizer_name(tokenizer)} the completion's last token "
            f"rewrites the text before it ({head[-20:]!r} -> {text[len(head) - 20 : tag_end]!r})"
        )
    rest = text[len(head) : tag_end]  # e.g. ">": what the tag still needs
    tail = tokenizer.encode(rest, add_special_tokens=False)
    if decode(tokenizer, ids[:-1] + tail) != text[:tag_end]:
        raise ValueError(
            f"close_slot: tokenizer {tokenizer_name(tokenizer)} cannot encode {rest!r}, the text that "
            f"completes {CONF_OPEN} after {head[-40:]!r} (it gives {tail}, which decodes to "
            f"{decode(tokenizer, tail)!r})"
        )
    return ids[:-1] + tail


def repaired_tokens(sampled_ids: list[int], closed_ids: list[int]) -> int:
    """How many trailing tokens of `closed_ids` close_slot wrote in place of the last sampled one.

    >>> repaired_tokens([5, 6, 7], [5, 6, 7]), repaired_tokens([5, 6, 7], [5, 6, 8])
    (0, 1)
    >>> repaired_tokens([5, 6, 7], [5, 6, 8, 9])
    2
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


def find_answer_end(text: str, channel: str, start: int = 0) -> int:
    """Where the answer segment of `text` (from `start`) ends: at the first `<analysis>`, or
    (no-analysis variant) at the first `<confidence>`; -1 when that tag is missing. The one
    definition of the answer segment: parse_segments splits tokens by it and answer_text
    hands the verifier the text it grades.

    >>> find_answer_end("x = 4 <analysis>x</analysis>", "readout"), find_answer_end("no tags", "verbalized")
    (6, -1)
    """
    return text.find(CONF_OPEN if channel == "readout_noanalysis" else ANALYSIS_OPEN, start)


def answer_text(text: str, channel: str) -> str:
    """The answer segment of a completion's text after its thinking block (after_thinking): what
    the verifier grades; the whole text when the tag that ends it is missing.

    >>> answer_text("x = 4 <analysis>maybe 5</analysis>", "readout")
    'x = 4 '
    """
    end = find_answer_end(text, channel)
    return text if end < 0 else text[:end]


@dataclass
class Segments:
    """Token-index spans of one completion (half-open, indices into completion ids).

    answer:   [0, answer_end)
    analysis: [analysis_start, analysis_end) - empty when missing
    slot:     completion index k such that the readout is the next-token
              distribution after token k-1 (the slot token, if generated, is
              token k); None when the rollout has no readout.
    conf_text: the text between <confidence> and </confidence> (verbalized; which pair:
              NumeralRule.tag), and `report` the number it reads as (NaN if none).
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
    slot_misaligned: bool = False  # <confidence> ends inside a token (one the text goes on past)
    tag_token: int | None = None  # that token's index, when slot_misaligned
    report: float = math.nan  # conf_text as NumeralRule reads it (verbalized); NaN: no report


def parse_segments(
    tokenizer, completion_ids: list[int], channel: str, answer_marker: str, numeral: NumeralRule | None = None
) -> Segments:
    """Split a completion into answer / analysis / slot on token ids.

    answer_marker: the substring that makes an answer parseable ("\\boxed{" for
    math, "```python" for code); it must occur in the answer segment. numeral: how a
    verbalized report is read (None: NumeralRule(), this project's reading).

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
      and its tags are part of the confidence segment, as DCPO scores them); the report is
      the first (or, NumeralRule.tag, the last) `<confidence>...</confidence>` after it, and
      F = 1 needs it to read as a number (NumeralRule).
    """
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}; expected one of {CHANNELS}")
    text = decode(tokenizer, completion_ids)
    prefix = PrefixLengths(tokenizer, completion_ids)
    n = len(completion_ids)
    uses_analysis = channel != "readout_noanalysis"

    start = segments_start(text)
    if start is None:  # still thinking: nothing after the block
        return Segments(
            answer_end=n,
            analysis_start=n,
            analysis_end=n,
            slot=None,
            conf_text=None,
            fmt=False,
            has_answer=False,
            has_analysis=False,
        )

    answer_stop = find_answer_end(text, channel, start)
    if answer_stop < 0:
        has_answer = answer_marker in text[start:]
        return Segments(
            answer_end=n,
            analysis_start=n,
            analysis_end=n,
            slot=None,
            conf_text=None,
            fmt=False,
            has_answer=has_answer,
            has_analysis=False,
        )
    answer_end, _ = tokens_before(prefix, answer_stop)
    has_answer = answer_marker in text[start:answer_stop]

    # Where the analysis ends (char offset of the text after </analysis>).
    if uses_analysis:
        close = text.find(ANALYSIS_CLOSE, answer_stop + len(ANALYSIS_OPEN))
        if close < 0:
            return Segments(
                answer_end=answer_end,
                analysis_start=answer_end,
                analysis_end=n,
                slot=None,
                conf_text=None,
                fmt=False,
                has_answer=has_answer,
                has_analysis=False,
            )
        after_analysis = close + len(ANALYSIS_CLOSE)
    else:
        after_analysis = answer_stop

    conf_open = text.find(CONF_OPEN, after_analysis)
    if conf_open < 0:
        return Segments(
            answer_end=answer_end,
            analysis_start=answer_end,
            analysis_end=n,
            slot=None,
            conf_text=None,
            fmt=False,
            has_answer=has_answer,
            has_analysis=uses_analysis,
        )
    conf_end_char = conf_open + len(CONF_OPEN)

    if channel == "verbalized":
        numeral = numeral or NumeralRule()
        conf_text = confidence_text(text, conf_open, numeral.tag)
        report = parse_verbalized_confidence(conf_text, numeral)
        return Segments(
            answer_end=answer_end,
            analysis_start=answer_end,
            analysis_end=n,
            slot=None,
            conf_text=conf_text,
            fmt=has_answer and not math.isnan(report),
            has_answer=has_answer,
            has_analysis=True,
            report=report,
        )

    slot, exact = tokens_before(prefix, conf_end_char)
    if not exact:  # the tag ends inside token `slot`: there is no clean slot position
        return Segments(
            answer_end=answer_end,
            analysis_start=answer_end,
            analysis_end=n,
            slot=None,
            conf_text=None,
            fmt=False,
            has_answer=has_answer,
            has_analysis=uses_analysis,
            slot_misaligned=True,
            tag_token=slot,
        )
    analysis_end = slot if uses_analysis else answer_end  # no-analysis variant: no confidence segment
    return Segments(
        answer_end=answer_end,
        analysis_start=answer_end,
        analysis_end=analysis_end,
        slot=slot,
        conf_text=None,
        fmt=has_answer,
        has_answer=has_answer,
        has_analysis=uses_analysis,
    )


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


# --- The verbalized report (eq:verb's parse) --------------------------------------------------
# The paper writes q = parse(s) and leaves the parse open; each reading below is named after the
# code that reads it so (docs/choices.md). Config keys conf_tag, conf_number, conf_out_of_range.

CONF_TAGS = ("first", "last")
NUMBER_FORMS = ("decimal", "float")
OUT_OF_RANGE = ("reject", "clip", "keep")
_NUMERAL = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*")
_CONF_PAIR = re.compile(re.escape(CONF_OPEN) + "(.*?)" + re.escape(CONF_CLOSE), re.DOTALL)


@dataclass(frozen=True)
class NumeralRule:
    """How a verbalized report is read: which tag pair (first | last), what reads as a number
    (decimal: digits with at most one point | float: Python's float()), and a number outside
    [0, 1] (reject: no report | clip | keep). The defaults are this project's reading."""

    tag: str = "first"
    number: str = "decimal"
    out_of_range: str = "reject"

    def __post_init__(self):
        for name, value, choices in (
            ("tag", self.tag, CONF_TAGS),
            ("number", self.number, NUMBER_FORMS),
            ("out_of_range", self.out_of_range, OUT_OF_RANGE),
        ):
            if value not in choices:
                raise ValueError(f"NumeralRule {name}={value!r}; choose one of {choices}")


def confidence_text(text: str, start: int, tag: str = "first") -> str | None:
    """The text inside the first (tag="first") or last ("last") `<confidence>...</confidence>`
    pair at or after `start`; None when no pair closes there.

    >>> t = "<analysis>a</analysis><confidence>0.3</confidence> then <confidence>0.8</confidence>"
    >>> confidence_text(t, 22), confidence_text(t, 22, "last"), confidence_text("<confidence>0.3", 0)
    ('0.3', '0.8', None)
    """
    pairs = _CONF_PAIR.findall(text, start)
    if not pairs:
        return None
    return pairs[0] if tag == "first" else pairs[-1]


def parse_verbalized_confidence(conf_text: str | None, rule: NumeralRule | None = None) -> float:
    """Parse a verbalized confidence ("0.9", ".9", "1", "0.95") into a report q; NaN if it is not one.

    A missing or malformed report is NaN (a format failure), never 0; so is a number that is not
    finite (nan, inf), whatever the rule. `rule` (None: NumeralRule()) says what reads as a number
    and what becomes of one outside [0, 1].

    >>> [parse_verbalized_confidence(s) for s in ["0.9", " .9 ", "1", "0.95"]]
    [0.9, 0.9, 1.0, 0.95]
    >>> [parse_verbalized_confidence(s) for s in ["high", "1.5", "", "1e-1", None]]
    [nan, nan, nan, nan, nan]
    >>> lenient = NumeralRule(number="float", out_of_range="clip")           # RLCR's float(), clipped
    >>> [parse_verbalized_confidence(s, lenient) for s in ["1e-1", "+0.5", "1.5", "-2", "nan", "0.9 x"]]
    [0.1, 0.5, 1.0, 0.0, nan, nan]
    >>> parse_verbalized_confidence("85", NumeralRule(out_of_range="keep"))  # DCPO's code: 85 is 85
    85.0
    """
    rule = rule or NumeralRule()
    if conf_text is None:
        return float("nan")
    if rule.number == "decimal":
        m = _NUMERAL.fullmatch(conf_text)
        if m is None:
            return float("nan")
        value = float(m.group(1))
    else:
        try:
            value = float(conf_text)
        except ValueError:
            return float("nan")
    if not math.isfinite(value):
        return float("nan")
    if 0.0 <= value <= 1.0 or rule.out_of_range == "keep":
        return value
    return min(max(value, 0.0), 1.0) if rule.out_of_range == "clip" else float("nan")


@dataclass
class Rollout:
    """One sampled completion with everything the loss needs.

    Rows are laid out group by group: rollout `i` of question `q` is row q*G + i.
    """

    question_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    finish_reason: str  # "stop" (EOS or stop string) or "length" (truncated)
    segments: Segments
    engine_logprobs: list[float] = field(default_factory=list)  # of the sampled tokens
    slot_repaired: int = 0  # trailing tokens close_slot wrote (not sampled)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def sampled_len(self) -> int:
        """Completion tokens the policy sampled (the repaired tail excepted): the scored ones."""
        return len(self.completion_ids) - self.slot_repaired


def from_samples(
    tokenizer,
    samples: list,
    question_ids: list[str],
    prompts: list[list[int]],
    rules: str,
    marker: str,
    numeral: NumeralRule | None = None,
) -> list[Rollout]:
    """Rollouts of an engine's samples (engine.Sample: token_ids, finish_reason, logprobs,
    slot_repaired), the same number per question (sample j of question q is row q*G + j), each
    parsed into segments by `rules` (a channel's), `marker` and `numeral` (parse_segments)."""
    per = len(samples) // max(len(prompts), 1)
    return [
        Rollout(
            question_id=question_ids[row // per],
            prompt_ids=prompts[row // per],
            completion_ids=sample.token_ids,
            text=decode(tokenizer, sample.token_ids),
            finish_reason=sample.finish_reason,
            segments=parse_segments(tokenizer, sample.token_ids, rules, marker, numeral),
            engine_logprobs=sample.logprobs,
            slot_repaired=sample.slot_repaired,
        )
        for row, sample in enumerate(samples)
    ]


def at_slot(tokenizer, rollouts: list[Rollout]) -> list[Rollout]:
    """Rollouts whose numeral was sampled as text, cut right after <confidence> (through_slot,
    closed where the numeral merged with the tag) and parsed like the readout channel: what
    eq:digitexp teacher-forces "0." after. A rollout that already ends at its slot (a readout
    rollout, on any prompt) is kept as it was parsed, so this is idempotent."""
    out = []
    for r in rollouts:
        if r.segments.slot is not None and r.segments.slot == len(r.completion_ids):
            out.append(r)
            continue
        ids, repaired = through_slot(tokenizer, r.completion_ids)
        segments = parse_segments(tokenizer, ids, "readout", "")
        out.append(replace(r, completion_ids=ids, slot_repaired=repaired or r.slot_repaired, segments=segments))
    return out


def slot_contexts(rollouts: list[Rollout]) -> list[list[int] | None]:
    """Each rollout's ids through its slot (prompt + completion up to and with `<confidence>`):
    the context whose next-token distribution a model read reads; None where there is no slot."""
    return [
        r.prompt_ids + r.completion_ids[: r.segments.slot] if r.segments.slot is not None else None for r in rollouts
    ]
