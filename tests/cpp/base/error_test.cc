#include "coremlrt/error.h"

#include <gtest/gtest.h>

#include <functional>
#include <new>
#include <stdexcept>
#include <string>

namespace coremlrt {
namespace {

ErrorKind kind_after_rethrow_as(ErrorKind kind, const std::function<void()>& raise) {
  try {
    try {
      raise();
    } catch (...) {
      rethrow_as(kind);
    }
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "nothing was thrown";
  return ErrorKind::Internal;
}

TEST(Error, KindNamesAreThoseOfThePythonClassesAndTheServer) {
  EXPECT_STREQ(error_kind_name(ErrorKind::BadModel), "bad_model");
  EXPECT_STREQ(error_kind_name(ErrorKind::Unsupported), "unsupported");
  EXPECT_STREQ(error_kind_name(ErrorKind::BadInput), "bad_input");
  EXPECT_STREQ(error_kind_name(ErrorKind::ResourceLimit), "resource_limit");
  EXPECT_STREQ(error_kind_name(ErrorKind::Internal), "internal");
}

TEST(Error, AnErrorRaisedWithoutAKindIsInternalUntilAnEntryPointGivesItOne) {
  const Error plain("no kind");
  EXPECT_FALSE(plain.has_kind());
  EXPECT_EQ(plain.kind(), ErrorKind::Internal);
  try {
    COREMLRT_CHECK_AS(ErrorKind::BadInput, 1 + 1 == 3, "input '", "x", "' is wrong");
    FAIL() << "the check passed";
  } catch (const Error& e) {
    EXPECT_TRUE(e.has_kind());
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_STREQ(e.what(), "input 'x' is wrong");
  }
  // An entry point's catch clause gives the kind of its work to an Error without one, keeps the
  // kind of one that has it, and makes a failed allocation a resource limit.
  EXPECT_EQ(kind_after_rethrow_as(ErrorKind::BadModel, [] { fail("field"); }), ErrorKind::BadModel);
  EXPECT_EQ(kind_after_rethrow_as(ErrorKind::BadModel, [] { fail_as(ErrorKind::Unsupported, "op"); }),
            ErrorKind::Unsupported);
  EXPECT_EQ(kind_after_rethrow_as(ErrorKind::BadModel, [] { throw std::bad_alloc(); }), ErrorKind::ResourceLimit);
  EXPECT_THROW(
      {
        try {
          throw std::out_of_range("other");
        } catch (...) {
          rethrow_as(ErrorKind::BadModel);
        }
      },
      std::out_of_range);  // anything else as it is
}

}  // namespace
}  // namespace coremlrt
