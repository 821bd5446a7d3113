"""schema.py: the Config dataclass refuses a value of the wrong type however it is built, and
its docstring examples hold."""

import dataclasses
import doctest

import pytest

import schema
from schema import Config


def test_docstring_examples_hold():
    result = doctest.testmod(schema, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 2 and result.failed == 0


@pytest.mark.parametrize(
    "change",
    [
        {"pack_sequences": "false"},
        {"group_size": 8.0},
        {"group_size": True},
        {"enable_thinking": 1},
        {"channel": "text"},
        {"lr": "3e-5"},
        {"max_steps": "10"},
        {"kappa": "by_domain_"},
        {"report_to": 3},
    ],
)
def test_a_value_of_the_wrong_type_is_refused(change):
    ((key, value),) = change.items()
    with pytest.raises(TypeError, match=f"config key '{key}' is {value!r}, not of its declared type"):
        dataclasses.replace(Config(), **change)


def test_the_defaults_and_the_values_of_each_type_are_accepted():
    cfg = dataclasses.replace(
        Config(),
        kappa=0,
        lr=1,
        max_steps=None,
        max_grad_norm=1.0,
        adam_fused=True,
        report_to=["jsonl", "wandb"],
        run_name="x",
        pack_sequences=False,
    )
    assert (cfg.kappa, cfg.lr, cfg.adam_fused, cfg.pack_sequences) == (0, 1, True, False)
    assert Config().kappa == schema.BY_DOMAIN  # filled by config.load_config from the domain file
