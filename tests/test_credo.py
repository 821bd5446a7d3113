"""The training loop: configuration, data, reserved tokens, batching, credit routing, updates."""

import copy
import dataclasses
import json

import pytest
import torch

import credo
import losses
import rollout as ro
from rollout import Rollout, Segments
from numerics import assert_same_gradient


# --- configuration ----------------------------------------------------------------------------


def test_paper_hyperparameters_are_the_defaults():
    cfg = credo.load_config("math")
    expected = {"group_size": 8, "lr": 2e-6, "per_device_batch_size": 2, "grad_accum": 64, "epochs": 2,
                "temperature": 1.0, "top_k": 50, "max_prompt_tokens": 1024, "max_completion_tokens": 8192,
                "clip_eps": 0.2, "kl_coef": 0.0, "gamma": 0.5, "alpha": 0.03, "beta": 0.5, "kappa": 0.25,
                "w_min": 0.5, "w_max": 2.0, "warmup_steps": 30, "seed": 43, "lr_schedule": "constant",
                "model": "Qwen/Qwen3-8B"}
    assert {k: cfg[k] for k in expected} == expected
    assert credo.questions_per_step(cfg) == 16


def test_overrides_are_parsed_as_yaml():
    cfg = credo.load_config("tiny", ["lr=3e-5", "max_steps=7", "resume=null", "engine=hf"])
    assert (cfg["lr"], cfg["max_steps"], cfg["resume"], cfg["engine"]) == (3e-5, 7, None, "hf")
    assert credo.load_config("tiny", ["kappa=1"])["kappa"] == 1.0 and isinstance(credo.load_config("tiny", ["kappa=1"])["kappa"], float)
    with pytest.raises(TypeError, match="'group_size' expects int"):
        credo.load_config("tiny", ["group_size=0.5"])
    with pytest.raises(TypeError, match="'lr' expects float"):
        credo.load_config("tiny", ["lr=fast"])


def test_unknown_key_names_the_nearest_valid_keys():
    with pytest.raises(KeyError, match=r"unknown config key 'gama'.*did you mean gamma"):
        credo.load_config("tiny", ["gama=0.3"])


def test_unknown_key_in_a_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("inherit: tiny\nkapa: 0.5\n")
    with pytest.raises(KeyError, match=r"'kapa' in .*mine.yaml.*kappa"):
        credo.load_config(str(path))


def test_unsupported_values_are_refused():
    with pytest.raises(ValueError, match="kl_coef must be 0"):
        credo.load_config("tiny", ["kl_coef=0.1"])
    with pytest.raises(ValueError, match="not a multiple of group_size"):
        credo.load_config("tiny", ["grad_accum=3", "per_device_batch_size=1"])
    with pytest.raises(FileNotFoundError, match="no config named 'nope'"):
        credo.load_config("nope")


def test_dry_run_prints_the_resolved_config(capsys):
    credo.main(["tiny", "seed=44", "--dry-run"])
    out = capsys.readouterr().out
    assert "seed: 44" in out and "config_name: tiny" in out
    assert out.rstrip().endswith("# run directory: runs/tiny-s44")


# --- data ---------------------------------------------------------------------------------------


def test_missing_field_names_file_line_and_field(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n{"id": "b", "problem": "2+2"}\n')
    with pytest.raises(ValueError, match=r"train.jsonl:2: missing field 'answer'"):
        credo.load_rows(str(path), "math")


def test_missing_prepared_data_says_how_to_make_it():
    with pytest.raises(FileNotFoundError, match=r"data/math/deepscaler_train.jsonl.*bash run.sh prepare"):
        credo.load_rows(credo.load_config("math")["train_data"], "math")


def test_bad_json_names_the_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n{oops\n')
    with pytest.raises(ValueError, match=r"train.jsonl:2: not valid JSON"):
        credo.load_rows(str(path), "math")


def test_hub_dataset_request_and_conversion(tmp_path, monkeypatch):
    """The hub is unreachable here: check the request made, and the conversion of a
    snapshot shaped like agentica-org/DeepScaleR-Preview-Dataset (one JSON list)."""
    import huggingface_hub

    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "deepscaler.json").write_text(json.dumps([
        {"problem": "What is $1+1$?", "answer": "2", "solution": "..."},
        {"problem": "Compute $\\frac{1}{2}+\\frac{1}{2}$.", "answer": "1", "solution": "..."},
    ]))
    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: calls.append((a, k)) or str(snapshot))
    rows = credo.load_rows("agentica-org/DeepScaleR-Preview-Dataset", "math")
    assert calls == [(("agentica-org/DeepScaleR-Preview-Dataset",), {"repo_type": "dataset", "allow_patterns": ["*.json", "*.jsonl"]})]
    assert rows == [{"id": "deepscaler-0", "problem": "What is $1+1$?", "answer": "2"},
                    {"id": "deepscaler-1", "problem": "Compute $\\frac{1}{2}+\\frac{1}{2}$.", "answer": "1"}]

    def offline(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(RuntimeError, match="could not fetch the dataset 'org/name'.*train_data=<local JSONL>"):
        credo.load_rows("org/name", "math")


def test_question_stream_is_a_deterministic_sequence_of_epochs():
    stream = credo.QuestionStream(n=5, seed=1)
    first = stream.take(3) + stream.take(4)
    assert sorted(first[:5]) == [0, 1, 2, 3, 4]           # epoch 0 is a permutation
    resumed = credo.QuestionStream(n=5, seed=1, cursor=3)
    assert resumed.take(4) == first[3:]                    # the cursor is the whole state


# --- reserved tokens --------------------------------------------------------------------------


def load_tiny(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_dir / "model"), AutoTokenizer.from_pretrained(tiny_dir / "model")


def test_reserved_tokens_land_in_spare_rows(tiny_dir):
    model, tok = load_tiny(tiny_dir)
    rows = model.get_input_embeddings().weight.shape[0]
    n_tokens = len(tok)
    assert rows > n_tokens + 2
    high, low = credo.add_reserved_tokens(model, tok)
    assert (high, low) == (n_tokens, n_tokens + 1)
    assert tok.encode("<CONF_HIGH><CONF_LOW>", add_special_tokens=False) == [high, low]
    assert model.get_input_embeddings().weight.shape[0] == rows        # not resized
    for new_id, word in ((high, "high"), (low, "low")):
        pieces = tok.encode(word, add_special_tokens=False)
        for matrix in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
            torch.testing.assert_close(matrix[new_id], matrix[pieces].mean(0))
    # a second call (a checkpoint that already has them) changes nothing
    before = model.get_output_embeddings().weight.detach().clone()
    assert credo.add_reserved_tokens(model, tok) == (high, low)
    assert torch.equal(model.get_output_embeddings().weight, before)


def test_reserved_tokens_grow_a_full_embedding_matrix(tiny_dir):
    from transformers import Qwen3ForCausalLM

    _, tok = load_tiny(tiny_dir)
    config = copy.deepcopy(load_tiny(tiny_dir)[0].config)
    config.vocab_size = len(tok)                      # no spare row at all
    model = Qwen3ForCausalLM(config)
    high, low = credo.add_reserved_tokens(model, tok)
    assert model.get_input_embeddings().weight.shape[0] == len(tok) == low + 1
    assert model.get_output_embeddings().weight.shape[0] == len(tok)


# --- batching and credit routing ---------------------------------------------------------------


def fake_rollout(prompt_len, completion_len, answer_end, analysis_end, slot):
    seg = Segments(answer_end, answer_end, analysis_end, slot, None, slot is not None, True, True)
    return Rollout("q", list(range(1, prompt_len + 1)), list(range(50, 50 + completion_len)), "", "stop", seg)


def test_collate_places_segments_on_target_columns():
    # prompt 3 tokens, completion 5: answer = completion[0:2], analysis = [2:5), slot after token 4
    batch = credo.collate([fake_rollout(3, 5, 2, 5, 5), fake_rollout(2, 3, 3, 3, None)], pad_id=0)
    assert batch.input_ids.shape == (2, 8) and batch.completion_mask.shape == (2, 7)
    # column k predicts position k + 1; completion token j of row 0 is position 3 + j -> column 2 + j
    assert batch.completion_mask[0].tolist() == [0, 0, 1, 1, 1, 1, 1]
    assert batch.ans_mask[0].tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert batch.conf_mask[0].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert batch.slot_pos.tolist() == [7, -1]   # the last position of row 0 predicts the slot
    assert batch.ans_mask[1].tolist() == [0, 1, 1, 1, 0, 0, 0] and not batch.conf_mask[1].any()
    assert batch.attention_mask.sum(1).tolist() == [8, 5]


def test_answer_and_analysis_tokens_get_their_advantages():
    """A hand-built group: answer tokens get w * A_ans, analysis tokens A_conf, the slot nothing."""
    cfg = credo.load_config("tiny", ["group_size=2"])
    rollouts = [fake_rollout(2, 4, 2, 4, 4), fake_rollout(2, 4, 1, 4, 4)]
    batch = credo.collate(rollouts, pad_id=0)
    correct, fmt, valid = torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0]), torch.tensor([True, True])
    conf = torch.tensor([0.6, 0.4])
    got = credo.credit(correct, fmt, conf, valid, cfg, kappa=0.5)
    # t = [.75, .25]; r_ans = [1.5, .5] -> A_ans = [1, -1]
    # r_conf = 1 - (t - c)^2 = [1 - .0225, 1 - .0225] -> equal -> A_conf = [0, 0]
    # s = |a - c| = [.4, .4] -> w = [1, 1]
    torch.testing.assert_close(got["adv_ans"], torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(got["adv_conf"], torch.tensor([0.0, 0.0]))
    conf = torch.tensor([0.9, 0.7])   # now r_conf = [1 - .0225, 1 - .2025] and s = [.1, .7]
    got = credo.credit(correct, fmt, conf, valid, cfg, kappa=0.5)
    torch.testing.assert_close(got["adv_conf"], torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(got["w"], torch.tensor([0.85, 1.15]))
    adv_tok = losses.token_advantages(got["adv_ans"], got["adv_conf"], got["w"], batch.ans_mask, batch.conf_mask)
    # columns: 0 = prompt->c0 ... row 0: answer c0,c1 (cols 1,2), analysis c2,c3 (cols 3,4)
    torch.testing.assert_close(adv_tok, torch.tensor([[0.0, 0.85, 0.85, 1.0, 1.0], [0.0, -1.15, -1.0, -1.0, -1.0]]))


def test_a_repaired_tail_is_not_scored():
    """The tokens close_slot wrote (here the last one) get no policy-gradient credit and no
    engine log-prob; the slot still follows them."""
    repaired = dataclasses.replace(fake_rollout(3, 5, 2, 5, 5), slot_repaired=1, engine_logprobs=[-1.0] * 4)
    batch = credo.collate([repaired], pad_id=0)
    assert batch.completion_mask[0].tolist() == [0, 0, 1, 1, 1, 1, 0]
    assert batch.conf_mask[0].tolist() == [0, 0, 0, 0, 1, 1, 0]
    assert batch.slot_pos.tolist() == [7] and repaired.sampled_len == 4
    trainer = [torch.tensor([-1.0, -1.0, -1.0, -1.5])]                 # the trainer's log-probs of the 4 sampled tokens
    assert credo.engine_logprob_gap([repaired], trainer) == pytest.approx(0.125)
    digits = credo.collate([repaired], pad_id=0, teacher_digits=(list(range(10)), 10))
    assert digits.completion_mask[0].tolist() == [0, 0, 1, 1, 1, 1, 0, 0, 0]   # nor the teacher-forced "0."
    assert digits.digit_pos.tolist() == [9]


@pytest.mark.parametrize("numeral", ["0.8", ".8", "\n0.6"])
def test_digit_expectation_reads_the_right_positions_when_gt_merges(qwen3_tokenizer, numeral):
    """Qwen3 glues ">" to ".8" and "\\n": at_slot ends the completion at the tag (a lone ">"),
    so eq:digitexp reads the integer digit right after <confidence> and the decimal after "0."."""
    tok = qwen3_tokenizer
    ids = tok.encode("\\boxed{4}\n<analysis>\nok\n</analysis>\n<confidence>" + numeral + "</confidence>", add_special_tokens=False)
    rollout = Rollout("q", [1, 2, 3], ids, "", "stop", ro.parse_segments(tok, ids, "verbalized", "\\boxed"))
    (cut,) = credo.at_slot(tok, [rollout])
    assert cut.slot_repaired == (0 if numeral == "0.8" else 1) and cut.segments.slot == len(cut.completion_ids)
    digits, point = credo.digit_token_ids(tok)
    batch = credo.collate([cut], tok.pad_token_id, teacher_digits=(digits, point))
    row, slot, dec = batch.input_ids[0], int(batch.slot_pos[0]), int(batch.digit_pos[0])
    assert ro.decode(tok, row[: slot + 1].tolist()).endswith("</analysis>\n<confidence>") and row[slot] == 29
    assert (row[slot + 1], row[dec]) == (digits[0], point) and dec == slot + 2 == len(row) - 1
    assert not batch.completion_mask[0, slot:].any()                  # ">" was written, not sampled
    assert credo.at_slot(tok, [cut])[0].completion_ids == cut.completion_ids   # idempotent


def random_qwen3(tok, tied: bool, seed: int = 0):
    """A small random Qwen3ForCausalLM with Qwen3's real vocabulary size (151,936 rows)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=151_936, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=1024,
                         tie_word_embeddings=tied, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=None)
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).float()


@pytest.mark.parametrize("tied", [False, True])
def test_reserved_tokens_on_a_random_qwen3_with_the_real_vocabulary(qwen3_tokenizer, tmp_path, tied):
    """Qwen3-8B-Base (untied) and Qwen3-1.7B (tied): the pair lands in the spare rows 151669/151670,
    nothing is resized, and a checkpoint saved and loaded through load_policy keeps both."""
    tok = copy.deepcopy(qwen3_tokenizer)
    model = random_qwen3(tok, tied)
    model.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    policy, tok, high, low = credo.load_policy(str(tmp_path / "base"), torch.device("cpu"))
    assert (high, low) == (151_669, 151_670) and len(tok) == 151_671
    embed, head = policy.get_input_embeddings().weight, policy.get_output_embeddings().weight
    assert embed.shape == head.shape == (151_936, 32) and (embed is head) == tied
    for new_id, word in ((high, "high"), (low, "low")):
        pieces = tok.encode(word, add_special_tokens=False)
        for matrix in (embed, head):
            torch.testing.assert_close(matrix[new_id], matrix[pieces].mean(0))
    original = random_qwen3(tok, tied)
    rows = [i for i in range(151_936) if i not in (high, low)]
    assert torch.equal(embed.detach()[rows], original.get_input_embeddings().weight[rows])

    policy.save_pretrained(tmp_path / "ckpt")                       # a CREDO checkpoint
    tok.save_pretrained(tmp_path / "ckpt")
    again, tok2, high2, low2 = credo.load_policy(str(tmp_path / "ckpt"), torch.device("cpu"))
    assert (high2, low2) == (high, low) and len(tok2) == len(tok)
    assert tok2.encode("<CONF_HIGH><CONF_LOW>", add_special_tokens=False) == [high, low]
    for before, after in ((embed, again.get_input_embeddings().weight), (head, again.get_output_embeddings().weight)):
        assert torch.equal(before, after)


class GradientRecorder(torch.optim.Optimizer):
    """An optimizer whose step only records the gradients it was given (weights stay put)."""

    def __init__(self, named_params):
        named = list(named_params)
        self.names = [n for n, _ in named]
        super().__init__([p for _, p in named], {})

    def step(self, closure=None):
        params = self.param_groups[0]["params"]
        self.grads = {n: p.grad.clone() for n, p in zip(self.names, params) if p.grad is not None}


def test_docstring_examples_hold():
    import doctest

    result = doctest.testmod(credo, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 7 and result.failed == 0


def test_micro_batch_budget():
    cfg = credo.load_config("math")
    assert credo.micro_batch_budget(cfg) == 2 * (1024 + 8192 + 2)       # tab:hyper's 2 rollouts of full length
    assert credo.micro_batch_budget(credo.load_config("math", ["micro_batch_tokens=20000"])) == 20000
    with pytest.raises(ValueError, match=r"micro_batch_tokens=9000 must be auto or an integer of at least .* = 9218"):
        credo.load_config("math", ["micro_batch_tokens=9000"])
    with pytest.raises(ValueError, match="rollout 1 has 7 tokens, more than micro_batch_tokens = 6"):
        credo.micro_batches([5, 7], budget=6, group=1, whole_groups=False, packed=True)


def test_micro_batches_pack_whole_groups_up_to_the_budget():
    """Groups of 2, packed cost = their tokens: [3+3], [2+2], [9+1], [4+4]; budget 10."""
    lengths = [3, 3, 2, 2, 9, 1, 4, 4]
    plan = credo.micro_batches(lengths, budget=10, group=2, whole_groups=True, packed=True)
    assert plan == [[2, 3, 0, 1], [6, 7], [4, 5]]                        # 4 + 6 = 10; 8; 10
    assert all(credo.holds_whole_groups(rows, 2) for rows in plan)
    # padded, a micro-batch costs rows x longest: [2,2] 4, + [3,3] 4 x 3 = 12 > 10; [9,1] is 18 alone: split
    padded = credo.micro_batches(lengths, 10, 2, True, packed=False)
    assert padded == [[2, 3], [0, 1], [6, 7], [5], [4]]
    assert credo.pad_fraction(lengths, padded) == 0.0


def test_sequence_attention_refuses_a_padded_batch_with_sequence_bounds():
    q = torch.zeros(2, 1, 4, 8)
    with pytest.raises(ValueError, match="one packed row without a mask; got a batch of 2 rows"):
        credo.sequence_attention(None, q, q, q, None, cu_seq_lens_q=torch.tensor([0, 2, 4]))


def test_micro_batches_that_split_groups_give_the_same_update(tiny_dir):
    """Whole-group micro-batches (advantages from the training forward) and split ones
    (advantages from a no-grad readout pass) must produce the same gradients."""
    model, tok = load_tiny(tiny_dir)
    high, low = credo.add_reserved_tokens(model, tok)
    prompt = tok.encode("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    texts = ["2 + 2 = 4. \\boxed{4} <analysis> fine </analysis> <confidence>",
             "2 + 2 = 5. \\boxed{5} <analysis> a carry </analysis> <confidence>",
             "2 + 2 = 4. \\boxed{4} <analysis> sure </analysis> <confidence>",
             "\\boxed{3}"]
    rollouts = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        rollouts.append(Rollout("q", prompt, ids, text, "stop", ro.parse_segments(tok, ids, "readout", "\\boxed")))
    batch = credo.collate(rollouts, tok.pad_token_id)
    correct = torch.tensor([1.0, 0.0, 1.0, 0.0])
    fmt = torch.tensor([float(r.segments.fmt) for r in rollouts])
    valid = torch.tensor([r.segments.slot is not None for r in rollouts])
    assert valid.tolist() == [True, True, True, False]

    grads, stats = [], []
    cfg = credo.load_config("tiny", ["group_size=4", "per_device_batch_size=4", "grad_accum=1"])
    longest = int(batch.attention_mask.sum(dim=1).max())
    for budget in ("auto", longest):   # one micro-batch; the group split over several
        cfg = {**cfg, "micro_batch_tokens": budget}
        m = copy.deepcopy(model)
        recorder = GradientRecorder(m.named_parameters())
        stats.append(credo.train_on_batch(m, recorder, batch, correct, fmt, valid, cfg, step=100, high_id=high, low_id=low))
        grads.append(recorder.grads)
    assert stats[0]["micro_batches"] == 1 and stats[1]["micro_batches"] > 1
    assert stats[0]["readout_pass_rows"] == 0 and stats[1]["readout_pass_rows"] == 4
    for name in grads[0]:
        assert_same_gradient(grads[1][name], grads[0][name], name)
    for key in ("loss_pg", "loss_cal"):
        assert stats[0][key] == pytest.approx(stats[1][key], abs=1e-6)
    assert stats[0]["loss_cal"] > 0


# --- end to end: the real engine, verifier and loop -------------------------------------------


def run_tiny(out_dir, *overrides):
    import subprocess

    result = subprocess.run(["bash", "run.sh", "tiny", f"out_dir={out_dir}", *overrides], cwd=credo.ROOT,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_one_step_with_the_hf_engine(tmp_path, tiny_dir):
    run_tiny(tmp_path, "max_steps=1", "engine=hf", "run_name=hf")
    (metrics,) = read_metrics(tmp_path / "hf")
    assert metrics["engine_logprob_gap"] < 1e-4 and metrics["t_rollout"] > 0
    # 2 groups of 4 rollouts of >= 241 tokens: each fits the 4 x 386 budget, both do not
    assert metrics["micro_batches"] == 2 and metrics["readout_pass_rows"] == 0
    assert (tmp_path / "hf" / "ckpt" / "step_000001" / "model.safetensors").exists()


@pytest.mark.slow
def test_one_step_of_a_verbalized_baseline_with_the_engine(tmp_path, tiny_dir):
    run_tiny(tmp_path, "max_steps=1", "method=rlcr", "channel=verbalized", "alpha=0", "kappa=0", "run_name=rlcr")
    (metrics,) = read_metrics(tmp_path / "rlcr")
    assert metrics["readout_rate"] == 0 and metrics["loss_cal"] == 0 and 0 <= metrics["report_rate"] <= 1
    rows = [json.loads(line) for line in (tmp_path / "rlcr" / "rollouts" / "step_000000.jsonl").read_text().splitlines()]
    # RLCR's reward: a - (q - a)^2, with a missing report scored as the worst Brier term
    for row in rows:
        q = row["c"]
        assert row["r_ans"] == pytest.approx(row["a"] - ((q - row["a"]) ** 2 if q is not None else 1.0), abs=1e-6)


@pytest.mark.slow
def test_two_steps_then_resume_matches_a_straight_run(tmp_path, tiny_dir):
    run_tiny(tmp_path, "max_steps=2", "run_name=resumed")
    run_dir = tmp_path / "resumed"
    first = read_metrics(run_dir)
    assert [m["step"] for m in first] == [0, 1]
    for key in ("loss_pg", "loss_cal", "acc", "format_rate", "readout_rate", "mean_c", "ece", "brier",
                "grad_norm", "rollout_tok_s", "train_tok_s", "t_rollout", "t_verify", "t_train", "t_sync"):
        assert key in first[0]
    assert first[0]["engine_logprob_gap"] < 1e-4            # engine and trainer hold the same weights
    ckpt = run_dir / "ckpt" / "step_000002"
    for name in ("model.safetensors", "tokenizer.json", "optimizer.pt", "rng.pt", "trainer_state.json", "config.yaml"):
        assert (ckpt / name).exists(), name
    assert json.loads((ckpt / "trainer_state.json").read_text()) == {"step": 2, "data_cursor": 4}
    assert len((run_dir / "rollouts" / "step_000001.jsonl").read_text().splitlines()) == 8

    run_tiny(tmp_path, "max_steps=3", f"resume={ckpt}")
    run_tiny(tmp_path, "max_steps=3", "run_name=straight")
    resumed, straight = read_metrics(run_dir), read_metrics(tmp_path / "straight")
    assert [m["step"] for m in resumed] == [0, 1, 2]
    assert resumed[2]["questions"] == straight[2]["questions"]          # the same data at step 3
    texts = [(tmp_path / name / "rollouts" / "step_000002.jsonl").read_text() for name in ("resumed", "straight")]
    assert texts[0] == texts[1]                                          # ... the same samples
    assert resumed[2]["loss_pg"] == pytest.approx(straight[2]["loss_pg"], abs=1e-6)
    assert resumed[2]["loss_cal"] == pytest.approx(straight[2]["loss_cal"], abs=1e-6)


def test_bf16_precision_computes_in_bf16_over_fp32_weights(tiny_dir):
    model, tok = load_tiny(tiny_dir)
    high, low = credo.add_reserved_tokens(model, tok)
    prompt = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    ids = tok.encode("\\boxed{4} <analysis> ok </analysis> <confidence>", add_special_tokens=False)
    batch = credo.collate([Rollout("q", prompt, ids, "", "stop", ro.parse_segments(tok, ids, "readout", "\\boxed"))] * 2, tok.pad_token_id)
    cfg = credo.load_config("tiny", ["precision=bf16", "group_size=2", "per_device_batch_size=2", "grad_accum=1"])
    assert credo.compute_dtype(cfg) == torch.bfloat16
    logp32, z32, _ = credo.policy_forward(model, batch, high, low)
    logp16, z16, _ = credo.policy_forward(model, batch, high, low, torch.bfloat16)
    assert logp16.dtype == z16.dtype == torch.float32
    assert 0 < float((logp16 - logp32).abs().max()) < 0.1          # bf16 compute, close to fp32
    recorder = GradientRecorder(model.named_parameters())
    credo.train_on_batch(model, recorder, batch, torch.tensor([1.0, 0.0]), torch.ones(2), torch.tensor([True, True]),
                         cfg, step=100, high_id=high, low_id=low)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in recorder.grads.values())


# --- methods: every config resolves, and each routes its advantages as it defines -------------


def test_every_config_resolves():
    names = [name for name in credo.config_names() if name != "base"]
    assert {"math", "tiny", "grpo", "rlcr", "dcpo", "credo_alpha0", "credo_noanalysis", "credo_noconfadv",
            "credo_kappa0", "credo_gated", "credo_noformat", "rlcr_sw", "dcpo_sw"} <= set(names)
    for name in names:
        credo.load_config(name)
        if name not in ("math", "code"):                  # a domain file fixes its own domain
            for domain, kappa in (("math", 0.25), ("code", 0.5)):
                cfg = credo.load_config(name, [f"domain={domain}"])
                assert cfg["domain"] == domain and cfg["run_name"] == f"{name}-{domain}-s43"
                if name in ("credo", "rlcr_sw", "dcpo_swd"):   # by_domain kappa: CREDO's value of tab:hyper
                    assert cfg["kappa"] == kappa
    code = credo.load_config("code")
    assert (code["max_prompt_tokens"], code["max_completion_tokens"], code["kappa"]) == (2048, 6144, 0.5)
    assert credo.load_config("base")["train_data"] == credo.load_config("math")["train_data"]   # filled by domain
    with pytest.raises(ValueError, match="fixes the math values"):
        credo.load_config("math", ["domain=code"])
    with pytest.raises(TypeError, match="kappa"):
        credo.load_config("credo", ["kappa=high"])


def test_method_and_channel_must_agree():
    with pytest.raises(ValueError, match="method=rlcr needs the verbalized channel"):
        credo.load_config("rlcr", ["channel=readout"])
    with pytest.raises(ValueError, match="alpha > 0 needs a differentiable confidence"):
        credo.load_config("rlcr", ["alpha=0.03"])
    with pytest.raises(ValueError, match="only the auxiliary-head arm"):
        credo.load_config("grpo", ["channel=readout"])
    with pytest.raises(ValueError, match="needs a confidence with logits"):
        credo.load_config("credo", ["channel=verbalized"])
    with pytest.raises(ValueError, match="set alpha=0"):
        credo.load_config("credo_sampled", ["alpha=0.03"])
    with pytest.raises(ValueError, match="needs a baseline method on a readout channel"):
        credo.load_config("credo", ["conf_train=head"])
    with pytest.raises(ValueError, match="needs the verbalized channel"):
        credo.load_config("credo", ["confidence=digit_exp"])
    assert credo.load_config("rlcr_swd")["confidence"] == "digit_exp"   # weights from eq:digitexp, rewards from q


def standardized(values):
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    return [(v - mean) / std for v in values]


A = [1.0, 0.0, 0.0]
Q = [0.9, 0.2, float("nan")]                      # the third report did not parse


def expected_routing(config):
    """(A_ans, A_conf, w) worked out by hand for the group a = A, q = Q, lambda = 0.5."""
    if config == "grpo":
        adv = standardized(A)
        return adv, adv, [1.0, 1.0, 1.0]
    if config in ("rlcr", "rlcr_sw"):
        adv = standardized([1 - 0.01, 0 - 0.04, 0 - 1.0])          # a - (q - a)^2, worst term when missing
        # s = |a - q| = [.1, .2] over the valid reports, mean .15; w = 1 + .25 (s - .15)
        w = [1.0, 1.0, 1.0] if config == "rlcr" else [0.9875, 1.0125, 1.0]
        return adv, adv, w
    if config == "dcpo":
        r_ig = [0.5 / 3 + 0.5 * a for a in A]                     # lam * mean(a) + (1 - lam) a
        return standardized(A), standardized([-abs(0.9 - r_ig[0]), -abs(0.2 - r_ig[1]), -1.0]), [1.0, 1.0, 1.0]
    raise AssertionError(config)


@pytest.mark.parametrize("config", ["grpo", "rlcr", "dcpo", "rlcr_sw"])
def test_baselines_route_their_advantages(config):
    cfg = credo.load_config(config, ["group_size=3", "per_device_batch_size=3", "grad_accum=1"])
    q = torch.tensor(Q)
    got = credo.credit(torch.tensor(A), torch.ones(3), q, ~torch.isnan(q), cfg, kappa=cfg["kappa"])
    adv_ans, adv_conf, w = expected_routing(config)
    torch.testing.assert_close(got["adv_ans"], torch.tensor(adv_ans))
    torch.testing.assert_close(got["adv_conf"], torch.tensor(adv_conf))
    torch.testing.assert_close(got["w"], torch.tensor(w))
    # answer tokens (columns 1-2) get w * A_ans, analysis tokens (3-4) A_conf
    batch = credo.collate([fake_rollout(2, 4, 2, 4, None)] * 3, pad_id=0)
    adv_tok = losses.token_advantages(got["adv_ans"], got["adv_conf"], got["w"], batch.ans_mask, batch.conf_mask)
    for i in range(3):
        expected_row = [0.0, w[i] * adv_ans[i], w[i] * adv_ans[i], adv_conf[i], adv_conf[i]]
        torch.testing.assert_close(adv_tok[i], torch.tensor(expected_row))


def test_ablation_without_confidence_advantage_zeroes_the_analysis():
    cfg = credo.load_config("credo_noconfadv", ["group_size=3", "per_device_batch_size=3", "grad_accum=1"])
    conf, valid = torch.tensor([0.9, 0.2, 0.5]), torch.tensor([True, True, True])
    got = credo.credit(torch.tensor(A), torch.ones(3), conf, valid, cfg, kappa=0.25)
    full = credo.credit(torch.tensor(A), torch.ones(3), conf, valid, {**cfg, "conf_advantage": True}, kappa=0.25)
    assert torch.equal(got["adv_conf"], torch.zeros(3)) and full["adv_conf"].abs().sum() > 0
    torch.testing.assert_close(got["adv_ans"], full["adv_ans"])


METHOD_CONFIGS = [name for name in credo.config_names() if name not in ("base", "math", "code", "tiny", "toy")]


def method_rollouts(cfg, tok):
    """Three hand-written rollouts of one group, shaped as this config's engine returns them."""
    prompt = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    channel = credo.segment_channel(cfg)
    if cfg["conf_train"] == "sampled":
        texts = ["\\boxed{4} <analysis> ok </analysis> <confidence><CONF_HIGH></confidence>",
                 "\\boxed{5} <analysis> a </analysis> <confidence><CONF_LOW></confidence>", "\\boxed{6}"]
    elif channel == "verbalized":
        texts = ["\\boxed{4} <analysis> ok </analysis> <confidence>0.9</confidence>",
                 "\\boxed{5} <analysis> a carry </analysis> <confidence>0.2</confidence>", "\\boxed{6}"]
    elif channel == "readout_noanalysis":
        texts = ["\\boxed{4} <confidence>", "\\boxed{5} <confidence>", "\\boxed{6}"]
    else:
        texts = ["\\boxed{4} <analysis> ok </analysis> <confidence>", "\\boxed{5} <analysis> a </analysis> <confidence>", "\\boxed{6}"]
    rollouts = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        seg = ro.parse_segments(tok, ids, channel, "\\boxed")
        if cfg["conf_train"] == "sampled":   # as make_rollouts: F needs a reserved slot token
            seg = dataclasses.replace(seg, fmt=seg.fmt and seg.slot is not None and ids[seg.slot] in credo.reserved_ids(tok))
        rollouts.append(Rollout("q", prompt, ids, text, "stop", seg))
    return rollouts


def method_step(config, tiny_dir, correct=A, extra=()):
    """One real update of the tiny model for a config, through the loop's own helpers."""
    model, tok = load_tiny(tiny_dir)
    high, low = credo.add_reserved_tokens(model, tok)
    cfg = credo.load_config(config, ["group_size=3", "per_device_batch_size=3", "grad_accum=1", "precision=fp32", *extra])
    rollouts = method_rollouts(cfg, tok)
    batch = credo.training_batch(rollouts, tok, cfg)
    valid = torch.tensor([r.segments.slot is not None for r in rollouts])
    fmt = torch.tensor([float(r.segments.fmt) for r in rollouts])
    reported = credo.reported_confidence(rollouts, cfg, tok)
    weight_conf = credo.digit_weight_confidence(model, tok, rollouts, cfg, high, low)
    recorder = GradientRecorder(model.named_parameters())
    stats = credo.train_on_batch(model, recorder, batch, torch.tensor(correct), fmt, valid, cfg, step=100,
                                 high_id=high, low_id=low, reported=reported, weight_conf=weight_conf)
    return model, tok, cfg, rollouts, batch, reported, weight_conf, recorder.grads, stats


@pytest.mark.parametrize("config", METHOD_CONFIGS)
def test_one_real_training_step_per_method(config, tiny_dir):
    _, _, cfg, rollouts, batch, reported, _, grads, stats = method_step(config, tiny_dir)
    if cfg["channel"] == "verbalized" and cfg["method"] != "credo":
        assert reported[:2].tolist() == pytest.approx([0.9, 0.2]) and torch.isnan(reported[2])
    assert stats["loss_pg"] != 0 and all(torch.isfinite(g).all() for g in grads.values())
    has_c = any(r.segments.slot is not None for r in rollouts)
    assert (stats["loss_cal"] > 0) == has_c   # L_cal (or the head's BCE) only where the model's c exists


@pytest.mark.parametrize("config", ["credo", "credo_digitexp", "grpo_head"])
def test_packed_micro_batches_equal_padded_ones(config, tiny_dir, device):
    """Padding-free packing (one row, block-causal attention) changes no output and no gradient
    (fp32, on the `device` fixture's device: bench/gpucheck.py runs it on CUDA)."""
    model, tok = load_tiny(tiny_dir)
    model.to(device)
    high, low = credo.add_reserved_tokens(model, tok)
    cfg = credo.load_config(config, ["group_size=3", "per_device_batch_size=3", "grad_accum=1", "precision=fp32"])
    rollouts = method_rollouts(cfg, tok)
    batch = credo.training_batch(rollouts, tok, cfg)
    assert batch.attention_mask.sum() < batch.attention_mask.numel()          # the padded batch has padding
    head = cfg["conf_train"] == "head"
    padded = credo.policy_forward(model, batch, high, low, detach_readout=head, packed=False)
    packed = credo.policy_forward(model, batch, high, low, detach_readout=head, packed=True)
    mask = batch.completion_mask
    torch.testing.assert_close(packed.logp[mask], padded.logp[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed.z_diff, padded.z_diff, atol=1e-5, rtol=1e-5)
    if padded.c_digit is not None:
        torch.testing.assert_close(packed.c_digit, padded.c_digit, atol=1e-6, rtol=1e-5)
    confidence_only = credo.policy_forward(model, batch, high, low, detach_readout=head, packed=True, logprobs=False)
    assert confidence_only.logp is None
    torch.testing.assert_close(confidence_only.z_diff, packed.z_diff, atol=1e-6, rtol=0)
    grads = {}
    for mode in ("false", "true"):
        recorder = GradientRecorder(model.named_parameters())
        stats = credo.train_on_batch(model, recorder, batch, torch.tensor(A, device=device), torch.ones(3, device=device),
                                     torch.tensor([r.segments.slot is not None for r in rollouts], device=device),
                                     {**cfg, "pack_sequences": mode}, step=100, high_id=high, low_id=low)
        grads[mode] = recorder.grads
        assert (stats["pad_fraction"] == 0.0) == (mode == "true")
        model.zero_grad(set_to_none=True)
    for name, g in grads["false"].items():
        assert_same_gradient(grads["true"][name], g, name)


# --- tab:decompose and tab:sw_baseline: what each arm changes, on the hand-built group ---------


def test_sampled_slot_token_is_scored_by_the_reward(tiny_dir):
    """Readout + reward only: q = 1 for <CONF_HIGH>, 0 for <CONF_LOW>; r_conf = F (1 - (t - q)^2)
    with t = 0.5 a + 0.5 mean(a) = [2/3, 1/6, 1/6]; the slot token joins the analysis advantage."""
    _, tok, cfg, rollouts, batch, reported, _, _, stats = method_step("credo_sampled", tiny_dir)
    assert reported[:2].tolist() == [1.0, 0.0] and torch.isnan(reported[2])
    assert stats["r_conf"].tolist() == pytest.approx([1 - (2 / 3 - 1) ** 2, 1 - (1 / 6) ** 2, 0.0])
    assert stats["alpha"] == 0.0
    for i in range(2):   # the slot column (predicting the sampled token) is in the confidence segment
        slot_col = int(batch.slot_pos[i])
        assert batch.conf_mask[i, slot_col] and batch.conf_mask[i, slot_col - 1] and not batch.conf_mask[i, slot_col + 1]
    plain = credo.collate(rollouts, tok.pad_token_id)
    assert not plain.conf_mask[0, int(plain.slot_pos[0])]   # without conf_train=sampled the slot gets no credit
    adv_conf = standardized([1 - (2 / 3 - 1) ** 2, 1 - (1 / 6) ** 2, 0.0])
    assert stats["adv_conf"].tolist() == pytest.approx(adv_conf, abs=1e-6)
    adv_tok = losses.token_advantages(stats["adv_ans"], stats["adv_conf"], stats["w"], batch.ans_mask, batch.conf_mask)
    for i in range(2):   # the sampled <CONF_HIGH>/<CONF_LOW> token is trained with the analysis advantage
        assert float(adv_tok[i, int(batch.slot_pos[i])]) == pytest.approx(adv_conf[i], abs=1e-6)


def test_digit_expectation_emission_regresses_eq_digitexp(tiny_dir):
    """The verbalized prompt stops at <confidence>; "0." is teacher-forced after it; c is eq:digitexp
    from the same forward (checked against full logits), and L_cal's gradient reaches the trunk."""
    model, tok, cfg, rollouts, batch, _, _, grads, stats = method_step("credo_digitexp", tiny_dir)
    assert ro.stop_strings(cfg) == [ro.CONF_OPEN] and credo.segment_channel(cfg) == "readout"
    digits, dot = credo.digit_token_ids(tok)
    for i, r in enumerate(rollouts[:2]):
        seq = r.prompt_ids + r.completion_ids + [digits[0], dot]
        assert batch.input_ids[i, : len(seq)].tolist() == seq
        assert not batch.completion_mask[i, len(seq) - 3 :].any()   # the teacher-forced "0." is not trained on
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0]            # [L, V]
        p_int = torch.softmax(logits[len(seq) - 3, [digits[0], digits[1]]], -1)
        q_dec = torch.softmax(logits[len(seq) - 1, digits], -1)
        expected = float(p_int[1] + p_int[0] * (q_dec * torch.arange(10)).sum() / 10)
        assert float(stats["conf"][i]) == pytest.approx(expected, abs=1e-5)
    target = losses.hybrid_target(torch.tensor(A), 0.5, 3)
    assert stats["loss_cal"] == pytest.approx(float(((stats["conf"][:2] - target[:2]) ** 2).mean()), abs=1e-6)
    assert grads["model.layers.0.mlp.up_proj.weight"].abs().sum() > 0


def test_auxiliary_head_trains_only_the_reserved_output_rows(tiny_dir):
    """GRPO + auxiliary head: with every rollout correct the GRPO advantages are 0, so the only
    gradient is the head's BCE on the detached trunk: the output rows of H and L, nothing else."""
    model, tok, cfg, _, _, _, _, grads, stats = method_step("grpo_head", tiny_dir, correct=[1.0, 1.0, 1.0])
    high, low = (tok.convert_tokens_to_ids(t) for t in credo.RESERVED_TOKENS)
    head = grads.pop("lm_head.weight")
    assert head[[high, low]].abs().sum() > 0
    head[[high, low]] = 0
    assert head.abs().sum() == 0 and all(g.abs().sum() == 0 for g in grads.values())
    c = stats["conf"][:2]
    assert stats["loss_cal"] == pytest.approx(float(-torch.log(c).mean()), abs=1e-5)   # BCE against a = 1


def test_baseline_weights_from_the_digit_expectation(tiny_dir):
    """tab:sw_baseline: rewards still read the parsed numeral; eq:sw's weights read eq:digitexp."""
    _, _, cfg, _, _, reported, weight_conf, _, stats = method_step("rlcr_swd", tiny_dir)
    assert torch.isfinite(weight_conf[:2]).all() and torch.isnan(weight_conf[2])   # the third has no <confidence>
    correct = torch.tensor(A)
    assert stats["r_ans"].tolist() == pytest.approx(losses.rlcr_reward(correct, reported).tolist())
    w = losses.discrepancy_weights(correct, weight_conf, ~torch.isnan(weight_conf), stats["kappa"], 3)
    assert stats["w"].tolist() == pytest.approx(w.tolist())
    parsed = losses.discrepancy_weights(correct, reported, ~torch.isnan(reported), stats["kappa"], 3)
    assert stats["w"].tolist() != pytest.approx(parsed.tolist())


# --- the code domain: rows, the sandboxed reward, and a real step -------------------------------

DOUBLE_TESTS = {"kind": "stdio", "inputs": ["3\n", "10\n"], "outputs": ["6\n", "20\n"]}


def test_code_rows_need_tests_in_the_verifier_schema(tmp_path):
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"id": "c1", "problem": "Double n.", "tests": DOUBLE_TESTS}) + "\n")
    assert credo.load_rows(str(path), "code") == [{"id": "c1", "problem": "Double n.", "tests": DOUBLE_TESTS}]
    path.write_text(json.dumps({"id": "c1", "problem": "Double n.", "tests": "assert f(1) == 2"}) + "\n")
    with pytest.raises(ValueError, match="code.jsonl:1: field 'tests' must be a dict with a 'kind'"):
        credo.load_rows(str(path), "code")
    path.write_text(json.dumps({"id": "c1", "problem": "Double n.", "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match="missing field 'tests'"):
        credo.load_rows(str(path), "code")
    with pytest.raises(ValueError, match="not from a hub id"):
        credo.load_rows("agentica-org/DeepCoder-Preview-Dataset", "code")


def test_code_rewards_come_from_the_sandbox():
    cfg = credo.load_config("code", ["group_size=2", "per_device_batch_size=2", "grad_accum=1", "verify_workers=2"])
    answers = ["```python\nprint(2 * int(input()))\n```", "```python\nprint(int(input()) + 2)\n```"]
    rollouts = [Rollout("c1", [1], [2], text + " <analysis> ok </analysis> <confidence>", "stop",
                        Segments(1, 1, 1, None, None, False, True, True)) for text in answers]
    correct = credo.verify_rollouts(rollouts, [{"id": "c1", "problem": "Double n.", "tests": DOUBLE_TESTS}], cfg)
    assert correct.tolist() == [1.0, 0.0]   # n + 2 passes the first test (n = 2 is not in it) but not 10 -> 12


@pytest.mark.slow
def test_one_step_in_the_code_domain(tmp_path, tiny_dir):
    data = tmp_path / "code_train.jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i}", "problem": f"Print {i} times the input.",
                                        "tests": {"kind": "stdio", "inputs": ["2\n"], "outputs": [f"{2 * i}\n"]}}) + "\n"
                            for i in range(4)))
    run_tiny(tmp_path, "max_steps=1", "domain=code", f"train_data={data}", "run_name=code")
    cfg = credo.load_config(str(tmp_path / "code" / "config.yaml"))
    assert (cfg["domain"], cfg["kappa"]) == ("code", 0.5)   # kappa from the code profile (tab:hyper)
    (metrics,) = read_metrics(tmp_path / "code")
    assert metrics["acc"] == 0.0 and metrics["t_verify"] > 0   # the tiny model writes no programs: all fail, none crash
    rows = [json.loads(line) for line in (tmp_path / "code" / "rollouts" / "step_000000.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(row["a"] == 0.0 for row in rows)


# --- the paper's tables as commands ---------------------------------------------------------------


# --- end to end on Qwen3's real tokenizer ------------------------------------------------------------

GT_TAILS = [">\n", ">", "><", ">The", ">\n\n", ">."]   # one token each in Qwen3's vocabulary


@pytest.fixture(scope="module")
def qwen3_world(qwen3_tokenizer, tmp_path_factory):
    """A small random Qwen3 (real vocabulary, tied) with Qwen3's tokenizer, taught in a few
    supervised steps to write the readout format and to follow `<confidence` with a token
    that starts with ">" (or the lone ">"); its model directory and training data."""
    import random

    tok = copy.deepcopy(qwen3_tokenizer)
    model = random_qwen3(tok, tied=True)
    rows = [{"id": f"q{a}{b}", "problem": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in [(2, 2), (3, 4), (1, 5), (6, 2)]]
    prompts = torch.tensor([ro.build_prompt_ids(tok, r["problem"], "readout", "math") for r in rows])   # [4, P], equal lengths
    rng = random.Random(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(70):
        completions = torch.tensor([tok.encode(f"\\boxed{{{r['answer']}}}\n<analysis>\nok\n</analysis>\n<confidence"
                                               + rng.choice(GT_TAILS), add_special_tokens=False) + [tok.eos_token_id]
                                    for r in rows])                                                    # [4, C]
        hidden = model.model(input_ids=torch.cat([prompts, completions], 1)).last_hidden_state         # [4, P + C, H]
        logits = hidden[:, prompts.shape[1] - 1 : -1] @ model.lm_head.weight.T                         # [4, C, V]
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), completions.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    root = tmp_path_factory.mktemp("qwen3")
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, loss.item()


def reaches_the_slot(text: str) -> bool:
    """<analysis>, then </analysis>, then <confidence> (the readout channel's rules)."""
    opened = text.find(ro.ANALYSIS_OPEN)
    closed = text.find(ro.ANALYSIS_CLOSE, opened) if opened >= 0 else -1
    return closed >= 0 and text.find(ro.CONF_OPEN, closed) >= 0


@pytest.mark.slow
def test_hf_loop_with_qwen3s_tokenizer_keeps_every_readout(qwen3_world, tmp_path):
    """A few steps of the loop (HF engine) and an evaluation: every rollout whose text reaches
    <confidence> (after a closed analysis) has a readout, also those whose ">" the model glued
    to the next token."""
    root, sft_loss = qwen3_world
    assert sft_loss < 0.5
    run_tiny(tmp_path, f"model={root / 'model'}", f"train_data={root / 'train.jsonl'}", "engine=hf", "max_steps=3",
             "max_completion_tokens=24", "run_name=qwen3")
    metrics = read_metrics(tmp_path / "qwen3")
    rollouts = [json.loads(line) for step in range(3)
                for line in (tmp_path / "qwen3" / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines()]
    reached = [r for r in rollouts if reaches_the_slot(r["text"])]
    assert len(rollouts) == 24 and len(reached) >= 6                  # 11 of 24 when measured
    assert all(r["c"] is not None and r["text"].endswith(ro.CONF_OPEN) for r in reached)
    assert sum(m["slot_repaired"] for m in metrics) == sum(r["slot_repaired"] for r in rollouts) > 0
    # the engine's and the trainer's log-probs of the sampled tokens agree (1.1e-4 nats on average
    # when measured: fp32 over 151,936 logits, KV-cached vs packed); one token out of place would
    # cost nats
    assert all(m["slot_misaligned"] == 0 and m["engine_logprob_gap"] < 1e-3 for m in metrics)

    import subprocess

    out = tmp_path / "eval"
    result = subprocess.run(
        [str(credo.ROOT / ".venv" / "bin" / "python"), "eval.py", "--ckpt", str(tmp_path / "qwen3"), "--sets",
         f"t={root / 'train.jsonl'}:math", "--n", "4", "--engine", "hf", "--out", str(out)],
        cwd=credo.ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 16 and {r["source"] for r in records} == {"readout"}
    assert all(r["c"] is not None for r in records if reaches_the_slot(r["text"]))
    assert all(r["c"] is None for r in records if not reaches_the_slot(r["text"]))
    assert any(r["slot_repaired"] for r in records) and all(isinstance(r["slot_repaired"], bool) for r in records)


def test_every_table_row_is_a_runnable_config():
    for key in credo.load_tables():
        runs = credo.table_runs(key)
        trained = [r for r in runs if r["train"]]
        commands_of = {}
        for r in trained:
            words = r["train"].split()
            assert words[:2] == ["bash", "run.sh"]
            cfg = credo.load_config(words[2], words[3:])          # the printed command resolves ...
            assert str(credo.run_dir_of(cfg)) == r["eval"]        # ... to the run directory eval.py reads
            commands_of.setdefault(r["eval"], set()).add(r["train"])
        assert all(len(c) == 1 for c in commands_of.values())    # one run directory, one training
        text = credo.table_commands(key)
        assert all(r["train"] in text for r in trained) and text.count("python eval.py") >= 1
    sens = {(r["label"], r["domain"]): r["eval"] for r in credo.table_runs("sens")}
    # tab:hyper's own values are the CREDO runs themselves (kappa 0.25 math, 0.5 code), not new trainings
    assert sens[("kappa = 0.25", "math")] == sens[("alpha = 0.03", "math")] == "runs/credo-math-s43"
    assert sens[("kappa = 0.5", "code")] == "runs/credo-code-s43" != sens[("kappa = 0.5", "math")]
    main = credo.table_runs("main")
    assert {r["seed"] for r in main if r["train"]} == {43, 44, 45} and any(r["eval"] == "Qwen/Qwen3-8B" for r in main)
    listing = credo.list_configs()
    for name in credo.config_names():
        assert f"\n{name} " in "\n" + listing
    with pytest.raises(KeyError, match="known: tab:main"):
        credo.table_commands("tab:nope")


def test_training_prepares_a_missing_paper_split_first(tmp_path, hub_offline, capsys):
    """The run asks `data` for its split before anything else (here the hub is unreachable,
    so the download's clear error ends the run; test_data prepares one from real records)."""
    split = tmp_path / "data" / "math" / "deepscaler_train.jsonl"
    with pytest.raises(RuntimeError, match="could not download the dataset 'agentica-org/DeepScaleR-Preview-Dataset'"):
        credo.main(["tiny", f"train_data={split}", f"out_dir={tmp_path / 'runs'}"])
    assert "[data] " + str(split) + " does not exist yet: preparing deepscaler_train" in capsys.readouterr().out
