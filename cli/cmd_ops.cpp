// `memplan ops`: the op registry as a table (shape rule, cost, backward, kernels), or what models' ops lack.
#include <algorithm>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "analysis/names.hpp"
#include "analysis/import.hpp"
#include "analysis/ops.hpp"
#include "cli/common.hpp"
#include "cli/registry.hpp"
#include "analysis/shapes.hpp"
#include "runtime_allocator/backend.hpp"
#include "runtime_allocator/kernels/kernel_coverage.hpp"

namespace memplan::cli {
namespace {

#ifdef MEMPLAN_HAVE_CUDA
constexpr bool kCudaBuilt = true;
#else
constexpr bool kCudaBuilt = false;
#endif

struct OpsArgs {
  std::vector<std::string> models;
  std::vector<std::string> dims;
  bool json = false;
  bool markdown = false;
};

using analysis::GradKind;
using analysis::OpInfo;

// What the registry and the backends say about one op type.
struct OpFacts {
  const OpInfo* info = nullptr;
  bool cpu = false;
  std::optional<bool> cuda;  // empty: memplan was built without the CUDA backend
  bool cuda_generated_only = false;  // CUDA runs it through generated elementwise kernels only (dtype-dependent)
};

std::string domain_name(std::string_view d) { return d.empty() || d == "ai.onnx" ? "ai.onnx" : std::string(d); }

const char* shape_text(const OpInfo& i) { return i.shape ? "rule" : i.declared_shapes ? "declared" : "none"; }

const char* backward_text(GradKind k) {
  switch (k) {
    case GradKind::rule: return "yes";
    case GradKind::not_differentiable: return "not differentiable";
    case GradKind::none: break;
  }
  return "none";
}

const char* yes_no(bool b) { return b ? "yes" : "no"; }

// The dtypes of input 0 the CPU kernel of `id` accepts, by name (null: no kernel).
nlohmann::json cpu_dtypes(analysis::OpTypeId id) {
  const auto c = runtime::kernel_constraints("cpu", id);
  if (!c) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (int d = 1; d <= analysis::kMaxDType; ++d)
    if (c->dtypes & runtime::dtype_bit(static_cast<analysis::DType>(d))) out.push_back(analysis::dtype_name(static_cast<analysis::DType>(d)));
  return out;
}
std::string cuda_text(const std::optional<bool>& c) { return c ? yes_no(*c) : "not built"; }

// Every registered op with its kernels, sorted by domain then type (the registry's ids are not an order
// a reader looks things up in).
std::vector<OpFacts> all_facts() {
  const auto& reg = analysis::op_registry();
  std::vector<bool> cpu(reg.all().size(), false), cuda(reg.all().size(), false);
  for (auto id : runtime::registered_kernels("cpu"))
    if (id < cpu.size()) cpu[id] = true;
  for (auto id : runtime::registered_kernels("cuda"))
    if (id < cuda.size()) cuda[id] = true;
  std::vector<bool> generated(reg.all().size(), false);
  for (auto id : runtime::generated_kernels("cuda"))
    if (id < generated.size()) generated[id] = true;
  std::vector<OpFacts> out;
  for (const auto& i : reg.all()) {
    OpFacts f{&i, cpu[i.id], std::nullopt, generated[i.id] && !cuda[i.id]};
    if (kCudaBuilt) f.cuda = cuda[i.id] || generated[i.id];
    out.push_back(f);
  }
  std::sort(out.begin(), out.end(), [](const OpFacts& a, const OpFacts& b) {
    return std::pair(domain_name(a.info->domain), a.info->type) < std::pair(domain_name(b.info->domain), b.info->type);
  });
  return out;
}

// What an op type lacks of shape rule, cost, backward and kernels (CUDA only when built).
std::vector<std::string> lacks(const OpFacts& f) {
  std::vector<std::string> out;
  if (!f.info->shape && !f.info->declared_shapes) out.push_back("shape rule");
  if (!f.info->flops) out.push_back("cost");
  if (f.info->grad_kind == GradKind::none) out.push_back("backward");
  if (!f.cpu) out.push_back("CPU kernel");
  if (f.cuda && !*f.cuda) out.push_back("CUDA kernel");
  return out;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (std::size_t k = 0; k < v.size(); ++k) s += (k ? sep : "") + v[k];
  return s;
}

using Row = std::vector<std::string>;

// A padded text table, or a Markdown one ('|' in cells escaped).
void print_table(const Row& header, const std::vector<Row>& rows, bool markdown, const std::string& indent = "") {
  if (markdown) {
    auto line = [](const Row& r) {
      std::string s = "|";
      for (const auto& c : r) {
        std::string e;
        for (char ch : c) e += ch == '|' ? std::string("\\|") : std::string(1, ch);
        s += " " + e + " |";
      }
      return s;
    };
    std::cout << line(header) << "\n|";
    for (std::size_t k = 0; k < header.size(); ++k) std::cout << "---|";
    std::cout << "\n";
    for (const auto& r : rows) std::cout << line(r) << "\n";
    return;
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (std::size_t k = 0; k < header.size(); ++k) width[k] = header[k].size();
  for (const auto& r : rows)
    for (std::size_t k = 0; k < r.size() && k < width.size(); ++k) width[k] = std::max(width[k], r[k].size());
  auto line = [&](const Row& r) {
    std::string s = indent;
    for (std::size_t k = 0; k < r.size(); ++k) {
      s += r[k];
      if (k + 1 < r.size()) s += std::string(width[k] - r[k].size() + 2, ' ');
    }
    std::cout << s << "\n";
  };
  line(header);
  for (const auto& r : rows) line(r);
}

const char* kMarkdownHeader =
    "# Ops\n"
    "\n"
    "Every op memplan knows, one row per op type and domain, from the op registry (`analysis/ops.hpp`).\n"
    "**shape**: `rule` when shape inference has a rule for it, `declared` when memplan's own builder\n"
    "declares its outputs' shapes. **cost**: a FLOP count for the cost model. **backward**: `yes` when a\n"
    "backward rule emits its gradient ops, `not differentiable` when its outputs carry no gradient, `none`\n"
    "when a training graph that needs its gradient is refused. **deterministic**: `no` for random draws.\n"
    "**CPU** and **CUDA**: whether that backend implements it: a kernel in its table or, on CUDA, a generated\n"
    "elementwise kernel (every op whose fused expression memplan writes; float32, bf16 and f16 tensors, constant\n"
    "scalar parameters). A kernel may still refuse some dtypes, ranks or attributes; the executor checks a plan's\n"
    "every op before it runs. `memplan ops MODEL...` lists what a model's ops lack, checking each op that CUDA\n"
    "runs through generated kernels only against its tensors' dtypes. `memplan train` and `memplan run` on CUDA\n"
    "run an op no CUDA kernel takes (the CUDA column `no`, or a refused dtype or attribute) on the CPU kernels\n"
    "between the GPU's ops, copying its tensors down and up, and name each such op on stderr and in --json's\n"
    "`host_fallbacks` (docs/cuda.md, \"Host fallback\").\n"
    "\n"
    "Generated by `memplan ops --markdown`; do not edit: tests/python/test_ops_doc.py fails when this file\n"
    "is not current.\n"
    "\n";

int list_registry(const OpsArgs& a) {
  const auto facts = all_facts();
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& f : facts) {
      const auto& i = *f.info;
      out.push_back({{"op", i.type}, {"domain", domain_name(i.domain)}, {"kind", analysis::op_kind_name(i.kind)},
                     {"shape", shape_text(i)}, {"cost", i.flops != nullptr},
                     {"backward", analysis::grad_kind_name(i.grad_kind)}, {"deterministic", i.deterministic},
                     {"cpu", f.cpu}, {"cpu_dtypes", cpu_dtypes(i.id)},
                     {"cuda", f.cuda ? nlohmann::json(*f.cuda) : nlohmann::json(nullptr)},
                     {"summary", i.summary}});
    }
    std::cout << json_text(out, 2) << "\n";
    return 0;
  }
  Row header{"op", "domain", "kind", "shape", "cost", "backward", "deterministic", "CPU", "CUDA"};
  if (a.markdown) header.push_back("summary");
  std::vector<Row> rows;
  for (const auto& f : facts) {
    const auto& i = *f.info;
    Row r{std::string(i.type), domain_name(i.domain), analysis::op_kind_name(i.kind), shape_text(i),
          yes_no(i.flops != nullptr), backward_text(i.grad_kind), yes_no(i.deterministic), yes_no(f.cpu),
          cuda_text(f.cuda)};
    if (a.markdown) r.push_back(std::string(i.summary));
    rows.push_back(std::move(r));
  }
  if (a.markdown) std::cout << kMarkdownHeader;
  print_table(header, rows, a.markdown);
  if (!a.markdown) std::cout << facts.size() << " ops\n";
  return 0;
}

// One op type as a model uses it.
struct ModelOpType {
  std::string domain, type;
  std::size_t count = 0;
  std::vector<std::string> missing;  // empty for an op known and complete
  bool unknown = false;
};

struct ModelReport {
  std::string model;
  std::size_t ops = 0;
  std::vector<ModelOpType> types;  // unknown first, then lacking, each by domain and type
};

// Op types CUDA runs through generated kernels only, whose instance in `g` those kernels refuse (a dtype).
std::set<std::pair<std::string, std::string>> generated_refusals(const analysis::Graph& imported, const analysis::DimBindings& dims,
                                                                 const std::vector<OpFacts>& facts) {
  std::set<std::pair<std::string, std::string>> out;
  if (!kCudaBuilt) return out;
  // Dtypes of every tensor where shape inference gets through (dims bound or not needed); else the file's own.
  analysis::Graph g = imported;
  try {
    g = analysis::infer_shapes(imported, analysis::ShapeOptions{dims});
  } catch (const Error&) {
  }
  std::map<analysis::OpTypeId, const OpFacts*> by_id;
  for (const auto& f : facts) by_id[f.info->id] = &f;
  for (const auto& op : g.ops) {
    const OpInfo* info = analysis::op_registry().find(op);
    if (info && by_id.at(info->id)->cuda_generated_only && !runtime::generated_kernel_reason("cuda", g, op).empty())
      out.insert({domain_name(op.domain), op.type});
  }
  return out;
}

ModelReport report_model(const std::string& path, const analysis::DimBindings& dims, const std::vector<OpFacts>& facts) {
  // Op types need no shapes: the model is imported only, so unbound dims are no error here.
  const analysis::Graph g = analysis::import_model(path);
  warn_converted_opset(g, path);
  const auto refused = generated_refusals(g, dims, facts);
  std::map<std::pair<std::string, std::string>, std::size_t> counts;
  for (const auto& op : g.ops) ++counts[{domain_name(op.domain), op.type}];
  std::map<analysis::OpTypeId, const OpFacts*> by_id;
  for (const auto& f : facts) by_id[f.info->id] = &f;
  ModelReport r{path, g.ops.size(), {}};
  std::vector<ModelOpType> unknown, lacking;
  for (const auto& [key, n] : counts) {
    ModelOpType t{key.first, key.second, n, {}, false};
    const OpInfo* info = analysis::op_registry().find(key.first, key.second);
    if (!info) {
      t.unknown = true;
      unknown.push_back(std::move(t));
      continue;
    }
    t.missing = lacks(*by_id.at(info->id));
    if (refused.count(key)) t.missing.push_back("CUDA kernel");
    if (!t.missing.empty()) lacking.push_back(std::move(t));
  }
  r.types = std::move(unknown);
  r.types.insert(r.types.end(), lacking.begin(), lacking.end());
  return r;
}

int list_models(const OpsArgs& a) {
  const auto dims = parse_dims(a.dims);  // a bad --dim is still a usage error; dims help type the ops CUDA generates
  const auto facts = all_facts();
  std::vector<ModelReport> reports;
  for (const auto& m : a.models) reports.push_back(report_model(m, dims, facts));
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : reports) {
      nlohmann::json unknown = nlohmann::json::array(), lacking = nlohmann::json::array();
      for (const auto& t : r.types) {
        nlohmann::json j = {{"op", t.type}, {"domain", t.domain}, {"count", t.count}};
        if (t.unknown) {
          unknown.push_back(j);
        } else {
          j["missing"] = t.missing;
          lacking.push_back(j);
        }
      }
      out.push_back({{"model", r.model}, {"ops", r.ops}, {"unknown", unknown}, {"lacking", lacking},
                     {"cuda_built", kCudaBuilt}});
    }
    std::cout << json_text(out, 2) << "\n";
    return 0;
  }
  for (std::size_t k = 0; k < reports.size(); ++k) {
    const auto& r = reports[k];
    std::size_t unknown = 0;
    for (const auto& t : r.types) unknown += t.unknown;
    std::ostringstream head;
    head << analysis::terminal_safe(r.model) << ": " << r.ops << " ops; " << unknown << " op types unknown to memplan, "
         << r.types.size() - unknown << " lacking a shape rule, cost, backward or kernel"
         << (kCudaBuilt ? "" : " (CUDA: not built, not checked)");
    if (a.markdown) std::cout << (k ? "\n" : "") << "## " << head.str() << "\n\n";
    else std::cout << (k ? "\n" : "") << head.str() << "\n";
    if (r.types.empty()) continue;
    std::vector<Row> rows;
    for (const auto& t : r.types)
      rows.push_back({t.unknown ? "unknown" : "lacking", analysis::terminal_safe(t.type), analysis::terminal_safe(t.domain), std::to_string(t.count),
                      t.unknown ? "(unknown op)" : join(t.missing, ", ")});
    print_table({"status", "op", "domain", "count", "missing"}, rows, a.markdown, "  ");
  }
  return 0;
}

void add_ops(CLI::App& app, std::function<int()>& action) {
  auto args = std::make_shared<OpsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "ops", "the ops memplan knows (shape rule, cost, backward, CPU/CUDA kernel), or what MODELs' ops lack");
  cmd->add_option("MODEL", args->models, "models (ONNX or memplan JSON) whose ops to check; none: list every op");
  cmd->add_option("--dim", args->dims, "bind a symbolic dim, e.g. --dim batch=32 (op types need no shapes; dims help type the ops CUDA runs through generated kernels)");
  auto* json = cmd->add_flag("--json", args->json, "print JSON");
  cmd->add_flag("--markdown", args->markdown, "print a Markdown table (docs/ops.md is this output)")->excludes(json);
  cmd->callback([args, &action] {
    action = [args] { return args->models.empty() ? list_registry(*args) : list_models(*args); };
  });
}

[[maybe_unused]] const int registered = register_command(70, &add_ops);

}  // namespace
}  // namespace memplan::cli
