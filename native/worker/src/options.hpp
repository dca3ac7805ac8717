// The command line of scaler_native_worker; option names follow scaler_cluster's where they mean the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace scaler_native {

enum class LogLevel { debug = 10, info = 20, warning = 30, error = 40 };

struct Options {
  std::string address;                 // as given: one scheduler, or several comma-separated in rank order (§23)
  std::vector<std::string> addresses;  // each of them, in that order
  std::string name;  // empty: <hostname>|<pid>
  uint32_t capacity = 1000;
  uint32_t threads = 1;
  double heartbeat_interval_seconds = 2.0;
  double death_timeout_seconds = 300.0;
  LogLevel logging_level = LogLevel::info;
  bool exit_with_parent = false;
  // Capabilities the operator adds to "native" (--tags gpu,fast): tasks requiring them may run here.
  std::vector<std::string> tags;
};

// The options, or nullopt after printing help (`error` stays empty) or a usage error (`error` says why).
std::optional<Options> parse_options(const std::vector<std::string>& arguments, std::string& error);

std::string usage();

}  // namespace scaler_native
