#!/usr/bin/env bash
# The official CCFC code (Jarvisyan/CCFC-pytorch) on all 70,000 Fashion-MNIST images, beside fedclust's
# ccfc_paper_protocol cells (issue 44 item 1). Nothing of the official code enters this repository: it is read
# from a copy outside it, and this script only prepares that copy, runs it and tabulates what it prints.
#
#   bash benchmarks/ccfc_official.sh prepare SRC DIR   # SRC: a clone of Jarvisyan/CCFC-pytorch, or a bare git mirror
#   bash benchmarks/ccfc_official.sh run DIR P [ROUNDS] # stage 1 at pshift P, stopped after ROUNDS rounds (default 30)
#   bash benchmarks/ccfc_official.sh table DIR P        # its per-round NMI -> benchmarks/results/ccfc_official_70k_pP.md
#
# prepare's one change to the code is the data set class (the code is written for MNIST): torchvision's
# FashionMNIST read from the Debian package's files, so nothing is downloaded. run uses the paper's Fashion-MNIST
# settings (latent 64, lambda 1) and seed 66, as ccfc_paper_protocol, with two threads, niced; the code prints
# `acc: ... | nmi: ...` after every stage-1 round (scikit-learn's k-means of the global centroids, on all 70,000
# images). The code cannot resume stage 1: started again, it finds the model it saved and goes straight to the
# cluster stage, so run refuses a DIR that holds outputs/fmnist_pP (remove it to start over).
# FEDCLUST_OFFICIAL_POLL: seconds between looks at the log (default 30); FMNIST_DIR: the packaged .gz files (default
# /usr/share/datasets/fashion-mnist); FEDCLUST_OFFICIAL_RESULTS: where table writes (default benchmarks/results).
set -euo pipefail
cd "$(dirname "$0")/.."
fmnist=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
results=${FEDCLUST_OFFICIAL_RESULTS:-benchmarks/results}

usage() { echo "usage: bash benchmarks/ccfc_official.sh prepare SRC DIR | run DIR P [ROUNDS] | table DIR P" >&2; exit 2; }

case "${1:-}" in
  prepare)
    [ $# -eq 3 ] || usage
    src=$2; dir=$3
    [ -d "$src" ] || { echo "prepare: SRC $src is not a folder (a clone of Jarvisyan/CCFC-pytorch or its bare mirror)" >&2; exit 2; }
    compgen -G "$fmnist/*.gz" > /dev/null || { echo "prepare: no Fashion-MNIST .gz files in $fmnist (apt-get install dataset-fashion-mnist, or set FMNIST_DIR)" >&2; exit 2; }
    mkdir -p "$dir"
    if [ -d "$src/.git" ] || [ ! -d "$src/objects" ]; then
      cp -r "$src"/. "$dir"/; git -C "$src" rev-parse --short HEAD > "$dir/OFFICIAL_COMMIT"
    else  # a bare mirror (the session tools' `fetch`)
      git --git-dir="$src" archive HEAD | tar -x -C "$dir"; git --git-dir="$src" rev-parse --short HEAD > "$dir/OFFICIAL_COMMIT"
    fi
    mkdir -p "$dir/data/FashionMNIST/raw"
    for f in "$fmnist"/*.gz; do
      gunzip -c "$f" > "$dir/data/FashionMNIST/raw/$(basename "$f" .gz)"
    done
    sed -i 's/from torchvision.datasets import MNIST/from torchvision.datasets import FashionMNIST as MNIST/' "$dir/model.py"
    grep -q "FashionMNIST as MNIST" "$dir/model.py" || { echo "prepare: $dir/model.py has no MNIST import to swap" >&2; exit 2; }
    ;;
  run)
    [ $# -eq 3 ] || [ $# -eq 4 ] || usage
    dir=$2; p=$3; rounds=${4:-30}; log="fmnist_p$p.log"
    [ -f "$dir/main.py" ] || { echo "run: $dir holds no main.py (prepare it first)" >&2; exit 2; }
    cd "$dir"
    if [ -e "outputs/fmnist_p$p" ]; then
      echo "run: $dir/outputs/fmnist_p$p exists (an earlier run's saved model would skip stage 1); remove it to start over" >&2
      exit 2
    fi
    OMP_NUM_THREADS=2 nice -n 5 python main.py --data_root data --latent_dim 64 --lbd 1 --p "$p" --seed 66 \
      --num_workers 1 --trial "fmnist_p$p" > "$log" 2>&1 &
    pid=$!
    # the log carries tqdm's carriage-return progress bars: count the rounds' prints, not its lines
    while kill -0 "$pid" 2>/dev/null; do
      done_rounds=$( (tr '\r' '\n' < "$log") 2>/dev/null | grep -ac "nmi:" || true)
      [ "$done_rounds" -ge "$rounds" ] && { kill "$pid"; break; }
      sleep "${FEDCLUST_OFFICIAL_POLL:-30}"
    done
    wait "$pid" 2>/dev/null || true
    ;;
  table)
    [ $# -eq 3 ] || usage
    dir=$2; p=$3; log="$dir/fmnist_p$p.log"; out="$results/ccfc_official_70k_p$p.md"; mkdir -p "$results"
    [ -f "$log" ] || { echo "table: $log does not exist (run DIR $p first)" >&2; exit 2; }
    # a markdown page, not a results CSV: the runner's results page reads every CSV there as an experiment's
    {
      echo "# The official CCFC code on all 70,000 Fashion-MNIST images, p = $p (stage 1, per round)"
      echo
      echo "Command: \`bash benchmarks/ccfc_official.sh prepare SRC $dir\`, \`bash benchmarks/ccfc_official.sh run $dir $p\`,"
      echo "then \`bash benchmarks/ccfc_official.sh table $dir $p\`. Jarvisyan/CCFC-pytorch at commit $(cat "$dir/OFFICIAL_COMMIT"),"
      echo "its MNIST class swapped for torchvision's FashionMNIST and nothing else; latent 64, lambda 1, seed 66, its own"
      echo "partition, fp32, each client's own round-1 initialisation (the code's). Log last written"
      echo "$(date -u -r "$log" '+%Y-%m-%d %H:%M UTC'); machine: $(uname -n) | $(uname -m) | $(nproc) cores | torch $(python -c 'import torch; print(torch.__version__)')."
      echo "NMI and ACC: the code's own print after each round (k-means of the clients' centroids, every image labelled by"
      echo "its nearest global centroid by cosine); beside fedclust's run in ccfc_paper_protocol.md."
      echo
      echo "| round | nmi | acc |"
      echo "|---|---|---|"
      # the first print follows round 1 (the code counts its rounds from 0)
      tr '\r' '\n' < "$log" | grep -a "nmi:" | head -n 100 | awk '
        { acc = $0; sub(/.*acc: */, "", acc); sub(/ .*/, "", acc)
          nmi = $0; sub(/.*nmi: */, "", nmi); sub(/ .*/, "", nmi)
          printf "| %d | %s | %s |\n", NR, nmi, acc }'
    } > "$out"
    echo "$out: $(grep -c '^| [0-9]' "$out") rounds"
    ;;
  *) usage ;;
esac
