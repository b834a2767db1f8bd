#!/usr/bin/env python3
"""Writes a small sharded Llama checkpoint with known values, independently of tpserve's writer.

Only the standard library (struct, json): the safetensors layout is written by hand from the
format's specification. Every element of tensor number t (in sorted name order) at flat index i
holds ((i * 37 + t * 101) % 251 - 125) / 64, which F32, F16 and BF16 all represent exactly, so
the C++ test can recompute each value and compare bit for bit.

usage: make_fixture_checkpoint.py OUT_DIR
"""
import json
import os
import struct
import sys

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 128},
    "tie_word_embeddings": False,
    "vocab_size": 100,  # not a multiple of 8: exercises the zero-padded vocab split
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": [2, 3],
}


def shapes(c):
    h, f, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    hd = h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = {"model.embed_tokens.weight": [c["vocab_size"], h], "model.norm.weight": [h],
           "lm_head.weight": [c["vocab_size"], h]}
    for i in range(L):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
            p + "mlp.gate_proj.weight": [f, h], p + "mlp.up_proj.weight": [f, h],
            p + "mlp.down_proj.weight": [h, f]})
    return out


def dtype_for(name):
    if name.endswith("norm.weight"):
        return "F16"
    if name in ("model.embed_tokens.weight", "lm_head.weight") or "down_proj" in name:
        return "F32"
    return "BF16"


def value(t, i):
    return ((i * 37 + t * 101) % 251 - 125) / 64.0


def encode(dtype, values):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    # BF16: the upper half of the F32 bits (exact: every value has at most 8 significant bits).
    raw = struct.pack(f"<{len(values)}f", *values)
    return b"".join(raw[k + 2:k + 4] for k in range(0, len(raw), 4))


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    names = sorted(shapes(CONFIG))
    tensors = []
    for t, name in enumerate(names):
        shape = shapes(CONFIG)[name]
        count = 1
        for d in shape:
            count *= d
        dtype = dtype_for(name)
        tensors.append((name, dtype, shape, encode(dtype, [value(t, i) for i in range(count)])))
    shard_count = 3
    weight_map = {}
    for s in range(shard_count):
        file_name = f"model-{s + 1:05d}-of-{shard_count:05d}.safetensors"
        part = tensors[s::shard_count]  # interleaved, so every file mixes layers and dtypes
        write_safetensors(os.path.join(out, file_name), part)
        for name, *_ in part:
            weight_map[name] = file_name
    total = sum(len(t[3]) for t in tensors)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
