// epk decompress IN.epk -o OUT.safetensors [--dtype bf16|fp16|fp32|fp8_e4m3|fp8_e5m2|int8] [--device cpu|cuda]
//                [--rowwise int8|fp8_e4m3]:
// lattice-rans and intq tensors reconstructed (by default in their source dtype), raw tensors passed through
// unchanged; --dtype applies to every tensor that can take it (raw floating-point tensors too, one RNE rounding;
// integer tensors keep their dtype). --rowwise: 2-D lattice-rans tensors in epkd's rowwise layout instead (on the
// CPU), written as NAME (one-byte values) and NAME.row_scales (fp32, one per row): the reference for clients that
// acquire rowwise:int8 / rowwise:fp8_e4m3. The output's __metadata__ is the source checkpoint's, as compress recorded
// it (docs/FORMAT.md 6.1: `source_metadata`), plus epk's own keys under "epk.", so the file is a drop-in replacement
// (transformers checks __metadata__["format"]). One tensor is held in memory at a time.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "codec/common/alloc.h"
#include "codec/container/reader.h"
#include "codec/decode/decode_tensor.h"
#include "codec/rans/container_io.h"
#include "codec/safetensors/writer.h"
#include "codec/serve/producer.h"
#include "tools/epk/cli_common.h"
#include "tools/epk/device_decode.h"
#include "tools/epk/weights.h"

namespace epk::cli {
namespace {

struct DecompressArgs {
  std::string input;
  std::string output;
  std::string dtype;
  std::string device;
  std::string rowwise;
  int threads = 0;
};

constexpr std::string_view kRowScalesSuffix = ".row_scales";

Status run_decompress(const DecompressArgs& args) {
  std::optional<DType> out_dtype;
  if (!args.dtype.empty()) {
    EPK_TRY_ASSIGN(auto d, parse_output_dtype(args.dtype));
    out_dtype = d;
  }
  EPK_TRY_ASSIGN(auto device, choose_device(args.device));
  std::optional<rans::RowwiseType> rowwise;
  if (args.rowwise == "int8") {
    rowwise = rans::RowwiseType::kInt8;
  } else if (args.rowwise == "fp8_e4m3") {
    rowwise = rans::RowwiseType::kF8E4M3;
  } else if (!args.rowwise.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "--rowwise: '" + args.rowwise + "' (expected int8 or fp8_e4m3)");
  }
  const DType rowwise_dtype = rowwise == rans::RowwiseType::kInt8 ? DType::kI8 : DType::kF8E4M3;
  const int threads = args.threads > 0 ? args.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  EPK_TRY_ASSIGN(auto reader, container::Reader::open(args.input));
  std::vector<safetensors::TensorSpec> decls;
  for (const auto& t : reader.tensors()) {
    if (rowwise && decode::can_decode_rowwise(t)) {
      decls.push_back({t.name, rowwise_dtype, t.shape});
      decls.push_back({t.name + std::string(kRowScalesSuffix), DType::kF32, {t.shape[0]}});
      continue;
    }
    EPK_TRY_ASSIGN(DType d, decode::decompress_dtype(t, out_dtype, args.input));
    decls.push_back({t.name, d, t.shape});
  }
  EPK_TRY_ASSIGN(auto metadata, safetensors_metadata(reader));
  // Rowwise output keeps the declared order: each NAME.row_scales right after its NAME, written together.
  EPK_TRY_ASSIGN(auto writer,
                 safetensors::Writer::create(args.output, decls, metadata,
                                             rowwise ? safetensors::Order::kAsDeclared : safetensors::Order::kReference));
  std::vector<std::uint8_t> buf;
  std::size_t on_gpu = 0, on_cpu = 0;  // intq tensors decode on the CPU even with --device cuda
  std::vector<float> scales;
  for (const auto& spec : writer.tensors()) {
    const auto* t = reader.find(spec.name);
    if (t == nullptr) continue;  // NAME.row_scales: written right after NAME
    EPK_TRY(reader.verify(*t));
    if (rowwise && decode::can_decode_rowwise(*t)) {
      buf.resize(t->shape[0] * t->shape[1]);
      scales.resize(t->shape[0]);
      decode::DecodeTensorOptions o;
      o.threads = threads;
      EPK_TRY(decode::decode_tensor_rowwise(reader, *t, *rowwise, buf, scales, o));
      EPK_TRY(writer.write(spec.name, buf));
      EPK_TRY(writer.write(spec.name + std::string(kRowScalesSuffix),
                           std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(scales.data()),
                                                         scales.size() * sizeof(float))));
      ++on_cpu;
      continue;
    }
    if (decode::stored_as(*t, spec.dtype)) {
      EPK_TRY(writer.write(spec.name, reader.buffer(*t, 0)));
      continue;
    }
    // The serving layer's producer checks the tensor whole (a lattice-rans stream's tables and tile offsets)
    // before the output is sized by its shape; a size this machine cannot allocate is an error naming the tensor.
    EPK_TRY_ASSIGN(auto producer, serve::make_producer(reader, *t, args.input));
    EPK_TRY(resize_for_tensor(buf, decode::decoded_bytes(*t, spec.dtype),
                              args.input + ": tensor '" + t->name + "' decoded to " + std::string(dtype_name(spec.dtype))));
    bool written = false;
    if (device == Device::kCuda) {
      EPK_TRY_ASSIGN(written, gpu_decode(*producer, spec.dtype, buf));
    }
    if (written) {
      ++on_gpu;
    } else {
      decode::DecodeTensorOptions o;
      o.threads = threads;
      EPK_TRY(decode::decode_tensor(reader, *t, spec.dtype, buf, o));
      ++on_cpu;
    }
    EPK_TRY(writer.write(spec.name, buf));
  }
  EPK_TRY(writer.finish());
  std::printf("decompressed %zu tensors (%zu decoded on the GPU, %zu on the CPU, %zu raw) into %s\n",
              reader.tensors().size(), on_gpu, on_cpu, reader.tensors().size() - on_gpu - on_cpu, args.output.c_str());
  return {};
}

}  // namespace

void add_decompress_command(CLI::App& app, int* exit_code) {
  auto [cmd, args] = add_command(app, exit_code, "decompress",
                                 "Write the reconstructed weights of an .epk file to safetensors", run_decompress);
  add_epk_input(*cmd, args->input);
  add_safetensors_output(*cmd, args->output);
  cmd->add_option("--dtype", args->dtype,
                  "element type of every decoded and floating-point raw tensor: bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, "
                  "int8 (default: each tensor's source dtype)");
  cmd->add_option("--device", args->device, "cpu or cuda (default: cuda when a GPU is present)");
  cmd->add_option("--rowwise", args->rowwise,
                  "int8 or fp8_e4m3: 2-D lattice-rans tensors as epkd's rowwise layout (NAME and NAME.row_scales)");
  cmd->add_option("--threads", args->threads, "CPU decoder threads (default: all cores)");
}

}  // namespace epk::cli
