"""Prompts and segment parsing on real tokenizer output: the tiny byte-level BPE, and Qwen3's
own tokenizer (a real part, found by infra/realparts.py), whose merges cross the tags."""

import copy
import dataclasses
import math
import re

import pytest

import confidence
import config
import engine as eng
import problems
import rollout as ro
import verifier
from rollout import NumeralRule, Rollout, confidence_text, parse_segments, parse_verbalized_confidence, system_prompt


def enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


def char_tokens(tok, text):
    """`text` as one token per character: a tag split across many tokens."""
    return [i for ch in text for i in enc(tok, ch)]


ANSWER = "12 + 7 = 19. The answer is \\boxed{19}."
ANALYSIS = " <analysis> I may have slipped on a carry. </analysis>"


def test_prompts_follow_the_paper():
    readout, verbal = system_prompt("readout", "math"), system_prompt("verbalized", "math")
    assert (
        "output exactly one token: <CONF_HIGH> if your final answer is more likely correct than not, "
        "otherwise <CONF_LOW>" in readout
    )
    assert "as a decimal number between 0 and 1 (e.g. 0.3 or 0.8)" in verbal
    assert readout.endswith("<analysis> uncertainty analysis here </analysis> <confidence><CONF_HIGH></confidence>")
    assert verbal.endswith("<confidence> confidence here </confidence>")
    # the two channels differ only in the slot instruction (and its format example)
    assert readout.split("Then")[0] == verbal.split("Then")[0]
    code = system_prompt("readout", "code")
    assert "```python" in code and "\\boxed" not in code
    no_analysis = system_prompt("readout_noanalysis", "math")
    assert "<analysis>" not in no_analysis and "<CONF_HIGH>" in no_analysis
    with pytest.raises(ValueError, match="unknown channel"):
        system_prompt("numeric", "math")


def test_prompt_goes_through_chat_template(tiny_tokenizer):
    """The tiny template carries Qwen3's thinking switch: an empty block unless thinking is on."""
    ids = ro.build_prompt_ids(tiny_tokenizer, "What is 2 + 2?", "readout", "math")
    text = tiny_tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nA conversation between User and Assistant.")
    assert text.endswith("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert tiny_tokenizer.convert_tokens_to_ids(ro.THINK_OPEN) in ids[-6:]  # one token, as in Qwen3
    thinking = tiny_tokenizer.decode(ro.build_prompt_ids(tiny_tokenizer, "What is 2 + 2?", "readout", "math", True))
    assert thinking.endswith("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("domain", ro.DOMAINS)
@pytest.mark.parametrize("channel", ro.CHANNELS)
def test_prompts_through_qwen3s_template(qwen3_tokenizer, channel, domain, thinking):
    tok, problem = qwen3_tokenizer, "Find $x$ if $2x + 3 = 11$. 请给出答案。"
    ids = ro.build_prompt_ids(tok, problem, channel, domain, enable_thinking=thinking)
    assert ro.decode(tok, ids) == (
        f"<|im_start|>system\n{system_prompt(channel, domain)}<|im_end|>\n<|im_start|>user\n{problem}<|im_end|>\n"
        "<|im_start|>assistant\n" + ("" if thinking else "<think>\n\n</think>\n\n")
    )
    assert ids[:1] == [tok.convert_tokens_to_ids("<|im_start|>")] and tok.convert_tokens_to_ids("<|im_end|>") in ids
    if not thinking:
        assert ids[-4:-2] == [151667, 271] and ids[-2:] == [151668, 271]  # <think> "\n\n" </think> "\n\n"


def test_complete_readout_rollout(tiny_tokenizer):
    tok = tiny_tokenizer
    answer, analysis, tag = enc(tok, ANSWER), enc(tok, ANALYSIS), enc(tok, " <confidence>")
    seg = parse_segments(tok, answer + analysis + tag, "readout", "\\boxed")
    assert (seg.answer_end, seg.analysis_start) == (len(answer), len(answer))
    assert seg.slot == seg.analysis_end == len(answer) + len(analysis) + len(tag)
    assert seg.fmt and seg.has_answer and seg.has_analysis and not seg.slot_misaligned


def test_tags_split_into_single_characters(tiny_tokenizer):
    tok = tiny_tokenizer
    answer = enc(tok, ANSWER)
    analysis = char_tokens(tok, " <analysis>") + enc(tok, " hmm ") + char_tokens(tok, "</analysis>")
    tag = char_tokens(tok, " <confidence>")
    seg = parse_segments(tok, answer + analysis + tag, "readout", "\\boxed")
    assert seg.answer_end == len(answer) + 1  # the lone space token ends before '<', so it is answer
    assert seg.slot == len(answer) + len(analysis) + len(tag)
    assert seg.fmt


def test_slot_token_and_closing_tag_after_the_slot(tiny_tokenizer):
    """An engine that did not stop at <confidence>: the slot token is excluded from both segments."""
    import copy

    tok = copy.deepcopy(tiny_tokenizer)
    tok.add_special_tokens({"extra_special_tokens": [ro.CONF_HIGH, ro.CONF_LOW]}, replace_extra_special_tokens=False)
    high = tok.convert_tokens_to_ids(ro.CONF_HIGH)
    prefix = enc(tok, ANSWER + ANALYSIS + " <confidence>")
    ids = prefix + [high] + enc(tok, "</confidence>") + [tok.eos_token_id]
    seg = parse_segments(tok, ids, "readout", "\\boxed")
    assert seg.slot == seg.analysis_end == len(prefix) and ids[seg.slot] == high
    assert seg.fmt


def test_tag_ending_inside_a_token_has_no_readout(tiny_tokenizer):
    tok = tiny_tokenizer
    merged = enc(tok, "></")
    assert len(merged) == 1  # one BPE token: the '>' that ends <confidence> is glued to '</'
    ids = enc(tok, ANSWER + ANALYSIS + " <confidence") + merged
    seg = parse_segments(tok, ids, "readout", "\\boxed")
    assert seg.slot is None and seg.slot_misaligned and not seg.fmt
    assert seg.answer_end == len(enc(tok, ANSWER))


def test_missing_analysis(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = enc(tok, ANSWER + " <confidence>")
    seg = parse_segments(tok, ids, "readout", "\\boxed")
    assert seg.answer_end == len(ids) and seg.analysis_start == seg.analysis_end == len(ids)
    assert seg.slot is None and not seg.fmt and seg.has_answer and not seg.has_analysis


def test_truncated_inside_analysis(tiny_tokenizer):
    tok = tiny_tokenizer
    answer = enc(tok, ANSWER)
    ids = answer + enc(tok, " <analysis> I may have slipped")
    seg = parse_segments(tok, ids, "readout", "\\boxed")
    assert (seg.answer_end, seg.analysis_start, seg.analysis_end) == (len(answer), len(answer), len(ids))
    assert seg.slot is None and not seg.fmt


def test_missing_boxed_answer_keeps_the_readout_but_fails_format(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = enc(tok, "The answer is 19." + ANALYSIS + " <confidence>")
    seg = parse_segments(tok, ids, "readout", "\\boxed")
    assert seg.slot == len(ids) and not seg.has_answer and not seg.fmt


def test_no_analysis_variant(tiny_tokenizer):
    tok = tiny_tokenizer
    answer = enc(tok, ANSWER)
    ids = answer + enc(tok, " <confidence>")
    seg = parse_segments(tok, ids, "readout_noanalysis", "\\boxed")
    assert seg.answer_end == len(answer) and seg.slot == len(ids)
    assert seg.analysis_start == seg.analysis_end  # no confidence segment at all
    assert seg.fmt


def test_where_each_arm_stops_generating():
    def stops(name):
        return eng.stop_strings(confidence.plan(config.load_config(name)))

    assert stops("credo") == stops("credo_noanalysis") == stops("grpo_head") == [ro.CONF_OPEN]  # read at the slot
    assert stops("credo_digitexp") == [ro.CONF_OPEN]  # verbalized prompt, eq:digitexp read at the slot
    assert stops("credo_sampled") == [ro.CONF_CLOSE]  # the slot token itself is sampled
    assert stops("rlcr") == stops("rlcr_swd") == stops("grpo") == []  # the numeral is sampled as text
    assert eng.sampling_settings(
        config.load_config("credo_sampled"), confidence.plan(config.load_config("credo_sampled"))
    )["stop"] == [ro.CONF_CLOSE]

    def thinking(name):
        cfg = config.load_config(name, ["enable_thinking=true"])
        plan = confidence.plan(cfg)
        return eng.stop_strings(plan), plan.cuts_at_slot, plan.segments

    # with thinking on, a trace that mentions <confidence> must not end the rollout: cut afterwards
    assert thinking("credo") == ([], True, "readout") and thinking("credo_digitexp") == ([], True, "readout")
    assert thinking("rlcr") == ([], False, "verbalized") and thinking("credo_sampled")[:2] == ([ro.CONF_CLOSE], False)
    assert not confidence.plan(config.load_config("credo")).cuts_at_slot


def test_verbalized_rollouts(tiny_tokenizer):
    tok = tiny_tokenizer
    answer = enc(tok, ANSWER)
    good = answer + enc(tok, ANALYSIS + " <confidence>0.75</confidence>") + [tok.eos_token_id]
    seg = parse_segments(tok, good, "verbalized", "\\boxed")
    assert seg.fmt and seg.conf_text == "0.75" and seg.slot is None
    assert (seg.answer_end, seg.analysis_end) == (len(answer), len(good))
    junk = answer + enc(tok, ANALYSIS + " <confidence>high</confidence>")
    assert not parse_segments(tok, junk, "verbalized", "\\boxed").fmt
    unclosed = answer + enc(tok, ANALYSIS + " <confidence>0.7")
    assert not parse_segments(tok, unclosed, "verbalized", "\\boxed").fmt


def test_verbalized_report_first_or_last_tag_and_number_rule(tiny_tokenizer):
    tok = tiny_tokenizer
    answer = enc(tok, ANSWER)
    twice = answer + enc(tok, ANALYSIS + " <confidence>0.3</confidence> <confidence>0.8</confidence>")
    first, last = (
        parse_segments(tok, twice, "verbalized", "\\boxed", NumeralRule(tag=tag)) for tag in ("first", "last")
    )
    assert (first.conf_text, first.report, first.fmt) == ("0.3", 0.3, True)  # this project (the slot digit_exp reads)
    assert (last.conf_text, last.report, last.fmt) == ("0.8", 0.8, True)  # RLCR's code
    assert parse_segments(tok, twice, "verbalized", "\\boxed").report == 0.3  # no rule: this project's reading
    sci = answer + enc(tok, ANALYSIS + " <confidence>1e-1</confidence>")
    decimal = parse_segments(tok, sci, "verbalized", "\\boxed")
    lenient = parse_segments(tok, sci, "verbalized", "\\boxed", NumeralRule(number="float"))
    assert not decimal.fmt and math.isnan(decimal.report) and (lenient.fmt, lenient.report) == (True, 0.1)
    big = answer + enc(tok, ANALYSIS + " <confidence>85</confidence>")
    kept = parse_segments(tok, big, "verbalized", "\\boxed", NumeralRule(out_of_range="keep"))
    assert not parse_segments(tok, big, "verbalized", "\\boxed").fmt and (kept.fmt, kept.report) == (True, 85.0)


def test_confidence_text_reads_the_first_or_the_last_closed_pair():
    text = "x <confidence>0.2</confidence> y <confidence>0.6</confidence> <confidence>0.9"
    assert confidence_text(text, 0) == "0.2" and confidence_text(text, 0, "last") == "0.6"  # 0.9 never closes
    assert confidence_text(text, 3) == "0.6"  # from `start` on
    assert confidence_text("<confidence>0.9", 0) is None and confidence_text("none", 0, "last") is None


@pytest.mark.parametrize(
    "text,rule,value",
    [
        ("1e-1", NumeralRule(number="float"), 0.1),  # RLCR's code: Python's float()
        ("+0.5", NumeralRule(number="float"), 0.5),
        (" 0.25\n", NumeralRule(number="float"), 0.25),
        ("1_0", NumeralRule(number="float", out_of_range="keep"), 10.0),
        ("85", NumeralRule(out_of_range="keep"), 85.0),  # DCPO's code: 85 is 85
        ("85", NumeralRule(out_of_range="clip"), 1.0),
        ("-0.5", NumeralRule(number="float", out_of_range="clip"), 0.0),
        ("-0.5", NumeralRule(number="float", out_of_range="keep"), -0.5),
        ("0.75", NumeralRule(number="float", out_of_range="keep"), 0.75),
    ],
)
def test_verbalized_numerals_under_each_rule(text, rule, value):
    assert parse_verbalized_confidence(text, rule) == value


@pytest.mark.parametrize(
    "text,rule",
    [
        ("1e-1", NumeralRule()),  # a plain decimal only (this project)
        ("+0.5", NumeralRule()),
        ("85", NumeralRule()),  # reject: outside [0, 1] is no report
        ("nan", NumeralRule(number="float", out_of_range="keep")),  # never a report, whatever the rule
        ("inf", NumeralRule(number="float", out_of_range="keep")),
        ("-inf", NumeralRule(number="float", out_of_range="clip")),
        ("0.9 sure", NumeralRule(number="float")),
        (None, NumeralRule(number="float", out_of_range="keep")),
    ],
)
def test_verbalized_non_reports_under_each_rule(text, rule):
    assert math.isnan(parse_verbalized_confidence(text, rule))


def test_a_numeral_rule_names_its_choices():
    with pytest.raises(ValueError, match=r"NumeralRule tag='middle'; choose one of \('first', 'last'\)"):
        NumeralRule(tag="middle")
    with pytest.raises(ValueError, match="NumeralRule out_of_range='wrap'"):
        NumeralRule(out_of_range="wrap")


@pytest.mark.parametrize(
    "text,value", [("0.9", 0.9), (".9", 0.9), ("1", 1.0), ("0.95", 0.95), (" 0 ", 0.0), ("1.0", 1.0)]
)
def test_verbalized_numerals(text, value):
    assert parse_verbalized_confidence(text) == value


@pytest.mark.parametrize("text", ["junk", "1.5", "-0.2", "0.9.1", "", "90%", None])
def test_verbalized_failures_are_nan_not_zero(text):
    assert math.isnan(parse_verbalized_confidence(text))


# --- Qwen3's vocabulary: the tag may end inside a token (close_slot) -----------------------------

HEAD = "So the answer is \\boxed{4}.\n\n<analysis>\nThe sum could be off by one.\n</analysis>\n\n<confidence"
GT = 29  # Qwen3's id of the lone ">"


def tokens_starting_with_gt(tok) -> list[int]:
    """Every Qwen3 token whose text is ">" followed by more characters."""
    return [
        i
        for t, i in tok.get_vocab().items()
        if i < 151643 and len(s := tok.convert_tokens_to_string([t])) > 1 and s.startswith(">")
    ]


def test_close_slot_after_every_token_that_starts_with_gt(qwen3_tokenizer):
    """The model writes `<confidence` and then any of the 265 tokens ">..." of Qwen's vocabulary:
    the slot survives, right after a lone ">" that replaced the merged token."""
    tok = qwen3_tokenizer
    merged = tokens_starting_with_gt(tok)
    assert len(merged) == 265 and enc(tok, ">") == [GT]
    head = enc(tok, HEAD)
    for token in merged:
        assert parse_segments(tok, head + [token], "readout", "\\boxed").slot_misaligned  # what it was before
        closed = ro.close_slot(tok, head + [token])
        assert closed == head + [GT], ro.decode(tok, [token])
        seg = parse_segments(tok, closed, "readout", "\\boxed")
        assert seg.slot == len(closed) and seg.fmt and not seg.slot_misaligned
        assert ro.repaired_tokens(head + [token], closed) == 1


# Plausible texts after `<confidence` (the reserved tokens written as text, a tokenizer
# without them): where the engine stops (the first token that completes the tag).
CONTINUATIONS = [
    "\n",
    "\n\n",
    " ",
    "  ",
    "<CONF_HIGH>",
    "<CONF_LOW>",
    "</confidence>",
    "<",
    "<|im_end|>",
    ".",
    ",",
    ":",
    "The",
    "I",
    "High",
    "high",
    "Low",
    "0.8",
    ".8",
    "1",
    "\n<CONF_HIGH>",
    " <CONF_HIGH>",
    "\n\n<CONF_LOW>",
    "**",
    "(",
    "[",
    "{",
    '"',
    "'",
    "-",
]


def test_close_slot_on_plausible_continuations(qwen3_tokenizer):
    tok, merges = qwen3_tokenizer, 0
    for rest in CONTINUATIONS:
        ids = enc(tok, HEAD + ">" + rest)
        stopped = ids[: ro.tokens_covering(ro.PrefixLengths(tok, ids), len(HEAD) + 1)]  # as a stop string cuts
        closed = ro.close_slot(tok, stopped)
        merges += closed != stopped
        assert ro.decode(tok, closed) == HEAD + ">" and closed[-1] == GT
        assert parse_segments(tok, closed, "readout", "\\boxed").slot == len(closed)
        assert ro.close_slot(tok, closed) == closed  # idempotent
    assert merges == 20  # 20 of these 30 continuations glue ">" to what follows


def test_close_slot_leaves_other_completions_alone(qwen3_tokenizer):
    tok = qwen3_tokenizer
    at_tag = enc(tok, HEAD + ">")
    assert ro.close_slot(tok, at_tag) == at_tag  # the tag ends on a token boundary
    no_tag = enc(tok, "So the answer is \\boxed{4}. <analysis> hmm </analysis>\n")
    assert ro.close_slot(tok, no_tag) == no_tag and ro.close_slot(tok, []) == []
    numeral = enc(tok, HEAD + ">\n0.8</confidence>")  # the tag ends before the last token
    assert ro.close_slot(tok, numeral) == numeral
    seg = parse_segments(tok, numeral, "readout", "\\boxed")
    assert seg.slot_misaligned and ro.decode(tok, [numeral[seg.tag_token]]) == ">\n"


def test_close_slot_names_a_tokenizer_that_cannot_write_the_tag():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({"[UNK]": 0, "<confidence": 1, ">\n": 2, "x": 3}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Split(Regex("<confidence|>\n|."), behavior="isolated")
    words.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]")
    assert ro.decode(tok, [3, 1, 2]) == "x<confidence>\n" and enc(tok, ">") == [0]
    with pytest.raises(
        ValueError, match=rf"tokenizer {type(tok).__name__}\('in memory'\) cannot encode '>'.*'x<confidence'"
    ):
        ro.close_slot(tok, [3, 1, 2])


def split_is_at(tok, ids, k: int, text: str, char_pos: int) -> bool:
    """The first k tokens end at or before `char_pos` of `text` and token k (if any) crosses it."""
    head = ro.decode(tok, ids[:k])
    return (
        text.startswith(head)
        and len(head) <= char_pos
        and (k == len(ids) or len(ro.decode(tok, ids[: k + 1])) > char_pos)
    )


REALISTIC = {
    "glued to words and braces": "x=\\boxed{4}<analysis>the carry</analysis><confidence>",
    "crlf": "Step 1: 2+2.\r\nSo \\boxed{4}.\r\n<analysis>\r\nA slip is possible.\r\n</analysis>\r\n<confidence>",
    "cjk": "答案是 \\boxed{4}。<analysis>我可能算错了进位。</analysis>\n<confidence>",
    "code blocks": "```python\nprint(2 + 2 > 3)\n```\n\\boxed{4}```"
    "<analysis>\n```python\nx = 1\n```\n</analysis>\n<confidence>",
    "spaced tags": "\\boxed{4} <analysis> maybe 5 </analysis> <confidence>",
}


@pytest.mark.parametrize("case", sorted(REALISTIC))
def test_segments_on_realistic_qwen3_completions(qwen3_tokenizer, case):
    tok, text = qwen3_tokenizer, REALISTIC[case]
    ids = ro.close_slot(tok, enc(tok, text))
    seg = parse_segments(tok, ids, "readout", "\\boxed")
    analysis_at = text.find(ro.ANALYSIS_OPEN, text.find("\\boxed"))
    assert split_is_at(tok, ids, seg.answer_end, text, analysis_at)
    assert seg.slot == seg.analysis_end == len(ids) and ro.decode(tok, ids) == text
    assert seg.fmt and seg.has_answer and seg.has_analysis


def test_missing_and_truncated_tags_on_qwen3(qwen3_tokenizer):
    tok = qwen3_tokenizer
    cases = {
        "\\boxed{4}\n<confidence>": (False, None),  # no analysis
        "\\boxed{4}\n<analysis>\nThe carry": (False, None),  # truncated in the analysis
        "\\boxed{4}\n<analysis>\nok</analysis>\n": (False, None),  # stopped before the tag
        "\\boxed{4}\n<analysis>\nok</analysis>\n<confid": (False, None),  # truncated inside the tag
        "4\n<analysis>\nok</analysis>\n<confidence>": (False, "slot"),  # no boxed answer: F = 0
    }
    for text, (fmt, slot) in cases.items():
        ids = ro.close_slot(tok, enc(tok, text))
        seg = parse_segments(tok, ids, "readout", "\\boxed")
        assert seg.fmt is fmt and (seg.slot is None) is (slot is None), text
        assert not seg.slot_misaligned


@pytest.mark.parametrize("numeral", ["0.8", ".8", " 0.75", "1", "\n0.9\n"])
def test_verbalized_numerals_on_qwen3(qwen3_tokenizer, numeral):
    """The numeral parses from the text whatever merges, and through_slot ends the completion
    right after <confidence> (closed where ">" merged with it) for eq:digitexp."""
    tok = qwen3_tokenizer
    text = HEAD + ">" + numeral + "</confidence><|im_end|>"
    ids = enc(tok, text)
    seg = parse_segments(tok, ids, "verbalized", "\\boxed")
    assert seg.fmt and parse_verbalized_confidence(seg.conf_text) == float(numeral)
    cut, repaired = ro.through_slot(tok, ids)
    assert ro.decode(tok, cut) == HEAD + ">" and cut[-1] == GT
    assert repaired == (1 if numeral[0] in ".\n" else 0)  # ">." and ">\\n" are tokens; ">0", "> " are not
    assert ro.through_slot(tok, cut) == (cut, 0)


THOUGHT = (
    "<think>\nThe format asks for <analysis> </analysis> and then <confidence><CONF_HIGH></confidence>; "
    "maybe \\boxed{5}? No: 2 + 2 = 4.\n</think>\n\n"
)


def test_thinking_blocks_that_mention_the_tags(qwen3_tokenizer):
    tok = qwen3_tokenizer
    answer = "So \\boxed{4}.\n<analysis>\nA slip is possible.\n</analysis>\n<confidence"
    ids = ro.close_slot(tok, enc(tok, THOUGHT + answer + ">\n"))
    assert ids[0] == 151667 and THOUGHT.count("</think>") == 1  # <think> is one token
    seg = parse_segments(tok, ids, "readout", "\\boxed")
    text = THOUGHT + answer + ">"
    assert split_is_at(tok, ids, seg.answer_end, text, text.find("<analysis>", len(THOUGHT)))
    assert seg.slot == len(ids) and seg.fmt
    assert ro.after_thinking(ro.decode(tok, ids)) == "\n\n" + answer + ">"
    # the answer is graded after the block: its "\\boxed{5}" is not the answer
    assert "\\boxed{5}" not in ro.after_thinking(text) and "\\boxed{5}" in text

    verbal = enc(tok, THOUGHT + "So \\boxed{4}.\n<analysis>ok</analysis>\n<confidence>0.7</confidence>")
    assert parse_segments(tok, verbal, "verbalized", "\\boxed").conf_text == "0.7"
    unfinished = enc(tok, "<think>\nI will answer \\boxed{4} <analysis> x </analysis> <confidence>")
    seg = parse_segments(tok, unfinished, "readout", "\\boxed")
    assert seg.slot is None and not seg.fmt and not seg.has_answer
    assert ro.after_thinking(ro.decode(tok, unfinished)) == ""


def test_thinking_rollouts_are_cut_at_the_slot_after_the_block(qwen3_tokenizer):
    """With thinking on the engine does not stop at <confidence> (THOUGHT mentions it): the
    sample is cut right after the tag that follows the block, closed where ">" merged, and
    keeps the log-probs of its sampled tokens only."""
    tok = qwen3_tokenizer
    for glue, repaired in (("><CONF_HIGH></confidence>", 1), (">\n<CONF_HIGH>\n</confidence>", 1), ("> high", 0)):
        head = enc(tok, THOUGHT + "So \\boxed{4}.\n<analysis>\nok\n</analysis>\n<confidence")
        ids = head + enc(tok, glue) + [tok.eos_token_id]
        logprobs = [-0.5] * len(ids)
        sample = eng.closed_sample(tok, ids, logprobs, "stop", stop=[], cut=True)
        assert (
            ro.decode(tok, sample.token_ids).endswith("</analysis>\n<confidence>") and sample.slot_repaired == repaired
        )
        assert sample.token_ids[: len(head)] == head and len(sample.logprobs) == len(sample.token_ids) - repaired
        seg = parse_segments(tok, sample.token_ids, "readout", "\\boxed")
        assert seg.slot == len(sample.token_ids) and seg.fmt
    stopped_in_thought = enc(tok, THOUGHT.split("<confidence>")[0] + "<confidence>")  # what a stop string gives
    assert parse_segments(tok, stopped_in_thought, "readout", "\\boxed").slot is None
    untagged = enc(tok, "<think>\nhmm\n</think>\n\nNo idea.") + [tok.eos_token_id]
    sample = eng.closed_sample(tok, untagged, [-1.0] * len(untagged), "stop", stop=[], cut=True)
    assert (sample.token_ids, sample.slot_repaired, len(sample.logprobs)) == (untagged, 0, len(untagged))


def test_rollout_doctests():
    import doctest

    result = doctest.testmod(ro, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 5


# --- engines (the real vLLM engine on CPU, and the HF engine) -------------------------------------


@pytest.fixture(scope="module")
def policy(tiny_dir):
    import torch

    import policy as pol

    torch.manual_seed(0)
    # Sampled at T = 0.7 with top-k off: the engine's log-probs (vLLM's processed ones) are then
    # exactly pi_T, which the trainer computes (the top-k test below turns truncation on)
    cfg = config.load_config(
        "tiny",
        [
            "group_size=3",
            "per_device_batch_size=3",
            "grad_accum=2",
            "max_completion_tokens=48",
            "temperature=0.7",
            "top_k=0",
        ],
    )
    loaded = pol.load_policy(str(tiny_dir / "model"), torch.device("cpu"))
    model, tok, high, low = loaded.model, loaded.tokenizer, loaded.high_id, loaded.low_id
    rows = problems.load_rows(str(tiny_dir / "math_train.jsonl"), "math")[:2]
    prompts = [ro.build_prompt_ids(tok, r["problem"], "readout", "math") for r in rows]
    return cfg, model, tok, high, low, rows, prompts


@pytest.fixture(scope="module")
def vllm_engine(policy, tmp_path_factory):
    import torch

    cfg, model, tok, *_ = policy
    engine = eng.make_engine(
        cfg, confidence.plan(cfg), model, tok, cfg.model, tmp_path_factory.mktemp("run"), torch.float32
    )
    yield engine
    engine.close()


def trainer_logprobs(policy, samples, prompts, group, temperature=None):
    """The trainer's log-probs of the sampled tokens, at the fixture's sampling temperature
    unless told (score() gives raw, T = 1, prompt log-probs)."""
    import policy as pol

    cfg, model, tok, high, low, *_ = policy
    rollouts = [
        Rollout(
            "q",
            prompts[i // group],
            s.token_ids,
            "",
            s.finish_reason,
            parse_segments(tok, s.token_ids, "readout", "\\boxed"),
            s.logprobs,
            s.slot_repaired,
        )
        for i, s in enumerate(samples)
    ]
    batch = pol.collate(rollouts, tok.pad_token_id)
    import torch

    with torch.no_grad():
        logp = pol.forward(
            pol.Policy(model, tok, high, low, torch.float32, temperature=temperature or cfg.temperature), batch
        ).logp
    out = []
    for i, r in enumerate(rollouts):
        p, c = len(r.prompt_ids), r.sampled_len
        out.append(logp[i, p - 1 : p - 1 + c])
    return rollouts, batch, out


def test_vllm_engine_samples_groups_reproducibly(policy, vllm_engine):
    cfg, *_, prompts = policy
    samples = vllm_engine.generate(prompts, group_size=3, seed=7)
    assert len(samples) == 6
    for s in samples:
        assert 0 < len(s.token_ids) <= 48 and len(s.logprobs) == len(s.token_ids)
        assert s.finish_reason in ("stop", "length")
    assert len({tuple(s.token_ids) for s in samples}) > 2  # rollouts differ within a group
    again = vllm_engine.generate(prompts, group_size=3, seed=7)
    assert [s.token_ids for s in again] == [s.token_ids for s in samples]
    other = vllm_engine.generate(prompts, group_size=3, seed=8)
    assert [s.token_ids for s in other] != [s.token_ids for s in samples]


def test_vllm_engine_takes_more_prompt_tokens_than_one_step_holds(policy, vllm_engine, tiny_dir):
    """160 seeded requests (~38k prompt tokens): regression for chunked prefill of seeded
    requests on CPU, which crashed vLLM ("CPU Generator does not use offset")."""
    cfg, model, tok, *_ = policy
    rows = problems.load_rows(str(tiny_dir / "math_test.jsonl"), "math")[:40]
    prompts = [ro.build_prompt_ids(tok, r["problem"], "readout", "math") for r in rows]
    assert sum(len(p) for p in prompts) * 4 > 4 * 8192
    samples = vllm_engine.generate(prompts, group_size=4, seed=5)
    assert len(samples) == 160 and all(s.token_ids for s in samples)
    assert [s.token_ids for s in vllm_engine.generate(prompts[:2], group_size=4, seed=5)] == [
        s.token_ids for s in samples[:8]
    ]


def test_vllm_logprobs_match_the_trainer_forward(policy, vllm_engine):
    """At T = 0.7, top-k off: vLLM's processed log-probs are log_softmax(logits / T), the
    trainer's pi_T, to float noise; the raw (T = 1) ones it used to report are far off."""
    import torch

    import policy as pol

    cfg, model, tok, high, low, _, prompts = policy
    samples = vllm_engine.generate(prompts, group_size=3, seed=11)
    _, batch, trainer = trainer_logprobs(policy, samples, prompts, 3)
    gap = max(float((torch.tensor(s.logprobs) - t).abs().max()) for s, t in zip(samples, trainer))
    assert gap < 1e-4
    with torch.no_grad():
        raw = pol.forward(pol.Policy(model, tok, high, low, torch.float32), batch).logp  # T = 1
    raw_gap = max(
        float((torch.tensor(s.logprobs) - raw[i][batch.completion_mask[i]]).abs().max()) for i, s in enumerate(samples)
    )
    assert raw_gap > 1e-2


def test_vllm_top_k_gap_is_the_mass_it_cuts(policy, vllm_engine):
    """With top-k on, the engine's log-prob of a sampled token is pi_T renormalised over the k
    kept tokens: it exceeds the trainer's log pi_T by exactly -log(kept mass of pi_T), which the
    trainer's full logits give. (This random model's pi_T is flat, so the gap is large here.)"""
    import torch

    cfg, model, tok, high, low, _, prompts = policy
    k = 50
    settings = vllm_engine.settings
    vllm_engine.settings = {**settings, "top_k": k}
    try:
        samples = vllm_engine.generate(prompts, group_size=3, seed=17)
    finally:
        vllm_engine.settings = settings
    rollouts, batch, trainer = trainer_logprobs(policy, samples, prompts, 3)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()  # [N, L, V]
    for i, (s, r, t) in enumerate(zip(samples, rollouts, trainer)):
        p = len(r.prompt_ids)
        scaled = logits[i, p - 1 : p - 1 + r.sampled_len] / cfg.temperature  # [c, V]
        kept_mass = scaled.softmax(-1).topk(k, dim=-1).values.sum(-1)  # [c]
        torch.testing.assert_close(torch.tensor(s.logprobs) - t, -kept_mass.log(), atol=1e-4, rtol=0)


def test_weight_push_after_a_training_step(policy, vllm_engine):
    import torch

    import credo
    import policy as pol

    cfg, model, tok, high, low, rows, prompts = policy
    samples = vllm_engine.generate(prompts, group_size=3, seed=13)
    rollouts, batch, before = trainer_logprobs(policy, samples, prompts, 3)
    sequences = [r.prompt_ids + r.completion_ids for r in rollouts]
    out = credo.Outcomes(
        correct=torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]),  # a fixed outcome: something to learn
        verdicts=[verifier.Verdict(passed=a == 1, reason="set by hand") for a in [1, 0, 1, 0, 1, 0]],
        fmt=torch.tensor([float(r.segments.fmt) for r in rollouts]),
        valid=torch.tensor([r.segments.slot is not None for r in rollouts]),
        reported=None,
        truncated=torch.tensor([r.truncated for r in rollouts]),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    learner = credo.Learner(
        pol.Policy(model, tok, high, low, torch.float32, temperature=cfg.temperature), optimizer, cfg
    )
    credo.train_step(learner, credo.make_step(cfg, 100, batch, out))
    _, _, after = trainer_logprobs(policy, samples, prompts, 3)
    assert max(float((a - b).abs().max()) for a, b in zip(after, before)) > 1e-2  # the step changed the policy
    _, _, after = trainer_logprobs(policy, samples, prompts, 3, temperature=1.0)  # as score() reports them

    stale = vllm_engine.score(sequences)
    vllm_engine.push_weights(model)
    fresh = vllm_engine.score(sequences)
    for r, old, new, t_after in zip(rollouts, stale, fresh, after):
        sampled = slice(len(r.prompt_ids) - 1, len(r.prompt_ids) - 1 + r.sampled_len)  # score() starts at token 1
        torch.testing.assert_close(torch.tensor(new[sampled]), t_after, atol=1e-4, rtol=0)
        assert float((torch.tensor(old[sampled]) - t_after).abs().max()) > 1e-3


def test_hf_engine_has_the_same_interface(policy):
    import torch

    cfg, model, tok, *_, prompts = policy
    engine = eng.HFEngine(model, tok, cfg, confidence.plan(cfg))
    samples = engine.generate(prompts, group_size=3, seed=3)
    assert len(samples) == 6
    _, _, trainer = trainer_logprobs(policy, samples, prompts, 3)
    for s, t in zip(samples, trainer):
        assert len(s.logprobs) == len(s.token_ids) > 0
        torch.testing.assert_close(torch.tensor(s.logprobs), t, atol=1e-4, rtol=0)
        if s.finish_reason == "stop" and s.token_ids[-1] != tok.eos_token_id:
            assert ro.decode(tok, s.token_ids).endswith(ro.CONF_OPEN)  # stopped at the slot
    assert [s.token_ids for s in engine.generate(prompts, 3, seed=3)] == [s.token_ids for s in samples]


def slotted_rollouts(tok, prompts, group):
    """Rollouts of fixed text, every one ending at its slot, different answers and analyses (so
    that c differs from row to row): what a read sees, independent of what a model samples."""
    rows = []
    for q, prompt in enumerate(prompts):
        for i in range(group):
            answer = f"{q} + {i} = {q + i}. The answer is \\boxed{{{q + i}}}."
            text = f"{answer} <analysis> {'check ' * (i + 1)}</analysis> <confidence>"
            ids = enc(tok, text)
            segments = parse_segments(tok, ids, "readout", "\\boxed")
            rows.append(Rollout(f"q{q}", prompt, ids, text, "stop", segments))
    assert all(r.segments.slot == len(r.completion_ids) for r in rows)
    return rows


@pytest.mark.parametrize("engine_kind", ["vllm", "hf"])
def test_the_engine_reads_c_at_the_slot_as_the_trainer_does(policy, vllm_engine, engine_kind):
    """credit_confidence=engine: every registered model read (the readout, and eq:digitexp with its
    forced "0.") from the engine's next-token log-probs at each slot equals the trainer's no-grad
    pass to 1e-5. Both compute in fp32 from the same weights; only kernels and summation order
    differ (about 1e-6 relative on logits of a few units, and |dc| <= |dz| / 4)."""
    import torch

    import policy as pol

    cfg, model, tok, high, low, _, prompts = policy
    trainer = pol.Policy(model, tok, high, low, torch.float32)
    engine = vllm_engine if engine_kind == "vllm" else eng.HFEngine(model, tok, cfg, confidence.plan(cfg))
    if engine_kind == "vllm":
        engine.push_weights(model)  # whatever an earlier test of this module trained
    rollouts = slotted_rollouts(tok, prompts, 3)
    model_reads = [read for read in confidence.READS.values() if read.model]
    assert {"readout", "digit_exp"} <= {read.name for read in model_reads}
    for read in model_reads:
        probes = [[trainer.token_id(token) for token in probe] for probe in read.probes]
        by_engine = read.from_logprobs(eng.probe_logprobs(engine, ro.slot_contexts(rollouts), probes)).float()
        by_trainer = pol.slot_confidences(trainer, rollouts, read, 4096, packed=True)  # [N]
        assert not by_engine.isnan().any() and len(set(by_engine.tolist())) > 1, read.name
        torch.testing.assert_close(by_engine, by_trainer, atol=1e-5, rtol=0, msg=read.name)
    # no slot, no context: NaN log-probs, and no call for them
    assert eng.probe_logprobs(engine, [None, None], probes).isnan().all()


def test_credit_from_the_engine_stays_within_its_bound_of_the_trainers(policy, vllm_engine):
    """The tolerance credit_confidence=engine holds credit to, given delta = max |c_engine - c_trainer|
    (at most 1e-5 in fp32, the test above): the target, r_ans and A^ans do not read c and are
    equal; r_conf = F (1 - (t - c)^2) moves by at most 2 delta; eq:sw's weights by at most
    2 kappa delta (c_i and the group's mean discrepancy each move by delta); and a group-
    standardised A^conf by at most 2 sqrt(G / (G - 1)) 2 delta (1 + |A|) / std_g to first order
    (both r - mean and std move by at most 2 delta), checked here with a factor 2 of room.
    Outcomes are set by hand, mixed in every group, so that each group's std is far above delta."""
    import torch

    import methods
    import policy as pol

    cfg, model, tok, high, low, _, prompts = policy
    trainer = pol.Policy(model, tok, high, low, torch.float32)
    vllm_engine.push_weights(model)
    rollouts = slotted_rollouts(tok, prompts, 3)
    read = confidence.READS["readout"]
    probes = [[high], [low]]
    c = {
        "engine": read.from_logprobs(eng.probe_logprobs(vllm_engine, ro.slot_contexts(rollouts), probes)).float(),
        "trainer": pol.slot_confidences(trainer, rollouts, read, 4096, packed=True),
    }
    correct, fmt = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    kappa = 0.5
    credit = {
        source: methods.credit(correct, fmt, methods.Confidences(value, value), cfg, kappa)
        for source, value in c.items()
    }
    delta = float((c["engine"] - c["trainer"]).abs().max())
    assert delta <= 1e-5
    e, t = credit["engine"], credit["trainer"]
    for name in ("target", "r_ans", "adv_ans"):
        assert torch.equal(getattr(e, name), getattr(t, name)), name
    assert float((e.r_conf - t.r_conf).abs().max()) <= 2 * delta + 1e-7  # + float32 rounding of r near 1
    assert float((e.w - t.w).abs().max()) <= 2 * kappa * delta + 1e-7
    std = t.r_conf.reshape(-1, 3).std(dim=1, unbiased=cfg.adv_std == "sample").repeat_interleave(3)  # [N]
    assert float(std.min()) > 1e3 * delta  # first order holds
    bound = 2 * 2 * (3 / 2) ** 0.5 * 2 * delta * (1 + t.adv_conf.abs()) / std + 1e-6
    assert bool(((e.adv_conf - t.adv_conf).abs() <= bound).all())


def test_hf_engine_with_thinking_on_cuts_at_the_slot(policy, tiny_dir):
    """No stop string with thinking on: the engine generates past <confidence> and cuts the
    completion there itself; the log-probs kept are the trainer's for the tokens kept."""
    import torch

    import policy as pol

    cfg, *_, prompts = policy
    loaded = pol.load_policy(str(tiny_dir / "model"), torch.device("cpu"))  # as warm-started
    model, tok = loaded.model, loaded.tokenizer
    policy = (cfg, model, tok, loaded.high_id, loaded.low_id, None, prompts)
    thinking = dataclasses.replace(cfg, enable_thinking=True)
    engine = eng.HFEngine(model, tok, thinking, confidence.plan(thinking))
    assert engine.settings["stop"] == [] and engine.cut_at_slot
    samples = engine.generate(prompts, group_size=3, seed=3)
    segments = [parse_segments(tok, s.token_ids, "readout", "\\boxed") for s in samples]
    assert any(seg.slot is not None for seg in segments) and not any(seg.slot_misaligned for seg in segments)
    for s, seg in zip(samples, segments):
        if seg.slot is not None:  # cut right after the tag
            assert seg.slot == len(s.token_ids) and s.finish_reason == "stop"
            assert ro.decode(tok, s.token_ids).endswith(ro.CONF_OPEN)
    _, _, trainer = trainer_logprobs(policy, samples, prompts, 3)
    for s, t in zip(samples, trainer):
        torch.testing.assert_close(torch.tensor(s.logprobs), t, atol=1e-4, rtol=0)


# --- the HF engine's own sampling loop --------------------------------------------------------


def first_draw(seed: int) -> float:
    """The uniform draw sample_next takes first from a row generator seeded with `seed`."""
    import torch

    return float(torch.rand(1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))


def test_sample_next_filters_like_vllm_and_draws_per_row():
    """p = (0.1, 0.2, 0.3, 0.4). top-k 2 keeps tokens 2, 3 (3/7, 4/7); top-p 0.5 keeps the
    fewest most likely tokens reaching 0.5: 3 (0.4) and 2 (0.3); T = 0.5 squares and
    renormalises p (1, 4, 9, 16) / 30; T = 0 is the argmax. A row's token is where its own draw u
    falls in its cumulative distribution; the log-prob is the token's under that distribution
    (vLLM's processed_logprobs), the raw one when greedy."""
    import torch

    probs = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    logits = probs.log().float().repeat(2, 1)  # [2, 4]
    base = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    seeds = [5, 6]
    squared = probs**2 / (probs**2).sum()  # T = 0.5
    for settings, kept, p in [
        ({**base, "top_k": 2}, [2, 3], probs),
        ({**base, "top_p": 0.5}, [2, 3], probs),
        (base, [0, 1, 2, 3], probs),
        ({**base, "temperature": 0.5}, [0, 1, 2, 3], squared),
    ]:
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        tokens, logp = eng.sample_next(logits, settings, generators)
        mass = p[kept] / p[kept].sum()
        for row, seed in enumerate(seeds):
            drawn = int((mass.cumsum(0) <= first_draw(seed)).sum())
            assert int(tokens[row]) == kept[drawn]
            assert float(logp[row]) == pytest.approx(math.log(float(mass[drawn])), abs=1e-6)
    greedy, logp = eng.sample_next(logits, {**base, "temperature": 0.0}, [torch.Generator()] * 2)
    assert greedy.tolist() == [3, 3] and logp[0].item() == pytest.approx(math.log(0.4), abs=1e-6)


def engine_samples(policy, prompts, batch, seed=3, **settings):
    """HF engine samples of 2 prompts x 3, `batch` rows at a time, with sampling settings overridden."""
    cfg, model, tok, *_ = policy
    engine = eng.HFEngine(model, tok, dataclasses.replace(cfg, hf_engine_batch=batch), confidence.plan(cfg))
    engine.settings = {**engine.settings, **settings}
    return engine.generate(prompts, 3, seed=seed)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_hf_engine_rows_do_not_depend_on_their_batch(policy, temperature):
    """6 rows in one batch == one row at a time (the per-request path) == 4 + 2: the same tokens
    (greedy, and seeded sampling with per-row generators) and log-probs within fp32 noise."""
    import torch

    *_, prompts = policy
    together = engine_samples(policy, prompts, 6, temperature=temperature)
    for batch in (1, 4):
        apart = engine_samples(policy, prompts, batch, temperature=temperature)
        assert [s.token_ids for s in apart] == [s.token_ids for s in together]
        assert [s.finish_reason for s in apart] == [s.finish_reason for s in together]
        for a, b in zip(apart, together):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)
    alone = engine_samples(policy, prompts[1:], 6, temperature=temperature)  # other neighbours, other rows
    if temperature:
        assert len({tuple(s.token_ids) for s in together}) > 2  # rows of a group differ
        assert [s.token_ids for s in engine_samples(policy, prompts, 6, seed=4)] != [s.token_ids for s in together]
    assert [s.token_ids for s in alone] == [
        s.token_ids for s in engine_samples(policy, prompts[1:], 1, temperature=temperature)
    ]


def chain_model(model, successor: dict[int, int]):
    """A copy of `model` (the real Qwen3 architecture and weights otherwise) whose next token after each
    key of `successor` is its value, by construction: every decoder layer's output projections are
    zeroed, so the final hidden state is the current token's embedding; each key's embedding is a
    direction of its own, which the head maps to the successor with logit ~100 against 0 for every
    other token (any other token has probability < 1e-40: sampling at T = 1 picks the successor)."""
    import torch

    chained = copy.deepcopy(model)
    with torch.no_grad():
        for layer in chained.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        chained.model.norm.weight.fill_(1.0)
        embedding, head = chained.model.embed_tokens.weight, chained.lm_head.weight  # [V, H], [V, H]
        assert len(successor) <= embedding.shape[1], "one hidden direction per chained token"
        scale = 100.0 / embedding.shape[1] ** 0.5  # RMSNorm turns 10 * e_d into sqrt(H) * e_d
        for direction, (token, following) in enumerate(successor.items()):
            embedding[token] = 0.0
            embedding[token, direction] = 10.0
            head[:, direction] = 0.0
            head[following, direction] = scale
    return chained


def test_hf_engine_stops_each_row_at_its_own_stop_string_and_eos(policy):
    """Each row ends at its first token that completes the stop string (or at its first EOS), and the
    other rows go on. Checked on six rows whose continuations are known by construction (chain_model):
    the first "e" is written after 2, 4 and 6 tokens in rows 0-2 and never in rows 3-5; the token made
    EOS comes after 3 and 5 tokens in rows 3 and 4 and never elsewhere."""
    cfg, model, tok, *_, prompts = policy
    letters = [i for i in range(len(tok)) if re.fullmatch(r"[a-z]{2,}", tok.decode([i]))]
    with_e, plain = ([i for i in letters if ("e" in tok.decode([i])) == has_e] for has_e in (True, False))
    plain = iter(plain)
    eos_id = next(plain)
    # each row's prompt ends with the first token of its cycle; generated token i is cycle[i + 1]
    cycles = [[next(plain) for _ in range(6)] for _ in range(6)]
    for row, at in zip(cycles[:3], (2, 4, 6)):
        row[at % 6] = with_e[at]
    cycles[3][3], cycles[4][5] = eos_id, eos_id
    successor = {token: row[(k + 1) % 6] for row in cycles for k, token in enumerate(row)}
    max_tokens = cfg.max_completion_tokens
    expected = []  # what each row writes unstopped, by construction
    for row in cycles:
        ids = [successor[row[0]]]
        while len(ids) < max_tokens:
            ids.append(successor[ids[-1]])
        expected.append(ids)
    stop_ends = [
        next((k for k in range(1, max_tokens + 1) if "e" in ro.decode(tok, ids[:k])), None) for ids in expected
    ]
    assert stop_ends == [2, 4, 6, None, None, None]
    assert [ids.index(eos_id) + 1 if eos_id in ids else None for ids in expected] == [None, None, None, 3, 5, None]

    rows = [prompts[0] + [row[0]] for row in cycles]
    chained = chain_model(model, successor)
    engine = eng.HFEngine(chained, tok, dataclasses.replace(cfg, hf_engine_batch=6), confidence.plan(cfg))
    engine.settings = {**engine.settings, "stop": []}
    free = engine.generate(rows, 1, seed=3)
    assert [s.token_ids for s in free] == expected and {s.finish_reason for s in free} == {"length"}
    engine.settings = {**engine.settings, "stop": ["e"]}
    for ids, end, s in zip(expected, stop_ends, engine.generate(rows, 1, seed=3)):
        assert (s.token_ids, s.finish_reason) == ((ids[:end], "stop") if end else (ids, "length"))

    eos_tok = copy.deepcopy(tok)  # EOS per row: a token of rows 3 and 4 becomes EOS
    eos_tok.eos_token = tok.convert_ids_to_tokens(eos_id)
    assert eos_tok.eos_token_id == eos_id
    engine = eng.HFEngine(chained, eos_tok, dataclasses.replace(cfg, hf_engine_batch=6), confidence.plan(cfg))
    engine.settings = {**engine.settings, "stop": []}
    stopped = engine.generate(rows, 1, seed=3)
    assert [(s.token_ids, s.finish_reason) for s in stopped] == [
        (ids[: ids.index(eos_id) + 1], "stop") if eos_id in ids else (ids, "length") for ids in expected
    ]


def test_hf_engine_batch_must_be_a_positive_integer(policy):
    cfg, model, tok, *_ = policy
    with pytest.raises(ValueError, match="hf_engine_batch must be a positive integer"):
        eng.HFEngine(model, tok, dataclasses.replace(cfg, hf_engine_batch=0), confidence.plan(cfg))
