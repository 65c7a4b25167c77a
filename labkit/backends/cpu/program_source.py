"""Reading a whole CUDA program (host and device code) for the CPU executor.

A program's files are compiled by the host C++ compiler, which knows nothing of CUDA's launch
syntax ``kernel<<<grid, block, shared, stream>>>(args)``.  No macro can turn it into C++ (``<<<`` is
two shift tokens and a less-than to the preprocessor), so this module rewrites it in the text:

    k<<<g, b, s, st>>>(x, y)
    ->  ::labkit::kernel_call([=](auto&... labkit_a) { k(labkit_a...); }, "k", g, b, s, st)(x, y)

using a scan that skips comments and string literals (``strip_comments`` keeps every character's
position, so the edits are made at the same offsets of the original text).  The kernel is called
by name inside a lambda, not taken as a function pointer, so that a template kernel's arguments are
deduced from the call's as the CUDA compiler deduces them (``k<<<1, n>>>(x)`` with ``template <class
T> __global__ void k(T*)``).  The rewrite only inserts
text on the lines it touches: every line keeps its number, and compiler messages and sanitizer
reports name the program's own lines.  The kernel call is C++ (labkit_runtime_api.h): it checks the
launch configuration and the arguments as the CUDA runtime would, and runs the grid.

Before anything is compiled, what the executor does not model is refused by name, with advice:
textures and surfaces, graphics interop, the driver API (``cu*`` calls), several GPUs and peer
access, a device-side cudaDeviceSynchronize (launches from device code run: labkit_runtime_api.h), the
graph nodes beyond kernels, copies, memsets, host functions, memory and conditionals (event and child-graph
nodes), inter-process memory, and the
CUDA libraries (cuFFT, cuSPARSE, CUB, ...) but cuRAND (program_include/curand.h, curand_kernel.h), a part of
cuBLAS (program_include/cublas_v2.h), and Thrust and libcu++'s ``<cuda/std/...>`` with CCCL's own headers
(cccl.py: Thrust's C++ system stands in for its CUDA system; refused with advice where no headers are
found), and
fp8 types (cuda_fp16.h's __half, cuda_bf16.h's __nv_bfloat16 and mma.h's nvcuda::wmma are provided:
include/), and inline PTX other than the reads of special registers that the rewrite turns into the
executor's calls (kernel_source.rewrite_special_registers).
"""
from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

from ...errors import KernelCompileError, UnsupportedOnCPU
from .. import kernel_source
from . import cccl, compiler

# The runtime and driver facilities a program may use that the executor does not model, each with
# the words used to name it and the advice given.  Matched in code only (comments and strings blanked).
_HOST_UNSUPPORTED = [
    (re.compile(r"\bcu(?:Init|Device\w*|Ctx\w*|Module\w*|Launch\w*|Mem\w*|Stream\w*|Event\w*|Func\w*|"
                r"Link\w*|Tex\w*|Graph\w*|Array\w*|Pointer\w*|GetErrorString|GetErrorName|DriverGetVersion)"
                r"\s*\("),
     "the CUDA driver API (cu* calls)", "use the runtime API (cudaMalloc, <<<>>> launches) instead"),
    (re.compile(r"\bcuda(?:Graphics\w*|GL\w*|D3D\w*|EGL\w*|VDPAU\w*)\s*\("), "graphics interop",
     "the CPU executor has no display; compute into device memory and copy it back"),
    (re.compile(r"\bcudaMemcpy3DPeer\w*\s*\("), "peer copies (cudaMemcpy3DPeer)",
     "the CPU executor models one device"),
    (re.compile(r"\bcuda(?:CreateTextureObject|CreateSurfaceObject|BindTexture\w*|MallocArray|Malloc3DArray|"
                r"MallocMipmappedArray|MemcpyToArray\w*|Memcpy2DToArray\w*|CreateChannelDesc)\b|"
                r"\btexture\s*<|\bsurface\s*<|\bcudaArray_t\b|\bcudaArray\b"),
     "textures, surfaces and CUDA arrays", "read the data through a plain pointer (cudaMalloc) instead"),
    (re.compile(r"\bcuda(?:DeviceEnablePeerAccess|DeviceDisablePeerAccess|MemcpyPeer\w*)\s*\("),
     "peer access between GPUs", "the CPU executor models one device"),
    (re.compile(r"\bcudaGraph(?=[A-Z])(?!(?:Create|Destroy|AddKernelNode|KernelNodeSetParams|AddMemcpyNode|AddMemcpyNode1D|"
                r"AddMemsetNode|AddHostNode|AddEmptyNode|AddMemAllocNode|AddMemFreeNode|AddNode|ConditionalHandleCreate|SetConditional|AddDependencies|GetNodes|GetRootNodes|NodeGetType|Clone|"
                r"Instantiate|InstantiateWithFlags|Upload|Launch|ExecDestroy|ExecKernelNodeSetParams|ExecUpdate)\s*\()"
                r"\w+\s*\("),
     "a CUDA graph facility the CPU executor does not model (event or child-graph nodes)",
     "build the graph from kernel, memcpy, memset, host, memory and conditional nodes, or by stream capture"),
    (re.compile(r"\bcurandState(?:MRG32k3a|Mtgp32|Scrambled\w*)\w*|\bCURAND_RNG_(?:PSEUDO_MRG32K3A|PSEUDO_MTGP32|"
                r"PSEUDO_MT19937|QUASI_SCRAMBLED_\w+)|\bcurandMakeMTGP32\w*|\bCURAND_SCRAMBLED_\w+"),
     "a cuRAND generator the CPU executor does not provide (MRG32k3a, MTGP32, MT19937, scrambled Sobol)",
     "use XORWOW (curandState, CURAND_RNG_PSEUDO_DEFAULT), Philox4_32_10 or Sobol"),
    (re.compile(r"\bcudaIpc\w*\s*\("), "inter-process memory (cudaIpc*)", "the CPU executor models one process"),
    (re.compile(r"\bcudaLaunchCooperativeKernelMultiDevice\s*\("), "cooperative launches on several devices",
     "the CPU executor models one device: launch with cudaLaunchCooperativeKernel"),
    (re.compile(r"\bcudaMem(?:PoolCreate|PoolImport\w*|PoolExport\w*|PoolSetAccess|Create|Map|AddressReserve|"
                r"Unmap|Release|SetAccess)\w*\s*\("),
     "virtual memory management and memory pools of one's own", "use cudaMalloc, cudaMallocAsync or cudaMallocManaged"),
    (re.compile(r"\bcudaLaunchKernelEx\w*\s*\(|\bcudaLaunchAttribute\w*"), "launch attributes (cudaLaunchKernelEx)",
     "use a <<<grid, block, shared, stream>>> launch"),
]
# CUDA libraries and facilities the executor provides no header for.
_HEADERS = re.compile(r'^[ \t]*#\s*include\s*[<"]((?:cuda_fp8|cublas(?!_v2\.h|Lt\.h)\w*|cufft(?!(?:Xt)?\.h[>"])\w*|'
                      r'cusparse(?!(?:_v2)?\.h[>"])\w*|cusolver\w*|cudnn\w*|'
                      r'nvrtc|npp\w*|nvjpeg|helper_nvJPEG|nccl|nvml|cutensor\w*|cuda_gl_interop|cuda_egl_interop|'
                      r'cuda_d3d\w*|cudaGL|cudaEGL|GL/\w+|EGL/\w+|d3d\d+\w*|dxgi\w*|vulkan/\w+|mpi|'
                      r'cuda/(?!barrier[>"]|pipeline[>"]|std/)[\w/]+|cub/[\w/]+|'
                      r'thrust/system/cuda/[\w/]+)(?:\.h|\.hpp|\.hxx|\.cuh)?)[>"]', re.M)
# Thrust and libcu++ (cuda/std), built with CCCL's headers where they are found (cccl.py).
CCCL_HEADERS = re.compile(r'^[ \t]*#\s*include\s*[<"]((?:thrust|cuda/std)/[\w/.]+)[>"]', re.M)
# Thrust's CUDA system by name: its policies launch CUDA kernels of Thrust's own.
_THRUST_CUDA = re.compile(r"\bthrust\s*::\s*(?:system\s*::\s*)?cuda\s*::")


def _header_words(name: str) -> str:
    if name.startswith("cuda_fp8"):
        return "fp8 types (__nv_fp8_e4m3; cuda_fp16.h's __half and cuda_bf16.h's __nv_bfloat16 are provided)"
    if name.startswith(("GL/", "EGL/", "cuda_gl", "cuda_egl", "cudaGL", "cudaEGL", "cuda_d3d", "d3d", "dxgi", "vulkan/")):
        return "graphics interop"
    if name.startswith("cuda/"):
        return "a device facility (libcu++ beyond <cuda/barrier>, <cuda/pipeline> and <cuda/std/...>)"
    if name.startswith("cub/"):
        return "CUB (its algorithms are CUDA kernels of its own; Thrust's, which run on the executor, do the same work)"
    if name.startswith("thrust/system/cuda"):
        return "Thrust's CUDA system (thrust::device runs on the executor: Thrust's C++ system stands in for it)"
    if name.startswith("cublas"):
        return "a cuBLAS header other than cublas_v2.h and cublasLt.h (which labkit provides in part)"
    if name.startswith("cusparse"):
        return "a cuSPARSE header other than cusparse.h (which labkit provides in part)"
    if name.startswith("cufft"):
        return "a cuFFT header other than cufft.h and cufftXt.h (which labkit provides in part)"
    name = re.sub(r"\.(?:h|hpp|hxx|cuh)$", "", name)
    if name == "helper_nvJPEG":
        return "the cuda-samples' helper for nvJPEG, a CUDA library"
    if name == "mpi":
        return "MPI (several processes, one GPU each)"
    if name == "nccl":
        return "NCCL (collectives across several GPUs)"
    return "a CUDA library"


# The CUDA version the provided headers declare (cuda_runtime.h): branches on an older one are dropped
# by the preprocessor, and what they hold is not refused (deviceQuery's driver-API path before CUDA 5).
CUDA_VERSIONS = {"CUDART_VERSION": 12040, "CUDA_VERSION": 12040, "__CUDACC_VER_MAJOR__": 12}
_VERSION_IF = re.compile(r"#\s*if\s+\(?\s*(\w+)\s*(<=|>=|==|!=|<|>)\s*(\d+)\s*\)?\s*$")
_OPS = {"<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__, "==": int.__eq__, "!=": int.__ne__}


_DEFINED_IF = re.compile(r"#\s*(?:(ifdef|ifndef)\s+(\w+)|if\s+(!?)\s*defined\s*(?:\(\s*(\w+)\s*\)|\s(\w+)))\s*$")


def _switch(stripped: str, defined: frozenset[str] | None) -> str | None:
    """'live' or 'dead' for `#ifdef NAME`, `#ifndef NAME`, `#if defined(NAME)` or `#if !defined(NAME)`
    where NAME is a build switch (no leading underscore) that nothing defines: neither the program's
    files, nor the executor's headers and flags, nor the compiler (``defined``).  None otherwise."""
    m = _DEFINED_IF.match(stripped) if defined is not None else None
    if not m:
        return None
    name = m.group(2) or m.group(4) or m.group(5)
    if name.startswith("_") or name in defined:
        return None
    wants_defined = m.group(1) == "ifdef" or (m.group(1) is None and not m.group(3))
    return "dead" if wants_defined else "live"


def blank_dropped_branches(text: str, defined: frozenset[str] | None = None) -> str:
    """Blank the lines of a `#if CUDART_VERSION < 5000` (or CUDA_VERSION, __CUDACC_VER_MAJOR__) branch that
    the preprocessor drops for the provided headers' version, and, given the macros that anything
    defines (``defined``: see defined_macros), of an `#ifdef ENABLE_CUDNN` branch whose switch nothing
    defines (nvcc's build would need a -D of its own for it); other conditionals are kept whole."""
    lines = text.split("\n")
    stack: list[str] = []     # per open conditional: "live", "dead" (the branch now open) or "other"
    for i, line in enumerate(lines):
        stripped = line.strip()
        m = re.match(r"#\s*(if|ifdef|ifndef|elif|else|endif)\b", stripped)
        if m:
            word = m.group(1)
            if word in ("if", "ifdef", "ifndef"):
                v = _VERSION_IF.match(stripped) if word == "if" else None
                if v and v.group(1) in CUDA_VERSIONS:
                    stack.append("live" if _OPS[v.group(2)](CUDA_VERSIONS[v.group(1)], int(v.group(3))) else "dead")
                else:
                    stack.append(_switch(stripped, defined) or "other")
            elif word == "else" and stack and stack[-1] != "other":
                stack[-1] = "dead" if stack[-1] == "live" else "live"
            elif word == "elif" and stack and stack[-1] != "other":
                stack[-1] = "other"     # an #elif chain: kept whole
            elif word == "endif" and stack:
                stack.pop()
            continue
        if "dead" in stack:
            lines[i] = " " * len(line)
    return "\n".join(lines)


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)


@functools.lru_cache(maxsize=1)
def _known_macros() -> frozenset[str]:
    """The macros the executor's headers and flags define, and the compiler's own."""
    here = Path(__file__).resolve().parent
    names = {"__CUDACC__", "__NVCC__", "__CUDACC_VER_MAJOR__", "__CUDACC_VER_MINOR__", "LABKIT_PROGRAM"}
    for f in [*(here / "program_include").rglob("*"), *(here / "include").rglob("*")]:
        if f.is_file():
            names |= set(_DEFINE.findall(f.read_text(errors="replace")))
    try:
        cxx, _ = compiler.compiler()
        out = subprocess.run([cxx, "-dM", "-E", "-x", "c++", "-fopenmp", "-"], input="", capture_output=True,
                             text=True, timeout=60).stdout
        names |= set(_DEFINE.findall(out))
    except (OSError, subprocess.SubprocessError, KernelCompileError):
        pass
    return frozenset(names)


def defined_macros(sources: list[str]) -> frozenset[str]:
    """Every macro that a program's files (their text) define, with those the executor and compiler
    define: an `#ifdef` of another is dropped by the preprocessor here and by nvcc's build alike."""
    names = set(_known_macros())
    for src in sources:
        names |= set(_DEFINE.findall(src))
    return frozenset(names)


def _blank(src: str, defined: frozenset[str] | None = None) -> str:
    return blank_dropped_branches(kernel_source.blank_gpu_only(kernel_source.strip_comments(src)), defined)


def _matching_open(text: str, close: int, pair: str) -> int:
    """Position of the bracket opening the one at ``close`` (scanning back), or -1."""
    opener, closer = pair
    depth = 0
    for i in range(close, -1, -1):
        if text[i] == closer:
            depth += 1
        elif text[i] == opener:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _callee_start(text: str, end: int) -> int:
    """Start of the kernel expression that ends just before ``end`` (``<<<``): a name, qualified
    (``ns::k``), with template arguments (``k<float, 128>``), or a parenthesised expression."""
    i = end
    while True:
        while i > 0 and text[i - 1].isspace():
            i -= 1
        if i > 0 and text[i - 1] == ">":
            i = _matching_open(text, i - 1, "<>")
            if i < 0:
                return -1
            continue
        if i > 0 and text[i - 1] == ")":
            i = _matching_open(text, i - 1, "()")
            if i < 0:
                return -1
            return i
        j = i
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
            j -= 1
        if j == i:
            return -1
        i = j
        k = i
        while k > 0 and text[k - 1].isspace():
            k -= 1
        if text[max(0, k - 2):k] == "::":
            i = k - 2
            continue
        return i


def _close_of(text: str, start: int) -> int:
    """Position of ``>>>`` closing a configuration that starts at ``start``, at bracket depth 0."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith(">>>", i):
            return i
        elif c == ";" and depth <= 0:
            return -1
        i += 1
    return -1


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def device_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the bodies of __global__ and __device__ functions in blanked ``text``."""
    spans = []
    for m in re.finditer(r"\b(__global__|__device__)\b", text):
        # the function's body: the first `{` after the declaration's `)`, unless a `;` comes first
        j = m.end()
        paren = text.find("(", j)
        semi = text.find(";", j)
        if paren < 0 or (0 <= semi < paren):
            continue
        brace = text.find("{", paren)
        semi = text.find(";", paren)
        if brace < 0 or (0 <= semi < brace and text[paren:semi].count("(") <= text[paren:semi].count(")")):
            continue
        depth = 0
        for k in range(brace, len(text)):
            if text[k] == "{":
                depth += 1
            elif text[k] == "}":
                depth -= 1
                if depth == 0:
                    spans.append((brace, k + 1))
                    break
    return spans


# A device-side wait for child grids (CUDA 11's dynamic parallelism; gone since CUDA 12).
_DEVICE_SYNC = re.compile(r"\bcudaDeviceSynchronize\s*\(")


# cuBLAS's routines by their names (BLAS's, with cuBLAS's type letter, and its extensions), and those
# that program_include/cublas_v2.h provides: a call of another is refused by name.
_CUBLAS_ROUTINE = re.compile(
    r"\b(cublas(?:[SDCZH](?:gemm|gemv|ger|gbmv|sbmv|spmv|spr|symv|syr|tbmv|tbsv|tpmv|tpsv|trmv|trsv|trsm|trmm|symm|"
    r"syrk|syr2k|herk|her2k|hemm|hemv|her|hpmv|hpr|hbmv|getrf|getri|getrs|geqrf|gels|matinv|tpttr|trttp|axpy|scal|"
    r"copy|swap|dot|nrm2|asum|rot|dgmm|geam)\w*|I[sdcz]am(?:ax|in)\w*|Gemm\w+|\w+Ex|Lt[A-Z]\w*|Xt[A-Z]\w*))\s*\(")


def _provided_cublas() -> frozenset[str]:
    here = Path(__file__).resolve().parent / "program_include"
    text = (here / "cublas_v2.h").read_text() + (here / "cublasLt.h").read_text()
    names = set(re.findall(r"\b(cublas\w+)\s*\(", text))
    for prefix, letter, rest in re.findall(r"cublas(I?)##(P|p)##(\w+)\(", text):
        for P, p in (("S", "s"), ("D", "d")):
            names.add(f"cublas{prefix}{P if letter == 'P' else p}{rest}")
    return frozenset(names)


PROVIDED_CUBLAS = _provided_cublas()
# cuSPARSE's and cuFFT's routines by name, and those labkit's headers provide: a call of another (that
# the program does not define itself) is refused by name.
_LIBRARY_ROUTINE = re.compile(r"\b((cusparse|cufft)[A-Z]\w*)\s*\(")
_LIBRARY_HEADER = {"cusparse": ("cuSPARSE", "cusparse.h", "the generic API's sparse matrix-vector product, "
                                "cusparseSpMV, over CSR and COO matrices"),
                   "cufft": ("cuFFT", "cufft.h", "plans of rank 1 to 3 and the C2C, R2C, C2R, Z2Z, D2Z and Z2D "
                             "transforms; not cuFFTXt's multi-GPU and callback routines")}
PROVIDED_LIBRARY = frozenset(
    name for f in ("cusparse.h", "cufft.h", "cufftXt.h")
    for name in re.findall(r"\b((?:cusparse|cufft)\w+)\s*\(",
                           (Path(__file__).resolve().parent / "program_include" / f).read_text()))


# Calls of the CUDA runtime by name, and the names the executor's headers provide (their functions and
# macros): a call of another, which the program does not define itself, is refused by name.
_RUNTIME_CALL = re.compile(r"\b(cuda[A-Z]\w*)\s*\(")
_NOT_A_TYPE = {"return", "else", "case", "throw", "co_return", "sizeof", "new", "delete", "do", "goto"}


def _own_names(src: str, text: str, prefix: str) -> set[str]:
    """The names starting with ``prefix`` and a capital (a library's naming) that a file defines or
    declares as functions (in ``text``, its blanked form) or as macros (in ``src``): a program's own
    helpers, such as llm.c's cudaCheck, which are not the library's routines."""
    name = rf"((?:{prefix})[A-Z]\w*)"
    own = {m.group(2) for m in re.finditer(rf"(\w+|[*&>])\s+{name}\s*\(", text) if m.group(1) not in _NOT_A_TYPE}
    return own | set(re.findall(rf"#\s*define\s+{name}", src))


def _provided_runtime() -> frozenset[str]:
    here = Path(__file__).resolve().parent
    names: set[str] = set()
    for f in [*(here / "program_include").rglob("*.h"), *(here / "include").rglob("*")]:
        if f.is_file() and f.suffix in ("", ".h"):
            text = f.read_text(errors="replace")
            names |= set(_RUNTIME_CALL.findall(text)) | set(re.findall(r"#\s*define\s+(cuda[A-Z]\w*)", text))
    return frozenset(names)


PROVIDED_RUNTIME = _provided_runtime()


def check_runtime_calls(files: dict[str, str], defined: frozenset[str] | None = None) -> None:
    """Raise UnsupportedOnCPU, naming the call and its line, where a program's file ({path: source})
    calls a CUDA runtime function that the executor's headers do not provide and that no file of the
    program defines or declares itself (a helper such as `cudaCheck`); not in a branch the preprocessor
    drops (``defined``: see check_program_supported)."""
    texts = {path: _blank(src, defined) for path, src in files.items()}
    own: set[str] = set()
    for src, text in zip(files.values(), texts.values()):
        own |= _own_names(src, text, "cuda")
    for path, text in texts.items():
        for m in _RUNTIME_CALL.finditer(text):
            if m.group(1) not in PROVIDED_RUNTIME and m.group(1) not in own:
                raise UnsupportedOnCPU(
                    f"{path}:{_line(text, m.start())} calls {m.group(1)}, a CUDA runtime function that the CPU "
                    "executor does not model; this program needs a GPU")


def check_program_supported(src: str, path: str, defined: frozenset[str] | None = None) -> None:
    """Raise UnsupportedOnCPU, naming the construct and its line, where a program uses what the
    executor does not model.  ``defined`` (defined_macros): what is under an `#ifdef` of a switch that
    nothing defines is not looked at, as the preprocessor drops it."""
    if kernel_source.REQUIRES_GPU.search(src):
        kernel_source.check_supported(src, path)
    # The reads of special registers that the rewrite accepts are not asm statements to refuse.
    text = _blank(kernel_source.rewrite_special_registers(src, time_registers=True), defined)
    # The names are in quotes or brackets, which the blanked text has lost: searched in the source itself,
    # without the branches the preprocessor drops.
    m = _HEADERS.search(blank_dropped_branches(src, defined))
    if m:
        raise UnsupportedOnCPU(
            f"{path}:{_line(text, m.start())} includes <{m.group(1)}>, {_header_words(m.group(1))} that the "
            "CPU executor does not provide; this program needs a GPU")
    m = CCCL_HEADERS.search(src)
    if m and cccl.include_dir() is None:
        raise UnsupportedOnCPU(
            f"{path}:{_line(text, m.start())} includes <{m.group(1)}>, which the CPU executor builds with the headers "
            f"of the CUDA C++ Core Libraries, and none were found: {cccl.ADVICE}")
    for m in _CUBLAS_ROUTINE.finditer(text):
        if m.group(1) not in PROVIDED_CUBLAS:
            raise UnsupportedOnCPU(
                f"{path}:{_line(text, m.start())} calls {m.group(1)}, a cuBLAS routine that labkit's cublas_v2.h does "
                "not provide (it has the level-1 routines, gemv, the gemm family and the batched LU routines in float "
                "and double, the GemmEx family and cuBLASLt's matmul); this program needs a GPU")
    own = _own_names(src, text, "cusparse|cufft")
    for m in _LIBRARY_ROUTINE.finditer(text):
        if m.group(1) not in PROVIDED_LIBRARY and m.group(1) not in own:
            library, header, has = _LIBRARY_HEADER[m.group(2)]
            raise UnsupportedOnCPU(
                f"{path}:{_line(text, m.start())} calls {m.group(1)}, a {library} routine that labkit's {header} "
                f"does not provide (it has {has}); this program needs a GPU")
    m = _THRUST_CUDA.search(text)
    if m:
        raise UnsupportedOnCPU(
            f"{path}:{_line(text, m.start())} uses Thrust's CUDA system by name (thrust::cuda::par, its streams), "
            "which the CPU executor does not model: use thrust::device (Thrust's C++ system stands in for it here)")
    for pattern, what, advice in _HOST_UNSUPPORTED:
        m = pattern.search(text)
        if m:
            raise UnsupportedOnCPU(f"{path}:{_line(text, m.start())} uses {what}, which the CPU executor does "
                                   f"not model: {advice}")
    spans = device_spans(text)
    for a, b in spans:
        body = text[a:b]
        m = _DEVICE_SYNC.search(body)
        if m:
            raise UnsupportedOnCPU(
                f"{path}:{_line(text, a + m.start())} calls cudaDeviceSynchronize in device code, to wait for the "
                "grids it launched (dynamic parallelism); CUDA 12 removed it and the CPU executor does not model "
                "it: launch the work that needs the children's results into cudaStreamTailLaunch, or from the host")
        for pattern, what in kernel_source.UNSUPPORTED:
            if "cycle counter" in what:   # a program's clock64() counts time (labkit_cpu.h)
                continue
            m = pattern.search(body)
            if m:
                raise UnsupportedOnCPU(
                    f"{path}:{_line(text, a + m.start())} uses {what} in device code, which the CPU executor "
                    "cannot model; this program needs a GPU")
    # Textures and half types anywhere (host code declares them too).
    for pattern, what in kernel_source.UNSUPPORTED:
        if "textures" in what or "half" in what:
            m = pattern.search(text)
            if m:
                raise UnsupportedOnCPU(f"{path}:{_line(text, m.start())} uses {what}, which the CPU executor "
                                       "cannot model; this program needs a GPU")


def rewrite_launches(src: str, path: str = "<program>") -> str:
    """``k<<<config>>>(args)`` -> ``::labkit::kernel_call(<a lambda calling k>, "k", config)(args)``
    everywhere in code (not in comments or strings), keeping every line in place."""
    text = kernel_source.strip_comments(src)
    edits: list[tuple[int, int, str]] = []
    pos = 0
    while True:
        k = text.find("<<<", pos)
        if k < 0:
            break
        close = _close_of(text, k + 3)
        start = _callee_start(text, k)
        if close < 0 or start < 0:
            raise UnsupportedOnCPU(f"{path}:{_line(text, k)}: a kernel launch `<<<...>>>` that the CPU executor "
                                   "cannot read: write it as `kernel<<<grid, block, shared, stream>>>(args)`")
        callee = " ".join(src[start:k].split())
        name = callee.replace("\\", "\\\\").replace('"', '\\"')
        edits += [(start, start, "::labkit::kernel_call([=](auto&... labkit_a) { "),
                  (k, k + 3, f'(labkit_a...); }}, "{name}", '),
                  (close, close + 3, ")")]
        edits += _null_arguments(text, close + 3)
        pos = close + 3
    return kernel_source.apply_edits(src, edits)


_NULL_ARGUMENT = re.compile(r"[(,]\s*(NULL)(?=\s*[,)])")


def _null_arguments(text: str, after: int) -> list[tuple[int, int, str]]:
    """A launch's arguments that are ``NULL`` alone -> ``nullptr``: the arguments pass through a generic
    lambda, where NULL (an integer constant) would arrive as a long and no longer convert to the
    kernel's pointer parameter, as it does in nvcc's direct call."""
    i = after
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text) or text[i] != "(":
        return []
    depth, j = 0, i
    while j < len(text):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            break
        j += 1
    return [(i + m.start(1), i + m.end(1), "nullptr") for m in _NULL_ARGUMENT.finditer(text[i:j + 1])]


_DEVICE_CLOCK = re.compile(r"(?<![\w:.>])clock\s*\(\s*\)")


def rewrite_device_clock(src: str) -> str:
    """``clock()`` in device code -> ``::labkit::device_clock()``: the SM's cycle counter, not the C
    library's processor time that the same name means in host code."""
    text = _blank(src)
    edits = {(m.start(), m.end(), "::labkit::device_clock()")
             for a, b in device_spans(text) for m in _DEVICE_CLOCK.finditer(text, a, b)}   # spans may nest
    return kernel_source.apply_edits(src, edits)


# `#if __CUDA_ARCH__ >= 800` (a comparison, alone on its line): nvcc's device pass takes the branch for
# the GPU's architecture and its host pass the other, since there __CUDA_ARCH__ is undefined.  Such a
# branch guards device code (an intrinsic of newer GPUs), so the one pass of a program takes the device
# pass's branch, for the architecture kernels are compiled for (labkit_cpu.h's LABKIT_CUDA_ARCH).
# `#ifdef __CUDA_ARCH__` and `defined(__CUDA_ARCH__)` keep the host pass's meaning.
DEVICE_ARCH = 800
_ARCH_IF = re.compile(r"^([ \t]*#[ \t]*(?:if|elif)[ \t]+\(?[ \t]*)__CUDA_ARCH__(?=[ \t]*(?:<=|>=|==|!=|<|>)[ \t]*\d+[ \t]*\)?[ \t]*$)",
                      re.M)


def rewrite_arch_conditions(src: str) -> str:
    """``#if __CUDA_ARCH__ >= 800`` -> ``#if 800 >= 800`` (see DEVICE_ARCH), keeping every line."""
    text = kernel_source.strip_comments(src)
    edits = [(m.start() + len(m.group(1)), m.end(), str(DEVICE_ARCH)) for m in _ARCH_IF.finditer(text)]
    return kernel_source.apply_edits(src, edits)


# A kernel defined here, by name: `__global__ void name(` with launch bounds or specifiers around.
_KERNEL_DEF = re.compile(r"\b__global__\s+(?:(?:__launch_bounds__\s*\([^()]*\)|static|inline|__forceinline__|__noinline__)\s+)*"
                         r"void\s+(?:__launch_bounds__\s*\([^()]*\)\s*)?(\w+)\s*\(")


def rewrite_kernel_registrations(src: str) -> str:
    """After the body of each kernel defined in ``src`` that is not a template (nor defined twice), a
    registration of its address and parameter types (labkit_graphs.h), on the same line: what lets a
    graph's kernel node or ``cudaLaunchKernel((void*)kernel, ...)`` launch it by its address.  At the
    start of every kernel's body, the check that it runs in a launch: host code that calls a
    __global__ function itself (through a pointer, with no <<<>>> configuration) launches nothing on
    a GPU, and nothing here either (labkit_runtime_api.h's unlaunched says so)."""
    text = _blank(src)
    found: dict[str, list[tuple[int, bool]]] = {}
    entries: list[tuple[int, int, str]] = []
    for m in _KERNEL_DEF.finditer(text):
        start = max(text.rfind(c, 0, m.start()) for c in ";{}")
        is_template = re.search(r"\btemplate\b", text[start + 1:m.start()]) is not None
        depth, i = 0, m.end() - 1
        while i < len(text):          # the parameter list's close
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        j = i + 1
        while j < len(text) and text[j].isspace():
            j += 1
        end = -1
        if j < len(text) and text[j] == "{":
            entries.append((j + 1, j + 1, f' if (::labkit::rt::unlaunched("{m.group(1)}")) return;'))
            depth = 0
            for k in range(j, len(text)):
                depth += {"{": 1, "}": -1}.get(text[k], 0)
                if depth == 0:
                    end = k + 1
                    break
        params = " ".join(text[m.end():i].split())
        found.setdefault(m.group(1), []).append((end, is_template, params))
    edits = []
    for name, defs in found.items():
        if len(defs) != 1 or defs[0][1] or defs[0][0] < 0:
            continue
        # The definition's own parameter list picks it where a declaration elsewhere overloads the name
        # (a header's older signature); a list with default arguments cannot be a type's: the name alone.
        params = defs[0][2]
        address = f"&{name}" if "=" in params else f"static_cast<void (*)({params})>(&{name})"
        edits.append((defs[0][0], defs[0][0], f" static const bool labkit_kernel_registered_{name} = "
                                              f'::labkit::rt::register_kernel({address}, "{name}");'))
    return kernel_source.apply_edits(src, edits + entries)


# `params.gridDim`, `p->blockDim`, `{.gridDim = ...}`: a member of the runtime's structures
# (cudaKernelNodeParams), which the executor's gridDim and blockDim (macros, for kernels) would replace.
_DIM_MEMBER = re.compile(r"(?:\.|->)\s*(gridDim|blockDim)\b")


def rewrite_dim_members(src: str) -> str:
    """``x.gridDim`` -> ``x.labkit_gridDim`` (and blockDim): the members' names in labkit_graphs.h."""
    text = kernel_source.strip_comments(src)
    return kernel_source.apply_edits(src, [(m.start(1), m.start(1), "labkit_") for m in _DIM_MEMBER.finditer(text)])


# `dim3 gridDim, blockDim;` in host code: names of the host's own there (kernels' built-ins only exist in
# device code), which the executor's gridDim and blockDim (macros, for kernels) would replace.
_HOST_DIM = re.compile(r"(?<![\w.>:])(gridDim|blockDim)\b")
_HOST_DIM_DECL = re.compile(r"\bdim3\b[\s&*]*(?:\w+\s*(?:\([^()]*\))?\s*,[\s&*]*)*(gridDim|blockDim)\b")


def rewrite_host_dims(src: str) -> str:
    """Where host code declares a dim3 named ``gridDim`` or ``blockDim``: that name -> ``labkit_host_gridDim``
    (``labkit_host_blockDim``) at every use outside __global__ and __device__ functions and preprocessor
    lines."""
    text = _blank(src)
    spans = device_spans(text)
    in_device = lambda pos: any(a <= pos < b for a, b in spans)   # noqa: E731
    declared = {m.group(1) for m in _HOST_DIM_DECL.finditer(text) if not in_device(m.start(1))}
    edits = []
    for m in _HOST_DIM.finditer(text):
        if m.group(1) not in declared or in_device(m.start()):
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        if text[line_start:m.start()].lstrip().startswith("#"):
            continue
        edits.append((m.start(), m.start(), "labkit_host_"))
    return kernel_source.apply_edits(src, edits)


def rewrite_program(src: str, path: str) -> str:
    """A program file as the host compiler reads it: its __shared__ declarations and its inline PTX reads
    of special registers as for kernels (kernel_source.rewrite), its launches as calls (rewrite_launches),
    host variables named gridDim or blockDim renamed (rewrite_host_dims),
    clock() in device code as the SM's counter (rewrite_device_clock), comparisons of __CUDA_ARCH__ as the
    device pass reads them (rewrite_arch_conditions), and each kernel registered by its address
    (rewrite_kernel_registrations)."""
    src = rewrite_launches(rewrite_device_clock(kernel_source.rewrite(
        rewrite_host_dims(rewrite_dim_members(rewrite_arch_conditions(src))), time_registers=True)), path)
    if path.endswith((".cpp", ".cc", ".cxx", ".c")):    # C++ files hold no kernels
        return src
    return rewrite_kernel_registrations(src)
