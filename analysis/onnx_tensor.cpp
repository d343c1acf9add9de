// ONNX TensorProto contents: dtypes, checked dims and inline payloads as TensorData.
#include "analysis/onnx_tensor.hpp"

#include <cstring>

namespace memplan::analysis::onnx_tensor {

namespace {

[[noreturn]] void bad(const std::string& origin, ErrorKind k, const std::string& msg) { fail(k, origin + ": " + msg); }

}  // namespace

DType to_dtype(const std::string& origin, int32_t elem_type, const std::string& what) {
  if (elem_type <= 0 || elem_type > kMaxDType)
    bad(origin, ErrorKind::unsupported, what + " has unknown dtype " + std::to_string(elem_type));
  return static_cast<DType>(elem_type);
}

std::vector<std::int64_t> checked_dims(const std::string& origin, const google::protobuf::RepeatedField<std::int64_t>& dims,
                                       const std::string& what) {
  std::vector<std::int64_t> out(dims.begin(), dims.end());
  std::uint64_t n = 1;
  for (auto d : out) {
    if (d < 0) bad(origin, ErrorKind::overflow, what + " has a negative dim " + std::to_string(d));
    n = checked_mul(n, static_cast<std::uint64_t>(d), origin + ": " + what);
  }
  return out;
}

// Converts the inline payload of a TensorProto into raw little-endian bytes.
TensorData tensor_data(const std::string& origin, const onnx::TensorProto& tp, DType dtype, std::vector<std::int64_t> dims,
                       const std::string& what) {
  TensorData d{dtype, std::move(dims), {}};
  const std::uint64_t n = d.element_count();
  const std::uint32_t bits = dtype_bits(dtype);
  if (bits == 0) bad(origin, ErrorKind::unsupported, what + ": dtype " + dtype_name(dtype) + " is not supported for constants");
  const std::uint64_t nbytes = (checked_mul(n, bits, what) + 7) / 8;
  if (tp.has_raw_data()) {
    if (tp.raw_data().size() != nbytes)
      bad(origin, ErrorKind::malformed, what + ": raw_data has " + std::to_string(tp.raw_data().size()) + " bytes, dims need " +
                                      std::to_string(nbytes));
    d.bytes.resize(nbytes);
    if (nbytes) std::memcpy(d.bytes.data(), tp.raw_data().data(), nbytes);
    return d;
  }
  std::byte* p = nullptr;
  // Allocates only once the file is seen to hold the values: dims alone may promise terabytes.
  auto need = [&](std::uint64_t have) {
    if (have != n) bad(origin, ErrorKind::malformed, what + ": has " + std::to_string(have) + " values, dims need " + std::to_string(n));
    d.bytes.resize(nbytes);
    p = d.bytes.data();
  };
  switch (dtype) {
    case DType::f32:
      need(static_cast<std::uint64_t>(tp.float_data_size()));
      if (n) std::memcpy(p, tp.float_data().data(), nbytes);
      break;
    case DType::f64:
      need(static_cast<std::uint64_t>(tp.double_data_size()));
      if (n) std::memcpy(p, tp.double_data().data(), nbytes);
      break;
    case DType::i64:
      need(static_cast<std::uint64_t>(tp.int64_data_size()));
      if (n) std::memcpy(p, tp.int64_data().data(), nbytes);
      break;
    case DType::u32: case DType::u64: {
      need(static_cast<std::uint64_t>(tp.uint64_data_size()));
      for (std::uint64_t k = 0; k < n; ++k) {
        std::uint64_t v = tp.uint64_data(static_cast<int>(k));
        if (dtype == DType::u32) {
          auto w = static_cast<std::uint32_t>(v);
          std::memcpy(p + 4 * k, &w, 4);
        } else {
          std::memcpy(p + 8 * k, &v, 8);
        }
      }
      break;
    }
    case DType::i32: case DType::i16: case DType::i8: case DType::u8: case DType::u16: case DType::boolean:
    case DType::f16: case DType::bf16: {
      need(static_cast<std::uint64_t>(tp.int32_data_size()));
      const std::uint32_t width = bits / 8;
      for (std::uint64_t k = 0; k < n; ++k) {
        auto v = static_cast<std::uint32_t>(tp.int32_data(static_cast<int>(k)));
        std::memcpy(p + width * k, &v, width);  // little-endian: low bytes first
      }
      break;
    }
    default:
      bad(origin, ErrorKind::unsupported, what + ": inline data of dtype " + std::string(dtype_name(dtype)) + " is not supported");
  }
  return d;
}

}  // namespace memplan::analysis::onnx_tensor
