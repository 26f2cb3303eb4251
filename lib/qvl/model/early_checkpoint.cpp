#include "qvl/model/early_checkpoint.h"

#include <sys/stat.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "qvl/io/page_prefetch.h"
#include "qvl/model/checkpoint_layout.h"
#include "qvl/model/config.h"

namespace qvl {
namespace {

struct FolderId {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const FolderId& o) const { return device == o.device && inode == o.inode; }
};

std::optional<FolderId> folder_id(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  return FolderId{st.st_dev, st.st_ino};
}

// Created by open_checkpoint_early and never freed: the thread may outlive
// main() (a run that fails before it takes the checkpoint), and a static
// object's destructor would race with it.
struct EarlyState {
  FolderId folder;
  std::mutex mutex;
  std::condition_variable opened;
  bool done = false;
  bool taken = false;
  std::optional<Checkpoint> checkpoint;
};
EarlyState* g_state = nullptr;  // constant-initialized: safe before static initializers

void open_and_populate(EarlyState* state, EarlyCheckpointRequest request) {
  std::optional<Checkpoint> ckpt;
  try {
    ckpt.emplace(request.model_dir);
    if (request.populate_text_weights) {
      const ModelConfig cfg = load_model_config(request.model_dir);
      // Full priority: until main() starts, the other core is idle.
      ckpt->start_populating(text_weight_ranges(*ckpt, cfg.text), PrefetchOptions{1, 0});
    }
  } catch (...) {
    ckpt.reset();  // the session opens it again and reports what is wrong
  }
  std::lock_guard<std::mutex> lock(state->mutex);
  state->checkpoint = std::move(ckpt);
  state->done = true;
  state->opened.notify_all();
}

}  // namespace

void open_checkpoint_early(const EarlyCheckpointRequest& request) noexcept {
  if (g_state) return;
  try {
    const std::optional<FolderId> folder = folder_id(request.model_dir);
    if (!folder) return;
    auto* state = new EarlyState;
    state->folder = *folder;
    std::thread(open_and_populate, state, request).detach();
    g_state = state;
  } catch (...) {
    // No thread (or no memory): the session opens the checkpoint itself.
  }
}

std::optional<Checkpoint> take_early_checkpoint(const std::string& model_dir) {
  EarlyState* state = g_state;
  if (!state) return std::nullopt;
  const std::optional<FolderId> folder = folder_id(model_dir);
  std::unique_lock<std::mutex> lock(state->mutex);
  if (state->taken || !folder || !(*folder == state->folder)) return std::nullopt;
  state->opened.wait(lock, [&] { return state->done; });
  state->taken = true;
  return std::move(state->checkpoint);
}

std::vector<ByteRange> text_weight_ranges(const Checkpoint& ckpt, const TextConfig& cfg) {
  std::vector<ByteRange> ranges;
  const auto add = [&](const ExpectedTensor& t) {
    if (t.name.empty()) return;  // a bias the config has not, or the lm_head of a tied model
    if (const TensorView* v = ckpt.find(t.name)) ranges.push_back({v->data, v->nbytes});
  };
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const TextLayerTensors l = text_layer_tensors(cfg, i);
    for (const ExpectedTensor* t : {&l.input_norm, &l.q_proj, &l.q_bias, &l.k_proj, &l.k_bias, &l.v_proj, &l.v_bias,
                                    &l.o_proj, &l.o_bias, &l.q_norm, &l.k_norm, &l.post_attention_norm, &l.gate_proj,
                                    &l.up_proj, &l.down_proj})
      add(*t);
  }
  const TextGlobalTensors g = text_global_tensors(cfg);
  add(g.final_norm);
  add(cfg.tie_word_embeddings ? g.embed_tokens : g.lm_head);
  return ranges;
}

}  // namespace qvl
