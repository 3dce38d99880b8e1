#include "daemon/registry.h"

namespace epk::daemon {

Result<std::uint32_t> Registry::add(const std::string& name, std::shared_ptr<const ModelSource> source) {
  if (name.empty()) return make_error(ErrorCode::kInvalidArgument, "model name is empty");
  if (by_name_.count(name) != 0) return make_error(ErrorCode::kInvalidArgument, "model '" + name + "' is already open");
  ModelEntry e;
  e.name = name;
  const auto& tensors = source->tensors();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!e.tensor_index.emplace(tensors[i].name, i).second) {
      return make_error(ErrorCode::kBadInput, source->origin() + ": tensor '" + tensors[i].name + "' appears twice");
    }
  }
  e.source = std::move(source);
  auto id = static_cast<std::uint32_t>(models_.size());
  models_.push_back(std::move(e));
  by_name_.emplace(name, id);
  return id;
}

std::optional<std::uint32_t> Registry::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

const ModelEntry* Registry::get(std::uint32_t id) const { return id < models_.size() ? &models_[id] : nullptr; }

}  // namespace epk::daemon
