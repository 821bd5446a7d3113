"""Small worlds to run the method in minutes on a CPU, built with the same loop as the paper's runs:

tiny.py          a tiny random Qwen3-architecture model on arithmetic: the tests' and `bash run.sh tiny`'s
toy.py           the toy demonstration (`bash run.sh toy`): RL learns, CREDO calibrates
toy_build.py     the toy's world: its model, tokenizer, warm start and splits
toy_tables.py    tab:main and tab:ablation in miniature on the toy (`bash run.sh toy --tables`)
toy_claims.py    the toy's pre-registered claims and their statistics
toy_diagnose.py  diagnostics of a toy run
"""
