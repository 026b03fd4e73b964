#include "services/cli/bench/load_generator.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace floe::bench {
namespace {

using Clock = std::chrono::steady_clock;

double RateFor(const LoadOptions& o, size_t i, size_t n) {
  if (o.ramp_up.empty()) return o.request_rate;
  const double progress = n > 1 ? static_cast<double>(i) / (n - 1) : 1.0;
  if (o.ramp_up == "exponential" && o.ramp_start_rate > 0) {
    return o.ramp_start_rate * std::pow(o.ramp_end_rate / o.ramp_start_rate, progress);
  }
  return o.ramp_start_rate + (o.ramp_end_rate - o.ramp_start_rate) * progress;
}

// Live counters, shared by the job threads and the progress printer.
struct Progress {
  std::atomic<int> done{0}, failed{0}, in_flight{0}, consecutive_failures{0};
};

}  // namespace

std::vector<double> ArrivalTimes(const std::vector<Job>& jobs, const LoadOptions& options) {
  std::mt19937_64 rng(options.seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<double> times(jobs.size(), 0.0);
  double t = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].arrival_s >= 0) {
      times[i] = jobs[i].arrival_s;
      continue;
    }
    times[i] = t;
    const double rate = RateFor(options, i, jobs.size());
    if (std::isinf(rate) || rate <= 0) continue;
    // Gamma(shape k, scale 1/(k*rate)) keeps the mean interval at 1/rate.
    const double shape = options.burstiness;
    std::gamma_distribution<double> gamma(shape, 1.0 / (shape * rate));
    t += gamma(rng);
  }
  return times;
}

RunResult RunLoad(const std::vector<Job>& jobs, Backend& backend, const LoadOptions& options) {
  RunResult result;
  const std::vector<double> arrivals = ArrivalTimes(jobs, options);
  std::vector<std::vector<RequestRecord>> per_job(jobs.size());
  Progress progress;
  std::atomic<bool> abort{false};
  std::mutex mu;
  std::condition_variable slot_freed;
  std::string abort_reason;
  const int total = CountRequests(jobs);
  const Clock::time_point start = Clock::now();

  std::atomic<bool> printing{options.progress};
  std::thread printer;
  if (options.progress) {
    printer = std::thread([&] {
      while (printing.load()) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        std::fprintf(stderr, "\r[bench] %d/%d done, %d failed, %d in flight, %.2f req/s, %.0f s   ",
                     progress.done.load(), total, progress.failed.load(), progress.in_flight.load(),
                     elapsed > 0 ? progress.done.load() / elapsed : 0.0, elapsed);
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    });
  }

  auto run_job = [&](size_t j) {
    const Job& job = jobs[j];
    std::vector<int32_t> history;
    int index = 0;
    for (size_t k = 0; k < j; ++k) index += static_cast<int>(jobs[k].turns.size());
    for (size_t t = 0; t < job.turns.size(); ++t) {
      if (abort.load()) break;
      TurnRequest request;
      request.session_id = job.session_id;
      request.max_tokens = job.turns[t].output_len;
      if (job.grow_history) {
        history.insert(history.end(), job.turns[t].prompt.begin(), job.turns[t].prompt.end());
        request.prompt = history;
      } else {
        request.prompt = job.turns[t].prompt;
      }
      RequestRecord record;
      record.index = index + static_cast<int>(t);
      record.session_id = job.session_id;
      record.turn = static_cast<int>(t);
      record.prompt_tokens = static_cast<int>(request.prompt.size());
      record.max_tokens = request.max_tokens;
      record.start_s = std::chrono::duration<double>(Clock::now() - start).count();
      std::vector<int32_t> output;
      backend.Send(request, &record, &output);
      if (job.grow_history) history.insert(history.end(), output.begin(), output.end());
      ++progress.done;
      if (record.ok) {
        progress.consecutive_failures = 0;
      } else {
        ++progress.failed;
        const int streak = ++progress.consecutive_failures;
        if (options.abort_after_consecutive_failures > 0 && streak >= options.abort_after_consecutive_failures &&
            !abort.exchange(true)) {
          std::lock_guard<std::mutex> lock(mu);
          abort_reason = absl::StrCat(streak, " requests failed in a row, last: ",
                                      absl::StatusCodeToString(static_cast<absl::StatusCode>(record.status_code)),
                                      ": ", record.error);
        }
      }
      const bool ok = record.ok;
      per_job[j].push_back(std::move(record));
      if (!ok) break;  // a session cannot continue without its history
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      --progress.in_flight;
    }
    slot_freed.notify_all();
  };

  std::vector<std::thread> threads;
  threads.reserve(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Clock::time_point due = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[j]));
    std::unique_lock<std::mutex> lock(mu);
    // Wake early on a freed slot only to re-check abort; sleep until due.
    while (!abort.load() && Clock::now() < due) slot_freed.wait_until(lock, due);
    while (!abort.load() && options.max_concurrency > 0 && progress.in_flight.load() >= options.max_concurrency) {
      slot_freed.wait(lock);
    }
    if (abort.load()) break;
    ++progress.in_flight;
    lock.unlock();
    threads.emplace_back(run_job, j);
  }
  for (std::thread& t : threads) t.join();
  result.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  printing = false;
  if (printer.joinable()) {
    printer.join();
    std::fprintf(stderr, "\r[bench] %d/%d done, %d failed in %.1f s%40s\n", progress.done.load(), total,
                 progress.failed.load(), result.duration_s, "");
  }
  for (auto& records : per_job) {
    for (auto& r : records) result.records.push_back(std::move(r));
  }
  result.aborted = abort.load();
  result.abort_reason = abort_reason;
  result.not_sent = total - static_cast<int>(result.records.size());
  return result;
}

}  // namespace floe::bench
