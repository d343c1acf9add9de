// libFuzzer target: a command line (arguments separated by NUL bytes) run by memplan's own entry point, in a
// scratch folder holding a small model, an input and a plan. Every outcome must be a documented exit code.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.hpp"
#include "fuzz/fuzz_common.hpp"
#include "runtime_allocator/npy.hpp"

// Huge dims make huge allocations: memplan reports std::bad_alloc (exit 12), which needs malloc to fail.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace {

namespace fs = std::filesystem;

constexpr const char* kModel = R"({"format": "memplan.graph", "version": 1, "name": "mlp", "inputs": ["x"], "outputs": ["y"],
 "tensors": [{"name": "x", "shape": [2, 8], "role": "input"}, {"name": "w", "shape": [8, 4], "role": "weight"},
             {"name": "h", "shape": [2, 4]}, {"name": "y", "shape": [2, 4]}],
 "ops": [{"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["h"]},
         {"name": "relu", "type": "Relu", "inputs": ["h"], "outputs": ["y"]}]})";

// The scratch folder is the working directory only while a command line runs: libFuzzer writes its corpus
// and artifacts relative to the directory it started in.
struct Sandbox {
  fs::path dir, home;
  std::string input_npy, plan_json;
  Sandbox() {
    char tmpl[] = "/tmp/memplan-fuzz-cli-XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    dir = tmpl;
    home = fs::current_path();
    fs::current_path(dir);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null < 0 || ::dup2(null, 1) < 0) std::abort();  // commands print their reports: not wanted here
    input_npy = memplan::runtime::format_npy(
        memplan::analysis::TensorData::from_double(memplan::analysis::DType::f32, {2, 8}, std::vector<double>(16, 0.5)));
    reset();
    std::ostringstream sink;
    const char* argv[] = {"memplan", "analyze", "m.json", "--save-plan", "p.json", "--no-fuse"};
    if (memplan::cli::run_command_line(6, argv, sink, sink) != 0) std::abort();
    std::ifstream f("p.json");
    plan_json.assign(std::istreambuf_iterator<char>(f), {});
    fs::current_path(home);
  }
  // The folder holds the three files again and nothing else.
  void reset() const {
    for (const auto& e : fs::directory_iterator(dir)) fs::remove_all(e.path());
    std::ofstream("m.json") << kModel;
    std::ofstream("x.npy", std::ios::binary) << input_npy;
    if (!plan_json.empty()) std::ofstream("p.json") << plan_json;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Sandbox box;
  std::vector<std::string> args{"memplan"};
  std::string cur;
  for (std::size_t k = 0; k < size; ++k) {
    const char c = static_cast<char>(data[k]);
    if (c == '/') return 0;  // paths stay inside the scratch folder
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  args.push_back(cur);
  if (args.size() > 40) return 0;
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  fs::current_path(box.dir);
  const int rc = memplan::cli::run_command_line(static_cast<int>(argv.size()), argv.data(), out, err);
  if (rc == 70) std::fprintf(stderr, "internal error: %s\n", err.str().c_str());
  memplan::fuzz::require(rc == 0 || (rc >= 2 && rc <= 12), "every command line ends with a documented exit code");
  box.reset();
  fs::current_path(box.home);
  return 0;
}
