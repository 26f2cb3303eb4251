// EXIF orientation (tag 0x0112): reading it from the metadata blocks PIL reads
// it from, and undoing it the way PIL's ImageOps.exif_transpose does.
#pragma once
#include <cstddef>
#include <cstdint>

#include "qvl/image/rgb_image.h"

namespace qvl {

// Orientation from a TIFF-structured EXIF block ("II*\0" / "MM\0*", an optional
// "Exif\0\0" prefix is skipped). Returns 1 when absent or malformed: a broken
// tag must never make a readable picture unreadable.
int exif_orientation(const uint8_t* exif, size_t size);

// Orientation of a JPEG stream: the first APP1 "Exif" block, else an XMP packet's
// tiff:Orientation (PIL's getexif() falls back to XMP too). 1 when absent.
int jpeg_orientation(const uint8_t* data, size_t size);

// Turns a stored image upright for orientation 2..8; 1 or unknown values return it unchanged.
RgbImage apply_orientation(RgbImage image, int orientation);

}  // namespace qvl
