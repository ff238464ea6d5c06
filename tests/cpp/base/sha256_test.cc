// SHA-256 against FIPS 180-4's example digests, and fed in pieces of every size.
#include "base/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace coremlrt {
namespace {

std::string digest_of(const std::string& text) {
  Sha256 sha;
  sha.update(text.data(), text.size());
  const std::array<uint8_t, 32> d = sha.finish();
  return to_hex(d.data(), d.size());
}

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(digest_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(digest_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(digest_of(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecesGiveTheWholeDigest) {
  std::string text;
  for (int i = 0; i < 300; ++i) text.push_back(static_cast<char>(i * 37 + 11));
  const std::string whole = digest_of(text);
  for (size_t piece : {1, 3, 55, 56, 63, 64, 65, 127}) {
    Sha256 sha;
    for (size_t at = 0; at < text.size(); at += piece) sha.update(text.data() + at, std::min(piece, text.size() - at));
    const std::array<uint8_t, 32> d = sha.finish();
    EXPECT_EQ(to_hex(d.data(), d.size()), whole) << "pieces of " << piece;
  }
}

}  // namespace
}  // namespace coremlrt
