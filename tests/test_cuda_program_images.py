"""The image and data-file helpers of the cuda-samples' headers in whole programs (labkit's own
helper_image.h, program_include/): PGM and PPM images saved and loaded in their 1-, 3- and 4-channel
forms as unsigned char and float, the comparisons the samples end with, number and binary files, and
malformed image files refused with false and a reason, never a crash or a huge allocation.

One program (IMAGES, built once for the module) does each step by its first argument; the files it
writes are read back here byte by byte."""
from __future__ import annotations

import shutil
import struct

import pytest

from labkit.cuda import run_program

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

IMAGES = r"""
#include <helper_image.h>
#include <helper_functions.h>
#include <helper_string.h>
#include <cuda_runtime.h>
#include <vector>

__global__ void invert(unsigned char* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 255 - p[i];
}

static void print_bytes(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", p[i]);
  printf("\n");
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "pgm") {   // save a 5x3 grey image, load it back as unsigned char, invert it on the device, save
    unsigned char img[15];
    for (int i = 0; i < 15; i++) img[i] = (unsigned char)(i * 17);
    if (!sdkSavePGM<unsigned char>("grey.pgm", img, 5, 3)) return 1;
    unsigned char* back = NULL;
    unsigned int w = 0, h = 0;
    if (!sdkLoadPGM<unsigned char>("grey.pgm", &back, &w, &h)) return 2;
    printf("%u %u ", w, h);
    print_bytes(back, w * h);
    unsigned char* d;
    cudaMalloc(&d, w * h);
    cudaMemcpy(d, back, w * h, cudaMemcpyHostToDevice);
    invert<<<1, 32>>>(d, w * h);
    cudaMemcpy(back, d, w * h, cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (!sdkSavePGM("inverted.pgm", back, w, h)) return 3;
    float* f = NULL;
    if (!sdkLoadPGM<float>("inverted.pgm", &f, &w, &h)) return 4;
    for (unsigned i = 0; i < w * h; i++) printf("%s%.6f", i ? " " : "", f[i]);
    printf("\n");
    float g[5] = {0.0f, 0.5f, 1.0f, 1.5f, -0.25f};   // floats in [0, 1] to bytes, the rest clamped
    if (!sdkSavePGM<float>("floats.pgm", g, 5, 1)) return 5;
    std::vector<unsigned char> pre(15);               // the caller's buffer, of the image's size
    unsigned char* p = pre.data();
    w = 5; h = 3;
    printf("into a buffer: %d ", sdkLoadPGM<unsigned char>("grey.pgm", &p, &w, &h));
    print_bytes(pre.data(), 15);
    w = 4; h = 3;                                    // a buffer for another size: refused
    printf("wrong buffer: %d\n", sdkLoadPGM<unsigned char>("grey.pgm", &p, &w, &h));
    free(back);
    free(f);
    return 0;
  }
  if (mode == "ppm") {   // 3x2 pixels of 4 bytes: saved as P6 (the 4th dropped), loaded back with the 4th 0
    unsigned char rgba[24];
    for (int i = 0; i < 24; i++) rgba[i] = (unsigned char)(200 - 7 * i);
    if (!sdkSavePPM4ub("colour.ppm", rgba, 3, 2)) return 1;
    unsigned char *a = NULL, *b = NULL, *c = NULL;
    unsigned int w = 0, h = 0, channels = 0;
    if (!sdkLoadPPM4ub("colour.ppm", &a, &w, &h)) return 2;
    printf("%u %u ", w, h);
    print_bytes(a, w * h * 4);
    if (!sdkLoadPPM4<unsigned char>("colour.ppm", &b, &w, &h)) return 3;
    printf("same: %d\n", memcmp(a, b, 24) == 0);
    if (!__loadPPM("colour.ppm", &c, &w, &h, &channels)) return 4;
    printf("channels %u: ", channels);
    print_bytes(c, w * h * channels);
    float* f = NULL;
    if (!sdkLoadPPM4<float>("colour.ppm", &f, &w, &h)) return 5;
    printf("%.6f %.6f\n", f[0], f[3]);
    printf("pgm as ppm4: %d, ppm as pgm: %d\n", sdkLoadPPM4ub("grey.pgm", &a, &w, &h),
           sdkLoadPGM<unsigned char>("colour.ppm", &c, &w, &h));
    free(a); free(b); free(c); free(f);
    return 0;
  }
  if (mode == "load") {   // load argv[2] as argv[3] (pgm, pgmf, ppm4, ppm): its size and first bytes, or "refused"
    std::string as = argv[3];
    unsigned int w = 0, h = 0, channels = 0;
    bool ok;
    unsigned char* u = NULL;
    float* f = NULL;
    if (as == "pgm") ok = sdkLoadPGM<unsigned char>(argv[2], &u, &w, &h);
    else if (as == "pgmf") ok = sdkLoadPGM<float>(argv[2], &f, &w, &h);
    else if (as == "ppm4") ok = sdkLoadPPM4ub(argv[2], &u, &w, &h);
    else ok = __loadPPM(argv[2], &u, &w, &h, &channels);
    if (!ok) {
      printf("refused %p %p %u %u\n", (void*)u, (void*)f, w, h);
      return 0;
    }
    printf("%u %u ", w, h);
    if (f) {
      for (unsigned i = 0; i < w * h; i++) printf("%s%.3f", i ? " " : "", f[i]);
      printf("\n");
    } else {
      print_bytes(u, w * h * (as == "ppm4" ? 4 : as == "ppm" ? channels : 1));
    }
    free(u);
    free(f);
    return 0;
  }
  if (mode == "compare") {   // sdkComparePPM or sdkComparePGM of argv[3] against argv[4], epsilon, threshold
    bool ppm = std::string(argv[2]) == "ppm";
    float eps = atof(argv[5]), thr = atof(argv[6]);
    bool ok = ppm ? sdkComparePPM(argv[3], argv[4], eps, thr, true) : sdkComparePGM(argv[3], argv[4], eps, thr, true);
    printf("match: %d\n", ok);
    return 0;
  }
  if (mode == "files") {   // number files, binary dumps and their comparisons
    float v[6] = {1.5f, -2.25f, 3.0f, 1e-3f, 12345.678f, 0.0f};
    printf("write: %d\n", sdkWriteFile("numbers.txt", v, 6, 0.001f, false));
    float* r = NULL;
    unsigned int n = 0;
    bool read = sdkReadFile("numbers.txt", &r, &n, false);
    printf("read: %d %u", read, n);
    for (unsigned i = 0; i < n; i++) printf(" %g", r[i]);
    printf("\n");
    n = 5;
    printf("read into 5: %d\n", sdkReadFile("numbers.txt", &r, &n, false));
    sdkDumpBin(v, sizeof v, "out.bin");
    float w[6];
    memcpy(w, v, sizeof v);
    w[2] += 0.5f;                                    // one of 6 elements off by 0.5
    sdkDumpBin(w, sizeof w, "data/ref.bin");
    printf("bin eps 1: %d\n", sdkCompareBin2BinFloat("out.bin", "ref.bin", 6, 1.0f, 0.0f, argv[0]));
    printf("bin eps 0.1: %d\n", sdkCompareBin2BinFloat("out.bin", "ref.bin", 6, 0.1f, 0.0f, argv[0]));
    printf("bin eps 0.1 threshold 0.2: %d\n", sdkCompareBin2BinFloat("out.bin", "ref.bin", 6, 0.1f, 0.2f, argv[0]));
    printf("bin past the file: %d\n", sdkCompareBin2BinFloat("out.bin", "ref.bin", 7, 1.0f, 0.0f, argv[0]));
    printf("bin no reference: %d\n", sdkCompareBin2BinFloat("out.bin", "absent.bin", 6, 1.0f, 0.0f, argv[0]));
    unsigned int k[4] = {1, 2, 3, 400}, m[4] = {1, 2, 3, 410};
    sdkDumpBin(k, sizeof k, "k.bin");
    sdkDumpBin(m, sizeof m, "data/m.bin");
    printf("uint eps 10: %d\n", sdkCompareBin2BinUint("k.bin", "m.bin", 4, 10.0f, 0.0f, argv[0]));
    printf("uint eps 9: %d\n", sdkCompareBin2BinUint("k.bin", "m.bin", 4, 9.0f, 0.0f, argv[0]));
    float* blocks[3] = {NULL, NULL, NULL};
    read = sdkReadFileBlocks("out.bin", blocks, &n, 1, 8, false);
    printf("block 1: %d %u", read, n);
    printf(" %g %g\n", blocks[1][0], blocks[1][1]);
    read = sdkReadFileBlocks("out.bin", blocks, &n, 2, 16, false);
    printf("block 2: %d %u\n", read, n);
    printf("l2: %d %d\n", sdkCompareL2fe(v, w, 6, 1e-4f), sdkCompareL2fe(v, w, 6, 1e-5f));
    int ri[10] = {0}, di[10] = {0};
    di[0] = di[1] = 5;                               // 2 of 10 off by 5
    printf("data: %d %d %d %d\n", compareData(ri, di, 10, 5, 0.0f), compareData(ri, di, 10, 4, 0.0f),
           compareData(ri, di, 10, 4, 0.21f), compareData(ri, di, 10, 4, 0.2f));
    printf("float threshold: %d %d %d\n", compareDataAsFloatThreshold(ri, di, 10, 5.5f, 0.0f),
           compareDataAsFloatThreshold(ri, di, 10, 0.0f, 0.25f), compareDataAsFloatThreshold(ri, di, 10, 0.0f, 0.2f));
    char* found = sdkFindFilePath("ref.bin", argv[0]);
    printf("found: %s\n", found ? found : "(none)");
    free(found);
    free(r);
    free(blocks[1]);
    free(blocks[2]);
    return 0;
  }
  return 9;
}
"""


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """The program's source (the same for every test, so it is built once) and a run in a fresh folder."""
    src = tmp_path_factory.mktemp("program") / "images.cu"
    src.write_text(IMAGES)

    def run(cwd, *args, check=None):
        (cwd / "data").mkdir(exist_ok=True)
        rc, out, err = run_program(src, [str(a) for a in args], cwd=cwd, check=check)
        assert rc == 0, (rc, out, err)
        return out, err
    return run


def pnm(magic: bytes, w: int, h: int, pixels: bytes, maxval: int = 255) -> bytes:
    return magic + b"\n%d %d\n%d\n" % (w, h, maxval) + pixels


@pytest.mark.check
def test_a_grey_image_saved_loaded_inverted_on_the_device_and_loaded_as_float(images, tmp_path):
    out, err = images(tmp_path, "pgm")
    lines = out.splitlines()
    grey = bytes(i * 17 for i in range(15))
    assert (tmp_path / "grey.pgm").read_bytes() == b"P5\n5\n3\n255\n" + grey
    assert lines[0] == "5 3 " + " ".join(str(b) for b in grey)
    assert (tmp_path / "inverted.pgm").read_bytes() == b"P5\n5\n3\n255\n" + bytes(255 - b for b in grey)
    assert [float(x) for x in lines[1].split()] == pytest.approx([(255 - b) / 255 for b in grey], abs=1e-6)
    assert (tmp_path / "floats.pgm").read_bytes() == b"P5\n5\n1\n255\n" + bytes([0, 127, 255, 255, 0])
    assert lines[2] == "into a buffer: 1 " + " ".join(str(b) for b in grey)
    assert lines[3] == "wrong buffer: 0"
    assert "grey.pgm is 5x3, the buffer given is for 4x3" in err


@pytest.mark.check
def test_a_colour_image_saved_from_four_channels_and_loaded_in_one_three_and_four(images, tmp_path):
    images(tmp_path, "pgm")    # grey.pgm, for the refusals at the end
    out, err = images(tmp_path, "ppm")
    lines = out.splitlines()
    rgba = [(200 - 7 * i) % 256 for i in range(24)]
    rgb = bytes(v for i, v in enumerate(rgba) if i % 4 != 3)
    assert (tmp_path / "colour.ppm").read_bytes() == b"P6\n3\n2\n255\n" + rgb
    assert lines[0] == "3 2 " + " ".join(str(0 if i % 4 == 3 else v) for i, v in enumerate(rgba))
    assert lines[1] == "same: 1"
    assert lines[2] == "channels 3: " + " ".join(str(b) for b in rgb)
    assert lines[3] == f"{rgba[0] / 255:.6f} 0.000000"
    assert lines[4] == "pgm as ppm4: 0, ppm as pgm: 0"
    assert "grey.pgm is a grey PGM (P5)" in err and "colour.ppm is a colour PPM (P6)" in err


@pytest.mark.check
def test_header_comments_are_skipped(images, tmp_path):
    # As the samples' data files have them (GIMP's, IrfanView's), one a line, and within a header line.
    (tmp_path / "c.pgm").write_bytes(b"P5\n# Created by IrfanView\n# two lines\n3 2\n# maxval next\n255\n"
                                     + bytes([1, 2, 3, 250, 251, 10]))
    (tmp_path / "d.ppm").write_bytes(b"P6 # inline\n2 #w\n1\n255\n" + bytes([9, 8, 7, 6, 5, 4]))
    out, _ = images(tmp_path, "load", "c.pgm", "pgm")
    assert out == "3 2 1 2 3 250 251 10\n"
    out, _ = images(tmp_path, "load", "d.ppm", "ppm")
    assert out == "2 1 9 8 7 6 5 4\n"


def write_ppm(path, pixels: list[tuple[int, int, int]], w: int, h: int) -> None:
    path.write_bytes(pnm(b"P6", w, h, bytes(c for p in pixels for c in p)))


@pytest.mark.check
def test_images_compared_within_epsilon_and_the_share_of_bytes_beyond_it(images, tmp_path):
    base = [((i * 13) % 256, (i * 7) % 256, (i * 3) % 256) for i in range(100)]
    write_ppm(tmp_path / "ref.ppm", base, 10, 10)
    write_ppm(tmp_path / "same.ppm", base, 10, 10)
    near = [(min(r + 5, 255), g, b) for r, g, b in base]                  # every red within epsilon 5
    write_ppm(tmp_path / "near.ppm", near, 10, 10)
    # 400 bytes compared (4 a pixel): fewer than 400 * 0.25 beyond epsilon pass, 100 do not.
    def off(n):
        bytes_ = [list(p) for p in base]
        for k in range(n):
            px, ch = divmod(k, 3)
            bytes_[px][ch] = (bytes_[px][ch] + 100) % 256
        return [tuple(p) for p in bytes_]
    write_ppm(tmp_path / "off99.ppm", off(99), 10, 10)
    write_ppm(tmp_path / "off100.ppm", off(100), 10, 10)
    write_ppm(tmp_path / "small.ppm", base[:50], 10, 5)
    def match(kind, a, b, eps, thr):
        out, err = images(tmp_path, "compare", kind, a, b, eps, thr)
        return out.splitlines()[-1], out, err
    assert match("ppm", "same.ppm", "ref.ppm", 0, 0)[0] == "match: 1"
    assert match("ppm", "near.ppm", "ref.ppm", 5, 0)[0] == "match: 1"
    assert match("ppm", "near.ppm", "ref.ppm", 4, 0)[0] == "match: 0"
    line, out, _ = match("ppm", "off99.ppm", "ref.ppm", 5, 0.25)
    assert line == "match: 1" and "24.75(%) of bytes mismatched (count=99)" in out
    assert match("ppm", "off100.ppm", "ref.ppm", 5, 0.25)[0] == "match: 0"
    line, _, err = match("ppm", "small.ppm", "ref.ppm", 5, 0.15)
    assert line == "match: 0" and "source and ref size mismatch (10,5)vs(10,10)" in err
    line, _, err = match("ppm", "absent.ppm", "ref.ppm", 5, 0.15)
    assert line == "match: 0" and "unable to load src image file: absent.ppm" in err
    # Grey images: one byte a pixel, 100 compared.
    grey = bytes(range(100))
    (tmp_path / "g.pgm").write_bytes(pnm(b"P5", 10, 10, grey))
    (tmp_path / "g15.pgm").write_bytes(pnm(b"P5", 10, 10, bytes((b + 50) % 256 if b < 15 else b for b in grey)))
    assert match("pgm", "g.pgm", "g.pgm", 0, 0)[0] == "match: 1"
    assert match("pgm", "g15.pgm", "g.pgm", 5, 0.16)[0] == "match: 1"
    assert match("pgm", "g15.pgm", "g.pgm", 5, 0.14)[0] == "match: 0"


HOSTILE = {
    # name: (file contents, what the refusal says)
    "wrong magic": (b"P3\n2 2\n255\n1 2 3 4\n", "not a PPM or PGM image"),
    "not an image": (b"GIF89a\x01\x00\x01\x00", "not a PPM or PGM image"),
    "empty file": (b"", "not a PPM or PGM image"),
    "magic glued to a number": (b"P55 5\n255\n" + bytes(25), "not a PPM or PGM image"),
    "zero width": (pnm(b"P5", 0, 4, b""), "the image is 0x4: no pixels"),
    "zero height": (pnm(b"P5", 4, 0, b""), "the image is 4x0: no pixels"),
    "width past 2^32": (b"P5\n4294967296 1\n255\n\x00", "reading the PGM/PPM header failed"),
    "pixel bytes past 2^64": (pnm(b"P6", 4294967295, 4294967295, b"\x00" * 16), "more pixel bytes than the 2^28"),
    "pixel bytes past 2^32": (pnm(b"P6", 65536, 32768, b"\x00" * 16), "the image is 65536x32768, more pixel bytes"),
    "just under the cap, no pixels": (pnm(b"P5", 16384, 16383, b"\x00" * 16), "header promises 268419072 bytes"),
    "maxval 65535": (pnm(b"P5", 2, 2, b"\x00" * 8, maxval=65535), "maxval 65535: only 8-bit images"),
    "maxval 15": (pnm(b"P5", 2, 2, b"\x00" * 4, maxval=15), "maxval 15"),
    "missing pixels": (pnm(b"P6", 4, 4, b"\x01" * 47), "header promises 48 bytes of pixels, it holds 47"),
    "header cut short": (b"P5\n4 4\n", "reading the PGM/PPM header failed"),
    "letters for a size": (b"P5\nabc 4\n255\n" + bytes(16), "reading the PGM/PPM header failed"),
    "comment to the end": (b"P5\n# 4 4 255 and nothing else", "reading the PGM/PPM header failed"),
    "comment glued to maxval": (b"P5\n2 2\n255# c\n" + bytes(4), "reading the PGM/PPM header failed"),
}


@pytest.mark.check
@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_malformed_image_file_is_refused_with_a_reason(images, tmp_path, name):
    data, reason = HOSTILE[name]
    (tmp_path / "bad.pgm").write_bytes(data)
    for as_ in ("pgm", "pgmf", "ppm4", "ppm"):
        out, err = images(tmp_path, "load", "bad.pgm", as_)
        # false, with nothing allocated handed back and the sizes untouched
        assert out == "refused (nil) (nil) 0 0\n", (as_, out, err)
        assert reason in err and "bad.pgm" in err, (as_, err)


def test_malformed_files_under_the_memory_check(images, tmp_path):
    """AddressSanitizer sees no access outside an allocation in the refusals (nor in a load into the
    caller's buffer, nor in the comparisons of images of different sizes)."""
    (tmp_path / "short.ppm").write_bytes(HOSTILE["missing pixels"][0])
    (tmp_path / "huge.pgm").write_bytes(HOSTILE["pixel bytes past 2^64"][0])
    out, err = images(tmp_path, "load", "short.ppm", "ppm4", check="memory")
    assert out == "refused (nil) (nil) 0 0\n" and "it holds 47" in err
    out, err = images(tmp_path, "load", "huge.pgm", "pgmf", check="memory")
    assert out == "refused (nil) (nil) 0 0\n" and "AddressSanitizer" not in err
    out, err = images(tmp_path, "pgm", check="memory")
    assert "wrong buffer: 0" in out and "AddressSanitizer" not in err


@pytest.mark.check
def test_number_files_binary_dumps_and_their_comparisons(images, tmp_path):
    out, err = images(tmp_path, "files")
    steps = ("write:", "read", "bin ", "uint ", "block ", "l2:", "data:", "float threshold:", "found:")
    lines = [ln for ln in out.splitlines() if ln.startswith(steps)]
    text = (tmp_path / "numbers.txt").read_text()
    assert text.splitlines()[0] == "# 0.001"
    assert [float(x) for x in text.split()[2:]] == pytest.approx([1.5, -2.25, 3.0, 1e-3, 12345.678, 0.0], rel=1e-7)
    assert (tmp_path / "out.bin").read_bytes() == struct.pack("6f", 1.5, -2.25, 3.0, 1e-3, 12345.678, 0.0)
    assert lines == [
        "write: 1",
        "read: 1 6 1.5 -2.25 3 0.001 12345.7 0",
        "read into 5: 0",
        "bin eps 1: 1",
        "bin eps 0.1: 0",
        "bin eps 0.1 threshold 0.2: 1",     # 1 of 6 beyond: 6 * 0.2 > 1
        "bin past the file: 0",
        "bin no reference: 0",
        "uint eps 10: 1",
        "uint eps 9: 0",
        "block 1: 1 2 3 0.001",
        "block 2: 1 0",
        "l2: 1 0",                          # 0.5 / |v|: 4.05e-5
        "data: 1 0 1 0",                    # 2 of 10 beyond 4: 10 * 0.21 > 2, 10 * 0.2 is not
        "float threshold: 1 1 0",
        "found: ./data/ref.bin",
    ]
    assert "compareBin2Bin <float> unable to find <absent.bin>" in out
    assert "the files hold fewer than the 7 elements compared" in out
    assert "size mismatch with signal read (data read / data init = 6 / 5)" in err
