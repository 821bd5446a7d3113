"""curves.py: the moving average on hand-computed cases, the reader's errors, the panel of a
missing key, and (slow) the figure of a real one-step tiny run beside a synthetic second run."""

import doctest
import json
import math
import shutil

import numpy as np
import pytest

from evaluation import curves

plt = curves.pyplot()  # matplotlib's pyplot on the Agg backend

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_run(run_dir, records):
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def record(step, **values):
    """A step record with the keys the panels read (the rest of credo.step_metrics is not needed here)."""
    base = {
        "step": step,
        "reward_ans": 0.5,
        "acc": 0.5,
        "format_rate": 1.0,
        "mean_c": 0.5,
        "ece": 0.1,
        "brier": 0.2,
        "loss_cal": 0.2,
        "t_rollout": 4.0,
        "t_verify": 1.0,
        "t_train": 2.0,
        "t_sync": 0.5,
    }
    return {**base, **values}


# --- the moving average ------------------------------------------------------------------------


def test_moving_average_on_hand_computed_windows():
    values = [0.0, 3.0, 6.0, 3.0]
    # window 3: [0,3]/2, [0,3,6]/3, [3,6,3]/3, [6,3]/2
    assert curves.moving_average(values, 3).tolist() == [1.5, 3.0, 4.0, 4.5]
    # window 2 reaches one point right: [0,3], [3,6], [6,3], [3]
    assert curves.moving_average(values, 2).tolist() == [1.5, 4.5, 4.5, 3.0]
    # window 4: points i-1 .. i+2: [0,3,6]/3, [0,3,6,3]/4, [3,6,3]/3, [6,3]/2
    assert curves.moving_average(values, 4).tolist() == [3.0, 3.0, 4.0, 4.5]
    assert curves.moving_average(values, 1).tolist() == values
    assert curves.moving_average(values, 100).tolist() == [3.0] * 4  # the whole curve's mean
    assert curves.moving_average([], 5).tolist() == []


def test_doctests():
    assert doctest.testmod(curves).failed == 0


@pytest.mark.parametrize("window", [0, -3, 2.0, True])
def test_a_bad_window_is_refused(window):
    with pytest.raises(curves.CurvesError, match="positive integer"):
        curves.moving_average([1.0], window)


def test_default_window_is_an_odd_25th_of_the_longest_run():
    assert [curves.default_window(n) for n in (1, 2, 25, 50, 75, 10_000)] == [1, 1, 1, 3, 3, 401]


# --- the reader's errors: one message naming the file and the line --------------------------------


def test_a_missing_directory_or_file_and_an_empty_file_are_named(tmp_path):
    with pytest.raises(curves.CurvesError, match="no such run directory"):
        curves.read_metrics(tmp_path / "absent")
    (tmp_path / "bare").mkdir()
    with pytest.raises(curves.CurvesError, match=r"bare/metrics\.jsonl: no such file"):
        curves.read_metrics(tmp_path / "bare")
    with pytest.raises(curves.CurvesError, match="no run directory given"):
        curves.plot_curves([])
    write_run(tmp_path / "empty", [])
    with pytest.raises(curves.CurvesError, match=r"empty/metrics\.jsonl: empty"):
        curves.read_metrics(tmp_path / "empty")


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"step": 1, "acc": 0.5', "line 2: not JSON"),  # a line cut short
        ("", "line 2: not JSON"),
        ("[1, 2]", "line 2: not a step record"),
        ('{"acc": 0.5}', "line 2: not a step record"),
        ('{"step": "1"}', "line 2: not a step record"),
        ('{"step": 0}', "line 2: step 0 follows step 0"),
    ],
)
def test_a_malformed_line_is_named_with_its_number(tmp_path, line, message):
    run_dir = write_run(tmp_path / "run", [record(0)])
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write(line + "\n" + json.dumps(record(5)) + "\n")
    with pytest.raises(curves.CurvesError, match=f"run/metrics.jsonl {message}"):
        curves.read_metrics(run_dir)


def test_a_value_that_is_not_a_number_is_named(tmp_path):
    run_dir = write_run(tmp_path / "run", [record(0), record(1, acc="0.5")])
    with pytest.raises(curves.CurvesError, match=r"metrics\.jsonl line 2: acc is '0\.5', not a number or null"):
        curves.plot_curves([run_dir], tmp_path / "out")


def test_the_command_line_prints_one_line_and_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        curves.main([str(tmp_path / "absent")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        err == f"plot: {tmp_path / 'absent'}: no such run directory; "
        "give the directory a training run wrote (runs/<name>) (--debug shows the traceback)\n"
    )
    with pytest.raises(curves.CurvesError):
        curves.main([str(tmp_path / "absent"), "--debug"])
    with pytest.raises(SystemExit):
        curves.main([str(tmp_path / "absent"), "--smooth", "x"])


# --- the panels -------------------------------------------------------------------------------------


def drawn(ax):
    """(colour, x, y) of every line on the axes."""
    return [(line.get_color(), line.get_xdata().tolist(), line.get_ydata().tolist()) for line in ax.lines]


def test_a_key_one_run_lacks_leaves_a_note_and_no_line():
    credo_run = [record(0, mean_c=0.2), record(1, mean_c=0.4), record(3, mean_c=0.9)]
    grpo_run = [record(0, mean_c=None), {k: v for k, v in record(1).items() if k != "mean_c"}]
    fig, ax = plt.subplots()
    curves.draw_metric(ax, "mean_c", "mean c", [("credo", credo_run, "a"), ("grpo", grpo_run, "b")], window=3)
    # the raw points and their moving average ([0.2,0.4]/2, [0.2,0.4,0.9]/3, [0.4,0.9]/2), in credo's colour only
    assert drawn(ax) == [
        ("C0", [0, 1, 3], [0.2, 0.4, 0.9]),
        ("C0", [0, 1, 3], pytest.approx([0.3, 0.5, 0.65], abs=1e-12)),
    ]
    assert [t.get_text() for t in ax.texts] == ["no mean_c in grpo"]
    plt.close(fig)


def test_a_key_no_run_has_says_so_and_non_finite_steps_are_counted():
    fig, ax = plt.subplots()
    runs = [("a", [record(0, mean_c=None)], "a"), ("b", [record(0, mean_c=None)], "b")]
    curves.draw_metric(ax, "mean_c", "mean c", runs, window=1)
    assert len(ax.lines) == 0 and [t.get_text() for t in ax.texts] == ["no mean_c in any run"]
    ax.clear()
    nan_run = [record(0, loss_cal=0.1), record(1, loss_cal=math.nan), record(2, loss_cal=0.3)]
    curves.draw_metric(ax, "loss_cal", "calibration loss", [("a", nan_run, "a")], window=3)
    assert drawn(ax)[1][1:] == ([0, 2], [0.2, 0.2])  # the NaN step is a gap, not a zero
    assert [t.get_text() for t in ax.texts] == ["a: 1 non-finite steps left out"]
    plt.close(fig)


def test_the_time_split_stacks_the_four_phases_or_says_it_cannot(tmp_path):
    fig, ax = plt.subplots()
    curves.draw_time_split(ax, "run", [record(0), record(1, t_rollout=6.0)], "p", window=1)
    assert len(ax.collections) == 4  # rollout, verify, train, sync
    tops = [np.asarray(c.get_paths()[0].vertices)[:, 1].max() for c in ax.collections]
    assert tops == [6.0, 7.0, 9.0, 9.5]  # cumulative seconds at step 1
    ax.clear()
    curves.draw_time_split(ax, "run", [record(0), record(1, t_sync=None)], "p", window=1)
    assert len(ax.collections) == 0 and "no complete step time split" in ax.texts[0].get_text()
    plt.close(fig)


# --- end to end: a real tiny run and a synthetic second run on one figure ---------------------------


@pytest.mark.slow
def test_a_real_run_and_a_second_run_on_one_figure(tmp_path, tiny_run):
    """The metrics.jsonl of a real run (the suite's shared three-step tiny run, copied, since the
    figure is written beside it) and a second run of two steps on one figure."""
    real = tmp_path / "real"
    real.mkdir()
    shutil.copy(tiny_run / "metrics.jsonl", real / "metrics.jsonl")
    lines = (real / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    # the second run: the real step's keys, other values, and no confidence (as a GRPO run)
    steps = [json.loads(line) for line in lines]
    step = steps[0]
    other = [
        {**step, "step": i, "reward_ans": 0.25 * i, "acc": 0.5 * i, "mean_c": None, "ece": None, "brier": None}
        | {"t_rollout": 1.0 + i}
        for i in range(2)
    ]
    write_run(tmp_path / "grpo", other)

    written = curves.main([str(real), str(tmp_path / "grpo"), "--smooth", "3"])
    assert written == [real / "curves.png", real / "curves.pdf"]
    png, pdf = (path.read_bytes() for path in written)
    assert png.startswith(PNG_SIGNATURE) and pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")
    assert plt.imread(written[0]).shape[2] == 4  # a PNG matplotlib reads back

    runs = [("real", curves.read_metrics(real), "a"), ("grpo", curves.read_metrics(tmp_path / "grpo"), "b")]
    fig, ax = plt.subplots()
    curves.draw_metric(ax, "acc", "accuracy", runs, window=3)
    assert drawn(ax)[0] == ("C0", [m["step"] for m in steps], [m["acc"] for m in steps]) and drawn(ax)[2] == (
        "C1",
        [0, 1],
        [0.0, 0.5],
    )
    ax.clear()
    curves.draw_metric(ax, "mean_c", "mean c", runs, window=3)
    assert [t.get_text() for t in ax.texts] == ["no mean_c in grpo"] and len(ax.lines) == 2
    plt.close(fig)

    out = tmp_path / "figures"
    assert curves.main([str(real), "--out", str(out)]) == [out / "curves.png", out / "curves.pdf"]


def test_every_logged_loss_term_gets_a_panel():
    """A term a fork registers (loss_entropy) or the KL term shows with no edit to curves.py; a
    term null at every step of every run (kl at kl_coef 0) adds no panel."""
    runs = [
        ("a", [record(0, loss_pg=-0.1, loss_kl=None), record(1, loss_pg=0.2, loss_kl=None)], "a"),
        ("b", [record(0, loss_pg=0.0, loss_entropy=-3.0)], "b"),
    ]
    panels = curves.metric_panels(runs)
    assert panels[: len(curves.METRIC_PANELS)] == list(curves.METRIC_PANELS)
    assert panels[len(curves.METRIC_PANELS) :] == [("loss_pg", "loss term pg"), ("loss_entropy", "loss term entropy")]
