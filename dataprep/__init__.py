"""Dataset preparation (`bash run.sh prepare`), apart from training:

  data.py     download, split and normalise the sets of tab:data into data/<domain>/*.jsonl
  convert.py  each source's records converted into the verifier's schema

The loop never imports this folder: it reads the JSONL files prepare wrote (problems.load_rows).
"""
