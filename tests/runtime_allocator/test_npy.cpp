// Tests of .npy reading and writing: round trips per dtype, NumPy-written files, and bad headers.
#include <doctest/doctest.h>

#include <filesystem>

#include "runtime_allocator/npy.hpp"

using namespace memplan;
using namespace memplan::runtime;
using analysis::DType;
using analysis::TensorData;

namespace {
ErrorKind parse_error(const std::string& bytes) {
  try {
    parse_npy(bytes, "test.npy");
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::usage;
}
}  // namespace

TEST_CASE("npy round trip keeps dtype, shape and bytes for every supported dtype") {
  for (DType d : {DType::f32, DType::f64, DType::i64, DType::i32, DType::boolean}) {
    const TensorData t = TensorData::from_double(d, {2, 3}, {0, 1, 0, 1, 1, 0});
    const std::string bytes = format_npy(t);
    CHECK((10 + static_cast<unsigned char>(bytes[8])) % 64 == 0);  // header padded as NumPy does
    const TensorData back = parse_npy(bytes, "rt");
    CHECK(back.dtype == d);
    CHECK(back.dims == t.dims);
    CHECK(back.bytes == t.bytes);
  }
  const TensorData scalar = TensorData::from_double(DType::f32, {}, {2.5});
  CHECK(parse_npy(format_npy(scalar), "s").dims.empty());
  const TensorData vec = TensorData::from_double(DType::f32, {3}, {1, 2, 3});
  CHECK(format_npy(vec).find("(3,)") != std::string::npos);
}

TEST_CASE("npy files written by NumPy are read") {
  const std::string dir = std::string(MEMPLAN_SOURCE_DIR) + "/samples/models/";
  const TensorData in = read_npy(dir + "tiny_mlp.input.npy");
  CHECK(in.dtype == DType::f32);
  CHECK(in.dims == std::vector<std::int64_t>{8, 64});
  CHECK(in.bytes.size() == 8 * 64 * 4);
  const std::string tmp = (std::filesystem::temp_directory_path() / "memplan_npy_test.npy").string();
  write_npy(tmp, in);
  CHECK(read_npy(tmp).bytes == in.bytes);
  std::filesystem::remove(tmp);
}

TEST_CASE("bad npy files give clear errors") {
  const std::string good = format_npy(TensorData::from_double(DType::f32, {2}, {1, 2}));
  CHECK(parse_error("not an npy file") == ErrorKind::malformed);
  CHECK(parse_error(good.substr(0, good.size() - 1)) == ErrorKind::malformed);  // truncated data
  CHECK(parse_error(good.substr(0, 20)) == ErrorKind::malformed);               // truncated header
  std::string big_endian = good;
  big_endian.replace(big_endian.find("<f4"), 3, ">f4");
  CHECK(parse_error(big_endian) == ErrorKind::unsupported);
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  CHECK(parse_error(fortran) == ErrorKind::unsupported);
  std::string no_shape = good;
  no_shape.replace(no_shape.find("'shape'"), 7, "'shope'");
  CHECK(parse_error(no_shape) == ErrorKind::malformed);
  std::string version = good;
  version[6] = 9;
  CHECK(parse_error(version) == ErrorKind::unsupported);
  try {
    read_npy("/nonexistent/x.npy");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::io);
  }
}
