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
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${FEDCLUST_GPU_RUNS:-/tmp/fedclust_gpu}
experiment=${FEDCLUST_GPU_EXPERIMENT:-gpu_protocol}

if [ "${1:-}" = "prepare" ]; then
  mkdir -p .git/info .whl .data/fmnist
  for d in /.whl/ /.data/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
  # pure-Python wheels the device image lacks (versions as constraints.txt pins them)
  pins=$(grep -E '^(jsonargparse|docstring-parser|typeshed-client)==' constraints.txt | cut -d' ' -f1)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d .whl $pins
  # a shared data root is read through one folder per set (MNIST and Fashion-MNIST files share names)
  cp /usr/share/datasets/fashion-mnist/*.gz .data/fmnist/
  # the copy on the device has no .git: the runs record the commit named here
  python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from common import git_commit; print(git_commit())" \
    > .data/commit
  ls -la .whl .data/fmnist; cat .data/commit
  exit 0
fi

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
[ -d .data/fmnist ] && export FEDCLUST_DATA_ROOT="$PWD/.data"
[ -f .data/commit ] && export BENCHMARKS_COMMIT="$(cat .data/commit)"
bench=(python3 -m benchmarks --runs "$runs")
case "${1:-}" in
  run)
    shift
    budget=480
    if [ "${1:-}" = "--budget" ]; then budget=$2; shift 2; fi
    status=0
    timeout -s INT -k 60 "$budget" "${bench[@]}" run "$experiment" --nice 0 "$@" || status=$?
    [ "$status" -eq 124 ] && echo "budget of $budget s spent: the next call goes on"
    "${bench[@]}" list "$experiment"
    [ "$status" -eq 0 ] || [ "$status" -eq 124 ] ;;
  report)
    exec "${bench[@]}" --results "${OUT:-benchmarks/results}" report "$experiment" ;;
  *)
    echo "usage: bash benchmarks/gpu_protocol.sh prepare | run [--budget S] [--only LABEL ...] | report" >&2
    exit 2 ;;
esac
