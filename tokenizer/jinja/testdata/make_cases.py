#!/usr/bin/env python3
"""Writes jinja2_cases.json: small templates rendered by Python's jinja2 configured as
transformers' apply_chat_template configures it (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; tojson = json.dumps(ensure_ascii=False);
raise_exception; strftime_now at a fixed moment). The Go tests compare package jinja's
renderings with these, byte for byte, and its errors with these errors.

Run with the jinja2 of the machine (3.1.x): python3 make_cases.py > jinja2_cases.json
The expected outputs are jinja2's, never this package's.
"""
import datetime
import json
import random
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime(2024, 7, 26, 0, 0, 0).strftime(fmt)


class Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker tag, {% generation %} ... {% endgeneration %}: when no
    assistant mask is asked for, the body renders as it is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, Generation])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
        {"role": "assistant", "content": "Hello!", "reasoning_content": None},
        {"role": "user", "content": "Tools?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather <b>&</b> \"more\" é",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer", "default": 3}, "f": {"type": "number", "default": 0.5}},
                                                           "required": ["city"]}}}]
D = {"b": 1, "a": [1, 2.5, None, True, "x'y"], "s": "Hello World", "n": 7, "f": -2.5, "e": [], "u": "  \u3000x\u00a0\t\n", "nested": {"k": {"z": [1, {"q": "w"}]}}}

DEFAULT_VARS = {"messages": MSGS, "d": D, "tools": TOOLS, "a": True, "n": 2}

# (name, template, vars); vars default to {"messages": MSGS, "d": D, "tools": TOOLS}.
PROBES = [
    # whitespace control, trim_blocks, lstrip_blocks
    ("ws_blocks", "{% if true %}\n  x\n{% endif %}\n  {% if true %}y{% endif %}\n{# c #}\nz  {%- if true -%}  w  {%+ if true %}q{% endif %}{% endif %}\n{{ 1 }}\n  {{ 2 }}\n", None),
    ("ws_start_lstrip", "   {% if true %}a{% endif %}\n  {# c #}  b", None),
    ("ws_minus_var", "a  \n {{- 'b' -}} \n  c", None),
    ("ws_plus_trim", "{% if true +%}\nx{% endif %}\n", None),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", None),
    ("ws_trailing_newlines", "x\n\n", None),
    ("ws_comment_minus", "a {#- c -#} b", None),
    ("raw", "{% raw %}{{ x }}{% if %}{% endraw %}|{%- raw -%}  y  {%- endraw -%}  |", None),
    ("string_escapes", "{{ 'a\\tb\\n\\x41\\u00e9\\101\\q\\\\' }}|{{ \"it's\" }}|{{ 'say \"hi\"' }}|{{ 'ab' 'cd' }}", None),
    ("string_newline_literal", "{{ 'a\nb' }}", None),
    # printing values
    ("print_values", "{{ d }}|{{ d.a }}|{{ none }}|{{ true }}|{{ (1, 'a') }}|{{ (1,) }}|{{ d.items() | list }}|{{ [] }}|{{ {} }}", None),
    ("print_floats", "{{ 1/2 }} {{ 1e20 }} {{ 1.0e16 }} {{ 1e15 }} {{ 0.1+0.2 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 3.0 }} {{ 2.5e-7 }} {{ 123456789.125 }}", None),
    ("print_repr_strings", "{{ ['a\\nb', \"q'\", 'd\"q', \"both'\\\"\", '\\t\\x01\\x7f\\u00a0é😀\\u200b'] }}", None),
    # arithmetic and comparisons
    ("arith", "{{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 10 / 4 }} {{ 7 % 2.5 }} {{ 5 // 2.0 }} {{ 1 + true }} {{ 3 - 1.5 }}", None),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ 2.0 ~ undefined_x }}|{{ [1] + [2, 3] }}|{{ 'ab' * 3 }}|{{ 3 * 'x' }}|{{ [0] * 2 }}", None),
    ("compare", "{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1,2] == [1,2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'B' < 'a' }} {{ [1,2] < [1,3] }} {{ none == none }} {{ 1 != '1' }} {{ true == 1 }}", None),
    ("membership", "{{ 'x' in 'xyz' }} {{ 1 in [1] }} {{ 'a' in {'a': 1} }} {{ 2 not in [1] }} {{ 'b' not in d }} {{ 'q' in d.nested.k.z[1] }}", None),
    ("logic", "{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ not 0 }}|{{ none or [] }}|{{ '' and 1 }}|{{ not (1 and 0) }}", None),
    ("condexpr", "{{ 'a' if true else 'b' }}{{ 'a' if false else 'b' }}[{{ 'a' if false }}]{{ (1 if false) is defined }}{{ 'x' if 0 else 'y' if 1 else 'z' }}", None),
    # subscripts and slices
    ("subscript", "{{ messages[0].role }}{{ messages[-1]['content'] }}{{ d['a'][1] }}{{ d.a.1 }}{{ 'héllo'[1] }}{{ 'abc'[-1] }}", None),
    ("slices", "{{ 'abcdef'[1:4] }}|{{ 'abcdef'[::-1] }}|{{ 'abcdef'[::2] }}|{{ [1,2,3,4][1:] }}|{{ [1,2,3,4][:-1] }}|{{ [1,2,3,4][-2:] }}|{{ [1,2,3][5:] }}|{{ 'abc'[-10:2] }}|{{ [1,2,3,4,5][4:0:-2] }}|{{ messages[1:]|length }}", None),
    ("missing", "[{{ d.zz }}][{{ messages[9] }}][{{ d['nope'] }}][{{ messages[0].nope }}][{{ nothing }}]{{ nothing is defined }}{{ d.zz is undefined }}", None),
    # statements
    ("set_scoping", "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = i + 10 %}{{ x }};{% endfor %}{{ x }}", None),
    ("set_loop_accum", "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", None),
    ("set_if_toplevel", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}", None),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 3, 4 %}{{ c }}", None),
    ("set_block", "{% set t %}in {{ 1 }}\n{% endset %}[{{ t }}]{% set u | upper %}abc{% endset %}{{ u }}", None),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s + m.role[0] %}{% endfor %}{{ ns.n }}{{ ns.s }}", None),
    ("namespace_empty", "{% set ns = namespace() %}{% set ns.x = 3 %}{{ ns.x }}{{ ns.y is defined }}", None),
    ("for_loopvars", "{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem.role if loop.previtem is defined }}{{ loop.nextitem is defined }};{% endfor %}", None),
    ("for_filter_else", "{% for x in [1,2,3] if x > 1 %}{{ loop.index }}{{ x }}{% else %}none{% endfor %}|{% for x in [] %}y{% else %}none{% endfor %}|{% for x in undefined_thing %}z{% endfor %}", None),
    ("for_dict_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'ab' %}{{ c }}.{% endfor %}", None),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", None),
    ("for_nested_loop", "{% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}", None),
    ("for_cycle_changed", "{% for x in [1,1,2,2,3] %}{{ loop.cycle('a','b') }}{{ loop.changed(x) }}{% endfor %}", None),
    ("for_recursive", "{% for item in [{'n': 'a', 'c': [{'n': 'b', 'c': []}]}] recursive %}<{{ item.n }}{{ loop.depth }}{{ loop(item.c) }}>{% endfor %}", None),
    ("macro", "{% macro m(a, b=2) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{% set c = 5 %}{{ m(1) }}{{ m(1, b=3) }}{{ m(b=4, a=0) }}", None),
    ("macro_varargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, z=4) }}", None),
    ("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", None),
    ("with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}", None),
    ("generation_tag", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% endif %}{% endfor %}", None),
    # filters
    ("filters_string", "{{ '  x '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hello world-wide (x)'|title }}|{{ 'hELLO'|capitalize }}|{{ 'abc'|replace('b','X') }}|{{ 'aaa'|replace('a','b',2) }}|{{ 'a'|upper }}|{{ 'AbC'|lower }}|{{ 'x'|center(5) }}|{{ 'hello'|indent(2) }}|{{ 'a\\nb\\n\\nc'|indent(2, true) }}|{{ 'a\\nb'|indent('> ', blank=true) }}|{{ 'one two  three'|wordcount }}|{{ 'hello world foo'|truncate(9) }}|{{ 'x<&>\\'\"'|e }}|{{ 'a'|safe }}", None),
    ("filters_trim_unicode", "[{{ d.u|trim }}][{{ ' \\x1c\\x1f\\x85x\\ufeff'|trim }}][{{ '\\u2003y\\u200b'|trim }}]", None),
    ("filters_list", "{{ [3,1,2]|sort }} {{ ['b','A','a']|unique|list }} {{ ['b','A','a']|sort }} {{ ['b','A','a']|sort(case_sensitive=true) }} {{ [3,1,2]|sort(reverse=true) }} {{ messages|sort(attribute='role')|map(attribute='content')|join(',') }} {{ [1,2,3]|sum }} {{ [1,2,3]|max }} {{ ['a','B']|min }} {{ [1,2]|first }}{{ [1,2]|last }}{{ 'ab'|list }}{{ [1,2]|reverse|list }}{{ 'ab'|reverse }}{{ []|first is defined }}", None),
    ("filters_select", "{{ messages|map(attribute='role')|list }}|{{ messages|selectattr('role','equalto','user')|list|length }}|{{ messages|rejectattr('role','eq','user')|map(attribute='role')|join }}|{{ [1,none,0,2]|select|list }}|{{ [1,2,3]|reject('odd')|list }}|{{ messages|selectattr('reasoning_content','none')|list|length }}|{{ messages|selectattr('reasoning_content')|list|length }}|{{ [1,2]|map('string')|join('-') }}|{{ messages|map(attribute='x', default='dflt')|list }}", None),
    ("filters_dict", "{{ d|dictsort }}|{{ d|items|list|length }}|{{ {'b':1,'a':2}|dictsort(by='value', reverse=true) }}|{{ d|length }}|{{ d|list }}", None),
    ("filters_numbers", "{{ 1.5|int }}{{ '3.7'|int }}{{ 'x'|int }}{{ 'x'|int(5) }}{{ '12'|float }}{{ 2.5|round }}{{ 3.5|round }}{{ -2.5|round }}{{ 2.567|round(2) }}{{ 2.1|round(0,'ceil') }}{{ -3|abs }}{{ '0x1A'|int(base=16) }}{{ 7|string|length }}", None),
    ("filters_default", "{{ nothing|default('x') }}{{ ''|default('y') }}{{ ''|default('y', true) }}{{ none|d('z') }}{{ 0|default(1, boolean=true) }}", None),
    ("filters_length", "{{ 'héllo😀'|length }}{{ [1,2]|count }}{{ d|length }}{{ nothing|length }}", None),
    ("filters_format", "{{ '%s-%d'|format('a', 3) }}|{{ '%5.2f|%-3s|%r|%03d' % (3.14159, 'a', 'b', 7) }}|{{ '%s' % 'x' }}|{{ '%(a)s' % {'a': 1} }}|{{ '100%%' % () }}", None),
    ("tojson", "{{ d|tojson }}|{{ tools|tojson }}|{{ 'x\"\\\\\\n\\t\\u0001é'|tojson }}|{{ 1.0|tojson }}{{ none|tojson }}{{ [1, 2.5e-7, 1e20]|tojson }}|{{ d.e|tojson(indent=2) }}|{{ {'a': []}|tojson(indent=2) }}", None),
    ("tojson_indent", "{{ d|tojson(indent=2) }}\n{{ tools|tojson(indent=4) }}\n{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}", None),
    # tests
    ("tests", "{{ 'abc' is string }}{{ none is none }}{{ [1] is iterable }}{{ {} is mapping }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is lower }}{{ 'A' is upper }}{{ false is sameas false }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 1 is in [1] }}{{ d is sequence }}{{ range is callable }}{{ 'x' is not string }}{{ nothing is iterable }}{{ true is true }}{{ 0 is false }}", None),
    ("test_no_parens", "{{ 3 is divisibleby(3) }}{{ 'a' is in 'abc' }}{{ messages[0].content is string and true }}", None),
    # methods
    ("str_methods", "{{ 'x'.upper() }}|{{ 'a,b'.split(',')|join('+') }}|{{ '  a  '.strip() }}|{{ 'xxa'.lstrip('x') }}|{{ 'axx'.rstrip('x') }}|{{ 'abc'.replace('b','') }}|{{ 'abcb'.find('b') }}|{{ 'abcb'.rfind('b') }}|{{ 'éab'.find('a') }}|{{ 'aaa'.count('a') }}|{{ 'ab'.endswith('b') }}|{{ 'ab'.startswith(('x','a')) }}|{{ ' a b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'hello world'.title() }}|{{ 'hi'.capitalize() }}|{{ '-'.join(['a','b']) }}|{{ '{} {}'.format(1, 'b') }}|{{ '{0}-{name}'.format(1, name='n') }}|{{ '12'.isdigit() }}|{{ '7'.zfill(3) }}", None),
    ("dict_methods", "{{ d.get('n') }}{{ d.get('zz') }}{{ d.get('zz', 'dflt') }}{{ d.keys()|list }}{{ d.values()|list|length }}{{ d.nested.k.items()|list }}", None),
    ("list_methods", "{{ [1,2,3].index(2) }}{{ [1,1,2].count(1) }}", None),
    ("globals", "{{ range(3)|list }}{{ range(1,10,3)|list }}{{ range(5,0,-2)|list }}{{ dict(a=1, b='x') }}{{ dict([('k', 'v')]) }}{{ namespace(a=1).a }}{{ strftime_now('%d %b %Y %B %A %H:%M') }}{% set j = joiner('|') %}{% for x in 'abc' %}{{ j() }}{{ x }}{% endfor %}", None),
    ("content_parts", "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.type }}:{{ p.text }};{% endfor %}{% endif %}{% endfor %}",
     {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]}, {"role": "user", "content": "plain"}]}),
    # errors
    ("err_raise", "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% endfor %}", None),
    ("err_raise_alternate", "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% endfor %}ok",
     {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}),
    ("err_raise_formatted", "{{ raise_exception('Unknown role: ' + messages[0].role + ' (' ~ messages|length ~ ')') }}", None),
    ("err_undefined_attr", "{{ d.zz.yy }}", None),
    ("err_undefined_elem", "{{ messages[5].x }}", None),
    ("err_undefined_name_attr", "{{ nothing.x }}", None),
    ("err_undefined_add", "{{ nothing + 1 }}", None),
    ("err_type_add", "{{ 'a' + 1 }}", None),
    ("err_unsafe_update", "{{ d.update({}) }}", None),
    ("err_unsafe_append", "{% set l = [] %}{{ l.append(1) }}", None),
    ("err_tojson_undefined", "{{ nothing|tojson }}", None),
    ("err_syntax_endfor", "{% for x in y %}{{ x }}", None),
    ("err_syntax_expr", "line1\n{{ 1 + }}", None),
    ("err_unknown_filter", "{{ 1|nosuchfilter }}", None),
    ("err_unknown_tag", "{% frobnicate %}", None),
    ("err_setattr_non_ns", "{% set x = 1 %}{% set x.y = 2 %}", None),
    ("err_div_zero", "{{ 1 // 0 }}", None),
    ("err_not_iterable", "{% for x in 5 %}{% endfor %}", None),
    ("unsafe_print", "[{{ d.update }}]", None),
]


# Random nestings of if/for/set/comments/output tags with every whitespace control ("-", "+",
# none) between runs of spaces, tabs and newlines: trim_blocks and lstrip_blocks in all their
# combinations.
WS = [" ", "  ", "\t", "\n", " \n", "\n  ", "\n\t ", "\r\n", "", "", "x", "y z", "\n\n"]

def tag(kind, body):
    l = rng.choice(["", "", "-", "+"])
    r = rng.choice(["", "", "-", "+"])
    if kind == "{{":
        l = l if l != "+" else ""
        r = r if r != "+" else ""
        return "{{" + l + " " + body + " " + r + "}}"
    if kind == "{#":
        return "{#" + l + " c " + r + "#}"
    return "{%" + l + " " + body + " " + r + "%}"

def block(depth):
    out = []
    for _ in range(rng.randint(1, 5)):
        out.append(rng.choice(WS))
        k = rng.random()
        if k < 0.25:
            out.append(tag("{{", rng.choice(["a", "'s'", "n", "loop.index if loop is defined else 0"])))
        elif k < 0.35:
            out.append(tag("{#", ""))
        elif k < 0.55 and depth < 3:
            out.append(tag("{%", rng.choice(["if a", "if not a", "if n > 1"])))
            out.append(block(depth + 1))
            if rng.random() < 0.4:
                out.append(rng.choice(WS)); out.append(tag("{%", "else")); out.append(block(depth + 1))
            out.append(rng.choice(WS)); out.append(tag("{%", "endif"))
        elif k < 0.7 and depth < 3:
            out.append(tag("{%", "for i in range(2)"))
            out.append(block(depth + 1))
            out.append(rng.choice(WS)); out.append(tag("{%", "endfor"))
        elif k < 0.8:
            out.append(tag("{%", "set q = 1"))
        else:
            out.append(rng.choice(WS))
    out.append(rng.choice(WS))
    return "".join(out)


def random_probes(n, seed=1):
    global rng
    rng = random.Random(seed)
    return [("ws_random_%d" % i, block(0), None) for i in range(n)]


def render(src, vars):
    try:
        return {"rendered": env.from_string(src).render(**vars)}
    except TemplateError as e:
        if type(e) is TemplateError:
            return {"error": str(e), "error_type": "raise_exception"}
        return {"error": str(e), "error_type": type(e).__name__}
    except Exception as e:
        return {"error": str(e), "error_type": type(e).__name__}


def main():
    out = []
    for name, src, vars in PROBES + random_probes(100):
        case = {"name": name, "template": src}
        if vars is not None:
            case["vars"] = vars
        case.update(render(src, vars if vars is not None else DEFAULT_VARS))
        out.append(case)
    json.dump({"generator": "make_cases.py, Python jinja2 %s" % jinja2.__version__,
               "default_vars": DEFAULT_VARS, "cases": out}, sys.stdout, ensure_ascii=False, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
