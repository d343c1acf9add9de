// Plan <-> JSON, version 2 (version 1 read too): names for ops and tensors, per-tensor tables rebuilt from the buffers, fused groups checked.
#include "planner/plan_json.hpp"

#include <unordered_map>

#include "analysis/import.hpp"
#include "analysis/json_read.hpp"
#include "planner/fused_groups.hpp"

namespace memplan::planner {
namespace {

using nlohmann::json;

const json& field(const json& obj, const char* key, const char* where) {
  if (!obj.is_object() || !obj.contains(key)) fail(ErrorKind::malformed, std::string("plan: ") + where + " has no \"" + key + "\"");
  return obj.at(key);
}

template <typename T>
T get(const json& obj, const char* key, const char* where) {
  const json& v = field(obj, key, where);
  try {
    return v.get<T>();
  } catch (const json::exception&) {
    fail(ErrorKind::malformed, std::string("plan: ") + where + " field \"" + key + "\" has the wrong type: " + analysis::json_excerpt(v));
  }
}

// Offsets, sizes and steps: JSON integers in range, never truncated (1.5) nor wrapped (-1, 2^64).
std::uint64_t get_uint(const json& obj, const char* key, const char* where, std::uint64_t hi = UINT64_MAX) {
  return analysis::json_uint(field(obj, key, where), hi, std::string("plan: ") + where + " field \"" + key + "\"");
}

const json& array_field(const json& obj, const char* key, const char* where) {
  const json& v = field(obj, key, where);
  if (!v.is_array()) fail(ErrorKind::malformed, std::string("plan: ") + where + " field \"" + key + "\" is not an array");
  return v;
}

class Names {
 public:
  explicit Names(const Graph& g) : g_(g) {
    for (OpId i = 0; i < g.ops.size(); ++i)
      if (!ops_.emplace(g.ops[i].name, i).second)
        fail(ErrorKind::invalid_graph, "op name '" + g.ops[i].name + "' is not unique, and plans name ops by name");
  }
  OpId op(const std::string& name) const {
    auto it = ops_.find(name);
    if (it == ops_.end()) fail(ErrorKind::plan_mismatch, "the plan names op '" + name + "', which graph '" + g_.name + "' does not have");
    return it->second;
  }
  TensorId tensor(const std::string& name) const {
    const TensorId t = g_.find(name);
    if (t == analysis::kNoTensor)
      fail(ErrorKind::plan_mismatch, "the plan names tensor '" + name + "', which graph '" + g_.name + "' does not have");
    return t;
  }

 private:
  const Graph& g_;
  std::unordered_map<std::string, OpId> ops_;
};

Buffer read_buffer(const json& j, std::size_t index, const Names& names) {
  if (get_uint(j, "id", "a buffer") != index)
    fail(ErrorKind::malformed, "plan: buffer " + std::to_string(index) + " has id " + analysis::json_excerpt(j.at("id")));
  Buffer b;
  b.offset = get_uint(j, "offset", "a buffer");
  b.size = get_uint(j, "size", "a buffer");
  b.interval.first = static_cast<std::uint32_t>(get_uint(j, "first", "a buffer", UINT32_MAX));
  b.interval.last = static_cast<std::uint32_t>(get_uint(j, "last", "a buffer", UINT32_MAX));
  for (const auto& t : array_field(j, "tensors", "a buffer")) {
    if (!t.is_string()) fail(ErrorKind::malformed, "plan: buffer " + std::to_string(index) + " lists a tensor that is not a name");
    b.tensors.push_back(names.tensor(t.get<std::string>()));
  }
  return b;
}

Alias read_alias(const json& j, const Names& names) {
  Alias a;
  a.tensor = names.tensor(get<std::string>(j, "tensor", "an alias"));
  a.source = names.tensor(get<std::string>(j, "source", "an alias"));
  a.op = names.op(get<std::string>(j, "op", "an alias"));
  const auto kind = get<std::string>(j, "kind", "an alias");
  if (kind != "view" && kind != "inplace" && kind != "slice")
    fail(ErrorKind::malformed, "plan: alias kind '" + kind + "' is neither view, inplace nor slice");
  a.kind = kind == "view" ? AliasKind::view : kind == "inplace" ? AliasKind::inplace : AliasKind::slice;
  if (a.kind == AliasKind::slice) a.offset = get_uint(j, "offset", "a slice alias");
  return a;
}

json fused_groups_json(const Graph& g, const std::vector<FusedGroup>& groups) {
  json out = json::array();
  for (const auto& grp : groups) out.push_back({{"kind", grp.kind}, {"op", g.ops.at(grp.op).name}, {"members", grp.members}});
  return out;
}

// The plan's "fused_groups" must list exactly the fused ops of the graph it is read against, with the same
// kinds and members: a plan of a fused graph read against another fusion of the model is refused.
void check_fused_groups(const Graph& g, const json& listed, const Names& names) {
  if (!listed.is_array()) fail(ErrorKind::malformed, "plan: \"fused_groups\" is not an array");
  const std::vector<FusedGroup> have = fused_groups_of(g);
  std::size_t k = 0;
  for (const auto& e : listed) {
    const OpId op = names.op(get<std::string>(e, "op", "a fused group"));
    const auto kind = get<std::string>(e, "kind", "a fused group");
    const auto members = get<std::vector<std::string>>(e, "members", "a fused group");
    if (k >= have.size() || have[k].op != op)
      fail(ErrorKind::plan_mismatch, "the plan lists op '" + g.ops[op].name + "' as fused group " + std::to_string(k) + ", but graph '" +
                                         g.name + "' has " + (is_fused(g.ops[op]) ? "its fused ops in another order" : "it unfused"));
    if (have[k].kind != kind || have[k].members != members)
      fail(ErrorKind::plan_mismatch, "the plan's fused group '" + g.ops[op].name + "' (" + kind + ", " + std::to_string(members.size()) +
                                         " members) differs from the graph's (" + have[k].kind + ", " + std::to_string(have[k].members.size()) +
                                         " members)");
    ++k;
  }
  if (k != have.size())
    fail(ErrorKind::plan_mismatch, "graph '" + g.name + "' has " + std::to_string(have.size()) + " fused ops; the plan lists " + std::to_string(k) +
                                       " (first unlisted: '" + g.ops[have[k].op].name + "')");
}

// A buffer's offset is where its tensors start, but for slices (concat in place) and views of them: they lie at
// their source's offset plus the slice's. Resolved along alias chains, each tensor once.
void place_slices(Plan& p) {
  std::vector<const Alias*> inside(p.tensor_offset.size(), nullptr);
  for (const Alias& a : p.aliases)
    if (a.tensor < inside.size() && a.source < inside.size() && p.tensor_offset[a.tensor] != kNotInArena &&
        (a.kind == AliasKind::slice || (a.kind == AliasKind::view && p.tensor_buffer[a.tensor] == p.tensor_buffer[a.source])))
      inside[a.tensor] = &a;
  std::vector<bool> done(inside.size(), false);
  std::vector<TensorId> chain;
  for (TensorId t = 0; t < inside.size(); ++t) {
    for (TensorId u = t; inside[u] && !done[u] && chain.size() <= inside.size(); u = inside[u]->source) chain.push_back(u);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Alias& a = *inside[*it];
      if (p.tensor_offset[a.source] == kNotInArena) fail(ErrorKind::malformed, "plan: a slice or view alias of a tensor outside the arena");
      p.tensor_offset[*it] = p.tensor_offset[a.source] + (a.kind == AliasKind::slice ? a.offset : 0);
      done[*it] = true;
    }
    chain.clear();
  }
}

}  // namespace

json plan_to_json(const Graph& g, const Plan& p, bool embed_graph) {
  json j;
  j["schema"] = kPlanSchema;
  j["version"] = Plan::kSchemaVersion;
  j["model"] = p.model_name;
  j["fingerprint"] = p.model_fingerprint;
  j["alignment"] = p.alignment;
  j["arena_bytes"] = p.arena_bytes;
  j["aliased_lower_bound_bytes"] = p.aliased_lower_bound_bytes;
  j["packer"] = p.packer;
  j["arena_optimal"] = p.arena_optimal;
  j["arena_gap"] = p.arena_gap;
  json schedule = json::array();
  for (OpId op : p.schedule) schedule.push_back(g.ops.at(op).name);
  j["schedule"] = std::move(schedule);
  json buffers = json::array();
  for (std::size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    json names = json::array();
    for (TensorId t : b.tensors) names.push_back(g.tensors.at(t).name);
    buffers.push_back({{"id", i}, {"offset", b.offset}, {"size", b.size}, {"first", b.interval.first},
                       {"last", b.interval.last}, {"tensors", std::move(names)}});
  }
  j["buffers"] = std::move(buffers);
  json aliases = json::array();
  for (const Alias& a : p.aliases) {
    aliases.push_back({{"tensor", g.tensors.at(a.tensor).name}, {"source", g.tensors.at(a.source).name},
                       {"kind", alias_kind_name(a.kind)}, {"op", g.ops.at(a.op).name}});
    if (a.kind == AliasKind::slice) aliases.back()["offset"] = a.offset;
  }
  j["aliases"] = std::move(aliases);
  json scratch = json::array();
  for (const Scratch& sc : p.scratch) scratch.push_back({{"op", g.ops.at(sc.op).name}, {"offset", sc.offset}, {"bytes", sc.bytes}});
  j["scratch"] = std::move(scratch);
  // Only a graph with fused ops gets the section: plans of unfused graphs stay as they were, and readers
  // that predate it skip an unknown key (the embedded graph carries the same facts in its op attributes).
  if (auto groups = fused_groups_of(g); !groups.empty()) j["fused_groups"] = fused_groups_json(g, groups);
  if (embed_graph) j["graph"] = analysis::export_json(g);
  return j;
}

Plan plan_from_json(const Graph& g, const json& doc) {
  if (!doc.is_object()) fail(ErrorKind::malformed, "plan: the document is not a JSON object");
  const auto schema = get<std::string>(doc, "schema", "the plan");
  if (schema != kPlanSchema) fail(ErrorKind::plan_mismatch, "not a memplan plan: schema is '" + schema + "', expected '" + kPlanSchema + "'");
  // Any other version, also 2.0 or "2", is one this build does not read.
  const json& jv = field(doc, "version", "the plan");
  const bool known = jv.is_number_integer() && !(jv.is_number_unsigned() && jv.get<std::uint64_t>() > 1000) &&
                     (jv.get<std::int64_t>() == 1 || jv.get<std::int64_t>() == Plan::kSchemaVersion);
  if (!known)
    fail(ErrorKind::plan_mismatch, "plan schema version " + analysis::json_excerpt(jv) + " is not supported (this build reads versions 1 to " +
                                       std::to_string(Plan::kSchemaVersion) + ")");
  const int version = static_cast<int>(jv.get<std::int64_t>());
  Plan p;
  p.model_name = get<std::string>(doc, "model", "the plan");
  p.model_fingerprint = get<std::string>(doc, "fingerprint", "the plan");
  if (p.model_fingerprint != g.fingerprint())
    fail(ErrorKind::plan_mismatch, "the plan was made for model '" + p.model_name + "' (fingerprint " + p.model_fingerprint +
                                       "), not for '" + g.name + "' (fingerprint " + g.fingerprint() + ")");
  p.alignment = get_uint(doc, "alignment", "the plan");
  p.arena_bytes = get_uint(doc, "arena_bytes", "the plan");
  p.aliased_lower_bound_bytes = get_uint(doc, "aliased_lower_bound_bytes", "the plan");
  p.packer = get<std::string>(doc, "packer", "the plan");
  if (doc.contains("arena_optimal") && doc["arena_optimal"].is_boolean()) p.arena_optimal = doc["arena_optimal"].get<bool>();
  if (doc.contains("arena_gap") && doc["arena_gap"].is_number()) p.arena_gap = doc["arena_gap"].get<double>();
  const Names names(g);
  for (const auto& op : array_field(doc, "schedule", "the plan")) {
    if (!op.is_string()) fail(ErrorKind::malformed, "plan: a schedule entry is not an op name");
    p.schedule.push_back(names.op(op.get<std::string>()));
  }
  p.tensor_offset.assign(g.tensors.size(), kNotInArena);
  p.tensor_buffer.assign(g.tensors.size(), UINT32_MAX);
  for (const auto& b : array_field(doc, "buffers", "the plan")) {
    p.buffers.push_back(read_buffer(b, p.buffers.size(), names));
    for (TensorId t : p.buffers.back().tensors) {
      if (p.tensor_buffer[t] != UINT32_MAX) fail(ErrorKind::malformed, "plan: tensor '" + g.tensors[t].name + "' is in two buffers");
      p.tensor_offset[t] = p.buffers.back().offset;
      p.tensor_buffer[t] = static_cast<std::uint32_t>(p.buffers.size() - 1);
    }
  }
  for (const auto& a : array_field(doc, "aliases", "the plan")) p.aliases.push_back(read_alias(a, names));
  place_slices(p);
  if (version >= 2)
    for (const auto& sc : array_field(doc, "scratch", "the plan"))
      p.scratch.push_back(Scratch{names.op(get<std::string>(sc, "op", "a scratch region")), get_uint(sc, "offset", "a scratch region"),
                                  get_uint(sc, "bytes", "a scratch region")});
  if (doc.contains("fused_groups")) check_fused_groups(g, doc["fused_groups"], names);
  return p;
}

}  // namespace memplan::planner
