// The pythonic tool-call format (Llama 3.2/4): a Python list of calls with
// keyword arguments whose values are literals,
//   [get_weather(city="Paris", days=3), search(q='x', filters={"a": [1, None]})]
// read without Python: strings ('...' or "...", with \n \t \\ \' \" \uXXXX
// escapes), ints, floats, True, False, None, lists, tuples (as lists) and
// dicts with string keys. Anything else (positional arguments, expressions,
// triple quotes) means the text is not calls. Arguments come out as a JSON
// object in the written order. Pure functions; input bounded by the caller
// (the output's length), nesting by kMaxPythonicDepth.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace floe::tools {

inline constexpr int kMaxPythonicDepth = 64;

struct PythonicCall {
  std::string name;
  std::string arguments;  // JSON object text
};

// Where the list that `text` starts with (after whitespace) ends: the index
// just past its closing ']'; nullopt while it is open.
std::optional<size_t> PythonicListEnd(std::string_view text);
// The calls of `text` (a whole list, whitespace around allowed); nullopt
// when it is not one.
std::optional<std::vector<PythonicCall>> ParsePythonicCalls(std::string_view text);

}  // namespace floe::tools
