// One function per fuzz target: run one input through one input parser of
// qvl_core. Shared by the libFuzzer targets (tests/fuzz/fuzz_*.cpp) and the
// regression test that replays the crashes they found
// (tests/unit/test_fuzz_regressions.cpp), so both exercise exactly the same code.
//
// A qvl::Error is a correct answer to bad input: each function returns false
// when the library rejected the input with one, true when it accepted it.
// Anything else (another exception type, a crash, a sanitizer report, a hang,
// a huge allocation) is a bug the fuzzer reports.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/image/preprocess.h"
#include "qvl/io/jsonl.h"
#include "qvl/io/prompt_entry.h"
#include "qvl/io/safetensors.h"
#include "qvl/io/safetensors_writer.h"
#include "qvl/kernels/int4_cache.h"
#include "qvl/kernels/int8_cache.h"
#include "qvl/kernels/quant.h"
#include "qvl/kernels/quant4.h"
#include "qvl/model/config.h"
#include "qvl/text/chat.h"
#include "qvl/text/tokenizer.h"

namespace qvl::fuzz {

inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Fuzz inputs must become files for the parsers that take paths. A memfd is
// a file in memory: no disk traffic, gone when closed.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : fd_(::memfd_create("qvl-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    for (size_t done = 0; done < size;) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += size_t(n);
    }
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) std::abort();
}

// A whole .safetensors file (8-byte length, JSON header, data).
inline bool run_safetensors(const uint8_t* data, size_t size) {
  MemoryFile file(data, size);
  try {
    SafetensorsFile st(file.path());
    // Touch every view the way the loaders do: a view that points outside
    // the mapping shows up here under AddressSanitizer.
    uint64_t sum = 0;
    for (const auto& [name, view] : st.tensors()) {
      if (view.nbytes > 0) sum += view.data[0] + view.data[view.nbytes - 1];
      // Readers trust numel() elements of the dtype to be there.
      const size_t element = dtype_size(view.dtype);
      if (view.numel() < 0 || view.nbytes % element != 0 || view.nbytes / element != uint64_t(view.numel()))
        std::abort();
      sum += uint64_t(view.numel());
    }
    return sum != 1;  // keep the reads from being optimized away
  } catch (const Error&) {
    return false;
  }
}

// A model folder whose model.safetensors.index.json is the input. Two small
// valid shards sit beside it, so that an index naming them gets past the
// shard loading and into the cross-checks.
class CheckpointFolder {
 public:
  CheckpointFolder() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/qvl-fuzz-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) std::abort();
    dir_ = buf.data();
    const uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    write_safetensors(dir_ + "/model-00001-of-00002.safetensors",
                      {{"a", DType::F32, {1}, bytes}, {"b", DType::BF16, {2}, bytes + 4}});
    write_safetensors(dir_ + "/model-00002-of-00002.safetensors", {{"c", DType::U8, {2, 2}, bytes}});
  }
  ~CheckpointFolder() {
    for (const char* f : {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors"})
      ::unlink((dir_ + "/" + f).c_str());
    ::rmdir(dir_.c_str());
  }
  CheckpointFolder(const CheckpointFolder&) = delete;
  CheckpointFolder& operator=(const CheckpointFolder&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

inline bool run_checkpoint_index(const CheckpointFolder& folder, const uint8_t* data, size_t size) {
  write_file(folder.dir() + "/model.safetensors.index.json", as_string(data, size));
  try {
    Checkpoint ckpt(folder.dir());
    for (const auto& name : ckpt.names()) ckpt.get(name);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The same text through all three config parsers.
inline bool run_configs(const uint8_t* data, size_t size) {
  const std::string text = as_string(data, size);
  bool accepted = false;
  try {
    parse_model_config(text);
    accepted = true;
  } catch (const Error&) {
  }
  try {
    // An accepted config then sizes images: its numbers reach smart_resize's
    // arithmetic. Sizes up to the decoder's default pixel limit, aspect ratio
    // 1 to over the 200 limit.
    const PreprocessorConfig cfg = parse_preprocessor_config(text);
    accepted = true;
    const int64_t sizes[][2] = {{1, 1}, {64, 96}, {7000, 7000}, {1, 200}, {201, 1}, {250000, 200}};
    for (const auto& hw : sizes) {
      try {
        const ImageGrid grid = image_grid_for(hw[0], hw[1], cfg);
        // preprocess_image allocates the resized image and the patches: an
        // accepted config must keep both allocatable for any image.
        const int64_t resized_pixels = grid.patches() * cfg.patch_size * cfg.patch_size;
        if (grid.h <= 0 || grid.w <= 0 || resized_pixels > (int64_t(1) << 30)) std::abort();
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  try {
    parse_generation_config(text);
    accepted = true;
  } catch (const Error&) {
  }
  return accepted;
}

// The input as text to encode, and again as a sequence of token ids (two
// bytes each, little-endian, spanning the vocabulary and ids past its end) to
// decode, at once and piece by piece. The pieces must be valid UTF-8 and add
// up to the whole decode, as StreamDecoder promises; a broken promise aborts.
inline bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static const uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

inline bool run_tokenizer(const Tokenizer& tok, const uint8_t* data, size_t size) {
  bool accepted = false;
  try {
    tok.encode(std::string_view(reinterpret_cast<const char*>(data), size));
    accepted = true;
  } catch (const Error&) {
  }
  // 0..65535 scaled to 0..~170000: every vocabulary id region and beyond it.
  std::vector<TokenId> ids;
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back(TokenId((data[i] | (data[i + 1] << 8)) * 26 / 10));
  for (bool skip_special : {false, true}) {
    const std::string whole = tok.decode(ids, skip_special);
    StreamDecoder stream(tok, skip_special);
    std::string joined;
    for (TokenId id : ids) {
      const std::string piece = stream.push(id);
      if (!is_valid_utf8(piece)) std::abort();
      joined += piece;
    }
    const std::string tail = stream.finish();
    if (!is_valid_utf8(tail)) std::abort();
    joined += tail;
    if (joined != whole) std::abort();
  }
  return accepted;
}

// Images are kept small (ImageLimits, the processor's max_pixels, a low PDF
// dpi) so the fuzzer spends its time in the decoders, not in resizing large
// pictures. Files with pages are counted, and page 1 and the last page decoded.
// The JPEG path also runs with a target size, which takes the DCT-scaled decode.
inline bool run_image(const uint8_t* data, size_t size) {
  ImageLimits limits;
  limits.max_pixels = 1 << 18;
  limits.max_pages = 64;
  // PDF pages render in this process: the fuzzer is after poppler's and
  // qvl's parsing, and a child made by _Fork under ASan can stall on a lock
  // of ASan's allocator (scripts/test_sanitize.sh). A hang shows as a timeout.
  limits.page_timeout_s = 0;
  PreprocessorConfig cfg;
  cfg.min_pixels = 32 * 32;
  cfg.max_pixels = 128 * 128;
  bool accepted = false;
  try {
    const int pages = image_page_count(data, size, "fuzz-input", limits);
    if (pages < 1 || pages > limits.max_pages) std::abort();
    for (int page : {1, pages}) {
      DecodeRequest request;
      request.page = page;
      request.pdf_dpi = 36;
      RgbImage image = decode_image(data, size, "fuzz-input", limits, request);
      if (image.pixels.size() != size_t(image.width * image.height * 3)) std::abort();
      if (page == 1) {
        PatchifiedImage patches = preprocess_image(image, cfg);
        if (patches.pixel_values.size() != size_t(patches.grid.patches() * patches.patch_dim)) std::abort();
      }
      if (pages == 1) break;
    }
    accepted = true;
  } catch (const Error&) {
  }
  try {
    // Page 1 without counting first (the path a plain --image takes), and a JPEG scaled down.
    DecodeRequest request;
    request.target_max_pixels = 64 * 64;
    request.pdf_dpi = 36;
    RgbImage image = decode_image(data, size, "fuzz-input", limits, request);
    if (image.pixels.size() != size_t(image.width * image.height * 3)) std::abort();
    accepted = true;
  } catch (const Error&) {
  }
  return accepted;
}

// One format's decoder: other inputs are skipped, so a target's time goes to its format.
inline bool run_image_format(ImageFormat format, const uint8_t* data, size_t size) {
  if (detect_image_format(data, size) != format) return false;
  return run_image(data, size);
}

// Chat messages as JSON (what --messages files hold), parsed and rendered.
inline bool run_chat(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return false;  // not JSON: the JSON library's business, not qvl's
  try {
    std::vector<Message> messages = parse_messages(j, "base");
    messages_to_json(messages);
    image_paths(messages);
    for (bool vision_id : {false, true}) {
      ChatOptions options;
      options.add_vision_id = vision_id;
      options.add_generation_prompt = !vision_id;
      const std::string prompt = render_chat(messages, options);
      // Expanding by two per image must succeed on any prompt render_chat makes
      // from messages without literal "<|image_pad|>" text; both outcomes are
      // fine here, only a crash is not.
      std::vector<int64_t> counts(image_paths(messages).size(), 2);
      try {
        expand_image_pads(prompt, counts);
      } catch (const Error&) {
      }
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The JSON Lines file `ocr --resume` reads back, possibly cut off mid-write.
inline bool run_jsonl(const uint8_t* data, size_t size) {
  MemoryFile file(data, size);
  try {
    const JsonlContents contents = read_jsonl_file(file.path());
    const std::string text = as_string(data, size);
    const auto lines = std::count(text.begin(), text.end(), '\n');
    if (int64_t(contents.records.size()) + contents.unreadable_lines > lines) std::abort();
    if (contents.partial_last_line != (!text.empty() && text.back() != '\n')) std::abort();
    for (const auto& record : contents.records)
      if (!record.is_object()) std::abort();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A quantized-weight cache file (kernels/int8_cache.h, int4_cache.h), read
// as int8 and as int4 (the magic picks one). An accepted file's matrices are
// used as the decoder uses them: every row dequantized, which reads every
// byte the layout promises. The fuzz build skips the files' checksums
// (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION), so mutations reach these checks.
inline bool run_weight_cache(const uint8_t* data, size_t size) {
  MemoryFile file(data, size);
  bool accepted = false;
  std::vector<float> row;
  try {
    kernels::Int8Cache cache(file.path());
    for (const auto& [name, m] : cache.matrices()) {
      if (m.cols == 0) continue;  // nothing to read, in any number of rows
      row.resize(size_t(m.cols));
      for (int64_t r = 0; r < m.rows; ++r) kernels::dequantize_rows(m, r, 1, kernels::Storage::F32, row.data());
    }
    accepted = true;
  } catch (const Error&) {
  }
  try {
    kernels::Int4Cache cache(file.path());
    for (const auto& [name, m] : cache.matrices()) {
      if (m.cols == 0) continue;
      row.resize(size_t(m.cols));
      for (int64_t r = 0; r < m.rows; ++r) kernels::dequantize_int4_rows(m, r, 1, kernels::Storage::F32, row.data());
    }
    accepted = true;
  } catch (const Error&) {
  }
  return accepted;
}

// A prompt-cache entry (io/prompt_entry.h). Its checksum is set to match the
// bytes first, so mutations reach the header checks behind it; an accepted
// entry's blocks are read end to end.
inline bool run_prompt_entry(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() >= 16) {
    const uint64_t sum = checksum64(bytes.data() + 16, bytes.size() - 16);
    std::memcpy(bytes.data() + 8, &sum, sizeof sum);
  }
  MemoryFile file(bytes.data(), bytes.size());
  try {
    PromptEntryFile entry(file.path());
    const PromptEntryHeader& h = entry.header();
    uint64_t sum = 0;
    for (int64_t layer = 0; layer < h.layout.layers; ++layer)
      for (int kind : {0, 1}) {
        const uint8_t* b = entry.block(layer, kind);
        if (h.block_bytes() > 0) sum += b[0] + b[h.block_bytes() - 1];
      }
    return sum != 1;
  } catch (const Error&) {
    return false;
  }
}

// Small valid files of each kind, for the cache target's seed corpus
// (fuzz_cache writes them when QVL_FUZZ_WRITE_SEEDS names a folder: scripts/fuzz.sh).
inline void write_cache_seeds(const std::string& dir) {
  std::vector<uint16_t> bf16(4 * 128);
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = uint16_t(0x3f80 + (i * 37) % 200);  // 1.0 .. ~2.5, varied
  const kernels::Bf16Matrix w{bf16.data(), 4, 128};
  const kernels::QuantizedMatrix q8 = kernels::quantize_int8(w, 64);
  const kernels::QuantizedMatrix q8_row = kernels::quantize_int8(kernels::Bf16Matrix{bf16.data(), 2, 100}, kernels::kGroupPerRow);
  kernels::write_int8_cache(dir + "/int8.bin", "decoder int8 seed", {{"a.weight", q8.view()}, {"b.weight", q8_row.view()}});
  const kernels::QuantizedInt4Matrix q4 = kernels::quantize_int4(w);
  kernels::write_int4_cache(dir + "/int4.bin", "decoder int4 seed", {{"a.weight", q4.view()}});
  PromptEntryHeader h;
  h.key = "seed prompt";
  h.tokens = {1, 2, 3};
  h.next_position = 3;
  h.layout = {2, 1, 4, 2};
  std::vector<uint8_t> payload(h.payload_bytes(), 7);
  write_prompt_entry(dir + "/prompt.kv", h, {{payload.data(), payload.size()}});
}

}  // namespace qvl::fuzz
