"""`bash run.sh serve`'s "listening" line: a watcher that evaluation/client.py starts just before it
execs into `vllm serve` (whose own INFO lines run.sh silences).

    python -m evaluation.ready http://127.0.0.1:8000 runs/x/ckpt/step_000002

It polls GET <url>/health once a second and prints one line to stdout when the server answers
200; it exits without a word when the process that started it (the server, after the exec) ends
first. Imports nothing heavy, so that it costs a few MB beside the server.

Not here: the server's command line (client.serve_command) or talking to it (client.ServerTransport).
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request


def healthy(url: str) -> bool:
    """Whether GET <url>/health answers 200 now."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def announce_when_ready(url: str, what: str, server_pid: int, poll_s: float = 1.0) -> bool:
    """Print the listening line once the server at `url` is healthy; False (and no line) when the
    process `server_pid` ends first."""
    while os.getppid() == server_pid:  # reparented: the server is gone
        if healthy(url):
            print(
                f"[serve] listening on {url} (serving {what}; ask it with `bash run.sh ask --server {url}`)", flush=True
            )
            return True
        time.sleep(poll_s)
    return False


if __name__ == "__main__":
    announce_when_ready(sys.argv[1], sys.argv[2], os.getppid())
