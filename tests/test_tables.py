"""tables.py: the paper's tables as runnable commands."""

import doctest

import pytest

import config
from config import load_config
from evaluation import tables


def test_every_table_row_is_a_runnable_config():
    for key in tables.load_tables():
        runs = tables.table_runs(key)
        trained = [r for r in runs if r["train"]]
        commands_of = {}
        for r in trained:
            words = r["train"].split()
            assert words[:2] == ["bash", "run.sh"]
            cfg = load_config(words[2], words[3:])  # the printed command resolves ...
            assert str(config.run_dir_of(cfg)) == r["eval"]  # ... to the run directory eval.py reads
            commands_of.setdefault(r["eval"], set()).add(r["train"])
        assert all(len(c) == 1 for c in commands_of.values())  # one run directory, one training
        text = tables.table_commands(key)
        assert all(r["train"] in text for r in trained) and text.count(".venv/bin/python eval.py") >= 1
    sens = {(r["label"], r["domain"]): r["eval"] for r in tables.table_runs("sens")}
    # tab:hyper's own values are the CREDO runs themselves (kappa 0.25 math, 0.5 code), not new trainings
    assert sens[("kappa = 0.25", "math")] == sens[("alpha = 0.03", "math")] == "runs/credo-math-s43"
    assert sens[("kappa = 0.5", "code")] == "runs/credo-code-s43" != sens[("kappa = 0.5", "math")]
    main = tables.table_runs("main")
    assert {r["seed"] for r in main if r["train"]} == {43, 44, 45} and any(r["eval"] == "Qwen/Qwen3-8B" for r in main)
    listing = tables.list_configs()
    for name in config.config_names():
        assert f"\n{name} " in "\n" + listing
    with pytest.raises(KeyError, match="known: tab:main"):
        tables.table_commands("tab:nope")


def test_the_listing_gives_each_config_s_first_sentence_whole():
    assert doctest.testmod(tables).failed == 0
    entries: dict[str, list[str]] = {}  # config -> the lines of its description
    for line in tables.list_configs().split("\n\ntables")[0].splitlines():
        if not line.startswith(" "):
            name, _, text = line.partition(" ")
            entries[name] = [text.strip()]
        elif not line.strip().startswith("->"):
            entries[name].append(line.strip())
    assert sorted(entries) == config.config_names()
    for name, lines in entries.items():
        text = " ".join(lines)
        assert text.endswith("."), (name, text)  # never cut mid-sentence
    # not cut at the period of an abbreviation ("row 'Digit-exp." must not be the whole line)
    assert " ".join(entries["credo_digitexp"]).endswith("instead of the {H, L} readout.")
