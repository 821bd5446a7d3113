"""The toy demonstration (worlds/toy.py): its world, and the integration test CI runs.

Two slow tests: the loop raises GRPO's reward on four problems whose answers the verifier
knows (30 steps), and `python -m worlds.toy --quick` (CREDO only: 40 training steps, 100 held-out
problems x 2 samples) leaves the readout's mean at the accuracy RL raised, its ECE low and its
ranking kept. Their thresholds come from two independently built worlds (docs/toy.md), since a
world built on another machine differs. With the calibration loss switched off (`alpha=0`) the
readout lags the accuracy RL adds;
`CREDO_TOY_ALPHA0=1` runs that check here as well.
"""

import collections
import doctest
import json
import math
import os
import random
import shutil

import numpy as np
import pytest

import metrics
from infra import checkpoint
from worlds import toy, toy_build, toy_tables


def test_splits_are_deterministic_disjoint_and_graded():
    a, b = toy_build.make_split(50, 0, "t", 5), toy_build.make_split(50, 0, "t", 5)
    assert a == b
    assert {r["level"] for r in a} == {1, 2, 3, 4, 5}
    for r in a:
        assert len(r["ops"]) == r["level"] + 1 and int(r["answer"]) == sum(r["ops"])
        assert r["problem"] == "What is " + " + ".join(map(str, r["ops"])) + "?"
    test = toy_build.make_split(50, 1, "u", 5)
    assert not {r["id"] for r in a} & {r["id"] for r in test}


def test_held_out_problems_are_never_training_problems():
    """Since version 12 the held-out generator skips every training problem, so the held-out and
    extra splits share no problem with training; since version 13 level 1 chains two additions (729
    problems), so no level is a handful of problems that a held-out part must be carved from."""
    world = toy_build.WORLD
    splits = toy_build.make_splits(world)
    assert splits == toy_build.make_splits(world)  # seeded
    assert [len(splits[name]) for name in toy_build.SPLITS] == [world["n_train"], world["n_test"], 250, 750]
    assert world["first_additions"] == 2 and not toy_build.held_out_pairs(world)
    training = {r["problem"] for r in splits["train"]}
    for name in ("train", "test", "extra"):
        assert all(len(r["ops"]) == r["level"] + 1 + 1 for r in splits[name])  # level L: L + 1 additions
        assert collections.Counter(r["level"] for r in splits[name]) == {
            lv: len(splits[name]) // 5 for lv in range(1, 6)
        }
    for name in ("test", "extra"):
        assert not training & {r["problem"] for r in splits[name]}
    assert splits["dev"] == splits["train"][: toy_build.DEV_SIZE]
    assert not {r["id"] for r in splits["train"]} & {r["id"] for r in splits["test"] + splits["extra"]}


def test_a_recipe_of_one_addition_at_level_1_holds_out_a_fixed_part_of_its_81_problems():
    """Version 12's split, still a recipe the code builds: `held_out_level1` of the 81 one-addition
    problems are only ever evaluated on."""
    world = {**toy_build.WORLD, "first_additions": 1, "held_out_level1": 27}
    splits = toy_build.make_splits(world)
    held = toy_build.held_out_pairs(world)
    assert len(held) == 27 and held == toy_build.held_out_pairs(world)
    for name in ("test", "extra"):
        assert all(tuple(r["ops"]) in held for r in splits[name] if r["level"] == 1)
    train_level1 = {tuple(r["ops"]) for r in splits["train"] if r["level"] == 1}
    assert not train_level1 & held and len(train_level1) == 81 - 27  # every other level-1 problem is trained on


def test_the_shipped_world_holds_the_splits_of_its_recipe(toy_world):
    built, _ = toy_build.load_world(toy_world)
    assert built == toy_build.WORLD
    for name, rows in toy_build.make_splits(built).items():
        assert [json.loads(line) for line in toy_build.split_file(toy_world, name).read_text().splitlines()] == rows
    with pytest.raises(ValueError, match="split 'unseen': one of train, test, dev, extra"):
        toy_build.split_file(toy_world, "unseen")


def _copy_world(tmp_path, toy_world):
    copy = tmp_path / "world"
    shutil.copytree(toy_world, copy)
    return copy


def test_a_changed_or_missing_world_file_is_a_one_line_error_and_nothing_is_rebuilt(tmp_path, toy_world):
    world = _copy_world(tmp_path, toy_world)
    assert toy_build.load_world(world)[1] == world
    (world / "test.jsonl").write_text((world / "test.jsonl").read_text().replace("What is 1", "What is 2", 1))
    with pytest.raises(toy_build.WorldError) as failed:
        toy_build.load_world(world)
    assert "test.jsonl: its SHA-256 is not the one in" in str(failed.value) and "\n" not in str(failed.value)
    (world / "test.jsonl").unlink()
    with pytest.raises(toy_build.WorldError, match="test.jsonl: missing from the toy world"):
        toy_build.load_world(world)
    with pytest.raises(toy_build.WorldError, match="no SHA256SUMS there"):
        toy_build.load_world(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists() and not (world / "test.jsonl").exists()  # nothing was built


def test_a_world_of_another_recipe_is_refused(tmp_path, toy_world, monkeypatch):
    world = _copy_world(tmp_path, toy_world)
    monkeypatch.setitem(toy_build.WORLD, "version", toy_build.WORLD["version"] + 1)
    with pytest.raises(toy_build.WorldError, match=r"built from recipe version \d+, but .* WORLD is version"):
        toy_build.load_world(world)


def test_a_world_is_built_only_into_a_new_or_empty_folder_and_the_rebuild_command_says_it_differs(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(toy_build.WorldError, match="not empty"):
        toy_build.build_world(tmp_path / "full")
    with pytest.raises(SystemExit) as stop:
        toy_build.main(["--rebuild", str(tmp_path / "full")])
    assert "not empty" in str(stop.value) and "\n" not in str(stop.value)
    assert "It will differ from the shipped worlds/toy_world/" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        toy_build.main(["--rebuild", str(tmp_path / "w"), "--world-seed", "-3"])
    assert "non-negative" in str(stop.value)


def test_the_report_holds_each_methods_rows_measured_as_the_tables_measure_them(tmp_path):
    """CREDO before and after: `acc` counts every sample (one that never reached the slot too), as
    worlds/toy_tables.py's rows do, and the calibration metrics only those with a confidence."""
    cases = [("x", 1, 0.9), ("x", 1, 0.8), ("y", 1, 0.6), ("y", 0, None)]
    records = [
        {"run": f"credo/{when}", "source": "readout", "problem_id": p, "a": a, "c": c}
        for when in ("before", "after")
        for p, a, c in cases
    ]
    report = toy.summarize(records, tmp_path, {"CREDO": ("credo/before", "credo/after", "readout")})
    assert list(report["CREDO"]) == ["before", "after"]
    assert report["CREDO"]["after"]["acc"] == 0.75 and report["CREDO"]["after"]["n"] == 3
    assert report["CREDO"]["after"]["parse_fail"] == 0.25
    assert report["CREDO"]["after"]["mean_conf"] == pytest.approx((0.9 + 0.8 + 0.6) / 3)
    assert "| CREDO (readout) | after | 0.750 |" in (tmp_path / "report.md").read_text()


def test_scripted_solver_is_right_on_easy_problems_and_often_wrong_on_hard_ones():
    rng = random.Random(0)
    for level in range(1, 6):
        outcomes = {"steps": [], "direct": []}
        for _ in range(3000):
            ops = toy_build.make_problem(rng, level, toy_build.WORLD["first_additions"])[0]
            assert toy_build.level_of(ops, toy_build.WORLD) == level
            text, right = toy_build.scripted_completion(ops, "readout", rng)
            outcomes[toy_build.solution_style(text)].append(right)
        for style, got in outcomes.items():
            assert len(got) == pytest.approx(1500, abs=150)  # half and half
            assert sum(got) / len(got) == pytest.approx(
                toy_build.WORLD["styles"][style]["p_correct"][str(level)], abs=0.04
            )
    p = {style: v["p_correct"] for style, v in toy_build.WORLD["styles"].items()}
    assert p["steps"]["1"] > 0.9 and p["steps"]["5"] < 0.5 and all(p["direct"][k] < p["steps"][k] for k in "2345")


def level_only_auroc(rates: dict[str, float]) -> float:
    """The AUROC of the confidence that knows only the level, on a solver right at `rates` per level
    (1,000 samples a level, exactly round(1000 p) of them right)."""
    conf, correct = [], []
    for p in rates.values():
        conf += [p] * 1000
        correct += [1] * round(1000 * p) + [0] * (1000 - round(1000 * p))
    return metrics.auroc(conf, correct)


def test_the_steps_style_rates_leave_room_for_the_auroc_claim():
    # Once RL has removed most of the direct style, what predicts correctness on the toy is the
    # level. Version 5's steps rates capped the toy's AUROC >= 0.80 claim by construction (0.794 by
    # hand: sum over level pairs i < j of p_i (1 - p_j), plus half the ties, over 3.3 x 1.7).
    version5 = {"1": 0.95, "2": 0.85, "3": 0.7, "4": 0.5, "5": 0.3}
    assert level_only_auroc(version5) == pytest.approx(0.7941, abs=1e-4)
    assert level_only_auroc(toy_build.WORLD["styles"]["steps"]["p_correct"]) >= 0.85


def test_toy_build_docstring_examples():
    assert doctest.testmod(toy_build).failed == 0


def test_scripted_completions_carry_the_rollout_formats():
    rng = random.Random(1)
    ops = [3, 5, 2, 7]  # level 2: three additions
    readout, _ = toy_build.scripted_completion(ops, "readout", rng)
    assert "\\boxed{" in readout and "<analysis> " in readout and "3 additions" in readout
    assert readout.endswith(("</analysis> <confidence>high</confidence>", "</analysis> <confidence>low</confidence>"))
    numerals = set()
    for _ in range(200):
        verbal, right = toy_build.scripted_completion(ops, "verbalized", rng)
        style = toy_build.solution_style(verbal)
        assert verbal.startswith("3 + 5 = " if style == "steps" else "3 + 5 + 2 + 7 = ")
        numeral = verbal.rsplit("<confidence>", 1)[1].removesuffix("</confidence>")
        stated = toy_build.WORLD["styles"][style]["verbal"]["2"]
        assert numeral == stated if right else numeral in (stated, "0.1")  # 0.1: a slip it noticed
        assert ("\\boxed{17}" in verbal) == right
        numerals.add(numeral)
    assert numerals == {"1.0", "0.7", "0.1"}


def test_each_numeral_is_the_stated_rate_rounded_to_a_tenth():
    """The world's verbal table is the solver's stated rate, sigmoid(logit p + 1), to one decimal:
    e.g. steps at level 4, p = 0.4: 1 / (1 + 1.5 / e) = 0.644 -> "0.6"; direct at level 1, p = 0.9:
    0.961 -> "1.0"."""
    world = toy_build.WORLD
    for style in world["styles"].values():
        for level, p in style["p_correct"].items():
            assert style["verbal"][level] == f"{toy_build.stated_rate(p, world):.1f}", (level, p)
    assert toy_build.stated_rate(0.4, world) == pytest.approx(0.6444, abs=1e-4)
    assert toy_build.stated_rate(0.4, {"overconfidence": 0.0}) == 0.4


def test_the_readout_formats_word_after_the_slot_is_high_with_the_solvers_stated_rate():
    # Version 11: the warm start says "high" past the slot, with the style's rate at the level.
    # Version 13: the rate it states is a logit too high (stated_rate), and it says "low" after
    # the slips it notices (half of them): "high" with rate q among right solutions, q / 2 among
    # wrong ones. 4,000 draws per style at level 3 (rates 0.7 and 0.3, so 1,200-2,800 of each
    # outcome): binomial standard errors of at most 0.015, so 0.05 is over three of them; the draws
    # are seeded, so the test is deterministic.
    rng = random.Random(11)
    world = toy_build.WORLD
    for style, rate in (("steps", 0.7), ("direct", 0.3)):
        assert world["styles"][style]["p_correct"]["3"] == rate
        q = toy_build.stated_rate(rate, world)
        assert q == pytest.approx(1 / (1 + (1 - rate) / rate / math.e))
        words = {True: [], False: []}
        while len(words[True]) + len(words[False]) < 4000:
            text, right = toy_build.scripted_completion([3, 5, 2, 7, 1], "readout", rng)
            if toy_build.solution_style(text) == style:
                words[right].append(text.rsplit("<confidence>", 1)[1].removesuffix("</confidence>"))
        for right, expected in ((True, q), (False, q * (1 - world["noticed"]))):
            assert set(words[right]) == {"high", "low"}
            share = words[right].count("high") / len(words[right])
            assert abs(share - expected) < 0.05, (style, right, share, expected)


def test_the_no_analysis_format_has_no_analysis_and_the_same_solution():
    problems = random.Random(5)
    for seed in range(20):
        ops = toy_build.make_problem(problems, 3, toy_build.WORLD["first_additions"])[0]
        rng_a, rng_b = random.Random(seed), random.Random(seed)
        plain, right = toy_build.scripted_completion(ops, "readout_noanalysis", rng_a)
        full, right_full = toy_build.scripted_completion(ops, "readout", rng_b)  # the same draws
        assert plain.endswith("}. <confidence>") and "<analysis>" not in plain and right == right_full
        assert full.startswith(plain[: -len("<confidence>")]) and "</analysis> <confidence>" in full


def test_the_addition_check_adds_steps_until_the_model_adds_and_fails_in_one_line(monkeypatch):
    world = {**toy_build.WORLD, "check_min_acc": {"1": 0.85, "2": 0.8}, "check_steps": 7, "check_rounds": 2}
    calls, logs = [], []
    monkeypatch.setattr(
        toy_build,
        "warm_start",
        lambda model, tok, rows, w, log, steps=None, seed=None: calls.append((steps, seed)) or [1.0] * (steps or 3),
    )
    passing, adds_badly, carries_badly = {"1": 0.9, "2": 0.82}, {"1": 0.6, "2": 0.5}, {"1": 0.95, "2": 0.79}
    for checks_made, expected_calls in (
        ([passing], [(None, None)]),
        ([carries_badly, passing], [(None, None), (7, world["seed"] + 1000)]),
    ):
        calls.clear()
        sequence = iter(checks_made)
        monkeypatch.setattr(toy_build, "addition_check", lambda *args, sequence=sequence, **kwargs: next(sequence))
        losses, checks = toy_build.checked_warm_start(None, None, [], world, logs.append)
        assert calls == expected_calls and checks == checks_made and len(losses) == 3 + 7 * (len(checks_made) - 1)
    assert (
        "0.95 at level 1 (needs 0.85), 0.79 at level 2 (needs 0.8)" in logs[-2]
        and "7 more warm-start steps" in logs[-2]
        and "passed: right 0.90 at level 1" in logs[-1]
    )
    sequence = iter([adds_badly, adds_badly, {"1": 0.84, "2": 0.9}])
    monkeypatch.setattr(toy_build, "addition_check", lambda *args, sequence=sequence, **kwargs: next(sequence))
    with pytest.raises(RuntimeError) as failed:
        toy_build.checked_warm_start(None, None, [], world, logs.append)
    assert (
        "right 0.84 at level 1 (needs 0.85)" in str(failed.value)
        and "--world-seed" in str(failed.value)
        and "\n" not in str(failed.value)
    )


def test_the_last_checkpoint_is_the_last_finished_one(tmp_path):
    """toy.py and worlds/toy_tables.py evaluate checkpoint.latest_checkpoint: never a cut-off save."""
    for name in ("step_000010", "step_000020", "step_000030.tmp"):  # the last save was cut off
        (tmp_path / "ckpt" / name).mkdir(parents=True)
    assert toy.latest_checkpoint is toy_tables.latest_checkpoint is checkpoint.latest_checkpoint
    assert checkpoint.latest_checkpoint(tmp_path) == tmp_path / "ckpt" / "step_000020"
    with pytest.raises(FileNotFoundError, match="without a finished checkpoint"):
        checkpoint.latest_checkpoint(tmp_path / "elsewhere")


def test_bad_input_is_one_line(tmp_path, capsys):
    for argv, says in (
        (["--methods", "credo,ppo"], "unknown ppo"),
        (["--world", str(tmp_path / "nowhere")], "no SHA256SUMS there"),
        (["--jobs", "0"], "--jobs 0"),
    ):
        with pytest.raises(SystemExit) as stop:
            toy.main([*argv, "--out", str(tmp_path)])
        assert says in str(stop.value) and "\n" not in str(stop.value)


def test_an_option_of_the_tables_says_it_belongs_to_them(tmp_path):
    for argv in (["--rows", "credo"], ["--rows=credo"], ["--seeds", "2"], ["--split", "dev"]):
        with pytest.raises(SystemExit) as stop:
            toy.main([*argv, "--out", str(tmp_path)])
        option = argv[0].split("=")[0]
        assert f"toy: {option} is an option of the tables" in str(stop.value)
        assert f"bash run.sh toy --tables {option}" in str(stop.value) and "\n" not in str(stop.value)
    assert toy.tables_option(["--quick", "seed=44"]) is None


def test_the_run_says_which_earlier_runs_it_replaces(tmp_path):
    assert toy.replacing(tmp_path, ["credo", "rlcr"]) is None
    (tmp_path / "credo").mkdir()
    note = toy.replacing(tmp_path, ["credo", "rlcr"])
    assert note.startswith(f"[toy] replacing the earlier CREDO run under {tmp_path} (last written 20")
    assert "--out DIR keeps them" in note
    (tmp_path / "rlcr").mkdir()
    assert "earlier CREDO, RLCR runs under" in toy.replacing(tmp_path, ["credo", "rlcr"])
    assert toy.replacing(tmp_path, ["grpo"]) is None


def test_a_before_figure_is_the_same_to_three_decimals_and_effective_levels_within_five_percent():
    """Effective levels count bitwise-equal confidences: another machine's arithmetic moves them
    (640.2 -> 643.5 under MKL's compatible path) where no other figure moves."""
    doc = {"acc": 0.51, "effective_levels": 640.2, "auroc": None}
    cells = [toy._before_cell(key, key, mine, doc[key]) for key, mine in (("acc", 0.5104), ("auroc", None))]
    assert cells == [("acc 0.510 (same)", True), ("auroc - (same)", True)]
    assert toy._before_cell("acc", "Acc", 0.511, 0.51) == ("Acc 0.511 (documented 0.510)", False)
    assert toy._before_cell("acc", "Acc", None, 0.51) == ("Acc - (documented 0.510)", False)
    assert toy._before_cell("effective_levels", "L", 640.2, 640.2) == ("L 640.2 (same)", True)
    assert toy._before_cell("effective_levels", "L", 643.5, 640.2) == (
        "L 643.5 (documented 640.2: same within 5%)",
        True,
    )
    assert toy._before_cell("effective_levels", "L", 608.2, 640.2)[1]  # 5.0% below
    assert not toy._before_cell("effective_levels", "L", 608.1, 640.2)[1]
    assert toy._before_cell("effective_levels", "L", 672.3, 640.2) == ("L 672.3 (documented 640.2)", False)
    assert not toy._before_cell("effective_levels", "L", 4.9, 4.646)[1]  # the numerals' 4.6: 5.5% off


def test_a_run_is_set_beside_the_documented_results(tmp_path, toy_world, monkeypatch):
    """The before rows must be the same to three decimals, each after figure inside its range."""
    world = _copy_world(tmp_path, toy_world)
    digest = toy.model_digest(world)
    assert digest == toy_build.sha256(world / "model" / "model.safetensors")
    path = tmp_path / "expected.json"
    ranges = {"acc": {"mean": 0.8, "low": 0.75, "high": 0.85, "min": 0.78, "max": 0.82}}
    toy.document(path, "after", {"seeds": [1, 2], "figures": 10, "CREDO": ranges}, world, "tables")
    toy.document(path, "before", {"CREDO": {"acc": 0.6, "ece": 0.1}}, world, "toy")
    documented = json.loads(path.read_text())
    assert documented["model_sha256"] == digest and documented["after"]["source"] == "tables"
    assert documented["before"]["CREDO"]["acc"] == 0.6 and documented["after"]["CREDO"] == ranges
    report = {"CREDO": {"before": {"acc": 0.6001, "ece": 0.1}, "after": {"acc": 0.83}}}
    lines = toy.against_documented(report, documented, digest)
    assert "CREDO before: Acc 0.600 (same), AUROC - (same), ECE 0.100 (same)" in lines[1]
    assert "CREDO after: Acc 0.830 (0.750-0.850), AUROC - (-: OUTSIDE)" in lines[2]
    assert (
        lines[3]
        == "  after: ranges that hold all 10 after figures of one more training seed 19 times in 20 (seeds 1, 2)"
    )
    assert lines[-1].startswith("[toy] not as documented: CREDO after AUROC, CREDO after ECE")
    monkeypatch.setattr(toy, "COMPARED", (("acc", "Acc"),))
    assert toy.against_documented({"CREDO": {"after": {"acc": 0.80}}}, documented, digest)[-1] == (
        "[toy] typical: every figure as documented"
    )
    outside = toy.against_documented({"CREDO": {"after": {"acc": 0.86}}, "RLCR": {"after": {}}}, documented, digest)
    assert "Acc 0.860 (0.750-0.850: OUTSIDE)" in outside[1] and "RLCR after: not documented" in outside[2]
    assert outside[-1] == (
        "[toy] not as documented: CREDO after Acc (a typical run has some after figure outside its range at most "
        'one time in twenty; docs/toy.md, "Current results", has the spread over seeds)'
    )
    differs = toy.against_documented({"CREDO": {"before": {"acc": 0.61}}}, documented, digest)[-1]
    assert differs.startswith("[toy] not as documented: CREDO before Acc (a before figure differs")
    assert "nothing to compare" in toy.against_documented(report, documented, "another world")[0]
    before_only = {key: value for key, value in documented.items() if key != "after"}
    lines = toy.against_documented({"CREDO": {"before": {"acc": 0.6}, "after": {"acc": 0.7}}}, before_only, digest)
    assert lines[-2] == "  CREDO after: not documented" and not any("(seeds" in line for line in lines)
    assert lines[-1] == "[toy] as documented where documented; nothing documented yet for CREDO after"
    other = tmp_path / "other"  # another world's results replace these, both sections
    other.mkdir()
    (other / toy_build.CHECKSUMS).write_text("ab" * 32 + "  model/model.safetensors\n")
    toy.document(path, "before", {"CREDO": {"acc": 0.5}}, other, "another")
    assert set(json.loads(path.read_text())) == {"model_sha256", "before"}


def test_trainings_run_at_once_and_a_failure_stops_the_others(tmp_path):
    # Two stages that each wait (at most 60 s) for the other's file: both finish only if they run at once.
    meet = "import pathlib, sys, time; d = pathlib.Path(sys.argv[1]); (d / sys.argv[2]).touch(); t = time.time()\n"
    meet += "while not (d / sys.argv[3]).exists():\n"
    meet += "    time.sleep(0.05)\n    if time.time() - t > 60: sys.exit('alone')\n"
    meet += "print('met', sys.argv[2])"
    stages = [(["-c", meet, str(tmp_path), a, b], tmp_path / f"{a}.log") for a, b in (("a", "b"), ("b", "a"))]
    seconds = toy.run_stages(stages, jobs=2)
    assert set(seconds) == {tmp_path / "a.log", tmp_path / "b.log"}
    assert "met a" in (tmp_path / "a.log").read_text() and "met b" in (tmp_path / "b.log").read_text()
    # A failure raises with its log's tail, and the stage still running is killed, not left behind.
    pid = tmp_path / "pid"  # the failing stage waits until the other has started
    fails = ["-c", f"import os, sys, time\nt = time.time()\nwhile not os.path.exists({str(pid)!r}):\n"]
    fails[1] += "    time.sleep(0.05)\n    if time.time() - t > 60: sys.exit('alone')\n"
    fails[1] += "print('the loss is nan'); sys.exit(3)"
    part = tmp_path / "pid.part"
    sleeps = ["-c", f"import os, time\nopen({str(part)!r}, 'w').write(str(os.getpid()))\n"]
    sleeps[1] += f"os.rename({str(part)!r}, {str(pid)!r})\ntime.sleep(600)"
    with pytest.raises(RuntimeError) as failed:
        toy.run_stages([(sleeps, tmp_path / "sleeps.log"), (fails, tmp_path / "fails.log")], jobs=2)
    assert "exit 3" in str(failed.value) and "the loss is nan" in str(failed.value)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid.read_text()), 0)


# The loop learns: GRPO on a task whose answers the verifier knows, the four
# first level-3 problems of the world's training split, every step (4 questions x G = 8). The
# warm start gets them right about half the time; a loop whose credit and update have the
# right sign learns their answers (and the partial-sum style, toy_build.WORLD["styles"]) and the
# reward rises. configs/toy.yaml as it is (lr 5e-5). Measured on two independently built
# worlds (docs/toy.md): mean reward of the last 8 steps minus that of the first 8, +0.245
# and +0.227 (also on world 1, whose warm start cannot add reliably), each with a standard
# error of 0.05 over steps. LEARN_GAIN = 0.15 is three standard errors above zero (a loop
# that does not learn passes about once in a thousand) and about 1.6 below what was measured.
LEARN_STEPS, LEARN_WINDOW, LEARN_GAIN = 30, 8, 0.15


def learning_run(warm, tmp_path, toy_world, *overrides) -> list[dict]:
    """A GRPO run of LEARN_STEPS on the first four level-3 training problems: its metrics."""
    rows = [r for r in map(json.loads, (toy_world / "train.jsonl").read_text().splitlines()) if r["level"] == 3][:4]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = warm.run(
        [
            "credo.py",
            "configs/toy.yaml",
            f"out_dir={tmp_path}",
            "run_name=learn",
            f"model={toy_world / 'model'}",
            f"train_data={train}",
            "method=grpo",
            "channel=verbalized",
            "alpha=0",
            "kappa=0",
            f"max_steps={LEARN_STEPS}",
            f"save_every={LEARN_STEPS}",
            "save_rollouts=false",
            *overrides,
        ],
        env=env,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return [json.loads(line) for line in (tmp_path / "learn" / "metrics.jsonl").read_text().splitlines()]


def test_the_built_world_passed_its_addition_check_and_the_check_is_reproducible(toy_world):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stamp = json.loads((toy_world / "world.json").read_text())
    recorded = stamp["addition_checks"][-1]
    assert all(recorded[level] >= bar for level, bar in toy_build.WORLD["check_min_acc"].items()), recorded
    rows = [json.loads(line) for line in (toy_world / "train.jsonl").read_text().splitlines()]
    model = AutoModelForCausalLM.from_pretrained(toy_world / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(toy_world / "model")
    rounds = len(stamp["addition_checks"]) - 1  # the check's seed is the world's + its round
    again = toy_build.addition_check(model, tokenizer, rows, toy_build.WORLD["seed"] + rounds, toy_build.WORLD)
    # 400 samples at level 1, about 200 steps-style ones at level 2: 0.01 is 2-4 of them
    assert again == pytest.approx(recorded, abs=0.01)


@pytest.mark.slow
def test_the_loop_raises_the_reward_on_a_task_with_a_known_answer(warm, tmp_path, toy_world):
    metrics = learning_run(warm, tmp_path, toy_world)
    reward = [m["reward_ans"] for m in metrics]
    first, last = np.mean(reward[:LEARN_WINDOW]), np.mean(reward[-LEARN_WINDOW:])
    assert len(reward) == LEARN_STEPS
    assert last - first >= LEARN_GAIN, (
        f"reward {first:.3f} over the first {LEARN_WINDOW} steps, {last:.3f} over the last"
    )


# What the quick run shows (40 of the toy's 200 steps, 200 samples). On the shipped world (version 13,
# alpha 0.1; 2026-11-28) CREDO's readout goes from mean 0.556 for accuracy 0.590 (ECE 0.167, AUROC 0.774)
# to mean 0.856 for accuracy 0.795: within 0.061 of it, ECE 0.076, AUROC 0.803 (at alpha 0.3: within
# 0.041, ECE 0.046, AUROC 0.809). On version 11's worlds 0 and 3 (alpha 0.1) it ended within 0.057 and
# 0.019, ECE 0.075 and 0.071, AUROC 0.848 and 0.856.
# The bounds below sit about two standard errors of a 200-sample accuracy (0.03) or AUROC (0.03)
# beyond the worst of those. Without L_cal (alpha = 0, CREDO_TOY_ALPHA0=1) the same run's accuracy
# rises to 0.825 while the readout's mean reaches only 0.659 (ECE 0.199, Brier 0.185 against 0.131):
# that check asks only that the readout lag the accuracy RL adds; the alpha = 0 row of the tables
# measures the rest.
QUICK_GAP, QUICK_ECE, QUICK_AUROC_LOSS = 0.12, 0.15, 0.06


def calibration_gap_rise(report: dict) -> float:
    """How far the readout's calibration gap mean(c) - acc rose from before training to after."""
    before, after = report["CREDO"]["before"], report["CREDO"]["after"]
    return (after["mean_conf"] - after["acc"]) - (before["mean_conf"] - before["acc"])


@pytest.mark.slow
def test_quick_toy_run_calibrates_the_readout(warm_stages, tmp_path, toy_world):
    report = toy.main(["--quick", "--out", str(tmp_path / "toy")])
    before, after = report["CREDO"]["before"], report["CREDO"]["after"]
    assert before["n"] > 100 and after["n"] > 100
    summary = (
        f"readout mean {before['mean_conf']:.3f} -> {after['mean_conf']:.3f} for accuracy {before['acc']:.3f} -> "
        f"{after['acc']:.3f}, AUROC {before['auroc']:.3f} -> {after['auroc']:.3f}, ECE {after['ece']:.3f}"
    )
    assert abs(after["mean_conf"] - after["acc"]) <= QUICK_GAP, summary
    assert after["ece"] <= QUICK_ECE and after["auroc"] >= before["auroc"] - QUICK_AUROC_LOSS, summary
    saved = json.loads((tmp_path / "toy" / "report.json").read_text())
    assert set(saved["CREDO"]["after"]) >= {"acc", "ece", "auroc", "brier", "effective_levels", "mean_conf"}
    assert (tmp_path / "toy" / "reliability_credo.png").exists()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("CREDO_TOY_ALPHA0") != "1", reason="set CREDO_TOY_ALPHA0=1 to run the alpha=0 check")
def test_quick_toy_run_without_the_calibration_loss_leaves_the_readout_behind_the_accuracy(
    warm_stages, tmp_path, toy_world
):
    report = toy.main(["--quick", "--out", str(tmp_path / "toy"), "alpha=0"])
    before, after = report["CREDO"]["before"], report["CREDO"]["after"]
    assert after["acc"] > before["acc"] and calibration_gap_rise(report) < 0, (before, after)


def test_documented_results_name_no_path_of_the_machine(tmp_path, toy_world):
    """worlds/toy_expected.json is committed: its source line names runs relative to the checkout."""
    path = tmp_path / "expected.json"
    toy.document(path, "before", {"CREDO": {"acc": 0.5}}, toy_world, f"python -m worlds.toy ({toy.ROOT}/runs/toy)")
    written = json.loads(path.read_text())
    assert written["before"]["source"] == "python -m worlds.toy (runs/toy)"
    assert written["model_sha256"] == toy.model_digest(toy_world)
