"""Evaluation: generate on the paper's evaluation sets, grade, read every confidence source,
and write the records, tables and figures (the paper's `app:data`).

    python eval.py --ckpt runs/math-s43 --sets math500,aime24 [--n N] [--temperature 0.7]
    python eval.py --ckpt CREDO=runs/credo-s43,RLCR=runs/rlcr-s43 --sets math500 --out runs/tables/x

Generation goes through the training engine (rollout.make_engine), correctness through
verifier.grade, and c through every read registered for the evaluation prompt (confidence.py),
each by the same forward as training's; a record's source is the read's label:
  readout     the readout prompt's: c = sigmoid(z_H - z_L) at the slot (eq:readout)
  verbalized  the verbalized prompt's: the parsed numeral inside <confidence>...</confidence> (eq:verb)
  digit       on the verbalized prompt: p1 + p0 * E[d] / 10 at the numeral's positions (eq:digitexp)
and any read a fork registers, by its own label. No temperature scaling is applied to any of
them. One record per (sample, source) goes to samples.jsonl; evaluation/report.py aggregates
them into tables and evaluation/figures.py draws the figures.

Holds: checkpoint description, evaluation sets, the generate-grade-read pass and the CLI.
Does not hold: metrics (metrics.py), tables (evaluation/report.py), figures (evaluation/figures.py).
"""

from __future__ import annotations

from infra import startup  # noqa: F401  first: library logging and Ctrl-C, before torch and vLLM load

# isort: split
import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

import confidence
import config
import policy as pol
import problems
import rollout as ro
import verifier
from engine import HFEngine, make_engine, sampling_settings
from evaluation.evalsets import EVAL_SETS
from evaluation.figures import make_figures
from evaluation.report import aggregate, write_tables
from infra.checkpoint import latest_checkpoint
from schema import Config

ROOT = Path(__file__).resolve().parent
DATA_DIR = ROOT / "data"
METHOD_LABELS = {"credo": "CREDO", "grpo": "GRPO", "rlcr": "RLCR", "dcpo": "DCPO"}


@dataclass
class Checkpoint:
    """What eval needs to know about a model directory."""

    path: str
    label: str  # the run's name in tables (method, one line per seed)
    method: str  # table row: CREDO, RLCR, ..., Base
    channel: str  # readout or verbalized
    train_domain: str | None  # None for an untrained base model
    seed: int | None
    cfg: Config


def describe_checkpoint(path: str, channel: str | None, method: str | None, base_config: str = "math") -> Checkpoint:
    """A training checkpoint carries its resolved config.yaml (a run directory stands for its
    latest checkpoint); anything else is a base model, read through the verbalized channel as
    the paper's Base rows are, with the budgets and engine settings of `base_config`."""
    if (Path(path) / "ckpt").is_dir():
        path = str(latest_checkpoint(Path(path)))
    config_file = Path(path) / "config.yaml"
    if not config_file.exists() and Path(path).parent.name == "ckpt":  # the run's, beside ckpt/
        config_file = Path(path).parent.parent / "config.yaml"
    if config_file.exists():
        cfg = config.load_config(str(config_file))
        run = Path(path).resolve().parent.parent.name
        return Checkpoint(
            path,
            f"{run}/{Path(path).name}",
            method or METHOD_LABELS.get(cfg.method, cfg.method),
            channel or ("readout" if cfg.channel.startswith("readout") else "verbalized"),
            cfg.domain,
            cfg.seed,
            cfg,
        )
    cfg = config.load_config(base_config, [f"model={path}"])
    check_positions(path, cfg, base_config)
    return Checkpoint(path, Path(path).name, method or "Base", channel or "verbalized", None, None, cfg)


def check_positions(path: str, cfg: Config, config_name: str) -> None:
    """A base model evaluated with `--config NAME` must hold NAME's prompt + completion budgets in
    its positions (max_position_embeddings of a local config.json; a hub id is not read): vLLM
    refuses a longer max_model_len with a traceback, after loading. The error names the configs
    whose `model` is this one."""
    model_config = Path(path) / "config.json"
    if not model_config.is_file():
        return
    positions = json.loads(model_config.read_text()).get("max_position_embeddings")
    budget = cfg.max_prompt_tokens + cfg.max_completion_tokens
    if positions is None or budget <= positions:
        return
    naming = [
        name
        for name in config.config_names()
        if Path(str(config.load_config(name).model)).resolve() == Path(path).resolve()
    ]
    fix = f"--config {naming[0]}" if naming else "--config with the budgets it was trained with"
    raise ValueError(
        f"--ckpt {path}: --config {config_name} asks for {cfg.max_prompt_tokens} + {cfg.max_completion_tokens} = "
        f"{budget} tokens, more than the model's {positions} positions (max_position_embeddings); pass {fix}"
        + (f" (configs/{naming[0]}.yaml trains this model)" if naming else "")
    )


def resolve_set(spec: str) -> tuple[str, str, Path]:
    """`math500` -> data/math/math500.jsonl (a set of tab:data); `name=path.jsonl:domain` -> any file."""
    if "=" in spec:
        name, rest = spec.split("=", 1)
        path, _, domain = rest.rpartition(":") if rest.endswith((":math", ":code")) else (rest, "", "math")
        return name, domain, Path(path)
    if spec not in EVAL_SETS:
        raise ValueError(
            f"unknown evaluation set {spec!r}; known: {', '.join(EVAL_SETS)} (or name=path.jsonl[:math|:code])"
        )
    domain = EVAL_SETS[spec]["domain"]
    return spec, domain, DATA_DIR / domain / f"{spec}.jsonl"


def load_set(name: str, domain: str, path: Path) -> list[dict]:
    """Rows of an evaluation set: math {"id", "problem", "answer"}, code {"id", "problem", "tests"}."""
    if not path.exists():
        raise FileNotFoundError(f"evaluation set {name!r}: {path} does not exist (prepare the data first)")
    return problems.load_rows(str(path), domain)


def evaluate(
    ckpts: list[Checkpoint],
    sets: list[str],
    n: int | None,
    temperature: float,
    seed: int | None,
    out_dir: Path,
    engine_kind: str,
    workers: int = 4,
) -> list[dict]:
    """Generate, score and read every confidence source; write samples.jsonl; return the records."""
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    specs = [resolve_set(s) for s in sets]
    problem_sets = {name: load_set(name, domain, path) for name, domain, path in specs}
    records, engine, engine_vocab = [], None, None
    samples_path = out_dir / "samples.jsonl"
    with samples_path.open("w") as sink:
        for ckpt in ckpts:
            policy = pol.load_policy(ckpt.path, device, pol.compute_dtype(ckpt.cfg))
            model, tokenizer = policy.model, policy.tokenizer
            model.eval()
            # Generation follows the evaluation channel only (training-time variants such as a
            # sampled slot token or a stop at the slot do not apply).
            cfg = dataclasses.replace(
                ckpt.cfg,
                temperature=temperature,
                engine=engine_kind,
                channel="readout" if ckpt.channel == "readout" else "verbalized",
                confidence="auto",
                conf_train="regression",
            )
            plan = confidence.plan(cfg)
            if engine is None:
                engine = make_engine(cfg, plan, model, tokenizer, ckpt.path, out_dir / "engine", policy.dtype)
                engine_vocab = tokenizer.get_vocab()
            else:  # the next checkpoint goes into the same engine by a weight push
                if tokenizer.get_vocab() != engine_vocab:
                    raise ValueError(
                        f"{ckpt.path} has another tokenizer than {ckpts[0].path}: evaluate it in its own run"
                    )
                if isinstance(engine, HFEngine):
                    engine = HFEngine(model, tokenizer, cfg, plan, policy.dtype)
                else:
                    engine.settings, engine.cut_at_slot = sampling_settings(cfg, plan), plan.cuts_at_slot
                    engine.push_weights(model)
            run_seed = seed if seed is not None else (ckpt.seed if ckpt.seed is not None else 43)
            budget, packed = cfg.micro_batch_tokens, cfg.pack_sequences
            for name, domain, _ in tqdm(specs, desc=f"eval {ckpt.label}", dynamic_ncols=True):
                rows, per_problem = problem_sets[name], n or EVAL_SETS.get(name, {}).get("n", 4)
                prompts = [
                    ro.build_prompt_ids(tokenizer, r["problem"], cfg.channel, domain, cfg.enable_thinking) for r in rows
                ]
                too_long = [r["id"] for r, p in zip(rows, prompts) if len(p) > cfg.max_prompt_tokens]
                if too_long:
                    raise ValueError(
                        f"{len(too_long)} problems of {name} exceed max_prompt_tokens={cfg.max_prompt_tokens} "
                        f"(first: {too_long[0]}); evaluate with a larger budget"
                    )
                samples = engine.generate(prompts, per_problem, seed=run_seed)
                ids, marker = [row["id"] for row in rows], ro.ANSWER_MARKERS[domain]
                rollouts = ro.from_samples(tokenizer, samples, ids, prompts, cfg.channel, marker, plan.numeral)
                answers = [ro.answer_text(ro.after_thinking(r.text), cfg.channel) for r in rollouts]
                references = [
                    rows[i // per_problem]["answer" if domain == "math" else "tests"] for i in range(len(rollouts))
                ]
                verdicts = verifier.grade(answers, references, domain, workers=workers, timeout_s=cfg.verify_timeout_s)
                correct = [int(verdict.passed) for verdict in verdicts]
                failures = verifier.failure_summary(verdicts)
                if failures is not None:
                    print(f"[eval] {name}: {failures}", file=sys.stderr)
                sources = read_confidences(policy, rollouts, cfg.channel, budget, packed)
                for source, (confs, repaired) in sources.items():
                    for i, (r, a, c, fixed) in enumerate(zip(rollouts, correct, confs, repaired)):
                        record = {
                            "run": ckpt.label,
                            "method": ckpt.method,
                            "seed": run_seed,
                            "train_domain": ckpt.train_domain,
                            "set": name,
                            "set_domain": domain,
                            "problem_id": r.question_id,
                            "sample": i % per_problem,
                            "source": source,
                            "c": c,
                            "a": a,
                            "text": r.text,
                            "slot_repaired": fixed,
                        }
                        records.append(record)
                        sink.write(json.dumps(record) + "\n")
            del model, policy
    engine.close()
    return records


def read_confidences(
    policy: pol.Policy, rollouts: list[ro.Rollout], prompt: str, budget: int, packed: bool
) -> dict[str, tuple[list[float | None], list[bool]]]:
    """Every registered read of `prompt` (confidence.reads_of) on the rollouts, by its label (the
    records' source): the c of each rollout (None where it has none), and whether its slot was
    closed at the tag (close_slot, or at_slot where a numeral merged with it). A model read reads
    each rollout up to its slot (policy.slot_confidences); a text read parses it."""
    at_slot = ro.at_slot(policy.tokenizer, rollouts)
    sources = {}
    for read in confidence.reads_of(prompt):
        if read.model:
            c = pol.slot_confidences(policy, at_slot, read, budget, packed)  # [N]
            sources[read.label] = (_or_none(c), [r.slot_repaired > 0 for r in at_slot])
        else:
            sources[read.label] = (_or_none(read.from_text(rollouts, policy.tokenizer)), [False] * len(rollouts))
    return sources


def _or_none(conf: torch.Tensor) -> list[float | None]:
    """[N] confidences with NaN where there is none -> floats and None (a record's `c`)."""
    return [None if math.isnan(c) else c for c in conf.tolist()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Evaluate checkpoints: accuracy, calibration, tables and figures.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--ckpt",
        help="comma-separated [label=]path: checkpoints, run directories (their latest checkpoint) or "
        "base models; one table row per label (default: the method), seeds averaged",
    )
    parser.add_argument(
        "--base-seeds",
        default=None,
        help="comma-separated evaluation seeds for base models (no training seed): one run per seed",
    )
    parser.add_argument(
        "--sets", required=True, help=f"comma-separated: {', '.join(EVAL_SETS)} or name=path.jsonl[:math|:code]"
    )
    parser.add_argument("--n", type=int, default=None, help="samples per problem (default: tab:data's n per set)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument(
        "--seed", type=int, default=None, help="default: each checkpoint's training seed (43 for a base model)"
    )
    parser.add_argument(
        "--channel", choices=["readout", "verbalized"], default=None, help="default: from the checkpoint"
    )
    parser.add_argument(
        "--method", default=None, help="table label (default: from the checkpoint; Base for a plain model)"
    )
    parser.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    parser.add_argument(
        "--config", default="math", help="for a base model: the config whose budgets and engine settings apply"
    )
    which.add_argument(
        "--plan",
        default=None,
        help='a JSON list of {"label", "path", "channel", "method"}: checkpoints with settings of their own',
    )
    parser.add_argument("--out", default=None, help="default: <run folder>/eval for a training checkpoint")
    parser.add_argument("--no-report", action="store_true", help="write samples.jsonl only (no tables or figures)")
    parser.add_argument("--debug", action="store_true", help="a traceback instead of one line for bad input")
    args = parser.parse_args(argv)
    try:  # bad input: one line naming the problem (a traceback with --debug)
        ckpts, out_dir = checkpoints_of(args)
        for spec in args.sets.split(","):
            name, domain, path = resolve_set(spec)
            if not path.exists():
                raise FileNotFoundError(
                    f"evaluation set {name!r}: {path} does not exist (`bash run.sh prepare` writes "
                    f"the paper's sets; a file of your own is name=path.jsonl[:math|:code])"
                )
    except config.INPUT_ERRORS as error:
        if args.debug:
            raise
        sys.exit(f"eval: {config.one_line(error)}")
    records = evaluate(ckpts, args.sets.split(","), args.n, args.temperature, args.seed, out_dir, args.engine)
    if args.no_report:
        print(f"[eval] {len(records)} records in {out_dir / 'samples.jsonl'}")
        return
    sys.exit(report(records, out_dir))


def checkpoints_of(args: argparse.Namespace) -> tuple[list[Checkpoint], Path]:
    """The checkpoints of --ckpt / --plan (each checked to be a model directory or a hub id)
    and the output directory."""
    ckpts = []
    for entry in json.loads(Path(args.plan).read_text()) if args.plan else []:
        config.check_model_source(entry["path"], "path")
        ckpts.append(
            dataclasses.replace(
                describe_checkpoint(entry["path"], entry.get("channel"), entry.get("method"), args.config),
                label=entry["label"],
            )
        )
    for entry in args.ckpt.split(",") if args.ckpt else []:
        label, _, path = entry.rpartition("=")
        if not (Path(path) / "ckpt").is_dir():  # a run directory stands for its latest checkpoint
            config.check_model_source(path, "--ckpt")
        ckpt = describe_checkpoint(path, args.channel, label or args.method, args.config)
        if ckpt.train_domain is None and args.base_seeds:  # the base model's error bars: evaluation seeds
            ckpts += [
                dataclasses.replace(ckpt, seed=int(s), label=f"{ckpt.label}/e{s}") for s in args.base_seeds.split(",")
            ]
        else:
            ckpts.append(ckpt)
    if args.out:
        out_dir = Path(args.out)
    elif ckpts[0].train_domain is not None:
        out_dir = Path(ckpts[0].path).resolve().parent.parent / "eval"
    else:
        out_dir = ROOT / "runs" / f"eval-{Path(ckpts[0].path).name}"
    return ckpts, out_dir


def report(records: list[dict], out_dir: Path) -> int:
    """Tables first, then figures: a figure that fails is named on stderr (exit status 1)
    and loses nothing computed before it (samples.jsonl, the tables, the other figures)."""
    write_tables(aggregate(records), out_dir)
    print((out_dir / "main.md").read_text())
    figures, failed = make_figures(records, out_dir)
    print(f"[eval] {len(records)} records, tables and {len(figures)} figure files under {out_dir}")
    for stem, error in failed.items():
        print(f"[eval] figure {stem} failed ({error}); the samples and tables above are complete", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    main()
