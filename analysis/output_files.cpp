// All-or-nothing output files: mkstemp in the target's folder, write(2) with every error checked, rename(2).
#include "analysis/output_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "analysis/error.hpp"

namespace memplan::analysis {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void write_failed(const std::string& path, int err) {
  fail(ErrorKind::io, "cannot write '" + path + "': " + std::strerror(err));
}

// Writes all of `bytes` to `fd` and closes it; the first error (ENOSPC included, which close may report) is
// returned as an errno value, 0 on success.
int write_all_and_close(int fd, std::string_view bytes) {
  int err = 0;
  for (std::size_t done = 0; done < bytes.size() && !err;) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      err = n < 0 ? errno : EIO;
    else
      done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && !err) err = errno;
  return err;
}

// The file a path stands for: a symbolic link is followed, so that the rename replaces its target.
std::string resolved(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(path, ec)) return path;
  const fs::path target = fs::canonical(path, ec);
  return ec ? path : target.string();
}

bool is_special(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
}

}  // namespace

OutputFiles::~OutputFiles() {
  for (const Staged& s : staged_)
    if (!s.temp.empty()) ::unlink(s.temp.c_str());
}

void OutputFiles::add(const std::string& path, std::string_view bytes) {
  if (path.empty()) fail(ErrorKind::io, "cannot write a file with an empty name");
  const std::string target = resolved(path);
  if (is_special(target)) {
    if (fs::is_directory(target)) fail(ErrorKind::io, "cannot write '" + path + "': it is a directory");
    staged_.push_back({target, {}, std::string(bytes)});
    return;
  }
  const fs::path p(target);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  std::string temp = dir + "/." + p.filename().string() + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) write_failed(path, errno);
  staged_.push_back({target, temp, {}});
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);  // mkstemp creates 0600; a new output gets what open(2) would give it
  if (const int err = write_all_and_close(fd, bytes)) write_failed(path, err);
}

void OutputFiles::commit() {
  for (Staged& s : staged_) {
    if (!s.temp.empty()) continue;
    const int fd = ::open(s.path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) write_failed(s.path, errno);
    if (const int err = write_all_and_close(fd, s.bytes)) write_failed(s.path, err);
  }
  for (Staged& s : staged_) {
    if (s.temp.empty()) continue;
    if (::rename(s.temp.c_str(), s.path.c_str()) != 0) write_failed(s.path, errno);
    s.temp.clear();
  }
  staged_.clear();
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  OutputFiles out;
  out.add(path, bytes);
  out.commit();
}

}  // namespace memplan::analysis
