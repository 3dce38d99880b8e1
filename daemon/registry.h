// The model registry: models by name, each an opened ModelSource plus a name -> tensor index. Model ids are stable
// for the daemon's lifetime (reload adds models; it never renumbers or drops one that clients may hold).
//
// Threads: add() and find() (the name index) are the writer's side and need the caller's lock (epkd's service lock);
// get() and size() take no lock and may run beside add() on any thread: every acquire looks its model up by id, and
// it must not queue behind a model being opened. An entry never changes or moves once added (entries are owned one
// by one and published through a fixed table by a release store of the count).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/model_source.h"
#include "daemon/peer_access.h"

namespace epk::daemon {

struct ModelEntry {
  std::string name;
  std::shared_ptr<const ModelSource> source;
  std::unordered_map<std::string, std::size_t> tensor_index;
  AccessRule access;  // who may open and acquire it, beyond who may connect (empty: every client)
};

class Registry {
 public:
  // The most models one epkd opens over its lifetime (the lock-free table's size).
  static constexpr std::uint32_t kMaxModels = 4096;

  Registry();
  // Adds `source` as `name`; kInvalidArgument if the name is taken or a tensor name repeats, kNoSpace past kMaxModels.
  Result<std::uint32_t> add(const std::string& name, std::shared_ptr<const ModelSource> source,
                            AccessRule access = {});
  std::optional<std::uint32_t> find(const std::string& name) const;
  // Lock-free: null for an id not (yet) added.
  const ModelEntry* get(std::uint32_t id) const {
    return id < count_.load(std::memory_order_acquire) ? table_[id] : nullptr;
  }
  std::size_t size() const { return count_.load(std::memory_order_acquire); }

 private:
  std::vector<std::unique_ptr<const ModelEntry>> owned_;  // writer side
  std::unique_ptr<const ModelEntry*[]> table_;            // kMaxModels; [0, count_) published
  std::atomic<std::uint32_t> count_{0};
  std::unordered_map<std::string, std::uint32_t> by_name_;
};

}  // namespace epk::daemon
