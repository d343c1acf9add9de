// All-or-nothing output files: temporary files renamed over their targets, nothing left on failure.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "analysis/error.hpp"
#include "analysis/output_files.hpp"

using namespace memplan;
using namespace memplan::analysis;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/memplan-output-files-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::size_t entries() const { return static_cast<std::size_t>(std::distance(fs::directory_iterator(path), fs::directory_iterator())); }
};
std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return static_cast<ErrorKind>(0);
}
}  // namespace

TEST_CASE("write_file_atomically replaces the target whole and leaves no temporary file") {
  TempDir d;
  const fs::path out = d.path / "plan.json";
  write_file_atomically(out.string(), "first");
  write_file_atomically(out.string(), "second, longer");
  CHECK(read(out) == "second, longer");
  CHECK(d.entries() == 1);
}

TEST_CASE("a failure on any output leaves every target as it was and no temporary files") {
  TempDir d;
  const fs::path a = d.path / "a.npy", b = d.path / "b.npy";
  write_file_atomically(b.string(), "old b");
  CHECK(kind_of([&] {
          OutputFiles files;
          files.add(a.string(), "new a");
          files.add(b.string(), "new b");
          files.add((d.path / "missing" / "c.npy").string(), "c");
          files.commit();
        }) == ErrorKind::io);
  CHECK_FALSE(fs::exists(a));
  CHECK(read(b) == "old b");
  CHECK(d.entries() == 1);
  // A full device fails at commit, before any rename.
  if (fs::exists("/dev/full")) {
    CHECK(kind_of([&] {
            OutputFiles files;
            files.add(a.string(), "new a");
            files.add("/dev/full", "anything");
            files.commit();
          }) == ErrorKind::io);
    CHECK_FALSE(fs::exists(a));
    CHECK(d.entries() == 1);
    CHECK(kind_of([] { write_file_atomically("/dev/full", "x"); }) == ErrorKind::io);
  }
  CHECK(kind_of([&] { write_file_atomically(d.path.string(), "x"); }) == ErrorKind::io);  // a directory
  CHECK(kind_of([] { write_file_atomically("", "x"); }) == ErrorKind::io);
}

TEST_CASE("devices are written in place, never replaced by a rename") {
  write_file_atomically("/dev/null", "discarded");
  CHECK(fs::is_character_file("/dev/null"));
}
