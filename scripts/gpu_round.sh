#!/usr/bin/env bash
# One whole GPU round on a machine with an NVIDIA GPU and CuPy (see ../shared/docs/GPU.md):
# GPU tests (including the executor/GPU parity check), compute-sanitizer over the kernels,
# benchmarks, and the notebooks executed and graded by nbval on the GPU.
#
#   bash scripts/gpu_round.sh OUTDIR [steps...]   steps: tests sanitize tune bench notebooks (default),
#                                                 and tune-implicit (the implicit GEMMs' tile sweep)
#
# The tune step sweeps conv_tuned.cu's launch parameters and the GEMM's tiles on this GPU and writes
# the winners into labkit/tuned/conv_tuned.json and gemm.json (copied to OUTDIR/bench/ to bring back
# and commit); the steps after it use them.
#
# Wheels for the Jupyter machinery, if the machine lacks it, are installed from .whl/.
set -uo pipefail
OUT=${1:?usage: gpu_round.sh OUTDIR [steps...]}
shift
STEPS=${*:-tests sanitize tune bench notebooks}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export LABKIT_CACHE_DIR=${LABKIT_CACHE_DIR:-/tmp/labkit-cache}
if [ -d .whl ] && ! python3 -c "import nbval, nbclient, ipykernel" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site PATH=/tmp/site/bin:$PATH \
    && python3 -m ipykernel install --user --name python3 >/dev/null
fi
status=0
summary=()
step() { local name=$1; shift; local t0=$SECONDS; "$@" >"$OUT/$name.log" 2>&1; local rc=$?;
         summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" $((SECONDS - t0)) "$(tail -n 1 "$OUT/$name.log")")");
         [ $rc -eq 0 ] || status=1; }

python3 -c "import labkit; d = labkit.device(); print(d.summary())" | tee "$OUT/device.txt"
for s in $STEPS; do
  case $s in
    tests)     step tests python3 -m pytest tests -q -p no:cacheprovider
               # any convolution against float64: 333 small cases, 8 autotuned, 5 with 2^31 elements
               step conv-zoo-check python3 benchmarks/conv_zoo_check.py --out "$OUT/bench" ;;
    sanitize)  step memcheck compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/sanitize_kernels.py
               step racecheck compute-sanitizer --tool racecheck --error-exitcode 9 python3 scripts/sanitize_kernels.py
               step synccheck compute-sanitizer --tool synccheck --error-exitcode 9 python3 scripts/sanitize_kernels.py
               step memcheck-conv-zoo compute-sanitizer --tool memcheck --error-exitcode 9 \
                 python3 benchmarks/conv_zoo_check.py --quick --out "$OUT/bench"
               # find_the_bug.cu is racy on purpose: racecheck must report its shared-memory race
               step racecheck-finds-the-bug sh -c 'compute-sanitizer --tool racecheck --error-exitcode 9 \
                 python3 scripts/sanitize_kernels.py --find-the-bug; [ $? -eq 9 ] && echo "racecheck reported the race"' ;;
    tune)      step tune python3 benchmarks/tune_conv.py --out "$OUT/bench" --write-table
               step tune-gemm python3 benchmarks/tune_gemm.py --out "$OUT/bench" --write-table
               cp labkit/tuned/conv_tuned.json labkit/tuned/gemm.json "$OUT/bench/" ;;
    tune-implicit)  # about 8 minutes on an H100: run it alone, one precision per call if need be
               step tune-implicit python3 benchmarks/tune_implicit.py --out "$OUT/bench" --write-table
               cp labkit/tuned/conv_implicit.json "$OUT/bench/" ;;
    bench)     for b in benchmarks/*.py; do
                 case $b in benchmarks/tune_*.py) continue ;; esac   # sweeps: the tune step runs them
                 case $b in benchmarks/conv_zoo_check.py) continue ;; esac   # a check: the tests step runs it
                 step "bench-$(basename "$b" .py)" python3 "$b" --out "$OUT/bench"; done ;;
    notebooks) step nbval python3 -m pytest -q -p no:cacheprovider --nbval notebooks --nbval-sanitize-with notebooks/nbval_sanitize.cfg
               step series python3 -m labkit.course.series --out "$OUT/series"
               tar -C "$OUT/series" -czf "$OUT/series.tgz" . && rm -rf "$OUT/series" ;;
  esac
done
printf '%s\n' "${summary[@]}"
exit $status
