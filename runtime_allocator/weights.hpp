// Weight bytes for execution: external-data initializers read from files beside the model.
#pragma once

#include <string>

#include "analysis/graph.hpp"

namespace memplan::runtime {

// Gives every external-data tensor of `g` its bytes (Tensor::data), read from external_location relative
// to the folder of `model_path`. Errors: a location that is absolute or escapes that folder (through
// "..", or a symbolic link) is ErrorKind::malformed; a missing file or one shorter than offset + length
// is ErrorKind::io; a length that does not match the tensor's dtype and shape is ErrorKind::malformed.
void load_external_weights(analysis::Graph& g, const std::string& model_path);

// Why load_external_weights would refuse tensor `t`'s external data location, without opening anything
// ("is not a relative path", "escapes the model's folder /m"); "" when it lies in the model's folder or
// `t` has no external data. Commands that never read weights warn with it.
std::string external_data_problem(const analysis::Tensor& t, const std::string& model_path);

// Throws ErrorKind::io naming the first tensor the executor needs bytes for and has none: a weight or
// constant that no op produces and that carries no data (e.g. imported without keep_weight_data).
// Initial optimizer state without data is allowed: the executor starts it at zero.
void require_weight_data(const analysis::Graph& g);

// Deterministic stand-in bytes (t.bytes() of them) for a weight whose data was never loaded: float32
// values in [-0.1, 0.1] hashed from its name, zeros for other dtypes (ExecOptions::synthesize_missing_weights).
void synthesize_weight(const analysis::Tensor& t, std::byte* out);

}  // namespace memplan::runtime
