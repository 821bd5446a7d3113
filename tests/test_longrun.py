"""Long runs (issue 19): a preempted run checkpoints and resumes to the same next step as a
straight run; resume=auto; a run already in the directory is never overwritten silently;
report_to writes TensorBoard events and an offline Weights & Biases run. Real tiny runs."""

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import ROOT

TIMEOUT_S = 900


def tiny(out_dir, *overrides, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run(["bash", "run.sh", "tiny", f"out_dir={out_dir}", "save_every=100", *overrides], cwd=ROOT,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    if check:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def metrics(run_dir) -> list[dict]:
    """metrics.jsonl without the wall-clock entries."""
    return [{k: v for k, v in json.loads(line).items() if not (k.startswith("t_") or k.endswith("tok_s"))}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def rollouts(run_dir) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((run_dir / "rollouts").glob("*.jsonl"))}


@pytest.mark.slow
def test_sigterm_checkpoints_and_resume_auto_matches_a_straight_run(tmp_path, tiny_dir):
    tiny(tmp_path, "max_steps=3", "run_name=straight")
    run_dir = tmp_path / "preempted"
    proc = subprocess.Popen(["bash", "run.sh", "tiny", f"out_dir={tmp_path}", "save_every=100", "max_steps=3",
                             "run_name=preempted"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not ((run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its first step was logged"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGTERM)               # run.sh execs python: this is the trainer itself
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, output[-3000:]
    stopped_at = len(metrics(run_dir))
    assert 1 <= stopped_at < 3                          # it finished the step in flight, and no more
    ckpt = run_dir / "ckpt" / f"step_{stopped_at:06d}"
    assert json.loads((ckpt / "trainer_state.json").read_text())["step"] == stopped_at
    assert f"SIGTERM: stopped after step {stopped_at} of 3" in output and "resume=auto" in output

    tiny(tmp_path, "max_steps=3", "run_name=preempted", "resume=auto")
    assert metrics(run_dir) == metrics(tmp_path / "straight")       # the same losses, rewards, questions
    assert rollouts(run_dir) == rollouts(tmp_path / "straight")     # ... and the same samples, byte for byte


@pytest.mark.slow
def test_a_finished_run_is_not_overwritten(tmp_path, tiny_dir):
    tiny(tmp_path, "max_steps=1", "run_name=done", "report_to=tensorboard,wandb")
    run_dir = tmp_path / "done"
    before = (run_dir / "metrics.jsonl").read_text()
    again = tiny(tmp_path, "max_steps=1", "run_name=done", check=False)
    assert again.returncode == 1
    message = again.stderr.strip().splitlines()[-1]
    assert message.startswith(f"credo: {run_dir} already holds a run (1 logged steps, last checkpoint step_000001)")
    for way_out in ("resume=auto", "run_name=", "overwrite=true"):
        assert way_out in message
    assert (run_dir / "metrics.jsonl").read_text() == before         # untouched

    # resume=auto on a finished run: nothing left to do (no engine built), nothing rewritten
    done = tiny(tmp_path, "max_steps=1", "run_name=done", "resume=auto")
    assert "is complete (1 of 1 steps): nothing to do" in done.stdout
    assert (run_dir / "metrics.jsonl").read_text() == before
    # report_to: TensorBoard events and an offline wandb run, without network
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert list((run_dir / "wandb").glob("offline-run-*"))

    tiny(tmp_path, "max_steps=1", "run_name=done", "overwrite=true", "seed=44")
    assert metrics(run_dir)[0]["questions"] != json.loads(before)["questions"]   # a new run, from scratch
    assert len(metrics(run_dir)) == 1


def test_resume_auto_without_a_checkpoint_starts_fresh(tmp_path):
    """resume=auto in an empty or checkpoint-less run directory is a fresh start (no error);
    a partial log with no checkpoint is replaced."""
    import checkpoint
    import config

    cfg = config.load_config("tiny", [f"out_dir={tmp_path}", "run_name=r", "resume=auto"])
    run_dir = config.run_dir_of(cfg)
    assert run_dir == tmp_path / "r" and checkpoint.resume_point(cfg, run_dir) is None
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    assert checkpoint.resume_point(cfg, run_dir) is None
    with pytest.raises(FileExistsError, match="already holds a run .1 logged steps, no checkpoint."):
        checkpoint.resume_point({**cfg, "resume": None}, run_dir)
    (run_dir / "ckpt" / "step_000004").mkdir(parents=True)
    (run_dir / "ckpt" / "step_000008.tmp").mkdir()                   # unfinished: never resumed from
    assert checkpoint.resume_point(cfg, run_dir) == run_dir / "ckpt" / "step_000004"
