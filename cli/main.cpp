// memplan command line: a thin face over the libraries (parse, call, print); errors map to exit codes.
#include <iostream>

#include "cli/app.hpp"

int main(int argc, char** argv) { return memplan::cli::run_command_line(argc, argv, std::cout, std::cerr); }
