// Old flag names kept for users' scripts: hidden from --help, one warning on stderr, the new flag's value set.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>

namespace memplan::cli {

// What an alias's value is read as: the target's type, or T for a std::optional<T> (a flag whose absence means "not given").
template <class Target>
struct AliasValue {
  using type = Target;
};
template <class T>
struct AliasValue<std::optional<T>> {
  using type = T;
};

// `old_name` on `commands` (as the warning names them, e.g. "analyze/plan") is now `new_name`, which stores into
// `target`. The alias sits in CLI11's group "", which --help leaves out, so each name has one meaning in the help
// (docs/commands.md, "Flags shared by several commands"); it still works, and says what to write instead.
template <class Target>
CLI::Option* add_deprecated_alias(CLI::App* cmd, const std::string& old_name, const std::string& new_name,
                                  const std::string& commands, Target& target) {
  using T = typename AliasValue<Target>::type;
  const std::string warning = "memplan: warning: " + old_name + " on " + commands + " is now " + new_name + "\n";
  CLI::Option* opt = cmd->add_option_function<T>(
      old_name,
      [warning, &target](const T& value) {
        std::fputs(warning.c_str(), stderr);
        target = value;
      },
      "deprecated: " + new_name);
  return opt->group("");
}

}  // namespace memplan::cli
