// Fuzzes suffix-cache snapshot restore (services/suffix_cache/snapshot.* and
// SuffixCacheStore::ImportSnapshot, the service's RestoreSnapshot path,
// tree images included). The input is a snapshot file; when only its
// length or checksum field is off, it is resealed (the fuzzer would
// otherwise never get past the checksum), so mutations reach the payload.
// Invariants: a decoded snapshot re-encodes to the same bytes; the store
// imports it (from images or rebuilt) and serves a request and drafts from
// it; export -> encode -> decode -> import into a fresh store -> export is a
// fixed point (same responses, same tree images). A snapshot whose tree
// image LoadImage accepts but CheckIntegrity refuses is not imported: the
// store would mutate that tree, which LoadImage does not promise is safe
// (suffix_tree_image_fuzzer.cc; FLOE_FUZZ_IMAGE_MUTATE_ALL=1 imports it
// anyway).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "services/suffix_cache/snapshot.h"
#include "services/suffix_cache/suffix_cache_store.h"
#include "services/suffix_cache/suffix_tree/suffix_tree.h"
#include "tests/fuzz/fuzz_check.h"

namespace floe::suffix_cache {
namespace {

constexpr size_t kHeaderBytes = 32;  // magic, version, max_depth, payload length, checksum

uint64_t Fnv1a64(absl::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The snapshot with its payload length and checksum fields made right.
std::string Reseal(absl::string_view bytes) {
  std::string out(bytes);
  const uint64_t payload = out.size() - kHeaderBytes;
  std::memcpy(out.data() + 16, &payload, 8);
  const absl::string_view all(out);
  const uint64_t sum = Fnv1a64(all.substr(kHeaderBytes), Fnv1a64(all.substr(0, 24)));
  std::memcpy(out.data() + 24, &sum, 8);
  return out;
}

void CheckDraft(const Draft& d, int max_tokens) {
  FUZZ_CHECK(d.token_ids.size() == d.parents.size() && d.token_ids.size() == d.probs.size() &&
                 static_cast<int>(d.token_ids.size()) <= max_tokens,
             "draft: %zu ids, %zu parents, %zu probs", d.token_ids.size(), d.parents.size(), d.probs.size());
}

// Namespace name -> the snapshot's (request id, tokens) in order.
using Contents = std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::vector<int32_t>>>>>;

Contents ContentsOf(const SnapshotData& data) {
  Contents out;
  for (const SnapshotNamespace& ns : data.namespaces) {
    out.emplace_back(ns.name, std::vector<std::pair<std::string, std::vector<int32_t>>>{});
    for (const SnapshotResponse& r : ns.responses) out.back().second.emplace_back(r.request_id, r.tokens);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The snapshot's bytes with namespaces in name order (stores list them in
// hash order).
std::string Canonical(SnapshotData data) {
  std::sort(data.namespaces.begin(), data.namespaces.end(),
            [](const SnapshotNamespace& a, const SnapshotNamespace& b) { return a.name < b.name; });
  return EncodeSnapshot(data);
}

StoreOptions Options(uint32_t max_depth) {
  StoreOptions options;
  options.max_depth = max_depth >= 1 && max_depth <= 256 ? static_cast<int>(max_depth) : 16;
  options.max_cached_responses = 64;
  options.max_bytes = int64_t{64} << 20;
  return options;
}

}  // namespace
}  // namespace floe::suffix_cache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe::suffix_cache;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto decoded = DecodeSnapshot(bytes);
  if (!decoded.ok() && size >= kHeaderBytes) {
    FUZZ_CHECK(decoded.status().code() == absl::StatusCode::kDataLoss, "%s", decoded.status().ToString().c_str());
    bytes = Reseal(bytes);
    decoded = DecodeSnapshot(bytes);
  }
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.status().code() == absl::StatusCode::kDataLoss, "%s", decoded.status().ToString().c_str());
    return 0;
  }
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  FUZZ_CHECK(EncodeSnapshot(*decoded, version) == bytes, "decode -> encode changed the bytes (version %u)", version);

  static const bool mutate_all = std::getenv("FLOE_FUZZ_IMAGE_MUTATE_ALL") != nullptr;
  for (const SnapshotNamespace& ns : decoded->namespaces) {
    if (ns.tree_image.empty() || mutate_all) continue;
    SuffixTree tree(Options(decoded->max_depth).max_depth);
    if (tree.LoadImage(ns.tree_image).ok() && !tree.CheckIntegrity().ok()) return 0;
  }

  SuffixCacheStore store(Options(decoded->max_depth));
  const size_t namespaces = decoded->namespaces.size();
  const SuffixCacheStore::ImportReport report = store.ImportSnapshot(std::move(*decoded));
  FUZZ_CHECK(static_cast<size_t>(report.namespaces_from_image + report.namespaces_rebuilt) == namespaces,
             "imported %d + %d of %zu namespaces", report.namespaces_from_image, report.namespaces_rebuilt,
             namespaces);
  const StoreStats stats = store.Stats();
  FUZZ_CHECK(stats.active == 0 && stats.cached >= 0 && stats.cached_tokens >= 0, "stats after import");

  // Serve one request against the first namespace: its prompt is the start
  // of the last cached response, so the global tree drafts from it.
  const SnapshotData exported = store.ExportSnapshot();
  if (!exported.namespaces.empty()) {
    const SnapshotNamespace& ns = exported.namespaces.front();
    std::vector<int32_t> prompt;
    if (!ns.responses.empty()) {
      const auto& t = ns.responses.back().tokens;
      prompt.assign(t.begin(), t.begin() + std::min<size_t>(t.size(), 8));
    }
    if (prompt.empty()) prompt.push_back(1);
    FUZZ_CHECK(store.StartRequest(ns.name, "fuzz-request", prompt).ok(), "StartRequest");
    StepItem item;
    item.ns = ns.name;
    item.request_id = "fuzz-request";
    item.response_offset = 0;
    item.appended = absl::MakeConstSpan(prompt).subspan(0, 1);
    item.speculate = true;
    item.params.max_spec_tokens = 8;
    const std::vector<StepOutcome> out = store.Step({item});
    FUZZ_CHECK(out.size() == 1, "Step answered %zu items", out.size());
    if (out[0].status.ok()) CheckDraft(out[0].draft, item.params.max_spec_tokens);
    FUZZ_CHECK(store.AbortRequest(ns.name, "fuzz-request").ok(), "AbortRequest");
  }

  // Export -> file -> restore into a fresh store -> export: a fixed point.
  const std::string file = EncodeSnapshot(exported);
  auto reread = DecodeSnapshot(file);
  FUZZ_CHECK(reread.ok(), "an exported snapshot does not decode: %s", reread.status().ToString().c_str());
  SuffixCacheStore second(Options(reread->max_depth));
  second.ImportSnapshot(std::move(*reread));
  const SnapshotData exported2 = second.ExportSnapshot();
  FUZZ_CHECK(ContentsOf(exported) == ContentsOf(exported2), "restore of an export lost or changed responses");
  FUZZ_CHECK(Canonical(exported2) == Canonical(exported), "export -> restore -> export changed the snapshot bytes");
  return 0;
}
