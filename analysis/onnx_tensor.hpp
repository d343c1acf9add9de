// ONNX TensorProto contents: dtypes, checked dims and inline payloads as TensorData (internal to the ONNX importer).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/graph.hpp"

namespace memplan::analysis::onnx_tensor {

// Errors name `origin` (the model file) and `what` (the initializer, attribute or input).
DType to_dtype(const std::string& origin, int32_t elem_type, const std::string& what);
// Dims as given, each >= 0 and their product checked (ErrorKind::overflow).
std::vector<std::int64_t> checked_dims(const std::string& origin, const google::protobuf::RepeatedField<std::int64_t>& dims,
                                       const std::string& what);
// The inline payload of a TensorProto as raw little-endian bytes (ErrorKind::malformed when it does not match dims).
TensorData tensor_data(const std::string& origin, const onnx::TensorProto& tp, DType dtype, std::vector<std::int64_t> dims,
                       const std::string& what);

}  // namespace memplan::analysis::onnx_tensor
