#!/usr/bin/env python3
"""Writes a Hugging Face Llama checkpoint (bf16 safetensors, config.json, tokenizer.json) as a bf16
GGUF that llama.cpp loads, with llama.cpp's own gguf-py and numpy: no torch. The same weight bytes
tpserve serves (Q and K rows permuted into the rotary layout llama.cpp expects, as its
convert_hf_to_gguf.py does; norms as f32, as it writes them), for benchmarks/cpu_kernels_vs_llamacpp.sh.

  hf_to_gguf_bf16.py MODEL_DIR OUT.gguf   (PYTHONPATH must hold llama.cpp's gguf-py)

Not written: llama3 rope scaling's rope_freqs (it changes no timing at short contexts).
"""
import json
import pathlib
import struct
import sys

import numpy as np

import gguf

model_dir, out_path = pathlib.Path(sys.argv[1]), sys.argv[2]
config = json.loads((model_dir / "config.json").read_text())
if config.get("model_type") != "llama":
    sys.exit(f"hf_to_gguf_bf16: {model_dir}/config.json: model_type {config.get('model_type')!r}, expected 'llama'")


def read_safetensors(path):
    """{name: (dtype, shape, bytes view)} of one safetensors file, memory-mapped."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    header_len = struct.unpack("<Q", bytes(data[:8]))[0]
    header = json.loads(bytes(data[8:8 + header_len]))
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = (info["dtype"], info["shape"], data[8 + header_len + begin:8 + header_len + end])
    return tensors


tensors = {}
for file in sorted(model_dir.glob("*.safetensors")):
    tensors.update(read_safetensors(file))

heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
hidden, layers = config["hidden_size"], config["num_hidden_layers"]
head_dim = config.get("head_dim", hidden // heads)


def bf16(name):
    dtype, shape, raw = tensors[name]
    if dtype != "BF16":
        sys.exit(f"hf_to_gguf_bf16: tensor {name} is {dtype}, expected BF16")
    return raw.view(np.uint16).reshape(shape)


def f32(name):
    """A norm weight as f32 (bf16 widened exactly)."""
    return (bf16(name).astype(np.uint32) << 16).view(np.float32)


def permute(w, n_head):
    """HF's half-split rotary rows to the interleaved pairs llama.cpp's rope reads."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


writer = gguf.GGUFWriter(out_path, "llama")
writer.add_name(model_dir.name)
writer.add_context_length(config["max_position_embeddings"])
writer.add_embedding_length(hidden)
writer.add_block_count(layers)
writer.add_feed_forward_length(config["intermediate_size"])
writer.add_rope_dimension_count(head_dim)
writer.add_head_count(heads)
writer.add_head_count_kv(kv_heads)
writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
writer.add_rope_freq_base(config.get("rope_theta", 10000.0))
writer.add_vocab_size(config["vocab_size"])
writer.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)

# The tokenizer: byte-level BPE (GPT-2 style), as llama.cpp reads Llama 3's.
tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
vocab = tokenizer["model"]["vocab"]
added = {t["id"]: t for t in tokenizer.get("added_tokens", [])}
size = config["vocab_size"]
tokens, types = [f"[PAD{i}]" for i in range(size)], [gguf.TokenType.UNUSED] * size
for text, i in vocab.items():
    tokens[i], types[i] = text, gguf.TokenType.NORMAL
for i, t in added.items():
    tokens[i] = t["content"]
    types[i] = gguf.TokenType.CONTROL if t.get("special") else gguf.TokenType.USER_DEFINED
merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
writer.add_tokenizer_model("gpt2")
writer.add_tokenizer_pre("llama-bpe")
writer.add_token_list(tokens)
writer.add_token_types(types)
writer.add_token_merges(merges)
eos = config.get("eos_token_id", 128001)
writer.add_bos_token_id(config.get("bos_token_id", 128000))
writer.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)

BF16 = gguf.GGMLQuantizationType.BF16
writer.add_tensor("token_embd.weight", np.ascontiguousarray(bf16("model.embed_tokens.weight")), raw_dtype=BF16)
for i in range(layers):
    p = f"model.layers.{i}."
    writer.add_tensor(f"blk.{i}.attn_norm.weight", f32(p + "input_layernorm.weight"))
    writer.add_tensor(f"blk.{i}.attn_q.weight", np.ascontiguousarray(permute(bf16(p + "self_attn.q_proj.weight"), heads)),
                      raw_dtype=BF16)
    writer.add_tensor(f"blk.{i}.attn_k.weight", np.ascontiguousarray(permute(bf16(p + "self_attn.k_proj.weight"), kv_heads)),
                      raw_dtype=BF16)
    for ours, theirs in (("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                         ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down")):
        writer.add_tensor(f"blk.{i}.{theirs}.weight", np.ascontiguousarray(bf16(p + ours + ".weight")), raw_dtype=BF16)
    writer.add_tensor(f"blk.{i}.ffn_norm.weight", f32(p + "post_attention_layernorm.weight"))
writer.add_tensor("output_norm.weight", f32("model.norm.weight"))
if not config.get("tie_word_embeddings", False):
    writer.add_tensor("output.weight", np.ascontiguousarray(bf16("lm_head.weight")), raw_dtype=BF16)

writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
print(f"hf_to_gguf_bf16: wrote {out_path} ({len(writer.tensors[0]) if writer.tensors else '?'} tensors, bf16)")
