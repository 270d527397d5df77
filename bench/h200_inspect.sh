#!/usr/bin/env bash
# The agent's instruments and documentation on the H200 (issue 15), in two device calls made back to back (the
# machine stays warm about 30 s between them):
#   bench/h200_inspect.sh stage   # carry .cute-a and .whl: copies them to /tmp
#   bench/h200_inspect.sh run     # carry .cute-b: installs CuTe DSL and the wheels, runs the GPU tests of the
#                                 # instruments, the scripted-model bench of every tool, and the docs check
# Results go to $OUT (default ./h200-out).
set -o pipefail
OUT=${OUT:-./h200-out}
mkdir -p "$OUT"
case ${1:-} in
  stage)
    mkdir -p /tmp/cute-a /tmp/whl && cp .cute-a/* /tmp/cute-a/ && cp .whl/*.whl /tmp/whl/ && ls /tmp/cute-a /tmp/whl | wc -l ;;
  run)
    eval "$(bash .cute-b/install.sh | tail -1)"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 KERNELFLEET_CACHE_DIR=/tmp/kfcache
    python3 -c "import cutlass.cute" && echo "cute dsl importable"
    timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/inspect tests/llm tests/docs 2>&1 \
      | tee "$OUT/pytest-gpu.txt" | tail -15
    timeout 240 python3 bench/inspect_bench.py --out "$OUT/bench" --device cuda --timeout 200 2>&1 \
      | tee "$OUT/inspect_bench.txt" | tail -40
    timeout 120 python3 bench/docs_check.py 2>&1 | tee "$OUT/docs_check.txt" | tail -30 ;;
  *) echo "usage: bench/h200_inspect.sh stage|run" >&2; exit 2 ;;
esac
