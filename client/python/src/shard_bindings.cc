// epk.Shard: a tensor-parallel shard (shm/shard.h's ShardSpec), constructed, resolved against a shape and compared
// in Python as in libepk.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "shm/shard.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace epk::py {

void bind_shard(nb::module_& m) {
  nb::class_<epk::shm::ShardSpec>(m, "Shard",
                             "A tensor-parallel shard: one dimension's slice. rows cuts dimension 0 (a Linear\n"
                             "weight's output features: column-parallel layers; a 1-D tensor's elements), cols\n"
                             "dimension 1 (input features: row-parallel layers). Shard.rows(begin, end),\n"
                             "Shard.cols(begin, end), or Shard.split('rows' | 'cols', rank, world_size): every rank\n"
                             "ceil(extent / world_size) indices, the last what is left (vLLM's and Megatron's split\n"
                             "where world_size divides the extent, torch.chunk's otherwise; an empty share is an\n"
                             "error). Pass it as Client.acquire(..., shard=...) / prefetch.")
      .def_static("rows", &epk::shm::ShardSpec::rows, "begin"_a, "end"_a)
      .def_static("cols", &epk::shm::ShardSpec::cols, "begin"_a, "end"_a)
      .def_static(
          "split",
          [](const std::string& dim, std::uint64_t rank, std::uint64_t world) {
            if (dim != "rows" && dim != "cols") {
              raise_as("InvalidArgument", "epk: a shard's dim is 'rows' or 'cols', not '" + dim + "'",
                       "invalid-argument");
            }
            return epk::shm::ShardSpec::split(dim == "rows" ? epk::shm::ShardDim::kRows : epk::shm::ShardDim::kCols, rank, world);
          },
          "dim"_a, "rank"_a, "world_size"_a)
      .def_prop_ro("dim", [](const epk::shm::ShardSpec& s) { return std::string(epk::shm::shard_dim_name(s.dim)); })
      .def(
          "resolve",
          [](const epk::shm::ShardSpec& s, const std::vector<std::uint64_t>& shape) {
            auto r = epk::shm::resolve_shard(s, shape, "");
            if (!r) raise_error(r.error(), false);
            return std::make_tuple(r->axis(), r->begin, r->end);
          },
          "shape"_a,
          "(axis, begin, end) of this shard in a tensor of `shape`, by epkd's rule; InvalidArgument when it does\n"
          "not fit.")
      .def("__eq__", [](const epk::shm::ShardSpec& a, const epk::shm::ShardSpec& b) { return a == b; })
      .def("__hash__", [](const epk::shm::ShardSpec& s) {
        return std::hash<std::uint64_t>()(static_cast<std::uint64_t>(s.dim) * 31 + s.a * 1000003 + s.b);
      })
      .def("__repr__", [](const epk::shm::ShardSpec& s) { return "<epk.Shard " + epk::shm::describe(s) + ">"; });
}

}  // namespace epk::py
