#include "functions.hpp"

#include <chrono>
#include <map>
#include <thread>

namespace scaler_native {

namespace {

[[noreturn]] void type_error(const std::string& function, const std::string& what) {
  throw TaskError("native.TypeError", function + "(): " + what);
}

// Integers stay integers while they fit in 64 bits (signed, or unsigned above INT64_MAX); a float on
// either side makes the result a float, as in Python.
__int128 wide(const Value& value) {
  return value.kind == Value::Kind::unsigned_integer ? static_cast<__int128>(value.unsigned_integer)
                                                     : static_cast<__int128>(value.integer);
}

double real(const Value& value) {
  switch (value.kind) {
    case Value::Kind::real: return value.real;
    case Value::Kind::unsigned_integer: return static_cast<double>(value.unsigned_integer);
    default: return static_cast<double>(value.integer);
  }
}

Value from_wide(const std::string& function, __int128 result) {
  if (result >= INT64_MIN && result <= INT64_MAX) return Value::of_int(static_cast<int64_t>(result));
  if (result > 0 && result <= static_cast<__int128>(UINT64_MAX)) return Value::of_uint(static_cast<uint64_t>(result));
  throw TaskError("native.OverflowError", function + "(): the result does not fit in 64 bits");
}

void require_numbers(const std::string& function, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) {
    type_error(function, std::string("unsupported operand types: ") + a.type_name() + " and " + b.type_name());
  }
}

Value plus(const char* function, const Value& a, const Value& b) {
  require_numbers(function, a, b);
  if (a.kind == Value::Kind::real || b.kind == Value::Kind::real) return Value::of_real(real(a) + real(b));
  return from_wide(function, wide(a) + wide(b));
}

Value add(const std::vector<Value>& args, const StopFlag&) {
  const Value& a = args[0];
  const Value& b = args[1];
  if (a.kind == Value::Kind::text && b.kind == Value::Kind::text) return Value::of_text(a.bytes + b.bytes);
  return plus("add", a, b);
}

Value mul(const std::vector<Value>& args, const StopFlag&) {
  const Value& a = args[0];
  const Value& b = args[1];
  require_numbers("mul", a, b);
  if (a.kind == Value::Kind::real || b.kind == Value::Kind::real) return Value::of_real(real(a) * real(b));
  __int128 product;
  if (__builtin_mul_overflow(wide(a), wide(b), &product)) {
    throw TaskError("native.OverflowError", "mul(): the result does not fit in 64 bits");
  }
  return from_wide("mul", product);
}

Value sum(const std::vector<Value>& args, const StopFlag&) {
  const Value& values = args[0];
  if (values.kind != Value::Kind::array) type_error("sum", std::string("expected a list, got ") + values.type_name());
  Value total = Value::of_int(0);
  for (const Value& item : values.items) total = plus("sum", total, item);
  return total;
}

Value sleep_ms(const std::vector<Value>& args, const StopFlag& stop) {
  const Value& milliseconds = args[0];
  if (!milliseconds.is_number() || real(milliseconds) < 0) {
    type_error("sleep_ms", std::string("expected a number of milliseconds >= 0, got ") + milliseconds.type_name());
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<int64_t>(real(milliseconds) * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    stop.check();
    auto left = deadline - std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(5)));
  }
  return milliseconds;
}

Value fail(const std::vector<Value>& args, const StopFlag&) {
  const Value& message = args[0];
  throw TaskError("native.TaskFailed", message.kind == Value::Kind::text ? message.bytes : std::string(message.type_name()));
}

Value echo(const std::vector<Value>& args, const StopFlag&) { return args[0]; }

// CPU-bound work for benchmarks: `iterations` rounds of a xorshift generator; returns the last state so the
// loop cannot be optimised away.
Value spin(const std::vector<Value>& args, const StopFlag& stop) {
  const Value& iterations = args[0];
  if (iterations.kind != Value::Kind::integer || iterations.integer < 0) {
    type_error("spin", std::string("expected a number of iterations >= 0, got ") + iterations.type_name());
  }
  uint64_t state = 88172645463325252ull;
  for (int64_t done = 0; done < iterations.integer; ++done) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    if ((done & 0xffff) == 0) stop.check();
  }
  return Value::of_uint(state);
}

const std::map<std::string, NativeFunction>& registry() {
  static const std::map<std::string, NativeFunction> functions = [] {
    std::map<std::string, NativeFunction> table;
    auto define = [&table](NativeFunction function) { table.emplace(function.name, std::move(function)); };
    define({"add", {"a", "b"}, add});
    define({"mul", {"a", "b"}, mul});
    define({"sum", {"values"}, sum});
    define({"sleep_ms", {"milliseconds"}, sleep_ms});
    define({"fail", {"message"}, fail});
    define({"echo", {"value"}, echo});
    define({"spin", {"iterations"}, spin});
    return table;
  }();
  return functions;
}

}  // namespace

const NativeFunction* find_function(const std::string& name) {
  const auto& functions = registry();
  auto found = functions.find(name);
  return found == functions.end() ? nullptr : &found->second;
}

std::string function_names() {
  std::string names;
  for (const auto& entry : registry()) {
    if (!names.empty()) names += ", ";
    names += entry.first;
  }
  return names;
}

}  // namespace scaler_native
