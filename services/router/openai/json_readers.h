// Typed readers of OpenAI request fields, shared by the body's field table
// (openai_request.cc) and the structured-output fields: a value of the wrong
// type or out of range is an ApiError naming the field (OpenAI's `param`) and
// the limit. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "services/router/openai/openai_request.h"

namespace floe::openai {

// A 400 invalid_request_error naming `param`.
ApiError Bad(std::string param, std::string message);

// "a string", "an array", ... for messages.
std::string TypeName(const nlohmann::ordered_json& v);

std::optional<ApiError> Number(const std::string& name, const nlohmann::ordered_json& v, double lo, double hi,
                               double* out);
std::optional<ApiError> Integer(const std::string& name, const nlohmann::ordered_json& v, int64_t lo, int64_t hi,
                                int64_t* out);
std::optional<ApiError> Bool(const std::string& name, const nlohmann::ordered_json& v, bool* out);
// A string of at most `max_bytes` bytes.
std::optional<ApiError> String(const std::string& name, const nlohmann::ordered_json& v, size_t max_bytes,
                               std::string* out);

}  // namespace floe::openai
