// Runtime library placeholder until the arena lands.
namespace memplan::runtime { int runtime_version() { return 1; } }
