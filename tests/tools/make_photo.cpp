// qvl_make_photo: writes a synthetic photo-like JPEG of any size, so tests and
// measurements can use a 12 MP phone-sized picture without storing one.
//
//   qvl_make_photo WIDTH HEIGHT OUT.jpg [QUALITY]
//
// The picture is smooth gradients with a few shapes, dark text-like strokes and
// mild noise: it compresses like a photo (a few MB at 12 MP), not like noise or
// a flat colour. Deterministic: the same arguments give the same bytes.
#include <turbojpeg.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int usage() {
  std::fprintf(stderr, "usage: qvl_make_photo WIDTH HEIGHT OUT.jpg [QUALITY]\n");
  return 2;
}

uint8_t clamp_u8(double v) { return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) return usage();
  const long width = std::strtol(argv[1], nullptr, 10), height = std::strtol(argv[2], nullptr, 10);
  const int quality = argc == 5 ? std::atoi(argv[4]) : 90;
  if (width < 1 || height < 1 || width > 20000 || height > 20000 || quality < 1 || quality > 100) return usage();

  std::vector<uint8_t> rgb(size_t(width) * size_t(height) * 3);
  uint32_t seed = 12345;
  for (long y = 0; y < height; ++y)
    for (long x = 0; x < width; ++x) {
      const double u = double(x) / double(width), v = double(y) / double(height);
      double r = 90 + 120 * u + 25 * std::sin(9 * v), g = 140 - 60 * v + 30 * std::sin(7 * u + 2 * v),
             b = 170 - 100 * u * v;
      // A sun and a darker hill.
      if ((u - 0.75) * (u - 0.75) + (v - 0.25) * (v - 0.25) < 0.01) r = 250, g = 220, b = 120;
      if (v > 0.7 + 0.08 * std::sin(6 * u)) r *= 0.5, g *= 0.7, b *= 0.4;
      // Lines of "text": short dark strokes on a light band.
      if (v > 0.45 && v < 0.6) {
        r = 235, g = 235, b = 230;
        const long line = long((v - 0.45) / 0.15 * 6), cell = long(u * 60);
        const double fy = std::fmod((v - 0.45) / 0.15 * 6, 1.0), fx = std::fmod(u * 60, 1.0);
        if (fy > 0.25 && fy < 0.75 && fx > 0.15 && fx < 0.8 && ((line * 7 + cell * 13) % 5) != 0 &&
            (fx < 0.3 || fy < 0.35 || ((line + cell) % 3 == 0 && fy > 0.65)))
          r = g = b = 30;
      }
      seed = seed * 1664525u + 1013904223u;
      const double noise = double(seed >> 28) - 7.5;
      uint8_t* px = &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
      px[0] = clamp_u8(r + noise), px[1] = clamp_u8(g + noise), px[2] = clamp_u8(b + noise);
    }

  tjhandle tj = tjInitCompress();
  if (!tj) return std::fprintf(stderr, "qvl_make_photo: tjInitCompress failed\n"), 1;
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  if (tjCompress2(tj, rgb.data(), int(width), 0, int(height), TJPF_RGB, &jpeg, &jpeg_size, TJSAMP_420, quality,
                  TJFLAG_ACCURATEDCT) != 0) {
    std::fprintf(stderr, "qvl_make_photo: %s\n", tjGetErrorStr2(tj));
    return 1;
  }
  std::FILE* out = std::fopen(argv[3], "wb");
  const bool ok = out && std::fwrite(jpeg, 1, jpeg_size, out) == jpeg_size && std::fclose(out) == 0;
  tjFree(jpeg);
  tjDestroy(tj);
  if (!ok) return std::fprintf(stderr, "qvl_make_photo: cannot write %s\n", argv[3]), 1;
  return 0;
}
