"""Build the tiny local world that `configs/tiny.yaml` and the tests train on (no hub needed).

    python -m worlds.tiny OUT_DIR            # writes OUT_DIR/{model/, math_train.jsonl, math_test.jsonl}

* Data: integer arithmetic in the math JSONL schema `{"id", "problem", "answer"}`,
  with graded difficulty (one-digit sums up to three-operand products), so a
  small model is right on some problems and wrong on others.
* Tokenizer: a byte-level BPE trained here on the prompts and solutions, with
  a Qwen-style chat template (`<|im_start|>role ... <|im_end|>`) that, like Qwen3's,
  ends the prompt with an empty `<think>\n\n</think>\n\n` when `enable_thinking` is
  false (`<think>`/`</think>` are added, non-special tokens as in Qwen3). It does NOT
  contain the reserved `<CONF_HIGH>`/`<CONF_LOW>`: `credo.py` adds them, as it
  would for a real Qwen3 checkpoint.
* Model: a random `Qwen3ForCausalLM` (2 layers, hidden 64, head_dim 32 - the
  smallest head size vLLM's CPU attention accepts) whose embedding matrix has
  spare rows beyond the tokenizer, like Qwen3's 151,936 > 151,669.
* Warm start: a few hundred supervised steps on scripted solutions in the
  readout-channel format (`... \\boxed{n} <analysis> ... </analysis> <confidence>`),
  so that sampled rollouts carry the three segments and RL has something to do.

Everything is seeded: two runs write identical files.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import random
from pathlib import Path

import torch

from rollout import build_prompt_ids, system_prompt

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]
# Qwen3's generation prompt, with its thinking switch: enable_thinking=false (our default)
# writes an empty thinking block for the model, so it answers at once.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
ANALYSES = [
    "I may have slipped on a carry when adding the digits.",
    "The product is the step most likely to be wrong.",
    "If I misread an operand the result would change; I cannot find other uncertainties.",
]


def make_problem(rng: random.Random, level: int) -> tuple[str, int]:
    """One arithmetic problem of difficulty `level` (1 easy .. 4 hard) and its answer."""
    if level == 1:
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return f"What is {a} + {b}?", a + b
    if level == 2:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f"What is {a} + {b}?", a + b
    if level == 3:
        a, b = rng.randint(2, 9), rng.randint(10, 99)
        return f"What is {a} * {b}?", a * b
    a, b, c = rng.randint(2, 9), rng.randint(10, 99), rng.randint(10, 99)
    return f"What is {a} * {b} + {c}?", a * b + c


def make_math_data(n: int, seed: int, prefix: str) -> list[dict]:
    """`n` problems, difficulty levels cycled, as math JSONL records."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        problem, answer = make_problem(rng, level=1 + i % 4)
        rows.append({"id": f"{prefix}-{i:04d}", "problem": problem, "answer": str(answer)})
    return rows


def scripted_solution(problem: str, answer: str, rng: random.Random) -> str:
    """A completion in the readout format, ending at the slot (the engine stops there)."""
    expression = problem.removeprefix("What is ").removesuffix("?")
    return (
        f"{expression} = {answer}. The answer is \\boxed{{{answer}}}. "
        f"<analysis> {rng.choice(ANALYSES)} </analysis> <confidence>"
    )


def build_tokenizer(corpus: list[str], vocab_size: int = 1024):
    """Train a byte-level BPE on `corpus` and wrap it as a transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", model_max_length=1024
    )
    tok.add_tokens(THINK_TOKENS)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_model(
    tokenizer,
    seed: int,
    spare_rows: int = 62,
    hidden: int = 64,
    intermediate: int = 192,
    layers: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    head_dim: int = 32,
):
    """A random tiny Qwen3 whose vocabulary has `spare_rows` unused rows (rounded to 64)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    vocab = -(-(len(tokenizer) + spare_rows) // 64) * 64
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).float()


def warm_start(
    model, tokenizer, rows: list[dict], steps: int, seed: int, batch_size: int = 16, lr: float = 3e-3
) -> list[float]:
    """Supervised steps on scripted readout-format solutions; loss on completion tokens only."""
    rng = random.Random(seed)
    examples = []
    for row in rows:
        prompt = build_prompt_ids(tokenizer, row["problem"], "readout", "math")
        completion = tokenizer.encode(scripted_solution(row["problem"], row["answer"], rng), add_special_tokens=False)
        examples.append((prompt, completion + [tokenizer.eos_token_id]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        batch = rng.sample(examples, batch_size)
        width = max(len(p) + len(c) for p, c in batch)
        ids = torch.full((batch_size, width), tokenizer.pad_token_id)
        labels = torch.full((batch_size, width), -100)
        for row, (p, c) in enumerate(batch):
            ids[row, : len(p) + len(c)] = torch.tensor(p + c)
            labels[row, len(p) : len(p) + len(c)] = torch.tensor(c)
        loss = model(
            input_ids=ids, attention_mask=(labels != -100) | (ids != tokenizer.pad_token_id), labels=labels
        ).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    return losses


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# The world is a function of these sources (its template, prompts, data and warm start): a
# checkout whose copies differ from the ones a cached world was built from rebuilds it.
RECIPE_FILES = ("worlds/tiny.py", "rollout.py")  # relative to the checkout


def recipe_key() -> str:
    """16 hex digits of sha256 over RECIPE_FILES, concatenated in order (run.sh computes the
    same with `cat worlds/tiny.py rollout.py | sha256sum`)."""
    here = Path(__file__).resolve().parent.parent
    return hashlib.sha256(b"".join((here / name).read_bytes() for name in RECIPE_FILES)).hexdigest()[:16]


@contextlib.contextmanager
def build_lock(out_dir: str | Path):
    """Hold an exclusive lock on `out_dir`'s build (`<out_dir>.lock`, flock: released when the
    holder exits, even killed): two processes that find a cache missing (two test workers, two
    toy runs) then build it once, the second waiting and finding it current."""
    lock_path = Path(f"{Path(out_dir).resolve()}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure(out_dir: str | Path) -> Path:
    """`out_dir`, built first (under build_lock) unless it is current."""
    with build_lock(out_dir):
        if not is_current(out_dir):
            build(out_dir)
    return Path(out_dir)


def is_current(out_dir: str | Path) -> bool:
    """Whether `out_dir` holds a world built from this checkout's RECIPE_FILES."""
    out = Path(out_dir)
    return (out / "model" / "config.json").exists() and (out / f".recipe-{recipe_key()}").exists()


def build(out_dir: str | Path, sft_steps: int = 240, seed: int = 0) -> Path:
    """Write the tiny model, tokenizer and data under `out_dir`; returns the model dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(".recipe-*"):
        stale.unlink()
    train, test = make_math_data(512, seed, "tiny-train"), make_math_data(128, seed + 1, "tiny-test")
    rng = random.Random(seed)
    corpus = [
        system_prompt(ch, dom) for ch in ("readout", "verbalized", "readout_noanalysis") for dom in ("math", "code")
    ]
    corpus += [r["problem"] + " " + scripted_solution(r["problem"], r["answer"], rng) for r in train]
    corpus += ["high low 0.1 0.25 0.5 0.75 0.9 1.0 </confidence>"] * 8
    tokenizer = build_tokenizer(corpus)
    model = build_model(tokenizer, seed)
    losses = warm_start(model, tokenizer, train, steps=sft_steps, seed=seed)
    model_dir = out / "model"
    model.save_pretrained(model_dir, safe_serialization=True)
    tokenizer.save_pretrained(model_dir)
    write_jsonl(out / "math_train.jsonl", train)
    write_jsonl(out / "math_test.jsonl", test)
    (out / "warm_start.json").write_text(
        json.dumps(
            {
                "steps": sft_steps,
                "first_loss": losses[0] if losses else None,
                "last_loss": losses[-1] if losses else None,
            }
        )
    )
    (out / f".recipe-{recipe_key()}").touch()  # written last: a half-built world is not current
    return model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--sft-steps", type=int, default=240)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model_dir = build(args.out_dir, args.sft_steps, args.seed)
    print(f"tiny model, tokenizer and data written under {Path(args.out_dir).resolve()} (model: {model_dir})")


if __name__ == "__main__":
    main()
