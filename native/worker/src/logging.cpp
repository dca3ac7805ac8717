#include "logging.hpp"

#include <cstdio>
#include <ctime>

namespace scaler_native {

namespace {

LogLevel threshold = LogLevel::info;

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "DEBUG";
    case LogLevel::info: return "INFO";
    case LogLevel::warning: return "WARNING";
    case LogLevel::error: return "ERROR";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) { threshold = level; }

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= static_cast<int>(threshold); }

void log(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S+0000", &utc);
  std::fprintf(stdout, "[%s]%s: %s\n", level_name(level), stamp, message.c_str());
  std::fflush(stdout);
}

}  // namespace scaler_native
