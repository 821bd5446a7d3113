"""Run infrastructure around the loop, none of it the method:

parallel.py    torchrun, FSDP2 sharding, collectives, gradient clipping
checkpoint.py  saving, resuming and preemption
runlog.py      what a step writes: metrics.jsonl, rollouts/, TensorBoard or W&B
memfit.py      whether activation checkpointing is needed to fit a GPU
realparts.py   the fixture resolver: real third-party parts (tokenizers, dataset records) for tests
startup.py     what an entry point sets first: library logging errors-only on stderr, Ctrl-C as one line
"""
