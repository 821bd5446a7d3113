"""Shared fixtures: the real third-party parts (`real_part`, `qwen3_tokenizer`: found through
realparts.resolve, skipped with a reason naming `bash run.sh fixtures` where a checkout lacks them, a
failure under CI=true; every test that uses them is marked `real_parts`), the tiny local world (built
once by worlds/tiny.py, cached under .cache/tiny), the toy world (`toy_world`: the shipped one,
worlds/toy_world/, checked, never built), the Hugging Face hub faked (`hub`, from fixture
records) or offline (`hub_offline`), the code sandbox's isolation modes and leftover checks
(helpers in sandbox_cases.py), the warm launcher of the tests' credo.py and eval.py runs (`warm`,
`warm_stages`: tests/warm.py), and the device of the tests that can run on a GPU (`device`: cpu
unless CREDO_TEST_DEVICE=cuda)."""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from fakehub import FakeHub
from sandbox_cases import _mode_config, _sandbox_processes
from warm import Launchers

import verifier
from grading import sandbox
from infra import realparts
from worlds import toy_build

ROOT = Path(__file__).resolve().parent.parent
TINY_DIR = ROOT / ".cache" / "tiny"
REAL_PART_FIXTURES = ("real_part", "qwen3_tokenizer")  # what makes a test a `real_parts` test

# Under xdist each worker gets a temporary directory of its own (tempfile's, and TMPDIR for the
# processes it starts), named by the run and the worker, and removed when the worker ends: the
# sandbox tests check that no sandbox work directory outlives a test, and the live sandboxes of
# another worker, or of another test run on the same machine, must not count. World-writable
# and sticky, like /tmp, so that a sandbox's own uid can reach its work directory.
WORKER_TMP = None
if "PYTEST_XDIST_WORKER" in os.environ:
    WORKER_TMP = Path(tempfile.mkdtemp(prefix=f"credo-tests-{os.environ['PYTEST_XDIST_WORKER']}-"))
    WORKER_TMP.chmod(0o1777)
    os.environ["TMPDIR"] = tempfile.tempdir = str(WORKER_TMP)

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CACHE_ROOT", str(ROOT / ".cache" / "vllm"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    """The tiny model/tokenizer/data; `bash run.sh setup` builds it, or this fixture does."""
    from worlds import tiny

    return tiny.ensure(TINY_DIR)  # built when missing, or built from other worlds/tiny.py / rollout.py


def pytest_configure(config):
    # xdist marks a grouped test through its node id, which pytest 9.2 no longer lets a plugin
    # change: --dist loadgroup then groups nothing, silently (pytest-xdist#1386).
    if getattr(config.option, "dist", "no") == "loadgroup" and pytest.version_tuple[:2] >= (9, 2):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with --dist loadgroup: pytest-xdist would not group the "
            f"tests (pytest-xdist#1386); requirements/common.txt pins pytest < 9.2"
        )


def pytest_sessionfinish(session):
    if WORKER_TMP is not None:
        shutil.rmtree(WORKER_TMP, ignore_errors=True)


@pytest.fixture(scope="session")
def toy_world() -> Path:
    """The shipped toy world (worlds/toy_world/), checked against its SHA256SUMS (toy_build.load_world);
    never built here."""
    return toy_build.load_world()[1]


TINY_RUN_ARGS = ("tiny", "max_steps=3", "save_every=1", "run_name=credo")  # tiny_run's command, less out_dir


@pytest.fixture(scope="session")
def tiny_run(tiny_dir, tmp_path_factory) -> Path:
    """A CREDO run of three real training steps on the tiny world (readout channel, vLLM engine,
    a checkpoint after every step: ckpt/step_00000{1,2,3}), shared by the tests that only read it
    (the client and eval's CLI read step 1's checkpoint, LoRA compares its step 0, the SIGTERM test
    resumes a preempted run to it): its run directory. Under xdist the workers share one run: the
    first to need it trains it, under a lock, in the directory their base temps share."""
    from worlds import tiny

    shared = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        shared = shared.parent
    out = shared / "tiny-run"
    with tiny.build_lock(out):
        if not (out / "credo" / "ckpt" / "step_000003").exists():
            result = subprocess.run(
                [sys.executable, "credo.py", *TINY_RUN_ARGS, f"out_dir={out}"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return out / "credo"


@pytest.fixture(scope="session")
def warm():
    """The warm launcher of this test process (tests/warm.py): `warm.run(["credo.py", ...])` runs a
    script as `python credo.py ...` would, forked from a process that has imported torch,
    transformers and vLLM already (the 11 s of a fresh process's 16 s tiny run)."""
    launchers = Launchers()
    yield launchers
    launchers.close()


@pytest.fixture
def warm_stages(warm, monkeypatch):
    """worlds/toy.py's stages (its credo.py and eval.py runs, with their environment) forked from
    the warm launcher instead of started as processes."""
    from worlds import toy

    monkeypatch.setattr(toy, "start_stage", lambda args, log_path: warm.spawn(args, log_path, env=toy._env()))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir / "model")


def find_real_part(name: str) -> Path:
    """The folder of real part `name` (realparts.resolve); where no root holds it the test is skipped
    with one reason naming `bash run.sh fixtures`, and under CI=true it fails: CI never silently loses
    the coverage these parts give."""
    found = realparts.resolve(name)
    if found is None:
        reason = realparts.missing_reason(name)
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: CI must have every real part)", pytrace=False)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def real_part():
    """`real_part(name)`: the folder of a real third-party part (see find_real_part)."""
    return find_real_part


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """Qwen3's real tokenizer (151,669 tokens, its chat template with the thinking switch)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(find_real_part("qwen3-tokenizer"))


# Under xdist the tests that need the toy world run first, on one worker (group "toy"): they are
# minutes of toy runs, which the other workers overlap with the rest instead of the suite ending on them.
# The modules with slow tests come next (pytest_collection_modifyitems).
TOY_GROUP = "toy"
# Modules whose module-scoped fixtures are expensive (a vLLM server, an engine, a trained random
# Qwen3, the converted real snapshots): under xdist (`bash run.sh test` runs `--dist loadgroup`)
# each runs on one worker, so those fixtures are built once, not once per worker.
ONE_WORKER_MODULES = ("test_client", "test_credo", "test_data", "test_rollout", "test_bench")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if set(REAL_PART_FIXTURES) & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.real_parts)
        if "toy_world" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(TOY_GROUP))
        elif item.path.stem in ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
    if "PYTEST_XDIST_WORKER" in os.environ:
        # The toy's tests first, then the modules that hold slow tests (minutes of real runs), then
        # the rest: xdist hands tests out in this order, and the seconds-long tests left for the end
        # even the workers out, where a slow test handed out last kept one worker busy alone. Whole
        # modules move, each in its own order, so that no module-scoped fixture is built twice.
        slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
        items.sort(
            key=lambda item: ("toy_world" not in getattr(item, "fixturenames", ()), item.path not in slow_modules)
        )


def pytest_unconfigure(config):
    """The suite's last line (after pytest's own summary) says how many tests a missing real part
    skipped, and what fetches the parts."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    count = sum(
        "real part '" in (report.longrepr[2] if isinstance(report.longrepr, tuple) else "")
        for report in reporter.stats.get("skipped", [])
    )
    if count:
        missing = [name for name in realparts.PARTS if realparts.resolve(name) is None]
        reporter.write_line(
            f"{count} tests skipped: they need real third-party parts this checkout has not fetched "
            f"({', '.join(missing)}); `bash run.sh fixtures` fetches them (docs/fixtures.md)",
            yellow=True,
        )


@pytest.fixture
def hub_offline(monkeypatch, tmp_path):
    """The real Hugging Face client, offline and with an empty cache: a download fails at once,
    as on a machine without the hub, also where the hub is reachable or a copy is cached."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """``huggingface_hub.snapshot_download`` replaced by a FakeHub over tests/fixtures/hub_records.json."""
    import huggingface_hub

    fake = FakeHub(tmp_path / "hub")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    return fake


@pytest.fixture(params=["namespaces", "plain"])
def mode(request, monkeypatch):
    """Run the test under one isolation mode (skipped where unavailable)."""
    config = _mode_config(request.param)
    if config is None:
        pytest.skip(f"{request.param} sandbox not available on this machine")
    monkeypatch.setattr(sandbox, "_CONFIG", config)
    return request.param


@pytest.fixture
def any_mode(monkeypatch):
    """The strongest isolation mode available (for mode-independent tests)."""
    for name in ("namespaces", "plain"):
        config = _mode_config(name)
        if config is not None:
            monkeypatch.setattr(sandbox, "_CONFIG", config)
            return name
    pytest.skip("no code sandbox can run on this machine")


@pytest.fixture
def no_leftovers():
    """No sandbox process or work directory may outlive a test (the sandbox and verifier
    test modules use it for every test)."""
    pattern = os.path.join(tempfile.gettempdir(), "credo-sandbox-*")
    before = set(glob.glob(pattern))
    yield
    assert set(glob.glob(pattern)) <= before
    deadline = time.monotonic() + 2.0  # SIGKILLed grandchildren take a moment to die
    while _sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sandbox_processes() == []


@pytest.fixture(scope="module")
def close_math_pool():
    """Shut the math worker pool down after a module that used it."""
    yield
    verifier.close()


@pytest.fixture(scope="session")
def device():
    """Where the device-agnostic numerical tests run: cpu, or cuda with CREDO_TEST_DEVICE=cuda
    (bench/gpucheck.py runs them so, in fp32, to the CPU tolerances)."""
    import torch

    name = os.environ.get("CREDO_TEST_DEVICE", "cpu")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"CREDO_TEST_DEVICE must be cpu or cuda, got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CREDO_TEST_DEVICE=cuda but torch sees no CUDA device; unset it to run on the CPU")
    if name == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32: no TF32 matmuls
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(name)
