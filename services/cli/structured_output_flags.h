// floe generate's structured-output flags, mapped onto
// GenerateRequest.structured_output: --json-schema FILE (with --strict),
// --json-object, --regex R, --choice A,B,C, --grammar FILE. At most one
// constraint per request; every error names the flag (and the limit, which
// are resolve_request.h's, as over gRPC and HTTP). Whether a schema, regex or
// grammar compiles is the worker's answer.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/cli/arg_parser.h"
#include "floe/v1/generate.pb.h"

namespace floe {

struct StructuredOutputFlags {
  std::string json_schema_file;
  bool strict = false;
  bool json_object = false;
  std::string regex;
  std::string choice;  // comma-separated, each item exact (not trimmed)
  std::string grammar_file;

  // Adds the flags (and their --help lines) to `parser`; they write *this.
  void Register(ArgParser& parser);
  // Sets request->structured_output from the flags given (nothing when none),
  // reading the files. INVALID_ARGUMENT (NOT_FOUND for a missing file)
  // naming the flag.
  absl::Status Apply(floe::v1::GenerateRequest* request) const;
};

}  // namespace floe
