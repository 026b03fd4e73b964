"""Small templates for jinja_conformance_test, rendered by jinja2 in
gen_conformance.py: hand-written ones for each corner of the subset
(whitespace control, literals, printing, operators, scoping, loops, macros,
filters, tests, methods, formatting, errors), then seeded fuzzers: random
expressions over a fixed context, random layouts of tags, whitespace and
whitespace-control markers (the lexer), and random programs of loops,
conditions, namespaces and macros (frames, lazy loops). Only constructs the
C++ subset supports appear here; what it refuses is covered by jinja_test.
"""

CTX = {
    "n": 7, "neg": -3, "f": 2.5, "zero": 0, "fz": 0.0, "b": True, "no": False, "z": None,
    "s": "Hello, World", "e": "", "sp": "  padded\t\n", "u": "héllo wörld ǆ ß İ ΟΔΟΣ 日本 😀",
    "num": "42", "flo": " 3.75 ", "l": [3, 1, 2], "ls": ["b", "A", "c", "a"], "el": [], "nested": [[1, 2], [3]],
    "d": {"b": 1, "a": 2, "items": "x", "key with space": 3}, "ed": {},
    "msgs": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "user", "content": None},
    ],
    "people": [{"name": "Bob", "age": 30, "tags": ["a"]}, {"name": "alice", "age": 25},
               {"name": "Carl", "age": 30, "tags": []}],
    "mixed": [1, "a", None, True, 2.5, {"k": [1]}],
}

HAND = [
    # -- whitespace control, as transformers configures it --
    "{% if true %}\n  yes\n{% endif %}\n",
    "a  \n   {% if true %}b{% endif %}",
    "a  {{- ' b ' -}}  c",
    "x {# note #}\ny",
    "x\n  {# note #}\ny",
    "x\n  {#- note -#}\n  y",
    "{%+ if true %}  kept{% endif %}",
    "  {%+ if true %}x{%+ endif %}\n",
    "{% if true +%}\nnewline kept{% endif %}",
    "a\n\t {% for i in [1, 2] %}\n\t {{ i }}\n\t {% endfor %}\nb",
    "{% raw %}{{ kept }} {% if %}{% endraw %}",
    "  {% raw %}\n  x {{ y }}\n  {% endraw %}\nz",
    "{%- raw -%}  padded  {%- endraw -%}",
    "line\r\nwindows\rold mac\n",
    "trailing newline dropped\n",
    "two trailing newlines\n\n",
    "{{ 'a' }}\n{{ 'b' }}\n",
    "{% set x = 1 %}\n\n{{ x }}",
    "\u3000{% if true %}x{% endif %}",
    "text {{- '' }}   \n  {%- if true %} t{% endif %}",
    "{% for i in [1,2,3] -%}\n  {{ i }}\n{%- endfor %}",
    "{{ {'a': {'b': 1}} }}",
    "{{ {'a': [1, {'b': 2}]}['a'][1]['b'] }}",
    "a{#", "a{#-", "a{# ", "a{#\n", "a{% raw %}", "a{% raw %} ", "a{% raw -%}  ", "a{{", "a{%", "a{% if true %}",
    # -- literals and printing --
    "{{ 1 }} {{ 1.0 }} {{ 2.5 }} {{ 1e20 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1e16 }} {{ 123456789.125 }}",
    "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1_0.5 }} {{ 1E3 }}",
    "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}",
    "{{ [1, 'a', none, true, 1.5] }} {{ ('t',) }} {{ (1, 2) }} {{ () }} {{ {'k': 'v'} }}",
    "{{ 'a\\tb\\n\\\\ \\'q\\' \\x41\\u00e9\\U0001F600 \\101 \\d' }}",
    "{{ \"double 'single' inside\" }} {{ 'single \"double\" inside' }}",
    "{{ 'adjacent' ' strings' \"joined\" }}",
    "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', '\\u00a0\\u200b\\x7f😀é\\\\'] }}",
    "{{ [x] }}", "{{ x }}|{{ x is defined }}|{{ x | length }}|{{ 'a' ~ x ~ 1 }}",
    "{{ {'a': x} }}", "{{ [none, z, x] }}",
    "{{ u }}|{{ u | length }}|{{ u[1] }}|{{ u[-1] }}|{{ u[::-1] }}",
    "{{ mixed }}|{{ d }}|{{ msgs[2] }}",
    "{{ 3.0 }} {{ -0.0 }} {{ 1/3 }} {{ 2/3 }} {{ 10/4 }} {{ 1e300 * 1e10 }} {{ -1e300 * 1e10 }}",
    "{{ 100.0 }} {{ 1e15 }} {{ 123456789012345678.0 }} {{ 0.1 + 0.2 }} {{ 1.5e-7 }}",
    # -- operators --
    "{{ 7 // 2 }} {{ 7 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
    "{{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 'x' * 0 }}|{{ [1, 2] + [3] }} {{ (1,) + (2,) }}",
    "{{ 1 + true }} {{ true + true }} {{ -true }} {{ 1.5 + 1 }} {{ +3 }} {{ - -3 }}",
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' == 'a' }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ (1,) == [1] }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'Z' < 'a' }} {{ 'é' > 'z' }}",
    "{{ 1 in [1, 2] }} {{ 'a' in 'cat' }} {{ 'a' in {'a': 1} }} {{ 3 not in l }} {{ none in [none] }} {{ x in [1] }} {{ 'x' in x }}",
    "{{ 0 or 'a' }} {{ '' and 'b' }} {{ 'a' and 'b' }} {{ none or [] }} {{ not 0 }} {{ not 'x' }} {{ not x }}",
    "{{ 'a' if true }}|{{ 'a' if false }}|{{ 'a' if false else 'b' if false else 'c' }}",
    "{{ 1 ~ 2 ~ none ~ true ~ [1] ~ x }}",
    "{{ -n|abs }} {{ (-n)|abs }} {{ -l|length }}",
    "{{ n * 2 + 1 }} {{ n - 2 * 3 }} {{ (n - 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }}",
    "{{ 'a' ~ 1 + 2 }} {{ 'a' ~ 'b' * 2 }}",
    "{{ 'a' + none }}", "{{ x + 1 }}", "{{ 1 / 0 }}", "{{ 1 // 0 }}", "{{ 1.0 % 0 }}", "{{ [1] < 'a' }}",
    "{{ 'a' < 1 }}", "{{ x < 1 }}", "{{ -'a' }}", "{{ 1 in 5 }}", "{{ 1 in 'abc' }}",
    # -- variables, scoping --
    "{% set x = 1 %}{{ x }}{% set x = x + 1 %}{{ x }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = 'xy' %}{{ c }}{{ d }}",
    "{% set a, b = [1, 2, 3] %}",
    "{% for i in [1,2] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}",
    "{% set x = 1 %}{% for i in [1,2] %}[{{ x }}]{% set x = 2 %}[{{ x }}]{% endfor %}{{ x }}",
    "{% set x = 1 %}{% for i in [1,2] %}{% if i == 2 %}{% set x = 5 %}{% endif %}[{{ x }}]{% endfor %}{{ x }}",
    "{{ n }}{% set n = 1 %}{{ n }}",
    "{% for i in [1] %}{{ n }}{% endfor %}{% set n = 1 %}{{ n }}",
    "{% for i in [1] %}{{ n }}{% endfor %}{% if true %}{% set n = 1 %}{% endif %}{{ n }}",
    "{% for i in [1] %}{{ n }}{% endfor %}{% if true %}{% set n = 1 %}{% else %}{% set n = 2 %}{% endif %}",
    "{% for i in [1] %}{{ n }}{% endfor %}{% if no %}{% set n = 1 %}{% elif true %}{% set n = 3 %}{% else %}{% set n = 2 %}{% endif %}{{ n }}",
    "{% for i in [1, 2] %}{{ s }}{% set s = 'inner' %}{{ s }}{% endfor %}{{ s }}",
    "{% for i in [1, 2] %}{% for j in [1] %}{{ q }}{% endfor %}{% set q = i %}{% endfor %}",
    "{% set ns = namespace(n=0) %}{% for x in l %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}",
    "{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }}{{ ns.b }}|{{ ns['a'] }}",
    "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns }}",
    "{% set dd = {} %}{% set dd.a = 1 %}",
    "{% set x %}a{{ 1 + 1 }}{% set y = 1 %}{% endset %}{{ x }}{{ y }}",
    "{% set x | upper | replace('A', '@') %}abc{% endset %}{{ x }}",
    "{% with a = 1, b = n %}{% set c = 3 %}{{ a }}{{ b }}{{ c }}{% endwith %}{{ a }}{{ c }}",
    "{% filter upper %}ab{{ 'c' }}{% set z = 1 %}{% endfilter %}{{ z }}",
    "{% filter replace('a', 'b') | title %}an apple{% endfilter %}",
    "{% print 'p', 1 %}",
    "{% for m in msgs %}{% generation %}{{ m.role }}{% set g = 1 %}{% endgeneration %}[{{ g }}]{% endfor %}",
    "{{ range(3) }} {{ range(1, 10, 3) | list }} {{ range(5)[-1] }} {{ range(0) | list }} {{ range(3) | length }}",
    "{{ dict(a=1, b=[2]) }} {{ dict({'x': 1}, y=2) }} {{ dict([('p', 1)]) }}",
    "{{ range(200000) | length }}",
    "{{ range }} {{ dict }} {{ namespace }}",
    # -- loops --
    "{% for x in ls %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }};{% endfor %}",
    "{% for x in l %}{{ loop.cycle('odd', 'even') }}{{ loop.changed(x > 1) }}{% endfor %}",
    "{% for x in l %}{{ loop.depth }}{{ loop.depth0 }}{{ loop }}{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}",
    "{% for x in el %}{{ x }}{% else %}empty{% endfor %}",
    "{% for x in l if x > 5 %}{{ x }}{% else %}filtered{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }},{% endfor %}{% for c in 'héllo' %}{{ c }}.{% endfor %}",
    "{% for a, b in nested %}{{ a }}{% endfor %}",
    "{% for x in none %}{% endfor %}",
    "{% for x in x %}{{ x }}{% else %}undefined iterates empty{% endfor %}",
    "{% for m in msgs %}{% for t in m.tool_calls | default([]) %}{{ loop.index }}:{{ t.function.name }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }} {% endfor %}{% endfor %}",
    "{% for x in l | reverse %}{{ x }}{% endfor %}{% for x in l|sort %}{{ x }}{% endfor %}",
    "{% for m in msgs[::-1] %}{{ m.role }}{% endfor %}|{% for m in msgs[1:3] %}{{ m.role }}{% endfor %}",
    # -- macros --
    "{% macro m(x, y='d') %}<{{ x }}{{ y }}>{% endmacro %}{{ m(1) }}{{ m(2, y='e') }}{{ m(y=3, x=4) }}{{ m() }}",
    "{% macro m(a, b=a) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}",
    "{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, c=3) }}",
    "{% macro m() %}{{ y }}{% endmacro %}{% set y = 3 %}{{ m() }}",
    "{% set y = 1 %}{% macro m() %}{{ y }}{% endmacro %}{% for i in [1] %}{% set y = 7 %}{{ m() }}{% endfor %}",
    "{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}",
    "{% macro outer(x) %}{% macro inner(y) %}{{ x }}{{ y }}{% endmacro %}{{ inner(2) }}{% endmacro %}{{ outer(1) }}",
    "{% macro m(x) %}{% set x = x * 2 %}{{ x }}{% endmacro %}{{ m(2) }}{{ m('a') }}",
    "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}",
    "{% macro m() %}x{% endmacro %}{{ m }}|{{ m() | upper }}|{{ m is callable }}",
    "{% set ns = namespace(f=none) %}{% macro m() %}M{% endmacro %}{% set ns.f = m %}{{ ns.f() }}",
    # -- filters --
    "{{ ' x ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ sp | trim }}|{{ 5 | trim }}|{{ x | trim }}",
    "{{ [3, 1, 2] | sort | join(',') }}|{{ ls | sort }}|{{ ls | sort(case_sensitive=true) }}|{{ l | sort(reverse=true) }}",
    "{{ people | sort(attribute='age') | map(attribute='name') | join(' ') }}|{{ people | sort(attribute='age,name') | map(attribute='name') | list }}",
    "{{ people | sort(attribute='name', reverse=true) | map(attribute='name') | list }}",
    "{{ x | default('d') }}|{{ none | default('d') }}|{{ '' | default('d', true) }}|{{ 0 | d(5, boolean=true) }}",
    "{{ 'ab' | upper }}{{ 'AB' | lower }}{{ 'hello world' | capitalize }}{{ 'hello wORLD-x(y)z[a]{b}<c>' | title }}",
    "{{ \"they're bill's\" | title }}|{{ \"they're\".title() }}|{{ u | upper }}|{{ u | lower }}|{{ u | title }}|{{ u | capitalize }}",
    "{{ 'ǆungla' | capitalize }}{{ 'ßa' | capitalize }}{{ 'İstanbul' | lower }}{{ 'ﬁne' | upper }}",
    "{{ [{'n': 1}, {'n': 2}] | map(attribute='n') | list }}|{{ ['a', 'b'] | map('upper') | list }}|{{ l | map('string') | join }}",
    "{{ people | map(attribute='tags') | list }}|{{ people | map(attribute='tags', default=['-']) | list }}",
    "{{ people | map(attribute='tags.0') | list }}",
    "{{ [{'t': 'a'}, {'t': 'b'}] | selectattr('t', 'equalto', 'b') | list | length }}",
    "{{ people | selectattr('tags') | map(attribute='name') | list }}|{{ people | rejectattr('tags') | map(attribute='name') | list }}",
    "{{ people | selectattr('age', '>', 26) | map(attribute='name') | list }}|{{ people | selectattr('name', 'in', ['Bob', 'Carl']) | list | length }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}|{{ msgs | rejectattr('content') | list }}",
    "{{ l | select('odd') | list }}|{{ l | reject('odd') | list }}|{{ mixed | select | list }}|{{ mixed | reject('none') | list }}",
    "{{ l | select('>', 1) | list }}|{{ l | select('divisibleby', 2) | list }}|{{ l | select('in', [1, 3]) | list }}",
    "{% if msgs | selectattr('role', 'equalto', 'nobody') %}generator is truthy{% endif %}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | length }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | first }}",
    "{% set g = l | select %}{{ g | list }}{{ g | list }}",
    "{% set g = l | map('string') %}{{ g | first }}{{ g | list }}",
    "{{ l | select }}",
    "{{ l | reverse }}", "{{ l | reverse | list }}|{{ 'abc' | reverse }}|{{ d | reverse | list }}|{{ (1, 2) | reverse | list }}",
    "{{ l | map('string') | reverse | list }}",
    "{{ ['A', 'a', 'b', 'B', 'c'] | unique | list }}|{{ ['A', 'a'] | unique(case_sensitive=true) | list }}|{{ people | unique(attribute='age') | map(attribute='name') | list }}",
    "{{ [[1], [1]] | unique | list }}",
    "{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ 'abc' | first }}{{ 'abc' | last }}{{ d | first }}{{ d | last }}|{{ [] | first }}|{{ x | last }}",
    "{{ l | select | last }}",
    "{{ l | length }}{{ 'héllo' | length }}{{ d | count }}{{ x | length }}{{ (1, 2) | length }}{{ range(4) | length }}",
    "{{ 5 | length }}",
    "{{ l | list }}{{ 'ab' | list }}{{ d | list }}{{ x | list }}",
    "{{ d | items | list }}|{{ x | items | list }}",
    "{{ l | items }}",
    "{{ d | dictsort }}|{{ d | dictsort(reverse=true) }}|{{ {'b': 1, 'B': 0, 'a': 2} | dictsort(true) }}|{{ {'x': 2, 'y': 1} | dictsort(by='value') }}",
    "{{ d | dictsort(by='nope') }}",
    "{{ [1, 2.5] | sum }}|{{ people | sum(attribute='age') }}|{{ [[1], [2]] | sum(start=[]) }}|{{ [] | sum }}",
    "{{ ['a'] | sum(start='') }}",
    "{{ ls | min }}{{ ls | max }}{{ ['a', 'B', 'b'] | max }}{{ ls | min(case_sensitive=true) }}|{{ [] | min }}|{{ people | max(attribute='age') }}",
    "{{ -3 | abs }} {{ 2.5 | abs }} {{ true | abs }} {{ 'a' | abs }}",
    "{{ 3 | round }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ -2.5 | round }} {{ 1234.5 | round(-2) }} {{ 1234 | round(-2) }}",
    "{{ 2.5 | round(0, 'floor') }} {{ 2.1 | round(method='ceil') }} {{ -2.15 | round(1, 'floor') }} {{ 7 | round(1, 'ceil') }}",
    "{{ 2.5 | round(0, 'banker') }}",
    "{{ 3.0 | int }} {{ '3.7' | int }} {{ ' 42 ' | int }} {{ '1_000' | int }} {{ 'x' | int(7) }} {{ none | int }} {{ 'ff' | int(0, 16) }} {{ '-0x1A' | int(base=16) }} {{ true | int }} {{ [1] | int }}",
    "{{ 'nan' | int(9) }} {{ ' -12.9 ' | int }} {{ '1e3' | int }}",
    "{{ x | int }}", "{{ 'inf' | int }}",
    "{{ '1.5' | float }} {{ 'inf' | float }} {{ '-Infinity' | float }} {{ 'x' | float }} {{ 2 | float }} {{ '1_0.5e1' | float }} {{ none | float(1.5) }}",
    "{{ 'a-b' | replace('-', '+') }}|{{ 'aaaa' | replace('a', 'b', 2) }}|{{ 123 | replace(2, 9) }}|{{ 'ab' | replace('', '.') }}",
    "{{ 'x\\ny\\n\\nz' | indent }}|{{ 'x\\ny' | indent(2, true) }}|{{ 'x\\n \\ny' | indent('> ') }}|{{ 'x\\n\\ny' | indent(blank=true) }}",
    "{{ 'a\\r\\nb\\x0bc' | indent(1) }}|{{ '' | indent(2, true) }}|{{ 'x\\n' | indent(2) }}",
    "{{ 'ab' | center(6) }}|{{ 'ab' | center(7) }}|{{ 'abc' | center(2) }}",
    "{{ '%s - %s' | format('a', 1) }}|{{ '%(x)s!' | format(x='y') }}",
    "{{ '%s' | format(1, x=2) }}",
    "{{ 5 | string }}{{ none | string }}{{ l | string }}{{ x | string }}|{{ (5 | string) ~ 1 }}",
    "{{ '<b>' | safe }}|{{ ('a' | safe) + '<' }}|{{ '<' + ('a' | safe) }}|{{ ('<x>' | safe) ~ '<' }}|{{ ['<'] | safe }}",
    "{{ ('a' | safe) is escaped }}{{ 'a' is escaped }}|{{ [('a' | safe)] }}|{{ ('x' | safe) * 2 + '&' }}",
    # -- tojson (transformers' json.dumps) --
    "{{ {'b': 1, 'a': [1, 2.0, 'é', none, true]} | tojson }}",
    "{{ {'b': 1, 'a': 'x'} | tojson(indent=2) }}|{{ [1, [2, {}], []] | tojson(indent=0) }}|{{ [1, [2]] | tojson(indent='\\t') }}",
    "{{ {'b': {'z': 1, 'y': 2}, 'a': 1} | tojson(sort_keys=true) }}|{{ {'a': [1, 2]} | tojson(separators=(',', ':')) }}",
    "{{ {'a': [1]} | tojson(indent=2, separators=(',', ' = ')) }}",
    "{{ 'é😀\\n\"\\\\\\x01\\x7f\\u2028' | tojson }}|{{ 'é😀\\x7f' | tojson(true) }}|{{ 'é' | tojson(ensure_ascii=true) }}",
    "{{ [1, 2] | tojson(4) }}",
    "{{ 1.0 | tojson }} {{ 1e16 | tojson }} {{ (1e300 * 1e10) | tojson }} {{ -0.0 | tojson }} {{ (1, 'a') | tojson }} {{ 'safe' | safe | tojson }}",
    "{{ x | tojson }}", "{{ ns | tojson }}", "{{ d.items() | tojson }}", "{{ range(2) | tojson }}",
    "{% set ns = namespace(a=1) %}{{ ns | tojson }}",
    "{{ msgs | tojson }}",
    # -- tests --
    "{{ x is defined }}{{ n is defined }}{{ x is undefined }}{{ z is none }}{{ x is none }}{{ 1 is number }}{{ true is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is integer }}",
    "{{ 'a' is string }}{{ d is mapping }}{{ l is mapping }}{{ l is iterable }}{{ 's' is iterable }}{{ 1 is iterable }}{{ x is iterable }}{{ d is sequence }}{{ x is sequence }}{{ 1 is sequence }}",
    "{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}",
    "{{ 3 is odd }}{{ 3 is even }}{{ 3.0 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}",
    "{{ 'abc' is lower }}{{ 'Abc' is lower }}{{ '123' is lower }}{{ 'ABC' is upper }}{{ 'ǅ' is upper }}",
    "{{ 2 is in [1, 2] }}{{ 'a' is in 'cat' }}{{ 1 is eq 1.0 }}{{ 1 is equalto 2 }}{{ 3 is gt 2 }}{{ 3 is ge 3 }}{{ 3 is lt(2) }}{{ 3 is le 3 }}{{ 3 is ne 3 }}{{ 2 is greaterthan 1 }}{{ 1 is lessthan 2 }}",
    "{{ x is callable }}{{ range is callable }}{{ 1 is callable }}{{ 'upper' is filter }}{{ 'wordwrap' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}",
    "{{ none is sameas none }}{{ true is sameas true }}{{ 1 is sameas 1 }}{{ l is sameas l }}{{ [] is sameas [] }}",
    "{{ n is not none }}{{ x is not defined }}{{ not n is none }}",
    "{{ 'x' is odd }}",
    "{% if d.a is defined and d.zz is not defined %}ok{% endif %}",
    # -- attribute and item access --
    "{{ d.a }}{{ d['a'] }}{{ d['key with space'] }}{{ d.zz }}|{{ d['zz'] }}|{{ d[0] }}|{{ l[0] }}{{ l[-1] }}{{ l[5] }}|{{ l.0 }}",
    "{{ d['items'] }}|{{ d.items is defined }}{{ d.keys is defined }}",
    "{{ d.items }}",
    "{{ x.y }}", "{{ x['y'] }}", "{{ d.zz.y }}", "{{ z.y }}|{{ z['y'] }}", "{{ n.real }}{{ n.imag }}{{ f.real }}",
    "{{ 'abc'[1:] }}{{ 'abc'[-1] }}{{ 'abc'[10] }}|{{ l[::2] }}{{ l[-2:] }}{{ l[:-1] }}{{ l[5:] }}{{ l[::-2] }}{{ l[-10:10] }}",
    "{{ (1, 2, 3)[1:] }}{{ 'héllo'[1:3] }}{{ d[1:2] }}|{{ l[1:2:0] }}",
    "{{ msgs[0].content }}{{ msgs[-1].content }}{{ msgs[1]['role'] }}{{ msgs[2].tool_calls[0].function.arguments.x }}",
    "{{ s.zz }}|{{ l.zz }}|{{ s.upper is defined }}|{{ l.append is defined }}|{{ l.append }}",
    # -- methods --
    "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(none, 1) }}|{{ ' a b  c '.rsplit(none, 1) }}",
    "{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'a\\u3000b\\xa0c'.split() }}|{{ ''.split() }}|{{ ''.split(',') }}|{{ 'abc'.split('') }}",
    "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'a-b'.replace('-', '+') }} {{ 'abc'.startswith('b', 1) }} {{ 'abc'.endswith('b', 0, 2) }}",
    "{{ 'abc'.startswith(['a']) }}",
    "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.index('l') }} {{ 'hello'.count('l') }} {{ 'hello'.count('') }} {{ 'hello'.find('l', 3) }}",
    "{{ 'hello'.index('z') }}",
    "{{ 'hello world'.title() }} {{ 'hello'.capitalize() }} {{ 'HeLLo'.lower() }} {{ 'straße'.upper() }} {{ 'ΟΔΟΣ'.lower() }} {{ 'ǆ'.title() }} {{ 'Straße'.casefold() }}",
    "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 9) }} {{ d.keys() }} {{ d.values() }} {{ d.items() }} {{ ed.items() }}",
    "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.keys() | length }} {{ 'a' in d.keys() }} {{ d.copy() }}",
    "{% if ed.items() %}t{% else %}f{% endif %}{% if d.items() %}t{% endif %}",
    "{{ '{} and {}'.format(1, 'x') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='n') }} {{ '{:>5}|{:<5}|{:^5}|{:*^7}'.format('a', 'b', 'c', 'd') }}",
    "{{ '{:.2f} {:5.1f} {:e} {:g} {:%} {:,} {:_} {:08.3f} {:+d} {: d}'.format(3.14159, 2.25, 12345.678, 0.0001, 0.25, 1234567, 1234567, -3.14159, 5, 5) }}",
    "{{ '{:x} {:X} {:o} {:b} {:#x} {:#b} {:c} {:5d} {:<5d}| {:05d} {:,}'.format(255, 255, 8, 5, 255, 5, 65, 42, 42, -42, -1234567) }}",
    "{{ '{0[a]} {0[b]} {1.a}'.format(d, ns) }}",
    "{{ '{0[a]} {1[0]} {2[1]}'.format(d, l, 'xyz') }}|{{ '{!r} {!s} {!a}'.format('é', 1, 'é') }}|{{ '{{literal}} {}'.format(1) }}",
    "{{ '{}'.format(x) }}|{{ '{} {}'.format(1) }}",
    "{{ '%s %r %d %i %5.2f %-4s| %04d %+d %x %X %o %e %g %c %%' % ('a', 'b', 3.9, -2, 3.14159, 'x', 42, 5, 255, 255, 8, 1234.5, 0.00001, 65) }}",
    "{{ '%(a)s-%(b)r' % {'a': 1, 'b': 'x'} }}|{{ '%s' % none }}|{{ '%s' % [1, 2] }}|{{ '%s' % x }}|{{ '%s' % (x,) }}|{{ '%.2s' % 'abc' }}|{{ '%5s|%-5s|' % ('é', 'ü') }}",
    "{{ '%s %s' % ('a',) }}", "{{ '%s' % (1, 2) }}", "{{ '%d' % 'a' }}", "{{ '%z' % 1 }}",
    "{{ 'a\\nb\\r\\nc\\rd\\x0be\\x1cf\\u2028g'.splitlines() }}|{{ 'a\\nb\\n'.splitlines(true) }}",
    "{{ 'a1'.isalnum() }}{{ '12'.isdigit() }}{{ '²'.isdigit() }}{{ '²'.isdecimal() }}{{ 'ab'.isalpha() }}{{ 'é'.isalpha() }}{{ ' \\t'.isspace() }}{{ ''.isspace() }}{{ 'Ab'.istitle() }}{{ 'AB'.isupper() }}{{ 'ab'.islower() }}",
    "{{ 'a,b'.partition(',') }}{{ 'a,b,c'.rpartition(',') }}{{ 'ab'.partition('x') }}{{ 'ab'.zfill(5) }}{{ '-4'.zfill(4) }}{{ 'ab'.ljust(5, '*') }}{{ 'ab'.rjust(4) }}{{ 'ab'.center(7, '-') }}",
    "{{ 'prefix_x'.removeprefix('prefix_') }}{{ 'x.txt'.removesuffix('.txt') }}{{ ','.join(['a', 'b']) }}{{ ''.join('abc') }}",
    "{{ ','.join([1, 2]) }}",
    "{{ l.count(1) }}{{ l.index(2) }}{{ (1, 1).count(1) }}{{ l.copy() }}",
    "{{ l.index(9) }}",
    "{{ s.upper }}",
    # -- raise_exception and errors --
    "{{ raise_exception('roles must alternate') }}",
    "{% if true %}{{ raise_exception('msg with ' ~ n) }}{% endif %}",
    "{{ x.y.z }}", "{{ x() }}", "{{ n() }}", "{{ l['a'] }}", "{{ d.zz.upper() }}",
    "{{ msgs[3].content.strip() }}",
    "{{ msgs[3].content + 'x' }}",
    "{{ msgs[3].content is string }}{{ '</think>' in msgs[1].content }}",
    "{{ '</think>' in msgs[3].content }}",
]


def hand_written():
    return [(source, CTX) for source in HAND]


# ---- seeded expression fuzzer ------------------------------------------------

ATOMS = ["n", "neg", "f", "zero", "fz", "b", "no", "z", "s", "e", "sp", "u", "num", "flo", "l", "ls", "el", "nested",
         "d", "ed", "people", "mixed", "nope", "msgs[1]", "msgs", "people[0]",
         "0", "1", "2", "3", "-1", "10", "100", "0.5", "1.0", "-2.25", "3.14159", "0.1", "1e16", "1e-5",
         "''", "'a'", "'Ab c'", "' x '", "'é'", "'日本'", "\"it's\"", "'1'", "'10'", "'1.5'", "' 42 '", "'abc'", "'a,b'",
         "true", "false", "none", "[]", "[1, 2]", "['b', 'a']", "{'a': 1}", "{}", "(1, 'a')", "range(3)"]
BINARY = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"]
FILTERS = ["length", "count", "first", "last", "list", "string", "lower", "upper", "title", "capitalize", "trim",
           "trim('xa')", "reverse", "unique", "sort", "sort(reverse=true)", "join", "join(', ')", "default('D')",
           "default('D', true)", "d(0)", "int", "int(9)", "float", "abs", "round", "round(1)", "round(2, 'floor')",
           "round(0, 'ceil')", "tojson", "tojson(indent=2)", "tojson(sort_keys=true)", "tojson(separators=(',', ':'))",
           "items", "dictsort", "dictsort(by='value')", "map(attribute='name')", "map('upper')", "map('string')",
           "select", "select('odd')", "reject('none')", "selectattr('age', 'gt', 26)", "rejectattr('tags')", "min",
           "max", "sum", "indent(2)", "indent(2, true)", "replace('l', 'L')", "replace('o', '0', 1)", "center(9)",
           "format(1, 2)", "safe", "join('-', attribute='name')", "min(attribute='age')", "first | string"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "sequence", "iterable",
         "callable", "boolean", "true", "false", "odd", "even", "divisibleby(3)", "divisibleby 2", "lower", "upper",
         "in [1, 2, 3]", "in 'abc'", "eq 7", "equalto 'a'", "gt 2", "lt(2)", "ge 2", "le 3", "ne 1", "escaped"]
SUBSCRIPTS = ["0", "-1", "1:", ":-1", "::-1", "::2", "5", "n", "'a'", "1:2"]
METHODS = ["upper()", "lower()", "strip()", "strip('H')", "lstrip()", "rstrip('d')", "split()", "split(',')",
           "split(',', 1)", "rsplit(none, 1)", "replace('l', 'x')", "startswith('H')", "endswith(('d', 'x'))",
           "find('o')", "rfind('o')", "count('l')", "title()", "capitalize()", "get('a')", "get('zz', 9)", "items()",
           "keys()", "values()", "format(1, 'x')", "index('l')", "isdigit()", "isalpha()", "isspace()", "islower()",
           "isupper()", "splitlines()", "partition(',')", "zfill(5)", "ljust(12, '*')", "center(10)",
           "join(['x', 'y'])", "count(1)", "copy()", "name", "role", "content", "a", "0", "real"]


def expr(rng, depth):
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(ATOMS)
    kind = rng.random()
    sub = lambda: expr(rng, depth - 1)  # noqa: E731
    if kind < 0.25:
        op = rng.choice(BINARY)
        if op in ("*", "**") and rng.random() < 0.5:
            return f"({sub()} * {rng.randint(0, 3)})"
        return f"({sub()} {op} {sub()})"
    if kind < 0.30:
        return f"({rng.randint(0, 5)} ** {rng.randint(0, 2)})"
    if kind < 0.36:
        return f"(not {sub()})" if rng.random() < 0.5 else f"(-{sub()})"
    if kind < 0.56:
        return f"({sub()} | {rng.choice(FILTERS)})"
    if kind < 0.66:
        return f"({sub()} is {'not ' if rng.random() < 0.3 else ''}{rng.choice(TESTS)})"
    if kind < 0.80:
        m = rng.choice(METHODS)
        return f"{sub()}.{m}" if not m[0].isdigit() else f"{sub()}[{m}]"
    if kind < 0.86:
        return f"{sub()}[{rng.choice(SUBSCRIPTS)}]"
    if kind < 0.92:
        return f"({sub()} if {sub()} else {sub()})"
    if kind < 0.96:
        return f"[{sub()}, {sub()}]"
    return f"{{'k': {sub()}, 'j': {sub()}}}"


def fuzzed(rng, count):
    out = []
    while len(out) < count:
        e = expr(rng, rng.randint(1, 3))
        shape = rng.random()
        if shape < 0.7:
            source = "{{ " + e + " }}"
        elif shape < 0.8:
            source = "{% if " + e + " %}T{% else %}F{% endif %}"
        elif shape < 0.9:
            source = "{% for x in " + e + " %}[{{ x }}]{% else %}empty{% endfor %}"
        else:
            source = "{% set v = " + e + " %}{{ v }}|{{ v | length }}|{{ v is string }}"
        out.append((source, CTX))
    return out


# ---- seeded whitespace-control fuzzer (the lexer) ------------------------------

WHITESPACE = [" ", "  ", "\t", "\n", "\n\n", " \n ", "\r\n", "\u3000", "\u00a0", "", "", "\n  \t", "\r"]
WORDS = ["a", "b c", "x", "é", "{", "}", "#", "%", "-", "+", "{ {", "text"]


def ws(rng):
    return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(0, 3)))


def tag(rng, body, kind="%"):
    signs = ["", "", "-", "+"] if kind != "{" else ["", "", "-"]
    close = {"%": "%}", "{": "}}", "#": "#}"}[kind]
    return "{" + kind + rng.choice(signs + (["+"] if kind == "{" else [])) + rng.choice([" ", "", "  "]) + body + \
        rng.choice([" ", "", "\n"]) + rng.choice(signs) + close


def layout(rng, depth):
    out = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.3:
            out.append(ws(rng) + rng.choice(WORDS) + ws(rng))
        elif r < 0.45:
            out.append(ws(rng) + tag(rng, rng.choice(["'v'", "1", "x", "' pad '", "l | length"]), "{") + ws(rng))
        elif r < 0.55:
            out.append(ws(rng) + tag(rng, rng.choice(["note", "-", " multi\nline "]), "#") + ws(rng))
        elif r < 0.75 and depth > 0:
            out.append(ws(rng) + tag(rng, rng.choice(["if true", "if false", "if x"])) + layout(rng, depth - 1) +
                       (ws(rng) + tag(rng, "else") + layout(rng, depth - 1) if rng.random() < 0.4 else "") +
                       ws(rng) + tag(rng, "endif") + ws(rng))
        elif r < 0.9 and depth > 0:
            out.append(ws(rng) + tag(rng, "for i in [1, 2]") + layout(rng, depth - 1) + ws(rng) + tag(rng, "endfor"))
        elif r < 0.95:
            out.append(ws(rng) + tag(rng, "set v = 1") + ws(rng))
        else:
            out.append(ws(rng) + tag(rng, "raw") + ws(rng) + "{{ kept }}" + ws(rng) + tag(rng, "endraw") + ws(rng))
    return "".join(out)


def whitespace_fuzzed(rng, count):
    return [(layout(rng, 2) + rng.choice(["", "\n", "\n\n", "\r\n"]), CTX) for _ in range(count)]


# ---- seeded statement fuzzer (loops, frames, macros) ---------------------------

ITERABLES = ["l", "ls", "msgs", "people", "d", "'abc'", "range(4)", "el", "mixed", "l | select('odd')",
             "msgs | selectattr('role', 'equalto', 'user')", "people | map(attribute='name')", "d | items",
             "d | dictsort", "nested", "l | reverse", "ls | unique"]
LOOP_EXPRS = ["x", "loop.index", "loop.index0", "loop.revindex", "loop.length", "loop.first", "loop.last",
              "loop.previtem", "loop.nextitem", "loop.cycle('a', 'b')", "loop.changed(x)", "x.role", "x['name']",
              "x | string | upper", "ns.n", "ns.s", "y", "x ~ y"]
CONDITIONS = ["x", "x is string", "ns.n < 2", "x != 1", "x is not none",
              "ns.s | length < 3", "x in l"]


def statement(rng, depth):
    r = rng.random()
    e = lambda: rng.choice(LOOP_EXPRS) if rng.random() < 0.6 else expr(rng, 1)  # noqa: E731
    if r < 0.25 or depth == 0:
        return "{{ " + e() + " }}"
    if r < 0.4:
        return "{% set ns.n = ns.n + 1 %}" if rng.random() < 0.5 else "{% set ns.s = ns.s ~ " + e() + " %}"
    if r < 0.5:
        return "{% set y = " + e() + " %}"
    if r < 0.65:
        return ("{% if " + e() + " %}" + body(rng, depth - 1) + ("{% elif " + e() + " %}" + body(rng, depth - 1)
                if rng.random() < 0.3 else "") + ("{% else %}" + body(rng, depth - 1) if rng.random() < 0.4 else "")
                + "{% endif %}")
    if r < 0.85:
        cond = " if " + rng.choice(CONDITIONS) if rng.random() < 0.4 else ""
        return ("{% for x in " + rng.choice(ITERABLES) + cond + " %}" + body(rng, depth - 1) +
                ("{% if " + e() + " %}{% break %}{% endif %}" if rng.random() < 0.2 else "") +
                ("{% else %}empty" if rng.random() < 0.3 else "") + "{% endfor %}")
    if r < 0.92:
        return "{{ m(" + e() + ") }}{{ m(" + e() + ", b=" + e() + ") }}"
    return "{% with y = " + e() + " %}" + body(rng, depth - 1) + "{% endwith %}"


def body(rng, depth):
    return "|".join(statement(rng, depth) for _ in range(rng.randint(1, 3)))


def statements_fuzzed(rng, count):
    out = []
    for _ in range(count):
        source = ("{% set ns = namespace(n=0, s='') %}{% macro m(a, b='d') %}<{{ a }}{{ b }}{{ y }}>{% endmacro %}"
                  + body(rng, 3) + "|{{ ns.n }}|{{ ns.s }}|{{ y }}")
        out.append((source, CTX))
    return out
