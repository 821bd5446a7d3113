"""Small worlds to run the method in minutes on a CPU, built with the same loop as the paper's runs:

tiny.py          a tiny random Qwen3-architecture model on arithmetic: the tests' and `bash run.sh tiny`'s
toy.py           the toy demonstration (`bash run.sh toy`): RL learns, CREDO calibrates
toy_build.py     the toy's world: its recipe, splits, model, tokenizer and warm start, checking a built
                 world (load_world) and building another (`python -m worlds.toy_build --rebuild OUT`)
toy_tables.py    tab:main and tab:ablation in miniature on the toy (`bash run.sh toy --tables`)
toy_claims.py    the toy's pre-registered claims and their statistics
toy_diagnose.py  diagnostics of a toy run

and two that are data, not code:

toy_world/          the shipped toy world, built once (weights, tokenizer, splits, recipe, SHA256SUMS); every
                    toy run uses and checks it, none rebuilds it
toy_expected.json   the documented results on it: the before rows, and each method's prediction range
                    over the committed runs' training seeds, which `bash run.sh toy` sets its result beside
"""
