#include "codec/safetensors/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <utility>

#include "codec/common/mapped_file.h"
#include "codec/safetensors/json_util.h"

namespace epk::safetensors {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kIndexSuffix = ".safetensors.index.json";
constexpr std::string_view kFileSuffix = ".safetensors";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Error bad(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kBadInput, path + ": " + what);
}

bool is_regular(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Picks the checkpoint file inside a directory (see checkpoint.h for the order).
Result<std::string> resolve_directory(const std::string& dir) {
  const std::string base = dir.back() == '/' ? dir : dir + "/";
  if (is_regular(base + "model.safetensors.index.json")) return base + "model.safetensors.index.json";
  if (is_regular(base + "model.safetensors")) return base + "model.safetensors";
  std::vector<std::string> indexes, files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!is_regular(base + name)) continue;
    if (ends_with(name, kIndexSuffix)) indexes.push_back(base + name);
    else if (ends_with(name, kFileSuffix)) files.push_back(base + name);
  }
  if (ec) return make_errno_error(dir + ": cannot list directory", ec.value());
  std::sort(indexes.begin(), indexes.end());
  std::sort(files.begin(), files.end());
  if (indexes.size() == 1) return indexes[0];
  if (indexes.size() > 1) {
    return make_error(ErrorCode::kBadInput, dir + ": " + std::to_string(indexes.size()) +
                                                " *.safetensors.index.json files and no model.safetensors.index.json; "
                                                "name the one to open (first: " + indexes[0] + ")");
  }
  if (files.size() == 1) return files[0];
  if (files.empty()) return make_error(ErrorCode::kNotFound, dir + ": no .safetensors file or index in the directory");
  return make_error(ErrorCode::kBadInput, dir + ": " + std::to_string(files.size()) +
                                              " .safetensors files but no index; name the one to open (first: " +
                                              files[0] + ")");
}

// A shard path from weight_map: relative, no "..", no empty name; stays inside the index's directory.
bool shard_name_ok(const std::string& s) {
  if (s.empty() || s.front() == '/' || s.find('\0') != std::string::npos) return false;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t slash = s.find('/', start);
    if (slash == std::string::npos) slash = s.size();
    if (s.compare(start, slash - start, "..") == 0 && slash - start == 2) return false;
    start = slash + 1;
  }
  return true;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& path, const CheckpointOptions& options) {
  if (path.empty()) return make_error(ErrorCode::kInvalidArgument, "checkpoint path: empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return make_error(ErrorCode::kNotFound, path + ": no such file or directory");
    return make_errno_error(path + ": stat", errno);
  }
  std::string file = path;
  if (S_ISDIR(st.st_mode)) {
    EPK_TRY_ASSIGN(file, resolve_directory(path));
  }
  if (ends_with(file, ".json")) return open_index(file, options);
  return open_single(file);
}

Result<Checkpoint> Checkpoint::open_single(const std::string& path) {
  Checkpoint c;
  EPK_TRY_ASSIGN(auto f, File::open(path));
  c.metadata_ = f.metadata();
  c.tensors_ = f.tensors();
  c.shard_of_.assign(c.tensors_.size(), 0);
  c.shards_.push_back(std::move(f));
  EPK_TRY(c.build_index(path));
  return c;
}

Result<Checkpoint> Checkpoint::open_index(const std::string& path, const CheckpointOptions& options) {
  EPK_TRY_ASSIGN(auto map, MappedFile::open(path));
  if (map.size() > kMaxHeaderSize) {
    return bad(path, "index: " + std::to_string(map.size()) + " bytes, more than the " +
                         std::to_string(kMaxHeaderSize) + "-byte limit");
  }
  JsonParse parsed = parse_json_object_checked(map.bytes());
  if (!parsed.error.empty()) return bad(path, "index: " + parsed.error);
  const nlohmann::json& root = parsed.value;

  Checkpoint c;
  c.index_path_ = path;
  if (auto it = root.find("metadata"); it != root.end() && !it->is_null()) {
    if (!it->is_object()) return bad(path, "metadata: a JSON " + json_type(*it) + ", not an object");
    for (const auto& [k, v] : it->items())
      c.metadata_[k] = v.is_string() ? v.get<std::string>() : json_excerpt(v);
  }
  auto wm = root.find("weight_map");
  if (wm == root.end()) return bad(path, "weight_map: missing");
  if (!wm->is_object()) return bad(path, "weight_map: a JSON " + json_type(*wm) + ", not an object");

  // shard file -> the tensors weight_map places in it; std::map gives the shard order.
  std::map<std::string, std::vector<std::string>> by_shard;
  std::unordered_map<std::string, std::string> shard_for;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) {
      return bad(path, "weight_map: tensor '" + name + "': a JSON " + json_type(shard) + ", not a file name");
    }
    const auto& s = shard.get_ref<const std::string&>();
    if (!shard_name_ok(s)) {
      return bad(path, "weight_map: tensor '" + name + "': shard '" + s +
                           "' is not a relative path inside the index's directory");
    }
    by_shard[s].push_back(name);
    shard_for.emplace(name, s);
  }

  const std::string dir = fs::path(path).parent_path().string();
  const std::string base = dir.empty() ? std::string() : dir + "/";
  // Every shard must exist before any is parsed: a missing file is the plainer report.
  for (const auto& [shard, names] : by_shard) {
    if (!is_regular(base + shard)) {
      return make_error(ErrorCode::kNotFound, path + ": weight_map: tensor '" + names.front() + "': shard '" + shard +
                                                  "' does not exist (" + base + shard + ")");
    }
  }
  for (const auto& [shard, names] : by_shard) {
    const std::string shard_path = base + shard;
    EPK_TRY_ASSIGN(auto f, File::open(shard_path));
    for (const auto& name : names) {
      if (f.find(name) == nullptr) {
        return bad(path, "weight_map: tensor '" + name + "': not present in its shard '" + shard + "' (" +
                             shard_path + ")");
      }
    }
    const std::size_t shard_index = c.shards_.size();
    for (const auto& t : f.tensors()) {
      auto it = shard_for.find(t.name);
      if (it == shard_for.end() || it->second != shard) {
        if (it != shard_for.end()) {
          return bad(path, "weight_map: tensor '" + t.name + "': placed in shard '" + it->second +
                               "' but shard '" + shard + "' holds it too");
        }
        if (options.unlisted == UnlistedTensors::kRefuse) {
          return bad(path, "weight_map: tensor '" + t.name + "' of shard '" + shard +
                               "' is not listed (a stale or mixed-up shard set?)");
        }
        c.unlisted_.push_back(t.name);
      }
      c.tensors_.push_back(t);
      c.shard_of_.push_back(shard_index);
    }
    c.shards_.push_back(std::move(f));
  }
  EPK_TRY(c.build_index(path));
  return c;
}

Status Checkpoint::build_index(const std::string& origin) {
  index_.clear();
  index_.reserve(tensors_.size());
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    if (!index_.emplace(tensors_[i].name, i).second) {
      return bad(origin, "tensor '" + tensors_[i].name + "': held by two shards (" +
                             shards_[shard_of_[index_[tensors_[i].name]]].path() + " and " +
                             shards_[shard_of_[i]].path() + ")");
    }
  }
  return {};
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace epk::safetensors
