"""Run configuration: a resolved `Config` (schema.py) from YAML files and `key=value`
overrides, its validation, and run names.

    >>> cfg = load_config("tiny", ["lr=3e-5"])
    >>> cfg.lr, cfg.run_name, cfg.channel
    (3e-05, 'tiny-lr3e-5-s43', 'readout')

Every key a run can set is a field of `schema.Config`, with its default (tab:hyper's value where the
paper gives one), where it comes from, and a help line (`python credo.py --help-config`). A
file in configs/ sets some of them and may `inherit:` another; `by_domain` values come from
configs/<domain>.yaml. Anything else is an error naming the nearest keys. `load_config`
returns a frozen `Config` with every `by_domain` key and every `auto` that the configuration
alone decides resolved; the `auto`s that the machine decides (precision, compile_layers,
adam_fused, activation_checkpointing, wandb_mode) are resolved by one named function each when
the device is known. How a run gets its confidence from these keys is decided by
confidence.plan (the ConfidencePlan), once.

`import config` loads no torch: methods.py's and confidence.py's registries are imported when a
config is validated (`_methods`, `_confidence`), after its file, keys, values and counts are
checked, and after a name no registry can hold is refused (`_refuse_unregistered_names`, from
methods.py's text), so that run.sh (dataprep.data first-use) reports a mistake in those before
the heavy libraries load.

Does not hold: reading data (dataprep/data.py), the model (policy.py), or the loop (credo.py).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import importlib.util
import re
import sys
import types
import typing
from pathlib import Path
from typing import Literal

import yaml

from rollout import DOMAINS
from schema import BY_DOMAIN, PEFT_ADAPTER_CONFIG, Config, hints

ROOT = Path(__file__).resolve().parent
CONFIG_DIR = ROOT / "configs"
DERIVED = ("config_name",)
FIELDS = {f.name: f for f in dataclasses.fields(Config) if f.name not in DERIVED}


def as_dict(cfg: Config) -> dict:
    """The config as plain values (what a run saves as config.yaml)."""
    return dataclasses.asdict(cfg)


def help_text() -> str:
    """Every field with its default, source and help (`python credo.py --help-config`)."""
    lines = []
    for name, f in FIELDS.items():
        source = f" [{f.metadata['source']}]" if f.metadata["source"] else ""
        lines.append(
            f"{name} = {yaml.safe_dump(f.default, default_flow_style=True).strip().removesuffix('...').strip()}"
            f"{source}\n    {f.metadata['help']}"
        )
    return "\n".join(lines)


# ============================================================================================
# Reading a config: YAML files with `inherit:`, then `key=value` overrides.
# ============================================================================================


def _config_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise FileNotFoundError(f"config file {path} does not exist")
        return path
    path = CONFIG_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = config_names()
        raise FileNotFoundError(f"no config named {name_or_path!r} in {CONFIG_DIR}; known: {', '.join(known)}")
    return path


@functools.lru_cache(maxsize=256)
def _parse_yaml(path: str, mtime_ns: int) -> dict:
    """A config file's `key: value` mapping; broken YAML, or YAML that is not a mapping, is one
    ValueError naming the file (and the line)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"config file {path}: broken YAML{where} ({problem}); fix the file") from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(
            f"config file {path} holds a YAML {type(data).__name__} ({str(data)[:40]!r}), not a mapping of "
            f"`key: value` lines such as `lr: 1.0e-5` (`bash run.sh --help-config` lists the keys)"
        )
    return data


def config_names() -> list[str]:
    """Every run config in configs/ (tables.yaml is the index of the paper's tables, not a config)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if p.stem != "tables")


def _read_config_file(path: Path) -> dict:
    """A config file with its `inherit:` chain resolved (parents first)."""
    data = copy.deepcopy(_parse_yaml(str(path), path.stat().st_mtime_ns))  # parsed once per version of the file
    parent = data.pop("inherit", None)
    if parent is None:
        return data
    merged = _read_config_file(_config_path(parent))
    merged.update(data)
    return merged


# What other trainers call some keys (TRL, verl, OpenRLHF): named in the error, never accepted.
KEY_ALIASES = {
    "learning_rate": "lr",
    "num_generations": "group_size",
    "n_samples_per_prompt": "group_size",
    "rollout_n": "group_size",
    "batch_size": "per_device_batch_size",
    "train_batch_size": "per_device_batch_size",
    "gradient_accumulation_steps": "grad_accum",
    "max_grad_norm_clip": "max_grad_norm",
    "epsilon": "clip_eps",
    "beta_kl": "kl_coef",
    "kl_beta": "kl_coef",
    "max_new_tokens": "max_completion_tokens",
    "max_prompt_length": "max_prompt_tokens",
    "max_completion_length": "max_completion_tokens",
    "model_name_or_path": "model",
    "dataset": "train_data",
    "output_dir": "out_dir",
    "num_train_epochs": "epochs",
}


def _check_key(key: str, where: str) -> None:
    if key not in FIELDS:
        near = [KEY_ALIASES[key]] if KEY_ALIASES.get(key) in FIELDS else []
        near += [k for k in difflib.get_close_matches(key, FIELDS, n=3, cutoff=0.5) if k not in near]
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        raise KeyError(f"unknown config key {key!r} in {where}{hint} (`bash run.sh --help-config` lists the keys)")


def parse_override(item: str) -> tuple[str, object]:
    """`key=value` with the value parsed as YAML (`lr=1e-5`, `resume=null`, `engine=hf`)."""
    if "=" not in item:
        raise ValueError(
            f"override {item!r} is not of the form key=value (e.g. lr=1e-5; `bash run.sh list` shows the configs)"
        )
    key, value = item.split("=", 1)
    return key.strip(), yaml.safe_load(value)


def _coerce(key: str, value):
    """`value` as the type the field declares. YAML 1.1 reads `3e-5` as a string (it wants
    `3.0e-5`) and `true` as a boolean: numeric strings become numbers, booleans stay booleans,
    the strings of a `Literal` stay as they are; anything else is an error naming the key."""
    if value == BY_DOMAIN and FIELDS[key].default == BY_DOMAIN:
        return value
    hint = hints()[key]
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    choices = [c for o in options if typing.get_origin(o) is Literal for c in typing.get_args(o)]
    kinds = [o for o in options if typing.get_origin(o) is not Literal]
    if isinstance(value, str) and value in choices:
        return value
    if value is None and type(None) in kinds:
        return None
    if isinstance(value, bool) and bool in kinds:
        return value
    if isinstance(value, str) and bool in kinds and value.lower() in ("true", "false"):
        return value.lower() == "true"  # pack_sequences as a run saved it before it was a boolean
    if isinstance(value, str) and str not in kinds:
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                pass
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if float in kinds:
            return float(value)
        if int in kinds and float(value).is_integer():
            return int(value)
    if str in kinds and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    if list in kinds and isinstance(value, list):
        return value
    kind_names = ["null" if k is type(None) else getattr(k, "__name__", str(k)) for k in kinds]
    if choices:
        allowed = ", ".join([repr(c) for c in choices] + kind_names)
        raise ValueError(f"{key}={value!r} is not supported; choose one of ({allowed})")
    raise TypeError(f"config key {key!r} expects {' or '.join(kind_names)}, got {value!r}")


# Overrides that do not change what is trained, left out of the default run name.
_NAMELESS_OVERRIDES = (
    "seed",
    "run_name",
    "out_dir",
    "resume",
    "save_every",
    "save_rollouts",
    "verify_workers",
    "pack_sequences",
    "micro_batch_tokens",
    "activation_checkpointing",
    "compile_layers",
    "adam_fused",
    "overwrite",
    "report_to",
    "wandb_project",
    "wandb_mode",
)
REPORTERS = ("jsonl", "tensorboard", "wandb")


def _domain_profile(domain: str) -> dict:
    """The values configs/<domain>.yaml gives the `by_domain` keys (tab:hyper's per-domain values)."""
    if domain not in DOMAINS:
        raise ValueError(f"domain={domain!r} is not supported; choose one of {DOMAINS}")
    return _read_config_file(_config_path(domain))


def load_config(name_or_path: str, overrides: list[str] = (), validate: bool = True) -> Config:
    """Resolve a config: Config's defaults <- file (with its inherit chain) <- `key=value`
    overrides; then the `by_domain` keys from configs/<domain>.yaml and the configuration's own
    `auto`s (micro_batch_tokens, pack_sequences). Values take the type their field declares.
    The default run name is `<config>[-<overrides>]-s<seed>`. The result is frozen, and validated
    (validate_config) unless `validate` is false.
    """
    path = _config_path(name_or_path)
    from_file = _read_config_file(path)
    from_file.pop("config_name", None)  # recorded in a run's resolved config.yaml; derived, not set
    from_file = without_retired_keys(from_file, str(path))  # a config.yaml saved before a key was retired
    values = {key: f.default for key, f in FIELDS.items()}
    for key, value in from_file.items():
        _check_key(key, str(path))
        values[key] = _coerce(key, value)
    named = []
    for item in overrides:
        key, value = parse_override(item)
        _check_key(key, "the command line")
        values[key] = _coerce(key, value)
        if key not in _NAMELESS_OVERRIDES:
            named.append(f"{key}{Path(str(value)).name}" if key != "domain" else str(value))
    if path.stem in DOMAINS and values["domain"] != path.stem:
        raise ValueError(
            f"configs/{path.stem}.yaml fixes the {path.stem} values of tab:hyper; for domain={values['domain']} "
            f"run `bash run.sh {values['domain']}` or `bash run.sh credo domain={values['domain']}`"
        )
    values = resolve(values, config_name=path.stem)
    if values["run_name"] is None and named:
        values["run_name"] = "-".join([path.stem, *named, f"s{values['seed']}"])
    cfg = Config(**values)
    if validate:
        validate_config(cfg)
    return cfg


def resolve(values: dict, config_name: str) -> dict:
    """`values` with the `by_domain` keys taken from configs/<domain>.yaml and the `auto`s the
    configuration alone decides made explicit (a new dict; the input is not changed)."""
    profile = _domain_profile(values["domain"])
    out = dict(values, config_name=config_name)
    for key, value in values.items():
        if value == BY_DOMAIN:
            if profile.get(key, BY_DOMAIN) == BY_DOMAIN:
                raise ValueError(f"{key} is by_domain but configs/{values['domain']}.yaml gives it no value")
            out[key] = _coerce(key, profile[key])
    out["pack_sequences"] = values["pack_sequences"] in ("auto", True)
    if values["micro_batch_tokens"] == "auto":
        out["micro_batch_tokens"] = out["per_device_batch_size"] * (
            out["max_prompt_tokens"] + out["max_completion_tokens"] + 2
        )
    return out


# Keys that had one allowed value and were removed, with that value: a config.yaml saved before
# holds them. config_from_values drops one that has its value and refuses any other (docs/choices.md).
RETIRED_KEYS = {"lr_schedule": "constant", "optimizer": "adamw"}


def without_retired_keys(values: dict, where: str) -> dict:
    """`values` less each retired key that holds its one value; any other value is refused."""
    for key, value in values.items():
        if key in RETIRED_KEYS and value != RETIRED_KEYS[key]:
            raise ValueError(
                f"{where} sets {key}={value!r}; {key} was retired with its only value {RETIRED_KEYS[key]!r}, "
                f"so this loop cannot run that setting"
            )
    return {key: value for key, value in values.items() if key not in RETIRED_KEYS}


def config_from_values(values: dict, config_name: str = "") -> Config:
    """A Config from plain values (a saved config.yaml, a client's settings): Config's defaults
    under them, each key checked and typed, then resolved; not validated (a derived setting may
    be one no run trains with, e.g. a checkpoint read through another channel)."""
    merged = {key: f.default for key, f in FIELDS.items()}
    for key, value in without_retired_keys(values, "the saved config").items():
        if key in DERIVED:
            continue
        _check_key(key, "the saved config")
        merged[key] = _coerce(key, value)
    return Config(**resolve(merged, config_name or values.get("config_name", "")))


def validate_config(cfg: Config) -> None:
    """Refuse values the loop does not implement, and combinations that mean nothing, with the
    reason. Reads `cfg`, never changes it. (Each Literal field's choices are checked at load.)"""
    _validate_counts(cfg)
    _validate_loop_support(cfg)
    if cfg.domain not in DOMAINS:
        raise ValueError(f"domain={cfg.domain!r} is not supported; choose one of {DOMAINS}")
    _refuse_unregistered_names(cfg)  # a misspelt name in well under a second, before torch loads
    methods = _methods()
    if cfg.method not in methods.METHODS:
        raise ValueError(
            f"method={cfg.method!r} is not supported; choose one of {tuple(methods.METHODS)} (or register one in "
            f"methods.py, docs/forking.md)"
        )
    for key, registry, register in (
        ("target", methods.TARGETS, "register_target"),
        ("calibration_loss", methods.CALIBRATION_LOSSES, "register_calibration_loss"),
        ("advantage", methods.ADVANTAGES, "register_advantage"),
        ("loss_agg", methods.LOSS_AGGREGATIONS, "register_loss_agg"),
    ):
        if getattr(cfg, key) not in registry:
            raise ValueError(
                f"{key}={getattr(cfg, key)!r} is not supported; choose one of {tuple(registry)} (or {register} "
                f"in methods.py, docs/forking.md)"
            )
    names = methods.term_names(cfg)
    unknown = [name for name in names if name not in methods.LOSS_TERMS]
    if unknown or len(set(names)) < len(names):
        raise ValueError(
            f"loss_terms={cfg.loss_terms!r}: {'unknown ' + str(unknown) if unknown else 'a term listed twice'}; "
            f"choose from {tuple(methods.LOSS_TERMS)} (or register_loss_term in methods.py, docs/forking.md)"
        )
    if not cfg.kl_coef >= 0:
        raise ValueError(f"kl_coef={cfg.kl_coef!r} must be >= 0 (0: no KL term, no reference model)")
    if cfg.lora_quant != "none" and not cfg.lora_rank:
        raise ValueError(
            f"lora_quant={cfg.lora_quant} needs lora_rank > 0: a 4-bit base is frozen, only adapters train over it"
        )
    if cfg.lora_quant != "none" and importlib.util.find_spec("bitsandbytes") is None:
        raise ValueError(
            f"lora_quant={cfg.lora_quant} needs bitsandbytes, which is not installed: bash run.sh setup installs it"
        )
    if cfg.lora_rank and methods.needs_reference(cfg) and (Path(str(cfg.model)) / PEFT_ADAPTER_CONFIG).exists():
        raise ValueError(
            f"kl_coef={cfg.kl_coef!r} with lora_rank={cfg.lora_rank}: model={cfg.model} holds LoRA adapters, so the "
            f"base with its adapters off is not the starting model the KL term needs; start from merged weights"
        )
    method, channel, read = cfg.method, cfg.channel, _confidence().read_of_config(cfg)
    reads = methods.method_of(method).reads  # what the method's rewards score (methods.py)
    readout_channel = channel.startswith("readout")
    if channel not in read.prompts:
        raise ValueError(
            f"confidence={read.name} needs the {' or '.join(read.prompts)} channel (the prompts it is read on), "
            f"not channel={channel}"
        )
    if reads == "report" and readout_channel:
        raise ValueError(
            f"method={method} needs the verbalized channel (its reward scores the sampled numeral), "
            f"not channel={channel}"
        )
    if reads == "nothing" and readout_channel and cfg.conf_train != "head":
        raise ValueError(
            f"method={method} on a readout channel is only the auxiliary-head arm (conf_train=head); "
            f"plain {method} uses channel=verbalized"
        )
    model_reads = tuple(r.name for r in _confidence().reads_of(channel) if r.model)
    if reads == "model" and not read.model:
        raise ValueError(
            f"method={method} needs a confidence with logits (a model read of channel={channel}: {model_reads}), "
            f"not confidence={read.name}, read from the text"
        )
    if cfg.alpha != 0 and not read.model:
        raise ValueError(
            f"alpha > 0 needs a differentiable confidence: confidence={read.name} is read from the text "
            f"(a model read of channel={channel}: {model_reads}, with method=credo)"
        )
    if cfg.alpha != 0 and reads != "model" and cfg.conf_train != "head":
        raise ValueError(
            f"alpha > 0 with method={method} is only meaningful with conf_train=head (an auxiliary "
            f"BCE head); {method}'s own calibration comes from its reward"
        )
    if cfg.conf_train == "sampled":
        if reads != "model" or channel != "readout":
            raise ValueError(
                "conf_train=sampled (readout + reward only) needs a method that reads the model's c "
                "(method=credo) on channel=readout"
            )
        if cfg.alpha != 0:
            raise ValueError("conf_train=sampled removes the regression: set alpha=0")
    if cfg.conf_train == "head" and (reads == "model" or not readout_channel):
        raise ValueError(
            "conf_train=head (GRPO + auxiliary head) needs a baseline method on a readout channel: "
            "CREDO's readout drives its own rewards and is regressed directly"
        )
    _validate_open_choices(cfg, reads)


# Counts and their least meaningful value (checked first, so that an error names the key given,
# not a value derived from it such as micro_batch_tokens=auto's).
COUNTS = {
    "per_device_batch_size": 1,
    "grad_accum": 1,
    "group_size": 1,
    "epochs": 1,
    "max_steps": 1,
    "max_prompt_tokens": 1,
    "max_completion_tokens": 1,
    "save_every": 1,
    "verify_workers": 1,
    "verify_timeout_s": 1,
    "hf_engine_batch": 1,
    "warmup_steps": 0,
    "top_k": 0,
    "lora_rank": 0,
}


def _validate_counts(cfg: Config) -> None:
    """Every count of COUNTS is at least its least value (max_steps may also be null); LoRA's alpha
    is positive and its targets name at least one module."""
    for key, least in COUNTS.items():
        value = getattr(cfg, key)
        if value is not None and value < least:
            kind = "a positive integer" if least == 1 else f"an integer >= {least}"
            null = " (or null: epochs x |train| / questions per step)" if key == "max_steps" else ""
            raise ValueError(f"{key}={value!r} must be {kind}{null}")
    if not cfg.lora_alpha > 0:
        raise ValueError(f"lora_alpha={cfg.lora_alpha!r} must be positive (the adapters are scaled by alpha / rank)")
    targets = cfg.lora_targets.split(",") if isinstance(cfg.lora_targets, str) else cfg.lora_targets
    if not [t for t in targets if isinstance(t, str) and t.strip()] or not all(isinstance(t, str) for t in targets):
        raise ValueError(f"lora_targets={cfg.lora_targets!r} must name modules, comma-separated (e.g. q_proj,v_proj)")


def _confidence() -> types.ModuleType:
    """confidence.py, whose registry of reads (READS) the `confidence` key names. Imported here, as
    methods.py is (`_methods`): it imports torch, and `import config` stays free of it."""
    import confidence

    return confidence


def _methods() -> types.ModuleType:
    """methods.py, whose registries (METHODS, TARGETS, CALIBRATION_LOSSES, ADVANTAGES,
    LOSS_AGGREGATIONS) validation reads.
    Imported here, on purpose, not at the top: methods imports torch (seconds), and `import config`
    stays free of it, so that a mistake in a config's file, keys or values is reported before the
    heavy libraries load (run.sh checks a run's arguments with dataprep.data first-use)."""
    import methods

    return methods


# The registries a config names: the key, the module that fills it, and its decorators there.
REGISTERED = (
    ("method", "methods", ("register_method",)),
    ("target", "methods", ("register_target",)),
    ("calibration_loss", "methods", ("register_calibration_loss",)),
    ("advantage", "methods", ("register_advantage",)),
    ("loss_agg", "methods", ("register_loss_agg",)),
    ("loss_terms", "methods", ("register_loss_term",)),
    ("confidence", "confidence", ("register_model_read", "register_text_read")),
)


def _refuse_unregistered_names(cfg: Config) -> None:
    """A misspelt registered name (a method, target, calibration loss, advantage, aggregation, loss
        term or confidence read), refused before methods.py or confidence.py loads (they import torch:
        seconds). While a module is not imported, its registries can only hold what its source
        registers, so a name that is not even a quoted string there cannot be registered; the choices
        are read from its `@register_...("name"` lines (at the start of a line, not a docstring's
    example). Anything else (a name the source holds, a
        decorator the source does not use) is left to the registries themselves."""
    for key, module, registers in REGISTERED:
        if module in sys.modules:  # imported: a name may have been registered since (a fork, a test)
            continue
        spec = importlib.util.find_spec(module)
        source = Path(spec.origin).read_text() if spec and spec.origin else ""
        decorators = "|".join(registers)
        names = tuple(re.findall(rf"^@(?:{decorators})\(\s*[\"']([^\"']+)[\"']", source, re.MULTILINE))
        value = getattr(cfg, key)
        values = value if isinstance(value, list) else str(value).split(",") if key == "loss_terms" else [value]
        for name in (str(v).strip() for v in values):
            if (
                not names
                or (key == "confidence" and name == "auto")
                or re.search(rf"[\"']{re.escape(name)}[\"']", source)
            ):
                continue
            how = "register one" if key in ("method", "confidence") else " or ".join(registers)
            names = (*names, "auto") if key == "confidence" else names
            raise ValueError(
                f"{key}={name!r} is not supported; choose one of {names} (or {how} in {module}.py, docs/forking.md)"
            )


def _validate_loop_support(cfg: Config) -> None:
    """What the loop supports: the step loggers, no KL term, a training set, a micro-batch that
    holds a whole rollout, whole groups in a step."""
    unknown = [name for name in reporters(cfg) if name not in REPORTERS]
    if unknown:
        raise ValueError(f"report_to={cfg.report_to!r}: unknown {unknown}; choose from {REPORTERS} (comma-separated)")
    for name, package in (("tensorboard", "tensorboard"), ("wandb", "wandb")):
        if name in reporters(cfg) and importlib.util.find_spec(package) is None:
            raise ValueError(
                f"report_to={name} needs the {package} package: pip install {package} (or drop it from report_to)"
            )
    if cfg.train_data is None:
        raise ValueError("train_data is not set (a local JSONL file or a Hugging Face dataset id)")
    full_length = cfg.max_prompt_tokens + cfg.max_completion_tokens + 2
    if cfg.micro_batch_tokens < full_length:
        raise ValueError(
            f"micro_batch_tokens={cfg.micro_batch_tokens!r} must be auto or an integer of at least "
            f"max_prompt_tokens + max_completion_tokens + 2 = {full_length}, so that every rollout fits "
            f"in a micro-batch"
        )
    rollouts = cfg.per_device_batch_size * cfg.grad_accum
    if rollouts % cfg.group_size:
        raise ValueError(
            f"per_device_batch_size x grad_accum = {rollouts} rollouts per step is not a multiple of "
            f"group_size = {cfg.group_size}: groups must not be split across optimizer steps"
        )


def _validate_open_choices(cfg: Config, reads: str) -> None:
    """The choices the paper leaves open (docs/choices.md): values that mean nothing, and a
    reading set where this run has nothing it applies to (it would be ignored)."""
    if cfg.max_grad_norm is not None and not cfg.max_grad_norm > 0:
        raise ValueError(f"max_grad_norm={cfg.max_grad_norm!r} must be positive, or null for no clipping")
    for key in ("adv_eps", "adv_min_std"):
        if not getattr(cfg, key) >= 0:
            raise ValueError(f"{key}={getattr(cfg, key)!r} must be >= 0")
    if cfg.adv_std != "none" and cfg.adv_eps == 0 and cfg.adv_min_std == 0:
        raise ValueError(
            "adv_eps=0 with adv_min_std=0 divides a group of equal rewards by a std of 0: raise one of them"
        )
    if cfg.adv_std == "none" and cfg.adv_eps != 0:
        raise ValueError(
            f"adv_eps={cfg.adv_eps!r} is added to the std that adv_std divides by; adv_std=none divides by none"
        )
    if cfg.adv_std == "sample" and cfg.group_size < 2:
        raise ValueError(f"adv_std=sample divides by G - 1: group_size={cfg.group_size} needs adv_std=population")
    if cfg.advantage == "rloo" and cfg.group_size < 2:
        raise ValueError(
            f"advantage=rloo's baseline is the mean of the group's other rollouts: group_size={cfg.group_size} "
            f"has none; raise group_size"
        )
    if cfg.dcpo_conf_reward != "absolute" and cfg.method != "dcpo":
        raise ValueError(
            f"dcpo_conf_reward={cfg.dcpo_conf_reward} is DCPO's reward; method={cfg.method} does not read it"
        )
    if cfg.missing_confidence != "worst" and reads != "report":
        raise ValueError(
            f"missing_confidence={cfg.missing_confidence} is how a verbalized baseline's reward reads a missing "
            f"report; method={cfg.method}'s rewards read no report"
        )
    if cfg.missing_confidence == "gate" and cfg.method != "rlcr":
        raise ValueError(
            f"missing_confidence=gate is RLCR's code's format gate (method=rlcr); method={cfg.method} has none "
            f"(DCPO's code reads a missing report as -1: missing_confidence=minus_one)"
        )
    parse = {"conf_tag": "first", "conf_number": "decimal", "conf_out_of_range": "reject"}
    changed = [f"{key}={getattr(cfg, key)}" for key, default in parse.items() if getattr(cfg, key) != default]
    if changed and cfg.channel != "verbalized":
        raise ValueError(f"{', '.join(changed)} reads a verbalized report; channel={cfg.channel} has none")


def questions_per_step(cfg: Config) -> int:
    """Questions per optimizer step, over all ranks: the step's rollouts / G."""
    return cfg.per_device_batch_size * cfg.grad_accum // cfg.group_size


def compiles_layers(cfg: Config, device_type: str) -> bool:
    """compile_layers as set (true/false), or for `auto` on exactly on CUDA: fused decoder
    layers pay there (policy.compile_layers); on a CPU the compilation costs more than it saves.

    >>> compiles_layers(Config(), "cuda"), compiles_layers(Config(), "cpu")
    (True, False)
    >>> compiles_layers(Config(compile_layers=True), "cpu")
    True
    """
    return device_type == "cuda" if cfg.compile_layers == "auto" else cfg.compile_layers


def fuses_adam(cfg: Config, device_type: str) -> bool:
    """adam_fused as set (true/false), or for `auto` on exactly on CUDA. torch's fused AdamW
    updates each weight in one kernel pass; its default there (foreach) makes about ten passes
    over the fp32 weights and moments: about 80 bytes a parameter against 28, some 40 ms against
    14 per step for 1.7B on an H100 (estimated). The two agree to float rounding (about 1e-8);
    on a CPU the default stays, so the CPU's values do not move.

    >>> fuses_adam(Config(), "cuda"), fuses_adam(Config(), "cpu"), fuses_adam(Config(adam_fused=True), "cpu")
    (True, False, True)
    """
    return device_type == "cuda" if cfg.adam_fused == "auto" else cfg.adam_fused


def reporters(cfg: Config) -> list[str]:
    """The step loggers of report_to (`jsonl,wandb` or a YAML list); jsonl is always one."""
    names = cfg.report_to if isinstance(cfg.report_to, list) else str(cfg.report_to or "").split(",")
    return list(dict.fromkeys(["jsonl", *(name.strip() for name in names if name.strip())]))


def run_dir_of(cfg: Config) -> Path:
    """runs/<run_name>, by default <config name>-s<seed>; a run resumed from a checkpoint
    directory keeps that checkpoint's (resume=auto: the run's own)."""
    if cfg.resume and cfg.resume != "auto":
        return Path(cfg.resume).parent.parent
    return Path(cfg.out_dir) / (cfg.run_name or f"{cfg.config_name}-s{cfg.seed}")


# ============================================================================================
# Bad input on the command line: one line that names the problem and the fix.
# ============================================================================================

# What a mistake in a config name, a key, a value or a path raises while a command reads its
# input (before any work starts): the CLIs print these as one line (a traceback with --debug).
INPUT_ERRORS = (ValueError, KeyError, TypeError, FileNotFoundError, FileExistsError)
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def check_model_source(model: str, key: str = "model") -> None:
    """A model is a local directory with a config.json, or a hub id `org/name` (fetched on
    first use); anything else is refused here instead of deep inside the hub client.

    >>> check_model_source("Qwen/Qwen3-1.7B")
    >>> check_model_source("/nonexistent")
    Traceback (most recent call last):
    ...
    FileNotFoundError: model=/nonexistent: no such directory, and not a hub id (org/name)
    """
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise FileNotFoundError(
                f"{key}={model}: the directory has no config.json (not a saved model or checkpoint)"
            )
        return
    if model.startswith(("/", ".", "~")) or not _HUB_ID.fullmatch(model):
        raise FileNotFoundError(f"{key}={model}: no such directory, and not a hub id (org/name)")


def run_config(argv: list[str], validate: bool = True) -> Config | None:
    """The config of credo.py's arguments `<config> [key=value ...]` (options dropped), None where
    they ask for help instead; arguments that do not load as a config raise INPUT_ERRORS."""
    words = [a for a in argv if not a.startswith("--")]
    if not words or any(a in ("--help-config", "--list", "--table", "-h", "--help") for a in argv):
        return None
    return load_config(words[0], words[1:], validate=validate)


def check_run_arguments(argv: list[str], builds: str | None = None) -> Config | None:
    """run_config, with the model a fresh run starts from checked first (check_model_source, before
    validation imports the registries' modules, and torch with them): what credo.py checks of its
    arguments before torch loads. `builds`: a directory the caller builds next (run.sh's tiny
    world), so a model under it is not looked for yet."""
    cfg = run_config(argv, validate=False)
    if cfg is None:
        return None
    built = builds is not None and Path(str(cfg.model)).resolve().is_relative_to(Path(builds).resolve())
    if not cfg.resume and not built:
        check_model_source(str(cfg.model))
    validate_config(cfg)
    return cfg


def exit_on_bad_run_arguments(argv: list[str], builds: str | None = None) -> None:
    """check_run_arguments, with a mistake reported as credo.py reports it: `credo: ...` in one line
    and exit 1 (a traceback with --debug)."""
    try:
        check_run_arguments(argv, builds)
    except INPUT_ERRORS as error:
        if "--debug" in argv:
            raise
        sys.exit(f"credo: {one_line(error)}")


def one_line(error: BaseException) -> str:
    """An input error as the one line a CLI prints (KeyError's message without its quotes)."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return f"{message} (--debug shows the traceback)"
