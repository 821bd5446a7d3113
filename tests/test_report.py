"""report.py and evaluation/figures.py: evaluation records, their aggregation per run, set and domain,
the tables, and the figures, including a figure that fails (eval.report keeps the rest).

Every expected number below is worked out by hand in the comment next to it.
"""

import csv
import doctest
import json
import math

import numpy as np
import pytest

import eval as ev
from evaluation import figures, report
from evaluation.evalsets import EVAL_SETS
from metrics import calibration_metrics, reliability_points


def test_docstring_examples_hold():
    result = doctest.testmod(report, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


# Records, aggregation, tables ------------------------------------------------------------


def pool_records(run, method, seed, train_domain, set_name, source, confs, corrects):
    return [
        {
            "run": run,
            "method": method,
            "seed": seed,
            "train_domain": train_domain,
            "set": set_name,
            "set_domain": EVAL_SETS[set_name]["domain"],
            "problem_id": f"p{i}",
            "sample": 0,
            "source": source,
            "c": c,
            "a": a,
            "text": "...",
        }
        for i, (c, a) in enumerate(zip(confs, corrects, strict=True))
    ]


# accuracies by (run, set); confidences are arbitrary but fixed
CREDO_CORRECT = {
    ("credo-s1", "math500"): [1, 1, 1, 0],
    ("credo-s1", "aime24"): [1, 0, 0, 0],
    ("credo-s1", "lcb_v6"): [1, 0, 0, 0],
    ("credo-s2", "math500"): [1, 1, 1, 1],
    ("credo-s2", "aime24"): [1, 1, 0, 0],
    ("credo-s2", "lcb_v6"): [0, 1, 1, 0],
}
GRPO_CORRECT = {
    ("grpo-s1", "math500"): [1, 1, 0, 0],
    ("grpo-s1", "aime24"): [0, 0, 0, 1],
    ("grpo-s1", "lcb_v6"): [1, 0, 0, 0],
    ("grpo-s2", "math500"): [1, 1, 1, 0],
    ("grpo-s2", "aime24"): [1, 0, 0, 0],
    ("grpo-s2", "lcb_v6"): [1, 1, 0, 0],
}


@pytest.fixture
def records():
    out = []
    for (run, set_name), correct in CREDO_CORRECT.items():
        seed = int(run[-1])
        out += pool_records(run, "CREDO", seed, "math", set_name, "readout", [0.91, 0.73, 0.42, 0.18], correct)
    for (run, set_name), correct in GRPO_CORRECT.items():
        seed = int(run[-1])
        verbalized = [0.9, 0.9, 0.8, 0.9]
        if (run, set_name) == ("grpo-s1", "math500"):
            verbalized[3] = None  # one parse failure
        out += pool_records(run, "GRPO", seed, "math", set_name, "verbalized", verbalized, correct)
        out += pool_records(run, "GRPO", seed, "math", set_name, "digit", [0.88, 0.71, 0.64, 0.52], correct)
    out += pool_records("base-e1", "Base", None, None, "math500", "verbalized", [0.9, 0.8, 0.9, 0.7], [1, 0, 1, 0])
    return out


def find(entries, **where):
    hits = [e for e in entries if all(e[k] == v for k, v in where.items())]
    assert len(hits) == 1, (where, len(hits))
    return hits[0]


def test_aggregate_means_stds_and_parse_failures(records):
    agg = report.aggregate(records)
    json.dumps(agg, allow_nan=False)

    # per (row, run, set): the parse failure is counted, acc still over all four samples
    fail = find(agg["per_run"], row="GRPO", run="grpo-s1", set="math500")
    assert fail["values"]["n_samples"] == 4 and fail["values"]["n_parse_fail"] == 1
    assert fail["values"]["parse_fail"] == 0.25 and fail["values"]["n"] == 3
    assert fail["values"]["acc"] == 0.5
    assert fail["values"]["ece"] == calibration_metrics([0.9, 0.9, 0.8], [1, 1, 0])["ece"]
    assert find(agg["per_run"], row="GRPO-d", run="grpo-s1", set="math500")["values"]["parse_fail"] == 0.0

    # per (row, set): CREDO on MATH-500, acc .75 and 1.0 -> mean .875, sample std .25 / sqrt 2
    credo_math500 = find(agg["per_set"], row="CREDO", scope="in", set="math500")
    assert credo_math500["mean"]["acc"] == pytest.approx(0.875)
    assert credo_math500["std"]["acc"] == pytest.approx(0.25 / math.sqrt(2))
    grpo_math500 = find(agg["per_set"], row="GRPO", scope="in", set="math500")
    assert grpo_math500["mean"]["parse_fail"] == pytest.approx(0.125)

    # per (row, domain): macro over sets per run (.5, .75), then across runs
    credo_math = find(agg["per_domain"], row="CREDO", scope="in", domain="math")
    assert credo_math["sets"] == ["math500", "aime24"] and credo_math["runs"] == ["credo-s1", "credo-s2"]
    assert credo_math["mean"]["acc"] == pytest.approx(0.625)
    assert credo_math["std"]["acc"] == pytest.approx(0.25 / math.sqrt(2))
    per_run_ece = [
        np.mean([find(agg["per_run"], row="CREDO", run=r, set=s)["values"]["ece"] for s in ("math500", "aime24")])
        for r in ("credo-s1", "credo-s2")
    ]
    assert credo_math["mean"]["ece"] == pytest.approx(np.mean(per_run_ece))
    assert credo_math["std"]["ece"] == pytest.approx(np.std(per_run_ece, ddof=1))

    # the code set is out of domain for math-trained runs: acc .25 and .5
    credo_code = find(agg["per_domain"], row="CREDO", scope="out", domain="code")
    assert credo_code["mean"]["acc"] == pytest.approx(0.375)
    # digit and verbalized rows share accuracy; GRPO math parse-fail = mean over runs of macro (.125, 0)
    grpo_math = find(agg["per_domain"], row="GRPO", scope="in", domain="math")
    grpo_d_math = find(agg["per_domain"], row="GRPO-d", scope="in", domain="math")
    assert grpo_math["mean"]["acc"] == grpo_d_math["mean"]["acc"]
    assert grpo_math["mean"]["parse_fail"] == pytest.approx(0.0625)
    assert grpo_d_math["mean"]["parse_fail"] == 0.0

    # one run (Base, untrained: in domain): std None
    base = find(agg["per_domain"], row="Base", scope="in", domain="math")
    assert base["mean"]["acc"] == 0.5 and base["std"]["acc"] is None
    assert not [e for e in agg["per_domain"] if e["row"] == "Base" and e["scope"] == "out"]

    # table order: Base, GRPO, GRPO-d, CREDO
    assert [e["row"] for e in agg["per_domain"] if e["scope"] == "in"] == ["Base", "GRPO", "GRPO-d", "CREDO"]


def test_pool_with_no_parsed_confidence_keeps_accuracy():
    pool = pool_records("r", "RLCR", 1, "math", "amc23", "verbalized", [None, None, None], [1, 0, 1])
    values = report.pool_metrics(pool)
    assert values["acc"] == pytest.approx(2 / 3) and values["parse_fail"] == 1.0 and values["n"] == 0
    assert values["ece"] is None and values["auroc"] is None and values["thr"] is None
    agg = report.aggregate(pool)
    assert agg["per_domain"][0]["mean"]["ece"] is None and agg["per_domain"][0]["mean"]["acc"] == pytest.approx(2 / 3)


def test_write_tables_writes_every_file_without_nan(records, tmp_path):
    agg = report.aggregate(records)
    written = report.write_tables(agg, tmp_path)
    expected = {
        "main.md",
        "main.csv",
        "main.json",
        "selective.md",
        "selective.csv",
        "selective.json",
        "collapse.md",
        "collapse.csv",
        "collapse.json",
        "aggregate.json",
    }
    expected |= {f"perset_{d}_{s}.{ext}" for d in ("math", "code") for s in ("in", "out") for ext in ("md", "csv")}
    assert {p.name for p in written} == expected
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert text.strip() and "nan" not in text.lower(), path.name

    main_md = (tmp_path / "main.md").read_text(encoding="utf-8")
    assert "| CREDO | .625 ± .177 |" in main_md  # acc .625, sample std .1768
    assert "## In domain" in main_md and "## Out of domain" in main_md
    out_section = main_md.split("## Out of domain")[1]
    credo_out = next(line for line in out_section.splitlines() if line.startswith("| CREDO |"))
    assert credo_out.split(" | ")[1] == "–" and "| .375 ± .177 |" in credo_out  # no math cell; code acc .25, .5

    with open(tmp_path / "main.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    credo_in = next(r for r in rows if r["row"] == "CREDO" and r["section"] == "In domain")
    assert float(credo_in["math_acc_mean"]) == pytest.approx(0.625)
    base_in = next(r for r in rows if r["row"] == "Base")
    assert base_in["math_acc_std"] == "" and base_in["code_acc_mean"] == ""

    main_json = json.loads((tmp_path / "main.json").read_text(encoding="utf-8"))
    credo_json = next(r for r in main_json["rows"] if r["row"] == "CREDO" and r["section"] == "In domain")
    assert credo_json["math"]["acc"]["mean"] == pytest.approx(0.625) and credo_json["code"] is None

    perset = (tmp_path / "perset_math_in.md").read_text(encoding="utf-8")
    assert "MATH-500" in perset and "AIME-24" in perset and "Average" in perset
    assert "| CREDO | .875 ± .177 |" in perset
    assert "_No runs._" in (tmp_path / "perset_math_out.md").read_text(encoding="utf-8")
    assert "Thr." in (tmp_path / "selective.md").read_text(encoding="utf-8")
    assert "Tie tax" in (tmp_path / "collapse.md").read_text(encoding="utf-8")


def test_aggregate_rejects_inconsistent_records(records):
    with pytest.raises(ValueError, match="no records"):
        report.aggregate([])
    duplicate = records + [dict(records[0])]
    with pytest.raises(ValueError, match="duplicate sample"):
        report.aggregate(duplicate)
    other_method = records + [dict(records[0], method="GRPO", problem_id="extra")]
    with pytest.raises(ValueError, match="credo-s1"):
        report.aggregate(other_method)
    two_channels = records + [dict(records[0], source="verbalized", problem_id="extra")]
    with pytest.raises(ValueError, match="mixes the sources"):
        report.aggregate(two_channels)
    missing_set = [r for r in records if not (r["run"] == "credo-s2" and r["set"] == "aime24")]
    with pytest.raises(ValueError, match="same sets"):
        report.aggregate(missing_set)
    with pytest.raises(ValueError, match="math set"):
        report.aggregate([dict(records[0], set_domain="code")])
    with pytest.raises(ValueError, match="source"):
        report.aggregate([dict(records[0], source="sampled")])
    with pytest.raises(ValueError, match=r"c must be"):
        report.aggregate([dict(records[0], c=float("nan"))])
    with pytest.raises(ValueError, match="missing keys"):
        report.aggregate([{k: v for k, v in records[0].items() if k != "text"}])


def test_read_samples_round_trip(records, tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    assert report.read_samples(path) == records


def test_table_cells_format():
    assert report.format_cell(0.7523, 0.0131, "acc") == ".752 ± .013"
    assert report.format_cell(1.0, 0.0, "acc") == "1.000 ± .000"
    assert report.format_cell(0.0262, 0.0004, "aurc") == "2.62 ± 0.04"
    assert report.format_cell(372.0, 4.6, "thr") == "372 ± 5"
    assert report.format_cell(3.214, None, "effective_levels") == "3.21"
    assert report.format_cell(None, None, "ece") == "–"


# Figures ---------------------------------------------------------------------------------


def test_make_figures_writes_png_and_pdf(records, tmp_path):
    written, failed = figures.make_figures(records, tmp_path)
    assert failed == {}
    names = {p.name for p in written}
    for kind in ("reliability", "collapse", "riskcov"):
        for scope, domain in (("in", "math"), ("out", "code")):
            assert {f"{kind}_{domain}_{scope}.png", f"{kind}_{domain}_{scope}.pdf"} <= names
    assert not any("code_in" in n or "math_out" in n for n in names)  # no records there
    for path in written:
        assert path.exists() and path.stat().st_size > 1000, path.name
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written if p.suffix == ".png")


def test_report_with_all_correct_and_all_wrong_bins(tmp_path, capsys):
    """Pools whose confident bins are all right and unconfident bins all wrong (common at
    the ends of a calibrated model): every table and figure is written, exit status 0."""
    confident = pool_records(
        "credo-s1",
        "CREDO",
        1,
        "math",
        "math500",
        "readout",
        [0.95] * 40 + [0.05] * 40 + [0.5] * 20,
        [1] * 40 + [0] * 40 + [1, 0] * 10,
    )
    hedged = pool_records("grpo-s1", "GRPO", 1, "math", "math500", "verbalized", [0.9] * 30, [1] * 30)
    records = confident + hedged
    assert ev.report(records, tmp_path) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert {
        "main.md",
        "main.csv",
        "main.json",
        "reliability_math_in.png",
        "collapse_math_in.pdf",
        "riskcov_math_in.png",
    } <= names
    points = reliability_points([r["c"] for r in confident], [r["a"] for r in confident])
    assert points[0]["acc"] == 0.0 and points[-1]["acc"] == 1.0  # an all-wrong and an all-right bin
    assert all(p["lo"] <= p["acc"] <= p["hi"] for p in points)


def test_a_failing_figure_keeps_the_tables_and_the_other_figures(records, tmp_path, capsys):
    (tmp_path / "reliability_math_in.png").mkdir()  # this figure cannot be saved
    assert ev.report(records, tmp_path) == 1
    err = capsys.readouterr().err
    assert "figure reliability_math_in failed (IsADirectoryError" in err
    assert (tmp_path / "main.md").stat().st_size > 0
    assert (tmp_path / "collapse_math_in.png").exists() and (tmp_path / "riskcov_code_out.pdf").exists()
    assert (tmp_path / "reliability_code_out.png").exists()


def test_figure_pools_use_each_methods_own_channel(records):
    pools = figures.figure_pools(records, "math", "in")
    assert list(pools) == ["Base", "GRPO", "CREDO"]  # no -d rows
    conf, correct = pools["GRPO"]
    assert conf.size == 15 and correct.size == 15  # 2 runs x 2 sets x 4, one unparsed


def test_the_collapse_figure_s_caption_never_overlaps_a_bar(tmp_path, monkeypatch):
    """A pool piled on one low value (a bar under the caption's corner) and a spread one: in each
    panel the caption's box and every bar's box, as drawn, do not meet."""
    overlapping = {}
    original = figures._save_and_close

    def check_then_save(plt, fig, stem):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            for caption in [t for t in ax.texts if t.get_text().startswith("eff. levels")]:
                box = caption.get_window_extent(renderer)
                overlapping[ax.get_title()] = [
                    p for p in ax.patches if p.get_height() > 0 and p.get_window_extent(renderer).overlaps(box)
                ]
        return original(plt, fig, stem)

    monkeypatch.setattr(figures, "_save_and_close", check_then_save)
    rng = np.random.default_rng(0)
    pools = {
        "piled": (np.full(200, 0.05), rng.integers(0, 2, 200)),
        "spread": (rng.random(200), rng.integers(0, 2, 200)),
    }
    figures.plot_collapse(pools, tmp_path / "collapse", "collapse")
    assert overlapping == {"piled": [], "spread": []}
