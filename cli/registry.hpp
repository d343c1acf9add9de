// Subcommands register themselves here, so each lives in its own file (cli/cmd_*.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace memplan::cli {

// Adds a subcommand to `app`; when the user picks it, CLI11's callback stores the work in `action`.
using CommandAdder = void (*)(CLI::App& app, std::function<int()>& action);

struct RegisteredCommand {
  int order;
  CommandAdder add;
};

std::vector<RegisteredCommand>& command_registry();
inline int register_command(int order, CommandAdder add) {
  command_registry().push_back({order, add});
  return order;
}

}  // namespace memplan::cli
