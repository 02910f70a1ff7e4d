#!/usr/bin/env bash
# The papers' full protocols on a lent GPU: the experiment benchmarks/experiments/gpu_protocol.yaml, run by
# `python -m benchmarks` in calls that each end inside the device's 10-minute limit.
#
# Here, once per session (pip and the Debian Fashion-MNIST package are on this machine, not on the GPU one):
#   bash benchmarks/gpu_protocol.sh prepare
# Then on the device machine, one call or more, each carrying .whl and .data:
#   device run, carry [".whl", ".data"]:  bash benchmarks/gpu_protocol.sh run --budget 480 [--only CCFC ...]
#   finally:                              bash benchmarks/gpu_protocol.sh report   (writes $OUT/gpu_protocol.*)
# When the budget is spent, `timeout` sends SIGINT to the runner and its fit: the fit stops keeping its last
# checkpoint (every round), the runner starts nothing more, and the next call resumes it while the machine
# is warm (a fresh machine starts it again). The device image has PyTorch, Lightning, torchmetrics and
# scikit-learn but not jsonargparse (carried as wheels) or FAISS (k-means runs on torch there).
# FEDCLUST_GPU_RUNS (default /tmp/fedclust_gpu) holds the run folders; FEDCLUST_GPU_EXPERIMENT names another
# experiment (the tests run a tiny one on the CPU).
#
# Issue 44 item 3 beyond Table 1's UIFCA rows (its k-FED + UIFCA rows, the generators' variations): the experiments
# that run them here, named by FEDCLUST_GPU_EXPERIMENT, several small runs at a time; `report` starts from the
# committed CSV, so the returned file holds this machine's archived rows and the device's new ones together:
#   device run, carry [".whl"]:  FEDCLUST_GPU_EXPERIMENT=uifca_variations bash benchmarks/gpu_protocol.sh run --budget 480 --slots 8
#   then:  FEDCLUST_GPU_EXPERIMENT=uifca_variations bash benchmarks/gpu_protocol.sh report; copy $OUT's CSV to benchmarks/results
# (uifca_table1 likewise). Not yet timed on a GPU; a run here is 2,000-2,001 rounds of ~2 ms steps
# on small flows, its seconds a round on one core in the CSVs' seconds_per_round column.
#
# Speed (issue 46 items 3-4): three legs, each in calls of its own, their rows returned under $OUT:
#   here, once:        bash benchmarks/gpu_protocol.sh prepare; bash benchmarks/gpu_protocol.sh prepare-flower
#   device run, carry [".whl", ".data"]:  bash benchmarks/gpu_protocol.sh speed --budget 420
#       the gpu_speed experiment: CCFC's protocol (70,000 images, 10 and 100 clients) cut to 3 + 1 rounds in each
#       speed mode (fp32, sequential, auto: the clients trained together), then the whole 100 + 30 rounds (auto,
#       fp32); resumable like `run`; writes $OUT/gpu_speed.{csv,md}
#   device run, carry [".whl", ".data"]:  bash benchmarks/gpu_protocol.sh step --budget 240
#       CCFC's local step eager and under torch.compile (default and reduce-overhead: CUDA graphs): $OUT/gpu_step.csv
#   device run, carry [".whl", ".whl_flower", ".data_test"]:  bash benchmarks/gpu_protocol.sh peer --budget 420
#       Flower's simulation against fedclust, both on the GPU, the peer's workload (10,000 images): $OUT/flower_peer.csv
#   then here: copy the returned CSV rows to benchmarks/results/ (a done gpu_speed run found there is not run again)
# Flower's stack (30 MB packed) and all 70,000 images (31 MB) do not travel together inside a call's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${FEDCLUST_GPU_RUNS:-/tmp/fedclust_gpu}
experiment=${FEDCLUST_GPU_EXPERIMENT:-gpu_protocol}

if [ "${1:-}" = "prepare" ]; then
  mkdir -p .git/info .whl .data/fmnist
  for d in /.whl/ /.data/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
  # pure-Python wheels the device image lacks (versions as constraints.txt pins them)
  bash benchmarks/gpu_wheels.sh base
  # a shared data root is read through one folder per set (MNIST and Fashion-MNIST files share names)
  cp /usr/share/datasets/fashion-mnist/*.gz .data/fmnist/
  # the test split alone, for the call that carries Flower's stack instead of all the images
  mkdir -p .data_test/fmnist
  cp /usr/share/datasets/fashion-mnist/t10k-*.gz .data_test/fmnist/
  # the copy on the device has no .git: the runs record the commit named here
  python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from common import git_commit; print(git_commit())" \
    > .data/commit
  cp .data/commit .data_test/commit
  ls -la .whl .data/fmnist .data_test/fmnist; cat .data/commit
  exit 0
fi
if [ "${1:-}" = "prepare-flower" ]; then
  exec bash benchmarks/gpu_wheels.sh flower
fi

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
[ -d .data/fmnist ] && export FEDCLUST_DATA_ROOT="$PWD/.data"
[ -f .data/commit ] && export BENCHMARKS_COMMIT="$(cat .data/commit)"
if [ ! -d .data/fmnist ] && [ -d .data_test/fmnist ]; then
  export FEDCLUST_DATA_ROOT="$PWD/.data_test"
  [ -f .data_test/commit ] && export BENCHMARKS_COMMIT="$(cat .data_test/commit)"
fi
bench=(python3 -m benchmarks --runs "$runs")
case "${1:-}" in
  run|speed)  # speed: the gpu_speed experiment, its report written beside the call's rows
    leg=$1
    shift
    [ "$leg" = speed ] && experiment=gpu_speed
    budget=480
    if [ "${1:-}" = "--budget" ]; then budget=$2; shift 2; fi
    status=0
    timeout -s INT -k 60 "$budget" "${bench[@]}" run "$experiment" --nice 0 "$@" || status=$?
    [ "$status" -eq 124 ] && echo "budget of $budget s spent: the next call goes on"
    "${bench[@]}" list "$experiment"
    [ "$leg" = speed ] && "${bench[@]}" --results "${OUT:-benchmarks/results}" report "$experiment"
    [ "$status" -eq 0 ] || [ "$status" -eq 124 ] ;;
  report)
    out=${OUT:-benchmarks/results}
    committed=benchmarks/results/$(basename "$experiment" .yaml).csv
    # the committed rows stand for runs made elsewhere (benchmarks/archive.py): the report keeps them beside the new
    if [ "$out" != benchmarks/results ] && [ -f "$committed" ] && [ ! -e "$out/$(basename "$committed")" ]; then
      mkdir -p "$out" && cp "$committed" "$out/"
    fi
    exec "${bench[@]}" --results "$out" report "$experiment" ;;
  step|peer)
    leg=$1
    shift
    budget=240
    if [ "${1:-}" = "--budget" ]; then budget=$2; shift 2; fi
    args=()
    if [ "$leg" = peer ]; then  # both sides on the GPU; Flower's clients as its examples: 2 CPUs and 1/8 GPU an actor
      args=(--accelerator cuda --flower-cpus 2 --flower-gpus 0.125 --threads 8)
      if ls .whl_flower/*.tar.xz >/dev/null 2>&1; then  # Flower's stack, unpacked once a machine
        site=/tmp/fedclust_flower_site
        if [ ! -f "$site/.unpacked" ]; then
          rm -rf "$site" && mkdir -p "$site" && xz -dc .whl_flower/*.tar.xz | tar -x -C "$site" && touch "$site/.unpacked"
        fi
        args+=(--flower-site "$site")
      fi
    fi
    status=0
    timeout -s INT -k 30 "$budget" "${bench[@]}" --results "${OUT:-benchmarks/results}" "$leg" "${args[@]}" "$@" \
      || status=$?
    [ "$status" -eq 124 ] && echo "budget of $budget s spent: the rows above are what finished"
    [ "$status" -eq 0 ] || [ "$status" -eq 124 ] ;;
  *)
    echo "usage: bash benchmarks/gpu_protocol.sh prepare | prepare-flower | run [--budget S] [--only LABEL ...] |" \
      "report | speed [--budget S] [--only LABEL ...] | step [--budget S] [step options] | peer [--budget S] [peer options]" >&2
    exit 2 ;;
esac
