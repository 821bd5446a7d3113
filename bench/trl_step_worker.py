"""TRL's GRPOTrainer loss path as a step server, run in the separate TRL environment.

    .cache/bench-trl-venv/bin/python bench/trl_step_worker.py INPUTS.json

Imports nothing from this project. Loads the model of INPUTS.json, builds a
GRPOTrainer (loss_type=grpo, beta=0: no reference model; on-policy, so the old
log-probs are the detached new ones, as in TRL's own num_iterations=1 path) and,
for every line read on stdin, runs one training step on the same rollouts
bench_step.py trains credo on: for each micro-batch `trainer.compute_loss` (TRL's
layout: left-padded prompts, right-padded completions, padded over the whole
batch as TRL's generation batch is, logits only for the completion positions),
backward, then one AdamW step. Prints one JSON line per step: {"seconds": ...}.
"""

import json
import sys
import tempfile
import time

import torch


def main() -> None:
    spec = json.load(open(sys.argv[1]))
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    torch.set_num_threads(spec["threads"])
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer_dir"])
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    micro, group = spec["micro"], spec["group"]
    n = len(spec["prompts"])
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=micro,
        num_generations=group,
        gradient_accumulation_steps=n // micro,
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        report_to="none",
        beta=0.0,
        loss_type="grpo",
        learning_rate=spec["lr"],
        max_completion_length=max(len(c) for c in spec["completions"]),
        logging_steps=10**9,
        epsilon=spec["clip_eps"],
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["x"] * group}),
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = n // micro
    model = trainer.model
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=spec["lr"],
        betas=tuple(spec["betas"]),
        eps=spec["adam_eps"],
        weight_decay=spec["weight_decay"],
    )
    pad = tokenizer.pad_token_id
    p_width = max(len(p) for p in spec["prompts"])
    c_width = max(len(c) for c in spec["completions"])
    prompt_ids = torch.full((n, p_width), pad, dtype=torch.long)
    prompt_mask = torch.zeros((n, p_width), dtype=torch.long)
    completion_ids = torch.full((n, c_width), pad, dtype=torch.long)
    completion_mask = torch.zeros((n, c_width), dtype=torch.long)
    advantages = torch.zeros((n, c_width))
    for i, (p, c, a) in enumerate(zip(spec["prompts"], spec["completions"], spec["token_advantages"])):
        prompt_ids[i, p_width - len(p) :] = torch.tensor(p)  # TRL left-pads prompts
        prompt_mask[i, p_width - len(p) :] = 1
        completion_ids[i, : len(c)] = torch.tensor(c)
        completion_mask[i, : len(c)] = 1
        advantages[i, : len(c)] = torch.tensor(a)
    for line in sys.stdin:
        if not line.strip():
            break
        start = time.perf_counter()
        total = 0.0
        for k in range(0, n, micro):
            rows = slice(k, k + micro)
            inputs = {
                "prompt_ids": prompt_ids[rows],
                "prompt_mask": prompt_mask[rows],
                "completion_ids": completion_ids[rows],
                "completion_mask": completion_mask[rows],
                "advantages": advantages[rows],
                "num_items_in_batch": completion_mask.sum(),
            }
            loss = trainer.compute_loss(model, inputs)
            loss.backward()
            total += float(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(json.dumps({"seconds": time.perf_counter() - start, "loss": total}), flush=True)


if __name__ == "__main__":
    main()
