// Chat templates: each construct on hand-written templates (expected strings checked against
// Python's jinja2 as transformers configures it), errors that name the construct and its line,
// and LoadChatTemplate on tokenizer_config.json variants.
#include "text/chat/chat_template.h"

#include "tests/test_util.h"

namespace tpserve {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// Renders `source` with `vars` (messages defaults to []), returning the text or "ERROR: message".
std::string Render(const std::string& source, json vars = json::object(),
                   bool add_generation_prompt = false) {
  auto compiled = ChatTemplate::Compile(source, "<s>", "</s>");
  if (!compiled.ok()) return "COMPILE ERROR: " + compiled.status().message();
  if (vars.is_null()) vars = json::object();
  json messages = vars.contains("messages") ? vars["messages"] : json::array();
  vars.erase("messages");
  auto rendered = compiled->Render(messages, add_generation_prompt, vars);
  if (!rendered.ok()) return "ERROR: " + rendered.status().message();
  return rendered->text;
}

std::string CompileError(const std::string& source) {
  auto compiled = ChatTemplate::Compile(source, "", "");
  return compiled.ok() ? "compiled" : compiled.status().message();
}

TEST(ChatTemplateTest, TextAndWhitespaceControl) {
  EXPECT_EQ(Render("hello"), "hello");
  EXPECT_EQ(Render("a\n"), "a");  // one trailing newline is dropped
  EXPECT_EQ(Render("a\r\nb"), "a\nb");
  // trim_blocks takes the newline after a block tag; lstrip_blocks the indentation before one.
  EXPECT_EQ(Render("{% if true %}\n  x\n{% endif %}\ny"), "  x\ny");
  EXPECT_EQ(Render("a\n    {% if true %}b{% endif %}"), "a\nb");
  EXPECT_EQ(Render("a  {%+ if true %}b{% endif %}"), "a  b");
  EXPECT_EQ(Render("a  {{ 'b' }}  \n c"), "a  b  \n c");
  EXPECT_EQ(Render("a \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(Render("a {#- comment -#} b"), "ab");
  EXPECT_EQ(Render("{# comment #}\nx"), "x");
  EXPECT_EQ(Render("{% if true -%}\n\n  x  {%- endif %}"), "x");
  EXPECT_EQ(Render("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(ChatTemplateTest, Literals) {
  EXPECT_EQ(Render("{{ 'a' \"b\" }}{{ 1 }}{{ 1.5 }}{{ 1_000 }}{{ 2e3 }}{{ true }}{{ none }}"),
            "ab11.510002000.0TrueNone");
  EXPECT_EQ(Render("{{ [1, 'a', none, true] }}{{ {'a': 1} }}{{ (1,) }}{{ (1, 2) }}"),
            "[1, 'a', None, True]{'a': 1}(1,)(1, 2)");
  EXPECT_EQ(Render("{{ 'tab\\there\\n\\u00e9\\x41' }}"),
            "tab\there\n\xc3\xa9"
            "A");
  EXPECT_EQ(Render("{{ \"it's\" }}{{ [\"it's\"] }}"), "it's[\"it's\"]");
  EXPECT_EQ(Render("{{ 1e100 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 1e15 }}"),
            "1e+100 0.30000000000000004 1e-05 1e+16 1000000000000000.0");
}

TEST(ChatTemplateTest, Arithmetic) {
  EXPECT_EQ(Render("{{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 2 ** 10 }} "
                   "{{ 4 / 2 }}"),
            "1 2 3.5 3 -4 1024 2.0");
  EXPECT_EQ(Render("{{ 'ab' * 3 }}{{ 1 + true }}{{ -(3) }}{{ 'a' ~ 1 ~ none ~ x }}"),
            "ababab2-3a1None");
  EXPECT_EQ(Render("{{ [1] + [2] }}"), "[1, 2]");
  EXPECT_THAT(Render("{{ 'a' + 1 }}"), HasSubstr("ERROR"));
  EXPECT_THAT(Render("{{ 1 / 0 }}"), HasSubstr("division by zero"));
  EXPECT_THAT(Render("{{ x + 1 }}"), HasSubstr("'x' is undefined"));
  EXPECT_THAT(Render("{{ 9223372036854775807 + 1 }}"), HasSubstr("integer overflow"));
}

TEST(ChatTemplateTest, ComparisonsAndLogic) {
  EXPECT_EQ(
      Render(
          "{{ 1 < 2 < 3 }}{{ 1 == 1.0 }}{{ 'a' in 'cat' }}{{ 2 not in [1] }}{{ 'k' in {'k': 1} }}"),
      "TrueTrueTrueTrueTrue");
  EXPECT_EQ(Render("{{ 0 or 'x' }}{{ 1 and 'y' }}{{ not '' }}{{ [] or none }}"), "xyTrueNone");
  EXPECT_EQ(Render("{{ 'yes' if 1 > 2 else 'no' }}[{{ 'a' if false }}]"), "no[]");
  EXPECT_EQ(Render("{{ {'a': [1, {'b': 2}]} == {'a': [1, {'b': 2}]} }}{{ [1] == (1,) }}"),
            "TrueFalse");
  EXPECT_THAT(Render("{{ 'a' < 1 }}"), HasSubstr("ERROR"));
}

TEST(ChatTemplateTest, UndefinedBehavesAsJinja) {
  EXPECT_EQ(Render("[{{ x }}]{{ x is defined }}{{ x|length }}{% for a in x %}a{% endfor %}{{ x == "
                   "y }}{{ x|default('d') }}"),
            "[]False0Trued");
  EXPECT_EQ(
      Render("{{ d.missing is defined }}{{ d['missing'] is defined }}", {{"d", json::object()}}),
      "FalseFalse");
  EXPECT_THAT(Render("{{ x.y }}"), HasSubstr("'x' is undefined"));
  EXPECT_THAT(Render("{{ d.missing.deeper }}", {{"d", json::object()}}),
              HasSubstr("has no attribute 'missing'"));
  EXPECT_EQ(Render("{{ s.content is defined }}", {{"s", "text"}}), "False");
}

TEST(ChatTemplateTest, Loops) {
  EXPECT_EQ(
      Render(
          "{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
          "{{ loop.length }}{{ loop.revindex }}|{% endfor %}"),
      "10TrueFalse33|21FalseFalse32|32FalseTrue31|");
  EXPECT_EQ(Render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(
      Render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"),
      "2/2 4/2 ");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  EXPECT_EQ(Render("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][\xc3\xa9]");
  EXPECT_EQ(Render("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == "
                   "4 %}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(
      Render("{% for x in [1, 2] %}{{ loop.previtem is defined }}{{ loop.nextitem }}{% endfor %}"),
      "False2True");
  EXPECT_THAT(Render("{% for x in none %}{% endfor %}"), HasSubstr("not iterable"));
}

TEST(ChatTemplateTest, ScopingAndNamespace) {
  // A loop body's assignments stay in the loop (and each iteration starts from the outer value).
  EXPECT_EQ(
      Render("{% set a = 'o' %}{% for i in [1, 2] %}[{{ a }}]{% set a = i %}{% endfor %}{{ a }}"),
      "[o][o]o");
  EXPECT_EQ(Render("{% if true %}{% set a = 1 %}{% endif %}{{ a }}"), "1");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i "
                   "%}{% endfor %}"
                   "{{ ns.n }}{{ ns }}"),
            "6<Namespace {'n': 6}>");
  EXPECT_EQ(Render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(Render("{% set block %}x{{ 1 + 1 }}{% endset %}[{{ block }}]"), "[x2]");
  EXPECT_THAT(Render("{% set x = 1 %}{% set x.y = 2 %}"), HasSubstr("non-namespace"));
}

TEST(ChatTemplateTest, Macros) {
  EXPECT_EQ(
      Render(
          "{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(1, b=3) }} {{ f() }}"),
      "1-2 1-3 -2");
  EXPECT_THAT(Render("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}"),
              HasSubstr("takes not more than 1"));
  EXPECT_THAT(Render("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}"),
              HasSubstr("nested too deeply"));
}

TEST(ChatTemplateTest, SubscriptsAndSlices) {
  const json vars = {{"l", {1, 2, 3}}, {"d", {{"a", 1}, {"items", 5}}}, {"s", "héllo"}};
  EXPECT_EQ(Render("{{ l[0] }}{{ l[-1] }}[{{ l[9] }}]{{ l[1:] }}{{ l[::-1] }}{{ l[:-1] }}{{ l.1 }}",
                   vars),
            "13[][2, 3][3, 2, 1][1, 2]2");
  EXPECT_EQ(Render("{{ s[1] }}{{ s[::-1] }}{{ s[1:3] }}{{ s|length }}", vars),
            "\xc3\xa9oll\xc3\xa9\x68\xc3\xa9l5");
  EXPECT_EQ(Render("{{ d.a }}{{ d['items'] }}{{ d.get('zz', 7) }}{{ d.get('a') }}{{ d.get('zz') }}",
                   vars),
            "1571None");
  EXPECT_EQ(Render("{{ d.keys()|list }}{{ d.values()|list }}", vars), "['a', 'items'][1, 5]");
}

TEST(ChatTemplateTest, Filters) {
  const json vars = {{"users", {{{"name", "b"}, {"age", 2}}, {{"name", "a"}, {"age", 1}}}}};
  EXPECT_EQ(
      Render("{{ '  x  '|trim }}{{ 'ab'|upper }}{{ 'AB'|lower }}{{ 'hello world'|capitalize }}"
             "{{ 'hello-world x'|title }}"),
      "xABabHello worldHello-World X");
  EXPECT_EQ(
      Render("{{ [1, 2]|length }}{{ [3, 1, 2]|first }}{{ [3, 1, 2]|last }}{{ [1, 2]|join('-') }}"
             "{{ 3|string }}{{ '42'|int + 1 }}{{ 'x'|int }}{{ 'abc'|list }}"),
      "2321-23430['a', 'b', 'c']");
  EXPECT_EQ(
      Render("{{ 'aXbX'|replace('X', '_') }}{{ none|default('d') }}{{ ''|default('d', true) }}"),
      "a_b_Noned");
  EXPECT_EQ(Render("{{ users|selectattr('age', 'equalto', 1)|map(attribute='name')|list }}"
                   "{{ users|rejectattr('age', 'gt', 1)|list|length }}{{ "
                   "users|sort(attribute='name')|map(attribute='age')|join }}"
                   "{{ [1, 2, 3]|select('odd')|list }}{{ [1, 2, 3]|reject('equalto', 2)|list }}",
                   vars),
            "['a']112[1, 3][1, 3]");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 2}|items|list }}{{ {'b': 1, 'a': 2}|dictsort }}{{ [2, 1, "
                   "2]|unique|list }}"
                   "{{ ['b', 'A']|sort }}{{ [1, 5, 2]|max }}{{ [1, 2]|reverse|list }}{{ -3|abs }}"),
            "[('b', 1), ('a', 2)][('a', 2), ('b', 1)][2, 1]['A', 'b']5[2, 1]3");
  EXPECT_THAT(Render("{{ [1]|map('string')|tojson }}"),
              HasSubstr("generator is not JSON serializable"));
  EXPECT_EQ(Render("{{ none|selectattr('a')|list }}"), "[]");
}

TEST(ChatTemplateTest, ToJsonIsJsonDumpsWithoutAsciiEscaping) {
  const json vars = {{"v", {{"b", "é<\"\n"}, {"a", {1, 2.5, nullptr, true}}}}};
  EXPECT_EQ(Render("{{ v|tojson }}", vars),
            "{\"a\": [1, 2.5, null, true], \"b\": \"\xc3\xa9<\\\"\\n\"}");
  EXPECT_EQ(Render("{{ [1, {}]|tojson(indent=2) }}"), "[\n  1,\n  {}\n]");
  EXPECT_EQ(Render("{{ {'k': 'é'}|tojson(ensure_ascii=true, separators=(',', ':')) }}"),
            "{\"k\":\"\\u00e9\"}");
  EXPECT_THAT(Render("{{ x|tojson }}"), HasSubstr("ERROR"));
}

TEST(ChatTemplateTest, SafeStringsEscapeTheirPlainOperand) {
  // Jinja's Markup: `+` with a plain string HTML-escapes the plain side (as transformers renders).
  EXPECT_EQ(Render("{{ 'a<' + ('<b>'|safe) }}|{{ ('<b>'|safe) + '<' }}|{{ ('<b>'|safe) ~ '<' }}"),
            "a&lt;<b>|<b>&lt;|<b><");
}

TEST(ChatTemplateTest, StringMethods) {
  EXPECT_EQ(Render("{{ ' x '.strip() }}{{ 'xxa'.lstrip('x') }}{{ 'a  '.rstrip() }}{{ "
                   "'abc'.startswith('ab') }}"
                   "{{ 'abc'.endswith(('x', 'c')) }}{{ 'a b  c'.split() }}{{ 'a,b'.split(',') }}{{ "
                   "'a,b,c'.rsplit(',', 1) }}"
                   "{{ 'hello world'.title() }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ "
                   "'aXa'.replace('a', 'b') }}"),
            "xaaTrueTrue['a', 'b', 'c']['a', 'b']['a,b', 'c']Hello WorldABabbXb");
  EXPECT_EQ(Render("{{ '\xe3\x80\x80x\xc2\xa0'.strip() }}"), "x");  // Python's Unicode whitespace
}

TEST(ChatTemplateTest, Tests) {
  EXPECT_EQ(Render("{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 1 is number }}{{ "
                   "none is none }}"
                   "{{ 3 is odd }}{{ 4 is divisibleby 2 }}{{ x is undefined }}{{ 1 is not string "
                   "}}{{ true is boolean }}"
                   "{{ 'a' is sequence }}{{ 1.5 is float }}{{ 1 is integer }}{{ 'ab' is lower }}{{ "
                   "2 is gt(1) }}"),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
}

TEST(ChatTemplateTest, GlobalsAndFunctions) {
  EXPECT_EQ(Render("{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}", {}, true),
            "<s></s>True");
  EXPECT_EQ(Render("{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ dict(a=1) }}{{ tools }}",
                   {{"tools", nullptr}}),
            "[0, 1, 2][1, 3, 5]{'a': 1}None");
  EXPECT_EQ(Render("{{ raise_exception('bad role') }}"), "ERROR: chat_template: bad role");
  EXPECT_THAT(Render("{{ range(100001)|length }}"), HasSubstr("range too big"));
  auto compiled = ChatTemplate::Compile("{{ strftime_now('%Y-%m-%d %b') }}", "", "");
  ASSERT_TRUE(compiled.ok());
  compiled->set_clock([] { return std::time_t{86400 * 365}; });
  setenv("TZ", "UTC", 1);
  auto rendered = compiled->Render(json::array(), false);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(rendered->text, "1971-01-01 Jan");
}

TEST(ChatTemplateTest, UnsupportedConstructsAreNamedWithTheirLine) {
  EXPECT_EQ(CompileError("a\n\n{{ x|xmlattr }}"),
            "chat_template line 3: filter 'xmlattr' is not supported");
  EXPECT_EQ(CompileError("{% include 'x' %}"),
            "chat_template line 1: tag 'include' is not supported");
  EXPECT_EQ(CompileError("\n{% generation %}x{% endgeneration %}"),
            "chat_template line 2: tag 'generation' is not supported");
  EXPECT_EQ(CompileError("{{ x is callable }}"),
            "chat_template line 1: test 'callable' is not supported");
  EXPECT_EQ(CompileError("{{ '{}'.format(1) }}"),
            "chat_template line 1: method 'format' is not supported");
  EXPECT_EQ(CompileError("{% set l = [] %}\n{% do l.append(1) %}"),
            "chat_template line 2: tag 'do' is not supported");
  EXPECT_EQ(CompileError("{{ l.append(1) }}"),
            "chat_template line 1: method 'append' is not supported");
  EXPECT_EQ(CompileError("{{ lipsum() }}"),
            "chat_template line 1: function 'lipsum' is not supported");
  EXPECT_EQ(CompileError("{{ f(*args) }}"),
            "chat_template line 1: operator '*' in call arguments is not supported");
  EXPECT_EQ(CompileError("{% for x in y recursive %}{% endfor %}"),
            "chat_template line 1: recursive loops are not supported");
  EXPECT_EQ(CompileError("{% macro m() %}{% endmacro %}{{ m() }}"), "compiled");
}

TEST(ChatTemplateTest, SyntaxErrors) {
  EXPECT_THAT(CompileError("{% if x %}"), HasSubstr("unexpected end of template"));
  EXPECT_THAT(CompileError("{{ x"), HasSubstr("unexpected end of template"));
  EXPECT_THAT(CompileError("{{ (x }}"), HasSubstr("line 1"));
  EXPECT_THAT(CompileError("{% endif %}"), HasSubstr("unexpected 'endif'"));
  EXPECT_THAT(CompileError("{# open"), HasSubstr("missing end of comment"));
  EXPECT_THAT(CompileError("{% break %}"), HasSubstr("outside of a loop"));
  EXPECT_THAT(CompileError("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"),
              HasSubstr("nested too deeply"));
}

TEST(ChatTemplateTest, Limits) {
  EXPECT_THAT(Render("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set "
                     "ns.s = ns.s ~ ns.s %}"
                     "{% endfor %}"),
              HasSubstr("ERROR"));
  EXPECT_THAT(
      Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
      HasSubstr("too many steps"));
  EXPECT_THAT(Render("{% set ns = namespace() %}{% set ns.a = ns %}"),
              HasSubstr("namespace cannot hold"));
  json deep = json::array();
  for (int i = 0; i < 100; ++i) deep = json::array({deep});
  EXPECT_THAT(Render("{{ messages }}", {{"messages", deep}}), HasSubstr("nested deeper"));
}

TEST(ChatTemplateTest, KeepsRequestKeyOrderWithOrderedJson) {
  auto compiled = ChatTemplate::Compile(
      "{{ messages[0]|tojson }}{% for k in messages[0] %}{{ k }}{% endfor %}", "", "");
  ASSERT_TRUE(compiled.ok());
  auto rendered =
      compiled->Render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])"),
                       false, nlohmann::ordered_json::object());
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(rendered->text, "{\"role\": \"user\", \"content\": \"x\"}rolecontent");
}

TEST(LoadChatTemplateTest, StringListMissingAndMalformed) {
  testing::TempDir dir;
  EXPECT_FALSE(LoadChatTemplate(dir.path()).value().has_value());  // no tokenizer_config.json

  testing::WriteFile(dir.file("tokenizer_config.json"), R"({"bos_token": "<s>"})");
  EXPECT_FALSE(LoadChatTemplate(dir.path()).value().has_value());  // no chat_template

  testing::WriteFile(dir.file("tokenizer_config.json"),
                     R"({"chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
                         "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})");
  auto loaded = LoadChatTemplate(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE(loaded->has_value());
  auto rendered = (*loaded)->Render(json::array({{{"role", "user"}, {"content", "hi"}}}), false);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(rendered->text, "<s>hi</s>");

  testing::WriteFile(
      dir.file("tokenizer_config.json"),
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  loaded = LoadChatTemplate(dir.path());
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  EXPECT_EQ((*loaded)->Render(json::array(), false)->text, "D");

  testing::WriteFile(dir.file("tokenizer_config.json"),
                     R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_THAT(LoadChatTemplate(dir.path()).status().message(),
              HasSubstr("no template named 'default'"));
  testing::WriteFile(dir.file("tokenizer_config.json"), R"({"chat_template": 5})");
  EXPECT_THAT(LoadChatTemplate(dir.path()).status().message(),
              HasSubstr("field 'chat_template' must be"));
  testing::WriteFile(dir.file("tokenizer_config.json"),
                     R"({"chat_template": "x", "eos_token": 3})");
  EXPECT_THAT(LoadChatTemplate(dir.path()).status().message(), HasSubstr("field 'eos_token'"));
  testing::WriteFile(dir.file("tokenizer_config.json"), "{not json");
  EXPECT_THAT(LoadChatTemplate(dir.path()).status().message(),
              HasSubstr("tokenizer_config.json: not valid JSON ("));
  testing::WriteFile(dir.file("tokenizer_config.json"), "[]");
  EXPECT_THAT(LoadChatTemplate(dir.path()).status().message(),
              HasSubstr("tokenizer_config.json: not a JSON object"));
  testing::WriteFile(dir.file("tokenizer_config.json"), R"({"chat_template": "{{ x|xmlattr }}"})");
  EXPECT_EQ(LoadChatTemplate(dir.path()).status().message(),
            dir.file("tokenizer_config.json") +
                ": field 'chat_template': chat_template line 1: filter 'xmlattr' is not supported");
}

}  // namespace
}  // namespace tpserve
