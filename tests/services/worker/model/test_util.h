// Helpers for the worker_model tests: a fresh temporary folder per test,
// and reading one element of a view as float.
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "common/tensor/tensor_view.h"
#include "gtest/gtest.h"

namespace floe {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("floe_") + info->test_suite_name() + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string dir() const { return dir_.string(); }

  std::filesystem::path dir_;
};

inline float ValueAt(const TensorView& view, int64_t i) {
  switch (view.dtype) {
    case DType::kF32: return static_cast<const float*>(view.data)[i];
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(view.data)[i]);
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(view.data)[i]);
    case DType::kI8:
      return static_cast<int8_t>(static_cast<const uint8_t*>(view.data)[i] ^ view.byte_xor) *
             view.row_scale[i / view.cols()];
    case DType::kF8E4M3:
      return F8E4M3ToF32(static_cast<const uint8_t*>(view.data)[i]) * view.row_scale[i / view.cols()];
  }
  return NAN;
}

}  // namespace floe
