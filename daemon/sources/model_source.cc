#include "daemon/sources/model_source.h"

#include <vector>

#include "codec/serve/shard_slice.h"

namespace epk::daemon {

Result<ServedTensor> ModelSource::served_shard(std::size_t tensor, shm::Layout layout,
                                               const shm::ShardRange& shard) const {
  EPK_TRY_ASSIGN(ServedTensor whole, served(tensor, layout));
  if (shard.whole()) return whole;
  return serve::shard_slot(whole, layout, shard, origin(), tensors()[tensor].name);
}

Status ModelSource::produce_shard(std::size_t tensor, shm::Layout layout, const shm::ShardRange& shard,
                                  std::span<std::uint8_t> dst) const {
  if (shard.whole()) return produce(tensor, layout, dst);
  EPK_TRY_ASSIGN(ServedTensor whole, served(tensor, layout));
  std::vector<std::uint8_t> all(whole.bytes);
  EPK_TRY(produce(tensor, layout, all));
  return serve::slice_served(whole, layout, shard, all, dst);
}

}  // namespace epk::daemon
