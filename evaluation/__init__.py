"""Evaluation beyond the CLI (eval.py): what a checkpoint's samples are turned into. The metrics
themselves (app:data) are the method's, at the top level (metrics.py).

report.py    evaluation records and the tables of a report
figures.py   reliability diagrams and the figures of a report
tables.py    configs/tables.yaml: which configs and evaluations regenerate a table of the paper
curves.py    training curves of runs (`bash run.sh plot`)
client.py    confidence at inference: `bash run.sh serve` and `ask`
ready.py     the line `bash run.sh serve` prints once its server answers
evalsets.py  the evaluation sets of tab:data and their titles
"""
