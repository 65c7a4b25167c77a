"""Reading a CUDA C source for the CPU executor.

The executor compiles the kernel file's own text with a header in front
(``include/labkit_cpu.h``).  Before that, this module:

* finds the ``extern "C" __global__`` kernels, the ``__constant__`` and
  ``__device__`` variables (the names Python may ask for);
* refuses constructs the executor cannot model (sub-byte tensor-core operations,
  inline PTX but the reads of special registers that rewrite_special_registers turns into
  the executor's calls, ``clock64``, multi-device grid groups), naming them, and honours
  a kernel file's declaration that it needs a GPU
  (a comment ``// labkit: requires-gpu <why>``);
* rewrites ``extern __shared__ T name[];`` (dynamic shared memory, sized at
  launch) into a pointer to the worker's buffer.  The rewrite keeps every line
  where it was, so compiler messages carry the kernel file's own line numbers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import ConstantMemoryError, KernelCompileError, LaunchError, UnsupportedOnCPU  # noqa: F401


@dataclass
class SourceInfo:
    kernels: list[str] = field(default_factory=list)      # extern "C" __global__ names
    constants: list[str] = field(default_factory=list)    # __constant__ variables
    globals: list[str] = field(default_factory=list)      # __device__ variables
    params: dict[str, list[str]] = field(default_factory=dict)  # kernel -> parameter names
    # kernel -> parameter type codes read off the declaration ('cptr:f32', 'i32', ...; None
    # where the text alone cannot tell, as for a template parameter)
    param_types: dict[str, list[str | None]] = field(default_factory=dict)


def strip_comments(src: str) -> str:
    """Blank out comments and string/char literals, keeping every character's position."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            # keep the quotes so that `extern "C"` stays recognisable
            for k in range(i + 1, min(j, n)):
                out[k] = "C" if src[i + 1:j] == "C" else " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _depths(text: str) -> list[int]:
    """Brace depth at each position (0 = file scope)."""
    d, depth = [], 0
    for ch in text:
        if ch == "{":
            depth += 1
        d.append(depth)
        if ch == "}":
            depth = max(0, depth - 1)
    return d


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


# Constructs a CPU cannot model, each with the words used to name it.
UNSUPPORTED = [
    (re.compile(r"\basm\s*(volatile\s*)?\("), "inline PTX assembly (asm)"),
    (re.compile(r"\bexperimental::precision\b|\bprecision::(?:u4|s4|b1)\b|\bbmma_sync\b"),
     "sub-byte tensor-core operations (wmma::experimental::precision u4, s4, b1; half, bf16, tf32 and 8-bit "
     "inputs are modelled by mma.h)"),
    (re.compile(r"\b__(?:h|i|b|d)?mma_\w+"), "the tensor cores' builtins (__hmma_*, __imma_*; nvcuda::wmma is modelled)"),
    (re.compile(r"\bclock64\s*\(|\bclock\s*\(\s*\)"), "the SM cycle counter (clock64)"),
    (re.compile(r"\bthis_multi_grid\s*\(|\bmulti_grid_group\b"), "multi-device grid groups (this_multi_grid)"),
    (re.compile(r"\bcp\.async\b"), "asynchronous copies in PTX (cp.async; cuda::memcpy_async and "
     "__pipeline_memcpy_async run here)"),
    (re.compile(r"#\s*include\s*[<\"]cuda_fp8\.h[>\"]|\b__nv_fp8\w*"),
     "fp8 types (cuda_fp8.h; cuda_fp16.h's __half and cuda_bf16.h's __nv_bfloat16 are provided)"),
    (re.compile(r"\btex[123]D\w*\s*[<(]|\btex1Dfetch\b|\bcudaTextureObject_t\b|\bcudaSurfaceObject_t\b"),
     "textures and surfaces"),
    (re.compile(r"\bthis_cluster\s*\(|\bcluster_group\b|__cluster_dims__"), "thread-block clusters (sm_90)"),
]
REQUIRES_GPU = re.compile(r"//\s*labkit:\s*requires-gpu\b[ \t]*(.*)")

_KERNEL = re.compile(
    r'extern\s+"C"\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?__global__\s+'
    r'(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')
_KERNEL_ALT = re.compile(  # `__global__ extern "C"` is rare but legal
    r'__global__\s+extern\s+"C"\s+void\s+(\w+)\s*\(')
_CONSTANT = re.compile(r"\b__constant__\b[^;(){}]*?\b(\w+)\s*(?:\[[^\]]*\]\s*)*(?:=[^;]*)?;")
_DEVICE_VAR = re.compile(r"\b__device__\b(?![^;{}]*\()[^;{}]*?\b(\w+)\s*(?:\[[^\]]*\]\s*)*(?:=[^;]*)?;")
STORAGE_SUFFIX = "_labkit_storage"   # a __shared__ variable's storage, renamed (see rewrite)
# Parentheses, one level deep, may stand in the declaration: `__align__(16)`, `float s[(N + 1) * 2]`.
_STATIC_SHARED = re.compile(r"(?<!extern)(?<!extern )\b__shared__\b((?:\([^;{}()]*\)|[^;{}()])*);")
# `extern __shared__ T name[];` with its specifiers in any order (`extern T __shared__ name[]`,
# `extern __shared__ __align__(16) T name[]`): the type is the words around __shared__.  Rows of a fixed
# length may follow (`extern __shared__ half tile[][64 + 8];`): the name then points to such rows.
_SPECIFIER = r"(?:__align__\s*\(\s*\d+\s*\)|[\w:]+)"
_EXTERN_SHARED = re.compile(
    rf"extern\s+((?:{_SPECIFIER}\s+)*?)__shared__\s+((?:{_SPECIFIER}\s+)*?)(\w+)\s*\[\s*\]((?:\s*\[[^\[\];{{}}]+\])*)\s*;")
_ALIGN = re.compile(r"__align__\s*\(\s*\d+\s*\)")
# `static` beside `__shared__` (either side): CUDA allows it; the executor's __shared__ is already static.
_STATIC_BY_SHARED = re.compile(r"\bstatic(\s+)(?=(?:[\w:]+\s+)*?__shared__\b)|(?<=__shared__)(\s+)static\b")
# `__shared__ alignas(16) float s[...]` (cuda-samples write it): alignas may not follow `thread_local`
# in C++, so it is moved in front of __shared__ (the same characters, swapped: columns stay in place).
_SHARED_ALIGNAS = re.compile(r"\b__shared__(\s+)(alignas\s*\((?:[^()]|\([^()]*\))*\))")


# A kernel file may keep a GPU-only path (cp.async, inline PTX) beside a plain one for the executor,
# chosen by the macro LABKIT_CUDA_ARCH, which only the executor's header defines:
#   #if defined(LABKIT_CUDA_ARCH)   plain C++   #else   GPU-only   #endif   (or #ifndef ... for the reverse)
_IF_EXECUTOR = re.compile(r"#\s*(?:ifdef\s+LABKIT_CUDA_ARCH|if\s+defined\s*\(?\s*LABKIT_CUDA_ARCH\s*\)?)\s*$")
_IF_GPU = re.compile(r"#\s*(?:ifndef\s+LABKIT_CUDA_ARCH|if\s+!\s*defined\s*\(?\s*LABKIT_CUDA_ARCH\s*\)?)\s*$")
_DIRECTIVE = re.compile(r"#\s*(if|ifdef|ifndef|elif|else|endif)\b")


def blank_gpu_only(text: str) -> str:
    """Blank the lines the executor's preprocessor drops: a GPU-only branch of a conditional on
    LABKIT_CUDA_ARCH (other conditionals are kept whole)."""
    lines = text.split("\n")
    stack: list[str] = []     # per open conditional: "executor", "gpu" (the branch now open) or "other"
    for i, line in enumerate(lines):
        stripped = line.strip()
        m = _DIRECTIVE.match(stripped)
        if m:
            word = m.group(1)
            if word in ("if", "ifdef", "ifndef"):
                stack.append("executor" if _IF_EXECUTOR.match(stripped) else
                             "gpu" if _IF_GPU.match(stripped) else "other")
            elif word in ("else", "elif") and stack and stack[-1] != "other":
                stack[-1] = "gpu" if stack[-1] == "executor" else "executor"
            elif word == "endif" and stack:
                stack.pop()
            continue
        if "gpu" in stack:
            lines[i] = " " * len(line)
    return "\n".join(lines)


# Inline PTX that only reads a special register into a variable, the form teaching code and samples use:
#   asm("mov.u32 %0, %%laneid;" : "=r"(lane));   asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
# (nvcc takes the register with a single % as well: `mov.u64 %0, %globaltimer;`, as cuda-samples write it)
# rewrite_special_registers turns it into an assignment from the executor's call (labkit_cpu.h's
# labkit::sreg); every other asm statement is refused (UNSUPPORTED).
SPECIAL_REGISTERS = {
    "laneid": "::labkit::sreg::laneid()", "warpid": "::labkit::sreg::warpid()",
    "nwarpid": "::labkit::sreg::nwarpid()", "smid": "::labkit::sreg::smid()", "nsmid": "::labkit::sreg::nsmid()",
    **{f"lanemask_{w}": f"::labkit::sreg::lanemask_{w}()" for w in ("eq", "lt", "le", "ge", "gt")},
    **{f"{reg}.{c}": f"{name}.{c}" for reg, name in (("tid", "threadIdx"), ("ntid", "blockDim"),
                                                       ("ctaid", "blockIdx"), ("nctaid", "gridDim")) for c in "xyz"},
}
# Counters of time: a whole program may read them (labkit_cpu.h models them there); a kernel compiled on
# its own is refused them, as it is clock64(), since its results would depend on the count.
TIME_REGISTERS = {"clock": "::labkit::sreg::clock()", "clock64": "::labkit::sreg::clock64()",
                  "globaltimer": "::labkit::sreg::globaltimer()"}
_SPECIAL_ASM = re.compile(
    r'\b(?:asm|__asm__)\s*(?:(?:volatile|__volatile__)\s*)?\(\s*"\s*mov\.([usb])(32|64)\s+%0\s*,\s*%%?([A-Za-z_][\w.]*)\s*;?\s*"'
    r'\s*:\s*"=([rl])"\s*\(((?:[^()]|\([^()]*\))*)\)\s*\)')


_CTYPES = {"u32": "unsigned int", "b32": "unsigned int", "s32": "int", "u64": "unsigned long long",
           "b64": "unsigned long long", "s64": "long long"}


def _ptx_table() -> dict[str, tuple[int, str, str]]:
    """{instruction: (inputs, result's C type, C expression over {0}, {1}, ...)} for the single PTX
    instructions that rewrite_ptx_instructions turns into C++ (labkit_cpu.h: labkit::ptx and the
    integer intrinsics), each as the PTX ISA defines it."""
    t: dict[str, tuple[int, str, str]] = {}
    for ty in ("u32", "s32", "u64", "s64"):
        c = _CTYPES[ty]
        t[f"bfind.{ty}"] = (1, "unsigned int", f"::labkit::ptx::bfind(({c})({{0}}))")
        t[f"bfe.{ty}"] = (3, c, f"::labkit::ptx::bfe(({c})({{0}}), (unsigned)({{1}}), (unsigned)({{2}}))")
        for op, sym in (("add", "+"), ("sub", "-"), ("mul.lo", "*")):
            t[f"{op}.{ty}"] = (2, c, f"({c})(({c})({{0}}) {sym} ({c})({{1}}))")
        t[f"mad.lo.{ty}"] = (3, c, f"({c})(({c})({{0}}) * ({c})({{1}}) + ({c})({{2}}))")
        for op, cmp in (("min", "<"), ("max", ">")):
            t[f"{op}.{ty}"] = (2, c, f"(({c})({{0}}) {cmp} ({c})({{1}}) ? ({c})({{0}}) : ({c})({{1}}))")
    t["mul.hi.u32"] = (2, "unsigned int", "__umulhi((unsigned)({0}), (unsigned)({1}))")
    t["mul.hi.s32"] = (2, "int", "__mulhi((int)({0}), (int)({1}))")
    t["mul.hi.u64"] = (2, "unsigned long long", "__umul64hi((unsigned long long)({0}), (unsigned long long)({1}))")
    t["mul.hi.s64"] = (2, "long long", "__mul64hi((long long)({0}), (long long)({1}))")
    for ty, suffix in (("b32", ""), ("b64", "ll")):
        c = _CTYPES[ty]
        t[f"popc.{ty}"] = (1, "unsigned int", f"(unsigned)__popc{suffix}(({c})({{0}}))")
        t[f"clz.{ty}"] = (1, "unsigned int", f"(unsigned)__clz{suffix}(({'int' if ty == 'b32' else 'long long'})({{0}}))")
        t[f"brev.{ty}"] = (1, c, f"__brev{suffix}(({c})({{0}}))")
        t[f"bfi.{ty}"] = (4, c, f"::labkit::ptx::bfi(({c})({{0}}), ({c})({{1}}), (unsigned)({{2}}), (unsigned)({{3}}))")
        t[f"not.{ty}"] = (1, c, f"({c})~({c})({{0}})")
        for op, sym in (("and", "&"), ("or", "|"), ("xor", "^")):
            t[f"{op}.{ty}"] = (2, c, f"({c})(({c})({{0}}) {sym} ({c})({{1}}))")
    t["prmt.b32"] = (3, "unsigned int", "::labkit::ptx::prmt((unsigned)({0}), (unsigned)({1}), (unsigned)({2}))")
    for d in ("l", "r"):
        t[f"shf.{d}.wrap.b32"] = (3, "unsigned int", f"__funnelshift_{d}((unsigned)({{0}}), (unsigned)({{1}}), (unsigned)({{2}}))")
        t[f"shf.{d}.clamp.b32"] = (3, "unsigned int", f"__funnelshift_{d}c((unsigned)({{0}}), (unsigned)({{1}}), (unsigned)({{2}}))")
    return t


PTX_INSTRUCTIONS = _ptx_table()
_ARG = r'"[rlnh]"\s*\(((?:[^()]|\([^()]*\))*)\)'
_INSTRUCTION_ASM = re.compile(
    r'\b(?:asm|__asm__)\s*(?:(?:volatile|__volatile__)\s*)?\(\s*"\s*([a-z][\w.]*)\s+%0\s*((?:,\s*(?:%\d|-?\w+)\s*)*);?\s*"'
    r'\s*:\s*"=([rl])"\s*\(((?:[^()]|\([^()]*\))*)\)\s*'
    r'(?::\s*((?:' + _ARG + r'\s*,?\s*)*))?\)')


def rewrite_ptx_instructions(src: str) -> str:
    """``asm("bfind.u32 %0, %1;" : "=r"(r) : "r"(x))`` -> ``((r) = (unsigned int)::labkit::ptx::bfind(...))``
    for the single instructions of PTX_INSTRUCTIONS (operands %1.. in order, or integer immediates),
    keeping every line in place; other asm statements are left for check_supported to refuse."""
    text = strip_comments(src)
    edits = []
    for m in re.finditer(r"\b(?:asm|__asm__)\b", text):
        k = _INSTRUCTION_ASM.match(src, m.start())
        if not k or k.group(1) not in PTX_INSTRUCTIONS:
            continue
        inputs, ctype, expr = PTX_INSTRUCTIONS[k.group(1)]
        args = [a.strip() for a in re.findall(_ARG, k.group(5) or "")]
        operands = [o.strip() for o in k.group(2).split(",")[1:]]
        values = []
        for o in operands:
            if o.startswith("%"):
                i = int(o[1:])
                if not 1 <= i <= len(args):
                    break
                values.append(args[i - 1])
            else:
                values.append(o)
        if len(values) != inputs or len(operands) != inputs:
            continue
        repl = f"(({k.group(4).strip()}) = ({ctype})({expr.format(*values)}))"
        edits.append((k.start(), k.end(), repl + "\n" * src.count("\n", k.start(), k.end())))
    return apply_edits(src, edits)


def rewrite_special_registers(src: str, *, time_registers: bool = False) -> str:
    """``asm("mov.u32 %0, %%laneid;" : "=r"(x))`` -> ``(x) = (unsigned int)::labkit::sreg::laneid()``, for the
    registers of SPECIAL_REGISTERS (and TIME_REGISTERS where ``time_registers``), and the single
    instructions of rewrite_ptx_instructions, keeping every line in place; other asm statements are
    left for check_supported to refuse."""
    text = strip_comments(src)
    regs = {**SPECIAL_REGISTERS, **(TIME_REGISTERS if time_registers else {})}
    edits = []
    for m in re.finditer(r"\b(?:asm|__asm__)\b", text):
        k = _SPECIAL_ASM.match(src, m.start())
        if not k or k.group(3) not in regs or (k.group(2) == "64") != (k.group(4) == "l"):
            continue
        ctype = {("u", "32"): "unsigned int", ("b", "32"): "unsigned int", ("s", "32"): "int",
                 ("u", "64"): "unsigned long long", ("b", "64"): "unsigned long long",
                 ("s", "64"): "long long"}[k.group(1), k.group(2)]
        repl = f"(({k.group(5).strip()}) = ({ctype}){regs[k.group(3)]})"
        edits.append((k.start(), k.end(), repl + "\n" * src.count("\n", k.start(), k.end())))
    return rewrite_ptx_instructions(apply_edits(src, edits))


def check_supported(src: str, path: str) -> None:
    """Raise UnsupportedOnCPU if the file declares or uses what the executor cannot model."""
    m = REQUIRES_GPU.search(src)
    if m:
        why = m.group(1).strip() or "it says it needs a GPU"
        raise UnsupportedOnCPU(
            f"{path} declares that it needs a GPU ({why}); the CPU executor does not run it. "
            "Run it where CuPy sees a GPU.")
    text = blank_gpu_only(strip_comments(rewrite_special_registers(src)))
    for pattern, what in UNSUPPORTED:
        m = pattern.search(text)
        if m:
            raise UnsupportedOnCPU(
                f"{path}:{_line_of(text, m.start())} uses {what}, which the CPU executor cannot "
                "model; this kernel needs a GPU. Declare it with a comment "
                "`// labkit: requires-gpu <why>` so that callers are told before they try.")


_SCALAR_CODES = {
    "float": "f32", "double": "f64", "int": "i32", "signed int": "i32", "signed": "i32",
    "unsigned int": "u32", "unsigned": "u32", "long long": "i64", "long long int": "i64",
    "unsigned long long": "u64", "unsigned long long int": "u64", "size_t": "u64",
    "short": "i16", "unsigned short": "u16", "signed char": "i8", "char": "i8",
    "unsigned char": "u8", "bool": "bool", "int32_t": "i32", "uint32_t": "u32",
    "int64_t": "i64", "uint64_t": "u64", "int8_t": "i8", "uint8_t": "u8",
    "float2": "bytes8", "float4": "bytes16", "int2": "bytes8", "int4": "bytes16",
    "uint4": "bytes16", "double2": "bytes16", "void": "void",
}
_QUALIFIERS = {"__restrict__", "__restrict", "restrict", "volatile", "__grid_constant__"}


def _param_code(decl: str) -> tuple[str, str | None]:
    """(name, type code) of one parameter declaration such as `const float* __restrict__ x`."""
    words = re.findall(r"\w+|\*", decl)
    if not words:
        return "", None
    name = words[-1]
    body = [w for w in words[:-1] if w not in _QUALIFIERS]
    stars = body.count("*")
    if stars > 1:
        return name, None
    if stars == 1:
        k = body.index("*")
        const = "const" in body[:k]
        base = " ".join(w for w in body[:k] if w != "const")
        code = _SCALAR_CODES.get(base)
        return name, None if code is None else ("cptr:" if const else "ptr:") + code
    base = " ".join(w for w in body if w != "const")
    return name, _SCALAR_CODES.get(base) if base != "void" else None


def _params(text: str, open_paren: int) -> list[tuple[str, str | None]]:
    depth, j = 0, open_paren
    while j < len(text):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                break
        j += 1
    inner = text[open_paren + 1:j]
    out, depth, cur = [], 0, ""
    for ch in inner + ",":
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            if cur.strip() and cur.strip() != "void":
                out.append(_param_code(cur))
            cur = ""
        else:
            cur += ch
    return out


def scan(src: str) -> SourceInfo:
    """Find the names Python may use: kernels, constant and device variables."""
    text = strip_comments(src)
    depth = _depths(text)
    info = SourceInfo()
    for pattern in (_KERNEL, _KERNEL_ALT):
        for m in pattern.finditer(text):
            if depth[m.start()] == 0 and m.group(1) not in info.kernels:
                info.kernels.append(m.group(1))
                params = _params(text, m.end() - 1)
                info.params[m.group(1)] = [p[0] for p in params]
                info.param_types[m.group(1)] = [p[1] for p in params]
    for m in _CONSTANT.finditer(text):
        if depth[m.start()] == 0:
            info.constants.append(m.group(1))
    for m in _DEVICE_VAR.finditer(text):
        if depth[m.start()] == 0 and "__constant__" not in m.group(0):
            info.globals.append(m.group(1))
    return info


def _declared_names(decl: str) -> list[tuple[str, int]]:
    """Names declared by `float a[4][4], b[16]` (the text after __shared__), each with its offset."""
    chunks, depth, start = [], 0, 0
    for i, ch in enumerate(decl + ","):
        if ch in "[(<":
            depth += 1
        elif ch in "])>":
            depth -= 1
        if ch == "," and depth == 0:
            chunks.append((start, decl[start:i]))
            start = i + 1
    names = []
    for at, chunk in chunks:
        head = chunk.split("[", 1)[0].split("=", 1)[0]
        words = list(re.finditer(r"\w+", head))
        if words:
            names.append((words[-1].group(0), at + words[-1].start()))
    return names


def rewrite(src: str, *, time_registers: bool = False) -> str:
    """Adapt a kernel source for the CPU executor's header, keeping every line in place.

    * inline PTX that reads a special register becomes the executor's call (rewrite_special_registers;
      the counters of time too where ``time_registers``, as for a whole program);

    * `extern __shared__ T name[];` (dynamic shared memory, sized at launch) becomes a
      pointer to the worker's buffer: a local pointer inside a function, a macro at
      file scope (where the name then means the buffer everywhere, as in CUDA);
    * each `__shared__` variable declared inside a function keeps its storage under another
      name, and its own name becomes a reference to what `::labkit::shared_var` gives: the
      storage itself, filled with NaN bytes whenever a block starts (shared memory starts
      undefined on a GPU; stale values from the previous block would hide a missing write or
      barrier), or under the memory check a heap block of exactly its size, whose edges
      AddressSanitizer guards.
    """
    src = rewrite_special_registers(src, time_registers=time_registers)
    # Blank a `static` beside `__shared__` (same length: every line and column stays in place).
    src = _STATIC_BY_SHARED.sub(lambda m: " " * len(m.group(0)), src)
    src = _SHARED_ALIGNAS.sub(lambda m: m.group(2) + m.group(1) + "__shared__", src)
    text = strip_comments(src)
    depth = _depths(text)
    edits: list[tuple[int, int, str]] = []
    for m in _EXTERN_SHARED.finditer(text):
        ty = " ".join(_ALIGN.sub(" ", m.group(1) + " " + m.group(2)).split())
        name = m.group(3)
        rows = " ".join(m.group(4).split())     # the fixed extents of a row, if any: `[64 + 8]`
        ptr = f"{ty} (*)" + rows if rows else f"{ty}*"
        if depth[m.start()] > 0:
            decl = f"{ty} (* const {name}){rows}" if rows else f"{ty}* const {name}"
            repl = f"{decl} = reinterpret_cast<{ptr}>(::labkit::dyn_shared());"
        else:
            # a macro needs lines of its own; #line puts the numbering back
            repl = (f"\n#define {name} (reinterpret_cast<{ptr}>(::labkit::dyn_shared()))\n"
                    f"#line {_line_of(text, m.end())}\n")
        edits.append((m.start(), m.end(), repl))
    extern_spans = [(a, b) for a, b, _ in edits]
    for m in _STATIC_SHARED.finditer(text):
        if depth[m.start()] == 0 or any(a <= m.start() < b for a, b in extern_spans):
            continue
        names = _declared_names(m.group(1))
        at = m.start(1)
        for n, off in names:
            edits.append((at + off + len(n), at + off + len(n), STORAGE_SUFFIX))
        binds = "".join(f' auto& {n} = ::labkit::shared_var({n}{STORAGE_SUFFIX}, "{n}");' for n, _ in names)
        edits.append((m.end(), m.end(), binds))
    return apply_edits(src, edits)


def apply_edits(src: str, edits: list[tuple[int, int, str]]) -> str:
    """``src`` with each (start, end, replacement) edit made; the spans must not overlap."""
    out, last = [], 0
    for a, b, repl in sorted(edits):
        out.append(src[last:a])
        out.append(repl)
        last = b
    out.append(src[last:])
    return "".join(out)


# --- argument checks shared by both backends ----------------------------------------------
C_NAMES = {"f32": "float", "f64": "double", "i32": "int", "u32": "unsigned int",
           "i64": "long long", "u64": "unsigned long long", "i16": "short",
           "u16": "unsigned short", "i8": "signed char", "u8": "unsigned char", "bool": "bool",
           "void": "void"}
NP_DTYPES = {"f32": "float32", "f64": "float64", "i32": "int32", "u32": "uint32",
             "i64": "int64", "u64": "uint64", "i16": "int16", "u16": "uint16",
             "i8": "int8", "u8": "uint8", "bool": "bool"}


def fill_slots(kernel: str, args: tuple, slots: list[int], arrays: tuple) -> tuple:
    """``args`` with ``arrays`` in its empty slots (the per-call arrays of a prepared launch)."""
    if len(arrays) != len(slots):
        raise LaunchError(f"kernel '{kernel}' takes {len(slots)} arrays per launch, got {len(arrays)}")
    full = list(args)
    for i, a in zip(slots, arrays):
        full[i] = a
    return tuple(full)


def describe_param(kernel: str, i: int, names: list[str], codes: list[str | None]) -> str:
    name = names[i] if i < len(names) else f"arg{i}"
    code = codes[i] if i < len(codes) else None
    if code is None:
        c = "?"
    elif code.startswith(("ptr:", "cptr:")):
        base = code.split(":", 1)[1]
        c = ("const " if code.startswith("cptr") else "") + C_NAMES.get(base, base) + "*"
    else:
        c = C_NAMES.get(code, code)
    return f"argument {i} ('{name}') of kernel '{kernel}' is `{c}`"


def check_argument(kernel: str, i: int, names: list[str], codes: list[str | None], value, *,
                   array_type, where: str) -> None:
    """Refuse an argument a kernel would misread, with the fix in the message.

    `array_type` is numpy.ndarray on the CPU executor and cupy.ndarray on a GPU.
    """
    import numpy as np
    code = codes[i] if i < len(codes) else None
    what = describe_param(kernel, i, names, codes)
    is_array = isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__")
    if value is None and code is not None and code.startswith(("ptr:", "cptr:")):
        return    # a NULL pointer: the kernel must not dereference it, as on a GPU
    if code is not None and code.startswith(("ptr:", "cptr:")) or (code is None and is_array):
        if not isinstance(value, array_type):
            hint = ("copy it to the GPU with cupy.asarray(x)" if where == "GPU"
                    else "use a NumPy array (cupy.asnumpy(x) brings a GPU array back)")
            raise TypeError(f"{what}: got {type(value).__module__}.{type(value).__name__}, "
                            f"which the {where} cannot read: {hint}")
        if code is not None:
            base = code.split(":", 1)[1]
            want = NP_DTYPES.get(base)
            if want is not None and value.dtype != np.dtype(want):
                raise TypeError(f"{what}: the array is {value.dtype}, the kernel reads {want}. "
                                f"Convert it: x.astype(numpy.{want})")
        if not value.flags.c_contiguous:
            raise TypeError(f"{what}: the array is not C-contiguous, and a kernel indexes memory "
                            "as if it were. Pass a contiguous copy (ascontiguousarray(x))")
        if code is not None and code.startswith("ptr:") and not getattr(value.flags, "writeable", True):
            raise TypeError(f"{what}: the kernel may write through it but the array is "
                            "read-only. Pass a writeable copy, or declare the parameter const")
        return
    if code is None or code.startswith("bytes"):
        return
    want = np.dtype(NP_DTYPES[code])
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.generic):
        if value.dtype != want:
            raise TypeError(f"{what} ({want}); got numpy.{value.dtype}. Pass "
                            f"numpy.{want.name}(value): the kernel would read the wrong bytes")
        return
    # Python scalars: CuPy passes int as 64-bit and float as double; accept only where that is right.
    if isinstance(value, bool):
        if code == "bool":
            return
    elif isinstance(value, int) and code in ("i64", "u64"):
        return
    elif isinstance(value, float) and code == "f64":
        return
    kind = type(value).__name__
    if hasattr(value, "shape") and hasattr(value, "dtype"):   # an array: its description, not its values
        raise TypeError(f"{what} ({want}), a single value; got an array of shape {tuple(value.shape)} and "
                        f"dtype {value.dtype}. Pass numpy.{want.name}(value) of one element")
    as_what = {"int": "an 8-byte integer", "float": "a double"}.get(kind, "something else")
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    raise TypeError(f"{what} ({want}); got Python {kind} {shown}, which is passed as {as_what}. "
                    f"Pass numpy.{want.name}(value)")
