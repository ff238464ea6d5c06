// Finding the translation of a Core AI model (format/coreai_asset.h): by the SHA-256 of its
// main.mlirb, the highest translator version present; a damaged main.hash and a model never
// translated are refused with the reason.
#include "format/coreai_asset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/sha256.h"
#include "coremlrt/error.h"

namespace coremlrt::format {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

class CoreAiAssetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("coremlrt-coreai-asset-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    model_ = root_ / "m.aimodel";
    fs::create_directories(model_);
    const std::string program = "ML\xef" "R a program";
    write(model_ / "main.mlirb", program);
    Sha256 sha;
    sha.update(program.data(), program.size());
    const std::array<uint8_t, 32> digest = sha.finish();
    write(model_ / "main.hash", std::string(digest.begin(), digest.end()));
    write(model_ / "metadata.json", "{}");
    hex_ = to_hex(digest.data(), digest.size());
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_, model_;
  std::string hex_;
};

TEST_F(CoreAiAssetTest, TheHighestTranslatorVersionIsRead) {
  EXPECT_TRUE(is_coreai_asset(model_.string()));
  EXPECT_FALSE(is_coreai_asset((root_ / "nothing").string()));
  const fs::path cache = root_ / "cache";
  for (const char* name : {"-t2.mlmodelc", "-t10.mlmodelc", "-t3.mlmodelc"}) fs::create_directories(cache / "coreai" / (hex_ + name));
  fs::create_directories(cache / "coreai" / ("0" + hex_.substr(1) + "-t99.mlmodelc"));  // another model's
  fs::create_directories(cache / "coreai" / (hex_ + "-tx.mlmodelc"));
  EXPECT_EQ(translated_coreai_model(model_.string(), cache.string()), (cache / "coreai" / (hex_ + "-t10.mlmodelc")).string());
}

TEST_F(CoreAiAssetTest, AModelNeverTranslatedIsRefusedSayingHowToTranslateIt) {
  try {
    translated_coreai_model(model_.string(), (root_ / "empty").string());
    FAIL() << "no translation, yet a folder was returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has not been translated yet"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pip install coremlrt[coreai]"), std::string::npos) << e.what();
  }
}

TEST_F(CoreAiAssetTest, AHashThatDoesNotMatchIsRefused) {
  write(model_ / "main.mlirb", "ML\xef" "R another program");
  try {
    translated_coreai_model(model_.string(), (root_ / "cache").string());
    FAIL() << "an edited program was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("main.hash does not match"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace coremlrt::format
