// epk get --socket S MODEL TENSOR... -o OUT.safetensors [--layout L] [--device N]: fetches tensors from a running
// epkd (through libepk, like any client; --device picks the CUDA device's pool) and writes them to a safetensors
// file. With several tensors they are fetched twice: once to learn every dtype and shape (the file's header comes
// first), then one at a time to write them, so no more than one is pinned at once and the daemon's budget needs to
// hold only the largest. Rowwise layouts write each tensor's
// values as NAME and its per-row fp32 scales as NAME.row_scales; packed integer layouts (gptq, gptq-v2, awq, marlin)
// write each part as its own tensor, NAME.qweight, NAME.qzeros, NAME.scales, ... (shm/layout.h).
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "client/client.h"
#include "codec/safetensors/writer.h"
#include "tools/epk/cli_common.h"

namespace epk::cli {
namespace {

// Rowwise layouts: the per-row scales are written as a second tensor, NAME + this suffix (F32, [rows]).
constexpr std::string_view kScalesSuffix = ".row_scales";

struct GetArgs {
  std::string socket;
  std::string model;
  std::vector<std::string> tensors;
  std::string output;
  std::string layout = "stored";
  int timeout_ms = 60000;
  std::uint32_t device = 0;
};

Status check_contiguous(const client::Tensor& t, const std::string& name) {
  std::vector<std::int64_t> row_major(t.shape.size());
  std::int64_t step = 1;
  for (std::size_t i = t.shape.size(); i-- > 0;) {
    row_major[i] = step;
    step *= static_cast<std::int64_t>(t.shape[i]);
  }
  if (t.strides != row_major) {
    return make_error(ErrorCode::kUnsupported, "tensor '" + name + "': served with non-row-major strides");
  }
  return {};
}

Status run_get(const GetArgs& args) {
  auto layout = shm::layout_from_name(args.layout);
  if (!layout) return make_error(ErrorCode::kInvalidArgument, "--layout '" + args.layout + "': unknown layout");
  EPK_TRY_ASSIGN(client::Client c, client::Client::connect(args.socket, args.timeout_ms));
  std::vector<safetensors::TensorSpec> specs;
  std::vector<bool> is_extra;  // entries written together with the entry before them (row scales, later parts)
  for (const std::string& name : args.tensors) {
    auto t = c.acquire(args.model, name, *layout, args.device);
    if (!t) return t.error();  // names the model and tensor
    Status ok = t->parts.empty() ? check_contiguous(*t, name) : Status{};
    if (!t->parts.empty()) {
      for (std::size_t p = 0; p < t->parts.size(); ++p) {
        specs.push_back({name + "." + std::string(t->parts[p].name), t->parts[p].dtype, t->parts[p].shape});
        is_extra.push_back(p > 0);
      }
    } else {
      specs.push_back({name, t->dtype, t->shape});
      is_extra.push_back(false);
    }
    if (t->row_scales != nullptr) {
      specs.push_back({name + std::string(kScalesSuffix), DType::kF32, {t->shape[0]}});
      is_extra.push_back(true);
    }
    EPK_TRY(c.release(t->handle));
    EPK_TRY(ok);
  }
  std::map<std::string, std::string> metadata = {{"epk_model", args.model}, {"epk_layout", args.layout}};
  EPK_TRY_ASSIGN(auto writer,
                 safetensors::Writer::create(args.output, specs, metadata, safetensors::Order::kAsDeclared));
  std::uint64_t total = 0;
  std::size_t next_name = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (is_extra[i]) continue;  // written with the entry before it
    const std::string& name = args.tensors[next_name++];
    auto t = c.acquire(args.model, name, *layout, args.device);
    if (!t) return t.error();
    Status st;
    std::size_t extras = 0;
    while (i + 1 + extras < specs.size() && is_extra[i + 1 + extras]) ++extras;
    // A device slot is copied to host memory first (after its decode-done event); parts and row scales are read at
    // their offsets from the slot's start.
    const auto* slot = static_cast<const std::uint8_t*>(t->data);
    const std::uint8_t* base = slot;
    std::vector<std::uint8_t> host;
    if (t->on_device) {
      host.resize(t->bytes);
      st = c.copy_to_host(*t, host.data());
      base = host.data();
    }
    if (!st) {
      // reported below, after the release
    } else if (!t->parts.empty()) {
      if (t->parts.size() != extras + 1) {
        st = make_error(ErrorCode::kInternal, "tensor '" + name + "' changed between two acquires");
      }
      for (std::size_t p = 0; st && p < t->parts.size(); ++p) {
        const auto& part = t->parts[p];
        if (part.dtype != specs[i + p].dtype || part.shape != specs[i + p].shape) {
          st = make_error(ErrorCode::kInternal, "tensor '" + name + "' changed between two acquires");
          break;
        }
        st = writer.write(specs[i + p].name, {base + (static_cast<const std::uint8_t*>(part.data) - slot), part.bytes});
      }
    } else if (t->dtype != specs[i].dtype || t->shape != specs[i].shape ||
               (t->row_scales != nullptr) != (extras == 1)) {
      st = make_error(ErrorCode::kInternal, "tensor '" + name + "' changed between two acquires");
    } else {
      const std::uint64_t values = t->row_scales != nullptr ? t->shape[0] * t->shape[1] : t->bytes;
      if (st) st = writer.write(specs[i].name, {base, values});
      if (st && t->row_scales != nullptr) {
        const auto at = static_cast<std::uint64_t>(reinterpret_cast<const std::uint8_t*>(t->row_scales) - slot);
        st = writer.write(specs[i + 1].name, {base + at, t->shape[0] * sizeof(float)});
      }
    }
    total += t->bytes;
    EPK_TRY(c.release(t->handle));
    EPK_TRY(st);
  }
  EPK_TRY(writer.finish());
  std::printf("got %zu tensor(s) of '%s' as %s (%s) into %s\n", args.tensors.size(), printable(args.model).c_str(),
              args.layout.c_str(), human_bytes(total).c_str(), args.output.c_str());
  return {};
}

}  // namespace

void add_get_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] =
      add_command(app, exit_code, "get", "Fetch tensors from a running epkd into a safetensors file", run_get);
  add_socket_option(*cmd, args->socket);
  cmd->add_option("model", args->model, "the model's name in epkd")->required();
  cmd->add_option("tensor", args->tensors, "tensor names (one or more)")->required();
  add_safetensors_output(*cmd, args->output);
  cmd->add_option("--layout", args->layout,
                  "stored, dense:bf16, dense:fp16, dense:fp32, rowwise:int8, rowwise:fp8_e4m3, gptq, gptq-v2, awq, "
                  "marlin (default stored)");
  cmd->add_option("--timeout-ms", args->timeout_ms, "bound on each wait for epkd (default 60000)");
  cmd->add_option("--device", args->device, "the CUDA device whose pool serves the tensors (default 0)")
      ->check(CLI::Range(0, 63));
}

}  // namespace epk::cli
