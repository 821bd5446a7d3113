"""config.py: the typed schema and its defaults, overrides, validation, every config in
configs/, and the confidence plan of each method."""

import dataclasses
import doctest
import re
import textwrap

import pytest
import yaml

import confidence
import config
import credo
import rollout as ro
from confidence import READS, ConfidencePlan
from config import Config, load_config


def test_docstring_examples_hold():
    result = doctest.testmod(config, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 3 and result.failed == 0


def test_paper_hyperparameters_are_the_defaults():
    cfg = load_config("math")
    expected = {
        "group_size": 8,
        "lr": 2e-6,
        "per_device_batch_size": 2,
        "grad_accum": 64,
        "epochs": 2,
        "temperature": 1.0,
        "top_k": 50,
        "max_prompt_tokens": 1024,
        "max_completion_tokens": 8192,
        "clip_eps": 0.2,
        "kl_coef": 0.0,
        "gamma": 0.5,
        "alpha": 0.03,
        "beta": 0.5,
        "kappa": 0.25,
        "w_min": 0.5,
        "w_max": 2.0,
        "warmup_steps": 30,
        "seed": 43,
        "model": "Qwen/Qwen3-8B",
    }
    assert {k: getattr(cfg, k) for k in expected} == expected
    assert config.questions_per_step(cfg) == 16
    tab_hyper = {name for name, f in config.FIELDS.items() if "tab:hyper" in f.metadata["source"]}
    assert set(expected) <= tab_hyper  # each of tab:hyper's rows names its source


def test_the_config_is_typed_frozen_and_documented():
    cfg = load_config("tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0
    assert all(f.metadata["help"] for f in config.FIELDS.values())
    for name, f in config.FIELDS.items():  # every default has its field's declared type
        if f.default != config.BY_DOMAIN:
            assert config._coerce(name, f.default) == f.default, name


def test_help_config_lists_every_field(capsys):
    credo.main(["--help-config"])
    printed = capsys.readouterr().out
    for name, f in config.FIELDS.items():
        assert f"\n{name} = " in "\n" + printed and f.metadata["help"] in printed
    assert "lr = 2.0e-06 [tab:hyper]\n    AdamW learning rate" in printed
    assert "config_name" not in printed  # derived, not settable


HELP_WIDTH = 100  # a terminal's columns: each key's help, as --help-config prints it, fits two such lines


def test_every_key_s_help_is_at_most_two_lines():
    """A key's help says what it does and where its default comes from; the baselines' codes'
    readings of a choice live in docs/choices.md. Counted as printed: `name = default [source]`,
    then the help's lines, each wrapped at HELP_WIDTH columns."""
    rendered: dict[str, int] = {}
    name = None
    for line in config.help_text().splitlines():
        if not line.startswith(" "):
            name = line.split(" = ", 1)[0]
            rendered[name] = 0
        else:
            rendered[name] += len(textwrap.wrap(line, width=HELP_WIDTH, subsequent_indent="    "))
    assert set(rendered) == set(config.FIELDS)
    long = {key: lines for key, lines in rendered.items() if lines > 2}
    assert long == {}, f"help longer than two {HELP_WIDTH}-column lines (move the detail to docs/choices.md): {long}"
    assert all(lines >= 1 for lines in rendered.values())


def test_by_domain_and_the_configs_own_autos_are_resolved_at_load():
    for name in config.config_names():
        cfg = load_config(name)
        assert config.BY_DOMAIN not in dataclasses.astuple(cfg), name
        assert isinstance(cfg.micro_batch_tokens, int) and isinstance(cfg.pack_sequences, bool), name
    assert load_config("tiny", ["pack_sequences=auto"]).pack_sequences is True
    assert load_config("tiny", ["pack_sequences=false"]).pack_sequences is False
    assert load_config("tiny", ["pack_sequences='false'"]).pack_sequences is False  # as older runs saved it
    # the machine's autos stay for their resolvers (compiles_layers, fuses_adam, compute_dtype, ...)
    assert (load_config("math").precision, load_config("math").compile_layers) == ("auto", "auto")


def test_values_take_their_fields_types():
    cases = {
        "lr=1e-5": ("lr", 1e-5),
        "kappa=1": ("kappa", 1.0),
        "seed=1e2": ("seed", 100),
        "max_steps=null": ("max_steps", None),
        "max_grad_norm=1": ("max_grad_norm", 1.0),
        "run_name=2024": ("run_name", "2024"),
        "adam_fused=true": ("adam_fused", True),
        "adam_fused=auto": ("adam_fused", "auto"),
        "report_to=[jsonl]": ("report_to", ["jsonl"]),
        "enable_thinking=false": ("enable_thinking", False),
    }
    for item, (key, value) in cases.items():
        got = getattr(load_config("tiny", [item]), key)
        assert got == value and type(got) is type(value), item
    for item, error, message in (
        ("max_steps=3.5", TypeError, "'max_steps' expects int or null, got 3.5"),
        ("enable_thinking=1", TypeError, "'enable_thinking' expects bool"),
        (
            "adam_fused=sometimes",
            ValueError,
            r"adam_fused='sometimes' is not supported; choose one of \('auto', bool\)",
        ),
        ("channel=text", ValueError, "channel='text' is not supported; choose one of"),
        ("engine=sglang", ValueError, "engine='sglang' is not supported"),
    ):
        with pytest.raises(error, match=message):
            load_config("tiny", [item])


def test_a_saved_config_round_trips(tmp_path):
    cfg = load_config("toy", ["lr=3e-5", "seed=44"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config.as_dict(cfg), sort_keys=False))
    assert load_config(str(tmp_path / "config.yaml")) == dataclasses.replace(cfg, config_name="config")
    assert config.config_from_values(config.as_dict(cfg)) == cfg


def test_a_config_saved_with_the_retired_keys_still_loads(tmp_path):
    """lr_schedule and optimizer had one value each (constant, adamw) and are no longer keys; a
    config.yaml saved while they were loads as before, as values or as a file (eval reads a
    checkpoint's), and one that sets another value is refused."""
    cfg = load_config("toy")
    saved = {**config.as_dict(cfg), "lr_schedule": "constant", "optimizer": "adamw"}
    assert config.config_from_values(saved) == cfg
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(saved))
    assert load_config(str(path)) == dataclasses.replace(cfg, config_name="config")
    for key, value in (("lr_schedule", "cosine"), ("optimizer", "sgd")):
        with pytest.raises(ValueError, match=rf"sets {key}='{value}'; {key} was retired with its only value"):
            config.config_from_values({**saved, key: value})
    assert not set(config.RETIRED_KEYS) & set(config.FIELDS)
    with pytest.raises(KeyError, match="unknown config key 'lr_schedule'"):
        load_config("tiny", ["lr_schedule=constant"])  # not a key to set


def test_validation_reads_and_never_changes():
    cfg = load_config("credo")
    before = config.as_dict(cfg)
    config.validate_config(cfg)
    assert config.as_dict(cfg) == before
    with pytest.raises(ValueError, match="needs the verbalized channel"):
        config.validate_config(dataclasses.replace(cfg, method="rlcr"))
    assert isinstance(cfg, Config)


def test_overrides_are_parsed_as_yaml():
    cfg = load_config("tiny", ["lr=3e-5", "max_steps=7", "resume=null", "engine=hf"])
    assert (cfg.lr, cfg.max_steps, cfg.resume, cfg.engine) == (3e-5, 7, None, "hf")
    assert load_config("tiny", ["kappa=1"]).kappa == 1.0 and isinstance(load_config("tiny", ["kappa=1"]).kappa, float)
    with pytest.raises(TypeError, match="'group_size' expects int"):
        load_config("tiny", ["group_size=0.5"])
    with pytest.raises(TypeError, match="'lr' expects float"):
        load_config("tiny", ["lr=fast"])


def test_unknown_key_names_the_nearest_valid_keys():
    with pytest.raises(KeyError, match=r"unknown config key 'gama'.*did you mean gamma"):
        load_config("tiny", ["gama=0.3"])


def test_unknown_key_in_a_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("inherit: tiny\nkapa: 0.5\n")
    with pytest.raises(KeyError, match=r"'kapa' in .*mine.yaml.*kappa"):
        load_config(str(path))


def test_unsupported_values_are_refused():
    with pytest.raises(ValueError, match="kl_coef=-0.1 must be >= 0"):
        load_config("tiny", ["kl_coef=-0.1"])
    with pytest.raises(ValueError, match=r"loss_terms='pg,kll': unknown \['kll'\]; choose from \('pg', 'cal', 'kl'"):
        load_config("tiny", ["loss_terms=pg,kll"])
    with pytest.raises(ValueError, match="loss_terms='pg,cal,pg': a term listed twice"):
        load_config("tiny", ["loss_terms=pg,cal,pg"])
    assert load_config("tiny", ["kl_coef=0.1"]).kl_coef == 0.1  # a KL term to the frozen starting model
    with pytest.raises(ValueError, match="not a multiple of group_size"):
        load_config("tiny", ["grad_accum=3", "per_device_batch_size=1"])
    with pytest.raises(FileNotFoundError, match="no config named 'nope'"):
        load_config("nope")


def test_micro_batch_budget():
    cfg = load_config("math")
    assert cfg.micro_batch_tokens == 2 * (1024 + 8192 + 2)  # tab:hyper's 2 rollouts of full length
    assert load_config("math", ["micro_batch_tokens=20000"]).micro_batch_tokens == 20000
    with pytest.raises(ValueError, match=r"micro_batch_tokens=9000 must be auto or an integer of at least .* = 9218"):
        load_config("math", ["micro_batch_tokens=9000"])


# --- the choices the paper leaves open (docs/choices.md) -------------------------------------------

OPEN_CHOICES = {  # key: (default, every choice); each field's help and docs/choices.md's row give the reasons
    "max_grad_norm": 1.0,
    "adv_std": ("sample", ("sample", "population", "none")),
    "adv_eps": 0.0,
    "adv_min_std": 1e-6,
    "truncated_completions": ("train", ("train", "mask")),
    "dcpo_conf_reward": ("absolute", ("absolute", "squared")),
    "missing_confidence": ("worst", ("worst", "gate", "minus_one")),
    "conf_tag": ("first", ("first", "last")),
    "conf_number": ("decimal", ("decimal", "float")),
    "conf_out_of_range": ("reject", ("reject", "clip", "keep")),
    "warmup_shape": ("linear", ("linear", "linear_from_zero")),
}


def choices_table() -> tuple[str, dict[str, str]]:
    """docs/choices.md's table: its header, and each row by the key it names, `(`key`...)`."""
    lines = (config.ROOT / "docs" / "choices.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| choice (key)"))
    rows = {m.group(1): line for line in lines if (m := re.match(r"\| [^|]*\(`(\w+)`", line))}
    return header, rows


def test_the_open_choices_defaults_and_their_named_readings():
    cfg = Config()
    header, rows = choices_table()
    for who in ("the paper", "RLCR's code", "DCPO's code", "TRL", "verl"):  # a column each
        assert f"| {who} |" in header, who
    for key, spec in OPEN_CHOICES.items():
        default, choices = spec if isinstance(spec, tuple) else (spec, None)
        assert getattr(cfg, key) == default, key
        assert key in rows, key  # the paper's and each code's reading: docs/choices.md's row
        if choices:  # each choice is named in the help line and in the row
            assert config.hints()[key].__args__ == choices, key
            assert all(choice in config.FIELDS[key].metadata["help"] for choice in choices), key
            assert all(choice in rows[key] for choice in choices), key


def test_the_toy_keeps_the_readings_it_was_tuned_with():
    toy = load_config("toy")
    assert (toy.max_grad_norm, toy.adv_std) == (None, "population")  # its readings before these were keys
    assert all(
        getattr(toy, key) == getattr(Config(), key) for key in OPEN_CHOICES if key not in ("max_grad_norm", "adv_std")
    )


def test_each_baseline_s_code_readings_load():
    rlcr = load_config(
        "rlcr",
        ["adv_std=none", "truncated_completions=mask", "missing_confidence=gate"]
        + ["conf_tag=last", "conf_number=float", "max_grad_norm=1.0"],
    )
    assert (rlcr.adv_std, rlcr.missing_confidence, rlcr.conf_tag, rlcr.conf_number) == ("none", "gate", "last", "float")
    dcpo = load_config(
        "dcpo", ["adv_eps=1e-6", "dcpo_conf_reward=squared", "missing_confidence=minus_one", "conf_out_of_range=keep"]
    )
    assert (dcpo.dcpo_conf_reward, dcpo.missing_confidence, dcpo.conf_out_of_range) == ("squared", "minus_one", "keep")
    assert confidence.plan(rlcr).numeral == ro.NumeralRule("last", "float", "reject")


@pytest.mark.parametrize(
    "name,overrides,message",
    [
        ("tiny", ["max_grad_norm=0"], "max_grad_norm=0.0 must be positive, or null for no clipping"),
        ("tiny", ["adv_eps=-1e-4"], "adv_eps=-0.0001 must be >= 0"),
        ("tiny", ["adv_min_std=-1"], "adv_min_std=-1.0 must be >= 0"),
        ("tiny", ["adv_eps=0", "adv_min_std=0"], "divides a group of equal rewards by a std of 0"),
        ("tiny", ["group_size=1", "per_device_batch_size=1", "grad_accum=1"], "adv_std=sample divides by G - 1"),
        ("tiny", ["adv_std=none", "adv_eps=1e-4"], "adv_eps=0.0001 is added to the std that adv_std divides by"),
        ("tiny", ["adv_std=median"], "adv_std='median' is not supported"),
        ("tiny", ["advantage=ppo"], "advantage='ppo' is not supported; choose one of ('grpo', 'rloo', 'dr_grpo'"),
        ("tiny", ["loss_agg=sum"], "loss_agg='sum' is not supported; choose one of ('token_mean', 'token_sum_norm'"),
        (
            "tiny",
            ["group_size=1", "per_device_batch_size=1", "grad_accum=1", "adv_std=population", "advantage=rloo"],
            "advantage=rloo's baseline is the mean of the group's other rollouts: group_size=1 has none",
        ),
        ("rlcr", ["dcpo_conf_reward=squared"], "dcpo_conf_reward=squared is DCPO's reward; method=rlcr"),
        ("credo", ["missing_confidence=minus_one"], "method=credo's rewards read no report"),
        ("dcpo", ["missing_confidence=gate"], "missing_confidence=gate is RLCR's code's format gate"),
        ("credo", ["conf_tag=last", "conf_number=float"], "conf_tag=last, conf_number=float reads a verbalized"),
        ("tiny", ["truncated_completions=drop"], "truncated_completions='drop' is not supported"),
        ("tiny", ["warmup_shape=cosine"], "warmup_shape='cosine' is not supported"),
    ],
)
def test_an_open_choice_that_means_nothing_is_refused(name, overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_config(name, overrides)


def test_group_size_one_loads_with_the_population_std():
    cfg = load_config("tiny", ["group_size=1", "per_device_batch_size=1", "grad_accum=1", "adv_std=population"])
    assert cfg.group_size == 1


# --- every config resolves, and method and channel agree ----------------------------------------


def test_every_config_resolves():
    names = config.config_names()
    assert {
        "math",
        "tiny",
        "grpo",
        "rlcr",
        "dcpo",
        "credo_alpha0",
        "credo_noanalysis",
        "credo_noconfadv",
        "credo_kappa0",
        "credo_gated",
        "credo_noformat",
        "rlcr_sw",
        "dcpo_sw",
    } <= set(names)
    for name in names:
        load_config(name)
        if name not in ("math", "code"):  # a domain file fixes its own domain
            for domain, kappa in (("math", 0.25), ("code", 0.5)):
                cfg = load_config(name, [f"domain={domain}"])
                assert cfg.domain == domain and cfg.run_name == f"{name}-{domain}-s43"
                if name in ("credo", "rlcr_sw", "dcpo_swd"):  # by_domain kappa: CREDO's value of tab:hyper
                    assert cfg.kappa == kappa
    code = load_config("code")
    assert (code.max_prompt_tokens, code.max_completion_tokens, code.kappa) == (2048, 6144, 0.5)
    assert load_config("grpo").train_data == load_config("math").train_data  # by_domain, filled from the domain file
    with pytest.raises(ValueError, match="fixes the math values"):
        load_config("math", ["domain=code"])
    with pytest.raises(TypeError, match="kappa"):
        load_config("credo", ["kappa=high"])


def test_method_and_channel_must_agree():
    with pytest.raises(ValueError, match="method=rlcr needs the verbalized channel"):
        load_config("rlcr", ["channel=readout"])
    with pytest.raises(ValueError, match="alpha > 0 needs a differentiable confidence"):
        load_config("rlcr", ["alpha=0.03"])
    with pytest.raises(ValueError, match="only the auxiliary-head arm"):
        load_config("grpo", ["channel=readout"])
    with pytest.raises(ValueError, match="needs a confidence with logits"):
        load_config("credo", ["channel=verbalized"])
    with pytest.raises(ValueError, match="set alpha=0"):
        load_config("credo_sampled", ["alpha=0.03"])
    with pytest.raises(ValueError, match="needs a baseline method on a readout channel"):
        load_config("credo", ["conf_train=head"])
    with pytest.raises(ValueError, match="needs the verbalized channel"):
        load_config("credo", ["confidence=digit_exp"])
    assert load_config("rlcr_swd").confidence == "digit_exp"  # weights from eq:digitexp, rewards from q


# --- the confidence plan of every config, written out from ConfidencePlan's fields ------------

# CREDO on a readout channel: c is the readout of the training forward; it drives the rewards
# and eq:sw's weights and is regressed (eq:calloss); rollouts stop at <confidence>.
READOUT = ConfidencePlan(
    read=READS["readout"],
    prompt="readout",
    segments="readout",
    numeral=ro.NumeralRule(),
    model_read=READS["readout"],
    report_read=None,
    rewards_read="model",
    weights_read="model",
    record="model",
    detach_readout=False,
    stops_at_slot=True,
    cuts_at_slot=False,
    samples_slot_token=False,
)
# The verbalized baselines: the rewards and the weights read the parsed numeral, which is also
# what a step records; the numeral is sampled as text, so nothing stops at the slot.
NUMERAL = ConfidencePlan(
    read=READS["numeral"],
    prompt="verbalized",
    segments="verbalized",
    numeral=ro.NumeralRule(),
    model_read=None,
    report_read=READS["numeral"],
    rewards_read="report",
    weights_read="report",
    record="report",
    detach_readout=False,
    stops_at_slot=False,
    cuts_at_slot=False,
    samples_slot_token=False,
)
# tab:sw_baseline: rewards still from the numeral, eq:sw's weights from a no-grad eq:digitexp pass.
NUMERAL_SWD = dataclasses.replace(NUMERAL, read=READS["digit_exp"], weights_read="pass")
EXPECTED_PLANS = {
    **dict.fromkeys(
        (
            "code",
            "credo",
            "credo_alpha0",
            "credo_gated",
            "credo_kappa0",
            "credo_noconfadv",
            "credo_noformat",
            "math",
            "tiny",
            "toy",
        ),
        READOUT,
    ),
    "credo_noanalysis": dataclasses.replace(READOUT, prompt="readout_noanalysis", segments="readout_noanalysis"),
    # the digit-expectation emission: verbalized prompt, stopped at the slot and parsed like
    # the readout channel, "0." teacher-forced so that eq:digitexp comes from the training forward
    "credo_digitexp": dataclasses.replace(
        READOUT, read=READS["digit_exp"], prompt="verbalized", model_read=READS["digit_exp"]
    ),
    # readout + reward only: the slot token is sampled (stop after </confidence>) and rewarded;
    # eq:sw's weights and the record still read the model's readout
    "credo_sampled": dataclasses.replace(
        READOUT,
        report_read=confidence.SAMPLED_SLOT_TOKEN,
        rewards_read="report",
        stops_at_slot=False,
        samples_slot_token=True,
    ),
    # GRPO + auxiliary head (tab:decompose): the head's BCE on the detached hidden state
    "grpo_head": dataclasses.replace(READOUT, detach_readout=True),
    **dict.fromkeys(("grpo", "rlcr", "rlcr_sw", "dcpo", "dcpo_sw"), NUMERAL),
    **dict.fromkeys(("rlcr_swd", "dcpo_swd"), NUMERAL_SWD),
}


def test_confidence_plan_of_every_config():
    """The paper's configs have the plans written out above; a config added later (a fork's) is
    picked up here without an entry: it must load, validate and have a plan."""
    assert set(EXPECTED_PLANS) <= set(config.config_names())
    for name in config.config_names():
        cfg = load_config(name)
        plan = confidence.plan(cfg)
        numeral = ro.NumeralRule(cfg.conf_tag, cfg.conf_number, cfg.conf_out_of_range)
        assert plan.numeral == numeral, name  # the config's own parse of a report
        plan = dataclasses.replace(plan, numeral=ro.NumeralRule())
        assert plan == EXPECTED_PLANS.get(name, plan), name
    reads_model = {name for name, plan in EXPECTED_PLANS.items() if "model" in plan.model_reads}
    assert reads_model == set(EXPECTED_PLANS) - {"grpo", "rlcr", "rlcr_sw", "dcpo", "dcpo_sw", "rlcr_swd", "dcpo_swd"}


def test_confidence_plan_with_thinking_on_cuts_instead_of_stopping():
    """With thinking on, a rollout that ends at the slot is cut there after generation (the trace
    may mention <confidence>); the sampled slot token and the numeral are unaffected."""

    def plan(name):
        return confidence.plan(load_config(name, ["enable_thinking=true"]))

    assert (plan("credo").stops_at_slot, plan("credo").cuts_at_slot) == (True, True)
    assert (plan("credo_digitexp").segments, plan("credo_digitexp").cuts_at_slot) == ("readout", True)
    assert plan("credo_sampled").cuts_at_slot is False and plan("rlcr") == EXPECTED_PLANS["rlcr"]
    assert plan("credo_digitexp").forced == ("0", ".") and plan("credo").forced == ()
