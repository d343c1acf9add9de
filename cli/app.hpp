// The whole command line as a function: parse, run the chosen command, map errors to exit codes.
#pragma once

#include <ostream>

namespace memplan::cli {

// Runs `argv` (argv[0] is the program's name). Help and version text go to `out`; errors go to `err` as
// "memplan: error (KIND): MESSAGE" with control characters escaped. Returns the exit code of
// docs/errors.md: 0, a memplan::ErrorKind's value, 2 for CLI11's parse errors, 70 for an internal error.
int run_command_line(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace memplan::cli
