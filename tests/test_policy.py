"""policy.py: the reserved tokens, rollouts as tensors (collate, micro-batches, packing), the
one forward pass, and the no-grad confidence reads (eq:readout, eq:digitexp) by hand."""

import copy
import dataclasses
import math
import os

import pytest
import torch
from numerics import assert_same_gradient
from step_cases import (
    A,
    GradientRecorder,
    fake_rollout,
    load_tiny,
    method_batch,
    method_rollouts,
    outcomes_of,
    random_qwen3,
    tiny_policy,
)

import confidence
import config
import credo
import policy as pol
import rollout as ro
from confidence import READS
from infra import parallel, runlog
from kernels.logprobs import Head
from kernels.packing import pack_rows
from rollout import Rollout

# --- reserved tokens --------------------------------------------------------------------------


def test_reserved_tokens_land_in_spare_rows(tiny_dir):
    model, tok = load_tiny(tiny_dir)
    rows = model.get_input_embeddings().weight.shape[0]
    n_tokens = len(tok)
    assert rows > n_tokens + 2
    high, low = pol.add_reserved_tokens(model, tok)
    assert (high, low) == (n_tokens, n_tokens + 1)
    assert tok.encode("<CONF_HIGH><CONF_LOW>", add_special_tokens=False) == [high, low]
    assert model.get_input_embeddings().weight.shape[0] == rows  # not resized
    for new_id, word in ((high, "high"), (low, "low")):
        pieces = tok.encode(word, add_special_tokens=False)
        for matrix in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
            torch.testing.assert_close(matrix[new_id], matrix[pieces].mean(0))
    # a second call (a checkpoint that already has them) changes nothing
    before = model.get_output_embeddings().weight.detach().clone()
    assert pol.add_reserved_tokens(model, tok) == (high, low)
    assert torch.equal(model.get_output_embeddings().weight, before)
    assert {tok.convert_tokens_to_ids(t) for t in pol.RESERVED_TOKENS} == {high, low}


def test_reserved_tokens_grow_a_full_embedding_matrix(tiny_dir):
    from transformers import Qwen3ForCausalLM

    _, tok = load_tiny(tiny_dir)
    cfg = copy.deepcopy(load_tiny(tiny_dir)[0].config)
    cfg.vocab_size = len(tok)  # no spare row at all
    model = Qwen3ForCausalLM(cfg)
    high, low = pol.add_reserved_tokens(model, tok)
    assert model.get_input_embeddings().weight.shape[0] == len(tok) == low + 1
    assert model.get_output_embeddings().weight.shape[0] == len(tok)


@pytest.mark.parametrize("tied", [False, True])
def test_reserved_tokens_on_a_random_qwen3_with_the_real_vocabulary(qwen3_tokenizer, tmp_path, tied):
    """Qwen3-8B-Base (untied) and Qwen3-1.7B (tied): the pair lands in the spare rows 151669/151670,
    nothing is resized, and a checkpoint saved and loaded through load_policy keeps both."""
    tok = copy.deepcopy(qwen3_tokenizer)
    model = random_qwen3(tok, tied)
    model.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    policy = pol.load_policy(str(tmp_path / "base"), torch.device("cpu"))
    tok, high, low = policy.tokenizer, policy.high_id, policy.low_id
    assert (high, low) == (151_669, 151_670) and len(tok) == 151_671 and policy.dtype == torch.float32
    embed, head = policy.model.get_input_embeddings().weight, policy.model.get_output_embeddings().weight
    assert embed.shape == head.shape == (151_936, 32) and (embed is head) == tied
    for new_id, word in ((high, "high"), (low, "low")):
        pieces = tok.encode(word, add_special_tokens=False)
        for matrix in (embed, head):
            torch.testing.assert_close(matrix[new_id], matrix[pieces].mean(0))
    original = random_qwen3(tok, tied)
    rows = [i for i in range(151_936) if i not in (high, low)]
    assert torch.equal(embed.detach()[rows], original.get_input_embeddings().weight[rows])

    policy.model.save_pretrained(tmp_path / "ckpt")  # a CREDO checkpoint
    tok.save_pretrained(tmp_path / "ckpt")
    again = pol.load_policy(str(tmp_path / "ckpt"), torch.device("cpu"))
    assert (again.high_id, again.low_id) == (high, low) and len(again.tokenizer) == len(tok)
    assert again.tokenizer.encode("<CONF_HIGH><CONF_LOW>", add_special_tokens=False) == [high, low]
    for before, after in (
        (embed, again.model.get_input_embeddings().weight),
        (head, again.model.get_output_embeddings().weight),
    ):
        assert torch.equal(before, after)


# --- rollouts as tensors ------------------------------------------------------------------------


def test_collate_places_segments_on_target_columns():
    # prompt 3 tokens, completion 5: answer = completion[0:2], analysis = [2:5), slot after token 4
    batch = pol.collate([fake_rollout(3, 5, 2, 5, 5), fake_rollout(2, 3, 3, 3, None)], pad_id=0)
    assert batch.input_ids.shape == (2, 8) and batch.completion_mask.shape == (2, 7)
    # column k predicts position k + 1; completion token j of row 0 is position 3 + j -> column 2 + j
    assert batch.completion_mask[0].tolist() == [0, 0, 1, 1, 1, 1, 1]
    assert batch.ans_mask[0].tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert batch.conf_mask[0].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert batch.slot_pos.tolist() == [7, -1]  # the last position of row 0 predicts the slot
    assert batch.ans_mask[1].tolist() == [0, 1, 1, 1, 0, 0, 0] and not batch.conf_mask[1].any()
    assert batch.attention_mask.sum(1).tolist() == [8, 5]


def test_a_repaired_tail_is_not_scored():
    """The tokens close_slot wrote (here the last one) get no policy-gradient credit and no
    engine log-prob; the slot still follows them."""
    repaired = dataclasses.replace(fake_rollout(3, 5, 2, 5, 5), slot_repaired=1, engine_logprobs=[-1.0] * 4)
    batch = pol.collate([repaired], pad_id=0)
    assert batch.completion_mask[0].tolist() == [0, 0, 1, 1, 1, 1, 0]
    assert batch.conf_mask[0].tolist() == [0, 0, 0, 0, 1, 1, 0]
    assert batch.slot_pos.tolist() == [7] and repaired.sampled_len == 4
    trainer = [torch.tensor([-1.0, -1.0, -1.0, -1.5])]  # the trainer's log-probs of the 4 sampled tokens
    assert runlog.engine_logprob_gap([repaired], trainer) == pytest.approx(0.125)
    digits = pol.collate([repaired], pad_id=0, forced=[0, 10])  # "0." after the slot (eq:digitexp)
    assert digits.completion_mask[0].tolist() == [0, 0, 1, 1, 1, 1, 0, 0, 0]  # nor the teacher-forced "0."
    assert digits.slot_pos.tolist() == [7] and digits.forced == 2


@pytest.mark.parametrize("numeral", ["0.8", ".8", "\n0.6"])
def test_digit_expectation_reads_the_right_positions_when_gt_merges(qwen3_tokenizer, numeral):
    """Qwen3 glues ">" to ".8" and "\\n": at_slot ends the completion at the tag (a lone ">"),
    so eq:digitexp reads the integer digit right after <confidence> and the decimal after "0."."""
    tok = qwen3_tokenizer
    ids = tok.encode(
        "\\boxed{4}\n<analysis>\nok\n</analysis>\n<confidence>" + numeral + "</confidence>", add_special_tokens=False
    )
    rollout = Rollout("q", [1, 2, 3], ids, "", "stop", ro.parse_segments(tok, ids, "verbalized", "\\boxed"))
    (cut,) = ro.at_slot(tok, [rollout])
    assert cut.slot_repaired == (0 if numeral == "0.8" else 1) and cut.segments.slot == len(cut.completion_ids)
    zero, point = (confidence.token_id(tok, text) for text in READS["digit_exp"].forced)  # "0", "."
    batch = pol.collate([cut], tok.pad_token_id, forced=[zero, point])
    row, slot = batch.input_ids[0], int(batch.slot_pos[0])
    dec = slot + batch.forced  # the position after "0.", which eq:digitexp reads
    assert ro.decode(tok, row[: slot + 1].tolist()).endswith("</analysis>\n<confidence>") and row[slot] == 29
    assert (row[slot + 1], row[dec]) == (zero, point) and dec == slot + 2 == len(row) - 1
    assert not batch.completion_mask[0, slot:].any()  # ">" was written, not sampled
    assert ro.at_slot(tok, [cut])[0].completion_ids == cut.completion_ids  # idempotent


# --- the forward pass ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["credo", "credo_digitexp", "grpo_head"])
def test_packed_micro_batches_equal_padded_ones(name, tiny_dir, device):
    """Padding-free packing (one row, block-causal attention) changes no output and no gradient
    (fp32, on the `device` fixture's device: bench/gpucheck.py runs it on CUDA; the outcomes
    stay on the CPU, as the loop keeps them)."""
    policy = tiny_policy(tiny_dir)
    policy.model.to(device)
    cfg = config.load_config(name, ["group_size=3", "per_device_batch_size=3", "grad_accum=1", "precision=fp32"])
    plan = confidence.plan(cfg)
    rollouts = method_rollouts(cfg, policy.tokenizer)
    batch = method_batch(cfg, policy.tokenizer, rollouts)
    assert batch.attention_mask.sum() < batch.attention_mask.numel()  # the padded batch has padding
    head, read = plan.detach_readout, plan.model_read
    padded = pol.forward(policy, batch, packed=False, detach_readout=head)
    packed = pol.forward(policy, batch, packed=True, detach_readout=head)
    mask = batch.completion_mask
    torch.testing.assert_close(packed.logp[mask], padded.logp[mask], atol=1e-5, rtol=1e-5)
    c_packed = pol.model_confidence(packed, read)  # [3] the run's read (the readout, or eq:digitexp)
    torch.testing.assert_close(c_packed, pol.model_confidence(padded, read), atol=1e-6, rtol=1e-5)
    confidence_only = pol.forward(policy, batch, packed=True, detach_readout=head, logprobs=False)
    assert confidence_only.logp is None
    torch.testing.assert_close(pol.model_confidence(confidence_only, read), c_packed, atol=1e-6, rtol=0)
    grads = {}
    for packed_mode in (False, True):
        recorder = GradientRecorder(policy.model.named_parameters())
        mode = dataclasses.replace(cfg, pack_sequences=packed_mode)
        learner = credo.Learner(policy, recorder, mode, plan)
        stats = credo.train_step(learner, credo.make_step(mode, 100, batch, outcomes_of(rollouts, A)))
        grads[packed_mode] = recorder.grads
        assert (stats.pad_fraction == 0.0) == packed_mode
        policy.model.zero_grad(set_to_none=True)
    for param, g in grads[False].items():
        assert_same_gradient(grads[True][param], g, param)


def test_packed_rows_share_prompts_and_change_no_output_or_gradient(tiny_dir):
    """Two groups with prompts of different lengths in one micro-batch, one row with no
    completion token: packing computes each prompt once (18 + 5 prompt tokens, not 3 x 18 +
    2 x 5), and the log-probs, readouts and parameter gradients equal the padded forward's to
    float noise (fp32)."""
    policy = tiny_policy(tiny_dir)
    tok = policy.tokenizer
    question = "<|im_start|>user\nwhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    long_prompt = tok.encode(question, add_special_tokens=False)
    short_prompt = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    assert len(long_prompt) == 18 and len(short_prompt) == 5  # the counts the docstring gives

    def rollout(prompt, text):
        ids = tok.encode(text, add_special_tokens=False)
        return Rollout("q", prompt, ids, "", "stop", ro.parse_segments(tok, ids, "readout", "\\boxed"))

    rollouts = [
        rollout(long_prompt, "\\boxed{4} <analysis> ok </analysis> <confidence>"),
        rollout(long_prompt, "\\boxed{5} <analysis> a long one </analysis> <confidence>"),
        rollout(long_prompt, "\\boxed{6}"),
        rollout(short_prompt, "\\boxed{7} <analysis> b </analysis> <confidence>"),
        rollout(short_prompt, ""),
    ]
    batch = pol.collate(rollouts, tok.pad_token_id)
    packing = pack_rows(batch.input_ids, batch.attention_mask, batch.prompt_len)
    completions = int(batch.attention_mask.sum()) - int(batch.prompt_len.sum())
    assert packing.ids.shape[1] == 18 + 5 + completions
    mask = batch.completion_mask

    def run(packed: bool):
        policy.model.zero_grad(set_to_none=True)
        fwd = pol.forward(policy, batch, packed=packed)
        c = pol.model_confidence(fwd, READS["readout"])  # [5]
        (fwd.logp[mask].sum() + c.sum()).backward()
        grads = {name: p.grad.clone() for name, p in policy.model.named_parameters() if p.grad is not None}
        return fwd.logp.detach(), c.detach(), grads

    logp_pad, z_pad, grads_pad = run(False)
    logp_pack, z_pack, grads_pack = run(True)
    torch.testing.assert_close(logp_pack[mask], logp_pad[mask], atol=1e-5, rtol=1e-5)
    assert (logp_pack[~mask] == 0).all()
    torch.testing.assert_close(z_pack, z_pad, atol=1e-5, rtol=1e-5)
    assert grads_pack.keys() == grads_pad.keys()
    for name, g in grads_pad.items():
        assert_same_gradient(grads_pack[name], g, name)
    policy.model.zero_grad(set_to_none=True)


# On a CPU, checkpointing around compiled layers is checked by test_parallel's two-rank
# update (against the eager single process); on CUDA (gpucheck) it runs here too, with inductor.
@pytest.mark.parametrize("checkpointing", [False, True] if os.environ.get("CREDO_TEST_DEVICE") == "cuda" else [False])
def test_compiled_layers_change_no_output_and_no_gradient(tiny_dir, device, checkpointing):
    """compile_update (fp32): compiled decoder layers and log-prob blocks give the same
    log-probs, readouts and update as the eager ones,
    packed and padded, with activation checkpointing around the compiled forward or not; one
    compilation serves micro-batches of new lengths (dynamic shapes); eval mode stays eager.
    On a CPU through aot_eager (dynamo's capture and AOT autograd's forward/backward split,
    without inductor's minute-long C++ build); bench/gpucheck.py runs it with inductor on CUDA."""
    counters = torch._dynamo.utils.counters
    torch._dynamo.reset()
    policy = tiny_policy(tiny_dir)
    policy.model.to(device)
    if checkpointing:
        parallel.enable_activation_checkpointing(policy.model)
    cfg = config.load_config("credo", ["group_size=3", "per_device_batch_size=3", "grad_accum=1", "precision=fp32"])
    plan = confidence.plan(cfg)
    rollouts = method_rollouts(cfg, policy.tokenizer)
    batch = method_batch(cfg, policy.tokenizer, rollouts)

    def run(packed: bool, rows: list[int]) -> tuple[dict, dict]:
        recorder = GradientRecorder(policy.model.named_parameters())
        sub = [rollouts[i] for i in rows]
        sub_cfg = dataclasses.replace(cfg, pack_sequences=packed, group_size=len(rows))
        step = credo.make_step(sub_cfg, 100, batch.select(rows), outcomes_of(sub, A[: len(rows)]))
        stats = credo.train_step(credo.Learner(policy, recorder, sub_cfg, plan), step)
        policy.model.zero_grad(set_to_none=True)
        return recorder.grads, stats

    cases = [(False, [0, 1, 2]), (True, [0, 1, 2])]
    eager = [run(mode, rows) for mode, rows in cases]
    pol.compile_update(policy, backend="inductor" if device.type == "cuda" else "aot_eager")
    blocks = policy.logprob_blocks
    pol.compile_update(policy)  # idempotent: no second wrapper
    assert policy.logprob_blocks is blocks and blocks.chunk_tokens == 2048
    compiled = [run(mode, rows) for mode, rows in cases]
    for (want, want_stats), (got, got_stats) in zip(eager, compiled):
        for param, g in want.items():
            assert_same_gradient(got[param], g, param)
        torch.testing.assert_close(got_stats.conf, want_stats.conf, atol=1e-6, rtol=1e-5, equal_nan=True)
        for a, b in zip(got_stats.completion_logp, want_stats.completion_logp):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs > 0  # the layers did compile
    run(True, [1, 2]), run(False, [0, 2])  # new lengths, new row counts
    policy.model.eval()
    with torch.no_grad():
        pol.forward(policy, batch, packed=True)
    assert counters["stats"]["unique_graphs"] == graphs  # no recompilation
    torch._dynamo.reset()


def test_bf16_precision_computes_in_bf16_over_fp32_weights(tiny_dir):
    policy = tiny_policy(tiny_dir)
    tok = policy.tokenizer
    prompt = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    ids = tok.encode("\\boxed{4} <analysis> ok </analysis> <confidence>", add_special_tokens=False)
    rollouts = [Rollout("q", prompt, ids, "", "stop", ro.parse_segments(tok, ids, "readout", "\\boxed"))] * 2
    batch = pol.collate(rollouts, tok.pad_token_id)
    cfg = config.load_config("tiny", ["precision=bf16", "group_size=2", "per_device_batch_size=2", "grad_accum=1"])
    assert pol.compute_dtype(cfg) == torch.bfloat16
    bf16 = dataclasses.replace(policy, dtype=pol.compute_dtype(cfg))
    logp32, logp16 = pol.forward(policy, batch).logp, pol.forward(bf16, batch).logp
    c16 = pol.model_confidence(pol.forward(bf16, batch), READS["readout"])  # [2] read in fp32 (eq:readout)
    assert logp16.dtype == c16.dtype == torch.float32
    # bf16 compute (a difference), close to fp32: bf16 keeps 8 significant bits, so a log-prob of magnitude L
    # is off by a few of its ulps (2^-8 L); 4 of them bound it with room (measured here: 0.06 at L = 15.3)
    gap, scale = float((logp16 - logp32).detach().abs().max()), float(logp32.detach().abs().max())
    assert 0 < gap < 4 * 2**-8 * (1 + scale)
    recorder = GradientRecorder(policy.model.named_parameters())
    credo.train_step(
        credo.Learner(bf16, recorder, cfg), credo.make_step(cfg, 100, batch, outcomes_of(rollouts, [1.0, 0.0]))
    )
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in recorder.grads.values())


# --- the no-grad confidence reads -----------------------------------------------------------------


@pytest.mark.parametrize("packed", [False, True])
def test_digit_expectation_and_readout_read_the_right_positions(tiny_dir, packed):
    """eq:digitexp and eq:readout against a naive full-vocabulary forward, by hand."""
    policy = pol.load_policy(str(tiny_dir / "model"), torch.device("cpu"))
    policy.model.eval()
    tok, high, low = policy.tokenizer, policy.high_id, policy.low_id
    prompt = ro.build_prompt_ids(tok, "What is 2 + 3?", "verbalized", "math")
    texts = [
        "2 + 3 = 5. \\boxed{5} <analysis> a carry </analysis> <confidence>0.7</confidence>",
        "\\boxed{6} <analysis> none </analysis> no tag",
    ]
    rollouts = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        rollouts.append(ro.Rollout("q", prompt, ids, text, "stop", ro.parse_segments(tok, ids, "readout", "\\boxed")))
    budget = 2 * max(len(prompt) + len(r.completion_ids) + 2 for r in rollouts)
    digit = pol.slot_confidences(policy, rollouts, READS["digit_exp"], budget, packed)  # [2]
    readout = pol.slot_confidences(policy, rollouts, READS["readout"], budget, packed)  # [2]
    assert digit.shape == readout.shape == (2,)
    assert math.isnan(digit[1]) and math.isnan(readout[1])  # no <confidence> to read

    slot = rollouts[0].segments.slot
    ids = (
        prompt
        + rollouts[0].completion_ids[:slot]
        + tok.encode("0", add_special_tokens=False)
        + tok.encode(".", add_special_tokens=False)
    )
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0]  # [L, V]
    d = [tok.encode(str(k), add_special_tokens=False)[0] for k in range(10)]
    p = torch.softmax(logits[-3, [d[0], d[1]]], 0)  # after "<confidence>"
    q = torch.softmax(logits[-1, d], 0)  # after "0."
    expected = float(p[1] + p[0] * (q * torch.arange(10)).sum() / 10)
    assert float(digit[0]) == pytest.approx(expected, abs=1e-5)
    assert float(readout[0]) == pytest.approx(float(torch.sigmoid(logits[-3, high] - logits[-3, low])), abs=1e-5)


@pytest.mark.parametrize("packed", [False, True])
def test_forward_log_probs_are_at_the_sampling_temperature_and_the_readout_is_raw(tiny_dir, packed):
    """Policy.temperature T: the completion log-probs are log_softmax(logits / T) of a naive
    full-vocabulary forward (the policy that sampled them), while z_H - z_L stays the raw
    logits' difference (eq:readout), the same at every T."""
    policy = pol.load_policy(str(tiny_dir / "model"), torch.device("cpu"), temperature=0.7)
    policy.model.eval()
    assert policy.temperature == 0.7 and pol.sampling_temperature(0.0) == 1.0  # greedy rollouts: T = 1
    tok = policy.tokenizer
    prompt = ro.build_prompt_ids(tok, "What is 2 + 3?", "readout", "math")
    ids = tok.encode("2 + 3 = 5. \\boxed{5} <analysis> a carry </analysis> <confidence>", add_special_tokens=False)
    rollout = ro.Rollout("q", prompt, ids, "", "stop", ro.parse_segments(tok, ids, "readout", "\\boxed"))
    batch = pol.collate([rollout], tok.pad_token_id)
    with torch.no_grad():
        hot = pol.forward(policy, batch, packed=packed)
        raw = pol.forward(dataclasses.replace(policy, temperature=1.0), batch, packed=packed)
        logits = policy.model(input_ids=batch.input_ids).logits[0].float()  # [L, V]
    cols = batch.completion_mask[0]  # [L-1]
    naive = torch.log_softmax(logits[:-1] / 0.7, -1).gather(-1, batch.input_ids[0, 1:, None]).squeeze(-1)
    torch.testing.assert_close(hot.logp[0][cols], naive[cols], atol=1e-5, rtol=0)
    assert float((hot.logp[0][cols] - raw.logp[0][cols]).abs().max()) > 1e-2
    slot = int(batch.slot_pos[0])
    c_hot, c_raw = (pol.model_confidence(fwd, READS["readout"]).item() for fwd in (hot, raw))
    z_diff = float(logits[slot, policy.high_id] - logits[slot, policy.low_id])
    assert c_hot == c_raw == pytest.approx(1 / (1 + math.exp(-z_diff)), abs=1e-5)


def test_the_model_s_c_is_a_registered_read_of_the_slot():
    """model_confidence applies a read (confidence.py) to the forward's slot: 0.5 on a row without one."""
    head = Head(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))  # [V=3, H=2]: z_H = h_0, z_L = h_1
    slot = confidence.Slot((torch.tensor([[2.0, 0.0], [7.0, 7.0]]),), head, {ro.CONF_HIGH: 1, ro.CONF_LOW: 2}.get)
    fwd = pol.Forward(logp=None, slot=slot, has_slot=torch.tensor([True, False]))
    assert pol.model_confidence(fwd, READS["readout"]).tolist() == pytest.approx([1 / (1 + math.exp(-2.0)), 0.5])
