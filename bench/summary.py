"""The benchmark table of docs/results.md, rendered from the JSON each benchmark writes.

    .venv/bin/python bench/summary.py [--write-docs docs/results.md ...]

writes bench/results/summary.md: one row per result of ROWS, each with what it measures, the
command that regenerates it (the JSON's own "command", runnable as printed), its headline figures
(read from the JSON, never typed), the machine the JSON records, and the date and commit of the
JSON's last commit (`git log -1 -- <file>`; "not committed" while the file differs from it, so
commit a new result before rendering). `--write-docs` then refreshes the include blocks of those
docs (bench/includes.py). The full figures stay in the JSONs and docs/performance.md.
"""

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import includes  # noqa: E402

RESULTS = ROOT / "bench" / "results"
OUT = RESULTS / "summary.md"
HEADER = "| what | command | result | machine | date, commit |\n|---|---|---|---|---|\n"


def logprobs(r: dict) -> tuple[str, str]:
    seqs = sorted(r["by_seq"], key=int)
    memory = " / ".join(f"{r['by_seq'][s]['peak_mem_ratio']:.3f}" for s in seqs)
    time = " / ".join(f"{r['by_seq'][s]['time_ratio']:.2f}" for s in seqs)
    what = (
        f"the log-prob kernel against naive fp32 `log_softmax` + gather, forward and backward, "
        f"V = {r['vocab']:,}, hidden {r['hidden']}, T = {' / '.join(f'{int(s):,}' for s in seqs)}"
    )
    return what, f"peak memory **{memory}** of the naive path's, time **{time}**"


def step(r: dict) -> tuple[str, str]:
    parts = []
    for name, m in r["by_model"].items():
        trl = f"**{m['speedup_vs_trl']:.2f}x** TRL's" if m.get("speedup_vs_trl") else "TRL not run"
        shape = f"{m['layers']} layers / hidden {m['hidden']} / V {m['vocab']:,}"
        parts.append(f"{name} ({shape}): **{m['speedup_vs_reference']:.2f}x** the reference, {trl}")
    what = "training step without rollout, against a padded full-logits reference and TRL's GRPOTrainer loss path"
    return what + ", equal work checked", "; ".join(parts)


def padding(r: dict) -> tuple[str, str]:
    m = r["math_g8_mb2"]
    layout = f"the paper's math layout, group {m['group']}, micro-batch {m['micro']}, synthetic lengths"
    what = f"padded share of the micro-batches ({layout})"
    return what, f"**{r['pad_fraction']:.0%}** packed (the default); {m['credo_padded_pad_fraction']:.1%} padded"


def rollout(r: dict) -> tuple[str, str]:
    what = (
        f"rollout engines, tiny model ({r['questions']} questions x {r['group_size']}, "
        f"at most {r['max_completion_tokens']} tokens each)"
    )
    figures = f"vLLM {r['vllm_tok_s']:,.0f} tok/s, HF {r['hf_tok_s']:,.0f}: **{r['vllm_vs_hf_tok_s_ratio']:.2f}x**"
    return what, figures


def verifier(r: dict) -> tuple[str, str]:
    math, code = r["math"], r["code"]
    rates = [f"{v['items_per_s']:.0f} items/s with {w} worker{'s' * (w != '1')}" for w, v in math["by_workers"].items()]
    what = f"verifier: math on {math['items']} items, the code sandbox ({code['sandbox_mode']})"
    return what, f"math {', '.join(rates)}; code {code['stdio_1_test_ms']:.0f} ms for one stdio test"


# What docs/results.md reports: the result file's stem, and how its row reads the JSON.
ROWS: dict[str, Callable[[dict], tuple[str, str]]] = {
    "logprobs_cpu": logprobs,
    "step_cpu": step,
    "padding": padding,
    "rollout_cpu": rollout,
    "verifier": verifier,
}


def command(r: dict) -> str:
    """The JSON's command, runnable as printed from the repository root."""
    recorded = r.get("command")
    if not recorded:
        return "not recorded"
    return "`" + (".venv/bin/" + recorded if recorded.startswith("python ") else recorded) + "`"


def machine(r: dict) -> str:
    """The machine as "x86_64 2 cpus", whether the JSON records a string or platform's fields."""
    recorded = r.get("machine", "not recorded")
    if isinstance(recorded, dict):
        return f"{recorded.get('processor', '?')} {recorded.get('cpus', '?')} cpus"
    return recorded


def git_dated(path: Path) -> str:
    """The date and short hash of the last commit of `path`, or "not committed" when it differs from it."""
    git = ["git", "-C", str(path.parent)]
    changed = subprocess.run([*git, "status", "--porcelain", "--", path.name], capture_output=True, text=True)
    last = subprocess.run([*git, "log", "-1", "--format=%cs %h", "--", path.name], capture_output=True, text=True)
    if changed.returncode or last.returncode or changed.stdout.strip() or not last.stdout.strip():
        return "not committed"
    date, commit = last.stdout.split()
    return f"{date}, `{commit}`"


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(results: Path = RESULTS, dated: Callable[[Path], str] = git_dated) -> str:
    """The markdown table of ROWS, read from `results`/<name>.json."""
    lines = []
    for name, row in ROWS.items():
        path = results / f"{name}.json"
        result = json.loads(path.read_text())
        try:
            what, figures = row(result)
        except KeyError as error:
            raise ValueError(f"{path}: no {error} in it; is it {name}'s result?") from None
        cells = (what, command(result), figures, machine(result), dated(path))
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |\n")
    return HEADER + "".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", nargs="*", type=Path, default=[], help="docs whose includes to refresh")
    args = parser.parse_args()
    try:
        OUT.write_text(table())
        print(f"wrote {OUT.relative_to(ROOT)}")
        for doc in args.write_docs:
            text = doc.read_text()
            refreshed = includes.refresh(text, str(doc))
            if refreshed != text:
                doc.write_text(refreshed)
            print(f"{doc}: {'refreshed' if refreshed != text else 'current'}")
    except (OSError, ValueError) as error:
        sys.exit(f"summary: {error}")


if __name__ == "__main__":
    main()
