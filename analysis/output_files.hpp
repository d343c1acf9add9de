// Output files written all-or-nothing: each goes to a temporary file in its own folder, renamed over the
// target only once every output of a command has been written whole.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace memplan::analysis {

class OutputFiles {
 public:
  OutputFiles() = default;
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;
  // Removes every temporary file not committed: a command that fails leaves no partial outputs.
  ~OutputFiles();

  // Writes `bytes` to a temporary file beside `path` now. A target that exists and is no regular file (a
  // device such as /dev/stdout or /dev/full, a FIFO) cannot be replaced: it is written in place by commit().
  // ErrorKind::io when the file cannot be created or written (a missing folder, no permission, a full device).
  void add(const std::string& path, std::string_view bytes);
  // Writes the in-place targets, then renames every temporary file over its target. ErrorKind::io on failure;
  // a failure before the renames leaves every regular target as it was.
  void commit();

 private:
  struct Staged {
    std::string path;   // the target
    std::string temp;   // empty: written in place
    std::string bytes;  // kept for in-place targets only
  };
  std::vector<Staged> staged_;
};

// One file, all-or-nothing (OutputFiles with one entry).
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace memplan::analysis
