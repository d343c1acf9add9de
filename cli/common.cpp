// Shared CLI helpers: model options, dim bindings, loading, human-readable units.
#include "cli/common.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "analysis/import.hpp"
#include "analysis/names.hpp"
#include "analysis/output_files.hpp"
#include "planner/remat.hpp"
#include "runtime_allocator/weights.hpp"
#ifdef MEMPLAN_HAVE_CUDA
#include "runtime_allocator/cuda/cuda_backend.hpp"
#endif

namespace memplan::cli {

void add_model_args(CLI::App* cmd, ModelArgs& args) {
  cmd->add_option("MODEL", args.model, "model file: ONNX or memplan JSON graph")->required();
  cmd->add_option("--dim", args.dims, "bind a symbolic dim, e.g. --dim batch=32 (repeatable)");
  cmd->add_flag("--no-fuse", args.no_fuse,
                "plan the graph as imported: no fusion of attention, norms, GELU, layouts or elementwise chains");
}

nlohmann::json host_fallback_report(const runtime::Backend& backend, bool warn) {
  nlohmann::json rows = nlohmann::json::array();
#ifdef MEMPLAN_HAVE_CUDA
  const auto* cuda = dynamic_cast<const runtime::cuda::CudaBackend*>(&backend);
  if (!cuda) return rows;
  std::set<std::string> warned;
  for (const auto& f : cuda->host_fallbacks()) {
    rows.push_back({{"op", f.op}, {"type", f.type}, {"why", f.why}});
    if (warn && warned.insert(f.type).second)
      std::fprintf(stderr, "memplan: warning: %s ops ran on the host (no CUDA kernel takes them: %s), e.g. '%s'\n",
                   analysis::terminal_safe(f.type).c_str(), analysis::terminal_safe(f.why).c_str(), analysis::terminal_safe(f.op).c_str());
  }
#else
  (void)backend;
  (void)warn;
#endif
  return rows;
}

planner::FuseOptions fuse_options(const ModelArgs& args) {
  if (args.no_fuse) return planner::FuseOptions::none();
  planner::FuseOptions o;
  o.attention_max_head_dim = args.attention_max_head_dim;
  return o;
}

void add_arena_args(CLI::App* cmd, ArenaArgs& args) {
  cmd->add_option("--alignment", args.alignment, "buffer alignment in bytes")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--packer", args.packer, "greedy_by_size | best_fit | greedy_by_breadth | sweep | best");
  cmd->add_option("--workspace-limit", args.workspace_limit,
                  "most scratch bytes in the arena for one convolution's workspace (default 256MiB; 0: none)");
  cmd->add_option("--exact-pack-seconds", args.exact_pack_seconds,
                  "most time for the exact packer to prove the arena optimal or shrink it (default 2; 0: greedy packers only)");
  cmd->add_option("--exact-pack-nodes", args.exact_pack_nodes,
                  "search work for the exact packer in buffers examined (default 2000000, about a second; the same plan on every machine unless the "
                  "time runs out first; 0: greedy packers only)");
  cmd->add_flag("--no-concat-in-place", args.no_concat_in_place,
                "give every Concat input its own buffer (default: producers write straight into slices of the Concat's output where "
                "each input is one contiguous range of it)");
  cmd->add_option("--schedule", args.schedule,
                  "op order: memory (default: the topological order of least live peak found, the file order's plan kept where it is "
                  "not larger) | file (the model's own order)");
}

planner::ScheduleOptions schedule_options(const ArenaArgs& args) {
  planner::ScheduleOptions o;
  const auto kind = planner::schedule_kind_from_name(args.schedule);
  if (!kind) fail(ErrorKind::usage, "--schedule '" + args.schedule + "' is not one of file, memory");
  o.kind = *kind;
  return o;
}

namespace {

std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

double require_finite_in(double value, double lo, double hi, const std::string& what) {
  if (std::isfinite(value) && value >= lo && value <= hi) return value;
  fail(ErrorKind::usage, what + " " + number_text(value) + " is outside the accepted range " + number_text(lo) + " .. " + number_text(hi) +
                             (std::isfinite(value) ? "" : " (a finite number is needed)"));
}

std::int64_t require_int_in(std::int64_t value, std::int64_t lo, std::int64_t hi, const std::string& what) {
  if (value >= lo && value <= hi) return value;
  fail(ErrorKind::usage, what + " " + std::to_string(value) + " is outside the accepted range " + std::to_string(lo) + " .. " + std::to_string(hi));
}

std::int64_t parse_int_in(const std::string& text, std::int64_t lo, std::int64_t hi, const std::string& what) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end)
    fail(ErrorKind::usage, what + "='" + text + "' is not an integer in the accepted range " + std::to_string(lo) + " .. " + std::to_string(hi));
  return require_int_in(v, lo, hi, what);
}

planner::AssignOptions assign_options(const ArenaArgs& args) {
  planner::AssignOptions o;
  o.alignment = args.alignment;
  o.packer = args.packer;
  o.exact_pack_seconds = require_finite_in(args.exact_pack_seconds, 0.0, kMaxExactPackSeconds, "--exact-pack-seconds");
  o.exact_pack_nodes = static_cast<std::uint64_t>(require_int_in(args.exact_pack_nodes, 0, kMaxExactPackNodes, "--exact-pack-nodes"));
  o.concat_in_place = !args.no_concat_in_place;
  o.workspace_limit_bytes = args.workspace_limit == "0" ? 0 : planner::parse_size(args.workspace_limit);
  return o;
}

analysis::DimBindings parse_dims(const std::vector<std::string>& pairs) {
  analysis::DimBindings out;
  for (const auto& p : pairs) {
    auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == p.size())
      fail(ErrorKind::usage, "--dim expects NAME=VALUE, got '" + p + "'");
    const std::string name = p.substr(0, eq), value = p.substr(eq + 1);
    std::int64_t v = 0;
    try {
      std::size_t used = 0;
      v = std::stoll(value, &used);
      if (used != value.size()) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      fail(ErrorKind::usage, "--dim " + name + ": '" + value + "' is not an integer");
    }
    if (v < 1 || v > (std::int64_t{1} << 40))
      fail(ErrorKind::usage, "--dim " + name + "=" + value + " is out of range (1 .. 2^40)");
    if (out.count(name)) fail(ErrorKind::usage, "--dim " + name + " is given twice");
    out[name] = v;
  }
  return out;
}

std::vector<std::string> symbolic_dims(const analysis::Graph& g) {
  std::set<std::string> names;
  for (analysis::TensorId t : g.inputs)
    for (const analysis::Dim& d : g.tensors[t].dims)
      if (!d.known() && !d.symbol.empty()) names.insert(d.symbol);
  return {names.begin(), names.end()};
}

void require_symbolic_dim(const analysis::Graph& g, const std::string& name, const std::string& option) {
  const std::vector<std::string> dims = symbolic_dims(g);
  if (std::find(dims.begin(), dims.end(), name) != dims.end()) return;
  std::string msg = option + ": the model has no symbolic dim '" + name + "'; its symbolic dims: ";
  for (std::size_t k = 0; k < dims.size(); ++k) msg += (k ? ", " : "") + dims[k];
  if (dims.empty()) msg += "none";
  // The batch a fixed export was traced with: dim 0 of its first graph input that is not a weight.
  for (analysis::TensorId t : g.inputs) {
    const analysis::Tensor& x = g.tensors[t];
    if (x.role != analysis::TensorRole::input || x.dims.empty()) continue;
    if (x.dims[0].known())
      msg += "; its batch is fixed at " + std::to_string(x.dims[0].value) + " (dim 0 of input '" + x.name +
             "'; to vary it, export with dynamic axes: README.md, \"Exporting from PyTorch for memplan\")";
    break;
  }
  fail(ErrorKind::usage, msg);
}

void warn_external_data(const analysis::Graph& g, const std::string& model_path) {
  constexpr int kMaxWarnings = 8;
  int shown = 0, more = 0;
  for (const auto& t : g.tensors) {
    const std::string problem = runtime::external_data_problem(t, model_path);
    if (problem.empty()) continue;
    if (shown++ < kMaxWarnings)
      std::fprintf(stderr, "memplan: warning: tensor '%s': external data location '%s' %s (it is never opened)\n",
                   analysis::terminal_safe(t.name).c_str(), analysis::terminal_safe(t.external_location).c_str(),
                   analysis::terminal_safe(problem).c_str());
    else
      ++more;
  }
  if (more) std::fprintf(stderr, "memplan: warning: %d more tensors have external data outside the model's folder\n", more);
}

void warn_converted_opset(const analysis::Graph& g, const std::string& model_path) {
  if (g.converted_from_opset == 0) return;
  std::fprintf(stderr, "memplan: warning: %s: default-domain opset %lld is outside the supported range %lld..%lld; converted to opset %lld with libonnx's version converter\n",
               analysis::terminal_safe(model_path).c_str(), static_cast<long long>(g.converted_from_opset),
               static_cast<long long>(analysis::kMinOpset), static_cast<long long>(analysis::kMaxOpset),
               static_cast<long long>(g.opset));
}

analysis::Graph load_shaped_model(const ModelArgs& args, bool keep_weight_data) {
  analysis::ImportOptions io;
  io.keep_weight_data = keep_weight_data;
  analysis::Graph g = analysis::import_model(args.model, io);
  warn_converted_opset(g, args.model);
  warn_external_data(g, args.model);
  analysis::ShapeOptions so;
  so.dims = parse_dims(args.dims);
  for (const auto& [name, value] : so.dims) require_symbolic_dim(g, name, "--dim " + name + "=" + std::to_string(value));
  analysis::Graph shaped = analysis::infer_shapes(g, so);
  for (const auto& note : shaped.notes)  // an If planned with one of its branches (docs/onnx-control-flow.md)
    std::fprintf(stderr, "memplan: warning: %s: %s\n", analysis::terminal_safe(args.model).c_str(), analysis::terminal_safe(note).c_str());
  return shaped;
}

void add_library_bytes_arg(CLI::App* cmd, std::string& library_bytes) {
  cmd->add_option("--library-bytes", library_bytes,
                  std::string("device memory the CUDA context and cuBLAS/cuDNN workspaces take beside the plan, counted in the "
                              "total and against --budget (default ") + kDefaultLibraryBytes + ", measured on an H100; 0: none)");
}

std::uint64_t parse_library_bytes(const std::string& text) { return text == "0" ? 0 : planner::parse_size(text); }

std::string json_text(const nlohmann::json& j, int indent) { return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string human_bytes(std::uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string human_count(double n) {
  static const char* units[] = {"", "K", "M", "G", "T", "P", "E"};
  int u = 0;
  while (n >= 1000.0 && u < 6) {
    n /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.2f %s", n, units[u]);
  return buf;
}

void write_text_file(const std::string& path, const std::string& text) { analysis::write_file_atomically(path, text); }

void create_output_folder(const std::string& path, const std::string& flag) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return;
  std::filesystem::create_directories(path, ec);
  if (ec || !std::filesystem::is_directory(path))
    fail(ErrorKind::io, flag + " '" + path + "': cannot create the folder" + (ec ? " (" + ec.message() + ")" : std::string(" (a file is in the way)")));
}

void commit_after_stdout(analysis::OutputFiles& files) {
  errno = 0;
  std::cout.flush();
  if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout)
    fail(ErrorKind::io, std::string("cannot write standard output: ") + (errno ? std::strerror(errno) : "write error") +
                            " (no output file written)");
  files.commit();
}

}  // namespace memplan::cli
