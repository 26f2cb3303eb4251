#!/usr/bin/env python3
"""How contiguous a cached file's pages are in physical memory (docs/PERFORMANCE.md,
"The checkpoint's page-cache state changes bf16 decode speed").

Maps each FILE, touches every 4 KB page (cached files: no disk reads), reads the pages'
physical frame numbers from /proc/self/pagemap (needs root: without it the kernel reports
zeros) and prints how often a page's successor is also the next physical frame, and the
mean length of such runs.

    sudo scripts/page_contiguity.py models/Qwen3-VL-2B-Instruct/*.safetensors
"""
import mmap
import os
import struct
import sys

PAGE = 4096
PFN_MASK = (1 << 55) - 1


def mapping_start(path):
    real = os.path.realpath(path)
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(real):
                return int(line.split("-")[0], 16)
    raise RuntimeError(f"{path}: mapping not found in /proc/self/maps")


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            pages = size // PAGE
            if pages < 2:
                print(f"{path}: too small")
                continue
            m = mmap.mmap(f.fileno(), pages * PAGE, prot=mmap.PROT_READ)
            for i in range(pages):
                m[i * PAGE]  # map the page
            start = mapping_start(path)
            fd = os.open("/proc/self/pagemap", os.O_RDONLY)
            entries = struct.unpack(f"{pages}Q", os.pread(fd, pages * 8, (start // PAGE) * 8))
            os.close(fd)
            m.close()
        frames = [e & PFN_MASK for e in entries]
        if not any(frames):
            sys.exit("pagemap reports no frame numbers: run as root")
        next_frame = sum(1 for a, b in zip(frames, frames[1:]) if b == a + 1)
        runs = pages - next_frame
        print(f"{path}: {pages} pages, {100 * next_frame / (pages - 1):.1f} % followed by the next "
              f"physical page, mean run {pages * PAGE // 1024 // runs} KB")


if __name__ == "__main__":
    main(sys.argv[1:])
