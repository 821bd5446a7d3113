"""The run configuration's schema: `Config`, one frozen dataclass with a field for every key a
run can set, each with its default (tab:hyper's value where the paper gives one), where it
comes from in the paper, and a help line (`python credo.py --help-config` prints them).

    >>> Config().lr, Config().group_size, FIELD_HELP["kappa"]
    (2e-06, 8, 'discrepancy-weighting strength (0.25 math / 0.50 code)')

Does not hold: reading YAML, overrides, validation or the confidence plan (config.py builds a
resolved Config from configs/ and the command line). Imports nothing of ours, so every module
may name the type.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from typing import Literal

BY_DOMAIN = (
    "by_domain"  # a default that config.load_config fills from configs/<domain>.yaml (tab:hyper's per-domain values)
)
AUTO = Literal["auto"]
PEFT_ADAPTER_CONFIG = "adapter_config.json"  # the file that marks a directory as PEFT (LoRA) adapters


def _field(default, help: str, source: str = ""):
    """A Config field: its default, a help line, and where the value comes from in the paper."""
    return dataclasses.field(default=default, metadata={"help": help, "source": source})


# ============================================================================================
# The schema: every key a run can set, with its default, source and help (TRL's GRPOConfig).
# ============================================================================================


@dataclass(frozen=True)
class Config:
    """A resolved run configuration (load_config); `dataclasses.replace` derives another. Every
    value must have its field's declared type (`pack_sequences="false"` is refused, not packed)."""

    # --- model and data
    model: str = _field("Qwen/Qwen3-8B", "HF hub name or local directory", "tab:hyper")
    domain: str = _field("math", "math | code: the prompt, the verifier, and every by_domain value")
    train_data: str | None = _field(
        BY_DOMAIN, "JSONL path or HF dataset name; by_domain: configs/<domain>.yaml's", "tab:data"
    )
    enable_thinking: bool = _field(False, "passed to the chat template (Qwen3's thinking switch)")
    # --- method (CREDO by default; the baselines are other values of these keys)
    method: str = _field(
        "credo",
        "credo | grpo | rlcr | dcpo, or any name registered in methods.py (docs/forking.md)",
        "eq:total, eq:rewards",
    )
    channel: Literal["readout", "readout_noanalysis", "verbalized"] = _field(
        "readout", "readout | readout_noanalysis (ablation) | verbalized (the baselines)", "app:model"
    )
    answer_reward_shape: Literal["additive", "gated", "none"] = _field(
        "additive", "additive | gated | none: CREDO's r_ans", "app:rewardshape"
    )
    conf_advantage: bool = _field(True, "false: A^conf = 0 (the ablation)", "tab:ablation")
    confidence: str = _field(
        "auto",
        "what c is: readout | digit_exp | numeral, or a read registered in confidence.py; auto: the "
        "channel's own. A baseline's rewards read its numeral: this sets its weights' c",
        "eq:readout, eq:digitexp, eq:verb",
    )
    conf_train: Literal["regression", "sampled", "head"] = _field(
        "regression",
        "how c learns: regression (alpha x calibration_loss through the model) | sampled (the slot token sampled, "
        "scored by the reward; alpha=0) | head (the readout on a detached trunk)",
        "tab:decompose",
    )
    credit_confidence: Literal["engine", "trainer"] = _field(
        "engine",
        "credit's detached c: engine (read at each slot from its prefix cache, one decode step a rollout) | "
        "trainer (a no-grad pass). The paper is silent (docs/choices.md)",
    )
    target: str = _field(
        "hybrid",
        "the confidence target t: hybrid (gamma a + (1 - gamma) mean_group a) | correctness (t = a), or any "
        "name registered with methods.register_target (docs/forking.md)",
        "eq:calloss",
    )
    calibration_loss: str = _field(
        "squared",
        "the term alpha multiplies: squared ((c - t)^2, eq:calloss) | head_bce (the auxiliary head's BCE, "
        "tab:decompose), or any name registered with methods.register_calibration_loss (docs/forking.md)",
        "eq:calloss",
    )
    dcpo_lambda: float = _field(
        0.5, "DCPO's mixing weight of R_IG; not in tab:hyper, set to gamma's value", "eq:rewards"
    )
    # --- shared values
    precision: AUTO | Literal["bf16", "fp32"] = _field(
        "auto", "bf16 | fp32; auto: bf16 on a GPU (the paper's), fp32 on a CPU", "tab:hyper"
    )
    seed: int = _field(43, "the paper's seeds are 43, 44, 45; rank r samples with seed + r", "tab:hyper")
    group_size: int = _field(8, "G, rollouts per question", "tab:hyper")
    lr: float = _field(2.0e-6, "AdamW learning rate, constant: no warm-up, no decay", "tab:hyper")
    adam_beta1: float = _field(0.9, "AdamW beta1 (torch's default; tab:hyper names AdamW only)")
    adam_beta2: float = _field(0.999, "AdamW beta2 (torch's default)")
    adam_eps: float = _field(1.0e-8, "AdamW epsilon (torch's default)")
    adam_fused: AUTO | bool = _field(
        "auto", "torch's fused AdamW kernel (one pass over weights, gradients, moments); auto: on CUDA only"
    )
    weight_decay: float = _field(
        0.0, "AdamW weight decay: 0 (tab:hyper names AdamW only; the codes disagree: docs/choices.md)"
    )
    per_device_batch_size: int = _field(
        2,
        "rollouts per micro-batch; x grad_accum = rollouts per device and step (2 x 64 = 128 = 16 questions x G)",
        "tab:hyper",
    )
    grad_accum: int = _field(64, "micro-batches per optimizer step", "tab:hyper")
    micro_batch_tokens: AUTO | int = _field(
        "auto",
        "tokens per forward/backward micro-batch (padding included when not packed); auto, resolved at "
        "load: per_device_batch_size full-length rollouts (+2 for eq:digitexp), tab:hyper's worst case",
    )
    epochs: int = _field(2, "passes over the training set", "tab:hyper")
    max_steps: int | None = _field(None, "null: epochs x |train| / questions per step")
    temperature: float = _field(1.0, "rollout sampling temperature (the trainer's log-probs use it too)", "tab:hyper")
    top_k: int = _field(50, "rollout top-k (0: off)", "tab:hyper")
    top_p: float = _field(1.0, "rollout top-p (off)")
    max_prompt_tokens: int = _field(BY_DOMAIN, "1,024 math / 2,048 code", "tab:hyper")
    max_completion_tokens: int = _field(BY_DOMAIN, "8,192 math / 6,144 code", "tab:hyper")
    clip_eps: float = _field(0.2, "epsilon of the clipped ratio", "eq:grpo, tab:hyper")
    kl_coef: float = _field(
        0.0,
        "coefficient of the kl loss term (k3 to the frozen starting model; DCPO's code: 1e-3); 0 builds no reference",
        "tab:hyper",
    )
    loss_terms: str | list = _field(
        "pg,cal,kl",
        "the objective's terms (comma-separated), each registered in methods.LOSS_TERMS with its coefficient key",
        "eq:total",
    )
    max_grad_norm: float | None = _field(
        1.0,
        "clip the global gradient norm at this (null: no clipping; logged before clipping). The paper gives none; "
        "1.0 is RLCR's, DCPO's, TRL's and verl's (docs/choices.md)",
    )
    # --- choices the paper leaves open (docs/choices.md): each reading named, with whose code reads it so
    advantage: str = _field(
        "grpo",
        "rewards to advantages: grpo (eq:grpo's group standardisation; see adv_std) | rloo (leave-one-out mean) | "
        "dr_grpo (r - mean), or a name registered with methods.register_advantage",
        "eq:grpo",
    )
    loss_agg: str = _field(
        "token_mean",
        "how J sums a sequence's tokens: token_mean (divide by |o_i|, eq:grpo) | token_sum_norm (divide by "
        "max_completion_tokens: Dr. GRPO), or a name registered with methods.register_loss_agg",
        "eq:grpo",
    )
    adv_std: Literal["sample", "population", "none"] = _field(
        "sample",
        "eq:grpo's std(r): sample (divide by G - 1) | population (by G) | none (r - mean, no division). The paper "
        "is silent; sample is what every code that divides computes (docs/choices.md)",
        "eq:grpo",
    )
    adv_eps: float = _field(
        0.0,
        "epsilon added to std(r) before dividing: 0, as eq:grpo writes it (the codes add 1e-4 or 1e-6: "
        "docs/choices.md)",
        "eq:grpo",
    )
    adv_min_std: float = _field(
        1.0e-6,
        "a group whose std(r) is at most this gets advantage 0 (equal rewards up to float rounding). The paper "
        "and the codes have no such rule; 1e-6 is this project's (docs/choices.md)",
        "eq:grpo",
    )
    truncated_completions: Literal["train", "mask"] = _field(
        "train",
        "rollouts that hit max_completion_tokens: train (scored like any other: TRL's and verl's default) | mask "
        "(no policy-gradient term: RLCR's configs). The paper is silent (docs/choices.md)",
    )
    dcpo_conf_reward: Literal["absolute", "squared"] = _field(
        "absolute",
        "DCPO's r_conf: absolute (-|q - R_IG|, as eq:rewards writes it; optimal at a median of R_IG) | squared "
        "(-0.5 (R_IG - q)^2, DCPO's released code; optimal at the mean)",
        "eq:rewards",
    )
    missing_confidence: Literal["worst", "gate", "minus_one"] = _field(
        "worst",
        "a verbalized rollout with no parseable report: worst (a is kept, the calibration term scores its worst) | "
        "gate (RLCR's code: r = -2) | minus_one (DCPO's code: q = -1). The paper is silent",
        "eq:rewards",
    )
    conf_tag: Literal["first", "last"] = _field(
        "first",
        "which <confidence>...</confidence> after </analysis> is read: first (the slot eq:digitexp reads; DCPO's "
        "code reads its first marker) | last (RLCR's code)",
        "eq:verb",
    )
    conf_number: Literal["decimal", "float"] = _field(
        "decimal",
        "what reads as a number: decimal (0.9, .9, 1: what the prompt asks for; DCPO's code) | float (Python's "
        "float(): RLCR's code). nan, inf and text are never a report",
        "eq:verb",
    )
    conf_out_of_range: Literal["reject", "clip", "keep"] = _field(
        "reject",
        "a number outside [0, 1]: reject (no report, F = 0: RLCR's code's format check) | clip (to [0, 1]) | keep "
        "(DCPO's code: 85 is q = 85). The paper is silent",
        "eq:verb",
    )
    # --- CREDO
    gamma: float = _field(0.5, "target mixture", "eq:calloss, tab:hyper")
    alpha: float = _field(0.03, "calibration weight", "eq:total, tab:hyper")
    beta: float = _field(0.5, "format weight", "eq:rewards3, tab:hyper")
    kappa: float = _field(BY_DOMAIN, "discrepancy-weighting strength (0.25 math / 0.50 code)", "eq:sw, tab:hyper")
    w_min: float = _field(0.5, "lower weight clip w-", "eq:sw, tab:hyper")
    w_max: float = _field(2.0, "upper weight clip w+", "eq:sw, tab:hyper")
    warmup_steps: int = _field(30, "warm-up of alpha and kappa, in steps (its shape: warmup_shape)", "tab:hyper")
    warmup_shape: Literal["linear", "linear_from_zero"] = _field(
        "linear",
        "alpha's and kappa's warm-up (tab:hyper: 30 steps, no shape): linear (x min(1, (step + 1) / W), every step "
        "regresses c) | linear_from_zero (x min(1, step / W))",
        "tab:hyper",
    )
    # --- rollout engine
    engine: Literal["vllm", "hf"] = _field("vllm", "vllm | hf (transformers generate; same interface)")
    vllm_gpu_memory_utilization: float = _field(0.35, "vLLM's share of the GPU's memory")
    vllm_cpu_kv_cache_gb: float = _field(4.0, "KV-cache size (GiB) when vLLM runs on a CPU")
    vllm_enforce_eager: bool = _field(False, "vLLM without CUDA graphs or compilation")
    hf_engine_batch: int = _field(
        64,
        "engine=hf: rollouts generated together (one left-padded, KV-cached batch); "
        "bounds the KV cache and logits memory: rows x (prompt + completion) tokens",
    )
    pack_sequences: AUTO | bool = _field(
        "auto",
        "true (auto, resolved at load): each micro-batch is one padding-free row, attention within each "
        "sequence, each distinct prompt once | false: rows padded to the longest",
    )
    # --- verifier
    verify_workers: int = _field(8, "processes grading rollouts")
    verify_timeout_s: int = _field(5, "whole seconds per rollout (math-verify uses signal.alarm)")
    # --- outputs
    out_dir: str = _field("runs", "where run directories go")
    run_name: str | None = _field(None, "null: <config name>[-<overrides>]-s<seed>")
    save_every: int = _field(50, "checkpoint every N steps (and at the end)")
    save_rollouts: bool = _field(True, "write runs/<name>/rollouts/step_XXXXXX.jsonl")
    resume: str | None = _field(
        None, "a checkpoint directory to continue from, or auto: this run's newest (fresh if none)"
    )
    overwrite: bool = _field(False, "true: replace a run already in the run directory (else that is refused)")
    report_to: str | list = _field(
        "jsonl", "comma-separated: jsonl (always), tensorboard, wandb (each imported only when asked)"
    )
    wandb_project: str = _field("credo", "the wandb project")
    wandb_mode: Literal["auto", "online", "offline"] = _field(
        "auto", "auto: online when WANDB_API_KEY is set, else offline (`wandb sync` later)"
    )
    # --- distributed (infra/parallel.py; `NPROC=8 bash run.sh math`, docs/distributed.md)
    activation_checkpointing: AUTO | bool = _field(
        "auto",
        "recompute decoder-layer activations in backward; auto: on when infra/parallel.py's fit estimate says "
        "the update would not fit the GPU without it (never on a CPU)",
    )
    compile_layers: AUTO | bool = _field(
        "auto", "torch.compile the update's decoder layers and log-prob blocks; auto: CUDA only"
    )
    # --- LoRA (adapters/lora.py; docs/distributed.md): the paper fine-tunes every weight, so it is silent here
    lora_rank: int = _field(
        0,
        "LoRA's rank r; 0: full fine-tuning (the paper's). r > 0 trains adapters on lora_targets and the reserved "
        "tokens' embedding and head rows, and nothing else (docs/distributed.md)",
    )
    lora_alpha: float = _field(32.0, "LoRA's alpha: adapters scaled by lora_alpha / lora_rank (PEFT's default scaling)")
    lora_targets: str | list = _field(
        "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        "decoder modules given adapters (comma-separated): every attention and MLP projection, as LoRA Without "
        "Regret (2025) advises for RL",
    )
    lora_quant: Literal["none", "nf4"] = _field(
        "none",
        "QLoRA: nf4 packs the frozen base's linear layers (not the head) in 4 bits (bitsandbytes; "
        "adapters/quant.py); needs lora_rank > 0, one process",
    )
    # --- derived at load, not settable
    config_name: str = _field("", "the config file's name (derived)")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (value == BY_DOMAIN and f.default == BY_DOMAIN) and not has_type(value, hints()[f.name]):
                declared = str(hints()[f.name]).replace("typing.", "")
                raise TypeError(f"config key {f.name!r} is {value!r}, not of its declared type {declared}")


FIELD_HELP = {f.name: f.metadata["help"] for f in dataclasses.fields(Config)}


@functools.cache
def hints() -> dict:
    """Each field's declared type (the annotations, evaluated once)."""
    return typing.get_type_hints(Config)


def has_type(value, hint) -> bool:
    """Whether `value` is of the declared type `hint` (a type, a Literal, or a union of those;
    an int is a float, a bool is not an int).

    >>> has_type(3, float), has_type(True, int), has_type("auto", AUTO | bool), has_type("false", AUTO | bool)
    (True, False, True, False)
    """
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(has_type(value, option) for option in typing.get_args(hint))
    if typing.get_origin(hint) is Literal:
        return isinstance(value, str) and value in typing.get_args(hint)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, typing.get_origin(hint) or hint)
