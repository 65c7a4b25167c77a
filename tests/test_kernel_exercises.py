"""Kernel exercises: solution regions in .cu files, the student's copy, and checks that say what is wrong."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.course.student_copy import main as make_student_version
from labkit.course.student_copy import strip_cu_solutions
from labkit.course.kernel_checks import (COALESCING_LAYER, check_backward_data_kernel, check_constant_kernel,
                                          check_conv_kernel, check_conv_pool_kernel, check_conv_transpose_kernel,
                                          check_depthwise_kernel, check_im2col_kernel, check_lrn_kernel,
                                          check_preprocess_kernel, check_rows_kernel, tile_decode_error)

EXERCISES = Path(__file__).resolve().parent.parent / "notebooks" / "exercises"
NAIVE = EXERCISES / "02_conv_naive.cu"
ON_CPU = labkit.backend() == "cpu"


def variant(tmp_path, name, old, new, original=NAIVE):
    src = original.read_text()
    assert old in src
    p = tmp_path / f"{name}.cu"
    p.write_text(src.replace(old, new))
    return p


@pytest.mark.check
def test_strip_cu_solutions():
    src = "int a;\n  // BEGIN SOLUTION\n  a = secret();\n  // END SOLUTION\nint b;\n"
    out, n = strip_cu_solutions(src)
    assert n == 1 and "secret" not in out and "  // YOUR CODE HERE\n" in out and out.endswith("int b;\n")
    for bad in ("// BEGIN SOLUTION\nx;\n", "x;\n// END SOLUTION\n", "// BEGIN SOLUTION\n// BEGIN SOLUTION\n"):
        with pytest.raises(ValueError):
            strip_cu_solutions(bad)


@pytest.mark.check
def test_the_instructors_solution_passes():
    v = check_conv_kernel(NAIVE, "conv_naive_exercise", coalescing=False)
    assert v.ok and v.message.endswith(": True"), v.message


def test_the_students_copy_compiles_and_is_told_what_is_missing(tmp_path):
    assert make_student_version([str(NAIVE.parent.parent), str(tmp_path / "student")]) == 0
    copy = tmp_path / "student" / "exercises" / NAIVE.name
    text = copy.read_text()
    assert "// YOUR CODE HERE" in text and "blockIdx.z % W_grid" not in text
    v = check_conv_kernel(copy, "conv_naive_exercise")
    assert not v.ok and "NaN (never written" in v.message


def test_a_tile_decode_error_is_named_as_one_not_as_the_edge(tmp_path):
    """W_grid counted from Ho: on the 11x17 plane each block decodes blockIdx.z into tile column 0, and
    the second tile (column 16, on the plane's edge) is never written: a decode error, not the edge test."""
    v = check_conv_kernel(variant(tmp_path, "w_grid_from_ho", "(Wo + TILE_WIDTH - 1) / TILE_WIDTH",
                                  "(Ho + TILE_WIDTH - 1) / TILE_WIDTH"), "conv_naive_exercise")
    assert not v.ok
    lines = v.message.splitlines()
    assert lines[1].startswith("a decode error: the wrong outputs fill whole 16x16 tiles of the 11x17 plane "
                               "(1x2 tiles; wrong: (tile row, tile column) (0, 1))"), v.message
    assert "blockIdx.z / W_grid" in lines[1] and "columns w in {16}" in v.message


@pytest.mark.check
def test_tile_decode_error_reads_whole_tiles_only():
    ref = np.arange(2 * 3 * 20 * 20, dtype=np.float64).reshape(2, 3, 20, 20) + 1
    out = ref.copy()
    out[:, :, 16:, 0:16] = np.nan                         # tile (1, 0), cut at the plane's edge
    assert "(tile row, tile column) (1, 0)" in tile_decode_error(out, ref, 16)
    out[0, 0, 5, 5] = 0.0                                 # and one output inside tile (0, 0): not whole tiles
    assert tile_decode_error(out, ref, 16) is None
    assert tile_decode_error(np.full_like(ref, np.nan), ref, 16) is None     # every tile wrong: nothing to tell
    edge = ref.copy()
    edge[:, :, 19, :] = np.nan                            # the last row: cuts across tiles (0..1, *)
    assert tile_decode_error(edge, ref, 16) is None


def test_an_uncoalesced_mapping_passes_with_a_note_counted_by_labkit_counters(tmp_path):
    """threadIdx.x over the rows: right, so the check passes, and says what it costs: the sectors
    labkit.counters counts for it against the coalesced mapping, on the same layer."""
    rows = variant(tmp_path, "rows", "h = (blockIdx.z / W_grid) * TILE_WIDTH + threadIdx.y;\n"
                                     "  w = (blockIdx.z % W_grid) * TILE_WIDTH + threadIdx.x;",
                   "h = (blockIdx.z / W_grid) * TILE_WIDTH + threadIdx.x;\n"
                   "  w = (blockIdx.z % W_grid) * TILE_WIDTH + threadIdx.y;")
    v = check_conv_kernel(rows, "conv_naive_exercise")
    assert v.ok, v.message
    first, note = v.message.splitlines()
    assert first.endswith("right on 3 odd layers, every output written: True")
    m = re.search(r"finds ([\d,]+) sectors of 32 bytes written and ([\d,]+) read, against ([\d,]+) and ([\d,]+) "
                  r"with threadIdx.x the output column w .*: ([\d.]+)x the writes", note)
    assert note.startswith("Note: right, but not coalesced.") and m, note
    theirs_st, theirs_ld, ours_st, ours_ld = (int(g.replace(",", "")) for g in m.groups()[:4])
    L = COALESCING_LAYER
    outputs = L["N"] * L["M"] * (L["H"] - L["K"] + 1) * (L["W"] - L["K"] + 1)
    assert ours_st == outputs * 4 // 32                   # coalesced: each sector of y written once
    assert theirs_st > 2 * ours_st and theirs_ld > ours_ld
    assert check_conv_kernel(NAIVE, "conv_naive_exercise").message.count("\n") == 0     # the lesson's mapping: no note


@pytest.mark.check
def test_a_missing_row_is_named(tmp_path):
    v = check_conv_kernel(variant(tmp_path, "off_by_one", "h >= Ho", "h >= Ho - 1"), "conv_naive_exercise")
    assert not v.ok
    assert re.search(r"\d+ of \d+ outputs wrong: \d+ NaN", v.message)
    assert "on the plane's edge" in v.message and re.search(r"wrong rows h in \{\d+\}", v.message)


def test_wrong_values_are_told_apart_from_unwritten_ones(tmp_path):
    v = check_conv_kernel(variant(tmp_path, "bias", "float acc = b[m];", "float acc = b[0];"), "conv_naive_exercise")
    assert not v.ok and "0 NaN" in v.message and "largest error" in v.message


@pytest.mark.skipif(not ON_CPU, reason="an out-of-bounds read is caught by the CPU executor's memory check; "
                                       "on a GPU compute-sanitizer does that work (scripts/gpu_round.sh)")
def test_an_out_of_bounds_access_is_named_with_its_line(tmp_path):
    p = variant(tmp_path, "no_guard", "  if (n >= N || h >= Ho || w >= Wo) return;", "")
    v = check_conv_kernel(p, "conv_naive_exercise")
    assert not v.ok and "KernelMemoryError" in v.message and re.search(r"no_guard\.cu:\d+", v.message)
    assert "AddressSanitizer report" not in v.message


def test_a_compile_error_is_shown(tmp_path):
    v = check_conv_kernel(variant(tmp_path, "syntax", "n = blockIdx.x;", "n = blockIdx.x"), "conv_naive_exercise")
    assert not v.ok and "does not compile" in v.message


TILED = EXERCISES / "03_conv_tiled.cu"


def check_tiled(path):
    from labkit.course.kernel_checks import tile_bytes
    return check_conv_kernel(path, "conv_tiled_exercise", shared_mem=tile_bytes, checks="memory,barrier,race")


def test_the_tiled_solution_passes():
    v = check_tiled(TILED)
    assert v.ok, v.message


@pytest.mark.skipif(not ON_CPU, reason="the race check belongs to the CPU executor (compute-sanitizer's "
                                       "racecheck on a GPU)")
def test_a_missing_barrier_is_named(tmp_path):
    src = TILED.read_text()
    p = tmp_path / "no_second_barrier.cu"
    p.write_text(src.replace("    // BEGIN SOLUTION\n    __syncthreads();\n    // END SOLUTION\n", ""))
    v = check_tiled(p)
    assert not v.ok and "KernelRaceError" in v.message and "__syncthreads()" in v.message
    assert "ThreadSanitizer report" not in v.message


# --- notebook 11: the depthwise kernel ------------------------------------------------------------
DEPTHWISE = EXERCISES / "11_depthwise.cu"


def dw_variant(tmp_path, name, old, new):
    return variant(tmp_path, name, old, new, DEPTHWISE)


def test_the_depthwise_solution_passes():
    v = check_depthwise_kernel(DEPTHWISE, "depthwise_exercise")
    assert v.ok and "strides 1 and 2" in v.message, v.message


def test_the_depthwise_students_copy_is_told_what_is_missing(tmp_path):
    assert make_student_version([str(DEPTHWISE.parent.parent), str(tmp_path / "student")]) == 0
    copy = tmp_path / "student" / "exercises" / DEPTHWISE.name
    assert "// YOUR CODE HERE" in copy.read_text() and "plane % C" not in copy.read_text()
    v = check_depthwise_kernel(copy, "depthwise_exercise", checks="none")
    assert not v.ok and "wrong" in v.message


def test_forgotten_padding_is_named(tmp_path):
    """Reading the row above the plane instead of zero: only the first output row goes wrong."""
    p = dw_variant(tmp_path, "no_top_pad", "if (ih < 0 || ih >= H) continue;", "if (ih >= H) continue;")
    v = check_depthwise_kernel(p, "depthwise_exercise", checks="none")
    assert not v.ok and "on the plane's edge" in v.message


def test_a_wrong_stride_is_named(tmp_path):
    p = dw_variant(tmp_path, "stride", "const int ih = oh * S - 1 + kh;", "const int ih = oh - 1 + kh;")
    v = check_depthwise_kernel(p, "depthwise_exercise")
    assert not v.ok and "stride 2" in v.message and "largest error" in v.message


# --- notebook 10: the backward data of a 3x3 convolution ------------------------------------------
BACKWARD_DATA = EXERCISES / "10_conv_backward_data.cu"
BWD = "conv3x3_bwd_data_exercise"


def test_the_backward_data_solution_passes():
    v = check_backward_data_kernel(BACKWARD_DATA, BWD)
    assert v.ok and "gate" in v.message, v.message


def test_the_backward_data_students_copy_is_told_what_is_missing(tmp_path):
    assert make_student_version([str(BACKWARD_DATA.parent.parent), str(tmp_path / "student")]) == 0
    copy = tmp_path / "student" / "exercises" / BACKWARD_DATA.name
    assert "// YOUR CODE HERE" in copy.read_text() and "oh = h + 1 - kh" not in copy.read_text()
    v = check_backward_data_kernel(copy, BWD, checks="none")
    assert not v.ok and "wrong" in v.message


def test_the_forward_index_instead_of_the_transposed_one_is_named(tmp_path):
    """Gathering with the forward's offsets (oh = h - 1 + kh) sums the weights turned the wrong way."""
    p = variant(tmp_path, "unflipped", "const int oh = h + 1 - kh;", "const int oh = h - 1 + kh;", BACKWARD_DATA)
    v = check_backward_data_kernel(p, BWD, checks="none")
    assert not v.ok and "largest error" in v.message and "inside" in v.message


@pytest.mark.skipif(not ON_CPU, reason="the out-of-bounds report comes from the CPU executor's memory check")
def test_a_read_past_dy_is_named(tmp_path):
    """Dropping the bottom-edge test reads dy one row past the plane: past the end of dy on the last image."""
    p = variant(tmp_path, "no_bottom", "if (oh < 0 || oh >= H) continue;", "if (oh < 0) continue;", BACKWARD_DATA)
    v = check_backward_data_kernel(p, BWD)
    assert not v.ok and "KernelMemoryError" in v.message and "('dy')" in v.message and ".cu:" in v.message, v.message


# --- notebook 12: the transposed convolution as a gather ------------------------------------------
CONV_TRANSPOSE = EXERCISES / "12_conv_transpose.cu"
CT = "conv_transpose_exercise"


def test_the_conv_transpose_solution_passes():
    v = check_conv_transpose_kernel(CONV_TRANSPOSE, CT)
    assert v.ok and "output padding" in v.message and v.message.endswith("written: True"), v.message


def test_the_conv_transpose_students_copy_is_told_what_is_missing(tmp_path):
    text, n = strip_cu_solutions(CONV_TRANSPOSE.read_text())
    assert n == 1 and "// YOUR CODE HERE" in text and "oh + PH - kh * DH" not in text
    copy = tmp_path / CONV_TRANSPOSE.name
    copy.write_text(text)
    v = check_conv_transpose_kernel(copy, CT, checks="none")
    assert not v.ok and "wrong" in v.message and "wrong outputs per phase (h % 2, w % 2): (0, 0) " in v.message, v.message


@pytest.mark.check
def test_wrong_outputs_are_counted_per_phase():
    """A transposed convolution's outputs fall into phases (h % SH, w % SW) that the same taps reach: a tap
    test wrong for one residue shows as that phase wrong, the others right."""
    import numpy as np
    from labkit.course.kernel_checks import phase_counts
    ref = np.zeros((1, 2, 5, 4))
    out = ref.copy()
    out[:, :, 1::2, :] = 1.0                    # the odd rows wrong
    out[0, 0, 0, 0] = np.nan                    # and one output never written
    assert phase_counts(out, ref, (2, 2)) == ("wrong outputs per phase (h % 2, w % 2): (0, 0) 1 of 12, "
                                              "(0, 1) none of 12, (1, 0) all of 8, (1, 1) all of 8")


def test_a_transposed_convolution_with_the_forward_offsets_is_named(tmp_path):
    p = variant(tmp_path, "forward", "const int th = oh + PH - kh * DH;", "const int th = oh - PH + kh * DH;",
                CONV_TRANSPOSE)
    v = check_conv_transpose_kernel(p, CT, checks="none")
    assert not v.ok and "outputs wrong: 0 NaN" in v.message and "largest error" in v.message
    # stride 2, padding 1: the even rows' taps are the same either way, the odd rows' all wrong
    assert "(0, 0) none of" in v.message and "(0, 1) none of" in v.message, v.message


def test_a_missing_divisibility_test_is_named(tmp_path):
    """Every tap taken, divisible or not: the outputs of every phase get products they should not."""
    p = variant(tmp_path, "nodiv", "if (tw < 0 || tw % SW != 0) continue;", "if (tw < 0) continue;", CONV_TRANSPOSE)
    v = check_conv_transpose_kernel(p, CT, checks="none")
    assert not v.ok and "largest error" in v.message and "wrong outputs per phase" in v.message, v.message


@pytest.mark.skipif(not ON_CPU, reason="the out-of-bounds report comes from the CPU executor's memory check")
def test_a_negative_row_read_before_x_is_named(tmp_path):
    """Without the th < 0 test, C's division makes -2 / 2 = -1 and passes -2 % 2 == 0: row -1 of the first
    image is read, before the start of x, which the memory check names with its line."""
    p = variant(tmp_path, "negative", "if (th < 0 || th % SH != 0) continue;", "if (th % SH != 0) continue;",
                CONV_TRANSPOSE)
    v = check_conv_transpose_kernel(p, CT)
    assert not v.ok and "KernelMemoryError" in v.message and "('x')" in v.message and "negative.cu:" in v.message, \
        v.message
    v = check_conv_transpose_kernel(p, CT, checks="none")      # unchecked, the values read there go wrong
    assert not v.ok and "on the plane's edge" in v.message, v.message


# --- notebook 06: the im2col gather; notebook 08: LRN ---------------------------------------------
IM2COL, LRN = EXERCISES / "06_im2col.cu", EXERCISES / "08_lrn.cu"


@pytest.mark.parametrize("path,kernel,check", [(IM2COL, "im2col_exercise", check_im2col_kernel),
                                               (LRN, "lrn_exercise", check_lrn_kernel)])
def test_the_solutions_pass_and_the_students_copies_are_told_what_is_missing(tmp_path, path, kernel, check):
    v = check(path, kernel)
    assert v.ok and v.message.endswith("written: True"), v.message
    assert make_student_version([str(path.parent.parent), str(tmp_path / "student")]) == 0
    copy = tmp_path / "student" / "exercises" / path.name
    assert "// YOUR CODE HERE" in copy.read_text()
    v = check(copy, kernel, checks="none")
    assert not v.ok and "NaN (never written" in v.message, v.message


def test_a_forgotten_stride_in_im2col_is_named(tmp_path):
    p = variant(tmp_path, "stride", "const int ih = oh * stride - pad + p", "const int ih = oh - pad + p", IM2COL)
    v = check_im2col_kernel(p, "im2col_exercise", checks="none")
    assert not v.ok and "stride 2" in v.message and "largest error" in v.message, v.message


@pytest.mark.skipif(not ON_CPU, reason="the out-of-bounds report comes from the CPU executor's memory check")
def test_padding_read_from_outside_x_is_named(tmp_path):
    p = variant(tmp_path, "no_pad", "const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;",
                "const bool inside = ih < H && iw < W;", IM2COL)
    v = check_im2col_kernel(p, "im2col_exercise")
    assert not v.ok and "KernelMemoryError" in v.message and "('x')" in v.message, v.message


def test_an_lrn_window_not_cut_at_the_channels_is_named(tmp_path):
    # Without the clip at C-1 the window reads the next image's first channels (or past x on the
    # last): on the CPU executor the memory check names that read; without it the values go wrong.
    p = variant(tmp_path, "uncut", "d <= min(c + r, C - 1)", "d <= c + r", LRN)
    v = check_lrn_kernel(p, "lrn_exercise")
    assert not v.ok and ("KernelMemoryError" in v.message if ON_CPU else "wrong" in v.message), v.message


# --- notebooks 04, 05, 07, 09: constant memory, register blocking, the fused pooling, preprocessing --
CONSTANT, ROWS = EXERCISES / "04_conv_constant.cu", EXERCISES / "05_conv_rows.cu"
CONV_POOL, PREPROCESS = EXERCISES / "07_conv_pool.cu", EXERCISES / "09_preprocess.cu"
NEW = [(CONSTANT, "conv_constant_exercise", check_constant_kernel, "* c_weights["),
       (ROWS, "conv_rows_exercise", check_rows_kernel, "k4d(m, c, p, j - r)"),
       (CONV_POOL, "conv_pool_exercise", check_conv_pool_kernel, "2 * i + d / 2"),
       (PREPROCESS, "preprocess_exercise", check_preprocess_kernel, "i += stride")]


@pytest.mark.parametrize("path,kernel,check,solution_text", NEW, ids=[p.stem for p, *_ in NEW])
def test_the_new_solutions_pass_and_the_students_copies_are_told_what_is_missing(tmp_path, path, kernel, check,
                                                                                 solution_text):
    v = check(path, kernel)
    assert v.ok and v.message.endswith("written: True"), v.message
    text, n = strip_cu_solutions(path.read_text())
    assert n >= 1 and "// YOUR CODE HERE" in text and solution_text not in text
    copy = tmp_path / path.name
    copy.write_text(text)
    v = check(copy, kernel, checks="none")
    assert not v.ok and "NaN (never written" in v.message and "0 with other values" in v.message, v.message


# Index mistakes that write every output, each a wrong value: (name, the solution's text, the mistake).
WRONG_VALUES = [("no_m", CONSTANT, check_constant_kernel, "c_weights[((m * C + c) * K + p) * K + q]",
                 "c_weights[(c * K + p) * K + q]"),
                ("tap", ROWS, check_rows_kernel, "k4d(m, c, p, j - r)", "k4d(m, c, j - r, p)"),
                ("stride1", CONV_POOL, check_conv_pool_kernel, "const int h = 2 * i + d / 2, w = 2 * j + d % 2;",
                 "const int h = i + d / 2, w = j + d % 2;"),
                ("rgb", PREPROCESS, check_preprocess_kernel, "* 3 + (2 - c)]", "* 3 + c]")]


@pytest.mark.parametrize("name,path,check,right,wrong", WRONG_VALUES, ids=[w[0] for w in WRONG_VALUES])
def test_a_wrong_index_in_the_new_exercises_is_named(tmp_path, name, path, check, right, wrong):
    """The constant weights without the output channel, a row's taps transposed, a pooling window
    without its stride, RGB order where BGR is asked: every output written, values wrong."""
    kernel = next(k for p, k, *_ in NEW if p == path)
    v = check(variant(tmp_path, name, right, wrong, path), kernel, checks="none")
    assert not v.ok and "outputs wrong: 0 NaN" in v.message and "largest error" in v.message, v.message


def test_a_constant_array_too_small_for_the_layer_is_named(tmp_path):
    """The check uploads into the student's own c_weights: one too small for a layer is refused by name."""
    p = variant(tmp_path, "small", "float c_weights[CONST_WEIGHT_FLOATS]", "float c_weights[8]", CONSTANT)
    v = check_constant_kernel(p, "conv_constant_exercise", checks="none")
    assert not v.ok and "ConstantMemoryError" in v.message and "'c_weights'" in v.message, v.message


@pytest.mark.skipif(not ON_CPU, reason="the out-of-bounds report comes from the CPU executor's memory check")
def test_a_constant_kernel_storing_past_the_plane_is_named(tmp_path):
    """Every thread stores: those past a row's end write into the next row, where another block's
    thread writes too (a race, when those blocks run side by side), and past the end of y."""
    p = variant(tmp_path, "store_all", "  if (writes) y4d(n, m, h, w) = activate(acc, act);",
                "  y4d(n, m, h, w) = activate(acc, act);", CONSTANT)
    v = check_constant_kernel(p, "conv_constant_exercise")
    assert not v.ok and ("KernelRaceError" in v.message or "KernelMemoryError" in v.message), v.message
    assert "('y')" in v.message and "store_all.cu:" in v.message, v.message
    v = check_constant_kernel(p, "conv_constant_exercise", checks="memory")
    assert not v.ok and "KernelMemoryError" in v.message and "past the end of" in v.message, v.message


@pytest.mark.skipif(not ON_CPU, reason="the out-of-bounds report comes from the CPU executor's memory check")
def test_a_row_unit_that_ignores_the_short_last_unit_is_named(tmp_path):
    """R = OUT_W everywhere: the last unit of each row reads past the row's end (past x on the last row
    of the last plane) and writes past it."""
    p = variant(tmp_path, "full_units", "const int R = min(OUT_W, Wo - w0);", "const int R = OUT_W;", ROWS)
    v = check_rows_kernel(p, "conv_rows_exercise")
    assert not v.ok and "KernelMemoryError" in v.message and "full_units.cu:" in v.message, v.message


def test_a_pooling_max_started_from_zero_is_named(tmp_path):
    """max(0, ...) keeps 0 where the four sums are all negative: tanh(0) instead of a negative output."""
    p = variant(tmp_path, "max0", "best = d == 0 ? acc : fmaxf(best, acc);", "best = fmaxf(best, acc);", CONV_POOL)
    v = check_conv_pool_kernel(p, "conv_pool_exercise", checks="none")
    assert not v.ok and "outputs wrong: 0 NaN" in v.message and "largest error" in v.message and "(expected -" in v.message, v.message


def test_preprocessing_without_a_grid_stride_loop_is_named(tmp_path):
    """One element per thread: on a grid smaller than the work most elements are never written."""
    p = variant(tmp_path, "no_loop", "i < total; i += stride) {", "i < total; i += total) {", PREPROCESS)
    v = check_preprocess_kernel(p, "preprocess_exercise", checks="none")
    assert not v.ok and "fewer than the values" in v.message and "NaN (never written" in v.message, v.message


@pytest.mark.skipif(not ON_CPU, reason="the out-of-bounds report comes from the CPU executor's memory check")
def test_preprocessing_one_element_too_far_is_named(tmp_path):
    p = variant(tmp_path, "one_more", "i < total; i += stride", "i <= total; i += stride", PREPROCESS)
    v = check_preprocess_kernel(p, "preprocess_exercise")
    assert not v.ok and "KernelMemoryError" in v.message and "one_more.cu:" in v.message, v.message
