// Visualisation library placeholder until the timeline lands.
namespace memplan::viz { int viz_version() { return 1; } }
