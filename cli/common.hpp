// Pieces every subcommand shares: the MODEL and --dim options, loading a shaped graph, human units.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/graph.hpp"
#include "analysis/output_files.hpp"
#include "analysis/shapes.hpp"
#include "planner/assign.hpp"
#include "planner/fusion.hpp"
#include "planner/schedule.hpp"

namespace memplan::runtime {
class Backend;
}

namespace memplan::cli {

struct ModelArgs {
  std::string model;
  std::vector<std::string> dims;  // "batch=32"
  bool no_fuse = false;           // --no-fuse: plan the graph as imported
  // Not a flag: the backend's attention kernels' head-dim limit (FuseOptions::attention_max_head_dim; 0: none).
  std::int64_t attention_max_head_dim = 0;
};

// Adds the positional MODEL, the repeatable --dim k=v option and --no-fuse to `cmd`.
void add_model_args(CLI::App* cmd, ModelArgs& args);
// Parses "k=v" pairs; a bad pair or an absurd value is ErrorKind::usage.
analysis::DimBindings parse_dims(const std::vector<std::string>& pairs);
// The symbolic dims of the model's graph inputs (what --dim can bind), sorted.
std::vector<std::string> symbolic_dims(const analysis::Graph& g);
// ErrorKind::usage unless `name` is a symbolic dim of `g`'s inputs: the message lists the model's symbolic
// dims and, for an export with a fixed batch, that batch. `option` names what asked (e.g. "--dim batch=64").
void require_symbolic_dim(const analysis::Graph& g, const std::string& name, const std::string& option);
// Warns on stderr about each tensor whose external data location lies outside the model's folder (never
// opened by planning; `run` refuses it).
void warn_external_data(const analysis::Graph& g, const std::string& model_path);
// Warns on stderr when the importer converted the model's default-domain opset (libonnx's version converter).
void warn_converted_opset(const analysis::Graph& g, const std::string& model_path);
// Imports (ONNX or JSON), warns about external data outside the model's folder, checks that every --dim
// names a symbolic dim (require_symbolic_dim), infers shapes.
analysis::Graph load_shaped_model(const ModelArgs& args, bool keep_weight_data = false);
// The ops a CUDA backend ran on the host (CudaOptions::host_fallback): one JSON object each (op, type, why), and
// with `warn` one warning line on stderr per op type naming its first op. An empty array for other backends.
nlohmann::json host_fallback_report(const runtime::Backend& backend, bool warn);
// The passes fuse_graph runs on the shaped forward graph: all of them, or none with --no-fuse.
planner::FuseOptions fuse_options(const ModelArgs& args);

// Numbers from flags and environment variables, checked where they are read (docs/errors.md, "Numbers on the
// command line"): ErrorKind::usage naming `what` (the flag or variable) and the accepted range.
double require_finite_in(double value, double lo, double hi, const std::string& what);
std::int64_t require_int_in(std::int64_t value, std::int64_t lo, std::int64_t hi, const std::string& what);
// `text` read whole as a decimal integer in [lo, hi] (an environment variable's value).
std::int64_t parse_int_in(const std::string& text, std::int64_t lo, std::int64_t hi, const std::string& what);
// The accepted ranges (docs/errors.md states each).
inline constexpr double kMaxExactPackSeconds = 3600.0;
inline constexpr std::int64_t kMaxExactPackNodes = 1'000'000'000'000;

// How the arena is assigned: --alignment, --packer, --workspace-limit, and the op order: --schedule.
struct ArenaArgs {
  std::uint64_t alignment = 256;
  std::string packer = "best";
  std::string workspace_limit = "256MiB";
  std::string schedule = "memory";  // --schedule memory | file
  double exact_pack_seconds = planner::AssignOptions{}.exact_pack_seconds;  // --exact-pack-seconds
  std::int64_t exact_pack_nodes = static_cast<std::int64_t>(planner::AssignOptions{}.exact_pack_nodes);  // --exact-pack-nodes
  bool no_concat_in_place = false;                                               // --no-concat-in-place
};
void add_arena_args(CLI::App* cmd, ArenaArgs& args);
// A bad --workspace-limit size, --exact-pack-seconds or --exact-pack-nodes is ErrorKind::usage.
planner::AssignOptions assign_options(const ArenaArgs& args);
// --schedule: an unknown name is ErrorKind::usage.
planner::ScheduleOptions schedule_options(const ArenaArgs& args);

// What the CUDA context, cuBLAS/cuDNN handles and workspaces and the NVRTC modules hold on the device beside
// the plan: measured 67.2 to 68.5 MiB on an H100 (docs/cuda.md), stated as 69 MiB. --library-bytes sets it.
inline constexpr const char* kDefaultLibraryBytes = "69MiB";  // planner::kDefaultLibraryBytes
void add_library_bytes_arg(CLI::App* cmd, std::string& library_bytes);
// "0" or a size (planner::parse_size); ErrorKind::usage otherwise.
std::uint64_t parse_library_bytes(const std::string& text);
// JSON text as nlohmann writes it, except that bytes which are not UTF-8 (from a file path given on the
// command line) become U+FFFD instead of an exception.
std::string json_text(const nlohmann::json& j, int indent = -1);

std::string human_bytes(std::uint64_t bytes);
std::string human_count(double n);
// Writes `text` to `path` all-or-nothing (a temporary file renamed over it), ErrorKind::io on failure.
void write_text_file(const std::string& path, const std::string& text);
// Flushes what the command printed, then renames `files` over their targets: a command whose standard output
// cannot be written (a full device, a closed pipe) fails with ErrorKind::io and leaves no output file behind.
void commit_after_stdout(analysis::OutputFiles& files);
// Creates the folder `path` (and its parents) for the outputs of `flag`; ErrorKind::io naming both when it cannot be
// (a file in the way, no permission).
void create_output_folder(const std::string& path, const std::string& flag);

}  // namespace memplan::cli
