// bench_shift: Shift Parallelism on CPU ranks. Step time against scheduled
// tokens in the TP mode, the SP mode and shift (the cost model's threshold),
// on a worker of 2 ranks x 1 thread (Gloo on loopback; ranks are threads of
// this process, each its own CpuBackend, driven through LeaderBackend and
// RunFollower as floe-worker drives them) with Llama-3.2-1B shapes and dummy
// bf16 weights. The modes alternate within each repetition; medians are
// reported. Then: the measured crossover (from where SP stays no slower
// than TP, interpolated between the points around it, after a finer pass
// there) against the cost model's, and shift's worst ratio to the better
// fixed mode. --calibrate measures the figures the cost model's
// CPU profile names (services/worker/parallel/cost_model.cc) and predicts
// the crossover from them too. The JSON is also a shift profile:
// `floe-worker --shift-profile` and `--shift-profile` here run each step in
// the mode it measured faster at that size.
//
// JSON on stdout; progress on stderr.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/engine/dummy_model.h"
#include "common/cli/arg_parser.h"
#include "kernels/cpu/matmul.h"
#include "nlohmann/json.hpp"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/backend/rank_group.h"
#include "services/worker/model/checkpoint_writer.h"
#include "services/worker/parallel/cost_model.h"
#include "services/worker/parallel/gloo_communicator.h"
#include "services/worker/parallel/timed_communicator.h"

namespace floe {
namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

struct Point {
  int64_t tokens = 0;
  std::vector<double> tp, sp, shift;  // seconds per step
  std::vector<double> tp_collective, sp_collective;  // of which rank 0 spent in collectives
};

// The figures of CpuRankThread(), measured on both ranks at once: one
// thread's bf16 GEMM rate (256 rows through the 1B model's gate|up), its
// streaming rate (one row through a 64 MiB weight), and a Gloo all-reduce
// between the two ranks at 4 bytes, idle and after a stretch of compute
// (the latency a layer sees), and at 4 MiB (bandwidth).
nlohmann::json Calibrate(Communicator& comm) {
  cpu::ThreadPool pool(1);
  std::vector<uint16_t> w(static_cast<size_t>(16384) * 2048, 0x3c00);
  const TensorView view{DType::kBF16, {16384, 2048}, w.data()};
  const cpu::PackedMatrix packed = cpu::PackMatrix({&view, 1}, pool);
  std::vector<float> x(256 * 2048, 0.5f), y(256 * 16384);
  cpu::MatmulScratch scratch;
  auto best_of = [](int reps, const std::function<void()>& fn) {
    double best = 1e9;
    for (int i = 0; i < reps; ++i) {
      const double t0 = Now();
      fn();
      best = std::min(best, Now() - t0);
    }
    return best;
  };
  const double gemm = best_of(3, [&] { cpu::Matmul(x.data(), 256, packed, y.data(), pool, -1, &scratch); });
  const double gemv = best_of(5, [&] { cpu::Matmul(x.data(), 1, packed, y.data(), pool, -1, &scratch); });
  std::vector<float> small(1), big(1 << 20);
  (void)comm.AllReduceSum(small);
  const double idle_latency = best_of(50, [&] { (void)comm.AllReduceSum(small); });
  // Under load, as in a layer: each all-reduce follows a stretch of compute
  // on both ranks, so Gloo's I/O thread must be scheduled beside the busy
  // compute threads (2 cores, 2 ranks). Median of 20 (compute + all-reduce)
  // minus the compute alone.
  const TensorView quarter{DType::kBF16, {4096, 2048}, w.data()};
  const cpu::PackedMatrix slice = cpu::PackMatrix({&quarter, 1}, pool);
  std::vector<double> with, without;
  for (int i = 0; i < 20; ++i) {
    double t0 = Now();
    cpu::Matmul(x.data(), 1, slice, y.data(), pool, -1, &scratch);
    without.push_back(Now() - t0);
    t0 = Now();
    cpu::Matmul(x.data(), 1, slice, y.data(), pool, -1, &scratch);
    (void)comm.AllReduceSum(small);
    with.push_back(Now() - t0);
  }
  std::sort(with.begin(), with.end());
  std::sort(without.begin(), without.end());
  // A 2-rank ring all-reduce is 2 hops (the cost model's unit).
  const double latency = std::max(idle_latency, with[10] - without[10]) / 2;
  const double big_time = best_of(5, [&] { (void)comm.AllReduceSum(big); });
  // A 2-rank ring moves 2 (n-1)/n = 1 x the data each way.
  const double link = big.size() * 4.0 / std::max(1e-9, big_time - idle_latency);
  return {{"flops", 2.0 * 256 * 16384 * 2048 / gemm},
          {"memory_bandwidth", packed.bytes() / gemv},
          {"collective_latency", latency},
          {"all_reduce_latency_idle", idle_latency},
          {"link_bandwidth", link}};
}

// The index of the first point from which SP's median is no slower than
// TP's at every later point (points sorted by tokens); points.size() if none.
size_t SustainedCrossing(std::vector<Point>& points) {
  std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.tokens < b.tokens; });
  size_t at = points.size();
  while (at > 0 && Median(points[at - 1].sp) <= Median(points[at - 1].tp)) --at;
  return at;
}

}  // namespace

int Run(int argc, char** argv) {
  int layers = 16, reps = 3, tensor = 1, sequence = 2;
  std::string token_list = "1,2,4,8,16,32,64,128,256,512,1024,2048,4096";
  int64_t threshold = 0;
  bool calibrate = false;
  std::string profile_path;
  ArgParser parser("bench_shift [--layers N] [--tokens LIST] [--reps N] [--threshold N | --shift-profile FILE] "
                   "[--calibrate]",
                   "Step time against scheduled tokens in TP, SP and shift on 2 CPU ranks x 1 thread (Llama-3.2-1B "
                   "shapes); JSON on stdout.");
  parser.AddInt("layers", &layers, "layers of the 1B model's shapes to run (16: all)");
  parser.AddString("tokens", &token_list, "scheduled tokens per step, comma-separated");
  parser.AddInt("reps", &reps, "repetitions per point (medians; at least 15 for steps under 0.5 s)");
  parser.AddInt64("threshold", &threshold, "shift threshold (0: the cost model's)");
  parser.AddBool("calibrate", &calibrate, "measure the CPU rank figures the cost model names");
  parser.AddString("shift-profile", &profile_path, "shift runs each step in the mode this earlier output measured faster");
  parser.AddInt("tensor-parallel-size", &tensor, "T of the 2-rank grid (T x S = 2)");
  parser.AddInt("sequence-parallel-size", &sequence, "S of the 2-rank grid (S = 1: both modes are TP)");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "bench_shift")) return *exit_code;
  std::vector<int64_t> tokens;
  for (absl::string_view t : absl::StrSplit(token_list, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(t, &v) || v < 1 || v > 16384) return std::fprintf(stderr, "bad --tokens entry\n"), 2;
    tokens.push_back(v);
  }
  auto config = PresetConfig("llama-3.2-1b");
  config->num_layers = layers;
  std::unique_ptr<DummyModel> model = BuildModel(*config);
  if (tensor * sequence != 2) return std::fprintf(stderr, "bench_shift: T x S must be 2\n"), 2;
  const Grid grid{tensor, sequence};
  const int64_t predicted = PredictShiftThreshold(model->config, CpuRankThread(), grid);
  ShiftPolicy policy{ShiftPolicy::Pin::kShift, threshold > 0 ? threshold : predicted};
  if (!profile_path.empty()) {
    if (threshold > 0) return std::fprintf(stderr, "bench_shift: --threshold or --shift-profile, not both\n"), 2;
    auto profile = LoadShiftProfile(profile_path);
    if (!profile.ok()) return std::fprintf(stderr, "bench_shift: %s\n", profile.status().ToString().c_str()), 2;
    policy.profile = *std::move(profile);
  }

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("floe_bench_shift_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const int64_t max_tokens = *std::max_element(tokens.begin(), tokens.end()) * 2;
  const int block_size = 16, blocks = static_cast<int>((max_tokens + block_size - 1) / block_size);
  nlohmann::json calibration;
  std::vector<Point> points;
  std::thread follower([&] {
    auto g = ConnectGlooGrid({.rank = 1, .size = 2, .store_dir = dir.string(), .timeout = std::chrono::minutes(5)},
                             sequence);
    if (!g.ok()) return (void)std::fprintf(stderr, "rank 1: %s\n", g.status().ToString().c_str());
    auto b = CpuBackend::Create(model->config, model->weights,
                                {.num_threads = 1, .communicator = g->world.get(), .sequence_parallel_size = sequence});
    if (!b.ok()) return (void)std::fprintf(stderr, "rank 1: %s\n", b.status().ToString().c_str());
    if (calibrate) calibration = Calibrate(*g->world);
    const absl::Status s = RunFollower(**b, *g->world);
    if (!s.ok()) std::fprintf(stderr, "rank 1: %s\n", s.ToString().c_str());
  });
  auto g = ConnectGlooGrid({.rank = 0, .size = 2, .store_dir = dir.string(), .timeout = std::chrono::minutes(5)},
                           sequence);
  if (!g.ok()) return std::fprintf(stderr, "rank 0: %s\n", g.status().ToString().c_str()), 1;
  // Rank 0's collectives timed: the JSON reports their share of each step.
  std::atomic<int64_t> collective_ns{0};
  TimedCommunicator timed(*g->world, collective_ns);
  auto local = CpuBackend::Create(model->config, model->weights,
                                  {.num_threads = 1, .communicator = &timed, .sequence_parallel_size = sequence});
  if (!local.ok()) return std::fprintf(stderr, "rank 0: %s\n", local.status().ToString().c_str()), 1;
  if (calibrate) (void)Calibrate(*g->world);
  {
    LeaderBackend leader(std::move(local).value(), *g->world, [](const absl::Status& s) {
      std::fprintf(stderr, "rank group failed: %s\n", s.ToString().c_str());
      std::exit(1);
    });
    if (!leader.AllocateKvCache(blocks, block_size).ok()) return 1;
    std::vector<int32_t> table(blocks);
    for (int i = 0; i < blocks; ++i) table[i] = i;
    std::vector<float> logits(model->config.vocab_size);
    int64_t last_collective_start = 0;
    // One prefill-like step of n tokens (one sequence, one logits row).
    auto step = [&](int64_t n, ShiftPolicy p) {
      std::vector<int32_t> ids(n);
      for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919) % model->config.vocab_size);
      const ForwardSequence seq{ids, 0, {table.data(), static_cast<size_t>((n + block_size - 1) / block_size)}, 1};
      leader.set_policy(p);
      last_collective_start = collective_ns.load();
      const double t0 = Now();
      if (absl::Status s = leader.Forward({&seq, 1}, logits.data()); !s.ok()) {
        std::fprintf(stderr, "step: %s\n", s.ToString().c_str());
        std::exit(1);
      }
      return Now() - t0;
    };
    const ShiftPolicy tp{ShiftPolicy::Pin::kTensor}, sp{ShiftPolicy::Pin::kSequence};
    auto collective_s = [&] { return (collective_ns.load() - last_collective_start) * 1e-9; };
    auto measure = [&](int64_t n) {
      Point p{n};
      // Short steps get more repetitions: this host's memory bandwidth swings
      // for seconds at a time, and a median needs samples from both states.
      const double warm = step(n, tp) + step(n, sp);  // warm-up
      const int n_reps = warm < 1.0 ? std::max(reps, 15) : reps;
      for (int r = 0; r < n_reps; ++r) {
        // Alternate the order so that drift on this host favours no mode.
        auto run_tp = [&] {
          p.tp.push_back(step(n, tp));
          p.tp_collective.push_back(collective_s());
        };
        auto run_sp = [&] {
          p.sp.push_back(step(n, sp));
          p.sp_collective.push_back(collective_s());
        };
        if (r % 2 == 0) {
          run_tp();
          run_sp();
          p.shift.push_back(step(n, policy));
        } else {
          p.shift.push_back(step(n, policy));
          run_sp();
          run_tp();
        }
      }
      std::fprintf(stderr, "tokens %5lld: tp %.4f s (collectives %.4f), sp %.4f s (%.4f), shift %.4f s\n",
                   static_cast<long long>(n), Median(p.tp), Median(p.tp_collective), Median(p.sp),
                   Median(p.sp_collective), Median(p.shift));
      return p;
    };
    for (int64_t n : tokens) points.push_back(measure(n));
    // A finer pass inside the bracket where SP starts winning for good.
    const size_t at = SustainedCrossing(points);
    if (at > 0 && at < points.size()) {
      const int64_t lo = points[at - 1].tokens, hi = points[at].tokens;
      std::vector<Point> fine;
      for (int k = 1; k < 6; ++k) {
        const int64_t n = lo + (hi - lo) * k / 6;
        if (n > lo && n < hi && (fine.empty() || n > fine.back().tokens)) fine.push_back(measure(n));
      }
      points.insert(points.begin() + at, fine.begin(), fine.end());
    }
  }
  follower.join();
  std::filesystem::remove_all(dir);

  // Measured crossover: where SP starts winning for good, interpolated on
  // SP - TP between the two points around it.
  const size_t at = SustainedCrossing(points);
  double crossover = -1;
  if (at == 0) crossover = static_cast<double>(points[0].tokens);
  if (at > 0 && at < points.size()) {
    const Point &q = points[at - 1], &p = points[at];
    const double d0 = Median(q.sp) - Median(q.tp), d1 = Median(p.sp) - Median(p.tp);
    crossover = q.tokens + (p.tokens - q.tokens) * d0 / (d0 - d1);
  }
  double worst_shift = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (const Point& p : points) {
    const double tp = Median(p.tp), sp = Median(p.sp), shift = Median(p.shift);
    worst_shift = std::max(worst_shift, shift / std::min(tp, sp));
    rows.push_back({{"tokens", p.tokens},
                    {"tp_s", tp},
                    {"sp_s", sp},
                    {"shift_s", shift},
                    {"shift_mode", ParallelModeName(policy.Choose(p.tokens))},
                    {"tp_collective_s", Median(p.tp_collective)},
                    {"sp_collective_s", Median(p.sp_collective)},
                    {"tp_samples", p.tp},
                    {"sp_samples", p.sp},
                    {"shift_samples", p.shift}});
  }
  nlohmann::json out = {{"ranks", 2},
                        {"threads_per_rank", 1},
                        {"model", "llama-3.2-1b shapes"},
                        {"layers", layers},
                        {"reps", reps},
                        {"predicted_crossover_tokens", predicted == kNeverShift ? -1 : predicted},
                        {"measured_crossover_tokens", crossover},
                        {"crossover_ratio_measured_to_predicted",
                         crossover > 0 && predicted != kNeverShift ? crossover / predicted : 0},
                        {"shift_threshold_used", policy.profile.empty() ? policy.threshold : 0},
                        {"shift_profile", profile_path},
                        {"shift_worst_ratio_to_better_mode", worst_shift},
                        {"points", rows}};
  if (calibrate) {
    Hardware h = CpuRankThread();
    h.flops = calibration["flops"];
    h.memory_bandwidth = calibration["memory_bandwidth"];
    h.collective_latency = calibration["collective_latency"];
    h.link_bandwidth = calibration["link_bandwidth"];
    const int64_t from_measured = PredictShiftThreshold(model->config, h, grid);
    const Hardware named = CpuRankThread();
    calibration["named"] = {{"flops", named.flops},
                            {"memory_bandwidth", named.memory_bandwidth},
                            {"collective_latency", named.collective_latency},
                            {"link_bandwidth", named.link_bandwidth}};
    calibration["predicted_crossover_tokens"] = from_measured == kNeverShift ? -1 : from_measured;
    out["calibration"] = calibration;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace floe

int main(int argc, char** argv) { return floe::Run(argc, argv); }
