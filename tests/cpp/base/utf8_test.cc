#include "coremlrt/utf8.h"

#include <gtest/gtest.h>

#include <string>

#include "coremlrt/error.h"

namespace coremlrt {
namespace {

TEST(Utf8, AcceptsTextOfEveryLength) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xC3\xA9"));          // é
  EXPECT_TRUE(is_valid_utf8("\xE2\x9C\x93"));      // ✓
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));  // U+1F600
}

TEST(Utf8, RefusesWhatPythonRefuses) {
  EXPECT_FALSE(is_valid_utf8("\x80"));              // a continuation byte alone
  EXPECT_FALSE(is_valid_utf8("\xC3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xE0\x80\xAF"));      // overlong 3-byte
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // a UTF-16 surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xFF"));
}

TEST(Utf8, EscapesOnlyTheBadBytes) {
  EXPECT_EQ(escape_invalid_utf8("a\xFF" "b\xC3\xA9"), "a\\xffb\xC3\xA9");
  EXPECT_EQ(escape_invalid_utf8("\xE2\x9C"), "\\xe2\\x9c");
}

TEST(Utf8, ErrorMessagesAreAlwaysText) {
  try {
    fail("name '", std::string("bad\xFE"), "' refused");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "name 'bad\\xfe' refused");
    EXPECT_TRUE(is_valid_utf8(e.what()));
  }
}

}  // namespace
}  // namespace coremlrt
