// bench_restore: time to restore a suffix-cache snapshot of --responses
// cached responses of --tokens tokens each (default 10,000 x 1,000 = 10 M
// tokens; the target is under 10 s). The responses are windows of the
// trace's output token stream at pseudo-random offsets (real text's
// repetition), or uniform random ids with --random-tokens (the worst case
// for the tree: almost no shared suffixes). Writes the snapshot as the
// service does (temp file, fsync, rename), then times the restore phases
// --runs times on a fresh store each: read, decode, import (tree build).
// Prints one JSON object with the medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/cli/arg_parser.h"
#include "services/suffix_cache/replay/trace.h"
#include "services/suffix_cache/snapshot.h"
#include "services/suffix_cache/suffix_cache_store.h"

namespace floe::suffix_cache {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(int argc, char** argv) {
  std::string trace_path = "/work/shared/traces/dev-agentic.jsonl";
  std::string path = (std::filesystem::temp_directory_path() / "floe-bench-restore.snapshot").string();
  int responses = 10000, tokens = 1000, namespaces = 1, runs = 3, max_depth = 64;
  bool random_tokens = false;
  ArgParser parser("bench_restore [options]", "Restore time of a synthetic suffix-cache snapshot.");
  parser.AddString("trace", &trace_path, "JSONL trace whose outputs the responses are cut from");
  parser.AddString("path", &path, "snapshot file to write (removed at the end)");
  parser.AddInt("responses", &responses, "cached responses in the snapshot");
  parser.AddInt("tokens", &tokens, "tokens per response");
  parser.AddInt("namespaces", &namespaces, "namespaces the responses are spread over");
  parser.AddInt("runs", &runs, "timed restores (medians reported)");
  parser.AddInt("max-depth", &max_depth, "StoreOptions::max_depth");
  parser.AddBool("random-tokens", &random_tokens, "uniform random token ids in [0, 32000) instead of trace text");
  bool no_image = false;
  parser.AddBool("no-image", &no_image, "write the snapshot without tree images (restore rebuilds from tokens)");
  if (absl::Status s = parser.Parse(argc, argv); !s.ok() || parser.help_requested()) {
    std::fprintf(stderr, "%s", parser.Help().c_str());
    return s.ok() ? 0 : 2;
  }
  std::vector<int32_t> stream;
  if (!random_tokens) {
    auto trace = LoadTrace(trace_path);
    if (!trace.ok()) {
      std::fprintf(stderr, "bench_restore: %s\n", std::string(trace.status().message()).c_str());
      return 1;
    }
    for (const TraceRequest& t : *trace) stream.insert(stream.end(), t.output.begin(), t.output.end());
    if (stream.size() < static_cast<size_t>(tokens) + 1) {
      std::fprintf(stderr, "bench_restore: the trace has only %zu output tokens\n", stream.size());
      return 1;
    }
  }
  std::mt19937_64 rng(42);
  SnapshotData data;
  data.max_depth = max_depth;
  data.namespaces.resize(namespaces);
  for (int k = 0; k < namespaces; ++k) data.namespaces[k].name = absl::StrCat("tenant-", k);
  for (int r = 0; r < responses; ++r) {
    SnapshotResponse resp;
    resp.request_id = absl::StrCat("req-", r);
    if (random_tokens) {
      std::uniform_int_distribution<int32_t> tok(0, 31999);
      for (int i = 0; i < tokens; ++i) resp.tokens.push_back(tok(rng));
    } else {
      const size_t at = rng() % (stream.size() - tokens);
      resp.tokens.assign(stream.begin() + at, stream.begin() + at + tokens);
    }
    data.namespaces[r % namespaces].responses.push_back(std::move(resp));
  }
  StoreOptions options;
  options.max_depth = max_depth;
  options.max_cached_responses = -1;
  // The file a running service writes: a store that holds these responses
  // (built here by the rebuild path, which is also the baseline) exports
  // them with its tree images.
  auto t0 = Clock::now();
  SnapshotData exported;
  double rebuild_s = 0, export_s = 0;
  {
    SuffixCacheStore builder(options);
    builder.ImportSnapshot(std::move(data));
    rebuild_s = SecondsSince(t0);
    t0 = Clock::now();
    exported = builder.ExportSnapshot();
    export_s = SecondsSince(t0);
  }
  if (no_image) {
    for (auto& ns : exported.namespaces) ns.tree_image.clear();
  }
  t0 = Clock::now();
  const std::string encoded = EncodeSnapshot(exported);
  const double encode_s = SecondsSince(t0);
  t0 = Clock::now();
  if (absl::Status s = WriteFileAtomically(path, encoded); !s.ok()) {
    std::fprintf(stderr, "bench_restore: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const double write_s = SecondsSince(t0);
  exported = SnapshotData();

  std::vector<double> read_s, decode_s, import_s, total_s;
  StoreStats stats;
  SuffixCacheStore::ImportReport report;
  for (int run = 0; run < runs; ++run) {
    SuffixCacheStore store(options);
    const auto start = Clock::now();
    t0 = start;
    auto bytes = ReadWholeFile(path);
    read_s.push_back(SecondsSince(t0));
    t0 = Clock::now();
    if (!bytes.ok()) {
      std::fprintf(stderr, "reading %s: %s\n", path.c_str(), bytes.status().ToString().c_str());
      return 1;
    }
    auto decoded = DecodeSnapshot(*bytes);
    decode_s.push_back(SecondsSince(t0));
    if (!decoded.ok()) {
      std::fprintf(stderr, "decoding %s: %s\n", path.c_str(), decoded.status().ToString().c_str());
      return 1;
    }
    t0 = Clock::now();
    report = store.ImportSnapshot(std::move(*decoded));
    import_s.push_back(SecondsSince(t0));
    total_s.push_back(SecondsSince(start));
    stats = store.Stats();
  }
  std::filesystem::remove(path);
  nlohmann::json out = {
      {"bench", "suffix_cache_restore"},
      {"responses", responses},
      {"tokens_per_response", tokens},
      {"namespaces", namespaces},
      {"token_source", random_tokens ? "uniform random ids < 32000" : trace_path},
      {"max_depth", max_depth},
      {"runs", runs},
      {"snapshot_bytes", static_cast<int64_t>(encoded.size())},
      {"tree_images", !no_image},
      {"rebuild_from_tokens_s", rebuild_s},
      {"export_s", export_s},
      {"restored_from_image", report.namespaces_from_image},
      {"restored_by_rebuild", report.namespaces_rebuilt},
      {"encode_s", encode_s},
      {"write_fsync_s", write_s},
      {"read_s_median", Median(read_s)},
      {"decode_s_median", Median(decode_s)},
      {"import_s_median", Median(import_s)},
      {"restore_s_median", Median(total_s)},
      {"restore_s_max", *std::max_element(total_s.begin(), total_s.end())},
      {"restored_cached_tokens", stats.cached_tokens},
      {"restored_responses", stats.cached},
      {"tree_nodes", stats.nodes},
      {"estimated_bytes", stats.bytes},
      {"target_restore_s", 10},
      {"hardware_threads", static_cast<int>(std::thread::hardware_concurrency())},
  };
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace floe::suffix_cache

int main(int argc, char** argv) { return floe::suffix_cache::Run(argc, argv); }
