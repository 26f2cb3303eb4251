#!/usr/bin/env python3
"""Write the language model of a Qwen3-VL checkpoint as a llama.cpp GGUF file.

A measurement tool for the same-run comparison with llama.cpp
(scripts/compare_llamacpp.sh), not part of qvl's build or tests.
Needs: python3 with numpy. Nothing else (no gguf-py, no transformers).

    python3 scripts/llamacpp/make_gguf.py MODEL_DIR OUT.gguf [--dtype bf16|f16]

What it writes: architecture `qwen3` (the Qwen3-VL text model is a dense Qwen3
decoder: RMSNorm, q/k RMSNorm per head, GQA, SwiGLU MLP, tied embeddings).
The vision tower is left out. Qwen3-VL's interleaved M-RoPE differs from
plain RoPE only in which position (t/h/w) feeds which frequency; for text
tokens all three positions are equal, so plain RoPE with the same theta is the
same function, and for speed it is the same work in any case. Matrices are
written as BF16 (copied bit for bit) or F16; norm vectors as F32, as llama.cpp
expects. The tokenizer (gpt2-style byte-level BPE: tokens, types, merges,
special ids) comes from tokenizer.json so llama.cpp accepts the file and can
tokenize prompts.

The layout follows the GGUF description (ggml docs/gguf.md, version 3):
header, key/value metadata, tensor infos, padding to the alignment, tensor
data (each tensor aligned). All little-endian.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

ALIGNMENT = 32

# GGUF metadata value types.
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types used here.
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
# llama_ftype values for general.file_type.
FILE_TYPE = {"f16": 1, "bf16": 32}
# Token types in tokenizer.ggml.token_type.
TOK_NORMAL, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED = 1, 3, 4, 5


def die(msg):
    sys.exit(f"make_gguf: {msg}")


# ---------------------------------------------------------------- safetensors

def read_safetensors_index(model_dir):
    """Map each tensor name to (file, dtype, shape, byte offset, byte length)."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        path = os.path.join(model_dir, name)
        with open(path, "rb") as f:
            header_len = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(header_len))
        base = 8 + header_len
        for tname, info in header.items():
            if tname == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            tensors[tname] = (path, info["dtype"], info["shape"], base + begin, end - begin)
    return tensors


def load_tensor(entry):
    """The tensor's raw values: BF16 as uint16 bits, others as numpy dtypes."""
    path, dtype, shape, offset, length = entry
    np_dtype = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}.get(dtype)
    if np_dtype is None:
        die(f"{path}: unsupported safetensors dtype {dtype}")
    data = np.memmap(path, dtype=np_dtype, mode="r", offset=offset, shape=tuple(shape))
    return dtype, data


def bf16_bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def convert(entry, want):
    """Bytes of the tensor in ggml type `want` (F32, F16 or BF16)."""
    dtype, data = load_tensor(entry)
    if want == GGML_BF16:
        if dtype == "BF16":
            return np.ascontiguousarray(data).tobytes()
        f32 = np.asarray(data, dtype=np.float32)
        # Round to nearest even on the dropped 16 bits.
        u = f32.view(np.uint32)
        rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        return rounded.astype(np.uint16).tobytes()
    f32 = bf16_bits_to_f32(data) if dtype == "BF16" else np.asarray(data, dtype=np.float32)
    if want == GGML_F16:
        return f32.astype(np.float16).tobytes()
    return f32.astype(np.float32).tobytes()


# ---------------------------------------------------------------- GGUF encoding

def enc_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def enc_value(vtype, value):
    if vtype == T_UINT32:
        return struct.pack("<I", value)
    if vtype == T_INT32:
        return struct.pack("<i", value)
    if vtype == T_FLOAT32:
        return struct.pack("<f", value)
    if vtype == T_BOOL:
        return struct.pack("<B", 1 if value else 0)
    if vtype == T_STRING:
        return enc_string(value)
    raise ValueError(vtype)


def enc_kv(key, vtype, value, elem_type=None):
    out = enc_string(key) + struct.pack("<I", vtype)
    if vtype == T_ARRAY:
        out += struct.pack("<IQ", elem_type, len(value))
        if elem_type == T_INT32:
            out += np.asarray(value, dtype="<i4").tobytes()
        elif elem_type == T_FLOAT32:
            out += np.asarray(value, dtype="<f4").tobytes()
        else:
            out += b"".join(enc_value(elem_type, v) for v in value)
    else:
        out += enc_value(vtype, value)
    return out


def align(n):
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


# ---------------------------------------------------------------- model mapping

def text_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    return cfg.get("text_config", cfg)


def find_prefix(tensors):
    for prefix in ("model.language_model.", "model."):
        if prefix + "embed_tokens.weight" in tensors:
            return prefix
    die("no embed_tokens.weight in the checkpoint: not a Qwen3(-VL) model?")


def tensor_plan(tensors, cfg, matrix_type):
    """(gguf name, source entry, ggml type, ggml dims) in file order."""
    p = find_prefix(tensors)
    plan = []

    def add(gguf_name, src_name, is_matrix):
        if src_name not in tensors:
            die(f"missing tensor {src_name}")
        entry = tensors[src_name]
        shape = entry[2]
        # ggml lists dimensions innermost first: a torch [out, in] matrix is [in, out].
        plan.append((gguf_name, entry, matrix_type if is_matrix else GGML_F32, list(reversed(shape))))

    add("token_embd.weight", p + "embed_tokens.weight", True)
    for i in range(cfg["num_hidden_layers"]):
        lp = f"{p}layers.{i}."
        b = f"blk.{i}."
        add(b + "attn_norm.weight", lp + "input_layernorm.weight", False)
        add(b + "attn_q.weight", lp + "self_attn.q_proj.weight", True)
        add(b + "attn_k.weight", lp + "self_attn.k_proj.weight", True)
        add(b + "attn_v.weight", lp + "self_attn.v_proj.weight", True)
        add(b + "attn_q_norm.weight", lp + "self_attn.q_norm.weight", False)
        add(b + "attn_k_norm.weight", lp + "self_attn.k_norm.weight", False)
        add(b + "attn_output.weight", lp + "self_attn.o_proj.weight", True)
        add(b + "ffn_norm.weight", lp + "post_attention_layernorm.weight", False)
        add(b + "ffn_gate.weight", lp + "mlp.gate_proj.weight", True)
        add(b + "ffn_up.weight", lp + "mlp.up_proj.weight", True)
        add(b + "ffn_down.weight", lp + "mlp.down_proj.weight", True)
    add("output_norm.weight", p + "norm.weight", False)
    # Untied checkpoints carry their own head; tied ones reuse token_embd.
    head = "lm_head.weight"
    if head in tensors and not cfg.get("tie_word_embeddings", False):
        add("output.weight", head, True)
    return plan


def tokenizer_kvs(model_dir, n_vocab):
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    if model.get("type") != "BPE":
        die("tokenizer.json: only byte-level BPE tokenizers are supported")
    tokens = [None] * n_vocab
    types = [TOK_UNUSED] * n_vocab
    for text, tid in model["vocab"].items():
        if tid < n_vocab:
            tokens[tid], types[tid] = text, TOK_NORMAL
    for added in tok.get("added_tokens", []):
        tid = added["id"]
        if tid < n_vocab:
            tokens[tid] = added["content"]
            types[tid] = TOK_CONTROL if added.get("special") else TOK_USER_DEFINED
    # Embedding rows past the tokenizer's vocabulary get placeholder names.
    for tid in range(n_vocab):
        if tokens[tid] is None:
            tokens[tid] = f"[PAD{tid}]"
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    cfg_path = os.path.join(model_dir, "tokenizer_config.json")
    tcfg = json.load(open(cfg_path)) if os.path.exists(cfg_path) else {}
    ids = {t: i for i, t in enumerate(tokens)}

    def special_id(value, fallback):
        if isinstance(value, dict):
            value = value.get("content")
        return ids.get(value, fallback)

    eos = special_id(tcfg.get("eos_token"), ids.get("<|im_end|>", 0))
    pad = special_id(tcfg.get("pad_token"), ids.get("<|endoftext|>", eos))
    bos = ids.get("<|endoftext|>", eos)
    kvs = [
        enc_kv("tokenizer.ggml.model", T_STRING, "gpt2"),
        enc_kv("tokenizer.ggml.pre", T_STRING, "qwen2"),
        enc_kv("tokenizer.ggml.tokens", T_ARRAY, tokens, T_STRING),
        enc_kv("tokenizer.ggml.token_type", T_ARRAY, types, T_INT32),
        enc_kv("tokenizer.ggml.merges", T_ARRAY, merges, T_STRING),
        enc_kv("tokenizer.ggml.bos_token_id", T_UINT32, bos),
        enc_kv("tokenizer.ggml.eos_token_id", T_UINT32, eos),
        enc_kv("tokenizer.ggml.padding_token_id", T_UINT32, pad),
        enc_kv("tokenizer.ggml.add_bos_token", T_BOOL, bool(tcfg.get("add_bos_token", False))),
    ]
    return kvs


def model_kvs(cfg, dtype_name, name):
    arch = "qwen3"
    head_dim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    return [
        enc_kv("general.architecture", T_STRING, arch),
        enc_kv("general.name", T_STRING, name),
        enc_kv("general.file_type", T_UINT32, FILE_TYPE[dtype_name]),
        enc_kv("general.alignment", T_UINT32, ALIGNMENT),
        enc_kv(f"{arch}.context_length", T_UINT32, cfg.get("max_position_embeddings", 40960)),
        enc_kv(f"{arch}.embedding_length", T_UINT32, cfg["hidden_size"]),
        enc_kv(f"{arch}.block_count", T_UINT32, cfg["num_hidden_layers"]),
        enc_kv(f"{arch}.feed_forward_length", T_UINT32, cfg["intermediate_size"]),
        enc_kv(f"{arch}.attention.head_count", T_UINT32, cfg["num_attention_heads"]),
        enc_kv(f"{arch}.attention.head_count_kv", T_UINT32, cfg["num_key_value_heads"]),
        enc_kv(f"{arch}.attention.key_length", T_UINT32, head_dim),
        enc_kv(f"{arch}.attention.value_length", T_UINT32, head_dim),
        enc_kv(f"{arch}.attention.layer_norm_rms_epsilon", T_FLOAT32, cfg["rms_norm_eps"]),
        enc_kv(f"{arch}.rope.freq_base", T_FLOAT32, float(cfg["rope_theta"])),
        enc_kv(f"{arch}.rope.dimension_count", T_UINT32, head_dim),
    ]


def type_size(ggml_type):
    return {GGML_F32: 4, GGML_F16: 2, GGML_BF16: 2}[ggml_type]


def write_gguf(model_dir, out_path, dtype_name):
    cfg = text_config(model_dir)
    tensors = read_safetensors_index(model_dir)
    matrix_type = GGML_BF16 if dtype_name == "bf16" else GGML_F16
    plan = tensor_plan(tensors, cfg, matrix_type)
    n_vocab = plan[0][3][1]  # token_embd is [hidden, vocab]
    kvs = model_kvs(cfg, dtype_name, os.path.basename(os.path.normpath(model_dir))) + \
        tokenizer_kvs(model_dir, n_vocab)

    infos = []
    offset = 0
    for gguf_name, _, gtype, dims in plan:
        infos.append(enc_string(gguf_name) + struct.pack("<I", len(dims)) +
                     struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", gtype, offset))
        offset = align(offset + int(np.prod(dims)) * type_size(gtype))

    head = b"GGUF" + struct.pack("<IQQ", 3, len(plan), len(kvs)) + b"".join(kvs) + b"".join(infos)
    tmp = out_path + ".part"
    with open(tmp, "wb") as f:
        f.write(head)
        f.write(b"\0" * (align(len(head)) - len(head)))
        data_start = f.tell()
        for gguf_name, entry, gtype, dims in plan:
            f.write(b"\0" * (align(f.tell() - data_start) - (f.tell() - data_start)))
            blob = convert(entry, gtype)
            if len(blob) != int(np.prod(dims)) * type_size(gtype):
                die(f"{gguf_name}: size mismatch")
            f.write(blob)
    os.replace(tmp, out_path)  # a half-written file never has the final name
    return len(plan)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["bf16", "f16"], default="bf16")
    args = ap.parse_args()
    if os.path.exists(args.out):
        die(f"{args.out} exists; remove it first")
    n = write_gguf(args.model_dir, args.out, args.dtype)
    print(f"wrote {args.out}: {n} tensors, {os.path.getsize(args.out) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
