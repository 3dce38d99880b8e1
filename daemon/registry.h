// The model registry: models by name, each an opened ModelSource plus a name -> tensor index. Model ids are stable
// for the daemon's lifetime (reload adds models; it never renumbers or drops one that clients may hold).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/model_source.h"

namespace epk::daemon {

struct ModelEntry {
  std::string name;
  std::shared_ptr<const ModelSource> source;
  std::unordered_map<std::string, std::size_t> tensor_index;
};

class Registry {
 public:
  // Adds `source` as `name`; kInvalidArgument if the name is taken or a tensor name repeats.
  Result<std::uint32_t> add(const std::string& name, std::shared_ptr<const ModelSource> source);
  std::optional<std::uint32_t> find(const std::string& name) const;
  const ModelEntry* get(std::uint32_t id) const;
  std::size_t size() const { return models_.size(); }

 private:
  std::vector<ModelEntry> models_;
  std::unordered_map<std::string, std::uint32_t> by_name_;
};

}  // namespace epk::daemon
