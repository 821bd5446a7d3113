"""The confidence channel (confidence.py): the registry, its built-in reads by hand (the readout
exactly as eq:readout's fp32 z_H - z_L, eq:digitexp, the numeral), and a new read registered as
docs/forking.md's example 5 registers it, which training (a real tiny step), eval.py and `ask`
must all report: the c a consumer reports is the read's, never the readout by default."""

import functools
import json
import math
import re

import pytest
import torch
import yaml

import confidence
import config
import policy as pol
import rollout as ro
from confidence import READS, Slot
from evaluation import report
from kernels.logprobs import Head

DOC = config.ROOT / "docs" / "forking.md"
STEP = re.compile(r"(?:Append this to|write) `([^`]+)`:\n\n```(python|yaml)\n(.*?)```", re.S)
QUESTION = "What is 12 + 39?"
READOUT_TEXT = (  # a readout completion, teacher-forced (test_client's): it reaches the slot
    "12 + 39 = 51. The answer is \\boxed{51}. <analysis> I may have slipped on a carry when adding "
    "the digits. </analysis> <confidence>"
)


def confidence_example() -> tuple[str, dict]:
    """docs/forking.md's confidence read: (the block it appends to confidence.py, its config's keys)."""
    steps = STEP.findall(DOC.read_text())
    (block,) = [text for file, _, text in steps if file == "confidence.py"]
    (keys,) = [yaml.safe_load(text) for file, _, text in steps if file == "configs/credo_phigh.yaml"]
    return block, keys


@pytest.fixture
def p_high():
    """docs/forking.md's read, run in confidence.py's namespace as if appended to it; removed after."""
    block, _ = confidence_example()
    names = set(vars(confidence))
    exec(compile(block, f"{DOC} (the block for confidence.py)", "exec"), vars(confidence))  # noqa: S102 (our docs)
    try:
        yield READS["p_high"]
    finally:
        READS.pop("p_high", None)
        for name in set(vars(confidence)) - names:
            vars(confidence).pop(name)


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    """The tiny model's tokenizer with the reserved tokens, as the loop loads it."""
    return pol.load_policy(str(tiny_dir / "model"), torch.device("cpu")).tokenizer


def random_slot(tokenizer, positions: int = 1, seed: int = 0) -> Slot:
    """A Slot of 3 rows over a random head for `tokenizer`'s vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    vocab = len(tokenizer)
    hidden = tuple(torch.randn(3, 8, generator=generator) for _ in range(positions))  # P x [3, 8]
    head = Head(torch.randn(vocab, 8, generator=generator))
    return Slot(hidden, head, functools.partial(confidence.token_id, tokenizer))


# --- the built-in reads by hand ------------------------------------------------------------------


def test_the_builtin_reads_and_what_they_declare():
    assert list(READS) == ["readout", "numeral", "digit_exp"]  # eval's record order: the numeral before the digit
    readout, numeral, digit = READS["readout"], READS["numeral"], READS["digit_exp"]
    assert (readout.prompts, readout.model, readout.forced, readout.label) == (
        ("readout", "readout_noanalysis"),
        True,
        (),
        "readout",
    )
    assert (numeral.prompts, numeral.model, numeral.label) == (("verbalized",), False, "verbalized")
    assert (digit.prompts, digit.model, digit.forced, digit.label) == (("verbalized",), True, ("0", "."), "digit")
    assert [read.name for read in confidence.reads_of("readout")] == ["readout"]
    assert [read.name for read in confidence.reads_of("verbalized")] == ["numeral", "digit_exp"]
    assert confidence.auto_read("readout_noanalysis") is readout and confidence.auto_read("verbalized") is numeral


def test_the_readout_is_eq_readout_in_fp32_exactly_and_equals_its_log_prob_form(tokenizer):
    slot = random_slot(tokenizer)
    high, low = slot.ids([ro.CONF_HIGH, ro.CONF_LOW])
    w = slot.head.weight  # [V, H]
    z_diff = slot.hidden[0].float() @ (w[high].float() - w[low].float())  # [3] as losses.readout_logits
    assert torch.equal(READS["readout"].of_slot(slot), torch.sigmoid(z_diff))
    logp = torch.log_softmax(slot.hidden[0] @ slot.head.weight.T, dim=-1)[:, [high, low]]  # [3, 2] what a server gives
    torch.testing.assert_close(READS["readout"].from_logprobs(logp), torch.sigmoid(z_diff), atol=1e-6, rtol=0)


def test_the_digit_expectation_reads_the_teacher_forced_positions(tokenizer):
    slot = random_slot(tokenizer, positions=3)
    int_ids, dec_ids = slot.ids(["0", "1"]), slot.ids([str(d) for d in range(10)])
    p_int = torch.softmax(slot.hidden[0] @ slot.head.weight[int_ids].T, dim=-1)  # [3, 2]
    q_dec = torch.softmax(slot.hidden[2] @ slot.head.weight[dec_ids].T, dim=-1)  # [3, 10] after "0."
    expected = p_int[:, 1] + p_int[:, 0] * (q_dec @ torch.arange(10.0)) / 10
    torch.testing.assert_close(READS["digit_exp"].of_slot(slot), expected, atol=1e-6, rtol=0)
    # its log-prob form (what `ask` computes from prompt log-probs) gives the same c
    logp_at = [torch.log_softmax(h @ slot.head.weight.T, dim=-1) for h in slot.hidden]  # P x [3, V]
    logp = torch.cat([logp_at[0][:, int_ids], logp_at[2][:, dec_ids]], dim=1)  # [3, 12]
    torch.testing.assert_close(READS["digit_exp"].from_logprobs(logp), expected, atol=1e-6, rtol=0)


def test_the_numeral_is_the_parsed_report(tokenizer):
    texts = ["\\boxed{4} <analysis> a </analysis> <confidence>0.9</confidence>", "\\boxed{4}"]
    rollouts = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        rollouts.append(ro.Rollout("q", [], ids, text, "stop", ro.parse_segments(tokenizer, ids, "verbalized", "")))
    q = READS["numeral"].from_text(rollouts, tokenizer)
    assert q[0].item() == pytest.approx(0.9) and math.isnan(q[1].item())


def test_a_read_without_its_own_slot_form_reads_the_full_softmax(p_high, tokenizer):
    slot = random_slot(tokenizer)
    (high,) = slot.ids([ro.CONF_HIGH])
    expected = torch.softmax(slot.hidden[0] @ slot.head.weight.T, dim=-1)[:, high]  # [3]
    torch.testing.assert_close(p_high.of_slot(slot), expected, atol=1e-6, rtol=0)
    assert (p_high.prompts, p_high.model, p_high.forced, p_high.label) == (
        confidence.READOUT_PROMPTS,
        True,
        (),
        "p_high",
    )


def test_a_confidence_key_names_a_registered_read_on_its_prompt(p_high):
    assert config.load_config("credo", ["confidence=p_high"]).confidence == "p_high"
    with pytest.raises(ValueError, match=r"confidence='p_hgh' is not registered; choose one of \(.*'p_high'"):
        config.load_config("credo", ["confidence=p_hgh"])
    with pytest.raises(ValueError, match="confidence=p_high needs the readout or readout_noanalysis channel"):
        config.load_config("credo", ["confidence=p_high", "channel=verbalized"])
    with pytest.raises(ValueError, match="registered twice"):
        confidence.register_model_read("p_high", confidence.READOUT_PROMPTS, [[ro.CONF_HIGH]])(lambda logp: logp)
    with pytest.raises(ValueError, match=r"probe \['1', '0'\] .* teacher-forced"):
        confidence.register_model_read("bad", ("verbalized",), [["0", "1"], ["1", "0"]])(lambda logp: logp)
    assert "bad" not in READS


def test_evaluation_records_a_new_read_under_its_label(p_high):
    """A record's source is a registered read's label; the new read's rows are its own in the tables."""
    assert report.sources() == ("readout", "verbalized", "digit", "p_high")
    assert [report.row_label("CREDO", source) for source in report.sources()] == [
        "CREDO",
        "CREDO",
        "CREDO-d",
        "CREDO (p_high)",
    ]
    with pytest.raises(ValueError, match="source must be a registered read's label"):
        report.validate_record({**RECORD, "source": "sampled"})
    report.validate_record({**RECORD, "source": "p_high"})


RECORD = {  # one evaluation record (evaluation/report.py's schema)
    "run": "r",
    "method": "CREDO",
    "seed": 43,
    "train_domain": "math",
    "set": "tiny",
    "set_domain": "math",
    "problem_id": "p",
    "sample": 0,
    "source": "readout",
    "c": 0.5,
    "a": 1,
    "text": "",
}


def test_the_run_s_plan_follows_the_read(p_high):
    plan = confidence.plan(config.load_config("credo", ["confidence=p_high"]))
    assert plan.model_read is p_high and plan.read is p_high and plan.stops_at_slot and plan.forced == ()
    assert (plan.rewards_read, plan.weights_read, plan.record) == ("model", "model", "model")


# --- a new read, reported by every consumer -----------------------------------------------------


@pytest.mark.slow
def test_a_new_read_is_what_training_eval_and_ask_report(p_high, tiny_dir, tmp_path, monkeypatch):
    """docs/forking.md's p_high read, registered in this process; one real training step of the
    tiny run with its config's keys, eval.py on its checkpoint, and `ask` in process (vLLM)."""
    import credo  # the loop, only here: the other tests of this file need no training
    import eval as evaluation_cli
    from evaluation import client

    _, keys = confidence_example()
    overrides = [f"{key}={value}" for key, value in keys.items() if key != "inherit"]
    assert overrides == ["confidence=p_high"]
    cfg = config.load_config(
        "tiny", [*overrides, "max_steps=1", "engine=hf", f"out_dir={tmp_path}", "run_name=phigh", "save_rollouts=true"]
    )
    sampled = []  # the step's rollouts, as the loop made them

    def make_rollouts(*args, **kwargs):
        made = sampling_make_rollouts(*args, **kwargs)
        sampled.extend(made)
        return made

    sampling_make_rollouts = credo.make_rollouts
    monkeypatch.setattr(credo, "make_rollouts", make_rollouts)
    run_dir = credo.train(cfg)

    # Training: the step's records carry p(<CONF_HIGH>) at each slot under the step's weights (the
    # starting model), as a forward of that model computes it, and not the readout.
    start = pol.load_policy(str(cfg.model), torch.device("cpu"))
    want = pol.slot_confidences(start, sampled, p_high, cfg.micro_batch_tokens, packed=False)  # [8]
    readout = pol.slot_confidences(start, sampled, READS["readout"], cfg.micro_batch_tokens, packed=False)  # [8]
    rows = [json.loads(line) for line in (run_dir / "rollouts" / "step_000000.jsonl").read_text().splitlines()]
    (metrics,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    with_c = [i for i, row in enumerate(rows) if row["c"] is not None]
    assert with_c == [i for i in range(len(sampled)) if not math.isnan(want[i])] and with_c
    for i in with_c:
        assert rows[i]["c"] == pytest.approx(float(want[i]), abs=1e-5)
        assert rows[i]["c"] < float(readout[i])  # p(H) < p(H) / (p(H) + p(L))
    assert metrics["mean_c"] == pytest.approx(sum(rows[i]["c"] for i in with_c) / len(with_c), abs=1e-6)

    # eval.py: every registered read of the checkpoint's prompt, the new one by its label
    ckpt = evaluation_cli.describe_checkpoint(str(run_dir), None, None)
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(line + "\n" for line in (tiny_dir / "math_test.jsonl").read_text().splitlines()[:6]))
    records = evaluation_cli.evaluate(
        [ckpt], [f"tiny={problems}:math"], n=4, temperature=0.7, seed=0, out_dir=tmp_path / "eval", engine_kind="hf"
    )
    saved = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert saved == records and {r["source"] for r in records} == {"readout", "p_high"}
    by_source = {source: [r for r in records if r["source"] == source] for source in ("readout", "p_high")}
    assert len(by_source["p_high"]) == len(by_source["readout"]) == 24
    assert any(r["c"] is not None for r in by_source["p_high"])
    for high, ratio in zip(by_source["p_high"], by_source["readout"]):
        assert (high["problem_id"], high["sample"], high["text"]) == (
            ratio["problem_id"],
            ratio["sample"],
            ratio["text"],
        )
        assert (high["c"] is None) == (ratio["c"] is None)
        if high["c"] is not None:
            assert high["c"] < ratio["c"]

    # ask, in process: c is the checkpoint's read, from the engine's prompt log-probs, and equals
    # the training forward's on the same completion
    asked = client.open_client(str(ckpt.path))
    try:
        prompt = asked.prompt_ids(QUESTION)
        ids = asked.tokenizer.encode(READOUT_TEXT, add_special_tokens=False)
        answer = asked.read(prompt, ids, "stop")
    finally:
        asked.close()
    trained = pol.load_policy(str(ckpt.path), torch.device("cpu"))
    rollout = ro.Rollout(
        "q", prompt, ids, READOUT_TEXT, "stop", ro.parse_segments(trained.tokenizer, ids, "readout", "")
    )
    (expected,) = pol.slot_confidences(trained, [rollout], p_high, 4096, packed=False).tolist()
    (ratio,) = pol.slot_confidences(trained, [rollout], READS["readout"], 4096, packed=False).tolist()
    assert answer.reason is None and answer.c == pytest.approx(expected, abs=1e-4)
    assert answer.reads == {"readout": pytest.approx(ratio, abs=1e-4), "p_high": answer.c}
    assert answer.c < ratio
