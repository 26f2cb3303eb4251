#!/usr/bin/env python3
"""Writes tests/data/bad/: tiny broken and unusual image files for the image decoder tests
(PNG/JPEG, and hostile PDF/TIFF/BMP/GIF/WebP files: lying page counts, a password, directory
loops, absurd offsets and sizes, truncation).

Only the Python standard library (zlib, struct, ctypes) and the system's libturbojpeg are used,
so the corpus can be regenerated on any machine that builds qvl. The pixel values of the valid
files are simple formulas that tests/unit/test_image_files.cpp recomputes on its own.

    python3 scripts/make_bad_images.py            # writes tests/data/bad/*
"""
import ctypes
import hashlib
import ctypes.util
import os
import struct
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(ROOT, "tests", "data", "images")
OUT = os.path.join(ROOT, "tests", "data", "bad")


# ---------------------------------------------------------------- PNG

def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width, height, bit_depth, color_type, rows, extra_chunks=(), interlaced=False, after_idat=()):
    """rows: list of raw scanline bytes (no filter byte) for a non-interlaced image, or a
    function (x, y) -> sample bytes of one pixel for an interlaced one."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 1 if interlaced else 0)
    if interlaced:
        raw = adam7(width, height, rows)
    else:
        raw = b"".join(b"\x00" + r for r in rows)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    for kind, body in extra_chunks:
        data += chunk(kind, body)
    data += chunk(b"IDAT", zlib.compress(raw, 9))
    for kind, body in after_idat:
        data += chunk(kind, body)
    return data + chunk(b"IEND", b"")


def adam7(width, height, pixel):
    """Scanlines of the seven Adam7 passes (8-bit samples), each row with filter byte 0."""
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    out = b""
    for x0, y0, dx, dy in passes:
        xs = range(x0, width, dx)
        if not xs:
            continue
        for y in range(y0, height, dy):
            out += b"\x00" + b"".join(pixel(x, y) for x in xs)
    return out


def be16(values):
    return b"".join(struct.pack(">H", v) for v in values)


def exif_block(orientation, big_endian=False):
    """A minimal TIFF structure with IFD0 holding only the orientation tag (SHORT)."""
    if big_endian:
        return b"MM\x00\x2a" + struct.pack(">I", 8) + struct.pack(">H", 1) + \
            struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(">I", 0)
    return b"II\x2a\x00" + struct.pack("<I", 8) + struct.pack("<H", 1) + \
        struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack("<I", 0)


# Formulas the tests recompute.
def gray16_value(i):  # 8 pixels in a 4x2 image
    return [0, 1, 255, 256, 300, 4096, 0xFF00, 0xFFFF][i]


def rgb16_value(x, y, c):  # 3x2 image
    return (x * 0x5432 + y * 0x2F01 + c * 0x1F3D + 0x0102) & 0xFFFF


def interlaced_rgb(x, y):  # 9x7 image
    return bytes([(x * 25 + 3) & 0xFF, (y * 31 + 7) & 0xFF, (x * y * 5) & 0xFF])


def apng_default_rgb(x, y):  # 5x3 default image (frame 0) of animated.png
    return bytes([(x * 40 + 10) & 0xFF, (y * 70 + 20) & 0xFF, (x * y * 13 + 5) & 0xFF])


def apng_frame_control(sequence, width, height, x, y):
    """fcTL: sequence number, frame size and offset, delay 1/10 s, no disposal, no blending."""
    return struct.pack(">IIIIIHHBB", sequence, width, height, x, y, 1, 10, 0, 0)


def gradient_rgb(x, y):  # 24x16 source of the orientation JPEGs
    return (x * 10, y * 15, 255 - x * 5 - y * 5)


def make_pngs(files):
    # 16-bit grayscale: PIL opens it as I;16 and clips values over 255 when converting to RGB.
    files["gray16.png"] = png(4, 2, 16, 0, [be16([gray16_value(i) for i in range(r * 4, r * 4 + 4)]) for r in range(2)])
    # 16-bit RGB: PIL keeps the high byte.
    files["rgb16.png"] = png(3, 2, 16, 2, [be16([rgb16_value(x, y, c) for x in range(3) for c in range(3)])
                                           for y in range(2)])
    # 16-bit RGBA: high byte, alpha dropped.
    files["rgba16.png"] = png(3, 2, 16, 6, [be16([rgb16_value(x, y, c) if c < 3 else 0x1234 * (x + 1)
                                                  for x in range(3) for c in range(4)]) for y in range(2)])
    # 8-bit gray + alpha: gray replicated, alpha dropped.
    files["gray_alpha.png"] = png(4, 1, 8, 4, [bytes([0, 255, 77, 0, 128, 30, 255, 200])])
    # 16-bit gray + alpha: high byte of gray.
    files["gray_alpha16.png"] = png(2, 1, 16, 4, [be16([0xAB01, 0xFFFF, 0x0280, 0x0000])])
    # 1-bit and 2-bit gray: scaled to 0..255 (x255, x85).
    files["gray1.png"] = png(10, 1, 1, 0, [bytes([0b10110000, 0b01000000])])
    files["gray2.png"] = png(4, 1, 2, 0, [bytes([0b00011011])])
    # 8-bit palette with transparency (tRNS is ignored by convert("RGB")).
    palette = bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30])
    files["palette.png"] = png(4, 2, 8, 3, [bytes([0, 1, 2, 3]), bytes([3, 2, 1, 0])],
                               extra_chunks=[(b"PLTE", palette), (b"tRNS", bytes([0, 128, 255, 7]))])
    # 2-bit palette: four pixels per byte.
    files["palette2.png"] = png(5, 1, 2, 3, [bytes([0b00011011, 0b10000000])], extra_chunks=[(b"PLTE", palette)])
    # Adam7 interlaced RGB.
    files["interlaced.png"] = png(9, 7, 8, 2, interlaced_rgb, interlaced=True)
    # eXIf orientation 6 (turn right), stored after the pixels as some writers do.
    files["exif6.png"] = png(3, 2, 8, 2, [bytes(v for x in range(3) for v in interlaced_rgb(x, y)) for y in range(2)],
                             after_idat=[(b"eXIf", exif_block(6))])
    # Animated PNG (APNG): the IDAT image is frame 0 (an fcTL precedes it) and a
    # second, smaller magenta frame follows in fdAT. PIL opens frame 0, so
    # convert("RGB") gives the IDAT image; decoders that know no APNG skip the
    # ancillary acTL/fcTL/fdAT chunks and show the same.
    second_frame = b"".join(b"\x00" + bytes([255, 0, 255]) * 3 for _ in range(2))
    files["animated.png"] = png(5, 3, 8, 2, [b"".join(apng_default_rgb(x, y) for x in range(5)) for y in range(3)],
                                extra_chunks=[(b"acTL", struct.pack(">II", 2, 0)),
                                              (b"fcTL", apng_frame_control(0, 5, 3, 0, 0))],
                                after_idat=[(b"fcTL", apng_frame_control(1, 3, 2, 1, 1)),
                                            (b"fdAT", struct.pack(">I", 2) + zlib.compress(second_frame, 9))])
    # Valid, but wider than the processor's 200:1 aspect-ratio limit.
    files["too_wide.png"] = png(402, 2, 8, 0, [bytes(402), bytes(402)])
    # A header claiming 100000 x 100000 pixels: must be refused before any allocation.
    files["huge_header.png"] = png(100000, 100000, 8, 2, [b""])[:33] + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + \
        chunk(b"IEND", b"")
    # Cut in the middle of the compressed pixels.
    small = open(os.path.join(IMAGES, "small.png"), "rb").read()
    files["truncated.png"] = small[: len(small) * 3 // 5]
    # The IDAT chunk's checksum damaged (the pixel data itself is intact).
    good = files["gray_alpha.png"]
    idat = good.index(b"IDAT")
    crc_at = idat + 4 + struct.unpack(">I", good[idat - 4:idat])[0]
    files["bad_crc.png"] = good[:crc_at] + bytes([good[crc_at] ^ 0xFF]) + good[crc_at + 1:]


# ---------------------------------------------------------------- JPEG

class TurboJpeg:
    PF_RGB, PF_CMYK, SAMP_444, SAMP_420 = 0, 11, 0, 2
    XOPT_PROGRESSIVE = 32

    class Transform(ctypes.Structure):
        _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int),
                    ("op", ctypes.c_int), ("options", ctypes.c_int), ("data", ctypes.c_void_p),
                    ("customFilter", ctypes.c_void_p)]

    def __init__(self):
        self.lib = ctypes.CDLL(ctypes.util.find_library("turbojpeg") or "libturbojpeg.so.0")
        self.lib.tjInitCompress.restype = ctypes.c_void_p
        self.lib.tjInitTransform.restype = ctypes.c_void_p
        self.lib.tjGetErrorStr2.restype = ctypes.c_char_p

    def _check(self, handle, rc):
        if rc != 0:
            raise RuntimeError(self.lib.tjGetErrorStr2(ctypes.c_void_p(handle)).decode())

    def compress(self, pixels, width, height, pixel_format, subsampling, quality):
        handle = self.lib.tjInitCompress()
        out, size = ctypes.POINTER(ctypes.c_ubyte)(), ctypes.c_ulong(0)
        buf = (ctypes.c_ubyte * len(pixels)).from_buffer_copy(pixels)
        self._check(handle, self.lib.tjCompress2(ctypes.c_void_p(handle), buf, width, 0, height, pixel_format,
                                                 ctypes.byref(out), ctypes.byref(size), subsampling, quality, 0))
        data = ctypes.string_at(out, size.value)
        self.lib.tjFree(out)
        self.lib.tjDestroy(ctypes.c_void_p(handle))
        return data

    def progressive_copy(self, jpeg):
        """Lossless re-encoding: same DCT coefficients, progressive scans."""
        handle = self.lib.tjInitTransform()
        src = (ctypes.c_ubyte * len(jpeg)).from_buffer_copy(jpeg)
        out, size = ctypes.POINTER(ctypes.c_ubyte)(), ctypes.c_ulong(0)
        xform = self.Transform(0, 0, 0, 0, 0, self.XOPT_PROGRESSIVE, None, None)
        self._check(handle, self.lib.tjTransform(ctypes.c_void_p(handle), src, ctypes.c_ulong(len(jpeg)), 1,
                                                 ctypes.byref(out), ctypes.byref(size), ctypes.byref(xform), 0))
        data = ctypes.string_at(out, size.value)
        self.lib.tjFree(out)
        self.lib.tjDestroy(ctypes.c_void_p(handle))
        return data


def with_app1(jpeg, body):
    segment = b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body
    return jpeg[:2] + segment + jpeg[2:]


# Stored CMYK samples (Adobe convention: inverted) of the four quadrants of cmyk.jpg and the
# RGB PIL makes of them: ink = 255 - sample, rgb = (255 - K ink) * (1 - C ink / 255) ...
CMYK_QUADRANTS = [(255, 0, 0, 255), (0, 255, 0, 255), (0, 0, 255, 255), (255, 255, 255, 128)]


def make_jpegs(files):
    tj = TurboJpeg()
    photo = open(os.path.join(IMAGES, "photo.jpg"), "rb").read()
    files["truncated.jpg"] = photo[: len(photo) // 2]
    files["header_only.jpg"] = photo[:400]
    files["progressive.jpg"] = tj.progressive_copy(photo)
    # Orientation: copies of one small, non-square JPEG that differ only in their metadata.
    base = tj.compress(bytes(gradient_rgb(x, y)[c] for y in range(16) for x in range(24) for c in range(3)),
                       24, 16, TurboJpeg.PF_RGB, TurboJpeg.SAMP_420, 90)
    files["upright.jpg"] = base
    files["exif6.jpg"] = with_app1(base, b"Exif\x00\x00" + exif_block(6))
    files["exif3.jpg"] = with_app1(base, b"Exif\x00\x00" + exif_block(3, big_endian=True))
    xmp = b'http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta><rdf:Description tiff:Orientation="8"/></x:xmpmeta>'
    files["xmp8.jpg"] = with_app1(base, xmp)

    width, height = 16, 16
    cmyk = bytearray()
    for y in range(height):
        for x in range(width):
            cmyk += bytes(CMYK_QUADRANTS[(y // 8) * 2 + x // 8])
    files["cmyk.jpg"] = tj.compress(bytes(cmyk), width, height, TurboJpeg.PF_CMYK, TurboJpeg.SAMP_444, 100)

    # A valid small JPEG whose frame header is then patched to claim 65000 x 65000.
    small = tj.compress(bytes(8 * 8 * 3), 8, 8, TurboJpeg.PF_RGB, TurboJpeg.SAMP_444, 90)
    sof = small.index(b"\xff\xc0")
    files["huge_header.jpg"] = small[:sof + 5] + struct.pack(">HH", 65000, 65000) + small[sof + 9:]


# ---------------------------------------------------------------- other formats (hostile)

def rc4(key, data):
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out, i, j = bytearray(), 0, 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def simple_pdf(page_tree_extra=b"", count=1, trailer_extra=b"", objects_extra=()):
    """One empty page; /Count can lie. objects_extra: more object bodies (numbered from 5)."""
    bodies = [b"<< /Type /Catalog /Pages 2 0 R >>",
              b"<< /Type /Pages /Kids [3 0 R] /Count %d%s >>" % (count, page_tree_extra),
              b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 100 100] /Contents 4 0 R >>",
              b"<< /Length 24 >>\nstream\n0 0 1 rg 10 10 50 50 re f\nendstream"] + list(objects_extra)
    out = b"%PDF-1.4\n"
    offsets = []
    for n, body in enumerate(bodies, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(bodies) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(bodies) + 1, trailer_extra, xref)
    return out


def encrypted_pdf():
    """Standard security handler, revision 2 (RC4, 40 bits), user password "secret"."""
    pad = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")
    padded = lambda pw: (pw + pad)[:32]
    owner_key = hashlib.md5(padded(b"owner")).digest()[:5]
    o = rc4(owner_key, padded(b"secret"))
    p = -4
    file_id = b"0123456789abcdef"
    key = hashlib.md5(padded(b"secret") + o + struct.pack("<i", p) + file_id).digest()[:5]
    u = rc4(key, pad)
    hexs = lambda b: b"<" + b.hex().encode() + b">"
    enc = b"<< /Filter /Standard /V 1 /R 2 /O %s /U %s /P %d >>" % (hexs(o), hexs(u), p)
    return simple_pdf(trailer_extra=b" /Encrypt 5 0 R /ID [%s %s]" % (hexs(file_id), hexs(file_id)),
                      objects_extra=[enc])


def tiff_ifd(width, height, data_offset, next_ifd):
    """A little-endian 8-bit gray IFD (8 entries) for an uncompressed single strip."""
    entries = [(256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
               (273, 4, 1, data_offset), (278, 4, 1, height), (279, 4, 1, min(width * height, 16))]
    body = struct.pack("<H", len(entries))
    for tag, typ, count, value in entries:
        body += struct.pack("<HHI", tag, typ, count) + (struct.pack("<HH", value, 0) if typ == 3 else struct.pack("<I", value))
    return body + struct.pack("<I", next_ifd)


def tiff_loop():
    """Two directories whose next-pointers point at each other."""
    pixels = bytes(range(16))
    ifd_size = 2 + 8 * 12 + 4
    first, second = 8 + len(pixels), 8 + len(pixels) + ifd_size
    return (b"II*\0" + struct.pack("<I", first) + pixels + tiff_ifd(4, 4, 8, second) +
            tiff_ifd(4, 4, 8, first))


def bmp_header(width, height, bits, offset, file_size):
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, bits, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", file_size, 0, 0, offset) + info


def make_other_formats(files):
    files["pdf_100000_pages.pdf"] = simple_pdf(count=100000)
    files["pdf_encrypted.pdf"] = encrypted_pdf()
    whole = simple_pdf()
    files["pdf_truncated.pdf"] = whole[: len(whole) // 3]
    huge_page = simple_pdf().replace(b"/MediaBox [0 0 100 100]", b"/MediaBox [0 0 14400 14400]")
    files["pdf_huge_page.pdf"] = huge_page
    files["tiff_loop.tif"] = tiff_loop()
    files["tiff_truncated.tif"] = tiff_loop()[:30]
    files["tiff_huge.tif"] = b"II*\0" + struct.pack("<I", 8) + tiff_ifd(100000, 100000, 8, 0)
    files["bmp_absurd_offset.bmp"] = bmp_header(4, 4, 24, 0xFFFFFFF0, 70) + bytes(16)
    files["bmp_huge.bmp"] = bmp_header(0x7FFFFFFF, 0x7FFFFFFF, 24, 54, 70) + bytes(16)
    files["bmp_truncated.bmp"] = bmp_header(64, 64, 24, 54, 54 + 64 * 64 * 3) + bytes(1000)
    files["bmp_rle8.bmp"] = (b"BM" + struct.pack("<IHHI", 62, 0, 0, 58) +
                             struct.pack("<IiiHHIIiiII", 40, 4, 4, 1, 8, 1, 4, 0, 0, 1, 0) + bytes(4) + b"\0\1\0\1")
    files["gif_truncated.gif"] = (b"GIF89a\x10\x00\x10\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff,"
                                  b"\x00\x00\x00\x00\x10\x00\x10\x00\x00\x02\x10")
    files["gif_huge.gif"] = (b"GIF89a\xff\xff\xff\xff\x80\x00\x00\x00\x00\x00\xff\xff\xff,"
                             b"\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")
    # VP8L (lossless) header: 14-bit width-1 and height-1; 16384 x 16384 here.
    vp8l = b"\x2f" + struct.pack("<I", (16383) | (16383 << 14)) + bytes(20)
    files["webp_huge.webp"] = b"RIFF" + struct.pack("<I", 4 + 8 + len(vp8l)) + b"WEBPVP8L" + struct.pack("<I", len(vp8l)) + vp8l
    files["webp_truncated.webp"] = b"RIFF" + struct.pack("<I", 200) + b"WEBPVP8 " + struct.pack("<I", 188) + bytes(10)


def main():
    files = {
        "empty.png": b"",
        "text.png": b"this is a text file, not a picture\n",
        "fake.jpg": b"<html><body>404 not found</body></html>\n",
        "gif_named.png": b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,"
                         b"\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;",
    }
    make_pngs(files)
    make_jpegs(files)
    make_other_formats(files)
    os.makedirs(OUT, exist_ok=True)
    for name, data in sorted(files.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name:20s} {len(data):6d} bytes")


if __name__ == "__main__":
    main()
