// model/early_checkpoint.h: the checkpoint the front end opens before main()
// is handed to the session that opens the same folder, once, with the text
// decoder's weights populated. (Process-wide state: one test case only.)
#include <doctest/doctest.h>

#include <string>

#include "qvl/model/early_checkpoint.h"
#include "test_support.h"

using namespace qvl;

TEST_CASE("early checkpoint: opened once for its folder, text weights populated, taken once") {
  const std::string dir = test::tiny_model_dir();
  open_checkpoint_early({dir, true});

  // Another folder gets nothing (and does not use it up).
  CHECK_FALSE(take_early_checkpoint(test::data_path("")).has_value());
  CHECK_FALSE(take_early_checkpoint(dir + "/no-such-folder").has_value());

  // The same folder spelt differently is the same folder.
  std::optional<Checkpoint> early = take_early_checkpoint(dir + "/.");
  REQUIRE(early.has_value());
  const Checkpoint fresh(dir);
  CHECK(early->names() == fresh.names());
  CHECK(early->fingerprint() == fresh.fingerprint());

  // The tiny model ties its output projection to the embeddings, so the text
  // decoder reads exactly the model.language_model.* tensors.
  size_t text_bytes = 0, all_bytes = 0;
  for (const std::string& name : fresh.names()) {
    all_bytes += fresh.get(name).nbytes;
    if (name.rfind("model.language_model.", 0) == 0) text_bytes += fresh.get(name).nbytes;
  }
  REQUIRE(text_bytes > 0);
  REQUIRE(text_bytes < all_bytes);
  CHECK(early->finish_populating() == text_bytes);

  CHECK_FALSE(take_early_checkpoint(dir).has_value());  // taken already
  open_checkpoint_early({dir, true});                     // once per process
  CHECK_FALSE(take_early_checkpoint(dir).has_value());
}
