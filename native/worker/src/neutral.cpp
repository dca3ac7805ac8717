#include "neutral.hpp"

#include <msgpack.h>

#include <limits>
#include <memory>

namespace scaler_native {

Value Value::of_bool(bool value) {
  Value result;
  result.kind = Kind::boolean;
  result.boolean = value;
  return result;
}

Value Value::of_int(int64_t value) {
  Value result;
  result.kind = Kind::integer;
  result.integer = value;
  return result;
}

Value Value::of_uint(uint64_t value) {
  if (value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return of_int(static_cast<int64_t>(value));
  }
  Value result;
  result.kind = Kind::unsigned_integer;
  result.unsigned_integer = value;
  return result;
}

Value Value::of_real(double value) {
  Value result;
  result.kind = Kind::real;
  result.real = value;
  return result;
}

Value Value::of_text(std::string value) {
  Value result;
  result.kind = Kind::text;
  result.bytes = std::move(value);
  return result;
}

Value Value::of_array(std::vector<Value> items) {
  Value result;
  result.kind = Kind::array;
  result.items = std::move(items);
  return result;
}

const char* Value::type_name() const {
  switch (kind) {
    case Kind::nil: return "nil";
    case Kind::boolean: return "bool";
    case Kind::integer:
    case Kind::unsigned_integer: return "int";
    case Kind::real: return "float";
    case Kind::text: return "str";
    case Kind::binary: return "bytes";
    case Kind::array: return "list";
    case Kind::map: return "map";
    case Kind::extension:
      if (extension_type == kNativeFunctionExt) return "native function";
      if (extension_type == kPythonObjectExt) return "Python object";
      return "extension";
  }
  return "?";
}

namespace {

Value from_object(const msgpack_object& object) {
  Value value;
  switch (object.type) {
    case MSGPACK_OBJECT_NIL:
      return value;
    case MSGPACK_OBJECT_BOOLEAN:
      return Value::of_bool(object.via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
      return Value::of_uint(object.via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
      return Value::of_int(object.via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
      return Value::of_real(object.via.f64);
    case MSGPACK_OBJECT_STR:
      return Value::of_text(std::string(object.via.str.ptr, object.via.str.size));
    case MSGPACK_OBJECT_BIN:
      value.kind = Value::Kind::binary;
      value.bytes.assign(object.via.bin.ptr, object.via.bin.size);
      return value;
    case MSGPACK_OBJECT_EXT:
      value.kind = Value::Kind::extension;
      value.extension_type = object.via.ext.type;
      value.bytes.assign(object.via.ext.ptr, object.via.ext.size);
      return value;
    case MSGPACK_OBJECT_ARRAY:
      value.kind = Value::Kind::array;
      value.items.reserve(object.via.array.size);
      for (uint32_t i = 0; i < object.via.array.size; ++i) value.items.push_back(from_object(object.via.array.ptr[i]));
      return value;
    case MSGPACK_OBJECT_MAP:
      value.kind = Value::Kind::map;
      value.entries.reserve(object.via.map.size);
      for (uint32_t i = 0; i < object.via.map.size; ++i) {
        value.entries.emplace_back(from_object(object.via.map.ptr[i].key), from_object(object.via.map.ptr[i].val));
      }
      return value;
  }
  throw NeutralDecodeError("unknown msgpack type");
}

void pack(msgpack_packer* packer, const Value& value) {
  switch (value.kind) {
    case Value::Kind::nil: msgpack_pack_nil(packer); return;
    case Value::Kind::boolean:
      if (value.boolean) msgpack_pack_true(packer); else msgpack_pack_false(packer);
      return;
    case Value::Kind::integer: msgpack_pack_int64(packer, value.integer); return;
    case Value::Kind::unsigned_integer: msgpack_pack_uint64(packer, value.unsigned_integer); return;
    case Value::Kind::real: msgpack_pack_double(packer, value.real); return;
    case Value::Kind::text:
      msgpack_pack_str(packer, value.bytes.size());
      msgpack_pack_str_body(packer, value.bytes.data(), value.bytes.size());
      return;
    case Value::Kind::binary:
      msgpack_pack_bin(packer, value.bytes.size());
      msgpack_pack_bin_body(packer, value.bytes.data(), value.bytes.size());
      return;
    case Value::Kind::extension:
      msgpack_pack_ext(packer, value.bytes.size(), value.extension_type);
      msgpack_pack_ext_body(packer, value.bytes.data(), value.bytes.size());
      return;
    case Value::Kind::array:
      msgpack_pack_array(packer, value.items.size());
      for (const Value& item : value.items) pack(packer, item);
      return;
    case Value::Kind::map:
      msgpack_pack_map(packer, value.entries.size());
      for (const auto& entry : value.entries) {
        pack(packer, entry.first);
        pack(packer, entry.second);
      }
      return;
  }
}

}  // namespace

Value decode_value(const std::string& payload) {
  msgpack_unpacked unpacked;
  msgpack_unpacked_init(&unpacked);
  std::unique_ptr<msgpack_unpacked, void (*)(msgpack_unpacked*)> guard(&unpacked, msgpack_unpacked_destroy);
  size_t offset = 0;
  msgpack_unpack_return status = msgpack_unpack_next(&unpacked, payload.data(), payload.size(), &offset);
  if (status == MSGPACK_UNPACK_CONTINUE) throw NeutralDecodeError("truncated msgpack value");
  if (status != MSGPACK_UNPACK_SUCCESS) throw NeutralDecodeError("not msgpack");
  if (offset != payload.size()) {
    throw NeutralDecodeError(std::to_string(payload.size() - offset) + " byte(s) after the msgpack value");
  }
  return from_object(unpacked.data);
}

std::string encode_value(const Value& value) {
  msgpack_sbuffer buffer;
  msgpack_sbuffer_init(&buffer);
  std::unique_ptr<msgpack_sbuffer, void (*)(msgpack_sbuffer*)> guard(&buffer, msgpack_sbuffer_destroy);
  msgpack_packer packer;
  msgpack_packer_init(&packer, &buffer, msgpack_sbuffer_write);
  pack(&packer, value);
  return std::string(buffer.data, buffer.size);
}

}  // namespace scaler_native
