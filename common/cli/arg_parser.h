// A small declarative command-line parser: every binary and subcommand lists
// its options once, and --help is generated from that list. Values are parsed
// into caller-owned variables, so there is no global flag registry.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace floe {

class ArgParser {
 public:
  ArgParser(std::string usage, std::string summary);

  void AddString(const std::string& name, std::string* value, const std::string& help);
  void AddInt(const std::string& name, int* value, const std::string& help);
  void AddInt64(const std::string& name, int64_t* value, const std::string& help);
  void AddUint64(const std::string& name, uint64_t* value, const std::string& help);
  void AddDouble(const std::string& name, double* value, const std::string& help);
  void AddFloat(const std::string& name, float* value, const std::string& help);
  // A comma-separated list ("a,b"); empty items are dropped, each item is
  // trimmed of spaces.
  void AddStringList(const std::string& name, std::vector<std::string>* values, const std::string& help);
  // A switch: `--name` sets true, `--name=false` sets false.
  void AddBool(const std::string& name, bool* value, const std::string& help);

  // Parses argv[first..argc). `--name value` and `--name=value` both work.
  // Unknown options and malformed values are INVALID_ARGUMENT naming the option.
  absl::Status Parse(int argc, char** argv, int first = 1);
  // The usual front end of a main(): parses, prints "PROGRAM: error" (exit
  // code 2) or --help (exit code 0). nullopt: go on running.
  std::optional<int> ParseOrExitCode(int argc, char** argv, const std::string& program, int first = 1);
  bool help_requested() const { return help_requested_; }
  std::vector<std::string> positional() const { return positional_; }
  std::string Help() const;

 private:
  struct Option {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_switch;
    std::function<absl::Status(const std::string&)> set;
  };
  void Add(Option option);

  std::string usage_;
  std::string summary_;
  std::vector<Option> options_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

}  // namespace floe
