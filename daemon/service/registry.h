// The model registry: models by name, each an opened ModelSource plus a name -> tensor index. Model ids are never
// reused over the daemon's lifetime: a reload adds models under fresh ids and retires the ones it removes or replaces.
//
// A model's life: add() (served: find() names it), retire() (its name is free again, `retired` is set: new acquires,
// prefetches and opens of it are refused, while the slots clients hold keep serving), then release_source() once its
// last lease has gone (the source, with its file mapping, goes; the entry stays as a tombstone so that an id a client
// still names gets a clear error, and `gone` is set).
//
// Threads: add(), find(), retire() and release_source() are the writer's side and need the caller's lock (epkd's
// service lock; release_source also every lane's lock, daemon/service/service.h); get() and size() take no lock and may run
// beside add() on any thread: every acquire looks its model up by id, and it must not queue behind a model being
// opened. An entry never moves once added and only its `retired` / `gone` flags and (under the locks above) its
// `source` change (entries are owned one by one and published through a fixed table by a release store of the count).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/net/peer_access.h"
#include "daemon/sources/model_source.h"

namespace epk::daemon {

// What a model file was when it was opened: a reload re-opens a model whose file is no longer this one.
struct FileIdentity {
  std::uint64_t dev = 0, ino = 0, size = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

struct ModelEntry {
  std::string name;
  std::string path;  // as configured (empty for synthetic models)
  FileIdentity file;
  // Null once released (after retirement and the last lease): read it only after checking `gone` (or `retired`)
  // under a lock that release_source's caller holds.
  std::shared_ptr<const ModelSource> source;
  std::uint32_t tensor_count = 0;
  std::unordered_map<std::string, std::size_t> tensor_index;
  AccessRule access;  // who may open and acquire it, beyond who may connect (empty: every client)
  std::atomic<bool> retired{false};
  std::atomic<bool> gone{false};
  // Why it was retired, for the errors of the requests that still name it ("removed from the config at a reload").
  std::string retired_because;  // written before `retired` is set, read after it is seen
};

class Registry {
 public:
  // The most models one epkd opens over its lifetime (the lock-free table's size).
  static constexpr std::uint32_t kMaxModels = 4096;

  Registry();
  // Adds `source` as `name`; kInvalidArgument if the name is taken or a tensor name repeats, kNoSpace past kMaxModels.
  // `replaces`: a served id of the same name, retired (with `because`) only once the new entry is known to be good, so
  // a refused add leaves it serving.
  Result<std::uint32_t> add(const std::string& name, std::shared_ptr<const ModelSource> source,
                            AccessRule access = {}, std::string path = {}, FileIdentity file = {},
                            std::optional<std::uint32_t> replaces = std::nullopt, std::string because = {});
  // Only models being served (not retired).
  std::optional<std::uint32_t> find(const std::string& name) const;
  // Lock-free: null for an id not (yet) added; retired and gone entries are returned (check their flags).
  const ModelEntry* get(std::uint32_t id) const {
    return id < count_.load(std::memory_order_acquire) ? table_[id] : nullptr;
  }
  // Every id ever added (gone ones too).
  std::size_t size() const { return count_.load(std::memory_order_acquire); }
  // Models whose source is still held: served and retired ones.
  std::size_t live() const { return count_.load(std::memory_order_acquire) - gone_; }
  // Stops serving model `id` under its name (which becomes free for a new generation); `because` ends the errors of
  // later requests naming the id. False if it was retired already.
  bool retire(std::uint32_t id, std::string because);
  // A retired model's source, taken out of its entry (the caller destroys it outside its locks); marks it gone.
  std::shared_ptr<const ModelSource> release_source(std::uint32_t id);

 private:
  std::vector<std::unique_ptr<ModelEntry>> owned_;  // writer side
  std::unique_ptr<const ModelEntry*[]> table_;      // kMaxModels; [0, count_) published
  std::atomic<std::uint32_t> count_{0};
  std::size_t gone_ = 0;  // writer side
  std::unordered_map<std::string, std::uint32_t> by_name_;
};

}  // namespace epk::daemon
