"""Shared by test_policy.py and test_credo.py: the tiny model as a Policy, hand-built rollouts
(one per segment layout, and one group shaped as each config's engine returns it), one real
update through the loop's own helpers, and an optimizer that records gradients."""

import copy
import dataclasses

import torch

import confidence
import config
import credo
import policy as pol
import rollout as ro
import verifier
from rollout import Rollout, Segments

A = [1.0, 0.0, 0.0]  # a_i of the hand-built group
Q = [0.9, 0.2, float("nan")]  # its reports; the third did not parse


def load_tiny(tiny_dir):
    """The tiny model and tokenizer as saved, without the reserved tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_dir / "model"), AutoTokenizer.from_pretrained(tiny_dir / "model")


def tiny_policy(tiny_dir, dtype: torch.dtype = torch.float32) -> pol.Policy:
    """The tiny model with the reserved tokens added (as a run's first step sees it)."""
    model, tok = load_tiny(tiny_dir)
    high, low = pol.add_reserved_tokens(model, tok)
    return pol.Policy(model, tok, high, low, dtype)


def fake_rollout(prompt_len, completion_len, answer_end, analysis_end, slot):
    seg = Segments(
        answer_end=answer_end,
        analysis_start=answer_end,
        analysis_end=analysis_end,
        slot=slot,
        conf_text=None,
        fmt=slot is not None,
        has_answer=True,
        has_analysis=True,
    )
    return Rollout("q", list(range(1, prompt_len + 1)), list(range(50, 50 + completion_len)), "", "stop", seg)


def outcomes_of(rollouts, correct) -> credo.Outcomes:
    """Outcomes with given a_i, F_i and the slot from the segments, no report sampled as text."""
    return credo.Outcomes(
        correct=torch.as_tensor(correct, dtype=torch.float32),
        verdicts=hand_verdicts(correct),
        fmt=torch.tensor([float(r.segments.fmt) for r in rollouts]),
        valid=torch.tensor([r.segments.slot is not None for r in rollouts]),
        reported=None,
        truncated=torch.tensor([r.truncated for r in rollouts]),
    )


def hand_verdicts(correct) -> list[verifier.Verdict]:
    """The verdicts of given a_i (no grader ran)."""
    return [verifier.Verdict(passed=bool(a), reason="set by hand") for a in torch.as_tensor(correct).tolist()]


def standardized(values):
    """eq:grpo's (r - mean) / std with the sample std (adv_std=sample, the default: divide by G - 1)."""
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return [(v - mean) / std for v in values]


class GradientRecorder(torch.optim.Optimizer):
    """An optimizer whose step only records the gradients it was given (weights stay put)."""

    def __init__(self, named_params):
        named = list(named_params)
        self.names = [n for n, _ in named]
        super().__init__([p for _, p in named], {})

    def step(self, closure=None):
        params = self.param_groups[0]["params"]
        self.grads = {n: p.grad.clone() for n, p in zip(self.names, params) if p.grad is not None}


def random_qwen3(tok, tied: bool, seed: int = 0):
    """A small random Qwen3ForCausalLM with Qwen3's real vocabulary size (151,936 rows)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=151_936,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=1024,
        tie_word_embeddings=tied,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg).float()


def method_rollouts(cfg, tok):
    """Three hand-written rollouts of one group, shaped as this config's engine returns them."""
    prompt = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
    channel = confidence.plan(cfg).segments
    if cfg.conf_train == "sampled":
        texts = [
            "\\boxed{4} <analysis> ok </analysis> <confidence><CONF_HIGH></confidence>",
            "\\boxed{5} <analysis> a </analysis> <confidence><CONF_LOW></confidence>",
            "\\boxed{6}",
        ]
    elif channel == "verbalized":
        texts = [
            "\\boxed{4} <analysis> ok </analysis> <confidence>0.9</confidence>",
            "\\boxed{5} <analysis> a carry </analysis> <confidence>0.2</confidence>",
            "\\boxed{6}",
        ]
    elif channel == "readout_noanalysis":
        texts = ["\\boxed{4} <confidence>", "\\boxed{5} <confidence>", "\\boxed{6}"]
    else:
        texts = [
            "\\boxed{4} <analysis> ok </analysis> <confidence>",
            "\\boxed{5} <analysis> a </analysis> <confidence>",
            "\\boxed{6}",
        ]
    rollouts = []
    reserved = {tok.convert_tokens_to_ids(token) for token in pol.RESERVED_TOKENS}
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        seg = ro.parse_segments(tok, ids, channel, "\\boxed")
        if cfg.conf_train == "sampled":  # as make_rollouts: F needs a reserved slot token
            seg = dataclasses.replace(seg, fmt=seg.fmt and seg.slot is not None and ids[seg.slot] in reserved)
        rollouts.append(Rollout("q", prompt, ids, text, "stop", seg))
    return rollouts


def method_batch(cfg, tok, rollouts) -> pol.Batch:
    return pol.training_batch(rollouts, tok, confidence.plan(cfg))


def method_step(name, tiny_dir, correct=A, extra=()):
    """One real update of the tiny model for a config, through the loop's own helpers:
    (policy, cfg, rollouts, batch, outcomes, gradients, stats)."""
    policy = tiny_policy(tiny_dir)
    cfg = config.load_config(
        name, ["group_size=3", "per_device_batch_size=3", "grad_accum=1", "precision=fp32", *extra]
    )
    plan = confidence.plan(cfg)
    rollouts = method_rollouts(cfg, policy.tokenizer)
    batch = method_batch(cfg, policy.tokenizer, rollouts)
    out = dataclasses.replace(
        outcomes_of(rollouts, correct),
        reported=None if plan.report_read is None else plan.report_read.from_text(rollouts, policy.tokenizer).float(),
    )
    recorder = GradientRecorder(policy.model.named_parameters())
    stats = credo.train_step(
        credo.Learner(policy, recorder, cfg, plan), credo.make_step(cfg, 100, batch, out, rollouts)
    )
    return policy, cfg, rollouts, batch, out, recorder.grads, stats


def copy_policy(policy: pol.Policy) -> pol.Policy:
    """The same policy with its own copy of the model."""
    return dataclasses.replace(policy, model=copy.deepcopy(policy.model))


PROMPT_2_PLUS_2 = "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
GROUP_OF_FOUR = [  # three reach the slot (two right, one wrong); the last has no answer and no slot
    "2 + 2 = 4. \\boxed{4} <analysis> fine </analysis> <confidence>",
    "2 + 2 = 5. \\boxed{5} <analysis> a carry </analysis> <confidence>",
    "2 + 2 = 4. \\boxed{4} <analysis> sure </analysis> <confidence>",
    "\\boxed{3}",
]


def group_of_four(tok, last: str = GROUP_OF_FOUR[-1], last_finish: str = "stop") -> list[Rollout]:
    """One group of four readout rollouts of "What is 2 + 2?" (GROUP_OF_FOUR, the last replaced by
    ``last`` that finished by ``last_finish``), parsed as the loop parses them."""
    prompt = tok.encode(PROMPT_2_PLUS_2, add_special_tokens=False)
    rollouts = []
    for i, text in enumerate([*GROUP_OF_FOUR[:3], last]):
        ids = tok.encode(text, add_special_tokens=False)
        finish = last_finish if i == 3 else "stop"
        rollouts.append(Rollout("q", prompt, ids, text, finish, ro.parse_segments(tok, ids, "readout", "\\boxed")))
    return rollouts
