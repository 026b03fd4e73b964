// Structured logs: one JSON object per line on stderr, with time, level,
// component and event, plus key/value fields (request ids, sizes, errors).
// Cheap enough for per-request events; not for per-token ones.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <variant>

namespace floe {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

using LogValue = std::variant<std::string, int64_t, double, bool>;
using LogField = std::pair<const char*, LogValue>;

void LogEvent(LogLevel level, const char* component, const char* event,
              std::initializer_list<LogField> fields = {});

// Messages below this level are dropped (FLOE_LOG_LEVEL=debug|info|warning|error; default info).
LogLevel MinLogLevel();

}  // namespace floe
