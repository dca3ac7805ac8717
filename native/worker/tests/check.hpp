// The checks of the native worker's unit tests (scaler_native_session_test): a failure is printed and counted,
// and the executable exits non-zero if any failed.
#pragma once

#include <cstdio>

namespace scaler_native_test {

inline int failures = 0;

inline void check(bool condition, const char* what, const char* file, int line) {
  if (!condition) {
    std::fprintf(stderr, "FAILED %s:%d: %s\n", file, line, what);
    ++failures;
  }
}

// Each test file's cases (address_rotation_test.cpp, heartbeat_pace_test.cpp, worker_core_test.cpp).
void address_rotation_tests();
void heartbeat_pace_tests();
void worker_core_tests();

}  // namespace scaler_native_test

#define CHECK(condition) ::scaler_native_test::check((condition), #condition, __FILE__, __LINE__)
