// memplan command line: a thin face over the libraries (parse, call, print); errors map to exit codes.
#include <algorithm>
#include <exception>
#include <iostream>

#include "analysis/error.hpp"
#include "cli/registry.hpp"

namespace memplan::cli {
std::vector<RegisteredCommand>& command_registry() {
  static std::vector<RegisteredCommand> commands;
  return commands;
}
}  // namespace memplan::cli

int main(int argc, char** argv) {
  CLI::App app{"memplan: memory planner and rematerialization tool for deep-learning graphs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "memplan 0.1.0");
  std::function<int()> action;
  auto commands = memplan::cli::command_registry();
  std::stable_sort(commands.begin(), commands.end(), [](auto& a, auto& b) { return a.order < b.order; });
  for (const auto& c : commands) c.add(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : static_cast<int>(memplan::ErrorKind::usage);
  }
  try {
    return action ? action() : 0;
  } catch (const memplan::Error& e) {
    std::cerr << "memplan: error (" << memplan::error_kind_name(e.kind()) << "): " << e.what() << "\n";
    return static_cast<int>(e.kind());
  } catch (const std::bad_alloc&) {
    std::cerr << "memplan: error (runtime): out of memory\n";
    return static_cast<int>(memplan::ErrorKind::runtime);
  } catch (const std::exception& e) {
    std::cerr << "memplan: error (internal): " << e.what() << "\n";
    return 70;
  }
}
