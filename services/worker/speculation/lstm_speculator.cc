#include "services/worker/speculation/lstm_speculator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/safetensors/safetensors.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace floe {
namespace {

using json = nlohmann::json;

constexpr float kNormEps = 1e-6f;
constexpr int kMaxPredict = 16;
constexpr int64_t kMaxDim = int64_t{1} << 20;

absl::StatusOr<std::vector<int64_t>> ParseDim(const json& j, absl::string_view field) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "speculator config.json: \"", field, "\" must be a positive integer or a dotted list of them (\"a.b\"), got ",
        j.dump()));
  };
  std::vector<int64_t> dims;
  if (j.is_number_integer()) {
    dims.push_back(j.get<int64_t>());
  } else if (j.is_string()) {
    for (absl::string_view part : absl::StrSplit(j.get<std::string>(), '.')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(part, &v)) return bad();
      dims.push_back(v);
    }
  } else if (j.is_array()) {
    for (const json& v : j) {
      if (!v.is_number_integer()) return bad();
      dims.push_back(v.get<int64_t>());
    }
  } else {
    return bad();
  }
  if (dims.empty() || dims.size() > 8) return bad();
  for (int64_t d : dims)
    if (d < 1 || d > kMaxDim) return bad();
  return dims;
}

float Gelu(float x) { return 0.5f * x * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2))); }

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// The reference's LayerNormParameterized without centring: x / rms(x), then
// the optional weight and bias. y may alias x.
struct Norm {
  std::vector<float> weight, bias;  // empty: no affine

  void Apply(const float* x, int64_t n, float* y) const {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(n) + kNormEps);
    for (int64_t i = 0; i < n; ++i) {
      float v = x[i] * scale;
      if (!weight.empty()) v = v * weight[i] + bias[i];
      y[i] = v;
    }
  }
};

// One element of an nn.Sequential chain (sum_rnn's stacked dims).
struct Op {
  enum class Kind { kLinear, kNorm, kGelu } kind;
  cpu::PackedMatrix linear;
  Norm norm;
};

std::vector<float> ToF32(const TensorView& v) {
  std::vector<float> out(v.numel());
  if (v.dtype == DType::kF32) {
    std::memcpy(out.data(), v.data, out.size() * sizeof(float));
  } else {  // bf16: the high half of an f32
    const uint16_t* in = static_cast<const uint16_t*>(v.data);
    for (size_t i = 0; i < out.size(); ++i) {
      const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
      std::memcpy(&out[i], &bits, sizeof(float));
    }
  }
  return out;
}

// Tensors of one speculator file, checked against the shapes the config implies.
class Reader {
 public:
  Reader(const SafetensorsFile& file, std::string prefix, cpu::ThreadPool& pool)
      : file_(file), prefix_(std::move(prefix)), pool_(pool) {}

  absl::StatusOr<TensorView> Tensor(const std::string& name, std::vector<int64_t> shape) const {
    const std::string full = prefix_ + name;
    auto view = file_.Get(full);
    if (!view.ok()) return view.status();
    if (view->dtype != DType::kF32 && view->dtype != DType::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat("speculator tensor ", full, " in ", file_.path(), " is ",
                                                     DTypeName(view->dtype), "; bf16 and f32 are served"));
    }
    if (view->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat("speculator tensor ", full, " in ", file_.path(), " has shape ",
                                                     ShapeToString(view->shape), ", config.json implies ",
                                                     ShapeToString(shape)));
    }
    return *view;
  }
  bool Contains(const std::string& name) const { return file_.Contains(prefix_ + name); }

  absl::StatusOr<cpu::PackedMatrix> Linear(const std::vector<std::string>& names, int64_t out, int64_t in) const {
    std::vector<TensorView> parts;
    for (const std::string& name : names) {
      auto view = Tensor(name, {out, in});
      if (!view.ok()) return view.status();
      if (!parts.empty() && view->dtype != parts[0].dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat("speculator tensors ", absl::StrJoin(names, ", "), " must share one dtype"));
      }
      parts.push_back(*view);
    }
    return cpu::PackMatrix(parts, pool_);
  }

  absl::StatusOr<Norm> Affine(const std::string& name, int64_t dim) const {
    auto w = Tensor(name + ".weight", {dim});
    if (!w.ok()) return w.status();
    auto b = Tensor(name + ".bias", {dim});
    if (!b.ok()) return b.status();
    return Norm{ToF32(*w), ToF32(*b)};
  }

 private:
  const SafetensorsFile& file_;
  std::string prefix_;
  cpu::ThreadPool& pool_;
};

}  // namespace

absl::StatusOr<SpeculatorConfig> SpeculatorConfig::FromJson(absl::string_view json_text) {
  json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("speculator config.json is not a JSON object");
  auto missing = [](absl::string_view field) {
    return absl::InvalidArgumentError(absl::StrCat("speculator config.json: \"", field, "\" is missing"));
  };
  for (const char* field : {"model_type", "method"}) {
    if (j.contains(field) && !j[field].is_string())
      return absl::InvalidArgumentError(
          absl::StrCat("speculator config.json: \"", field, "\" must be a string, got ", j[field].dump()));
  }
  const std::string model_type = j.value("model_type", std::string());
  if (model_type != "mlp_speculator") {
    return absl::InvalidArgumentError(absl::StrCat(
        "speculator config.json: \"model_type\" must be \"mlp_speculator\" (an Arctic speculator), got \"",
        model_type, "\""));
  }
  SpeculatorConfig c;
  const std::string method = j.value("method", std::string("sum_rnn"));  // the reference's default
  if (method == "sum_lstm") {
    c.method = Method::kSumLstm;
  } else if (method == "sum_rnn") {
    c.method = Method::kSumRnn;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("speculator config.json: \"method\" must be sum_lstm or sum_rnn, got \"", method, "\""));
  }
  for (const char* field : {"n_predict", "input_hidden_dim", "vocab_size", "inner_dim", "emb_dim", "proj_dim"})
    if (!j.contains(field)) return missing(field);
  if (!j["n_predict"].is_number_integer() || j["n_predict"].get<int64_t>() < 1 ||
      j["n_predict"].get<int64_t>() > kMaxPredict) {
    return absl::InvalidArgumentError(absl::StrCat("speculator config.json: \"n_predict\" must be an integer in [1, ",
                                                   kMaxPredict, "], got ", j["n_predict"].dump()));
  }
  c.n_predict = j["n_predict"].get<int>();
  for (const char* field : {"input_hidden_dim", "vocab_size"}) {
    if (!j[field].is_number_integer() || j[field].get<int64_t>() < 1 || j[field].get<int64_t>() > (int64_t{1} << 24))
      return absl::InvalidArgumentError(
          absl::StrCat("speculator config.json: \"", field, "\" must be a positive integer, got ", j[field].dump()));
  }
  c.input_hidden_dim = j["input_hidden_dim"].get<int64_t>();
  c.vocab_size = j["vocab_size"].get<int64_t>();
  for (auto [field, out] : {std::pair{"inner_dim", &c.inner_dim}, {"emb_dim", &c.emb_dim}, {"proj_dim", &c.proj_dim}}) {
    auto dims = ParseDim(j[field], field);
    if (!dims.ok()) return dims.status();
    *out = *std::move(dims);
  }
  for (auto [field, out] :
       {std::pair{"tie_weights", &c.tie_weights}, {"tie_lstm_embs", &c.tie_lstm_embs}, {"scale_input", &c.scale_input}}) {
    if (!j.contains(field)) continue;  // the reference's defaults are false
    if (!j[field].is_boolean())
      return absl::InvalidArgumentError(
          absl::StrCat("speculator config.json: \"", field, "\" must be true or false, got ", j[field].dump()));
    *out = j[field].get<bool>();
  }
  auto mismatch = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("speculator config.json: ", what));
  };
  if (c.method == Method::kSumLstm) {
    if (!c.tie_weights) return mismatch("sum_lstm needs \"tie_weights\": true (as the reference asserts)");
    if (c.inner_dim.size() != 1 || c.emb_dim.size() != 1 || c.proj_dim.size() != 1)
      return mismatch("sum_lstm takes single (undotted) inner_dim, emb_dim and proj_dim");
    if (c.emb_dim[0] != c.proj_dim[0] || c.inner_dim[0] != c.proj_dim[0])
      return mismatch(absl::StrCat("sum_lstm needs emb_dim == proj_dim == inner_dim (the gates add them), got ",
                                   c.emb_dim[0], ", ", c.proj_dim[0], ", ", c.inner_dim[0]));
  } else {
    if (c.emb_dim.back() != c.proj_dim.back() || c.proj_dim.back() != c.inner_dim[0])
      return mismatch(absl::StrCat("sum_rnn needs the last emb_dim and proj_dim to equal the first inner_dim (they "
                                   "are summed, then normed), got ",
                                   c.emb_dim.back(), ", ", c.proj_dim.back(), ", ", c.inner_dim[0]));
    // A stacked stage's norm (width d_i) reads the previous stage's output
    // (width d_{i-1}): the reference's modules only run when they agree.
    for (auto [field, dims] : {std::pair{"emb_dim", &c.emb_dim}, {"proj_dim", &c.proj_dim}})
      for (size_t i = 1; i < dims->size(); ++i)
        if ((*dims)[i] != (*dims)[i - 1])
          return mismatch(absl::StrCat("\"", field, "\" stages must be equal (a stage's norm reads the previous "
                                       "stage's output), got ",
                                       absl::StrJoin(*dims, ".")));
  }
  return c;
}

struct LstmSpeculator::Impl {
  SpeculatorConfig config;
  std::unique_ptr<SafetensorsFile> file;  // the embeddings are read from it
  cpu::ThreadPool pool;
  float alpha = 0.0f;  // emb_weight / state_weight

  // sum_lstm
  std::vector<TensorView> gate_embs;       // forget, input, output, cell (one when tied)
  std::vector<cpu::PackedMatrix> projs;    // [4P, in]: step 0, steps >= 1
  Norm cell_ln, state_ln;
  // sum_rnn
  std::vector<TensorView> embs;            // per tied step
  std::vector<std::vector<Op>> emb_tails;  // stacked stages after each embedding
  std::vector<std::vector<Op>> proj_chains, ln_chains;
  // both
  std::vector<cpu::PackedMatrix> heads;

  // Draft scratch.
  std::vector<float> x, z, g, cell, state, logits, tmp;
  std::vector<int32_t> tokens;
  cpu::MatmulScratch scratch;

  explicit Impl(int threads) : pool(threads) {}

  int EmbIndex(int k) const { return config.tie_weights ? 0 : k; }
  int ProjIndex(int k) const { return config.tie_weights && k >= 2 ? 1 : k; }
  int HeadIndex(int k) const { return config.tie_weights ? 0 : k; }

  void Lookup(const TensorView& table, int64_t m, float* out) {
    cpu::EmbeddingLookup(table, std::span<const int32_t>(tokens.data(), m), out);
  }
  // x [m, width] through a chain, in place (x grows to the widest stage).
  int64_t RunChain(const std::vector<Op>& chain, int64_t m, int64_t width, std::vector<float>& buf) {
    for (const Op& op : chain) {
      switch (op.kind) {
        case Op::Kind::kNorm:
          for (int64_t r = 0; r < m; ++r) op.norm.Apply(buf.data() + r * width, width, buf.data() + r * width);
          break;
        case Op::Kind::kGelu:
          for (int64_t i = 0; i < m * width; ++i) buf[i] = Gelu(buf[i]);
          break;
        case Op::Kind::kLinear: {
          tmp.resize(m * op.linear.n());
          cpu::Matmul(buf.data(), m, op.linear, tmp.data(), pool, width, &scratch);
          width = op.linear.n();
          buf.swap(tmp);
          break;
        }
      }
    }
    return width;
  }
};

LstmSpeculator::LstmSpeculator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LstmSpeculator::~LstmSpeculator() = default;

const SpeculatorConfig& LstmSpeculator::config() const { return impl_->config; }

absl::StatusOr<std::unique_ptr<LstmSpeculator>> LstmSpeculator::Load(const std::string& dir, int num_threads) {
  const std::string config_path = dir + "/config.json";
  std::ifstream in(config_path);
  if (!in) return absl::NotFoundError(absl::StrCat("speculator: cannot read ", config_path));
  std::stringstream text;
  text << in.rdbuf();
  auto config = SpeculatorConfig::FromJson(text.str());
  if (!config.ok()) return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", config.status().message()));
  auto impl = std::make_unique<Impl>(std::max(1, num_threads));
  impl->config = *config;
  const SpeculatorConfig& c = impl->config;
  const std::string weights_path = dir + "/model.safetensors";
  if (!std::ifstream(weights_path)) {
    return absl::NotFoundError(absl::StrCat("speculator: ", weights_path,
                                            " is missing (scripts/convert_speculator.py converts pytorch_model.bin)"));
  }
  auto file = SafetensorsFile::Open(weights_path);
  if (!file.ok()) return file.status();
  impl->file = *std::move(file);
  const std::string prefix = impl->file->Contains("speculator.head.0.weight") ? "speculator." : "";
  Reader reader(*impl->file, prefix, impl->pool);
  const double state_weight = std::pow(0.5, 0.5 / c.n_predict);
  const double emb_weight = std::sqrt((1.0 - state_weight * state_weight) * static_cast<double>(c.emb_dim.back()) / 2.0);
  impl->alpha = static_cast<float>(emb_weight / state_weight);

  const int64_t vocab = c.vocab_size, hidden = c.input_hidden_dim;
  if (c.method == SpeculatorConfig::Method::kSumLstm) {
    const int64_t p = c.proj_dim[0];
    for (const char* gate : {"forget", "input", "output", "cell"}) {
      if (c.tie_lstm_embs && impl->gate_embs.size() == 1) break;
      auto e = reader.Tensor(absl::StrCat(gate, "_emb.0.weight"), {vocab, p});
      if (!e.ok()) return e.status();
      impl->gate_embs.push_back(*e);
    }
    const int num_projs = std::min(c.n_predict, 2);
    for (int k = 0; k < num_projs; ++k) {
      std::vector<std::string> names;
      for (const char* gate : {"forget", "input", "output", "cell"}) names.push_back(absl::StrCat(gate, "_proj.", k, ".weight"));
      auto proj = reader.Linear(names, p, k == 0 ? hidden : c.inner_dim.back());
      if (!proj.ok()) return proj.status();
      impl->projs.push_back(*std::move(proj));
    }
    auto cell_ln = reader.Affine("cell_ln.0", c.inner_dim[0]);
    if (!cell_ln.ok()) return cell_ln.status();
    auto state_ln = reader.Affine("state_ln.0", c.inner_dim[0]);
    if (!state_ln.ok()) return state_ln.status();
    impl->cell_ln = *std::move(cell_ln);
    impl->state_ln = *std::move(state_ln);
  } else {
    const int num_embs = c.tie_weights ? 1 : c.n_predict;
    const int num_projs = c.tie_weights ? std::min(c.n_predict, 2) : c.n_predict;
    for (int k = 0; k < num_embs; ++k) {
      auto table = reader.Tensor(absl::StrCat("emb.", k, ".0.weight"), {vocab, c.emb_dim[0]});
      if (!table.ok()) return table.status();
      impl->embs.push_back(*table);
      // nn.Sequential(Embedding, [LN, GELU, Linear] per extra stage).
      std::vector<Op> tail;
      for (size_t i = 1; i < c.emb_dim.size(); ++i) {
        const int base = 3 * static_cast<int>(i - 1);
        auto ln = reader.Affine(absl::StrCat("emb.", k, ".", base + 1), c.emb_dim[i]);
        if (!ln.ok()) return ln.status();
        auto lin = reader.Linear({absl::StrCat("emb.", k, ".", base + 3, ".weight")}, c.emb_dim[i], c.emb_dim[i - 1]);
        if (!lin.ok()) return lin.status();
        tail.push_back({Op::Kind::kNorm, {}, *std::move(ln)});
        tail.push_back({Op::Kind::kGelu, {}, {}});
        tail.push_back({Op::Kind::kLinear, *std::move(lin), {}});
      }
      impl->emb_tails.push_back(std::move(tail));
      // nn.Sequential(LN, [GELU, Linear, LN] per extra stage).
      std::vector<Op> ln_chain;
      auto ln0 = reader.Affine(absl::StrCat("ln.", k, ".0"), c.inner_dim[0]);
      if (!ln0.ok()) return ln0.status();
      ln_chain.push_back({Op::Kind::kNorm, {}, *std::move(ln0)});
      for (size_t i = 1; i < c.inner_dim.size(); ++i) {
        const int base = 3 * static_cast<int>(i - 1);
        auto lin = reader.Linear({absl::StrCat("ln.", k, ".", base + 2, ".weight")}, c.inner_dim[i], c.inner_dim[i - 1]);
        if (!lin.ok()) return lin.status();
        auto ln = reader.Affine(absl::StrCat("ln.", k, ".", base + 3), c.inner_dim[i]);
        if (!ln.ok()) return ln.status();
        ln_chain.push_back({Op::Kind::kGelu, {}, {}});
        ln_chain.push_back({Op::Kind::kLinear, *std::move(lin), {}});
        ln_chain.push_back({Op::Kind::kNorm, {}, *std::move(ln)});
      }
      impl->ln_chains.push_back(std::move(ln_chain));
    }
    for (int k = 0; k < num_projs; ++k) {
      // nn.Sequential(Linear, [LN, GELU, Linear] per extra stage).
      std::vector<Op> chain;
      auto first = reader.Linear({absl::StrCat("proj.", k, ".0.weight")}, c.proj_dim[0],
                                 k == 0 ? hidden : c.inner_dim.back());
      if (!first.ok()) return first.status();
      chain.push_back({Op::Kind::kLinear, *std::move(first), {}});
      for (size_t i = 1; i < c.proj_dim.size(); ++i) {
        const int base = 3 * static_cast<int>(i - 1);
        auto ln = reader.Affine(absl::StrCat("proj.", k, ".", base + 1), c.proj_dim[i]);
        if (!ln.ok()) return ln.status();
        auto lin = reader.Linear({absl::StrCat("proj.", k, ".", base + 3, ".weight")}, c.proj_dim[i], c.proj_dim[i - 1]);
        if (!lin.ok()) return lin.status();
        chain.push_back({Op::Kind::kNorm, {}, *std::move(ln)});
        chain.push_back({Op::Kind::kGelu, {}, {}});
        chain.push_back({Op::Kind::kLinear, *std::move(lin), {}});
      }
      impl->proj_chains.push_back(std::move(chain));
    }
  }
  const int num_heads = c.tie_weights ? 1 : c.n_predict;
  for (int k = 0; k < num_heads; ++k) {
    auto head = reader.Linear({absl::StrCat("head.", k, ".weight")}, vocab, c.state_dim());
    if (!head.ok()) return head.status();
    impl->heads.push_back(*std::move(head));
  }
  return std::unique_ptr<LstmSpeculator>(new LstmSpeculator(std::move(impl)));
}

absl::Status LstmSpeculator::CheckFits(int64_t hidden_size, int64_t vocab_size, absl::string_view model_name) const {
  const SpeculatorConfig& c = impl_->config;
  if (c.input_hidden_dim != hidden_size || c.vocab_size != vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the speculator was made for hidden size ", c.input_hidden_dim, " and vocabulary ", c.vocab_size,
        " (input_hidden_dim, vocab_size), but the served model ", model_name, " has hidden size ", hidden_size,
        " and vocabulary ", vocab_size, " (hidden_size, vocab_size)"));
  }
  return absl::OkStatus();
}

size_t LstmSpeculator::WeightBytes() const {
  size_t bytes = 0;
  auto add_chain = [&](const std::vector<Op>& chain) {
    for (const Op& op : chain)
      if (op.kind == Op::Kind::kLinear) bytes += op.linear.bytes();
  };
  for (const auto& m : impl_->projs) bytes += m.bytes();
  for (const auto& m : impl_->heads) bytes += m.bytes();
  for (const auto& chain : impl_->proj_chains) add_chain(chain);
  for (const auto& chain : impl_->ln_chains) add_chain(chain);
  for (const auto& chain : impl_->emb_tails) add_chain(chain);
  return bytes;
}

void LstmSpeculator::Draft(std::span<const float> hidden, std::span<const int32_t> tokens, int steps,
                           std::span<int32_t> out, std::vector<std::vector<float>>* states) {
  Impl& s = *impl_;
  const SpeculatorConfig& c = s.config;
  const int64_t m = static_cast<int64_t>(tokens.size());
  steps = std::min(steps, c.n_predict);
  if (states) states->assign(std::max(steps, 0), {});
  const int64_t h_in = c.input_hidden_dim, d = c.state_dim(), vocab = c.vocab_size;
  // Malformed calls draft nothing (the proposer never makes one).
  if (m == 0 || steps <= 0 || static_cast<int64_t>(hidden.size()) < m * h_in ||
      static_cast<int64_t>(out.size()) < m * steps)
    return;
  s.tokens.assign(tokens.begin(), tokens.end());
  // Step 0's input: the target's hidden state, RMS-scaled when scale_input.
  s.x.assign(hidden.begin(), hidden.begin() + m * h_in);
  if (c.scale_input) {
    const Norm plain;
    const float inv_sqrt2 = static_cast<float>(M_SQRT1_2);
    for (int64_t r = 0; r < m; ++r) {
      float* row = s.x.data() + r * h_in;
      plain.Apply(row, h_in, row);
      for (int64_t i = 0; i < h_in; ++i) row[i] *= inv_sqrt2;
    }
  }
  int64_t width = h_in;
  if (c.method == SpeculatorConfig::Method::kSumLstm) s.cell.assign(m * d, 0.0f);
  for (int k = 0; k < steps; ++k) {
    if (c.method == SpeculatorConfig::Method::kSumLstm) {
      const cpu::PackedMatrix& proj = s.projs[s.ProjIndex(k)];
      s.g.resize(m * 4 * d);
      cpu::Matmul(s.x.data(), m, proj, s.g.data(), s.pool, width, &s.scratch);
      s.z.resize(m * d);
      for (size_t gate = 0; gate < 4; ++gate) {
        const TensorView& table = s.gate_embs[std::min(gate, s.gate_embs.size() - 1)];
        if (gate == 0 || s.gate_embs.size() > 1) s.Lookup(table, m, s.z.data());
        for (int64_t r = 0; r < m; ++r) {
          float* pre = s.g.data() + r * 4 * d + gate * d;
          const float* e = s.z.data() + r * d;
          for (int64_t i = 0; i < d; ++i) pre[i] += s.alpha * e[i];
        }
      }
      s.state.resize(m * d);
      for (int64_t r = 0; r < m; ++r) {
        float* pre = s.g.data() + r * 4 * d;
        float *f = pre, *in = pre + d, *o = pre + 2 * d, *cand = pre + 3 * d;
        float* cell = s.cell.data() + r * d;
        float* h = s.state.data() + r * d;
        s.cell_ln.Apply(cand, d, cand);
        for (int64_t i = 0; i < d; ++i) cell[i] = cell[i] * Sigmoid(f[i]) + Gelu(cand[i]) * Sigmoid(in[i]);
        s.state_ln.Apply(cell, d, h);
        for (int64_t i = 0; i < d; ++i) h[i] = Gelu(h[i]) * Sigmoid(o[i]);
      }
    } else {
      const int e = s.EmbIndex(k);
      // z = Emb_k(token) through its stacked stages.
      s.z.resize(m * c.emb_dim[0]);
      s.Lookup(s.embs[e], m, s.z.data());
      s.RunChain(s.emb_tails[e], m, c.emb_dim[0], s.z);
      // state = Proj_k(x) + a * z, then LN_k's chain and GELU.
      s.RunChain(s.proj_chains[s.ProjIndex(k)], m, width, s.x);
      const int64_t p = c.proj_dim.back();
      for (int64_t i = 0; i < m * p; ++i) s.x[i] += s.alpha * s.z[i];
      s.RunChain(s.ln_chains[e], m, p, s.x);
      s.x.resize(m * d);
      for (float& v : s.x) v = Gelu(v);
      s.state.swap(s.x);
    }
    if (states) (*states)[k].assign(s.state.begin(), s.state.begin() + m * d);
    const cpu::PackedMatrix& head = s.heads[s.HeadIndex(k)];
    s.logits.resize(m * vocab);
    cpu::Matmul(s.state.data(), m, head, s.logits.data(), s.pool, d, &s.scratch);
    for (int64_t r = 0; r < m; ++r) {
      const float* row = s.logits.data() + r * vocab;
      const int32_t best = static_cast<int32_t>(std::max_element(row, row + vocab) - row);  // first maximum
      s.tokens[r] = best;
      out[r * steps + k] = best;
    }
    // The next step reads this step's state.
    s.x.assign(s.state.begin(), s.state.begin() + m * d);
    width = d;
  }
}

}  // namespace floe
