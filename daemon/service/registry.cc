#include "daemon/service/registry.h"

namespace epk::daemon {

Registry::Registry() : table_(std::make_unique<const ModelEntry*[]>(kMaxModels)) {}

Result<std::uint32_t> Registry::add(const std::string& name, std::shared_ptr<const ModelSource> source,
                                   AccessRule access, std::string path, FileIdentity file,
                                   std::optional<std::uint32_t> replaces, std::string because) {
  if (name.empty()) return make_error(ErrorCode::kInvalidArgument, "model name is empty");
  if (auto taken = by_name_.find(name); taken != by_name_.end() && taken->second != replaces) {
    return make_error(ErrorCode::kInvalidArgument, "model '" + name + "' is already open");
  }
  const std::uint32_t id = count_.load(std::memory_order_relaxed);
  if (id >= kMaxModels) {
    return make_error(ErrorCode::kNoSpace, "model '" + name + "': epkd opens at most " + std::to_string(kMaxModels) +
                                               " models over its lifetime (reloads count)");
  }
  auto e = std::make_unique<ModelEntry>();
  e->name = name;
  e->path = std::move(path);
  e->file = file;
  const auto& tensors = source->tensors();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!e->tensor_index.emplace(tensors[i].name, i).second) {
      return make_error(ErrorCode::kBadInput, source->origin() + ": tensor '" + tensors[i].name + "' appears twice");
    }
  }
  if (replaces) retire(*replaces, std::move(because));  // frees the name
  e->tensor_count = static_cast<std::uint32_t>(tensors.size());
  e->source = std::move(source);
  e->access = std::move(access);
  table_[id] = e.get();
  owned_.push_back(std::move(e));
  by_name_.emplace(name, id);
  count_.store(id + 1, std::memory_order_release);  // publishes the entry to get() on other threads
  return id;
}

std::optional<std::uint32_t> Registry::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

bool Registry::retire(std::uint32_t id, std::string because) {
  if (id >= owned_.size() || owned_[id]->retired.load()) return false;
  ModelEntry& e = *owned_[id];
  if (auto it = by_name_.find(e.name); it != by_name_.end() && it->second == id) by_name_.erase(it);
  e.retired_because = std::move(because);
  e.retired.store(true);
  return true;
}

std::shared_ptr<const ModelSource> Registry::release_source(std::uint32_t id) {
  if (id >= owned_.size() || !owned_[id]->retired.load() || owned_[id]->gone.load()) return nullptr;
  ModelEntry& e = *owned_[id];
  ++gone_;
  e.gone.store(true);
  return std::move(e.source);
}

}  // namespace epk::daemon
