// This process's CPU and memory, for heartbeats (Linux /proc; zeros elsewhere).
#pragma once

#include <cstdint>

namespace scaler_native {

class ProcessStats {
 public:
  ProcessStats();
  // Percent of one core used since the previous call (or since construction).
  float cpu_percent();
  uint64_t rss_bytes() const;

 private:
  double last_cpu_seconds_;
  double last_wall_seconds_;
};

}  // namespace scaler_native
