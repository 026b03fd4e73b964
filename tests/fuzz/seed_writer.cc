// Writes the binary seed inputs of tests/fuzz/corpus/ with the service code
// itself (tests/fuzz/corpus/README.md): suffix-cache snapshots exported by a
// SuffixCacheStore that served requests, SuffixTree images, and
// .safetensors files from SafetensorsWriter, and GenerateRequests as the
// router builds them for ResolveRequest (behind 6 bytes of limits). The JSON
// and text seeds come from make_json_seeds.py. Usage: fuzz_seed_writer CORPUS_DIR
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "common/safetensors/safetensors_writer.h"
#include "floe/v1/generate.pb.h"
#include "services/suffix_cache/snapshot.h"
#include "services/suffix_cache/suffix_cache_store.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"

namespace floe::suffix_cache {
namespace {

void Write(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
  std::printf("%s: %zu bytes\n", path.c_str(), bytes.size());
}

// A response that repeats pieces of its prompt, as agent traffic does.
std::vector<int32_t> Response(int seed, int length) {
  std::vector<int32_t> out;
  for (int i = 0; i < length; ++i) out.push_back(100 + (seed * 7 + (i % 11) * 3 + (i / 11)) % 23);
  return out;
}

// Serves `requests` requests per namespace through the store, ending all but
// the last (left active, so the export leaves it out of the image's kept set).
std::string StoreSnapshot(int max_depth, int namespaces, int requests, uint32_t version) {
  StoreOptions options;
  options.max_depth = max_depth;
  SuffixCacheStore store(options);
  for (int n = 0; n < namespaces; ++n) {
    const std::string ns = n == 0 ? "default" : "tenant-" + std::to_string(n);
    for (int r = 0; r < requests; ++r) {
      const std::string id = "req-" + std::to_string(n) + "-" + std::to_string(r);
      const std::vector<int32_t> prompt = Response(r + n, 6);
      if (!store.StartRequest(ns, id, prompt).ok()) std::exit(1);
      const std::vector<int32_t> response = Response(r * 3 + n, 10 + 7 * r);
      for (size_t at = 0; at < response.size(); at += 4) {
        StepItem item;
        item.ns = ns;
        item.request_id = id;
        item.response_offset = static_cast<int64_t>(at);
        item.appended = absl::MakeConstSpan(response).subspan(at, std::min<size_t>(4, response.size() - at));
        item.speculate = true;
        store.Step({item});
      }
      if (r + 1 < requests) store.EndRequest(ns, id).IgnoreError();
    }
  }
  return EncodeSnapshot(store.ExportSnapshot(), version);
}

std::string TreeImage(int max_depth, bool live, bool removed, bool wide) {
  SuffixTree tree(max_depth);
  for (int s = 0; s < 4; ++s) {
    tree.Extend(s, Response(s, 12 + 5 * s));
    if (s != 3 || !live) tree.Finish(s);
  }
  if (wide) {  // a node with more children than are scanned: hashed edges
    for (int t = 0; t < 12; ++t) tree.Extend(10 + t, {7, 1000 + t, 7});
    for (int t = 0; t < 12; ++t) tree.Finish(10 + t);
  }
  if (removed) tree.Remove(1).IgnoreError();
  std::string out;
  tree.AppendImage(&out);
  return out;
}

std::string Safetensors(const std::string& dir, int variant) {
  SafetensorsWriter w;
  auto bytes = [](size_t n) {
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 37);
    return b;
  };
  // The tiny model's tensor names, with small shapes.
  if (variant == 0) {
    w.Add("model.embed_tokens.weight", DType::kBF16, {8, 4}, bytes(64)).IgnoreError();
    w.Add("model.layers.0.self_attn.q_proj.weight", DType::kBF16, {4, 4}, bytes(32)).IgnoreError();
    w.Add("model.norm.weight", DType::kF32, {4}, bytes(16)).IgnoreError();
    w.Add("lm_head.weight", DType::kF16, {8, 4}, bytes(64)).IgnoreError();
    w.SetMetadata("format", "pt");
  } else if (variant == 1) {
    w.Add("scalar", DType::kF32, {}, bytes(4)).IgnoreError();
    w.Add("empty", DType::kBF16, {0, 3}, bytes(0)).IgnoreError();
    w.Add("int8", "I8", {2, 2}, bytes(4)).IgnoreError();
    w.Add("u64", "U64", {1}, bytes(8)).IgnoreError();
  } else {
    w.Add("a", DType::kF32, {2, 3, 1}, bytes(24)).IgnoreError();
  }
  const std::string path = dir + "/tmp.safetensors";
  if (!w.Write(path).ok()) std::exit(1);
  auto read = ReadWholeFile(path);
  std::remove(path.c_str());
  if (!read.ok()) std::exit(1);
  return *read;
}

// 6 bytes of limits (vocab - 1, context - 2, max_tokens limit - 1; u16 each)
// then the request, as resolve_request_fuzzer reads them.
std::string ResolveInput(uint16_t vocab, uint16_t context, uint16_t limit, const floe::v1::GenerateRequest& r) {
  std::string out;
  for (uint16_t v : {static_cast<uint16_t>(vocab - 1), static_cast<uint16_t>(context - 2),
                     static_cast<uint16_t>(limit - 1)}) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>(v >> 8));
  }
  return out + r.SerializeAsString();
}

void WriteResolveSeeds(const std::string& dir) {
  floe::v1::GenerateRequest r;
  r.set_request_id("req-1");
  r.set_model("tiny");
  for (int id : {128000, 9906, 1917}) r.mutable_token_ids()->add_ids(id % 1000);
  Write(dir + "/resolve_request/minimal", ResolveInput(1000, 4096, 2048, r));
  r.set_session_id("agent-42");
  r.mutable_sampling()->set_temperature(0.7f);
  r.mutable_sampling()->set_top_k(40);
  r.mutable_sampling()->set_top_p(0.9f);
  r.mutable_sampling()->set_min_p(0.05f);
  r.mutable_sampling()->set_seed(7);
  r.mutable_sampling()->set_repetition_penalty(1.1f);
  r.mutable_sampling()->set_presence_penalty(0.5f);
  r.mutable_sampling()->set_frequency_penalty(-0.5f);
  r.mutable_stopping()->set_max_tokens(64);
  r.mutable_stopping()->set_min_tokens(4);
  r.mutable_stopping()->add_stop("\n\n");
  r.mutable_stopping()->add_stop_token_ids(2);
  r.mutable_logprobs()->set_enabled(true);
  r.mutable_logprobs()->set_top_n(5);
  r.set_add_special_tokens(false);
  r.mutable_speculation()->set_namespace_("tenant/ns");
  r.add_forced_output_ids(5);
  r.set_skip_special_tokens(true);
  r.set_cache_salt("tenant");
  Write(dir + "/resolve_request/every_field", ResolveInput(1000, 4096, 2048, r));
  r.mutable_stopping()->set_max_tokens(4094);
  Write(dir + "/resolve_request/context_edge", ResolveInput(1000, 4096, 4096, r));
  floe::v1::GenerateRequest constrained;
  for (int id : {9906, 1917}) constrained.mutable_token_ids()->add_ids(id % 1000);
  auto* output = constrained.mutable_structured_output();
  output->set_json_schema(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
  output->set_strict(true);
  Write(dir + "/resolve_request/structured_json_schema", ResolveInput(1000, 4096, 2048, constrained));
  output->Clear();
  for (const char* choice : {"yes", "no"}) output->mutable_choice()->add_choices(choice);
  Write(dir + "/resolve_request/structured_choice", ResolveInput(1000, 4096, 2048, constrained));
  floe::v1::GenerateRequest text;
  text.set_text("Hello world");
  Write(dir + "/resolve_request/text_prompt", ResolveInput(1000, 4096, 2048, text));
}

}  // namespace
}  // namespace floe::suffix_cache

int main(int argc, char** argv) {
  using namespace floe::suffix_cache;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  Write(dir + "/suffix_snapshot/store_v2_one_namespace", StoreSnapshot(8, 1, 3, 2));
  Write(dir + "/suffix_snapshot/store_v2_two_namespaces", StoreSnapshot(6, 2, 2, 2));
  Write(dir + "/suffix_snapshot/store_v1", StoreSnapshot(8, 2, 3, 1));
  Write(dir + "/suffix_snapshot/empty_store", StoreSnapshot(8, 0, 0, 2));
  Write(dir + "/suffix_tree_image/depth4_finished", TreeImage(4, false, false, false));
  Write(dir + "/suffix_tree_image/depth8_live", TreeImage(8, true, false, false));
  Write(dir + "/suffix_tree_image/depth6_removed", TreeImage(6, true, true, false));
  Write(dir + "/suffix_tree_image/depth4_hashed", TreeImage(4, false, false, true));
  Write(dir + "/suffix_tree_image/empty", [] {
    SuffixTree tree(4);
    std::string out;
    tree.AppendImage(&out);
    return out;
  }());
  Write(dir + "/safetensors/tiny_model_names", Safetensors(dir, 0));
  Write(dir + "/safetensors/odd_dtypes_and_shapes", Safetensors(dir, 1));
  Write(dir + "/safetensors/one_tensor", Safetensors(dir, 2));
  WriteResolveSeeds(dir);
  return 0;
}
