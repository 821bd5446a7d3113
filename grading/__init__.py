"""What the verifier (verifier.py, the only door in) runs apart from the trainer:

  mathpool.py           warm, killable worker processes for math-verify
  mathjudge.py          how a math worker compares an answer with its gold (math-verify; True only with a proof)
  judge.py              code tests' schemas, and how the parent judges what a sandbox sends back
  sandbox.py            the sandbox parent: starts, bounds, feeds and kills the child
  sandbox_child.py      the child program (spliced text, never imported)
  sandbox_lockdown.py   the child's isolation: namespaces, Landlock, seccomp, rlimits
  sandbox_resources.py  the parent's view of a child's memory, disk and processes
  typed_json.py         the JSON values the child and the parent exchange

The loop never imports this folder: it reaches it only through verifier.grade (docs/verifier.md).
"""
