// Language-neutral values and their encoding, msgpack (PROTOCOL.md §16): what native tasks take and return.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace scaler_native {

// msgpack extension types of the neutral encoding (PROTOCOL.md §16).
constexpr int8_t kNativeFunctionExt = 1;  // a function this worker was built with; data: its name, UTF-8
constexpr int8_t kPythonObjectExt = 2;    // a Python-only value (a pickle); never readable here

struct Value {
  enum class Kind { nil, boolean, integer, unsigned_integer, real, text, binary, array, map, extension };

  Kind kind = Kind::nil;
  bool boolean = false;
  int64_t integer = 0;            // integer: any int64
  uint64_t unsigned_integer = 0;  // unsigned_integer: only values above INT64_MAX
  double real = 0;
  std::string bytes;              // text (UTF-8), binary, or an extension's data
  int8_t extension_type = 0;
  std::vector<Value> items;                      // array
  std::vector<std::pair<Value, Value>> entries;  // map, in wire order

  static Value nil() { return Value{}; }
  static Value of_bool(bool value);
  static Value of_int(int64_t value);
  static Value of_uint(uint64_t value);  // kept as `integer` when it fits
  static Value of_real(double value);
  static Value of_text(std::string value);
  static Value of_array(std::vector<Value> items);

  bool is_number() const { return kind == Kind::integer || kind == Kind::unsigned_integer || kind == Kind::real; }
  // The kind as a user of the client sees it (for error messages).
  const char* type_name() const;
};

// The payload is not one well-formed neutral value.
class NeutralDecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Value decode_value(const std::string& payload);
std::string encode_value(const Value& value);

}  // namespace scaler_native
