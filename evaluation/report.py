"""Evaluation records and the paper's tables: from per-sample records to `tab:main`,
`tab:riskcov`, the per-set tables of `app:perset` and the collapse numbers.

Holds: the record schema (`validate_record`), the aggregation per (row, run, set), per
(row, set) and per (row, domain) with the spread across runs, and the Markdown/CSV/JSON
writers. Does not hold: the metrics of one pool (metrics.py), figures (evaluation/figures.py), nor
generation and scoring (eval.py).

Records, seeds, domains: see `validate_record` and `aggregate`. A record whose confidence
could not be parsed (`c` is None) counts towards accuracy and the parse-failure rate, and is
left out of every calibration metric. Spread across runs is the *sample* standard deviation
(ddof = 1); with one run it is None and the tables print the mean alone.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

import confidence
from evaluation.evalsets import EVAL_SETS, SET_TITLES
from metrics import METRIC_KEYS, calibration_metrics
from rollout import DOMAINS

DOMAIN_TITLES = {"math": "Mathematics", "code": "Code"}
SCOPES = ("in", "out")
SCOPE_TITLES = {"in": "In domain", "out": "Out of domain"}


def sources() -> tuple[str, ...]:
    """The label of every registered confidence read (confidence.py): what a record's source may be
    (the paper's readout, verbalized and digit, and a fork's own)."""
    return tuple(read.label for read in confidence.READS.values())


RECORD_KEYS = (
    "run",
    "method",
    "seed",
    "train_domain",
    "set",
    "set_domain",
    "problem_id",
    "sample",
    "source",
    "c",
    "a",
    "text",
)
# The paper's row order (tab:main); rows not listed follow in alphabetical order.
ROW_ORDER = ("Base", "GRPO", "RLCR", "DCPO", "Base-d", "GRPO-d", "RLCR-d", "DCPO-d", "CREDO", "CREDO-d")
# Metrics averaged across sets and runs (`n`, a count, is kept per run only).
AVERAGED_METRICS = (*(key for key in METRIC_KEYS if key != "n"), "parse_fail")


def read_samples(path) -> list[dict]:
    """Records from a `samples.jsonl` file (one JSON object per line; blank lines skipped)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{line_no}: not a JSON object ({err})") from None
    return records


def validate_record(record: dict, where: str = "record") -> None:
    """Check one per-sample record; raise ValueError naming the field that is wrong.

    Schema: run (str, checkpoint label), method (str: CREDO, GRPO, RLCR, DCPO,
    Base, ...), seed (int or None), train_domain ("math", "code", or None for
    an untrained model), set (str), set_domain ("math" or "code"), problem_id
    (str), sample (int), source (a registered read's label: "readout", "verbalized", "digit", ...), c (float
    in [0, 1], or None for a parse failure), a (0 or 1; bools are accepted),
    text (str).
    """
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        raise ValueError(f"{where}: missing keys {missing}")
    for key in ("run", "method", "set", "problem_id", "text"):
        if not isinstance(record[key], str):
            raise ValueError(f"{where}: {key} must be a string, got {record[key]!r}")
    if record["seed"] is not None and (isinstance(record["seed"], bool) or not isinstance(record["seed"], int)):
        raise ValueError(f"{where}: seed must be an int or None, got {record['seed']!r}")
    if isinstance(record["sample"], bool) or not isinstance(record["sample"], int):
        raise ValueError(f"{where}: sample must be an int, got {record['sample']!r}")
    if record["train_domain"] not in (*DOMAINS, None):
        raise ValueError(f"{where}: train_domain must be 'math', 'code' or None, got {record['train_domain']!r}")
    if record["set_domain"] not in DOMAINS:
        raise ValueError(f"{where}: set_domain must be 'math' or 'code', got {record['set_domain']!r}")
    known = EVAL_SETS.get(record["set"])
    if known is not None and known["domain"] != record["set_domain"]:
        raise ValueError(
            f"{where}: set {record['set']!r} is a {known['domain']} set (tab:data), "
            f"but the record says set_domain={record['set_domain']!r}"
        )
    if record["source"] not in sources():
        raise ValueError(
            f"{where}: source must be a registered read's label, one of {sources()}, got {record['source']!r}"
        )
    if record["a"] not in (0, 1):  # True/False compare equal to 1/0
        raise ValueError(f"{where}: a must be 0 or 1, got {record['a']!r}")
    c = record["c"]
    if c is not None:
        if isinstance(c, bool) or not isinstance(c, (int, float)) or math.isnan(c) or not 0.0 <= c <= 1.0:
            raise ValueError(f"{where}: c must be a number in [0, 1] or None (parse failure), got {c!r}")


def row_label(method: str, source: str) -> str:
    """Table row of a (method, confidence source): the method's own name for its channel's own
    read (the readout, or the verbalized numeral: `confidence: auto`), `<method>-d` for the digit
    expectation (`eq:digitexp`, the paper's rows), `<method> (<label>)` for any other read.

    >>> row_label("GRPO", "verbalized"), row_label("GRPO", "digit"), row_label("CREDO", "readout")
    ('GRPO', 'GRPO-d', 'CREDO')
    """
    reads = {read.label: read for read in confidence.READS.values()}
    if source not in reads:
        raise ValueError(
            f"unknown confidence source {source!r}; expected a registered read's label, one of {sources()}"
        )
    if reads[source].auto:
        return method
    return f"{method}-d" if source == "digit" else f"{method} ({source})"


def record_scope(record: dict) -> str:
    """Scope of a record: "in" when the set's domain is the training domain, else
    "out"; an untrained model (train_domain None) is in domain everywhere (`tab:main`).

    >>> record_scope({"train_domain": "math", "set_domain": "code"})
    'out'
    >>> record_scope({"train_domain": None, "set_domain": "code"})
    'in'
    """
    train = record["train_domain"]
    return "in" if train is None or train == record["set_domain"] else "out"


def row_sort_key(row: str):
    return (ROW_ORDER.index(row), "") if row in ROW_ORDER else (len(ROW_ORDER), row)


def _set_sort_key(name: str):
    order = list(EVAL_SETS)
    return (order.index(name), "") if name in order else (len(order), name)


def pool_metrics(records: list[dict]) -> dict:
    """Metrics of one pool of records: `calibration_metrics` on the parsed samples,
    accuracy on all of them, and the parse-failure rate.

    Returns every key of `calibration_metrics` plus n_samples, n_parse_fail and
    parse_fail. `acc` counts every sample (a sample whose confidence did not
    parse was still answered); `n` counts the parsed samples the calibration
    metrics use. With no parsed sample the calibration metrics are None.
    """
    if not records:
        raise ValueError("empty pool: no records to score")
    correct = np.array([float(r["a"]) for r in records])
    parsed = [r for r in records if r["c"] is not None]
    if parsed:
        values = calibration_metrics([r["c"] for r in parsed], [r["a"] for r in parsed])
    else:
        values = {key: None for key in METRIC_KEYS} | {"n": 0}
    values["acc"] = float(correct.mean())
    values["n_samples"] = len(records)
    values["n_parse_fail"] = len(records) - len(parsed)
    values["parse_fail"] = values["n_parse_fail"] / len(records)
    return values


def mean_and_std(values: list) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof = 1) across runs.

    The std is None with a single value (no spread to estimate); any None
    among the values (a metric undefined for one run) makes both None.

    >>> mean_and_std([0.5, 0.7])
    (0.6, 0.141421356237)
    >>> mean_and_std([0.5]), mean_and_std([0.5, None])
    ((0.5, None), (None, None))
    """
    if not values:
        raise ValueError("no values to average")
    if any(v is None for v in values):
        return None, None
    arr = np.asarray(values, dtype=np.float64)
    std = round(float(arr.std(ddof=1)), 12) if arr.size >= 2 else None
    return round(float(arr.mean()), 12), std


def _macro_average(per_set: list[dict]) -> dict:
    """Average of each AVERAGED_METRICS entry over a run's sets (None if undefined on any set)."""
    out = {}
    for metric in AVERAGED_METRICS:
        values = [v[metric] for v in per_set]
        out[metric] = None if any(v is None for v in values) else float(np.mean(values))
    return out


def _group_records(records: list[dict]) -> dict:
    """Validate records and group them by (row, run, set), checking cross-record consistency."""
    if not records:
        raise ValueError("no records to aggregate")
    runs: dict[str, tuple] = {}
    set_domains: dict[str, str] = {}
    seen: set[tuple] = set()
    groups: dict[tuple, list] = {}
    group_source: dict[tuple, str] = {}
    for i, record in enumerate(records):
        where = (
            f"record {i} (run {record.get('run')!r}, set {record.get('set')!r})"
            if isinstance(record, dict)
            else f"record {i}"
        )
        validate_record(record, where)
        identity = (record["method"], record["seed"], record["train_domain"])
        if runs.setdefault(record["run"], identity) != identity:
            raise ValueError(
                f"{where}: run {record['run']!r} was (method, seed, train_domain) = "
                f"{runs[record['run']]} in earlier records, {identity} here"
            )
        if set_domains.setdefault(record["set"], record["set_domain"]) != record["set_domain"]:
            raise ValueError(f"{where}: set {record['set']!r} has two domains in the records")
        sample_id = (record["run"], record["set"], record["problem_id"], record["sample"], record["source"])
        if sample_id in seen:
            raise ValueError(f"{where}: duplicate sample (run, set, problem_id, sample, source) = {sample_id}")
        seen.add(sample_id)
        key = (row_label(record["method"], record["source"]), record["run"], record["set"])
        if group_source.setdefault(key, record["source"]) != record["source"]:
            raise ValueError(
                f"{where}: row {key[0]!r} of run {key[1]!r} mixes the sources "
                f"{group_source[key]!r} and {record['source']!r}; one row is one channel"
            )
        groups.setdefault(key, []).append(record)
    return groups


def aggregate(records: list[dict]) -> dict:
    """Metrics per (row, run, set), then mean/std across runs per (row, set) and per (row, domain).

    Rows are `row_label(method, source)`. Every level is split by scope: "in"
    (set_domain == train_domain, or an untrained model) and "out". Per domain,
    each run is first macro-averaged over that domain's sets (every set
    weighs the same, as in `tab:main`), then the runs are averaged; every run
    of a (row, scope, domain) must cover the same sets (ValueError otherwise,
    so that an average never mixes different set lists). Across runs the
    spread is the sample std (ddof = 1), None with one run; a metric that is
    None for any run or set (AUROC on a one-class pool) is None at that level.

    Returns a JSON-serialisable dict:
      per_run:    [{row, method, source, run, seed, train_domain, scope, set, set_domain, values}]
                  (values = `pool_metrics`: the metrics, n_samples, n_parse_fail, parse_fail)
      per_set:    [{row, scope, set, set_domain, runs, mean, std}]
      per_domain: [{row, scope, domain, runs, sets, mean, std}]
    mean/std map each AVERAGED_METRICS name to a float or None. Lists are in
    table order (rows as `ROW_ORDER`, sets as `EVAL_SETS`).
    """
    groups = _group_records(records)
    per_run = []
    for (row, run, set_name), pool in sorted(
        groups.items(), key=lambda kv: (row_sort_key(kv[0][0]), kv[0][1], _set_sort_key(kv[0][2]))
    ):
        first = pool[0]
        per_run.append(
            {
                "row": row,
                "method": first["method"],
                "source": first["source"],
                "run": run,
                "seed": first["seed"],
                "train_domain": first["train_domain"],
                "scope": record_scope(first),
                "set": set_name,
                "set_domain": first["set_domain"],
                "values": pool_metrics(pool),
            }
        )

    by_set: dict[tuple, list] = {}
    for entry in per_run:
        by_set.setdefault((entry["row"], entry["scope"], entry["set"]), []).append(entry)
    per_set = []
    for (row, scope, set_name), entries in by_set.items():
        summary = {m: mean_and_std([e["values"][m] for e in entries]) for m in AVERAGED_METRICS}
        per_set.append(
            {
                "row": row,
                "scope": scope,
                "set": set_name,
                "set_domain": entries[0]["set_domain"],
                "runs": [e["run"] for e in entries],
                "mean": {m: s[0] for m, s in summary.items()},
                "std": {m: s[1] for m, s in summary.items()},
            }
        )
    per_set.sort(key=lambda e: (row_sort_key(e["row"]), e["scope"], _set_sort_key(e["set"])))

    by_domain: dict[tuple, dict] = {}
    for entry in per_run:
        key = (entry["row"], entry["scope"], entry["set_domain"])
        by_domain.setdefault(key, {}).setdefault(entry["run"], {})[entry["set"]] = entry["values"]
    per_domain = []
    for (row, scope, domain), run_sets in by_domain.items():
        set_lists = {run: sorted(sets, key=_set_sort_key) for run, sets in run_sets.items()}
        reference_run, reference = next(iter(set_lists.items()))
        for run, sets in set_lists.items():
            if sets != reference:
                raise ValueError(
                    f"row {row!r} ({scope} domain, {domain}): run {run!r} covers sets {sets} "
                    f"but run {reference_run!r} covers {reference}; a domain average needs "
                    "every run on the same sets"
                )
        run_averages = [_macro_average(list(sets.values())) for sets in run_sets.values()]
        summary = {m: mean_and_std([avg[m] for avg in run_averages]) for m in AVERAGED_METRICS}
        per_domain.append(
            {
                "row": row,
                "scope": scope,
                "domain": domain,
                "runs": list(run_sets),
                "sets": reference,
                "mean": {m: s[0] for m, s in summary.items()},
                "std": {m: s[1] for m, s in summary.items()},
            }
        )
    per_domain.sort(key=lambda e: (row_sort_key(e["row"]), e["scope"], DOMAINS.index(e["domain"])))
    return {"per_run": per_run, "per_set": per_set, "per_domain": per_domain}


# ============================================================================================
# Tables: tab:main, the per-set tables of app:perset, tab:riskcov, and the collapse numbers
# ============================================================================================

MISSING = "–"
TABLE_METRICS = (
    ("acc", "Acc ↑"),
    ("ece", "ECE ↓"),
    ("auroc", "AUROC ↑"),
    ("brier", "Brier ↓"),
    ("parse_fail", "Parse fail ↓"),
)
SELECTIVE_METRICS = (
    ("aurc", "AURC (%) ↓"),
    ("acc@50", "acc@50 ↑"),
    ("acc@80", "acc@80 ↑"),
    ("acc@90", "acc@90 ↑"),
    ("thr", "Thr. ↑"),
)
COLLAPSE_METRICS = (("effective_levels", "Effective levels ↑"), ("top_share", "Top share ↓"), ("tie_tax", "Tie tax ↓"))
PERSET_BLOCKS = (
    ("acc", "Accuracy ↑"),
    ("ece", "ECE ↓"),
    ("auroc", "AUROC ↑"),
    ("brier", "Brier ↓"),
    ("parse_fail", "Parse failures ↓"),
)


def _format_number(x: float, metric: str) -> str:
    """One number in the paper's style: .752 for rates, 2.62 for AURC in %, 372 for Thr., 3.21 for levels."""
    if metric == "aurc":
        return f"{100 * x:.2f}"
    if metric == "thr":
        return f"{x:.0f}"
    if metric == "effective_levels":
        return f"{x:.2f}"
    text = f"{x:.3f}"
    return text[1:] if text.startswith("0.") else text


def format_cell(mean: float | None, std: float | None, metric: str) -> str:
    """A Markdown cell: 'mean ± std' in the paper's style, the mean alone with one run, '–' when missing.

    >>> format_cell(0.7523, 0.0131, "acc"), format_cell(0.0262, 0.0004, "aurc"), format_cell(None, None, "ece")
    ('.752 ± .013', '2.62 ± 0.04', '–')
    >>> format_cell(372.0, None, "thr")
    '372'
    """
    if mean is None:
        return MISSING
    if std is None:
        return _format_number(mean, metric)
    return f"{_format_number(mean, metric)} ± {_format_number(std, metric)}"


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _csv_number(x: float | None) -> str:
    return "" if x is None else repr(float(x))


def _write_text(path: Path, text: str, written: list) -> None:
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    written.append(path)


def _write_csv(path: Path, header: list[str], rows: list[list[str]], written: list) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    written.append(path)


def _domain_index(agg: dict) -> dict:
    return {(e["row"], e["scope"], e["domain"]): e for e in agg["per_domain"]}


def _rows_in(agg: dict, scope: str, domain: str | None = None) -> list[str]:
    rows = {e["row"] for e in agg["per_domain"] if e["scope"] == scope and (domain is None or e["domain"] == domain)}
    return sorted(rows, key=row_sort_key)


def _cell_pair(entry: dict | None, metric: str) -> tuple[float | None, float | None]:
    return (None, None) if entry is None else (entry["mean"][metric], entry["std"][metric])


def _write_main(agg: dict, out_dir: Path, written: list) -> None:
    """main.md/.csv/.json in the layout of `tab:main`: sections by scope, column groups by domain."""
    index = _domain_index(agg)
    md_parts = [
        "# Accuracy and calibration (tab:main)",
        "Macro-averaged over each domain's evaluation sets, then mean ± sample std over runs.",
    ]
    md_header = ["Method"] + [f"{DOMAIN_TITLES[d]} {label}" for d in DOMAINS for _, label in TABLE_METRICS]
    csv_header = ["section", "row"] + [
        f"{d}_{m}_{stat}" for d in DOMAINS for m, _ in TABLE_METRICS for stat in ("mean", "std")
    ]
    csv_rows, json_rows = [], []
    for scope in SCOPES:
        rows = _rows_in(agg, scope)
        md_parts.append(f"## {SCOPE_TITLES[scope]}")
        if not rows:
            md_parts.append("_No runs._")
            continue
        md_rows = []
        for row in rows:
            md_cells, csv_cells, json_row = (
                [row],
                [SCOPE_TITLES[scope], row],
                {"section": SCOPE_TITLES[scope], "row": row},
            )
            for domain in DOMAINS:
                entry = index.get((row, scope, domain))
                json_row[domain] = None if entry is None else {}
                for metric, _ in TABLE_METRICS:
                    mean, std = _cell_pair(entry, metric)
                    md_cells.append(format_cell(mean, std, metric))
                    csv_cells += [_csv_number(mean), _csv_number(std)]
                    if entry is not None:
                        json_row[domain][metric] = {"mean": mean, "std": std}
            md_rows.append(md_cells)
            csv_rows.append(csv_cells)
            json_rows.append(json_row)
        md_parts.append(_markdown_table(md_header, md_rows))
    _write_text(out_dir / "main.md", "\n\n".join(md_parts), written)
    _write_csv(out_dir / "main.csv", csv_header, csv_rows, written)
    _write_text(out_dir / "main.json", json.dumps({"rows": json_rows}, indent=2), written)


def _write_perset(agg: dict, domain: str, scope: str, out_dir: Path, written: list) -> None:
    """perset_<domain>_<scope>.md/.csv: one block per metric, a column per set and the Average (`app:perset`)."""
    stem = f"perset_{domain}_{scope}"
    sets = sorted({e["set"] for e in agg["per_set"] if e["set_domain"] == domain}, key=_set_sort_key)
    set_index = {(e["row"], e["scope"], e["set"]): e for e in agg["per_set"]}
    domain_index = _domain_index(agg)
    rows = _rows_in(agg, scope, domain)
    title = f"# Per-set results: {DOMAIN_TITLES[domain]}, {SCOPE_TITLES[scope].lower()}"
    md_header = ["Method"] + [SET_TITLES.get(s, s) for s in sets] + ["Average"]
    csv_header = ["metric", "row"] + [f"{s}_{stat}" for s in [*sets, "average"] for stat in ("mean", "std")]
    md_parts, csv_rows = [title, "Mean ± sample std over runs; Average = macro average over the sets."], []
    if not rows:
        md_parts.append("_No runs._")
    for metric, label in PERSET_BLOCKS if rows else ():
        md_rows = []
        for row in rows:
            entries = [set_index.get((row, scope, s)) for s in sets] + [domain_index.get((row, scope, domain))]
            pairs = [_cell_pair(e, metric) for e in entries]
            md_rows.append([row] + [format_cell(m, s, metric) for m, s in pairs])
            csv_rows.append([metric, row] + [_csv_number(x) for pair in pairs for x in pair])
        md_parts += [f"## {label}", _markdown_table(md_header, md_rows)]
    _write_text(out_dir / f"{stem}.md", "\n\n".join(md_parts), written)
    _write_csv(out_dir / f"{stem}.csv", csv_header, csv_rows, written)


def _write_sections(agg: dict, metrics: tuple, stem: str, title: str, out_dir: Path, written: list) -> None:
    """A table with a section per (domain, scope) and a column per metric (`tab:riskcov` layout)."""
    index = _domain_index(agg)
    md_parts = [title, "Per set, then macro-averaged over the domain's sets; mean ± sample std over runs."]
    md_header = ["Method"] + [label for _, label in metrics]
    csv_header = ["domain", "scope", "row"] + [f"{m}_{stat}" for m, _ in metrics for stat in ("mean", "std")]
    csv_rows, json_rows = [], []
    for scope in SCOPES:
        for domain in DOMAINS:
            rows = _rows_in(agg, scope, domain)
            if not rows:
                continue
            md_rows = []
            for row in rows:
                entry = index[(row, scope, domain)]
                pairs = [_cell_pair(entry, m) for m, _ in metrics]
                md_rows.append(
                    [row] + [format_cell(mean, std, m) for (mean, std), (m, _) in zip(pairs, metrics, strict=True)]
                )
                csv_rows.append([domain, scope, row] + [_csv_number(x) for pair in pairs for x in pair])
                json_rows.append(
                    {
                        "domain": domain,
                        "scope": scope,
                        "row": row,
                        **{m: {"mean": mean, "std": std} for (mean, std), (m, _) in zip(pairs, metrics, strict=True)},
                    }
                )
            md_parts += [
                f"## {DOMAIN_TITLES[domain]}, {SCOPE_TITLES[scope].lower()}",
                _markdown_table(md_header, md_rows),
            ]
    if not json_rows:
        md_parts.append("_No runs._")
    _write_text(out_dir / f"{stem}.md", "\n\n".join(md_parts), written)
    _write_csv(out_dir / f"{stem}.csv", csv_header, csv_rows, written)
    _write_text(out_dir / f"{stem}.json", json.dumps({"rows": json_rows}, indent=2), written)


def write_tables(agg: dict, out_dir) -> list[Path]:
    """Write every table of an `aggregate` result under out_dir; return the paths written.

    main.md/.csv/.json                  `tab:main` (with a parse-failure column per domain)
    perset_<math|code>_<in|out>.md/.csv the per-set tables of `app:perset`
    selective.md/.csv/.json             `tab:riskcov`: AURC (%), acc@50/80/90, Thr.
    collapse.md/.csv/.json              `fig:collapse`'s numbers: effective levels, top share, tie tax
    aggregate.json                      the whole `aggregate` result

    Markdown shows '.752 ± .013' ('–' for a missing cell; AURC in percent as
    in `tab:riskcov`); CSV and JSON hold the raw mean and std (AURC as a
    fraction; empty / null when missing), never NaN.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    _write_main(agg, out_dir, written)
    for domain in DOMAINS:
        for scope in SCOPES:
            _write_perset(agg, domain, scope, out_dir, written)
    _write_sections(agg, SELECTIVE_METRICS, "selective", "# Selective prediction (tab:riskcov)", out_dir, written)
    _write_sections(
        agg, COLLAPSE_METRICS, "collapse", "# Collapse of the reported values (fig:collapse)", out_dir, written
    )
    _write_text(out_dir / "aggregate.json", json.dumps(agg, indent=2), written)
    return written


# ============================================================================================
# Figures: fig:reliability (equal-mass bins, Wilson intervals), fig:collapse, fig:riskcov
# ============================================================================================
