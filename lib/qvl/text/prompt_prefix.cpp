#include "qvl/text/prompt_prefix.h"

namespace qvl {

size_t reusable_prefix_length(const std::vector<int32_t>& ids, int32_t vision_end_id) {
  for (size_t i = ids.size(); i > 0; --i)
    if (ids[i - 1] == vision_end_id) return i < ids.size() ? i : 0;
  return 0;
}

}  // namespace qvl
