#!/usr/bin/env python3
"""Quantize a GGUF with llama.cpp's own quantizer (llama_model_quantize).

A measurement tool for the same-run comparison with llama.cpp
(scripts/compare_llamacpp.sh), not part of qvl's build or tests.
Needs: python3 (ctypes only) and the prebuilt llama.cpp libraries that
`npm install node-llama-cpp` puts under node_modules/@node-llama-cpp/linux-x64
in NODE_LLAMA_CPP_DIR (default ~/.cache/qvl-llamacpp).

    python3 scripts/llamacpp/quantize.py IN.gguf OUT.gguf Q8_0|Q4_K_M [--threads 2]

Q4_K_M is llama.cpp's usual mix (most matrices Q4_K, some attn_v/ffn_down
Q6_K, the tied embedding/output Q6_K): the files llama.cpp users run.
"""
import argparse
import ctypes
import glob
import os
import sys

FTYPES = {"Q8_0": 7, "Q4_K_M": 15, "Q4_K_S": 14, "Q6_K": 18, "F16": 1, "BF16": 32}
# llama_model_quantize_default_params()'s ftype (Q5_1 in older releases, Q8_0
# in newer ones), to check that the layout below matches the library.
DEFAULT_FTYPES = (9, 7)


class QuantizeParams(ctypes.Structure):
    # struct llama_model_quantize_params of the bundled llama.h (include/llama.h
    # in node-llama-cpp/llama/gitRelease.bundle). Only nthread and ftype are
    # set here; the rest keep llama.cpp's defaults.
    _fields_ = [
        ("nthread", ctypes.c_int32),
        ("ftype", ctypes.c_int),
        ("output_tensor_type", ctypes.c_int),
        ("token_embedding_type", ctypes.c_int),
        ("allow_requantize", ctypes.c_bool),
        ("quantize_output_tensor", ctypes.c_bool),
        ("only_copy", ctypes.c_bool),
        ("pure", ctypes.c_bool),
        ("keep_split", ctypes.c_bool),
        ("dry_run", ctypes.c_bool),
        ("imatrix", ctypes.c_void_p),
        ("kv_overrides", ctypes.c_void_p),
        ("tt_overrides", ctypes.c_void_p),
        ("prune_layers", ctypes.c_void_p),
        ("max_buf_size", ctypes.c_size_t),
        # Slack: a newer llama.h may add fields; the default-params call then
        # writes into this instead of past the end.
        ("_reserved", ctypes.c_uint8 * 256),
    ]


def load_libllama():
    root = os.environ.get("NODE_LLAMA_CPP_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "qvl-llamacpp")
    libdir = os.path.join(root, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
    found = sorted(glob.glob(os.path.join(libdir, "libllama.*so"))) + \
        sorted(glob.glob(os.path.join(libdir, "libllama.so*")))
    if not found:
        sys.exit(f"quantize: no libllama in {libdir} (run: cd {root} && npm install node-llama-cpp)")
    # libllama links libggml and libggml-base by name from its own folder (RUNPATH).
    lib = ctypes.CDLL(found[0])
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_backend_init.restype = None
    return lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("type", choices=sorted(FTYPES))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if not os.path.exists(args.input):
        sys.exit(f"quantize: {args.input}: no such file")
    if os.path.exists(args.output):
        sys.exit(f"quantize: {args.output} exists; remove it first")
    lib = load_libllama()
    lib.llama_backend_init()
    params = lib.llama_model_quantize_default_params()
    if params.ftype not in DEFAULT_FTYPES or params.output_tensor_type != params.token_embedding_type \
            or not params.quantize_output_tensor or params.only_copy:
        sys.exit("quantize: llama_model_quantize_params does not have the expected layout "
                 "(another llama.cpp version?); update QuantizeParams from its llama.h")
    params.nthread = args.threads
    params.ftype = FTYPES[args.type]
    tmp = args.output + ".part"
    rc = lib.llama_model_quantize(args.input.encode(), tmp.encode(), ctypes.byref(params))
    if rc != 0:
        if os.path.exists(tmp):
            os.remove(tmp)
        sys.exit(f"quantize: llama_model_quantize failed ({rc})")
    os.replace(tmp, args.output)
    print(f"wrote {args.output}: {os.path.getsize(args.output) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
