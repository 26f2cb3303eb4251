#!/usr/bin/env python3
"""Writes tests/data/images/formats/: small WebP, TIFF, BMP, GIF, PDF (and a few
more PNG/JPEG colour layouts) samples, and what the reference makes of them.

The reference is PIL 9.4, as the model's processor uses it:
Image.open -> ImageOps.exif_transpose -> convert("RGB"). Its bytes go to
decoded.safetensors (one U8 [height, width, 3] tensor per sample file name),
which tests/unit/test_image_formats.cpp compares with qvl's decoder.
PIL cannot read PDF; for PDF pages the golden is pdftoppm's rendering (poppler's
own tool, anti-aliased, the settings qvl uses) under "<file>#<page>@<dpi>";
page 2 of the TIFF is "pages2.tif#2". The 160x120 CLI samples (sample.*) have
no golden bytes, to keep the folder small.

Needs, at dev time only: /usr/bin/python3 with PIL 9.4, pdftoppm, tiffcp, cwebp, gif2webp.

    /usr/bin/python3 scripts/make_format_samples.py
"""
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import PIL
from PIL import Image, ImageDraw, ImageFont, ImageOps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "images", "formats")
assert PIL.__version__.startswith("9.4"), f"the reference is PIL 9.4, this is {PIL.__version__}"


# ---------------------------------------------------------------- pictures

def pattern(w, h):
    """A colourful picture with gradients and edges: every channel takes many values."""
    im = Image.new("RGB", (w, h))
    px = im.load()
    for y in range(h):
        for x in range(w):
            px[x, y] = ((x * 255) // max(w - 1, 1), (y * 255) // max(h - 1, 1), ((x * 7 + y * 13) * 5) % 256)
    d = ImageDraw.Draw(im)
    d.rectangle([w // 4, h // 4, w // 2, h // 2], fill=(250, 250, 20))
    d.ellipse([w // 2, h // 3, w - 2, h - 2], fill=(20, 40, 200))
    return im


def alpha_for(w, h):
    a = Image.new("L", (w, h))
    a.putdata([((x * 255) // max(w - 1, 1)) if y % 4 else 0 for y in range(h) for x in range(w)])
    return a


def poster(w, h, title, colour):
    """A picture with text and shapes, for the CLI samples."""
    im = Image.new("RGB", (w, h), (255, 255, 255))
    d = ImageDraw.Draw(im)
    d.rectangle([8, 8, w - 9, h - 9], outline=(0, 0, 0), width=3)
    d.ellipse([w // 2, h // 2 - 10, w - 20, h - 20], fill=colour)
    d.polygon([(20, h - 20), (60, h - 20), (40, h // 2)], fill=(30, 160, 40))
    font = ImageFont.load_default()
    d.text((20, 20), title, fill=(0, 0, 0), font=font)
    d.text((20, 36), "qvl formats", fill=(200, 0, 0), font=font)
    return im


# ---------------------------------------------------------------- writers

def save(im, name, **kw):
    path = os.path.join(OUT, name)
    im.save(path, **kw)
    return path


def bmp(name, w, h, bits, rows, header_size=40, compression=0, masks=None, palette=None, top_down=False,
        core=False):
    """rows: list of h packed rows (top row first), without padding."""
    stride = (w * bits + 31) // 32 * 4
    stored = rows if top_down else rows[::-1]
    data = b"".join(r + b"\0" * (stride - len(r)) for r in stored)
    if core:
        info = struct.pack("<IHHHH", 12, w, h, 1, bits)
        pal = b"".join(bytes([b, g, r]) for r, g, b in (palette or []))
    else:
        info = struct.pack("<IiiHHIIiiII", header_size, w, -h if top_down else h, 1, bits, compression,
                           len(data), 2835, 2835, len(palette or []), 0)
        extra = b""
        if masks:
            extra = struct.pack("<" + "I" * len(masks), *masks)
        if header_size == 40:
            info += extra
        else:
            info += extra + b"\0" * (header_size - 40 - len(extra))
        pal = b"".join(bytes([b, g, r, 0]) for r, g, b in (palette or []))
    offset = 14 + len(info) + len(pal)
    blob = b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset) + info + pal + data
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)


def pdf(name, pages, width_pt, height_pt, rotate=None):
    """A PDF whose pages are vector drawings (content streams); no fonts, so any
    machine renders the same. rotate: optional /Rotate per page."""
    objects = []  # (number, body bytes)

    def add(body):
        objects.append(body)
        return len(objects)

    catalog = add(None)
    tree = add(None)
    kids = []
    for i, content in enumerate(pages):
        stream = content.encode()
        c = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        rot = b" /Rotate %d" % rotate[i] if rotate and rotate[i] else b""
        kids.append(add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %g %g] /Contents %d 0 R%s >>"
                        % (tree, width_pt, height_pt, c, rot)))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    objects[tree - 1] = (b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids) +
                         b"] /Count %d >>" % len(kids))
    out = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, catalog, xref)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(out)


def seven_segment(digit, x, y, s):
    """PDF path operators drawing a digit as filled bars (x, y: lower left, s: bar length)."""
    t = s / 5
    bars = {"a": (x, y + 2 * s, s, t), "g": (x, y + s, s, t), "d": (x, y, s, t),
            "f": (x, y + s, t, s), "b": (x + s - t, y + s, t, s), "e": (x, y, t, s), "c": (x + s - t, y, t, s)}
    lit = {1: "bc", 2: "abged", 3: "abgcd", 4: "fgbc", 5: "afgcd"}[digit]
    return "".join("%g %g %g %g re f\n" % bars[k] for k in lit)


def pdf_page(n):
    colours = [(0.9, 0.1, 0.1), (0.1, 0.6, 0.1), (0.1, 0.2, 0.9)]
    r, g, b = colours[(n - 1) % 3]
    return ("%g %g %g rg 10 10 60 40 re f\n" % (r, g, b) +
            "0 0 0 rg\n" + seven_segment(n, 90, 20, 25) +
            "0.5 0.5 0 RG 3 w 5 5 m 139 103 l S\n")


# ---------------------------------------------------------------- golden bytes

def reference_rgb(path):
    with Image.open(path) as im:
        if im.format == "TIFF" and im.getexif().get(0x0112, 1) != 1:
            # PIL 9.4 turns a TIFF upright twice: load() applies the orientation tag
            # (TiffImageFile.load_end) and exif_transpose then applies it again
            # (orientation 6 comes out turned 180 degrees). qvl turns it once, like
            # every other format; the golden is PIL's once-turned load().
            im.load()
            return im.convert("RGB")
        return ImageOps.exif_transpose(im).convert("RGB")


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for key in sorted(tensors):
        im = tensors[key]
        data = im.tobytes()
        header[key] = {"dtype": "U8", "shape": [im.height, im.width, 3], "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    W, H = 40, 30
    rgb = pattern(W, H)
    rgba = rgb.copy()
    rgba.putalpha(alpha_for(W, H))
    gray = rgb.convert("L")
    pal = rgb.quantize(64)
    tmp = tempfile.mkdtemp()

    # --- CLI samples: pictures with text and shapes
    poster(160, 120, "WebP sample", (220, 120, 0)).save(os.path.join(OUT, "sample.webp"), lossless=True)
    poster(160, 120, "BMP sample", (0, 120, 220)).quantize(32).save(os.path.join(OUT, "sample.bmp"))
    poster(160, 120, "GIF sample", (160, 0, 160)).quantize(32).save(os.path.join(OUT, "sample.gif"))
    p1 = poster(160, 120, "TIFF page 1", (220, 0, 0))
    p2 = poster(160, 120, "TIFF page 2", (0, 0, 220)).convert("L")
    p1.save(os.path.join(OUT, "pages2.tif"), save_all=True, append_images=[p2], compression="tiff_deflate")
    pdf("pages3.pdf", [pdf_page(n) for n in (1, 2, 3)], 144, 108)
    pdf("rotated.pdf", [pdf_page(4), pdf_page(5)], 144, 108, rotate=[90, 270])  # landscape pages turned portrait

    # --- WebP
    save(rgb, "lossy.webp", quality=80)
    save(rgba, "lossless_alpha.webp", lossless=True, exact=True)
    save(rgba, "lossy_alpha.webp", quality=80)
    exif = Image.Exif()
    exif[0x0112] = 6
    save(rgb, "exif6.webp", lossless=True, exif=exif.tobytes())
    frames = [rgb, rgb.transpose(Image.FLIP_LEFT_RIGHT)]
    frames[0].save(os.path.join(OUT, "animated.webp"), save_all=True, append_images=frames[1:], duration=100)

    # --- TIFF
    save(rgb, "rgb8.tif")
    save(rgb, "rgb8_lzw.tif", compression="tiff_lzw")
    save(rgb, "rgb8_jpeg.tif", compression="jpeg", quality=90)
    save(rgba, "rgba8.tif", compression="tiff_adobe_deflate")
    save(gray, "gray8.tif")
    save(rgb.convert("1"), "bilevel.tif", compression="group4")
    save(pal, "palette8.tif")
    save(rgb.convert("CMYK"), "cmyk8.tif")
    save(gray.convert("LA"), "gray_alpha.tif")
    g16 = Image.new("I;16", (W, H))
    g16.putdata([(x * 9 + y * 31) % 700 for y in range(H) for x in range(W)])  # values above 255 are clipped
    save(g16, "gray16.tif")
    save(rgb, "orientation6.tif", tiffinfo={274: 6})
    subprocess.run(["tiffcp", "-t", "-w", "16", "-l", "16", "-c", "lzw", os.path.join(OUT, "rgb8.tif"),
                    os.path.join(OUT, "rgb8_tiled.tif")], check=True)
    # Separate colour planes: libtiff's own RGBA conversion (TIFFRGBAImage) in qvl.
    subprocess.run(["tiffcp", "-p", "separate", os.path.join(OUT, "rgb8.tif"), os.path.join(OUT, "rgb8_planar.tif")],
                   check=True)
    # 16-bit RGB: PIL cannot write it; tiffcp keeps the samples of a raw file we write ourselves.
    rgb16 = b"".join(struct.pack("<HHH", (x * 1500 + 7) % 65536, (y * 2100 + 300) % 65536, (x * y * 97) % 65536)
                     for y in range(H) for x in range(W))
    write_raw_tiff(os.path.join(OUT, "rgb16.tif"), W, H, 16, 3, 2, rgb16)
    write_raw_tiff(os.path.join(OUT, "cmyk_raw.tif"), W, H, 8, 4, 5,
                   bytes(((x * 6) % 256, (y * 8) % 256, (x + y) % 256, (x * y) % 200) [i] for y in range(H)
                         for x in range(W) for i in range(4)))

    # --- BMP
    save(rgb, "rgb24.bmp")
    save(pal, "palette8.bmp")
    save(rgb.quantize(16), "palette4.bmp")
    save(rgb.convert("1"), "bilevel.bmp")
    px = rgb.load()
    rows = lambda f: [b"".join(f(*px[x, y]) for x in range(W)) for y in range(H)]
    bmp("rgb555.bmp", W, H, 16, rows(lambda r, g, b: struct.pack("<H", (r >> 3) << 10 | (g >> 3) << 5 | b >> 3)))
    bmp("rgb565_bitfields.bmp", W, H, 16, rows(lambda r, g, b: struct.pack("<H", (r >> 3) << 11 | (g >> 2) << 5 | b >> 3)),
        compression=3, masks=[0xF800, 0x07E0, 0x001F])
    bmp("bgrx32.bmp", W, H, 32, rows(lambda r, g, b: bytes([b, g, r, 0x55])))
    apx = rgba.load()
    bmp("bgra32_v5_topdown.bmp", W, H, 32,
        [b"".join(bytes([apx[x, y][2], apx[x, y][1], apx[x, y][0], apx[x, y][3]]) for x in range(W)) for y in range(H)],
        header_size=124, compression=3, masks=[0xFF0000, 0xFF00, 0xFF, 0xFF000000], top_down=True)
    core_pal = [(i * 16, 255 - i * 16, (i * 40) % 256) for i in range(16)]
    bmp("core_palette4.bmp", W, H, 4,
        [bytes(((x + y) % 16) << 4 | ((x + 1 + y) % 16) for x in range(0, W, 2)) for y in range(H)],
        palette=core_pal, core=True)
    # RLE8: qvl refuses it (with a message saying so); PIL reads it.
    rle = b"".join(bytes([W, (y * 9) % 16, 0, 0]) for y in range(H)) + b"\0\1"
    with open(os.path.join(OUT, "rle8.bmp"), "wb") as f:
        info = struct.pack("<IiiHHIIiiII", 40, W, H, 1, 8, 1, len(rle), 0, 0, 16, 0)
        pal16 = b"".join(bytes([i * 16, i * 8, 255 - i * 16, 0]) for i in range(16))
        off = 14 + 40 + len(pal16)
        f.write(b"BM" + struct.pack("<IHHI", off + len(rle), 0, 0, off) + info + pal16 + rle)

    # --- GIF
    save(pal, "palette.gif")
    save(pal, "interlaced.gif", interlace=True)
    save(pal, "transparent.gif", transparency=5)
    gpal = [((i * 37) % 256, (i * 91) % 256, (255 - i) % 256) for i in range(256)]
    lpal = [((i * 13) % 256, 200, (i * 5) % 256) for i in range(256)]
    write_gif_offset_frame(os.path.join(OUT, "offset_frame.gif"), (W, H), (5, 4, 20, 15), gpal)
    write_gif_offset_frame(os.path.join(OUT, "offset_frame_transparent.gif"), (W, H), (5, 4, 20, 15), gpal,
                           transparent=9)
    write_gif_offset_frame(os.path.join(OUT, "local_palette_overhang.gif"), (W, H), (30, 20, 20, 15), gpal,
                           local_palette=lpal)
    frames = [pal, rgb.transpose(Image.FLIP_TOP_BOTTOM).quantize(64)]
    frames[0].save(os.path.join(OUT, "animated.gif"), save_all=True, append_images=frames[1:], duration=100)

    # --- PNG and JPEG colour layouts (qvl has read these before; here against PIL directly)
    save(gray.convert("LA"), "gray_alpha.png")
    tr = pal.copy()
    tr.info["transparency"] = 3
    save(tr, "palette_trns.png", transparency=3)
    save(rgba, "rgba.png")
    save(g16, "gray16.png")
    write_png_rgb16(os.path.join(OUT, "rgb16.png"), W, H, rgb16)
    save(rgb.convert("CMYK"), "cmyk.jpg", quality=90)
    save(gray, "gray.jpg", quality=90)

    # --- golden bytes
    refused = {"animated.webp", "rle8.bmp"}
    golden = {}
    for name in sorted(os.listdir(OUT)):
        # The CLI samples are large next to the rest; their formats are covered by the small files.
        if name.endswith(".pdf") or name in refused or name.startswith("sample."):
            continue
        golden[name] = reference_rgb(os.path.join(OUT, name))
    # Page 2 of the TIFF, and the PDF pages as pdftoppm draws them.
    with Image.open(os.path.join(OUT, "pages2.tif")) as im:
        im.seek(1)
        golden["pages2.tif#2"] = im.convert("RGB")
    for page in (1, 2, 3):
        for dpi in (72,):  # 150 dpi: the test checks the size only (the bytes would be 200 kB a page)
            prefix = os.path.join(tmp, f"p{page}_{dpi}")
            subprocess.run(["pdftoppm", "-r", str(dpi), "-f", str(page), "-l", str(page), "-singlefile",
                            os.path.join(OUT, "pages3.pdf"), prefix], check=True)
            golden[f"pages3.pdf#{page}@{dpi}"] = Image.open(prefix + ".ppm").convert("RGB")
    for page in (1, 2):
        prefix = os.path.join(tmp, f"r{page}")
        subprocess.run(["pdftoppm", "-r", "72", "-f", str(page), "-l", str(page), "-singlefile",
                        os.path.join(OUT, "rotated.pdf"), prefix], check=True)
        golden[f"rotated.pdf#{page}@72"] = Image.open(prefix + ".ppm").convert("RGB")
    write_safetensors(os.path.join(OUT, "decoded.safetensors"), golden)
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"{len(os.listdir(OUT))} files, {total} bytes in {OUT}")


def gif_lzw(indices):
    """8-bit GIF LZW data without compression: each pixel its own 9-bit code, a clear code
    often enough that the decoder's table never grows past 9 bits."""
    clear, end = 256, 257
    codes = [clear]
    for i, v in enumerate(indices):
        if i and i % 250 == 0:
            codes.append(clear)
        codes.append(v)
    codes.append(end)
    bits, nbits, out = 0, 0, bytearray()
    for c in codes:
        bits |= c << nbits
        nbits += 9
        while nbits >= 8:
            out.append(bits & 255)
            bits >>= 8
            nbits -= 8
    if nbits:
        out.append(bits & 255)
    blocks = b"".join(bytes([len(out[i:i + 255])]) + bytes(out[i:i + 255]) for i in range(0, len(out), 255))
    return b"\x08" + blocks + b"\x00"


def write_gif_offset_frame(path, screen, frame, palette, local_palette=None, transparent=None):
    """A GIF whose only frame covers part of (or sticks out of) the logical screen."""
    sw, sh = screen
    left, top, fw, fh = frame
    out = b"GIF89a" + struct.pack("<HHBBB", sw, sh, 0xF7, 0, 0) + bytes(sum(palette, ()))
    if transparent is not None:
        out += b"\x21\xf9\x04\x01\x00\x00" + bytes([transparent]) + b"\x00"
    flags = 0x87 if local_palette else 0
    out += b"," + struct.pack("<HHHHB", left, top, fw, fh, flags)
    if local_palette:
        out += bytes(sum(local_palette, ()))
    out += gif_lzw([(x * 3 + y * 7) % 256 for y in range(fh) for x in range(fw)]) + b";"
    with open(path, "wb") as f:
        f.write(out)


def write_png_rgb16(path, w, h, little_endian_samples):
    """A 16-bit RGB PNG (PIL cannot write one) from little-endian samples."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    raw = b""
    for y in range(h):
        row = little_endian_samples[y * w * 6:(y + 1) * w * 6]
        raw += b"\0" + b"".join(row[i + 1:i + 2] + row[i:i + 1] for i in range(0, len(row), 2))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write_raw_tiff(path, w, h, bits, spp, photometric, pixels):
    """An uncompressed little-endian single-strip TIFF (for layouts PIL does not write)."""
    entries = []
    extra = b""
    base = 8
    def e(tag, typ, count, value):
        entries.append((tag, typ, count, value))
    n_entries = 9
    ifd_size = 2 + n_entries * 12 + 4
    bps_off = base + ifd_size
    bps = struct.pack("<" + "H" * spp, *([bits] * spp))
    data_off = bps_off + len(bps)
    e(256, 4, 1, w)
    e(257, 4, 1, h)
    e(258, 3, spp, bps_off if spp > 2 else bits)
    e(259, 3, 1, 1)
    e(262, 3, 1, photometric)
    e(273, 4, 1, data_off)
    e(277, 3, 1, spp)
    e(278, 4, 1, h)
    e(279, 4, 1, len(pixels))
    ifd = struct.pack("<H", len(entries))
    for tag, typ, count, value in entries:
        ifd += struct.pack("<HHI", tag, typ, count) + (struct.pack("<HH", value, 0) if typ == 3 and count == 1
                                                        else struct.pack("<I", value))
    ifd += struct.pack("<I", 0)
    with open(path, "wb") as f:
        f.write(b"II*\0" + struct.pack("<I", base) + ifd + bps + pixels)


if __name__ == "__main__":
    sys.exit(main())
