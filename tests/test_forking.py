"""docs/forking.md, followed as the page says. Its worked examples (a reward, a target, a
calibration loss, an advantage estimator, a confidence read, a loss term) are checked by hand here;
the slow test applies the page literally to a copy of the repository (its Python blocks appended to
the module each names, its YAML files written), then runs lint, the config and method tests and
one tiny training step with each new config there, and eval.py on the new confidence read's run."""

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import confidence
import config
import methods

DOC = config.ROOT / "docs" / "forking.md"
# "Append this to `methods.py`:" or "and write `configs/x.yaml`:", a blank line, then the block
STEP = re.compile(r"(?:Append this to|write) `([^`]+)`:\n\n```(python|yaml)\n(.*?)```", re.S)


def page_steps() -> list[tuple[str, str, str]]:
    """(file, language, text) of each block the page says to paste or write, in order."""
    return STEP.findall(DOC.read_text())


def new_configs() -> dict[str, dict]:
    """configs/<name>.yaml -> its keys, of each YAML file the page writes."""
    return {Path(file).stem: yaml.safe_load(text) for file, language, text in page_steps() if language == "yaml"}


def test_the_page_has_its_worked_examples():
    steps = page_steps()
    assert [(file, language) for file, language, _ in steps] == [
        ("methods.py", "python"),
        ("configs/credo_brier.yaml", "yaml"),
        ("methods.py", "python"),
        ("configs/credo_loo.yaml", "yaml"),
        ("methods.py", "python"),
        ("configs/credo_bce.yaml", "yaml"),
        ("methods.py", "python"),
        ("configs/credo_positive.yaml", "yaml"),
        ("confidence.py", "python"),  # a confidence read: one entry and one config are all its touch points
        ("configs/credo_phigh.yaml", "yaml"),
        ("methods.py", "python"),
        ("configs/credo_entropy.yaml", "yaml"),
    ]
    assert new_configs() == {
        "credo_brier": {"inherit": "credo", "method": "brier"},
        "credo_loo": {"inherit": "credo", "target": "leave_one_out"},
        "credo_bce": {"inherit": "credo", "calibration_loss": "bce"},
        "credo_positive": {"inherit": "credo", "advantage": "positive"},
        "credo_phigh": {"inherit": "credo", "confidence": "p_high"},
        "credo_entropy": {"inherit": "credo", "loss_terms": "pg,cal,kl,entropy"},
    }
    assert not set(new_configs()) & set(config.config_names())  # the page adds them; the repository does not


MODULES = {"methods.py": methods, "confidence.py": confidence}  # what the page's blocks are appended to


@pytest.fixture
def examples():
    """The page's Python blocks, each run in the namespace of the module it is appended to, as if
    appended to it, and removed again afterwards (from every registry and from the modules)."""
    before = {name: dict(registry) for name, registry in registries().items()}
    names = {file: set(vars(module)) for file, module in MODULES.items()}
    try:
        for file, language, text in page_steps():
            if language == "python":
                exec(compile(text, f"{DOC} (a block for {file})", "exec"), vars(MODULES[file]))  # noqa: S102 (our docs)
        yield methods
    finally:
        for name, registry in registries().items():
            for key in set(registry) - set(before[name]):
                registry.pop(key)
        for file, module in MODULES.items():
            for name in set(vars(module)) - names[file]:
                vars(module).pop(name)


def registries() -> dict[str, dict]:
    return {
        "methods": methods.METHODS,
        "targets": methods.TARGETS,
        "losses": methods.CALIBRATION_LOSSES,
        "advantages": methods.ADVANTAGES,
        "loss terms": methods.LOSS_TERMS,
        "confidence reads": confidence.READS,
    }


def test_the_brier_reward_by_hand(examples):
    brier = methods.METHODS["brier"]
    assert brier.reads == "model" and brier.help.startswith("Brier:")
    g = methods.GroupOutcomes(
        correct=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        fmt=torch.ones(4),
        conf=torch.tensor([0.9, 0.2, float("nan"), 0.5]),
        target=torch.zeros(4),
        group_size=4,
    )
    rewards = brier.rewards(g, config.load_config("credo"))
    assert rewards.answer.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert rewards.confidence.tolist() == pytest.approx([-0.01, -0.04, -1.0, -0.25])


def test_the_leave_one_out_target_by_hand(examples):
    cfg = config.Config(group_size=4, gamma=0.5)
    # group 1: a = 1, 0, 0, 0 -> the others' means 0, 1/3, 1/3, 1/3; group 2: all right -> 1
    t = methods.TARGETS["leave_one_out"](torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), cfg)
    assert t.tolist() == pytest.approx([0.5, 1 / 6, 1 / 6, 1 / 6, 1.0, 1.0, 1.0, 1.0])


def test_the_bce_calibration_loss_by_hand(examples):
    bce = methods.CALIBRATION_LOSSES["bce"]
    conf = torch.tensor([0.8, 0.4, float("nan")], requires_grad=True)
    t, valid = torch.tensor([0.75, 0.25, 0.5]), torch.tensor([True, True, False])
    loss = bce(conf, t, valid)
    expected = -(0.75 * math.log(0.8) + 0.25 * math.log(0.2) + 0.25 * math.log(0.4) + 0.75 * math.log(0.6)) / 2
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert conf.grad[2] == 0 and torch.isfinite(conf.grad).all()  # nothing from outside V
    none = torch.tensor([0.3], requires_grad=True)
    empty = bce(none, torch.tensor([1.0]), torch.tensor([False]))
    assert float(empty) == 0.0 and empty.requires_grad


def test_the_positive_advantage_by_hand(examples):
    cfg = config.Config(group_size=4, adv_std="population")
    # group 1: r = 1, 0, 0, 0 -> mean 1/4, population std sqrt(3)/4 -> sqrt(3), -1/sqrt(3) x 3 -> kept sqrt(3), 0, 0, 0
    advantages = methods.ADVANTAGES["positive"](torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), cfg)
    assert advantages.tolist() == pytest.approx([3**0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])


def test_the_p_high_read_by_hand(examples):
    p_high = confidence.READS["p_high"]
    assert (p_high.model, p_high.prompts, p_high.forced, p_high.help) == (
        True,
        ("readout", "readout_noanalysis"),
        (),
        "c = p(<CONF_HIGH>) under the full softmax at the slot.",
    )
    logp = torch.log(torch.tensor([[0.25], [0.5]]))  # [2, 1] log p(<CONF_HIGH>) at two slots
    assert p_high.from_logprobs(logp).tolist() == pytest.approx([0.25, 0.5])


def test_the_entropy_term_by_hand(examples):
    term = methods.LOSS_TERMS["entropy"]
    assert (term.coef, term.over, term.needs, term.warms_up) == (1e-3, "rows", frozenset(), False)
    logp = torch.log(torch.tensor([[0.5, 0.25, 1.0], [0.125, 1.0, 1.0]]))  # [2, 3]; masked columns hold anything
    completion = torch.tensor([[True, True, False], [True, False, False]])
    x = methods.TermInputs(
        logp=logp, conf=None, ref_logp=None, credit=None, completion=completion, ans_mask=completion,
        conf_mask=completion, valid=torch.tensor([True, True]),
    )  # fmt: skip
    expected = ((math.log(0.5) + math.log(0.25)) / 2 + math.log(0.125)) / 2
    assert float(term.loss(x, config.Config())) == pytest.approx(expected, rel=1e-6)
    cfg = config.load_config("credo", ["loss_terms=pg,cal,kl,entropy"])
    assert [t.name for t in methods.loss_terms(cfg)] == ["pg", "cal", "entropy"]  # kl_coef 0 leaves kl out


def test_each_example_config_is_a_credo_run_with_one_thing_changed(examples, tmp_path):
    credo_plan = confidence.plan(config.load_config("credo"))
    for name, keys in new_configs().items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(keys))
        cfg = config.load_config(str(path))
        changed = {key: value for key, value in keys.items() if key != "inherit"}
        assert {key: getattr(cfg, key) for key in changed} == changed
        # derived, nothing else edited: a new confidence read is the run's read and its model's c
        read = confidence.READS[changed.get("confidence", "readout")]
        assert confidence.plan(cfg) == dataclasses.replace(credo_plan, read=read, model_read=read), name
    with pytest.raises(ValueError, match="method=brier needs a confidence with logits"):
        config.load_config("credo", ["method=brier", "channel=verbalized"])
    with pytest.raises(ValueError, match=r"target='nope' is not supported; choose one of \(.*'leave_one_out'"):
        config.load_config("credo", ["target=nope"])


def copy_of_the_repository(dst):
    """The checkout's files (tracked, and untracked ones git does not ignore) copied to dst, with
    the virtual environment and the tiny world linked rather than copied."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=config.ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = config.ROOT / name
        if source.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dst / name)
    (dst / ".cache").mkdir()
    (dst / ".cache" / "tiny").symlink_to(config.ROOT / ".cache" / "tiny")


@pytest.mark.slow
def test_the_page_followed_literally_in_a_copy(tmp_path, tiny_dir):
    repo = tmp_path / "repo"
    copy_of_the_repository(repo)
    for file, language, text in page_steps():
        if language == "python":
            with (repo / file).open("a") as f:
                f.write("\n\n" + text)
        else:
            (repo / file).write_text(text)
    env = {**os.environ, "CREDO_TEST_WORKERS": "0", "PYTHONDONTWRITEBYTECODE": "1"}

    def run(*argv, timeout=900):
        done = subprocess.run(
            [sys.executable, *argv], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, " ".join(argv) + "\n" + done.stdout[-3000:] + done.stderr[-3000:]
        return done

    run("-m", "ruff", "check", ".")
    run("-m", "ruff", "format", "--check", ".")
    # the config, method and layout tests, and tests/test_credo.py's real step of each new config
    selected = " or ".join(["test_config", "test_methods", "test_layout", *new_configs()])
    tests = ["tests/test_config.py", "tests/test_methods.py", "tests/test_layout.py", "tests/test_credo.py"]
    done = run("-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *tests, "-k", selected, "-m", "not slow")
    for name in new_configs():  # each new config's real step ran, and passed (-rA lists what passed)
        assert f"PASSED tests/test_credo.py::test_one_real_training_step_per_method[{name}]" in done.stdout
    assert " passed" in done.stdout and "failed" not in done.stdout
    # one training step of each new config, the same loop as `python credo.py tiny ...`, all in one
    # process (torch and transformers load once: each run alone is mostly their start-up)
    out_dir = tmp_path / "runs"
    runs = {
        name: [f"{k}={v}" for k, v in keys.items() if k != "inherit"]
        + ["max_steps=1", "engine=hf", f"out_dir={out_dir}", f"run_name={name}"]
        for name, keys in new_configs().items()
    }
    train_each = (
        "import json, sys\nimport config, credo\n"
        "for args in json.loads(sys.argv[1]).values():\n    credo.train(config.load_config('tiny', args))"
    )
    run("-c", train_each, json.dumps(runs))
    for name in new_configs():
        (metrics,) = [json.loads(line) for line in (out_dir / name / "metrics.jsonl").read_text().splitlines()]
        rows = [
            json.loads(line) for line in (out_dir / name / "rollouts" / "step_000000.jsonl").read_text().splitlines()
        ]
        assert metrics["step"] == 0 and math.isfinite(metrics["loss"]) and len(rows) == 8
        with_c = [r for r in rows if r["c"] is not None]
        if name == "credo_brier":
            for row in rows:
                assert row["r_ans"] == row["a"]
                expected = -1.0 if row["c"] is None else -((row["c"] - row["a"]) ** 2)
                assert row["r_conf"] == pytest.approx(expected, abs=1e-6)
        if name == "credo_loo":
            for q in range(0, 8, 4):  # tiny: G = 4
                a = [r["a"] for r in rows[q : q + 4]]
                for i, row in enumerate(rows[q : q + 4]):
                    assert row["t"] == pytest.approx(0.5 * a[i] + 0.5 * (sum(a) - a[i]) / 3, abs=1e-6)
        if name == "credo_positive":
            assert all(row["adv_ans"] >= 0 and row["adv_conf"] >= 0 for row in rows)
        if name == "credo_bce" and with_c:
            expected = sum(-(r["t"] * math.log(r["c"]) + (1 - r["t"]) * math.log(1 - r["c"])) for r in with_c)
            assert metrics["loss_cal"] == pytest.approx(expected / len(with_c), rel=1e-4)
        if name == "credo_entropy":  # the new term is logged, and in the objective with its coefficient
            expected = metrics["loss_pg"] + metrics["alpha"] * metrics["loss_cal"] + 1e-3 * metrics["loss_entropy"]
            assert metrics["loss_entropy"] < 0 and metrics["loss"] == pytest.approx(expected, rel=1e-6)
        if name == "credo_phigh":  # the step records the new read's c; eval.py reports it beside the readout
            mean_c = sum(r["c"] for r in with_c) / len(with_c) if with_c else None
            assert metrics["mean_c"] == pytest.approx(mean_c, abs=1e-6)
            problems = tmp_path / "problems.jsonl"
            problems.write_text(
                "".join(f"{line}\n" for line in (tiny_dir / "math_test.jsonl").read_text().splitlines()[:4])
            )
            evaluated = tmp_path / "eval"
            sets = f"tiny={problems}:math"
            run(
                "eval.py",
                "--ckpt",
                str(out_dir / name),
                "--sets",
                sets,
                "--n",
                "2",
                "--engine",
                "hf",
                "--no-report",
                "--out",
                str(evaluated),
            )
            records = [json.loads(line) for line in (evaluated / "samples.jsonl").read_text().splitlines()]
            by_source = {source: [r for r in records if r["source"] == source] for source in ("readout", "p_high")}
            assert len(by_source["p_high"]) == len(by_source["readout"]) == 8 and len(records) == 16
            for high, ratio in zip(by_source["p_high"], by_source["readout"]):
                assert (high["text"], high["c"] is None) == (ratio["text"], ratio["c"] is None)
                assert high["c"] is None or high["c"] < ratio["c"]  # p(H) < p(H) / (p(H) + p(L))
