// Dummy (seeded random bf16) weights in a model's real shapes, held in
// memory, for benchmarks of the CPU backend and the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "services/worker/model/checkpoint.h"

namespace floe {

struct DummyModel {
  ModelConfig config;
  ModelWeights weights;
  std::vector<std::unique_ptr<uint16_t[]>> buffers;

  TensorView Make(const std::string& name, std::vector<int64_t> shape, bool norm);
};

// A checkpoint_writer preset ("tiny", "llama-3.2-1b", "llama-3.2-1b-swiftkv",
// ...); nullptr (and a message on stderr) when unknown.
std::unique_ptr<DummyModel> BuildModel(const std::string& preset);
// Any Llama-shaped config.
std::unique_ptr<DummyModel> BuildModel(const ModelConfig& config);

}  // namespace floe
