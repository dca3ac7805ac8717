#include "process_stats.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace scaler_native {

namespace {

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ProcessStats::ProcessStats() : last_cpu_seconds_(cpu_seconds()), last_wall_seconds_(wall_seconds()) {}

float ProcessStats::cpu_percent() {
  double cpu = cpu_seconds();
  double wall = wall_seconds();
  double elapsed = wall - last_wall_seconds_;
  float percent = elapsed > 0 ? static_cast<float>((cpu - last_cpu_seconds_) / elapsed * 100.0) : 0.0f;
  last_cpu_seconds_ = cpu;
  last_wall_seconds_ = wall;
  return percent;
}

uint64_t ProcessStats::rss_bytes() const {
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  int read = std::fscanf(statm, "%llu %llu", &size, &resident);
  std::fclose(statm);
  return read == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace scaler_native
