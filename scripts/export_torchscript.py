#!/usr/bin/python3
"""Builds qvl's vision tower (encoder + merger + deepstack mergers) as one TorchScript file, from Python.

qvl never runs this script: it makes the same module with libtorch alone
(lib/qvl/vision/module_builder.cpp, same parameters, same TorchScript methods).
This is the Python version of that module, optional (it needs python3-torch):
scripts/check_vision_module.py compares the two, and it is a starting point for
making your own variant. Run it with Debian's Python, whose torch is the libtorch
qvl links (a newer torch writes files libtorch 1.13 cannot read):

    /usr/bin/python3 scripts/export_torchscript.py --model DIR --dtype bf16 --out vision.pt

A module written here is not picked up by qvl's cache by itself (its file name
carries the builder's version); pass it where you need it.

The module's inputs are what qvl computes in C++ (lib/qvl/vision/positions.cpp):
  pixel_values [N, C*T*P*P] float32, patches in merge-window order
  pos_index    [4, N] int64    rows of the learned position table each patch blends
  pos_weight   [4, N] float32  their bilinear weights
  rope_cos/sin [N, head_dim] float32
  seq_lens     List[int]       patches per image frame; attention stays inside each
Outputs: (merged [N/4, out_hidden], [deepstack features, same shape]) in the export dtype.
"""
import argparse
import json
import os
import struct
import sys

# The exit status for "import torch failed".
EXIT_NO_TORCH = 3

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from typing import List, Tuple
except ImportError as e:
    print(f"export_torchscript.py: cannot import torch ({e}); install it with: sudo apt-get install python3-torch",
          file=sys.stderr)
    sys.exit(EXIT_NO_TORCH)

# Queries per attention step: bounds the score matrix for large images.
QUERY_CHUNK = 1024
LAYER_NORM_EPS = 1e-6


class PatchEmbed(nn.Module):
    """The checkpoint's Conv3d has kernel == stride == one patch, so it is a linear map of each row."""

    def __init__(self, patch_inputs: int, hidden: int, **where):
        super().__init__()
        self.proj = nn.Linear(patch_inputs, hidden, **where)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.proj(pixel_values.to(self.proj.weight.dtype))


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """2-D rotary in float32 whatever the compute dtype; x is [N, heads, head_dim], cos/sin [N, head_dim]."""
    x32 = x.float()
    half = x32.shape[-1] // 2
    swapped = torch.cat((-x32[..., half:], x32[..., :half]), dim=-1)
    rotated = x32 * cos.unsqueeze(1) + swapped * sin.unsqueeze(1)
    return rotated.to(x.dtype)


class VisionAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, **where):
        super().__init__()
        self.heads = heads
        self.scale = float((hidden // heads) ** -0.5)
        self.query_chunk = QUERY_CHUNK
        self.qkv = nn.Linear(hidden, 3 * hidden, **where)
        self.proj = nn.Linear(hidden, hidden, **where)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, seq_lens: List[int]) -> torch.Tensor:
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.heads, -1).unbind(1)
        q = rotate_pairs(q, cos, sin).transpose(0, 1)  # [heads, N, head_dim]
        k = rotate_pairs(k, cos, sin).transpose(0, 1)
        v = v.transpose(0, 1)
        outputs: List[torch.Tensor] = []
        start = 0
        for length in seq_lens:
            keys = k[:, start:start + length]
            values = v[:, start:start + length]
            for q_start in range(start, start + length, self.query_chunk):
                q_end = min(q_start + self.query_chunk, start + length)
                scores = torch.matmul(q[:, q_start:q_end], keys.transpose(1, 2)) * self.scale
                probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
                outputs.append(torch.matmul(probs, values))
            start += length
        attended = torch.cat(outputs, dim=1).transpose(0, 1).reshape(n, -1)
        return self.proj(attended)


class VisionMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int, **where):
        super().__init__()
        self.linear_fc1 = nn.Linear(hidden, intermediate, **where)
        self.linear_fc2 = nn.Linear(intermediate, hidden, **where)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate="tanh"))


class VisionBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, **where):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, eps=LAYER_NORM_EPS, **where)
        self.norm2 = nn.LayerNorm(hidden, eps=LAYER_NORM_EPS, **where)
        self.attn = VisionAttention(hidden, heads, **where)
        self.mlp = VisionMLP(hidden, intermediate, **where)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, seq_lens: List[int]) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, seq_lens)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """Joins each merge window's patches into one token of the decoder's width.

    The main merger normalizes each patch before joining; the deepstack mergers
    normalize the joined vector instead (norm_after_join)."""

    def __init__(self, hidden: int, window: int, out_hidden: int, norm_after_join: bool, **where):
        super().__init__()
        self.joined = hidden * window
        self.norm_after_join = norm_after_join
        self.norm = nn.LayerNorm(self.joined if norm_after_join else hidden, eps=LAYER_NORM_EPS, **where)
        self.linear_fc1 = nn.Linear(self.joined, self.joined, **where)
        self.linear_fc2 = nn.Linear(self.joined, out_hidden, **where)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm_after_join:
            x = self.norm(x.reshape(-1, self.joined))
        else:
            x = self.norm(x).reshape(-1, self.joined)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))


class VisionTower(nn.Module):
    def __init__(self, vc: dict, **where):
        """`where` (device=, dtype=) goes to every layer."""
        super().__init__()
        hidden = vc["hidden_size"]
        patch_inputs = vc["in_channels"] * vc["temporal_patch_size"] * vc["patch_size"] ** 2
        window = vc["spatial_merge_size"] ** 2
        self.patch_embed = PatchEmbed(patch_inputs, hidden, **where)
        self.pos_embed = nn.Embedding(vc["num_position_embeddings"], hidden, **where)
        self.blocks = nn.ModuleList(
            [VisionBlock(hidden, vc["num_heads"], vc["intermediate_size"], **where) for _ in range(vc["depth"])])
        self.merger = PatchMerger(hidden, window, vc["out_hidden_size"], norm_after_join=False, **where)
        self.deepstack_layers: List[int] = list(vc["deepstack_visual_indexes"])
        self.deepstack_merger_list = nn.ModuleList(
            [PatchMerger(hidden, window, vc["out_hidden_size"], norm_after_join=True, **where)
             for _ in self.deepstack_layers])

    @torch.jit.export
    def block_input(self, pixel_values: torch.Tensor, pos_index: torch.Tensor,
                    pos_weight: torch.Tensor) -> torch.Tensor:
        """Patch embedding plus the bilinearly blended position embedding (blended in float32)."""
        patches = self.patch_embed(pixel_values)
        corners = self.pos_embed.weight[pos_index].float() * pos_weight.unsqueeze(-1)
        positions = corners[0] + corners[1] + corners[2] + corners[3]
        return (patches.float() + positions).to(patches.dtype)

    def forward(self, pixel_values: torch.Tensor, pos_index: torch.Tensor, pos_weight: torch.Tensor,
                rope_cos: torch.Tensor, rope_sin: torch.Tensor,
                seq_lens: List[int]) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        x = self.block_input(pixel_values, pos_index, pos_weight)
        taps: List[torch.Tensor] = []
        for layer, block in enumerate(self.blocks):
            x = block(x, rope_cos, rope_sin, seq_lens)
            if layer in self.deepstack_layers:
                taps.append(x)
        deepstack: List[torch.Tensor] = []
        for i, merger in enumerate(self.deepstack_merger_list):
            deepstack.append(merger(taps[i]))
        return self.merger(x), deepstack


# --- reading the checkpoint (no safetensors package on Debian) ---

SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
VISION_PREFIXES = ("model.visual.", "visual.")


def shard_paths(model_dir: str) -> List[str]:
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(model_dir, n) for n in names]
    single = os.path.join(model_dir, "model.safetensors")
    if not os.path.exists(single):
        fail(f"{model_dir}: no model.safetensors or model.safetensors.index.json")
    return [single]


def read_vision_tensors(path: str, out: dict) -> None:
    with open(path, "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_len))
        data_start = 8 + header_len
        for name, info in header.items():
            prefix = next((p for p in VISION_PREFIXES if name.startswith(p)), None)
            if prefix is None:
                continue
            if info["dtype"] not in SAFETENSORS_DTYPES:
                fail(f"{path}: tensor {name} has dtype {info['dtype']}, expected BF16, F16 or F32")
            begin, end = info["data_offsets"]
            f.seek(data_start + begin)
            raw = bytearray(f.read(end - begin))
            if len(raw) != end - begin:
                fail(f"{path}: tensor {name} is truncated")
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
            tensor = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
            out[name[len(prefix):]] = tensor.reshape(info["shape"])


def load_vision_state(model_dir: str, patch_inputs: int) -> dict:
    state: dict = {}
    for path in shard_paths(model_dir):
        read_vision_tensors(path, state)
    if not state:
        fail(f"{model_dir}: the checkpoint has no vision tensors (model.visual.*)")
    conv = state.get("patch_embed.proj.weight")
    if conv is not None:
        state["patch_embed.proj.weight"] = conv.reshape(conv.shape[0], patch_inputs)
    return state


def build(model_dir: str, dtype: torch.dtype) -> torch.jit.ScriptModule:
    with open(os.path.join(model_dir, "config.json")) as f:
        vc = json.load(f)["vision_config"]
    defaults = {"in_channels": 3, "temporal_patch_size": 2, "patch_size": 16, "spatial_merge_size": 2}
    vc = {**defaults, **vc}
    patch_inputs = vc["in_channels"] * vc["temporal_patch_size"] * vc["patch_size"] ** 2
    if any(not 0 <= i < vc["depth"] for i in vc["deepstack_visual_indexes"]):
        fail(f"{model_dir}/config.json: deepstack_visual_indexes {vc['deepstack_visual_indexes']} "
             f"are not all below depth {vc['depth']}")
    state = load_vision_state(model_dir, patch_inputs)
    # Built on the meta device so no time or memory goes into random initial weights.
    tower = VisionTower(vc, device="meta", dtype=dtype).to_empty(device="cpu")
    try:
        tower.load_state_dict(state, strict=True)
    except RuntimeError as e:
        fail(f"{model_dir}: vision weights do not match config.json: {' '.join(str(e).split())[:400]}")
    tower.eval()
    return torch.jit.script(tower)


def fail(message: str) -> None:
    print(f"export_torchscript.py: {message}", file=sys.stderr)
    sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    parser.add_argument("--out", required=True, help="TorchScript file to write (atomically)")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    with torch.no_grad():
        module = build(args.model, dtype)
    tmp = f"{args.out}.tmp.{os.getpid()}"
    try:
        torch.jit.save(module, tmp)
        os.replace(tmp, args.out)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        fail(f"cannot write {args.out}: {e}")


if __name__ == "__main__":
    main()
