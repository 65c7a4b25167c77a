"""cuRAND on the CPU executor: the device API (curand_kernel.h) and the host API (curand.h) of whole
programs (labkit.cuda), a teaching program checked by its statistics and by pinned numbers of its streams,
and NVIDIA's Monte Carlo samples, unchanged."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labkit.backends.cpu import program_source
from labkit.cuda import run_program
from labkit.errors import UnsupportedOnCPU

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

DATA = Path(__file__).parent / "data" / "cuda_programs"
SAMPLES = DATA / "cuda-samples"


def test_device_and_host_generators():
    rc, out, err = run_program(DATA / "random_numbers.cu")
    assert rc == 0, err
    # The executor's numbers for this state, pinned: a change in the seeding or the skip-ahead shows here
    # (the streams themselves are checked against NVIDIA's cuRAND on an H200 by the next test).
    assert "XORWOW seed 1234, subsequence 5, offset 1000: 2736485260 1120362062 3909345066 596338929" in out
    assert "XORWOW: uniform mean" in out and "Philox: uniform mean" in out and "WRONG" not in out
    assert "host normal(3, 2): mean 3.00 deviation 2.00: ok" in out
    assert "odd count: 105" in out and "so the count must be even" in err    # CURAND_STATUS_LENGTH_NOT_MULTIPLE
    assert "Sobol x: 1.16415e-10 0.5 0.75 0.25  y: 1.16415e-10 0.5 0.25 0.75" in out
    assert out.rstrip().endswith("PASSED")


def test_host_api_numbers_are_cuRAND_s_own_in_its_order():
    """curandGenerate's numbers at chosen positions, against what cuRAND gave on an H200 for the same
    calls: XORWOW's 4,096 interleaved subsequences (a second call going on from the first, an
    offset counted in positions) and Philox's 65,536 subsequences of quads, whose streams are the
    device API's (curand_init with a subsequence: the skip-ahead)."""
    rc, out, err = run_program(DATA / "curand_host_order.cu")
    assert rc == 0, err
    want = (DATA / "curand_host_order.h200.txt").read_text().splitlines()
    assert out.splitlines() == want


@pytest.mark.check
def test_generators_not_provided_are_refused_by_name():
    src = "#include <curand_kernel.h>\n__global__ void k(curandStateMRG32k3a* s) { curand_init(1, 0, 0, s); }\n"
    with pytest.raises(UnsupportedOnCPU, match=r"r.cu:2 uses a cuRAND generator the CPU executor does not provide"):
        program_source.check_program_supported(src, "r.cu")


@pytest.mark.parametrize("sample, expect", [
    ("MC_EstimatePiP", "MonteCarloEstimatePiP, Performance"),              # host API, XORWOW
    ("MC_EstimatePiInlineQ", "MonteCarloEstimatePiInlineQ, Performance"),  # device API, Sobol
    ("MC_SingleAsianOptionP", "MonteCarloSingleAsianOptionP, Performance"),  # device API, normals
])
def test_monte_carlo_samples_run_unchanged(sample, expect):
    rc, out, err = run_program(SAMPLES / sample)
    assert rc == 0, err[-2000:]
    # The samples print no pass line: a result outside their tolerance is reported in these words.
    assert "does not match expected result" not in out, out[-2000:]
    assert "Relative error" in out or "Expected" in out
    assert expect in out
