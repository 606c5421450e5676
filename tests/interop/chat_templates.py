"""Chat templates rendered by transformers (render_jinja_template, what apply_chat_template runs) for
lowbit's Jinja renderer to match.

Templates: Qwen2.5's and Qwen3's real ones (../shared/tokenizers/hf, by path) and small ones written
here for the constructs those do not use (Llama-3-, Mistral- and Gemma-style role handling, raise_exception,
filters, tests, slices, dict methods, loop variables, whitespace control without trim, and GPT-OSS-style macros). Conversations:
one user turn, a system prompt, several turns, Qwen3 reasoning in <think>, tool calls and results,
with and without the generation prompt, and enable_thinking=false.

    --write     writes tests/data/chat_template_cases.json, which `make test` checks without Python
    (default)   renders again with the pinned transformers and checks the committed file still holds;
                then `lowbit tokenize --chat` against transformers' apply_chat_template(tokenize=True) on a
                folder holding Phi-3.5's tokenizer.json and each real template: same prompt text, same ids.
"""
import argparse
import json
import os
import sys

from transformers.utils.chat_template_utils import render_jinja_template

sys.path.insert(0, os.path.dirname(__file__))
from common import check, failures, lowbit_json, print_table, scratch_folder  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SHARED_HF = os.path.join(ROOT, "..", "shared", "tokenizers", "hf")
FIXTURE = os.path.join(ROOT, "tests", "data", "chat_template_cases.json")

TEMPLATES = {
    "qwen2.5": {"path": "qwen2.5/tokenizer_config.json"},
    "qwen3": {"path": "qwen3/tokenizer_config.json"},
    "llama3-style": {"source": (
        "{{- bos_token }}\n"
        "{%- for message in messages %}\n"
        "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
        "{%- endif %}\n")},
    "mistral-style": {"source": (
        "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
        "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}\n"
        "{{- bos_token }}\n"
        "{%- for message in loop_messages %}\n"
        "  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
        "    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n"
        "  {%- endif %}\n"
        "  {%- if message['role'] == 'user' %}\n"
        "    {%- if loop.last and system is defined %}{{- '[INST] ' + system + '\\n\\n' + message['content'] + '[/INST]' }}\n"
        "    {%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}\n"
        "  {%- elif message['role'] == 'assistant' %}\n"
        "    {{- ' ' + message['content'] | trim + eos_token }}\n"
        "  {%- endif %}\n"
        "{%- endfor %}\n")},
    "gemma-style": {"source": (
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
        "{% else %}{% set role = message['role'] %}{% endif %}"
        "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")},
    "features": {"source": (
        "{# every construct the real templates above do not use #}\n"
        "{% set ns = namespace(n=0, roles=[]) %}\n"
        "{% for m in messages if m.role != 'system' %}\n"
        "  {% set ns.n = ns.n + 1 %}{% set ns.roles = ns.roles + [m.role] %}\n"
        "  [{{ loop.index }}/{{ loop.length }}{{ ' first' if loop.first }}{{ ' last' if loop.last else '' }}]"
        " {{ m.role | upper }}: {{ m.content[:12] }}{{ '...' if m.content | length > 12 }} {{ m.content[::-1][:3] }}\n"
        "{% else %}no messages\n"
        "{% endfor %}\n"
        "{{ ns.n }} turns: {{ ns.roles | join(', ') }}; unique {{ ns.roles | unique | list | length }}\n"
        "{% for k, v in {'a': 1, 'b': [2, 3], 'c': {'d': none}}.items() %}{{ k }}={{ v | tojson }};{% endfor %}\n"
        "{{ tools | tojson(indent=2) if tools is defined else 'no tools' }}\n"
        "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 7 / 2 }} {{ 2 * 3 + 1 }} {{ 'x' ~ 3 ~ none }} {{ 1 == 1.0 }}\n"
        "{{ 'a,b,,c'.split(',') }} {{ '  pad  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'Hi There'.lower() }}"
        " {{ 'abc'.replace('b', 'B') }} {{ 'abc'.startswith('ab') and not 'abc'.endswith('b') }}\n"
        "{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}"
        "{% for i in range(10) %}{% if i > 2 %}{% break %}{% endif %}{{ i }}{% endfor %}\n"
        "{{ messages[-1]['content'] is string }} {{ missing is defined }} {{ missing | default('dflt') }}"
        " {{ none is none }} {{ 4 is even }} {{ [] | first is undefined }} {{ {'k': 'v'}.get('k') }}"
        " {{ {'k': 'v'}.get('z', 'fallback') }} {{ 'b' in ['a', 'b'] }} {{ 'z' not in 'abc' }}\n"
        "   {%+ if true %}kept indentation{% endif %}\n"
        "    {{- ' minus-stripped' -}}    \n"
        "  after{#- a comment -#}   done\n")},
    # GPT-OSS's harmony layout, written here: macros (recursive, with defaults and keyword arguments, called from
    # other macros and from expressions), namespace() inside a macro, a caller's loop variable a macro must not see.
    "harmony-style": {"source": (
        "{%- macro type_of(spec, nullable=false) -%}\n"
        "  {%- if spec.type == 'array' -%}{{- type_of(spec['items']) + '[]' if spec['items'] else 'any[]' -}}\n"
        "  {%- elif spec.type == 'string' and spec.enum -%}{{- '\"' + spec.enum | join('\" | \"') + '\"' -}}\n"
        "  {%- elif spec.type == 'object' and spec.properties -%}{\n"
        "    {%- for name, inner in spec.properties.items() -%}\n"
        "      {{- name }}{{ '?' if name not in (spec.required or []) }}: {{ type_of(inner) }}{{ ', ' if not loop.last }}\n"
        "    {%- endfor -%}}\n"
        "  {%- elif spec.type is defined -%}{{- spec.type -}}\n"
        "  {%- else -%}any{%- endif -%}\n"
        "  {{- ' | null' if nullable -}}\n"
        "{%- endmacro -%}\n"
        "{%- macro functions(tools, header='## functions') -%}\n"
        "  {{- header + '\\n' -}}\n"
        "  {%- for tool in tools -%}{%- set tool = tool.function -%}\n"
        "    {{- '// ' + tool.description + '\\ntype ' + tool.name + ' = (_: ' + type_of(tool.parameters) + ') => any;\\n' -}}\n"
        "  {%- endfor -%}\n"
        "  {{- 'loop is ' + ('defined' if loop is defined else 'not defined') -}}\n"
        "{%- endmacro -%}\n"
        "{%- macro turn(m, role=none) -%}\n"
        "  <|start|>{{ role or m.role }}<|message|>{{ m.content }}{{ ' (the caller loop shows)' if loop is defined }}<|end|>\n"
        "{%- endmacro -%}\n"
        "{%- macro system_message() -%}\n"
        "  {%- if identity is not defined %}{% set identity = 'You are a test model.' %}{% endif -%}\n"
        "  {%- set seen = namespace(tools=0) -%}\n"
        "  {%- for tool in tools or [] %}{% set seen.tools = seen.tools + 1 %}{% endfor -%}\n"
        "  {{- identity + '\\nReasoning: ' + (reasoning_effort if reasoning_effort is defined else 'medium') -}}\n"
        "  {{- '\\nTools: ' ~ seen.tools -}}\n"
        "{%- endmacro -%}\n"
        "<|start|>system<|message|>{{ system_message() }}<|end|>\n"
        "{%- if messages[0].role == 'system' %}{% set developer = messages[0].content %}{% set rest = messages[1:] %}\n"
        "{%- else %}{% set developer = '' %}{% set rest = messages %}{% endif %}\n"
        "{%- if developer or tools %}<|start|>developer<|message|>{{ developer }}\n"
        "  {%- if tools %}{{ '\\n' + functions(tools) + '\\n' + functions(tools, header='## again') }}{% endif %}<|end|>\n"
        "{%- endif %}\n"
        "{%- set last = namespace(name=none) %}\n"
        "{%- for message in rest %}\n"
        "  {%- if message.role == 'assistant' and message.tool_calls %}{% set call = message.tool_calls[0].function %}\n"
        "    {{- '<|start|>assistant to=functions.' + call.name + '<|channel|>commentary json<|message|>' }}"
        "{{ call.arguments | tojson }}<|call|>{% set last.name = call.name %}\n"
        "  {%- elif message.role == 'assistant' %}<|start|>assistant<|channel|>final<|message|>{{ message.content }}"
        "{{ '<|return|>' if loop.last and not add_generation_prompt else '<|end|>' }}\n"
        "  {%- elif message.role == 'tool' %}\n"
        "    {%- if last.name is none %}{{ raise_exception('a tool result without a call') }}{% endif %}\n"
        "    {{- '<|start|>functions.' + last.name + ' to=assistant<|message|>' + message.content | tojson + '<|end|>' }}\n"
        "  {%- else %}{{ turn(message) if message.role == 'user' else turn(role='other', m=message) }}{% endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}<|start|>assistant{% endif %}")},
}

CONVERSATIONS = {
    "one-turn": [{"role": "user", "content": "Hello, who are you?"}],
    "system": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}],
    "multi-turn": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "  4  "},
        {"role": "user", "content": "And doubled?"}],
    "reasoning": [
        {"role": "user", "content": "Think: is 17 prime?"},
        {"role": "assistant", "content": "<think>\nCheck divisors up to 4.\n</think>\n\nYes, 17 is prime."},
        {"role": "user", "content": "And 21?"}],
    "tools": [
        {"role": "system", "content": "Use tools when useful."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "{\"wind\": 5}"},
        {"role": "assistant", "content": "It is 21 C in Paris."}],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
                                                "required": ["city"]}}}]

# (template, conversation, options) combinations; options go to the template as variables.
CASES = []
for template in TEMPLATES:
    for conversation in CONVERSATIONS:
        if template == "gemma-style" and conversation in ("system", "tools"):
            continue  # the template raises on a system turn (checked separately below)
        if template in ("mistral-style", "gemma-style", "llama3-style") and conversation in ("tools", "reasoning"):
            continue
        for generation_prompt in (True, False):
            options = {"add_generation_prompt": generation_prompt}
            CASES.append((template, conversation, options))
CASES += [("qwen3", "one-turn", {"add_generation_prompt": True, "enable_thinking": False}),
          ("qwen2.5", "tools", {"add_generation_prompt": True, "tools": TOOLS}),
          ("qwen3", "tools", {"add_generation_prompt": True, "tools": TOOLS}),
          ("features", "system", {"add_generation_prompt": False, "tools": TOOLS}),
          ("harmony-style", "tools", {"add_generation_prompt": True, "tools": TOOLS, "reasoning_effort": "high"})]
# Templates that must refuse a conversation, with the message raise_exception gives.
REFUSALS = [("gemma-style", "system", "System role not supported"),
            ("mistral-style", "tools", "Conversation roles must alternate")]


def template_source(name):
    spec = TEMPLATES[name]
    if "source" in spec:
        return spec["source"]
    with open(os.path.join(SHARED_HF, spec["path"]), encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def render(name, conversation, options):
    opts = dict(options)
    tools = opts.pop("tools", None)
    return render_jinja_template(conversations=[CONVERSATIONS[conversation]], tools=tools,
                                 chat_template=template_source(name), bos_token="<s>", eos_token="</s>", **opts)[0][0]


def make_fixture():
    cases = []
    for template, conversation, options in CASES:
        cases.append({"template": template, "conversation": conversation, "options": options,
                      "rendered": render(template, conversation, options)})
    refusals = []
    for template, conversation, message in REFUSALS:
        try:
            render(template, conversation, {"add_generation_prompt": True})
            check(False, f"{template} accepted {conversation}")
        except Exception as e:  # jinja2's TemplateError
            check(message in str(e), f"{template} on {conversation}: {e}")
        refusals.append({"template": template, "conversation": conversation, "message": message})
    templates = {name: ({"path": spec["path"]} if "path" in spec else {"source": spec["source"]})
                 for name, spec in TEMPLATES.items()}
    return {"generated_by": "tests/interop/chat_templates.py (transformers render_jinja_template)",
            "special_tokens": {"bos_token": "<s>", "eos_token": "</s>"}, "templates": templates,
            "conversations": CONVERSATIONS, "cases": cases, "refusals": refusals}


def check_tokenized(lowbit):
    from transformers import AutoTokenizer
    rows = []
    for name in ("qwen2.5", "qwen3"):
        folder = scratch_folder(f"lowbit-chat-{name}-")
        with open(os.path.join(SHARED_HF, "phi-3.5-mini", "tokenizer.json"), encoding="utf-8") as f:
            tokenizer_json = f.read()
        with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tokenizer_json)
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template_source(name),
                       "bos_token": "<s>", "eos_token": "<|end|>", "add_bos_token": False}, f)
        tok = AutoTokenizer.from_pretrained(folder)
        for system in ("", "Answer in one word."):
            messages = ([{"role": "system", "content": system}] if system else []) + \
                       [{"role": "user", "content": "What colour is the sky? Überall, 空."}]
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            args = ["tokenize", "--model", folder, "--chat", "--text", messages[-1]["content"]]
            ours = lowbit_json(lowbit, *(args + (["--system", system] if system else [])))
            check(ours["prompt"] == text, f"{name}: lowbit's chat prompt differs from apply_chat_template's")
            check(ours["ids"] == list(ids), f"{name}: lowbit's chat ids differ from apply_chat_template's")
            rows.append([name, "yes" if system else "no", len(ids), "yes" if ours["ids"] == list(ids) else "no"])
    print_table(["template", "system", "ids", "identical to apply_chat_template"], rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lowbit", default="build/lowbit")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    fixture = make_fixture()
    if args.write:
        with open(FIXTURE, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {FIXTURE}: {len(fixture['cases'])} renderings, {len(fixture['refusals'])} refusals")
        return
    with open(FIXTURE, encoding="utf-8") as f:
        check(json.load(f) == fixture, f"{FIXTURE} differs from what the pinned transformers renders now")
    check_tokenized(args.lowbit)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print(f"chat_templates: {len(fixture['cases'])} renderings as committed")


if __name__ == "__main__":
    main()
