// UTF-8 validation of imported names and their terminal-safe form.
#include <doctest/doctest.h>

#include <string>

#include "analysis/names.hpp"

using namespace memplan;
using namespace memplan::analysis;

TEST_CASE("is_valid_utf8 accepts well-formed UTF-8 and refuses overlong forms, surrogates and stray bytes") {
  CHECK(is_valid_utf8(""));
  CHECK(is_valid_utf8("layer.0/attn"));
  CHECK(is_valid_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));  // é € 😀
  for (const char* bad : {"\xff", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ab\xc3", "\x80x"}) {
    CAPTURE(std::string(bad).size());
    CHECK_FALSE(is_valid_utf8(bad));
  }
}

TEST_CASE("terminal_safe escapes control characters and invalid bytes, and keeps printable UTF-8") {
  CHECK(terminal_safe("fc1.weight") == "fc1.weight");
  CHECK(terminal_safe("caf\xc3\xa9") == "caf\xc3\xa9");
  CHECK(terminal_safe("\x1b[2Jx") == "\\x1b[2Jx");  // clear screen
  CHECK(terminal_safe("a\nmemplan: error") == "a\\nmemplan: error");  // a forged line
  CHECK(terminal_safe("a\rb\tc\x7f") == "a\\rb\\tc\\x7f");
  CHECK(terminal_safe("\xc2\x9b" "31m") == "\\u009b31m");  // C1 CSI
  CHECK(terminal_safe("\xff\xfe") == "\\xff\\xfe");
  for (char c = 0; c < 0x20; ++c) CHECK(terminal_safe(std::string(1, c)).find(c) == std::string::npos);
}

TEST_CASE("require_utf8_names names the tensor or op by index when a name is not UTF-8") {
  Graph g;
  g.name = "m";
  Tensor x;
  x.name = "x";
  x.role = TensorRole::input;
  g.inputs.push_back(g.add_tensor(x));
  Tensor y;
  y.name = "y\xff";
  g.add_tensor(y);
  try {
    require_utf8_names(g, "m.onnx");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::malformed);
    CHECK(std::string(e.what()) == "m.onnx: the name of tensor 1 is not valid UTF-8");
  }
  g.tensors[1].name = "y";
  Op op;
  op.name = "relu";
  op.type = "Relu";
  op.inputs = {0};
  op.outputs = {1};
  Attribute a;
  a.kind = Attribute::Kind::s;
  a.s = "\xc0\x80";
  op.attrs["mode"] = a;
  g.add_op(op);
  try {
    require_utf8_names(g, "m.onnx");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("op 0") != std::string::npos);
  }
}
