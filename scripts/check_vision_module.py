#!/usr/bin/python3
"""Cross-checks qvl's TorchScript vision module against the Python-made one. Optional, needs python3-torch 1.13.

qvl builds its vision module with libtorch alone (lib/qvl/vision/module_builder.cpp).
This script loads that file with Python's torch.jit.load, builds the same module the
Python way (export_torchscript.py, beside this file), and checks that the two have the
same parameters (names, shapes, dtypes, values) and give the same outputs, bit for bit,
from forward() and block_input() on random inputs of several image sizes:

    build/apps/qvl export --model DIR --dtype f32      # prints the module's path
    /usr/bin/python3 scripts/check_vision_module.py --model DIR --module PATH --dtype f32

Exit status 0 when they agree, 1 when they do not (each difference is printed).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torchscript  # noqa: E402  (exits with status 3 when torch is missing)

import torch  # noqa: E402


def random_inputs(vc: dict, grids, generator: torch.Generator):
    """Inputs of the shapes qvl feeds (positions.h), random values: both modules get the same ones."""
    patch_inputs = vc["in_channels"] * vc["temporal_patch_size"] * vc["patch_size"] ** 2
    head_dim = vc["hidden_size"] // vc["num_heads"]
    seq_lens = [h * w for (h, w) in grids]
    n = sum(seq_lens)
    pixels = torch.rand(n, patch_inputs, generator=generator) * 2 - 1
    pos_index = torch.randint(0, vc["num_position_embeddings"], (4, n), generator=generator)
    pos_weight = torch.rand(4, n, generator=generator)
    pos_weight = pos_weight / pos_weight.sum(0, keepdim=True)
    angles = torch.rand(n, head_dim // 2, generator=generator) * 6.3
    angles = torch.cat((angles, angles), dim=-1)
    return pixels, pos_index, pos_weight, angles.cos(), angles.sin(), seq_lens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--module", required=True, help="qvl's module (the path `qvl export` prints)")
    parser.add_argument("--dtype", choices=["bf16", "f32"], default="bf16", help="the dtype the module was made in")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    problems = []

    ours = torch.jit.load(args.module, map_location="cpu").eval()
    with torch.no_grad():
        theirs = export_torchscript.build(args.model, dtype)
    vc = {"in_channels": 3, "temporal_patch_size": 2, "patch_size": 16, "spatial_merge_size": 2,
          **export_torchscript.json.load(open(os.path.join(args.model, "config.json")))["vision_config"]}

    a, b = dict(ours.named_parameters()), dict(theirs.named_parameters())
    if sorted(a) != sorted(b):
        problems.append(f"parameter names differ: only qvl's {sorted(set(a) - set(b))[:5]}, "
                        f"only Python's {sorted(set(b) - set(a))[:5]}")
    for name in sorted(set(a) & set(b)):
        if a[name].dtype != b[name].dtype or a[name].shape != b[name].shape or not torch.equal(a[name], b[name]):
            problems.append(f"parameter {name} differs")
    print(f"parameters: {len(a)} in qvl's module, {len(b)} in Python's")

    merge = vc["spatial_merge_size"]
    generator = torch.Generator().manual_seed(0)
    # Two images in one call; the last has more patches than one attention step takes (1024 queries).
    sizes = ([(2, 3)], [(1, 1), (5, 2)], [(16, 12)], [(18, 16)])
    for grids in [[(h * merge, w * merge) for (h, w) in image] for image in sizes]:
        inputs = random_inputs(vc, grids, generator)
        with torch.no_grad():
            ours_out, theirs_out = ours(*inputs), theirs(*inputs)
            ours_in, theirs_in = ours.block_input(*inputs[:3]), theirs.block_input(*inputs[:3])
        pairs = [("block_input", ours_in, theirs_in), ("merged", ours_out[0], theirs_out[0])]
        pairs += [(f"deepstack {i}", x, y) for i, (x, y) in enumerate(zip(ours_out[1], theirs_out[1]))]
        if len(ours_out[1]) != len(theirs_out[1]):
            problems.append(f"grids {grids}: {len(ours_out[1])} deepstack outputs, Python's module {len(theirs_out[1])}")
        for what, x, y in pairs:
            if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
                diff = (x.float() - y.float()).abs().max().item() if x.shape == y.shape else float("nan")
                problems.append(f"grids {grids}: {what} differs (largest difference {diff})")
        print(f"grids {grids}: {len(pairs)} outputs compared, merged {tuple(ours_out[0].shape)} {ours_out[0].dtype}")

    for p in problems:
        print(f"DIFFERENT: {p}")
    print("qvl's module and Python's agree exactly" if not problems else f"{len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
