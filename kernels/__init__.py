"""Kernels of the update, beneath THE forward (policy.forward):

  logprobs.py   per-token log-probs of the completion in blocks of rows, without [N, T, V] fp32 logits
  packing.py    rows packed into one padding-free sequence, attention kept within each sequence

Pure tensor code: nothing here knows about methods, configs or the loop.
"""
