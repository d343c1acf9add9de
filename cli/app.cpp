// The command line: every registered subcommand on one CLI11 app, errors mapped to documented exit codes.
#include "cli/app.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>

#include "analysis/error.hpp"
#include "analysis/names.hpp"
#include "cli/registry.hpp"

namespace memplan::cli {

std::vector<RegisteredCommand>& command_registry() {
  static std::vector<RegisteredCommand> commands;
  return commands;
}

int run_command_line(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"memplan: memory planner and rematerialization tool for deep-learning graphs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "memplan 0.1.0");
  // CLI11's messages quote the arguments: their control characters are shown, never obeyed.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "memplan: error (usage): " + analysis::terminal_safe(e.what()) + "\nRun with --help for more information.\n";
  });
  std::function<int()> action;
  auto commands = command_registry();
  std::stable_sort(commands.begin(), commands.end(), [](auto& a, auto& b) { return a.order < b.order; });
  for (const auto& c : commands) c.add(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e, out, err);
    return rc == 0 ? 0 : static_cast<int>(ErrorKind::usage);
  }
  // Messages name tensors and files from the input: their control characters are shown, never obeyed.
  auto report = [&err](const char* kind, const std::string& what) {
    err << "memplan: error (" << kind << "): " << analysis::terminal_safe(what) << "\n";
  };
  try {
    const int rc = action ? action() : 0;
    // What was printed must have reached stdout: a full device or a closed pipe is a write error (exit 3).
    errno = 0;
    std::cout.flush();
    if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout) {
      report("io", std::string("cannot write standard output: ") + (errno ? std::strerror(errno) : "write error"));
      return static_cast<int>(ErrorKind::io);
    }
    return rc;
  } catch (const Error& e) {
    report(error_kind_name(e.kind()), e.what());
    return static_cast<int>(e.kind());
  } catch (const std::bad_alloc&) {
    report("runtime", "out of memory");
    return static_cast<int>(ErrorKind::runtime);
  } catch (const std::exception& e) {
    report("internal", e.what());
    return 70;
  }
}

}  // namespace memplan::cli
