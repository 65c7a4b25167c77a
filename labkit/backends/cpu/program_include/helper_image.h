// helper_image.h for labkit's CPU executor: the image and data-file helpers of NVIDIA's cuda-samples,
// labkit's own implementation with the samples' names, signatures and return values: binary PGM/PPM
// images (P5 grey, P6 colour; loaded with 1, 3 or 4 channels as unsigned char or float, saved from 1 or
// 4 channels), whitespace-separated number files and raw binary dumps, and the comparisons the samples
// end with (compareData, sdkCompareL2fe, sdkComparePPM/PGM, sdkCompareBin2BinFloat/Uint).
//
// Unlike the original, a load refuses a file it cannot read whole -- a wrong magic number, a width or
// height of 0, more than 2^28 bytes of pixels, a maxval other than 255, fewer pixel bytes than the header
// promises, a buffer given for another size -- with false and a line on stderr, before allocating
// anything; the comparisons refuse images of different sizes instead of reading past the smaller one.
// helper_functions.h includes this header (as the samples' does); helper_string.h holds sdkFindFilePath.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "helper_string.h"

#ifndef EXIT_WAIVED
#define EXIT_WAIVED 2
#endif
#ifndef MIN
#define MIN(a, b) ((a < b) ? a : b)
#endif
#ifndef MAX
#define MAX(a, b) ((a > b) ? a : b)
#endif
#ifndef __MIN_EPSILON_ERROR
#define __MIN_EPSILON_ERROR 1e-3f
#endif

namespace helper_image_internal {
// The size of the header lines the original reads; kept for programs that name it.
const unsigned int PGMHeaderSize = 0x40;

// unsigned char pixels to T: unsigned char as is, float scaled to [0, 1].
template <class T> struct ConverterFromUByte;
template <> struct ConverterFromUByte<unsigned char> {
  unsigned char operator()(const unsigned char& v) const { return v; }
};
template <> struct ConverterFromUByte<float> {
  float operator()(const unsigned char& v) const { return float(v) / 255.0f; }
};
// T to unsigned char pixels: float from [0, 1], truncated like the original (and clamped, where the
// original's cast of an out-of-range value is undefined).
template <class T> struct ConverterToUByte;
template <> struct ConverterToUByte<unsigned char> {
  unsigned char operator()(const unsigned char& v) const { return v; }
};
template <> struct ConverterToUByte<float> {
  unsigned char operator()(const float& v) const {
    float s = v * 255.0f;
    return s >= 255.0f ? 255 : s > 0.0f ? static_cast<unsigned char>(s) : 0;   // NaN: 0
  }
};
}  // namespace helper_image_internal

namespace labkit_image {
// The most pixel bytes a load accepts (256 MiB): a header cannot make a load allocate more.
const uint64_t kMaxPixelBytes = uint64_t(1) << 28;

inline bool is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The next number of a PNM header: whitespace and '#' comments (to the end of their line) skipped, then
// decimal digits, then one whitespace character (consumed) or, but for the last number (maxval, which
// the pixels follow after exactly one whitespace character), a comment left for the next call.  False
// where something else stands there or the number passes 2^32 - 1.
inline bool header_number(FILE* f, uint64_t* value, bool last = false) {
  int c = getc(f);
  for (;;) {
    while (is_space(c)) c = getc(f);
    if (c != '#') break;
    while (c != '\n' && c != '\r' && c != EOF) c = getc(f);
  }
  if (c < '0' || c > '9') return false;
  uint64_t n = 0;
  while (c >= '0' && c <= '9') {
    n = n * 10 + uint64_t(c - '0');
    if (n > 0xffffffffull) return false;
    c = getc(f);
  }
  if (c == '#' && !last) ungetc(c, f);
  else if (!is_space(c)) return false;
  *value = n;
  return true;
}

inline long long file_size(FILE* f) {
  long here = ftell(f);
  if (here < 0 || fseek(f, 0, SEEK_END) != 0) return -1;
  long size = ftell(f);
  fseek(f, here, SEEK_SET);
  return size;
}

// A binary file's first `count` elements of `elem` bytes, or fewer where the file is shorter (the
// buffer is sized by the file, not by `count`).  False where it cannot be opened.
inline bool read_elements(const char* path, size_t elem, unsigned int count, std::vector<unsigned char>* out) {
  FILE* f = fopen(path, "rb");
  if (!f) return false;
  long long size = file_size(f);
  uint64_t have = size > 0 ? uint64_t(size) / elem : 0;
  uint64_t n = std::min<uint64_t>(have, count);
  out->resize(size_t(n * elem));
  size_t got = n ? fread(out->data(), elem, size_t(n), f) : 0;
  out->resize(got * elem);
  fclose(f);
  return true;
}
}  // namespace labkit_image

// Element by element, |reference - data| <= epsilon (in float, as the original); with threshold > 0 the
// arrays match where fewer than threshold * len elements differ (the share that differs is printed).
template <class T, class S>
inline bool compareData(const T* reference, const T* data, const unsigned int len, const S epsilon,
                        const float threshold) {
  unsigned int error_count = 0;
  for (unsigned int i = 0; i < len; ++i) {
    float diff = static_cast<float>(reference[i]) - static_cast<float>(data[i]);
    bool ok = (diff <= epsilon) && (diff >= -epsilon);
    error_count += !ok;
  }
  if (threshold == 0.0f) return error_count == 0;
  if (error_count)
    printf("%4.2f(%%) of bytes mismatched (count=%u)\n", float(error_count) * 100 / float(len), error_count);
  return float(len) * threshold > float(error_count);
}

// |reference - data| < max(epsilon, __MIN_EPSILON_ERROR) element by element, in float; threshold as in
// compareData (with threshold 0 the count of errors is printed).
template <class T, class S>
inline bool compareDataAsFloatThreshold(const T* reference, const T* data, const unsigned int len,
                                        const S epsilon, const float threshold) {
  float max_error = std::max(static_cast<float>(epsilon), __MIN_EPSILON_ERROR);
  unsigned int error_count = 0;
  for (unsigned int i = 0; i < len; ++i) {
    float diff = std::fabs(static_cast<float>(reference[i]) - static_cast<float>(data[i]));
    error_count += !(diff < max_error);
  }
  if (threshold == 0.0f) {
    if (error_count) printf("total # of errors = %u\n", error_count);
    return error_count == 0;
  }
  if (error_count)
    printf("%4.2f(%%) of bytes mismatched (count=%u)\n", float(error_count) * 100 / float(len), error_count);
  return float(len) * threshold > float(error_count);
}

// The relative L2 error of `data` against `reference` is below `epsilon` (sums in float, as the original).
inline bool sdkCompareL2fe(const float* reference, const float* data, const unsigned int len, const float epsilon) {
  float error = 0, ref = 0;
  for (unsigned int i = 0; i < len; ++i) {
    float diff = reference[i] - data[i];
    error += diff * diff;
    ref += reference[i] * reference[i];
  }
  if (std::fabs(ref) < 1e-7f) {
    fprintf(stderr, "ERROR, reference l2-norm is 0\n");
    return false;
  }
  float rel = std::sqrt(error) / std::sqrt(ref);
  bool ok = rel < epsilon;
  if (!ok) fprintf(stderr, "ERROR, l2-norm error %g is greater than epsilon %g\n", rel, epsilon);
  return ok;
}

// --- number files ---------------------------------------------------------------------------------
// Whitespace-separated numbers from a text file into *data (allocated here with malloc if it is null;
// else *len must be their count); *len is set to the count.  Lines starting with '#' (the epsilon line
// sdkWriteFile writes) are skipped; anything else that is not a number is refused.
template <class T> inline bool sdkReadFile(const char* filename, T** data, unsigned int* len, bool verbose) {
  FILE* fh = filename ? fopen(filename, "r") : nullptr;
  if (!fh) {
    printf("Unable to open input file: %s\n", filename ? filename : "(null)");
    return false;
  }
  std::vector<T> values;
  for (;;) {
    double v;
    int r = fscanf(fh, "%lf", &v);
    if (r == 1) {
      values.push_back(T(v));
      continue;
    }
    if (r == EOF) break;
    int c = getc(fh);
    if (c != '#') {
      fprintf(stderr, "sdkReadFile() : %s: not a number after %zu values\n", filename, values.size());
      fclose(fh);
      return false;
    }
    while (c != '\n' && c != EOF) c = getc(fh);
  }
  fclose(fh);
  if (values.empty()) {
    fprintf(stderr, "sdkReadFile() : %s holds no numbers\n", filename);
    return false;
  }
  if (*data) {
    if (*len != values.size()) {
      fprintf(stderr, "sdkReadFile() : Initialized memory given but size mismatch with signal read "
                      "(data read / data init = %zu / %u)\n", values.size(), *len);
      return false;
    }
  } else {
    *data = static_cast<T*>(malloc(sizeof(T) * values.size()));
    if (!*data) return false;
    *len = static_cast<unsigned int>(values.size());
  }
  std::memcpy(*data, values.data(), sizeof(T) * values.size());
  if (verbose) fprintf(stderr, "sdkReadFile() : %zu values from %s\n", values.size(), filename);
  return true;
}

// Block `block_num` (of `block_size` bytes) of a binary file into data[block_num], allocated here with
// malloc; *len: the elements read (fewer, or 0, past the file's end).
template <class T>
inline bool sdkReadFileBlocks(const char* filename, T** data, unsigned int* len, unsigned int block_num,
                              unsigned int block_size, bool verbose) {
  FILE* fh = filename ? fopen(filename, "rb") : nullptr;
  if (!fh) {
    fprintf(stderr, "sdkReadFileBlocks() : Opening file %s failed.\n", filename ? filename : "(null)");
    return false;
  }
  data[block_num] = static_cast<T*>(malloc(block_size ? block_size : 1));
  if (!data[block_num]) {
    fclose(fh);
    return false;
  }
  *len = 0;
  if (fseek(fh, long(uint64_t(block_num) * block_size), SEEK_SET) == 0)
    *len = static_cast<unsigned int>(fread(data[block_num], sizeof(T), block_size / sizeof(T), fh));
  fclose(fh);
  if (verbose) fprintf(stderr, "sdkReadFileBlocks() : %u elements of block %u from %s\n", *len, block_num, filename);
  return true;
}

// A text file of `len` numbers after a line "# epsilon"; with `append`, the numbers go after what the
// file holds, with no epsilon line.
template <class T, class S>
inline bool sdkWriteFile(const char* filename, const T* data, unsigned int len, const S epsilon, bool verbose,
                         bool append = false) {
  FILE* f = filename ? fopen(filename, append ? "a" : "w") : nullptr;
  if (verbose) fprintf(stderr, "sdkWriteFile() : Open file %s for write/append.\n", filename ? filename : "(null)");
  if (!f) {
    if (verbose) fprintf(stderr, "sdkWriteFile() : Opening file failed.\n");
    return false;
  }
  bool ok = append || fprintf(f, "# %g\n", double(epsilon)) >= 0;
  for (unsigned int i = 0; ok && i < len; ++i) ok = fprintf(f, "%.10g ", double(data[i])) >= 0;
  ok = fprintf(f, "\n") >= 0 && ok;
  ok = fclose(f) == 0 && ok;
  if (!ok && verbose) fprintf(stderr, "sdkWriteFile() : Writing file failed.\n");
  return ok;
}

// `bytes` bytes of `data` into a binary file.
inline void sdkDumpBin(void* data, unsigned int bytes, const char* filename) {
  printf("sdkDumpBin: <%s>\n", filename);
  FILE* fp = fopen(filename, "wb");
  if (!fp) {
    fprintf(stderr, "sdkDumpBin: cannot open %s for writing\n", filename);
    return;
  }
  if (fwrite(data, 1, bytes, fp) != bytes) fprintf(stderr, "sdkDumpBin: writing %s failed\n", filename);
  fclose(fp);
}

namespace labkit_image {
// sdkCompareBin2Bin{Uint,Float}: `nelements` of the file written against the reference found by
// sdkFindFilePath; `compare` is compareData or compareDataAsFloatThreshold.
template <class T, class Compare>
inline bool compare_bin_files(const char* kind, const char* src_file, const char* ref_file, unsigned int nelements,
                              float epsilon, float threshold, const char* exec_path, Compare compare) {
  unsigned int error_count = 0;
  std::vector<unsigned char> src, ref;
  bool src_ok = read_elements(src_file, sizeof(T), nelements, &src);
  if (!src_ok) {
    printf("compareBin2Bin <%s> unable to open src_file: %s\n", kind, src_file);
    error_count++;
  }
  char* ref_path = sdkFindFilePath(ref_file, exec_path);
  if (!ref_path) {
    printf("compareBin2Bin <%s> unable to find <%s> in <%s>\n", kind, ref_file, exec_path ? exec_path : "(null)");
    printf(">>> Check info.xml and [project//data] folder <%s> <<<\n", ref_file);
    printf("Aborting comparison!\n");
    printf("  FAILED\n");
    error_count++;
  } else if (!read_elements(ref_path, sizeof(T), nelements, &ref)) {
    printf("compareBin2Bin <%s> unable to open ref_file: %s\n", kind, ref_path);
    error_count++;
  } else if (src_ok) {
    printf("> compareBin2Bin <%s> nelements=%u, epsilon=%4.2f, threshold=%4.2f\n", kind, nelements, epsilon, threshold);
    printf("   src_file <%s>, size=%zu bytes\n", src_file, src.size());
    printf("   ref_file <%s>, size=%zu bytes\n", ref_path, ref.size());
    size_t want = size_t(nelements) * sizeof(T);
    if (src.size() < want || ref.size() < want) {
      printf("   the files hold fewer than the %u elements compared\n", nelements);
      error_count++;
    } else if (!compare(reinterpret_cast<const T*>(ref.data()), reinterpret_cast<const T*>(src.data()), nelements,
                        epsilon, threshold)) {
      error_count++;
    }
  }
  free(ref_path);
  if (error_count == 0) printf("  OK\n");
  else printf("  FAILURE: %u errors...\n", error_count);
  return error_count == 0;
}
}  // namespace labkit_image

inline bool sdkCompareBin2BinUint(const char* src_file, const char* ref_file, unsigned int nelements,
                                  const float epsilon, const float threshold, char* exec_path) {
  return labkit_image::compare_bin_files<unsigned int>(
      "unsigned int", src_file, ref_file, nelements, epsilon, threshold, exec_path,
      [](const unsigned int* r, const unsigned int* s, unsigned int n, float e, float t) {
        return compareData<unsigned int, float>(r, s, n, e, t);
      });
}
inline bool sdkCompareBin2BinFloat(const char* src_file, const char* ref_file, unsigned int nelements,
                                   const float epsilon, const float threshold, char* exec_path) {
  return labkit_image::compare_bin_files<float>(
      "float", src_file, ref_file, nelements, epsilon, threshold, exec_path,
      [](const float* r, const float* s, unsigned int n, float e, float t) {
        return compareDataAsFloatThreshold<float, float>(r, s, n, e, t);
      });
}

// --- PGM / PPM images -------------------------------------------------------------------------------
// A binary PGM (P5, *channels = 1) or PPM (P6, *channels = 3) with maxval 255 into *data: allocated here
// with malloc where *data is null, else the caller's buffer, whose *w x *h must be the image's.  The
// header may carry '#' comments.  False, with the reason on stderr and *data, *w, *h untouched, for any
// file that does not hold the whole image its header describes.
inline bool __loadPPM(const char* file, unsigned char** data, unsigned int* w, unsigned int* h,
                      unsigned int* channels) {
  FILE* fp = file ? fopen(file, "rb") : nullptr;
  if (!fp) {
    fprintf(stderr, "__LoadPPM() : Failed to open file: %s\n", file ? file : "(null)");
    return false;
  }
  auto refuse = [&](const char* why, unsigned long long a = 0, unsigned long long b = 0) {
    fprintf(stderr, "__LoadPPM() : %s: ", file);
    fprintf(stderr, why, a, b);
    fprintf(stderr, "\n");
    fclose(fp);
    return false;
  };
  char magic[2] = {0, 0};
  int after = EOF;
  if (fread(magic, 1, 2, fp) == 2) after = getc(fp);
  unsigned int ch = magic[0] != 'P' ? 0 : magic[1] == '5' ? 1 : magic[1] == '6' ? 3 : 0;
  if (ch == 0 || !(labkit_image::is_space(after) || after == '#'))
    return refuse("File is not a PPM or PGM image (a binary one starts with P5 or P6)");
  if (after == '#') ungetc(after, fp);
  uint64_t width = 0, height = 0, maxval = 0;
  if (!labkit_image::header_number(fp, &width) || !labkit_image::header_number(fp, &height) ||
      !labkit_image::header_number(fp, &maxval, true))
    return refuse("reading the PGM/PPM header failed (width, height and maxval, numbers below 2^32, expected)");
  if (width == 0 || height == 0) return refuse("the image is %llux%llu: no pixels", width, height);
  if (maxval != 255) return refuse("maxval %llu: only 8-bit images with maxval 255 are read", maxval);
  uint64_t pixels = width * height;   // each below 2^32: no overflow
  if (pixels > labkit_image::kMaxPixelBytes / ch)
    return refuse("the image is %llux%llu, more pixel bytes than the 2^28 read here", width, height);
  uint64_t bytes = pixels * ch;
  long here = ftell(fp);
  long long size = labkit_image::file_size(fp);
  if (here < 0 || size < here || uint64_t(size - here) < bytes)
    return refuse("the file is truncated: its header promises %llu bytes of pixels, it holds %llu", bytes,
                  size >= here && here >= 0 ? (unsigned long long)(size - here) : 0ull);
  if (*data && (*w != width || *h != height)) {
    fprintf(stderr, "__LoadPPM() : Invalid image dimensions: %s is %llux%llu, the buffer given is for %ux%u\n",
            file, (unsigned long long)width, (unsigned long long)height, *w, *h);
    fclose(fp);
    return false;
  }
  unsigned char* out = *data ? *data : static_cast<unsigned char*>(malloc(size_t(bytes)));
  if (!out) return refuse("allocating %llu bytes failed", bytes);
  if (fread(out, 1, size_t(bytes), fp) != bytes) {
    if (out != *data) free(out);
    return refuse("__LoadPPM() read data returned error.");
  }
  fclose(fp);
  *data = out;
  *w = static_cast<unsigned int>(width);
  *h = static_cast<unsigned int>(height);
  *channels = ch;
  return true;
}

// A grey image (P5) as T (unsigned char, or float in [0, 1]) into *data (allocated here where null, else
// the caller's buffer for *w x *h values).  A colour PPM is refused: its three values per pixel would not
// fit the buffer a grey image's caller expects.
template <class T> inline bool sdkLoadPGM(const char* file, T** data, unsigned int* w, unsigned int* h) {
  unsigned char* idata = nullptr;
  unsigned int iw = 0, ih = 0, channels = 0;
  if (!__loadPPM(file, &idata, &iw, &ih, &channels)) return false;
  bool ok = true;
  if (channels != 1) {
    fprintf(stderr, "sdkLoadPGM() : %s is a colour PPM (P6); sdkLoadPGM reads grey PGM (P5) images\n", file);
    ok = false;
  } else if (*data && (iw != *w || ih != *h)) {
    fprintf(stderr, "sdkLoadPGM() : Invalid image dimensions: %s is %ux%u, the buffer given is for %ux%u\n", file,
            iw, ih, *w, *h);
    ok = false;
  }
  size_t size = size_t(iw) * ih;
  T* out = !ok ? nullptr : *data ? *data : static_cast<T*>(malloc(sizeof(T) * size));
  if (out) {
    std::transform(idata, idata + size, out, helper_image_internal::ConverterFromUByte<T>());
    *data = out;
    *w = iw;
    *h = ih;
  }
  free(idata);
  return out != nullptr;
}

// A colour image (P6) as 4 values per pixel (r, g, b, 0) in a new buffer (malloc) at *data.
template <class T> inline bool sdkLoadPPM4(const char* file, T** data, unsigned int* w, unsigned int* h) {
  unsigned char* idata = nullptr;
  unsigned int iw = 0, ih = 0, channels = 0;
  if (!__loadPPM(file, &idata, &iw, &ih, &channels)) return false;
  if (channels != 3) {
    fprintf(stderr, "sdkLoadPPM4() : %s is a grey PGM (P5); sdkLoadPPM4 reads colour PPM (P6) images\n", file);
    free(idata);
    return false;
  }
  size_t size = size_t(iw) * ih;
  T* out = static_cast<T*>(malloc(sizeof(T) * size * 4));
  if (!out) {
    free(idata);
    return false;
  }
  helper_image_internal::ConverterFromUByte<T> convert;
  for (size_t i = 0; i < size; i++) {
    out[4 * i] = convert(idata[3 * i]);
    out[4 * i + 1] = convert(idata[3 * i + 1]);
    out[4 * i + 2] = convert(idata[3 * i + 2]);
    out[4 * i + 3] = T(0);
  }
  free(idata);
  *data = out;
  *w = iw;
  *h = ih;
  return true;
}

// A PGM or PPM as it is (1 or 3 bytes per pixel).
inline bool sdkLoadPPMub(const char* file, unsigned char** data, unsigned int* w, unsigned int* h) {
  unsigned int channels;
  return __loadPPM(file, data, w, h, &channels);
}
inline bool sdkLoadPPM4ub(const char* file, unsigned char** data, unsigned int* w, unsigned int* h) {
  return sdkLoadPPM4<unsigned char>(file, data, w, h);
}

// w x h pixels of `channels` bytes (1: a PGM, 3: a PPM) into a binary file, maxval 255.
inline bool __savePPM(const char* file, unsigned char* data, unsigned int w, unsigned int h, unsigned int channels) {
  if (!file || !data || w == 0 || h == 0) {
    fprintf(stderr, "__savePPM() : no file name, no data or an image of %ux%u\n", w, h);
    return false;
  }
  if (channels != 1 && channels != 3) {
    fprintf(stderr, "__savePPM() : Invalid number of channels.\n");
    return false;
  }
  FILE* f = fopen(file, "wb");
  if (!f) {
    fprintf(stderr, "__savePPM() : Opening file %s failed.\n", file);
    return false;
  }
  size_t bytes = size_t(w) * h * channels;
  bool ok = fprintf(f, "%s\n%u\n%u\n255\n", channels == 1 ? "P5" : "P6", w, h) > 0 &&
            fwrite(data, 1, bytes, f) == bytes;
  ok = fclose(f) == 0 && ok;
  if (!ok) fprintf(stderr, "__savePPM() : Writing data to %s failed.\n", file);
  return ok;
}

// w x h values of T (unsigned char, or float in [0, 1]) as a grey PGM.
template <class T> inline bool sdkSavePGM(const char* file, T* data, unsigned int w, unsigned int h) {
  if (!data) return __savePPM(file, nullptr, w, h, 1);
  size_t size = size_t(w) * h;
  std::vector<unsigned char> idata(size);
  std::transform(data, data + size, idata.begin(), helper_image_internal::ConverterToUByte<T>());
  return __savePPM(file, idata.data(), w, h, 1);
}

// w x h pixels of 4 bytes (r, g, b, unused) as a colour PPM.
inline bool sdkSavePPM4ub(const char* file, unsigned char* data, unsigned int w, unsigned int h) {
  if (!data) return __savePPM(file, nullptr, w, h, 3);
  size_t size = size_t(w) * h;
  std::vector<unsigned char> rgb(size * 3);
  for (size_t i = 0; i < size; i++) {
    rgb[3 * i] = data[4 * i];
    rgb[3 * i + 1] = data[4 * i + 1];
    rgb[3 * i + 2] = data[4 * i + 2];
  }
  return __savePPM(file, rgb.data(), w, h, 3);
}

namespace labkit_image {
// sdkComparePPM / sdkComparePGM: `load` reads each file, `values` per pixel are compared by compareData.
template <class Load>
inline bool compare_images(const char* kind, const char* src_file, const char* ref_file, float epsilon,
                           float threshold, bool verbose, Load load, unsigned int values) {
  if (!src_file || !ref_file) {
    fprintf(stderr, "%s: src_file or ref_file is NULL.  Aborting comparison\n", kind);
    return false;
  }
  if (verbose) fprintf(stderr, "> Compare (a)rendered:  <%s>\n>         (b)reference: <%s>\n", src_file, ref_file);
  unsigned char *src = nullptr, *ref = nullptr;
  unsigned int sw = 0, sh = 0, rw = 0, rh = 0;
  if (!load(ref_file, &ref, &rw, &rh)) {
    fprintf(stderr, "%s: unable to load ref image file: %s\n", kind, ref_file);
    return false;
  }
  if (!load(src_file, &src, &sw, &sh)) {
    fprintf(stderr, "%s: unable to load src image file: %s\n", kind, src_file);
    free(ref);
    return false;
  }
  bool ok = sw == rw && sh == rh;
  if (!ok) {
    fprintf(stderr, "%s: source and ref size mismatch (%u,%u)vs(%u,%u)\n", kind, sw, sh, rw, rh);
  } else {
    if (verbose)
      fprintf(stderr, "%s: comparing images size (%u,%u) epsilon(%g), threshold(%g%%)\n", kind, sw, sh, epsilon,
              threshold * 100);
    ok = compareData(ref, src, sw * sh * values, epsilon, threshold);
  }
  if (verbose) fprintf(stderr, ok ? "    OK\n\n" : "    FAILURE!  1 errors...\n\n");
  free(src);
  free(ref);
  return ok;
}
}  // namespace labkit_image

// Two colour images, every byte of their (r, g, b, 0) pixels within epsilon, or with threshold > 0,
// fewer than that share of the bytes beyond it.
inline bool sdkComparePPM(const char* src_file, const char* ref_file, const float epsilon, const float threshold,
                          bool verboseErrors) {
  return labkit_image::compare_images("PPMvsPPM", src_file, ref_file, epsilon, threshold, verboseErrors,
                                      sdkLoadPPM4ub, 4);
}
// Two images byte by byte, the first w x h bytes (a grey image's pixels), as sdkComparePPM.
inline bool sdkComparePGM(const char* src_file, const char* ref_file, const float epsilon, const float threshold,
                          bool verboseErrors) {
  return labkit_image::compare_images("PGMvsPGM", src_file, ref_file, epsilon, threshold, verboseErrors,
                                      sdkLoadPPMub, 1);
}
