// helper_functions.h for labkit's CPU executor: the host helpers of NVIDIA's cuda-samples that
// teaching programs use (strings, timers, comparing results), labkit's own implementation.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "helper_string.h"
#include "helper_timer.h"

#ifndef EXIT_WAIVED
#define EXIT_WAIVED 2
#endif

// Element by element, |ref - data| <= epsilon (and, with threshold > 0, at most that fraction may differ).
template <class T, class S>
inline bool compareData(const T* reference, const T* data, const unsigned int len, const S epsilon,
                        const float threshold) {
  unsigned int bad = 0;
  for (unsigned int i = 0; i < len; ++i) {
    double diff = double(reference[i]) - double(data[i]);
    bool ok = diff <= double(epsilon) && diff >= -double(epsilon);
    if (!ok) bad++;
  }
  if (threshold == 0.0f) return bad == 0;
  return float(bad) <= threshold * float(len);
}
// The relative L2 error of `data` against `reference` is below `epsilon`.
inline bool sdkCompareL2fe(const float* reference, const float* data, const unsigned int len, const float epsilon) {
  double error = 0, ref = 0;
  for (unsigned int i = 0; i < len; ++i) {
    double d = double(reference[i]) - double(data[i]);
    error += d * d;
    ref += double(reference[i]) * reference[i];
  }
  double norm_ref = std::sqrt(ref);
  if (std::fabs(ref) < 1e-7) {
    fprintf(stderr, "ERROR, reference l2-norm is 0\n");
    return false;
  }
  double rel = std::sqrt(error) / norm_ref;
  if (!(rel < epsilon)) fprintf(stderr, "ERROR, l2-norm error %f is greater than epsilon %f \n", rel, epsilon);
  return rel < epsilon;
}
template <class T>
inline bool sdkWriteFile(const char* filename, const T* data, unsigned int len, const float epsilon, bool verbose,
                         bool append = false) {
  FILE* f = fopen(filename, append ? "a" : "w");
  if (!f) return false;
  if (!append) fprintf(f, "# %f\n", epsilon);
  for (unsigned int i = 0; i < len; ++i) fprintf(f, "%.10g ", double(data[i]));
  fclose(f);
  (void)verbose;
  return true;
}
// Whitespace-separated numbers from a text file into *data (allocated here if it is null; else *len
// must match); *len is set to the count.
#include <vector>
template <class T> inline bool sdkReadFile(const char* filename, T** data, unsigned int* len, bool verbose) {
  FILE* fh = fopen(filename, "r");
  if (!fh) {
    printf("Unable to open input file: %s\n", filename);
    return false;
  }
  std::vector<T> values;
  double v;
  while (fscanf(fh, "%lf", &v) == 1) values.push_back(T(v));
  fclose(fh);
  if (*data) {
    if (*len != values.size()) return false;
  } else {
    *data = static_cast<T*>(malloc(sizeof(T) * values.size()));
    *len = static_cast<unsigned int>(values.size());
  }
  std::memcpy(*data, values.data(), sizeof(T) * values.size());
  (void)verbose;
  return true;
}
