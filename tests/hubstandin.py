"""A stand-in for the Hugging Face hub and GitHub's raw files, served on loopback, so that
`fixtures.py fetch` runs the real huggingface_hub client (HF_ENDPOINT) and urllib against it.

It serves, from an in-memory table ``{(kind, repo, revision): {path: bytes}}`` (kind ``model``,
``dataset`` or ``github``), the three requests a pinned download makes:

* ``GET /api/{models,datasets}/<repo>/tree/<revision>``: the file listing (one page);
* ``HEAD``/``GET /[datasets/]<repo>/resolve/<revision>/<path>``: a file, with the headers the client
  reads (``X-Repo-Commit``, ``ETag``, ``Content-Length``);
* ``GET /<repo>/<revision>/<path>``: a GitHub raw file.

Anything else is a 404, as the hub answers an unknown repo, revision or file. Every request is
recorded in ``requests`` (method, path), so a test can say what the client asked for.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


class HubStandIn:
    """``with HubStandIn(files) as hub:`` serves ``files`` at ``hub.url`` until the block ends."""

    def __init__(self, files: dict[tuple[str, str, str], dict[str, bytes]]):
        self.files = files
        self.requests: list[tuple[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def lookup(self, path: str) -> tuple[str, bytes | list] | None:
        """(revision, file bytes or tree listing) for a request path, or None."""
        parts = [unquote(p) for p in urlsplit(path).path.strip("/").split("/")]
        if parts[:1] == ["api"] and len(parts) >= 6 and parts[4] == "tree":  # api/<kind>s/<o>/<n>/tree/<rev>
            kind, repo, revision = parts[1].rstrip("s"), "/".join(parts[2:4]), parts[5]
            files = self.files.get((kind, repo, revision))
            if files is None:
                return None
            return revision, [
                {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                for name, data in sorted(files.items())
            ]
        kind = "dataset" if parts[:1] == ["datasets"] else "model"
        rest = parts[1:] if kind == "dataset" else parts
        if len(rest) >= 5 and rest[2] == "resolve":  # <o>/<n>/resolve/<rev>/<path>
            repo, revision, name = "/".join(rest[:2]), rest[3], "/".join(rest[4:])
            data = self.files.get((kind, repo, revision), {}).get(name)
            return None if data is None else (revision, data)
        if len(parts) >= 4:  # <o>/<n>/<commit>/<path>
            repo, revision, name = "/".join(parts[:2]), parts[2], "/".join(parts[3:])
            data = self.files.get(("github", repo, revision), {}).get(name)
            return None if data is None else (revision, data)
        return None

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet: the tests read `requests` instead
                pass

            def _answer(self, with_body: bool) -> None:
                hub.requests.append((self.command, self.path))
                found = hub.lookup(self.path)
                if found is None:
                    body = json.dumps({"error": "Entry not found"}).encode()
                    self.send_response(404)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if with_body:
                        self.wfile.write(body)
                    return
                revision, payload = found
                body = json.dumps(payload).encode() if isinstance(payload, list) else payload
                self.send_response(200)
                self.send_header(
                    "Content-Type", "application/json" if isinstance(payload, list) else "application/octet-stream"
                )
                self.send_header("X-Repo-Commit", revision)
                self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if with_body:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer(True)

            def do_HEAD(self) -> None:
                self._answer(False)

        return Handler
