// helper_timer.h for labkit's CPU executor: the host timers of NVIDIA's cuda-samples (StopWatchInterface,
// sdkCreateTimer ...), labkit's own implementation on std::chrono.  Times are in milliseconds.
#pragma once
#include <chrono>

#ifndef EXIT_WAIVED
#define EXIT_WAIVED 2
#endif

class StopWatchInterface {
 public:
  StopWatchInterface() {}
  virtual ~StopWatchInterface() {}
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual void reset() = 0;
  virtual float getTime() = 0;          // total of the finished sessions, plus the running one
  virtual float getAverageTime() = 0;   // per finished session
};

class StopWatchLinux : public StopWatchInterface {
  using clock = std::chrono::steady_clock;
  clock::time_point started_;
  float total_ = 0.f, last_ = 0.f;
  int sessions_ = 0;
  bool running_ = false;
  float since() const { return std::chrono::duration<float, std::milli>(clock::now() - started_).count(); }

 public:
  void start() override { started_ = clock::now(); running_ = true; }
  void stop() override {
    if (!running_) return;
    last_ = since();
    total_ += last_;
    running_ = false;
    sessions_++;
  }
  void reset() override {
    total_ = last_ = 0.f;
    sessions_ = 0;
    if (running_) started_ = clock::now();
  }
  float getTime() override { return total_ + (running_ ? since() : 0.f); }
  float getAverageTime() override { return sessions_ > 0 ? total_ / float(sessions_) : 0.f; }
};
typedef StopWatchLinux StopWatch;

inline bool sdkCreateTimer(StopWatchInterface** t) { *t = new StopWatchLinux(); return *t != nullptr; }
inline bool sdkDeleteTimer(StopWatchInterface** t) { delete *t; *t = nullptr; return true; }
inline bool sdkStartTimer(StopWatchInterface** t) { if (*t) (*t)->start(); return true; }
inline bool sdkStopTimer(StopWatchInterface** t) { if (*t) (*t)->stop(); return true; }
inline bool sdkResetTimer(StopWatchInterface** t) { if (*t) (*t)->reset(); return true; }
inline float sdkGetAverageTimerValue(StopWatchInterface** t) { return *t ? (*t)->getAverageTime() : 0.f; }
inline float sdkGetTimerValue(StopWatchInterface** t) { return *t ? (*t)->getTime() : 0.f; }
