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

namespace {
// An .npy file with `header` (padded with spaces and '\n' to a multiple of 64, as NumPy does) and `data`.
std::string npy_with_header(std::string header, const std::string& data, int major = 1, char minor = 0) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + minor;
  for (std::size_t k = 0; k < (major == 1 ? 2u : 4u); ++k) out += static_cast<char>((header.size() >> (8 * k)) & 0xff);
  return out + header + data;
}
std::string error_message(const std::string& bytes) {
  try {
    parse_npy(bytes, "test.npy");
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}
const std::string kTwoFloats("\0\0\x80\x3f\0\0\0\x40", 8);  // 1.0f, 2.0f
}  // namespace

TEST_CASE("npy headers up to their size field's limit are read without recursion (40 KB and more)") {
  // std::regex overflowed the stack on headers of about 40 KB; the size field of version 1.0 allows 65535.
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const TensorData t = parse_npy(npy_with_header(dict + std::string(65000, ' '), kTwoFloats), "big");
  CHECK(t.dims == std::vector<std::int64_t>{2});
  CHECK(t.as_double() == std::vector<double>{1.0, 2.0});
  // Version 2.0 and 3.0: a 4-byte size; a header of 300 KB is still read.
  CHECK(parse_npy(npy_with_header(dict + std::string(300000, ' '), kTwoFloats, 2), "v2").dims == t.dims);
  CHECK(parse_npy(npy_with_header(dict, kTwoFloats, 3), "v3").dims == t.dims);
  // A 60 KB structured dtype (nested lists) is refused as unsupported, without recursion.
  std::string nested = "{'descr': " + std::string(30000, '[') + std::string(30000, ']') + ", 'fortran_order': False, 'shape': (2,)}";
  CHECK(parse_error(npy_with_header(nested, kTwoFloats)) == ErrorKind::unsupported);
  // Whitespace, double quotes and a missing trailing comma are Python literal syntax too.
  CHECK(parse_npy(npy_with_header("{ \"shape\" :( 2 , ),\n'fortran_order':False,'descr':\"<f4\"}", kTwoFloats), "ws").dims == t.dims);
  // Large-rank arrays are written as version 2.0 when the header outgrows 65535 bytes.
  const TensorData wide = TensorData::from_double(DType::f32, std::vector<std::int64_t>(40000, 1), {3.0});
  const std::string wide_bytes = format_npy(wide);
  CHECK(wide_bytes[6] == 2);
  CHECK(parse_npy(wide_bytes, "wide").dims == wide.dims);
}

TEST_CASE("npy headers follow NumPy's rules: each key once, nothing read from inside strings, a tuple shape") {
  // Each key exactly once, and no other key.
  CHECK(error_message(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (4,)}", kTwoFloats))
            .find("'shape' is given twice") != std::string::npos);
  CHECK(parse_error(npy_with_header("{'descr': '<f4', 'descr': '<i8', 'fortran_order': False, 'shape': (2,)}", kTwoFloats)) ==
        ErrorKind::malformed);
  CHECK(parse_error(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", kTwoFloats)) ==
        ErrorKind::malformed);
  // A key's text inside a string value is part of that string: here 'shape' is missing.
  CHECK(error_message(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'note': \"'shape': (2,)\"}", kTwoFloats))
            .find("unexpected key 'note'") != std::string::npos);
  CHECK(error_message(npy_with_header("{'descr': \"<f4', 'shape': (2,), '\", 'fortran_order': False}", kTwoFloats))
            .find("no 'shape' key") != std::string::npos);
  // "(2)" is an int, not a tuple; negative and huge dims; trailing text; unterminated strings.
  CHECK(parse_error(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", kTwoFloats)) == ErrorKind::malformed);
  CHECK(parse_error(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", kTwoFloats)) == ErrorKind::overflow);
  CHECK(parse_error(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", kTwoFloats)) ==
        ErrorKind::overflow);
  CHECK(parse_error(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", kTwoFloats)) == ErrorKind::malformed);
  CHECK(parse_error(npy_with_header("{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", kTwoFloats)) == ErrorKind::malformed);
  CHECK(parse_error(npy_with_header("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", kTwoFloats)) == ErrorKind::malformed);
  // Versions are 1.0, 2.0 and 3.0 exactly; a header length beyond the file is truncation.
  CHECK(parse_error(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", kTwoFloats, 1, 1)) ==
        ErrorKind::unsupported);
  std::string cut = npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", "");
  cut[8] = '\xff';
  cut[9] = '\xff';
  CHECK(error_message(cut).find("truncated npy header") != std::string::npos);
  // Dims whose byte count overflows are an overflow, not an allocation.
  CHECK(parse_error(npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4)}", "")) ==
        ErrorKind::overflow);
}
