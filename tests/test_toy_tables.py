"""toy_tables.py: the rows, bad input, the 95% intervals and the tables made from finished jobs,
resuming an interrupted run, and (slow) one real job end to end. The whole tables run (about an
hour on 2 cores) is not part of the suite: `CREDO_TOY_TABLES=<out>` checks the toy's claims on
the tables.json of a finished run of the shipped world (docs/journal/toy-protocol-v13.md)."""

import json
import os
import re
from pathlib import Path

import pytest

import config
from worlds import toy, toy_build, toy_claims, toy_tables


def test_every_row_is_a_valid_configuration():
    for name, row in toy_tables.ROWS.items():
        cfg = config.load_config("configs/toy.yaml", row.overrides)
        assert row.table in ("main", "ablation") and row.channel == (
            "readout" if cfg.channel.startswith("readout") else "verbalized"
        ), name
    assert [name for name, row in toy_tables.ROWS.items() if row.table == "main"] == ["grpo", "rlcr", "dcpo", "credo"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--rows", "credo,ppo"], "unknown ppo"),
        (["--rows", ","], "(none given)"),
        (["--seeds", "0"], "a count of training seeds"),
        (["--seeds", "two"], "a count of training seeds"),
        (["--seed-list", "44,44"], "distinct"),
        (["--seed-list", "44,x"], "distinct"),
        (["--jobs", "0"], "each at least 1"),
        (["--eval-n", "0"], "each at least 1"),
        (["--world", "/nonexistent"], "no SHA256SUMS there"),
        (["--split", "train"], "one of test, dev, extra"),
        (["--checkpoints-from", "/nonexistent"], "no plan.json there"),
    ],
)
def test_bad_input_is_one_line(tmp_path, argv, says):
    with pytest.raises(SystemExit) as stop:
        toy_tables.main([*argv, "--out", str(tmp_path)])
    assert says in str(stop.value) and str(stop.value).startswith("toy_tables: ") and "\n" not in str(stop.value)


def test_seeds_are_a_count_or_a_list():
    assert toy_tables.parse_seeds("3", None) == [44, 45, 46]
    assert toy_tables.parse_seeds("3", "47,50") == [47, 50] and toy_tables.parse_seeds("3", "44") == [44]


def test_the_default_rows_are_tab_main_and_all_adds_the_ablation():
    assert toy_tables.MAIN_ROWS == ("grpo", "rlcr", "dcpo", "credo")
    assert toy_tables.parse_rows(",".join(toy_tables.MAIN_ROWS)) == ["grpo", "rlcr", "dcpo", "credo"]
    assert toy_tables.parse_rows(" all ") == list(toy_tables.ROWS) and len(toy_tables.ROWS) == 8
    with pytest.raises(ValueError, match="--rows 'al': unknown al"):
        toy_tables.parse_rows("al")


def test_credo_alone_makes_no_ablation_table():
    credo = {"seeds": [44], **{key: (0.5, None) for key, _ in toy_tables.COLUMNS}}
    text = toy_tables.markdown_tables({"credo": credo}, "h")
    assert "tab:main in miniature" in text and "tab:ablation" not in text
    assert "tab:ablation" in toy_tables.markdown_tables({"credo": credo, "credo_kappa0": credo}, "h")


def fake_result(row, seed, acc, auroc=0.5, ece=0.1, levels=3.0):
    metrics = {"acc": acc, "ece": ece, "auroc": auroc, "brier": 0.2, "effective_levels": levels, "auroc_ceiling": 0.8}
    return {"row": row, "seed": seed, "channel": "readout", "metrics": metrics}


def test_tables_are_laid_out_as_the_paper_with_intervals_and_claims():
    results = [
        fake_result("base", 44, 0.40),
        fake_result("base", 45, 0.50),
        fake_result("credo", 44, 0.55, 0.82, 0.05, 500.0),
        fake_result("credo", 45, 0.65, 0.86, 0.07, 600.0),
        fake_result("credo_kappa0", 44, 0.5, auroc=None),
    ]
    rows = toy_tables.aggregate(results)
    assert rows["credo"]["acc"] == pytest.approx((0.6, 12.706 * 0.0707106781 / 2**0.5))
    assert rows["credo_kappa0"]["auroc"] is None and rows["credo_kappa0"]["acc"] == (0.5, None)
    text = toy_tables.markdown_tables(rows, "header")
    main, ablation = text.split("tab:ablation")
    assert (
        "| Base (warm start) | .450 ± .635 |" in main and "| CREDO | .600 ± .635 | .060 ± .127 | .840 ± .254 |" in main
    )
    assert "GRPO" not in main  # rows that were not run are left out
    assert "| w/o discrepancy weighting (kappa=0) | .500 | .100 | - | .200 | 3.0 | .800 | 44 |" in ablation
    assert "- holds: CREDO's readout AUROC >= 0.8 (mean 0.840)" in text
    assert "- holds: CREDO's accuracy no lower" in text and "RLCR" not in text


def test_the_ceiling_is_added_to_a_job_finished_before_its_column(tmp_path):
    """A result.json without `auroc_ceiling` (a run of an older worlds/toy_tables.py) gets it from its own
    samples; a job whose samples are gone says so instead of a guessed value."""
    world = tmp_path / "world"
    world.mkdir()
    (world / "test.jsonl").write_text(
        "".join(json.dumps({"id": p, "level": lv}) + "\n" for p, lv in [("x", 1), ("y", 2)])
    )
    result = fake_result("credo", 44, 0.5)
    del result["metrics"]["auroc_ceiling"]
    where = toy_tables.job_dir(tmp_path / "out", "credo", 44)
    (where / "eval").mkdir(parents=True)
    (where / "result.json").write_text(json.dumps(result))
    samples = [
        ("x", 1, "1 + 2 = 3"),
        ("x", 0, "1 + 2 = 4"),
        ("y", 1, "1 + 2 = 3, 3 + 4 = 7"),
        ("y", 0, "1 + 2 + 4 = 8"),
    ]
    (where / "eval" / "samples.jsonl").write_text(
        "".join(
            json.dumps({"problem_id": p, "a": a, "c": 0.5, "source": "readout", "text": f"{t}. The answer is"}) + "\n"
            for p, a, t in samples
        )
    )
    added = toy_tables.with_ceiling(tmp_path / "out", world, result)
    assert added["metrics"]["auroc_ceiling"] == 0.875  # cells 0.5, 0.5 / 1.0 / 0.0: 3.5 of 4 pairs
    assert json.loads((where / "result.json").read_text()) == added  # written back, the rest unchanged
    (where / "eval" / "samples.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="samples of a finished job are gone"):
        toy_tables.with_ceiling(tmp_path / "out", world, result)


def test_an_interrupted_run_redoes_only_the_unfinished_jobs(tmp_path):
    out = tmp_path / "tables"
    done = toy_tables.job_dir(out, "credo", 44)
    done.mkdir(parents=True)
    (done / "result.json").write_text(json.dumps(fake_result("credo", 44, 0.6)))
    half = toy_tables.job_dir(out, "credo", 45)
    half.mkdir(parents=True)
    (half / "train.log").write_text("killed")  # started, never finished
    results, todo = toy_tables.split_done(out, [("credo", 44), ("credo", 45)])
    assert [r["seed"] for r in results] == [44] and todo == [("credo", 45)]


def test_a_resumed_run_with_another_configuration_says_so(tmp_path):
    toy_tables.check_plan(tmp_path, {"world": "a", "overrides": []})
    toy_tables.check_plan(tmp_path, {"world": "a", "overrides": []})  # the same: fine
    with pytest.raises(ValueError, match="another configuration"):
        toy_tables.check_plan(tmp_path, {"world": "a", "overrides": ["lr=1e-4"]})
    assert json.loads((tmp_path / "plan.json").read_text())["overrides"] == []  # nothing lost


def test_the_tables_name_the_split_they_were_measured_on():
    credo = {"seeds": [101], **{key: (0.5, None) for key, _ in toy_tables.COLUMNS}}
    assert "development split (the first 250 training problems)" in toy_tables.markdown_tables(
        {"credo": credo}, "h", "dev"
    )
    assert "held-out split" in toy_tables.markdown_tables({"credo": credo}, "h")


def test_the_toy_refuses_exactly_the_options_that_belong_to_the_tables(capsys):
    """worlds/toy.py's TABLES_ONLY: the options worlds/toy_tables.py has and worlds/toy.py has not."""

    def options(main) -> set[str]:
        with pytest.raises(SystemExit):
            main(["--help"])
        return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", capsys.readouterr().out))

    assert set(toy.TABLES_ONLY) == options(toy_tables.main) - options(toy.main)


def test_the_documented_ranges_are_the_prediction_ranges_of_the_methods_rows_for_a_default_runs_figures():
    """t(2) at 0.9975 = 14.089 (ten figures, Bonferroni), times std * sqrt(1 + 1/3); cut to the
    metric's scale."""
    results = [
        fake_result("credo", 44 + i, acc, ece=ece, levels=levels)
        for i, (acc, ece, levels) in enumerate(((0.70, 0.02, 2.0), (0.71, 0.03, 3.0), (0.72, 0.04, 4.0)))
    ]
    results += [fake_result("credo_alpha0", 44, 0.5), fake_result("rlcr", 44, 0.5)]  # not a method; one seed
    ranges = toy_tables.documented_ranges(results)
    assert toy.FIGURES == 10 and list(ranges) == ["CREDO"]
    assert list(ranges["CREDO"]) == [key for key, _ in toy.COMPARED]
    acc = ranges["CREDO"]["acc"]
    assert (acc["min"], acc["max"]) == (0.70, 0.72) and acc["mean"] == pytest.approx(0.71)
    half = 14.089 * 0.01 * (4 / 3) ** 0.5  # 0.16269
    assert (acc["low"], acc["high"]) == pytest.approx((0.71 - half, 0.71 + half), rel=1e-9)
    assert ranges["CREDO"]["ece"]["low"] == 0.0 and ranges["CREDO"]["ece"]["high"] == pytest.approx(0.03 + half)
    assert ranges["CREDO"]["effective_levels"]["low"] == 1.0  # 3 - 16.3: at least one level
    assert ranges["CREDO"]["brier"]["low"] == pytest.approx(0.2) == ranges["CREDO"]["brier"]["high"]  # no spread


def _saved_run(folder, jobs, **plan):
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps({"world": "w", "overrides": [], "eval_n": 4, **plan}))
    (folder / "tables.json").write_text(json.dumps({"header": "h", "jobs": jobs, "rows": {}}))
    return folder


def test_documented_ranges_come_only_from_runs_of_this_world_and_the_toys_configuration(tmp_path):
    first = _saved_run(tmp_path / "a", [fake_result("credo", 44, 0.7), fake_result("credo", 45, 0.72)])
    second = _saved_run(tmp_path / "b", [fake_result("credo", 62, 0.71)])
    assert [job["seed"] for job in toy_tables.saved_jobs([first, second], "w")] == [44, 45, 62]
    with pytest.raises(ValueError, match="a run of world w, not of this one"):
        toy_tables.saved_jobs([first], "j")
    for name, plan in (("c", {"overrides": ["alpha=0"]}), ("d", {"split": "dev"}), ("e", {"checkpoints_from": "x"})):
        with pytest.raises(ValueError, match="not the toy's configuration on the held-out split"):
            toy_tables.saved_jobs([_saved_run(tmp_path / name, [], **plan)], "w")
    with pytest.raises(ValueError, match="different samples per problem"):
        toy_tables.saved_jobs([first, _saved_run(tmp_path / "f", [], eval_n=8)], "w")
    with pytest.raises(ValueError, match=r"credo/s44, credo/s45 in two runs"):
        toy_tables.saved_jobs([first, first], "w")
    with pytest.raises(ValueError, match="no plan.json there"):
        toy_tables.saved_jobs([tmp_path], "w")


def test_checkpoints_are_taken_only_from_a_run_of_the_same_world_and_overrides(tmp_path):
    plan = {"world": "k", "overrides": [], "eval_n": 4}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    toy_tables.check_source(tmp_path, {**plan, "split": "extra"})  # the split and eval_n may differ
    for key, value in (("world", "j"), ("overrides", ["alpha=3"])):
        with pytest.raises(ValueError, match=f"its {key} is"):
            toy_tables.check_source(tmp_path, {**plan, key: value})
    with pytest.raises(FileNotFoundError, match="no finished job"):
        toy_tables.trained_checkpoint(tmp_path, "credo", 47)


# One real job of each kind (the warm start's Base rows and a CREDO training of 2 steps), each
# evaluated on the held-out split with one sample per problem, then the same command again:
# every job is found finished, nothing is trained, the tables come out the same. Then the CREDO
# job again as --checkpoints-from runs it: its checkpoint evaluated on the development split.
@pytest.mark.slow
def test_a_small_tables_run_end_to_end_and_resumed(warm_stages, tmp_path, toy_world, capsys):
    argv = [
        "--rows",
        "credo",
        "--seed-list",
        "44",
        "--eval-n",
        "1",
        "--out",
        str(tmp_path),
        "max_steps=2",
        "save_every=2",
    ]
    rows = toy_tables.main(argv)
    assert set(rows) == {"base", "base_readout", "credo"} and rows["credo"]["seeds"] == [44]
    for row in rows.values():
        assert 0 <= row["acc"][0] <= 1 and row["acc"][1] is None
    first = json.loads((tmp_path / "tables.json").read_text())
    assert [j["metrics"]["n_samples"] for j in first["jobs"]] == [250, 250, 250]
    assert {j["row"]: j["channel"] for j in first["jobs"]} == {
        "base": "verbalized",
        "base_readout": "readout",
        "credo": "readout",
    }
    assert (tmp_path / "tables.png").exists() and "tab:main in miniature" in (tmp_path / "tables.md").read_text()
    capsys.readouterr()
    assert toy_tables.main(argv) == rows
    assert "resuming: 3 of 3 jobs already finished" in capsys.readouterr().out
    # the same checkpoint evaluated on the development split, nothing trained again
    dev = toy_tables.run_job(
        tmp_path / "dev", toy_world, "credo", 44, [], 1, toy_build.split_file(toy_world, "dev"), source=tmp_path
    )
    assert dev["train_s"] < 1 and dev["metrics"]["n_samples"] == toy_build.DEV_SIZE
    assert not (tmp_path / "dev" / "credo" / "s44" / "run").exists()
    (evaluated,) = json.loads((tmp_path / "dev" / "credo" / "s44" / "eval_plan.json").read_text())
    assert evaluated["path"] == str(toy_tables.trained_checkpoint(tmp_path, "credo", 44))
    assert evaluated["path"].startswith(str(tmp_path / "credo" / "s44" / "run"))


@pytest.mark.slow
@pytest.mark.skipif(
    "CREDO_TOY_TABLES" not in os.environ,
    reason="set CREDO_TOY_TABLES=<out of a finished `bash run.sh toy --tables --rows all`> to check its claims",
)
def test_the_claims_hold_on_a_finished_tables_run(toy_world):
    """On a tables run of the shipped world (`--rows all`: the alpha=0 row's claims need its row): every claim
    holds, as docs/journal/toy-protocol-v13.md predicts. They all hold on the committed final
    (CREDO_TOY_TABLES=docs/results/toy-final, alpha 0.1). With alpha 0.3
    (CREDO_TOY_TABLES=docs/journal/toy-v13-alpha03-final) they fail on one: CREDO's accuracy 0.0030 below
    GRPO's, against one joint standard error of 0.0026 (docs/toy.md, "What it shows")."""
    out = Path(os.environ["CREDO_TOY_TABLES"])
    plan = json.loads((out / "plan.json").read_text())
    assert plan["world"] == toy.model_digest(toy_world), "the tables are of another world than the shipped one"
    saved = json.loads((out / "tables.json").read_text())
    rows = {
        row: {k: tuple(v) if isinstance(v, list) and k != "seeds" else v for k, v in values.items()}
        for row, values in saved["rows"].items()
    }
    found = toy_claims.claims(rows)
    assert len(found) >= 10, found
    failing = [claim for claim, holds in found if not holds]
    assert failing == [], failing


def test_committed_tables_name_no_path_of_the_machine(tmp_path):
    """What --document and the tables' header write names paths inside the checkout relative to it."""
    assert toy_tables.shown(toy_tables.ROOT / "runs" / "toy-final") == "runs/toy-final"
    assert toy_tables.shown(tmp_path) == str(tmp_path.resolve())


def test_paired_differences_pair_by_training_seed():
    """A - B seed by seed, over the seeds both ran: CREDO's acc differences 0.10 and 0.20 (seeds 72,
    73; seed 74 only in A) give mean 0.15, std 0.0707, t(1) = 12.706: half-width 12.706 x 0.0707 /
    sqrt(2) = 0.635."""
    metrics = {column: 0.5 for column, _ in toy_tables.COLUMNS}

    def job(row, seed, acc):
        return {"row": row, "seed": seed, "metrics": {**metrics, "acc": acc}}

    first = [job("credo", 72, 0.9), job("credo", 73, 0.8), job("credo", 74, 0.7), job("rlcr", 72, 0.6)]
    second = [job("credo", 72, 0.8), job("credo", 73, 0.6), job("grpo", 72, 0.5)]
    rows = toy_tables.paired_differences(first, second)
    assert set(rows) == {"credo"} and rows["credo"]["seeds"] == [72, 73]
    mean, half = rows["credo"]["acc"]
    assert mean == pytest.approx(0.15) and half == pytest.approx(12.706 * 0.1 / 2**0.5 / 2**0.5, abs=1e-3)
    assert rows["credo"]["ece"] == (0.0, 0.0)
    text = toy_tables.markdown_differences(rows, "runs/a", "runs/b")
    assert "| CREDO | +0.150 ± 0.635 |" in text and "runs/a - runs/b, paired by training seed" in text
