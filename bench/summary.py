"""The benchmark table of docs/results.md, rendered from the JSON each benchmark writes.

    .venv/bin/python bench/summary.py [--write-docs docs/results.md ...]

writes bench/results/summary.md: one row per result of ROWS, each with what it measures, the
command that regenerates it (the JSON's own "command", runnable as printed), its headline figures
(read from the JSON, never typed), the machine the JSON records, and the date and commit of the
JSON's last commit (`git log -1 -- <file>`; "not committed" while the file differs from it, so
commit a new result before rendering). `--write-docs` then refreshes the include blocks of those
docs (bench/includes.py). The full figures stay in the JSONs and docs/performance.md.

`stale` names each result older than the last commit to the code it measures (MEASURES);
tests/test_summary.py holds the committed results to it, so a change to measured code lands
with its benchmark re-run.
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
        with_pass = ""
        if m.get("speedup_pass_vs_reference"):
            with_pass = f" (with credit_confidence=trainer's pass: {m['speedup_pass_vs_reference']:.2f}x the reference)"
        parts.append(f"{name} ({shape}): **{m['speedup_vs_reference']:.2f}x** the reference, {trl}{with_pass}")
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


def credit_source(r: dict) -> tuple[str, str]:
    parts = []
    for name, m in r["by_config"].items():
        parts.append(
            f"{name}: |c_engine - c_trainer| max {m['c_gap_max']:.1e}, training phase "
            f"**{m['train_phase_engine_vs_trainer']:.2f}x**, step {m['step_engine_vs_trainer']:.2f}x"
        )
    what = "credit's c read by the engine at each slot against the trainer's no-grad pass, real training runs"
    return what, "; ".join(parts)


def lora_memory(r: dict) -> tuple[str, str]:
    rows = r["rows"]
    commits = list(dict.fromkeys(row["commit"] for row in rows))  # this commit, then the one before
    parts = []
    for name in dict.fromkeys(row["model"] for row in rows):
        for use_lora, use_kl in ((True, True), (True, False), (False, True)):
            cell = [row for row in rows if (row["model"], row["lora"], row["kl"]) == (name, use_lora, use_kl)]
            by_commit = {row["commit"]: row for row in cell}
            if len(by_commit) < 2:
                continue
            now, before = (by_commit[c] for c in commits[:2])
            label = f"{name} {'LoRA' if use_lora else 'full'}{' + KL' if use_kl else ''}"
            parts.append(
                f"{label}: peak {before['peak_mib']:,.0f} -> **{now['peak_mib']:,.0f} MiB**, "
                f"step {before['step_s']:.2f} -> {now['step_s']:.2f} s"
            )
    what = "peak memory (CPU resident set above the libraries) and time of one update, LoRA and KL on and off"
    return what, f"{commits[-1]} -> {commits[0]}: " + "; ".join(parts)


# What docs/results.md reports: the result file's stem, and how its row reads the JSON.
ROWS: dict[str, Callable[[dict], tuple[str, str]]] = {
    "logprobs_cpu": logprobs,
    "step_cpu": step,
    "padding": padding,
    "rollout_cpu": rollout,
    "verifier": verifier,
    "credit_source_cpu": credit_source,
    "lora_cpu": lora_memory,
}


# The code each result of ROWS measures (paths from the repository root; a folder: everything in
# it): a commit to any of them after the result's own last commit makes the result stale.
MEASURES: dict[str, tuple[str, ...]] = {
    "logprobs_cpu": ("kernels/logprobs.py", "bench/bench_logprobs.py"),
    "step_cpu": (
        "credo.py",
        "policy.py",
        "adapters",
        "losses.py",
        "methods.py",
        "confidence.py",
        "kernels",
        "bench/bench_step.py",
        "bench/trl_step_worker.py",
    ),
    "padding": ("kernels/packing.py", "bench/bench_padding.py"),
    "rollout_cpu": ("engine.py", "rollout.py", "adapters", "bench/bench_rollout.py"),
    "verifier": ("verifier.py", "grading", "bench/bench_verifier.py"),
    "credit_source_cpu": (
        "credo.py",
        "engine.py",
        "policy.py",
        "confidence.py",
        "adapters",
        "bench/bench_credit_source.py",
    ),
    "lora_cpu": (
        "credo.py",
        "policy.py",
        "adapters",
        "losses.py",
        "methods.py",
        "confidence.py",
        "kernels",
        "bench/bench_step.py",
        "bench/bench_lora.py",
    ),
}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if done.returncode:
        raise ValueError(f"git {' '.join(args)} failed in {root}: {done.stderr.strip()}")
    return done.stdout.strip()


def stale(results: Path = RESULTS, root: Path = ROOT) -> list[str]:
    """One line for each result of MEASURES that is not committed, or whose last commit is older
    than a commit to the code it measures, naming that commit and the command to re-run."""
    found = []
    for name, paths in MEASURES.items():
        result = results / f"{name}.json"
        relative = str(result.relative_to(root))
        measured = _git(root, "log", "-1", "--format=%H", "--", relative)
        if not measured or _git(root, "status", "--porcelain", "--", relative):
            found.append(f"{name}: {relative} is not committed as it is")
            continue
        later = _git(root, "log", "--format=%h %s", f"{measured}..HEAD", "--", *paths).splitlines()
        if later:
            rerun = command(json.loads(result.read_text()))
            found.append(
                f"{name}: measured at {measured[:7]}, but {len(later)} later commit(s) changed {', '.join(paths)} "
                f"(the latest: {later[0]}); re-run {rerun} and commit its result"
            )
    return found


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
