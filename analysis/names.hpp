// Names read from files: UTF-8 validation at import, and a form safe to print on a terminal.
#pragma once

#include <string>
#include <string_view>

#include "analysis/graph.hpp"

namespace memplan::analysis {

// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s) noexcept;

// Every string an importer keeps and a writer prints (graph, tensor, op and attribute names, op types and
// domains, string attributes, external-data locations) must be UTF-8: ErrorKind::malformed otherwise,
// naming the tensor or op by index (the name itself cannot be shown), prefixed with `origin`.
void require_utf8_names(const Graph& g, const std::string& origin);

// `s` with C0/C1 control characters and DEL as visible escapes (\n, \t, \x1b, \u009b), and bytes that are
// not UTF-8 as \xNN: what a text output shows of a name, so that no name moves the cursor, clears the
// screen or starts a line of its own.
std::string terminal_safe(std::string_view s);

}  // namespace memplan::analysis
