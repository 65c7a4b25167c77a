"""CUDA graphs in whole programs on the CPU executor (labkit.cuda): stream capture, graphs built node by
node, kernel nodes and cudaLaunchKernel by a kernel's address, memory and conditional nodes, and NVIDIA's
simpleCudaGraphs, unchanged."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labkit.backends.cpu import program_source
from labkit.cuda import run_program
from labkit.errors import UnsupportedOnCPU

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

DATA = Path(__file__).parent / "data" / "cuda_programs"


def test_captured_and_built_graphs():
    rc, out, err = run_program(DATA / "graphs.cu")
    assert rc == 0, err
    assert out.splitlines() == [
        "captured 6 nodes, host function called 0 times before a launch",
        "after 3 launches: x[10] = 20, host function called 3 times",
        "built graph: x[10] = 5, y[999] = 3",
        "with the kernel node's scale set to 10: x[10] = 100",
        "cudaLaunchKernel by address: x[10] = 103",
        "PASSED"]


def test_memory_nodes_allocate_at_a_fixed_address_at_each_launch():
    rc, out, err = run_program(DATA / "graph_memory.cu")
    assert rc == 0, err
    assert out.splitlines() == [
        "before launch: used 0 reserved 0",
        "explicit: out[999] = 2997, used 4000, peak 4000: cudaSuccess",   # 2 * 1.5 * 999; freed, still the graph's
        "captured: b[10] = 30, used 8000",
        "freed: used 8000",
        "trimmed: used 0, peak 8000",
        "end: cudaSuccess"]
    rc, out, err = run_program(DATA / "graph_memory.cu", ["x"])
    assert "end: cudaErrorInvalidValue" in out
    assert "graph_memory.cu:41: a graph's allocation node runs again while its memory" in err, err
    rc, out, err = run_program(DATA / "graph_memory.cu", ["x", "y"])
    assert "end: cudaErrorIllegalAddress" in out
    assert ("graph_memory.cu:55: kernel 'fill': argument 0 (0x" in err and "points into a 4000-byte allocation (a graph's "
            "allocation node at " in err and "graph_memory.cu:41) that cudaFree already released" in err), err


def test_conditional_nodes_choose_and_repeat_their_body_graphs():
    rc, out, err = run_program(DATA / "graph_conditionals.cu")
    assert rc == 0, err
    assert out.splitlines() == ["if/else with 0, 5: BA",          # 0: the else body; not 0: the if body
                                "switch with 2, 0, 7, 1: CAB",    # 7: past the last body, none runs
                                "while from 4: 4321Z",            # until the body's kernel sets 0
                                "cudaSuccess"]


@pytest.mark.check
def test_kernels_are_registered_by_address_unless_templates_or_overloads():
    src = ("template <class T> __global__ void t(T* x) {}\n__global__ void __launch_bounds__(256) k(int* a) {\n}\n"
           "__global__ void d(int);\n__global__ void o(int) {}\n__global__ void o(float) {}\n")
    out = program_source.rewrite_kernel_registrations(src)
    # by the definition's own signature: a declaration elsewhere may overload the name
    assert out.splitlines()[2] == ('} static const bool labkit_kernel_registered_k = '
                                   '::labkit::rt::register_kernel(static_cast<void (*)(int* a)>(&k), "k");')
    assert out.count("register_kernel") == 1 and len(out.splitlines()) == len(src.splitlines())


def test_a_template_kernel_by_address_is_reported(tmp_path):
    p = tmp_path / "by_address.cu"
    p.write_text("#include <cstdio>\ntemplate <class T> __global__ void k(T* x) { x[0] = 1; }\n"
                 "int main() {\n  int* d; cudaMalloc(&d, 4); void* args[] = {&d};\n"
                 "  printf(\"%s\\n\", cudaGetErrorName(cudaLaunchKernel((const void*)k<int>, dim3(1), dim3(1), args)));\n}\n")
    rc, out, err = run_program(p)
    assert rc == 0, err
    assert out == "cudaErrorInvalidDeviceFunction\n" and "a template kernel's instance" in err


@pytest.mark.check
def test_graph_facilities_not_modelled_are_refused_by_name():
    src = "void f(cudaGraph_t g) { cudaGraphNode_t n; cudaGraphAddEventRecordNode(&n, g, 0, 0, 0); }\n"
    with pytest.raises(UnsupportedOnCPU, match=r"g.cu:1 uses a CUDA graph facility the CPU executor does not model"):
        program_source.check_program_supported(src, "g.cu")
    program_source.check_program_supported("void cudaGraphsManual();\nvoid g() { cudaGraphsManual(); }\n", "g.cu")


def test_simple_cuda_graphs_sample_runs_unchanged():
    rc, out, err = run_program(DATA / "cuda-samples" / "simpleCudaGraphs")
    assert rc == 0, err[-2000:]
    assert out.count("[cudaGraphsManual] Host callback final reduced sum = 0.996214") == 6
    assert out.count("[cudaGraphsUsingStreamCapture] Host callback final reduced sum = 0.996214") == 6
    assert "Num of nodes in the graph created manually = 7" in out and out.count("Cloned Graph Output..") == 2
