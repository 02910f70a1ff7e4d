#!/usr/bin/env bash
# What a lent GPU machine lacks, fetched here (it reaches no registry): the device README's way, Python 3.12 x86-64
# wheels in git-ignored folders that the `run` tool's `carry` copies over.
#
#   bash benchmarks/gpu_wheels.sh base     # .whl/: jsonargparse and its two needs (fedclust's command line)
#   bash benchmarks/gpu_wheels.sh flower   # .whl_flower/flower_site.tar.xz: Flower's simulation for the peer leg
#
# The device image has PyTorch, Lightning, torchmetrics, scikit-learn, numpy, grpcio, protobuf, typer, rich, httpx,
# aiohttp and msgpack (KINDS.md), not FAISS (k-means runs on torch there), jsonargparse or Flower. Versions are
# constraints.txt's. Flower's stack does not fit the 64 MiB a call carries as wheels (Ray's alone is 74 MB), so
# `flower` installs the wheels here into a folder for CPython 3.12 (pip --target, no code run), leaves out the parts
# of Ray a simulation never loads (its Java jars, RLlib, Data, Serve, Tune, Train, LLM: 70 MB of 186) and packs the
# rest with xz (about 40 MB); the device unpacks it for the Flower leg alone. The closure below is what
# `import flwr.simulation, flwr.server, flwr.client, ray` needed beyond the image's packages, and a two-client
# Flower simulation ran on that trimmed Ray here (2026-11-28).
set -euo pipefail
cd "$(dirname "$0")/.."
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64
           --platform manylinux_2_31_x86_64 --platform manylinux_2_24_x86_64)
FOR_312=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none)
BASE=(jsonargparse docstring-parser typeshed-client)
FLOWER=(flwr ray pycryptodome cryptography cffi iterators tomli tomli-w fastapi starlette sqlalchemy alembic mako
        jsonschema referencing rpds-py jsonschema-specifications pydantic pydantic-core annotated-types
        typing-inspection)
RAY_UNUSED=(jars rllib data serve tune train llm)

pins() {  # NAME==VERSION for each name, as constraints.txt pins it
  for name in "$@"; do
    line=$(grep -iE "^${name}==" constraints.txt | cut -d' ' -f1)
    [ -n "$line" ] || { echo "gpu_wheels.sh: $name is not pinned in constraints.txt" >&2; exit 1; }
    echo "$line"
  done
}

case "${1:-}" in
  base)
    mkdir -p .whl
    # shellcheck disable=SC2046
    python3 -m pip download -q --no-deps "${FOR_312[@]}" "${PLATFORMS[@]}" -d .whl $(pins "${BASE[@]}")
    ls -la .whl ;;
  flower)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    # shellcheck disable=SC2046
    python3 -m pip download -q --no-deps "${FOR_312[@]}" "${PLATFORMS[@]}" -d "$work/wheels" $(pins "${FLOWER[@]}")
    python3 -m pip install -q --no-deps --no-compile "${FOR_312[@]}" "${PLATFORMS[@]}" --target "$work/site" \
      "$work"/wheels/*.whl
    for part in "${RAY_UNUSED[@]}"; do rm -rf "$work/site/ray/$part"; done
    rm -rf "$work/site/bin"
    mkdir -p .whl_flower
    tar -C "$work/site" -cf - . | xz -9 -T0 > .whl_flower/flower_site.tar.xz
    ls -la .whl_flower ;;
  *)
    echo "usage: bash benchmarks/gpu_wheels.sh base | flower" >&2
    exit 2 ;;
esac
