// The Jinja subset: semantics a chat template leans on, checked against what
// Python's jinja2 prints for the same source (values written down from it),
// and the refusals: what the subset does not implement fails at Parse.
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
  EXPECT_EQ(Render("{{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ 7 // 2 }} {{ 7 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }}"),
            "[1, 'a', None] {'k': 'v'} 3 3.5 -4 2");
  EXPECT_EQ(Render("{{ x }}|{{ x is defined }}|{{ x | length }}|{{ 'a' ~ x ~ 1 }}"), "|False|0|a1");
  EXPECT_EQ(Render("{{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'é日本'[1] }} {{ 'hello'[::-1] }} {{ [1,2,3,4][1:3] }}"),
            "ababab [1, 2] 日 olleh [2, 3]");
}

TEST(JinjaTest, WhitespaceControlAsTransformersConfiguresIt) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the
  // indentation before one; "-" strips all whitespace on its side.
  EXPECT_EQ(Render("{% if true %}\n  yes\n{% endif %}\n"), "  yes\n");
  EXPECT_EQ(Render("a  \n   {% if true %}b{% endif %}"), "a  \nb");
  EXPECT_EQ(Render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(Render("x {# note #}\ny"), "x y");
  EXPECT_EQ(Render("{% raw %}{{ kept }}{% endraw %}"), "{{ kept }}");
}

TEST(JinjaTest, LoopsScopesAndNamespaces) {
  ordered_json ctx = {{"items", {"a", "b", "c"}}};
  EXPECT_EQ(Render("{% for x in items %}{{ loop.index }}{{ x }}{{ ',' if not loop.last }}{% endfor %}", ctx),
            "1a,2b,3c");
  EXPECT_EQ(Render("{% set n = 0 %}{% for x in items %}{% set n = n + 1 %}{% endfor %}{{ n }}", ctx), "0");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for x in items %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
                   ctx),
            "3");
  EXPECT_EQ(Render("{% for x in items if x != 'b' %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", ctx),
            "a2c2");
  EXPECT_EQ(Render("{% for x in items %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx), "a");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(Render("{% macro m(x, y='d') %}<{{ x }}{{ y }}>{% endmacro %}{{ m(1) }}{{ m(2, y='e') }}"), "<1d><2e>");
}

TEST(JinjaTest, StringMethodsAndFilters) {
  EXPECT_EQ(Render("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}"),
            "a b|a|['a', 'b', '', 'c']|['a', 'b']");
  EXPECT_EQ(Render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'a-b'.replace('-', '+') }}"),
            "True True a+b");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': [1, 2.0, 'é']} | tojson }}"), "{\"b\": 1, \"a\": [1, 2.0, \"é\"]}");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 'x'} | tojson(indent=2) }}"), "{\n  \"b\": 1,\n  \"a\": \"x\"\n}");
  EXPECT_EQ(Render("{{ ' x ' | trim }}|{{ [3, 1, 2] | sort | join(',') }}|{{ x | default('d') }}|{{ 'ab' | upper }}"),
            "x|1,2,3|d|AB");
  EXPECT_EQ(Render("{{ [{'n': 1}, {'n': 2}] | map(attribute='n') | list }}"), "[1, 2]");
  EXPECT_EQ(Render("{{ [{'t': 'a'}, {'t': 'b'}] | selectattr('t', 'equalto', 'b') | list | length }}"), "1");
}

TEST(JinjaTest, ErrorsAsJinja2RaisesThem) {
  EXPECT_EQ(Render("{{ raise_exception('roles must alternate') }}"), "ERROR: roles must alternate");
  EXPECT_EQ(Render("{{ 'a' + none }}"), "ERROR: unsupported operand type(s) for +: 'str' and 'NoneType'");
  EXPECT_EQ(Render("{{ x.y }}"), "ERROR: 'x' is undefined");
  EXPECT_EQ(Render("{{ x + 'a' }}"), "ERROR: 'x' is undefined");
}

TEST(JinjaTest, UnsupportedConstructsFailAtParse) {
  for (const char* source : {"{% include 'x' %}", "{% extends 'base' %}", "{{ x | wordwrap }}",
                             "{{ x is sameas2 }}", "{{ 'a'.zfill(3) }}", "{% call m() %}{% endcall %}",
                             "{% if x %}", "{{ 1 < 2 < 3 }}", "{% filter upper %}x{% endfilter %}"}) {
    auto t = Template::Parse(source);
    EXPECT_FALSE(t.ok()) << source;
    if (!t.ok()) EXPECT_NE(t.status().message().find("line 1"), std::string::npos) << t.status();
  }
}

}  // namespace
}  // namespace floe::jinja
