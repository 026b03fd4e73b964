#include "common/log/log.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

namespace floe {

LogLevel MinLogLevel() {
  const char* env = std::getenv("FLOE_LOG_LEVEL");
  if (!env) return LogLevel::kInfo;
  if (!std::strcmp(env, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(env, "warning")) return LogLevel::kWarning;
  if (!std::strcmp(env, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}

void LogEvent(LogLevel level, const char* component, const char* event,
              std::initializer_list<LogField> fields) {
  static const LogLevel min_level = MinLogLevel();  // read once; immutable after
  if (level < min_level) return;
  static const char* kNames[] = {"debug", "info", "warning", "error"};
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm_utc;
  gmtime_r(&secs, &tm_utc);
  char stamp[40];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm_utc.tm_year + 1900,
                tm_utc.tm_mon + 1, tm_utc.tm_mday, tm_utc.tm_hour, tm_utc.tm_min, tm_utc.tm_sec, millis);
  nlohmann::ordered_json line;
  line["ts"] = stamp;
  line["level"] = kNames[static_cast<int>(level)];
  line["component"] = component;
  line["event"] = event;
  for (const auto& [key, value] : fields) {
    std::visit([&, key = key](const auto& v) { line[key] = v; }, value);
  }
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace floe
