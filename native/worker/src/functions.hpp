// The registry of native functions: what a task may name in its function payload (PROTOCOL.md §16).
#pragma once

#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "neutral.hpp"

namespace scaler_native {

// A function's failure, reported as kind `raised` with this type name and message (PROTOCOL.md §7).
class TaskError : public std::runtime_error {
 public:
  TaskError(std::string type_name, const std::string& message)
      : std::runtime_error(message), type_name_(std::move(type_name)) {}
  const std::string& type_name() const { return type_name_; }

 private:
  std::string type_name_;
};

// Thrown out of a function that saw its stop flag: a forced cancel (the task ends `canceled`).
class TaskStopped : public std::exception {};

// Functions that run for long check this at least every few milliseconds: a forced cancel cannot stop a
// thread from outside, so every native function cooperates.
class StopFlag {
 public:
  explicit StopFlag(const std::atomic<bool>& flag) : flag_(flag) {}
  void check() const {
    if (flag_.load(std::memory_order_relaxed)) throw TaskStopped();
  }
  bool raised() const { return flag_.load(std::memory_order_relaxed); }

 private:
  const std::atomic<bool>& flag_;
};

struct NativeFunction {
  std::string name;
  std::vector<std::string> parameters;  // positional, all required; keywords bind by these names
  std::function<Value(const std::vector<Value>&, const StopFlag&)> body;
};

// nullptr when this worker was not built with a function of that name.
const NativeFunction* find_function(const std::string& name);

// "add, echo, ..." for error messages.
std::string function_names();

}  // namespace scaler_native
