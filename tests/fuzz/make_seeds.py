#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/TARGET/ (committed; rerun
only to change them). Needs the fetched assets (scripts/fetch_assets.sh) and a built tpserve.

    tests/fuzz/make_seeds.py [--tpserve build/server/tpserve]
"""
import argparse
import json
import os
import re
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
parser = argparse.ArgumentParser()
parser.add_argument("--tpserve", default=os.path.join(REPO, "build/server/tpserve"))
args = parser.parse_args()


def write(target, name, data):
    os.makedirs(os.path.join(HERE, "corpus", target), exist_ok=True)
    with open(os.path.join(HERE, "corpus", target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# safetensors: 8-byte little-endian header length, the JSON header, the data.
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


write("safetensors", "two_tensors", safetensors({"a.weight": ("BF16", [2, 2], bytes(8)),
                                                  "b": ("F32", [3], struct.pack("<3f", 1, 2, 3))},
                                                 {"format": "pt"}))
write("safetensors", "empty", safetensors({}))
write("safetensors", "i64_scalar", safetensors({"step": ("I64", [], struct.pack("<q", 7))}))

# config.json + NUL + generation_config.json, from make-model's tiny preset.
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([args.tpserve, "make-model", "--preset", "tiny", "--out", tmp + "/m"], check=True,
                   capture_output=True)
    config = open(tmp + "/m/config.json", "rb").read()
    generation = open(tmp + "/m/generation_config.json", "rb").read() if os.path.exists(
        tmp + "/m/generation_config.json") else b'{"bos_token_id": 1, "eos_token_id": [2, 3]}'
write("model_config", "tiny", config + b"\0" + generation)
write("model_config", "tiny_config_only", config)
write("model_config", "qwen_style",
      json.dumps({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
                  "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                  "tie_word_embeddings": True, "eos_token_id": 299}).encode())


# tokenizer.json: the real tokenizers cut down to their first 300 tokens and the merges among them.
def small_tokenizer(name, keep=300):
    t = json.load(open(os.path.join(REPO, ".assets/tokenizers", name, "tokenizer.json")))
    vocab = {token: i for token, i in t["model"]["vocab"].items() if i < keep}
    merges = []
    for merge in t["model"]["merges"]:
        parts = merge.split(" ") if isinstance(merge, str) else merge
        if len(parts) == 2 and parts[0] in vocab and parts[1] in vocab and parts[0] + parts[1] in vocab:
            merges.append(merge)
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = merges
    t["added_tokens"] = [dict(a, id=keep + i) for i, a in enumerate(t["added_tokens"][:3])]
    return json.dumps(t, ensure_ascii=False)


for name in ("llama3", "qwen2"):
    write("tokenizer_json", name + "_small", small_tokenizer(name))

# Text for the real tokenizers: the first byte picks llama3 (even) or qwen2 (odd).
texts = ["Hello, world!", "  leading spaces\n\nand lines\r\n", "naïve café 東京 Привет مرحبا नमस्ते 🙂👍🏽",
         "def f(x):\n    return x**2  # comment", "1234567890 3.14159 1e-9", "<|begin_of_text|>hi<|eot_id|>",
         "<|im_start|>user\nhi<|im_end|>", "\u0301\u200d\ufeff", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]
for i, text in enumerate(texts):
    write("tokenizer_text", f"llama3_{i}", b"\0" + text.encode())
    write("tokenizer_text", f"qwen2_{i}", b"\1" + text.encode())
write("tokenizer_text", "invalid_utf8", b"\0" + b"\xff\xfe\xc3(\xe2\x82")


# Step plans, in engine/step/step_plan_wire.cc's format.
def plan(step_id, sequences):
    out = struct.pack("<IHqI", 0x50535054, 1, step_id, len(sequences))
    for s in sequences:
        out += struct.pack("<qiBi", s["id"], s["start"], s["want"], s["sampled"])
        for ints in (s["tokens"], s["blocks"]):
            out += struct.pack("<I", len(ints)) + struct.pack(f"<{len(ints)}i", *ints)
        out += struct.pack("<fifQiBi", 0.7, 40, 0.9, 1234, 2, 0, 3)
        out += struct.pack("<I", len(s["stop"])) + struct.pack(f"<{len(s['stop'])}i", *s["stop"])
    return out


write("step_plan_wire", "empty", plan(0, []))
write("step_plan_wire", "decode_batch2", plan(7, [
    {"id": 1, "start": 5, "want": 1, "sampled": 2, "tokens": [42], "blocks": [0, 1], "stop": [128001]},
    {"id": 2, "start": 0, "want": 1, "sampled": 0, "tokens": [1, 2, 3, 4], "blocks": [2], "stop": []}]))

# Planner inputs: nccl-tests text (first byte even), bench-comm --json (odd).
calibrate_test = open(os.path.join(REPO, "tests/planner/calibrate_test.cc")).read()
for i, block in enumerate(re.findall(r'R"\((.*?)\)"', calibrate_test, re.S)[:3]):
    write("planner_inputs", f"nccl_tests_{i}", b"\0" + block.encode())
bench = subprocess.run([args.tpserve, "bench-comm", "-g", "2", "-b", "1K", "-e", "64K", "-f", "4", "-n", "20", "--json"],
                       check=True, capture_output=True, text=True).stdout
write("planner_inputs", "bench_comm", b"\1" + bench.encode())
# Generate requests in protobuf's wire format (protoc --encode, from the build's protobuf-compiler).
requests = {
    "text": 'request_id: "r1" text: "Hello" max_tokens: 16',
    "sampling": 'text: "The capital of France is" max_tokens: 8 min_tokens: 2 sampling { temperature: 0.7 top_k: 40 '
                'top_p: 0.9 seed: 42 } stop: "." stop_token_ids: 128001 logprobs: 3',
    "token_ids": 'token_ids { ids: [128000, 791, 6864] } max_tokens: 4 ignore_eos: true',
    "bad_id": 'token_ids { ids: [999999] } max_tokens: 4',
}
for name, text in requests.items():
    encoded = subprocess.run(["protoc", "-I", os.path.join(REPO, "proto"), "--encode=tpserve.v1.GenerateRequest",
                              "tpserve/v1/tpserve.proto"], input=text.encode(), check=True, capture_output=True).stdout
    write("generate_request", name, encoded)
# OpenAI request bodies: first byte 0 = /v1/completions, 1 = /v1/chat/completions.
openai = {
    "completion": (0, {"model": "tiny", "prompt": "Hello", "max_tokens": 8, "temperature": 0, "logprobs": 2,
                       "stop": ["\n", "."], "stream": True, "stream_options": {"include_usage": True}}),
    "completion_ids": (0, {"prompt": [[128000, 9906]], "max_tokens": 4, "ignore_eos": True, "min_tokens": 4,
                           "top_k": -1, "top_p": 0.9, "seed": 7}),
    "chat": (1, {"messages": [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                 "max_completion_tokens": 5, "logprobs": True, "top_logprobs": 3, "n": 1, "user": "u"}),
    "refused": (0, {"prompt": "x", "n": 2, "tools": [{}], "max_tokens": 2.5}),
}
for name, (endpoint, body) in openai.items():
    write("openai_request", name, bytes([endpoint]) + json.dumps(body).encode())
print("seeds written under", os.path.join(HERE, "corpus"))

# chat templates: hand-written ones in the styles of the supported families (the real templates are
# fetched assets, never committed), then NUL + messages.
messages = json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|eot_id|>"},
                       {"role": "assistant", "content": " hello "}, {"role": "user", "content": "é 🌍"}]).encode()
write("chat_template", "llama3_headers",
      b"{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
      b"'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
      b"{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}\0" + messages)
write("chat_template", "chatml",
      b"{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
      b"{%- else %}{{- '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{%- endif %}\n{%- for message in messages %}"
      b"{%- if not (message.role == 'system' and loop.first) %}{{- '<|im_start|>' + message.role + '\n' + message.content"
      b" + '<|im_end|>\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
      b"{%- endif %}\0" + messages)
write("chat_template", "mistral_alternation",
      b"{%- set ns = namespace(index=0) %}{%- for message in messages %}{%- if (message['role'] == 'user') != "
      b"(ns.index % 2 == 0) %}{{- raise_exception('roles must alternate') }}{%- endif %}{%- set ns.index = ns.index + 1 %}"
      b"{%- endfor %}{{- bos_token }}{%- for m in messages %}{%- if m.role == 'user' %}{{- '[INST]' + m.content + "
      b"'[/INST]' }}{%- else %}{{- m.content + eos_token }}{%- endif %}{%- endfor %}\0" + messages)
write("chat_template", "constructs",
      "{% macro m(a, b=2) %}{{ a ~ b }}{% endmacro %}{% set ns = namespace(i=0) %}"
      "{%- for x in messages if x.role != 'system' -%}{% set ns.i = ns.i + 1 %}{{ m(x.content|trim) }}"
      "{{ loop.index }}{{ x['content'][::-1] }}{% if loop.last %}{% break %}{% endif %}{% else %}none{% endfor %}"
      "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}"
      "{{ {'a': [1, 2.5, none]}|tojson(indent=2) }}{{ 'a b'.split()|length is odd }}{# c #}"
      "{{ raise_exception('x') if ns.i > 9 else ('%d' if false else 7 // 2 ** 1) }}")

# Streamed OpenAI responses as loadgen reads them: a first byte N % 8, N bytes that pick how the
# stream is cut into reads, then the server-sent events.
completion = "".join(f"data: {json.dumps(c)}\n\n" for c in [
    {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": "Hello", "finish_reason": None}]},
    {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]},
    {"id": "cmpl-1", "object": "text_completion", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
]) + "data: [DONE]\n\n"
chat = "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in [
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hi"}}]},
]) + ": keep-alive\r\n\r\ndata: [DONE]\r\n\r\n"
write("sse_stream", "completion_whole", b"\0" + completion.encode())
write("sse_stream", "completion_bytewise", b"\1\0" + completion.encode())
write("sse_stream", "chat_crlf_cut", b"\3\2\5\1" + chat.encode())
write("sse_stream", "error_multiline", b"\2\6\0" + b"\xef\xbb\xbfevent: error\rdata: {\"error\":\rdata: {\"message\": \"boom\"}}\r\r")
