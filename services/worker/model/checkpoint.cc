#include "services/worker/model/checkpoint.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/safetensors/sharded_safetensors.h"
#include "common/status/status_macros.h"
#include "services/worker/model/weight_fill.h"
#include "services/worker/model/weight_layout.h"

namespace floe {
namespace {

// 64-byte aligned so SIMD kernels may use aligned loads on owned weights too;
// large buffers are 2 MiB aligned and asked for huge pages, which makes first
// touch of a 2.4 GB dummy model several times cheaper.
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<void, AlignedFree>;

AlignedBuffer Allocate(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  size_t alignment = bytes >= 4 * kHugePage ? kHugePage : 64;
  size_t rounded = std::max<size_t>(alignment, (bytes + alignment - 1) / alignment * alignment);
  void* data = std::aligned_alloc(alignment, rounded);
  if (data == nullptr) throw std::bad_alloc();
  if (alignment == kHugePage) ::madvise(data, rounded, MADV_HUGEPAGE);  // a hint only
  return AlignedBuffer(data);
}

// Owns what the views point into: the mmapped files and the buffers of
// widened (f16) or generated (dummy) weights.
class OwningCheckpoint : public Checkpoint {
 public:
  absl::Status LoadSafetensors(const std::string& dir);
  void LoadDummy(const LoadOptions& options);
  void set_config(ModelConfig config) {
    config_ = std::move(config);
    weights_.layers.assign(config_.num_layers, LayerWeights());
  }
  void set_fingerprint(std::string fingerprint) { fingerprint_ = std::move(fingerprint); }
  void ReleasePages() const override {
    if (!files_) return;
    for (size_t i = 0; i < files_->num_files(); ++i) files_->file(i).ReleasePages();
  }

 private:
  void* Own(size_t bytes) {
    buffers_.push_back(Allocate(bytes));
    return buffers_.back().get();
  }
  absl::Status CheckNoExtraLayers() const;

  std::optional<ShardedSafetensors> files_;
  std::vector<AlignedBuffer> buffers_;
};

}  // namespace

absl::StatusOr<std::vector<float>> ReadRowScales(const TensorView& scale, const std::string& name, int64_t rows,
                                                  bool per_channel) {
  const int64_t n = scale.numel();
  const bool shape_ok = per_channel ? (n == rows && (scale.shape == std::vector<int64_t>{rows, 1} ||
                                                     scale.shape == std::vector<int64_t>{rows}))
                                    : n == 1 && scale.shape.size() <= 1;
  if (!shape_ok) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape ", ShapeToString(scale.shape),
                                                   ", expected ", per_channel ? absl::StrCat("[", rows, ", 1]") : "[1]",
                                                   " for strategy ", per_channel ? "channel" : "tensor"));
  }
  if (IsQuantized(scale.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is ", DTypeName(scale.dtype),
                                                   "; scales must be f32, bf16 or f16"));
  }
  std::vector<float> out(rows);
  WidenToF32(scale.dtype, scale.data, 0, n, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = per_channel ? r : 0;
    const float v = out[i];
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, "[", i, "] is ", v,
                                                     "; scales must be finite and not negative"));
    }
    out[r] = v;
  }
  return out;
}

namespace {

// compressed-tensors' pack-quantized int8 (vLLM's W8A16 layout):
// <module>.weight_packed, I32 [rows, cols / 4] whose little-endian bytes are
// q + 128 in order, and <module>.weight_shape, [rows, cols]. A view of the
// packed bytes as they are: the offset is undone as the matrix is packed
// (TensorView::byte_xor), so nothing is copied here.
absl::StatusOr<TensorView> PackedInt8View(const ShardedSafetensors& files, const std::string& module,
                                          const std::vector<int64_t>& shape) {
  const std::string packed_name = module + ".weight_packed", shape_name = module + ".weight_shape";
  const int64_t rows = shape[0], cols = shape[1];
  if (!files.Contains(packed_name)) {
    return absl::NotFoundError(absl::StrCat("missing tensor ", packed_name, " in ", files.source()));
  }
  if (cols % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", packed_name, ": ", cols,
                                                   " columns do not fill int32 words of four 8-bit weights"));
  }
  FLOE_ASSIGN_OR_RETURN(SafetensorsFile::Raw packed, files.GetRaw(packed_name));
  const std::vector<int64_t> packed_shape = {rows, cols / 4};
  if (packed.entry->dtype_name != "I32" || packed.entry->shape != packed_shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", packed_name, " is ", packed.entry->dtype_name, " ",
                                                   ShapeToString(packed.entry->shape), ", expected I32 ",
                                                   ShapeToString(packed_shape), " (", files.source(), ")"));
  }
  if (files.Contains(shape_name)) {  // what the packing was of: must be this Linear's shape
    FLOE_ASSIGN_OR_RETURN(SafetensorsFile::Raw stored, files.GetRaw(shape_name));
    const std::string& dtype = stored.entry->dtype_name;
    std::vector<int64_t> values(2);
    if (dtype == "I64" && stored.bytes() == 16) {
      std::memcpy(values.data(), stored.data, 16);
    } else if (dtype == "I32" && stored.bytes() == 8) {
      int32_t narrow[2];
      std::memcpy(narrow, stored.data, 8);
      values = {narrow[0], narrow[1]};
    }
    if (values != shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", shape_name, " (", dtype, " ",
                                                     ShapeToString(stored.entry->shape), ") must hold ",
                                                     ShapeToString(shape), " as two I64 or I32 values"));
    }
  }
  TensorView view;
  view.dtype = DType::kI8;
  view.shape = shape;
  view.data = packed.data;
  view.byte_xor = 0x80;
  return view;
}

absl::Status OwningCheckpoint::LoadSafetensors(const std::string& dir) {
  FLOE_ASSIGN_OR_RETURN(files_, ShardedSafetensors::OpenDirectory(dir));
  FLOE_RETURN_IF_ERROR(CheckNoExtraLayers());
  const std::string& source = files_->source();
  const WeightQuantization& quantization = config_.quantization;
  const DType quantized_dtype = quantization.is_float ? DType::kF8E4M3 : DType::kI8;
  std::string first_matrix;
  DType matrix_dtype = DType::kF32;
  bool any_quantized = false;
  for (const WeightSpec& spec : ExpectedWeights(config_)) {
    const std::string module = QuantizedLinear(quantization, spec);
    TensorView view;
    if (!module.empty() && quantization.packed()) {
      FLOE_ASSIGN_OR_RETURN(view, PackedInt8View(*files_, module, spec.shape));
    } else {
      if (!files_->Contains(spec.name)) {
        return absl::NotFoundError(absl::StrCat("missing tensor ", spec.name, " in ", source));
      }
      FLOE_ASSIGN_OR_RETURN(view, files_->Get(spec.name));
    }
    if (view.shape != spec.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", spec.name, " has shape ", ShapeToString(view.shape),
                       ", expected ", ShapeToString(spec.shape), " from config.json (", source, ")"));
    }
    if (!module.empty()) {
      if (view.dtype != quantized_dtype) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", spec.name, " is ", DTypeName(view.dtype),
                                                       " but quantization_config says ", DTypeName(quantized_dtype),
                                                       " (", source, ")"));
      }
      const std::string scale_name = module + ".weight_scale";
      if (!files_->Contains(scale_name)) {
        return absl::NotFoundError(absl::StrCat("missing tensor ", scale_name, " in ", source));
      }
      FLOE_ASSIGN_OR_RETURN(TensorView scale, files_->Get(scale_name));
      FLOE_ASSIGN_OR_RETURN(std::vector<float> scales,
                            ReadRowScales(scale, scale_name, view.rows(), quantization.per_channel));
      float* owned = static_cast<float*>(Own(scales.size() * sizeof(float)));
      std::copy(scales.begin(), scales.end(), owned);
      view.row_scale = owned;
      any_quantized = true;
    } else if (IsQuantized(view.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", spec.name, " is ", DTypeName(view.dtype),
                                                     " but quantization_config does not quantize it (", source, ")"));
    } else if (spec.kind == WeightKind::kMatrix) {
      if (first_matrix.empty()) {
        first_matrix = spec.name;
        matrix_dtype = view.dtype;
      } else if (view.dtype != matrix_dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mixed matrix dtypes: tensor ", spec.name, " is ", DTypeName(view.dtype), " but ",
            first_matrix, " is ", DTypeName(matrix_dtype), " (", source, ")"));
      }
    }
    if (view.dtype == DType::kF16) {
      // Kernels handle bf16 and f32 only; f16 is exact in f32.
      float* widened = static_cast<float*>(Own(view.numel() * sizeof(float)));
      WidenF16ToF32(static_cast<const uint16_t*>(view.data), widened, view.numel());
      view.dtype = DType::kF32;
      view.data = widened;
    }
    WeightSlot(weights_, spec) = std::move(view);
  }
  if (config_.tie_word_embeddings) weights_.lm_head = weights_.embed_tokens;
  weight_dtype_ = any_quantized ? quantized_dtype : weights_.embed_tokens.dtype;
  if (quantization.kv_cache_scales) {
    for (int layer = 0; layer < config_.num_layers; ++layer) {
      for (const char* which : {"k_scale", "v_scale"}) {
        const std::string name = absl::StrCat("model.layers.", layer, ".self_attn.", which);
        if (!files_->Contains(name)) {
          return absl::NotFoundError(absl::StrCat("missing tensor ", name, " in ", source,
                                                  " (quantization_config.kv_cache_scheme names one per layer)"));
        }
        FLOE_ASSIGN_OR_RETURN(TensorView scale, files_->Get(name));
        FLOE_ASSIGN_OR_RETURN(std::vector<float> value, ReadRowScales(scale, name, 1, /*per_channel=*/false));
        if (value[0] <= 0.0f) return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " must be positive"));
        weights_.kv_scales.push_back(value[0]);
      }
    }
  }
  for (size_t i = 0; i < files_->num_files(); ++i) {
    const std::string& path = files_->file(i).path();
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat("cannot stat ", path));
    absl::StrAppend(&fingerprint_, "\nfile ", std::filesystem::path(path).filename().string(), " size ", st.st_size,
                    " mtime ", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
  }
  return absl::OkStatus();
}

// A checkpoint with more layers than config.json declares means the two do not
// belong together; loading a prefix of the layers would run silently wrong.
absl::Status OwningCheckpoint::CheckNoExtraLayers() const {
  for (const std::string& name : files_->names()) {
    absl::string_view rest = name;
    if (!absl::ConsumePrefix(&rest, "model.layers.")) continue;
    int layer = 0;
    if (absl::SimpleAtoi(rest.substr(0, rest.find('.')), &layer) && layer >= config_.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, " belongs to layer ", layer, " but config.json has ",
                       "num_hidden_layers ", config_.num_layers, " (", files_->source(), ")"));
    }
  }
  return absl::OkStatus();
}

void OwningCheckpoint::LoadDummy(const LoadOptions& options) {
  // Generated weights are dense, whatever the config says; the config then
  // says so too, so nothing downstream names them 8-bit.
  config_.quantization = WeightQuantization{};
  for (const WeightSpec& spec : ExpectedWeights(config_)) {
    TensorView view;
    view.shape = spec.shape;
    view.dtype = options.dummy_dtype;
    void* data = Own(view.bytes());
    FillGeneratedWeight(spec, options.dummy_dtype, options.dummy_seed, data);
    if (view.dtype == DType::kF16) {  // as if loaded from an f16 checkpoint
      float* widened = static_cast<float*>(Own(view.numel() * sizeof(float)));
      WidenF16ToF32(static_cast<const uint16_t*>(data), widened, view.numel());
      buffers_.erase(buffers_.end() - 2);
      view.dtype = DType::kF32;
      data = widened;
    }
    view.data = data;
    WeightSlot(weights_, spec) = std::move(view);
  }
  if (config_.tie_word_embeddings) weights_.lm_head = weights_.embed_tokens;
  weight_dtype_ = weights_.embed_tokens.dtype;
  absl::StrAppend(&fingerprint_, "\ndummy seed ", options.dummy_seed, " dtype ", DTypeName(options.dummy_dtype));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Load(const std::string& dir,
                                                             const LoadOptions& options) {
  auto checkpoint = std::make_unique<OwningCheckpoint>();
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  FLOE_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromFile(config_path));
  checkpoint->set_config(std::move(config));
  std::ostringstream config_bytes;
  config_bytes << std::ifstream(config_path).rdbuf();
  checkpoint->set_fingerprint("config.json " + config_bytes.str());
  if (options.format == LoadFormat::kDummy) {
    checkpoint->LoadDummy(options);
  } else {
    FLOE_RETURN_IF_ERROR(checkpoint->LoadSafetensors(dir));
  }
  return std::unique_ptr<Checkpoint>(std::move(checkpoint));
}

}  // namespace floe
