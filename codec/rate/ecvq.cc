#include "codec/rate/ecvq.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "codec/common/parallel.h"
#include "codec/model/tables.h"

namespace epk::rate {

namespace {

constexpr double kForbidden = 1e300;  // cost of a value the tables cannot code (or that pruning removed)
constexpr double kTableEntryBits = 16.0;
constexpr double kMinWeight = 0.25;
constexpr double kMaxWeight = 4.0;

// Code lengths of the current selection's tables; values outside [lo, hi] or of frequency 0 are forbidden.
struct CostModel {
  std::int32_t lo[model::kTables] = {};
  std::int32_t hi[model::kTables] = {};
  std::vector<double> bits[model::kTables];

  double at(int t, std::int32_t v) const {
    if (v < lo[t] || v > hi[t]) return kForbidden;
    return bits[t][std::size_t(std::int64_t(v) - lo[t])];
  }
};

CostModel build_model(const model::FieldCounts& counts, int prob_bits) {
  CostModel m;
  const std::uint32_t size = 1u << prob_bits;
  for (int t = 0; t < model::kTables; ++t) {
    const model::TableCounts& tc = counts[std::size_t(t)];
    if (tc.total == 0) {
      m.lo[t] = 1;
      m.hi[t] = 0;  // empty range: nothing allowed
      continue;
    }
    m.lo[t] = tc.sym_min;
    m.hi[t] = tc.sym_min + std::int32_t(tc.alphabet()) - 1;
    m.bits[t].assign(tc.alphabet(), kForbidden);
    auto freq = model::normalize_frequencies(tc.counts, size);
    if (!freq) continue;  // an alphabet above 2^pb: every value forbidden keeps the current points
    for (std::size_t i = 0; i < freq->size(); ++i) {
      if ((*freq)[i] != 0) m.bits[t][i] = double(prob_bits) - std::log2(double((*freq)[i]));
    }
  }
  return m;
}

// Cost of coordinate i (0..7) taking the integer value k under coset c; z8 is coded through m = floor(z8 / 2).
inline double coordinate_bits(const CostModel& m, int i, int c, std::int32_t k) {
  return i < 7 ? m.at(model::table_of(i, c), k) : m.at(model::table_of(7, c), k >> 1);
}

// The exact minimiser of w * ||y - p||^2 + lambda * bits(p) over the points of E8 whose coordinates lie within about
// 1.5 of y (the nearest point always does). Returns false when no point is allowed.
bool best_point(const float y[lattice::kDim], double w, double lambda, const CostModel& m, lattice::E8Point& out,
                double* cost = nullptr) {
  double best_total = kForbidden;
  for (int c = 0; c < 2; ++c) {
    const double coset_bits = m.at(0, c);
    if (coset_bits >= kForbidden) continue;
    double total = lambda * coset_bits;
    std::int32_t z[lattice::kDim];
    std::int32_t alt[lattice::kDim];
    int parity = 0;
    double switch_cost = kForbidden;
    int switch_at = -1;
    bool feasible = true;
    for (int i = 0; i < lattice::kDim; ++i) {
      const float u = y[i] - 0.5f * float(c);
      const std::int32_t base = std::int32_t(std::floor(u)) - 1;
      double best[2] = {kForbidden, kForbidden};
      std::int32_t arg[2] = {0, 0};
      for (std::int32_t k = base; k <= base + 3; ++k) {
        const double b = coordinate_bits(m, i, c, k);
        if (b >= kForbidden) continue;
        const double d = double(u) - double(k);
        const double j = w * d * d + lambda * b;
        const int par = k & 1;
        if (j < best[par]) {
          best[par] = j;
          arg[par] = k;
        }
      }
      const int take = best[1] < best[0] ? 1 : 0;
      if (best[take] >= kForbidden) {
        feasible = false;
        break;
      }
      z[i] = arg[take];
      alt[i] = arg[1 - take];
      parity ^= take;
      total += best[take];
      if (best[1 - take] < kForbidden && best[1 - take] - best[take] < switch_cost) {
        switch_cost = best[1 - take] - best[take];
        switch_at = i;
      }
    }
    if (!feasible) continue;
    if (parity) {
      if (switch_at < 0) continue;
      total += switch_cost;
      z[switch_at] = alt[switch_at];
    }
    if (total < best_total) {
      best_total = total;
      out.c = std::uint8_t(c);
      for (int i = 0; i < lattice::kDim; ++i) out.z[i] = z[i];
    }
  }
  if (cost) *cost = best_total;
  return best_total < kForbidden;
}

double squared_distance(const float y[lattice::kDim], const lattice::E8Point& p) {
  double s = 0.0;
  for (int i = 0; i < lattice::kDim; ++i) {
    const double d = double(y[i]) - double(lattice::coordinate(p.z[i], p.c));
    s += d * d;
  }
  return s;
}

void load_y(const float* normalized, std::size_t v, float scale, float y[lattice::kDim]) {
  for (int i = 0; i < lattice::kDim; ++i) y[i] = normalized[v * lattice::kDim + std::size_t(i)] / scale;
}

double point_bits(const CostModel& m, const lattice::E8Point& p) {
  double b = m.at(0, p.c);
  for (int i = 0; i < lattice::kDim; ++i) b += coordinate_bits(m, i, p.c, p.z[i]);
  return b;
}

// Table pruning: for each table edge, the extra cost (distortion + lambda * bits) of moving every vector that uses
// the edge value to its best point without it; the edge goes when that is below lambda * 16 bits per table entry
// freed (the value's own and the empty ones behind it). Returns the entries freed (0: nothing pruned).
std::uint64_t prune_edges(const float* normalized, const std::vector<double>& weight, std::size_t vpr,
                          std::size_t vectors, const float* row_scales, double lambda,
                          const lattice::QuantizedFields& q,
                          const model::FieldCounts& counts, CostModel& m) {
  // Vectors touching an edge, per (table, side).
  std::vector<std::size_t> users[model::kTables][2];
  for (std::size_t v = 0; v < vectors; ++v) {
    const lattice::E8Point p = lattice::fields_to_point(q.coset[v], &q.fields[v * lattice::kFields]);
    const std::int32_t* f = &q.fields[v * lattice::kFields];
    for (int k = 0; k < lattice::kFields; ++k) {
      const int t = model::table_of(k, p.c);
      if (m.lo[t] == m.hi[t]) continue;
      if (f[k] == m.lo[t]) users[t][0].push_back(v);
      if (f[k] == m.hi[t]) users[t][1].push_back(v);
    }
  }
  std::uint64_t freed_total = 0;
  for (int t = 1; t < model::kTables; ++t) {
    const model::TableCounts& tc = counts[std::size_t(t)];
    for (int side = 0; side < 2; ++side) {
      if (m.lo[t] >= m.hi[t] || users[t][side].empty()) continue;
      // Entries freed: the edge value and the zero-count values next to it.
      std::uint64_t freed = 1;
      if (side == 0) {
        for (std::int32_t v = m.lo[t] + 1; v < m.hi[t] && tc.counts[std::size_t(v - tc.sym_min)] == 0; ++v) ++freed;
      } else {
        for (std::int32_t v = m.hi[t] - 1; v > m.lo[t] && tc.counts[std::size_t(v - tc.sym_min)] == 0; --v) ++freed;
      }
      CostModel trial = m;
      if (side == 0) {
        trial.lo[t] = m.lo[t] + std::int32_t(freed);
        trial.bits[t].erase(trial.bits[t].begin(), trial.bits[t].begin() + std::ptrdiff_t(freed));
      } else {
        trial.hi[t] = m.hi[t] - std::int32_t(freed);
        trial.bits[t].resize(trial.bits[t].size() - freed);
      }
      double extra = 0.0;
      const double budget = lambda * kTableEntryBits * double(freed);
      for (std::size_t v : users[t][side]) {
        float y[lattice::kDim];
        load_y(normalized, v, row_scales[v / vpr], y);
        const double w = weight[v / vpr];
        const lattice::E8Point cur = lattice::fields_to_point(q.coset[v], &q.fields[v * lattice::kFields]);
        const double before = w * squared_distance(y, cur) + lambda * point_bits(m, cur);
        lattice::E8Point alt;
        double after = 0.0;
        if (!best_point(y, w, lambda, trial, alt, &after)) {
          extra = kForbidden;
          break;
        }
        extra += after - before;
        if (extra >= budget) break;
      }
      if (extra < budget) {
        m = std::move(trial);
        freed_total += freed;
      }
    }
  }
  return freed_total;
}

}  // namespace

void choose_points(const float* normalized, const float* rms, std::uint32_t rows, std::uint32_t padded_cols,
                   float scale, lattice::QuantizedFields& q, const EcvqOptions& o, EcvqReport* report) {
  const std::vector<float> row_scales(rows, scale);
  choose_points(normalized, rms, rows, padded_cols, row_scales.data(), q, o, report);
}

void choose_points(const float* normalized, const float* rms, std::uint32_t rows, std::uint32_t padded_cols,
                   const float* row_scales, lattice::QuantizedFields& q, const EcvqOptions& o, EcvqReport* report) {
  const std::size_t vpr = padded_cols / 8;
  const std::size_t vectors = std::size_t(rows) * vpr;
  if (vectors == 0 || q.vectors() != vectors) return;
  // A row's absolute squared error is (rms * row scale)^2 times its error in lattice units.
  std::vector<double> weight(rows);
  double mean_energy = 0.0;
  for (std::uint32_t r = 0; r < rows; ++r) {
    const double a = double(rms[r]) * double(row_scales[r]);
    weight[r] = a * a;
    mean_energy += a * a;
  }
  mean_energy /= double(rows);
  // Clamped: the choice is local (coordinates within 1.5 of y), so a row whose weight is far below the mean would be
  // pushed to the cheapest nearby point rather than coded coarser; row RDO is the tool for large rate shifts.
  for (std::uint32_t r = 0; r < rows; ++r) {
    weight[r] = mean_energy > 0.0 ? std::clamp(weight[r] / mean_energy, kMinWeight, kMaxWeight) : 1.0;
  }
  // lambda from the weighted distortion of the nearest points.
  std::vector<double> part(rows, 0.0);
  parallel_for_blocks(rows, 64, o.threads, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      double s = 0.0;
      for (std::size_t v = r * vpr; v < (r + 1) * vpr; ++v) {
        float y[lattice::kDim];
        load_y(normalized, v, row_scales[r], y);
        s += squared_distance(y, lattice::fields_to_point(q.coset[v], &q.fields[v * lattice::kFields]));
      }
      part[r] = s * weight[r];
    }
  });
  double d_mean = 0.0;
  for (double s : part) d_mean += s;
  d_mean /= double(vectors);
  const double lambda = o.lambda_factor * d_mean * std::log(2.0) / 4.0;
  std::uint64_t pruned = 0;
  std::atomic<std::uint64_t> changed{0};
  const int iterations = std::max(1, o.iterations);
  for (int it = 0; it < iterations; ++it) {
    const bool last = it + 1 == iterations;
    const model::FieldCounts counts = model::count_fields(q.coset.data(), q.fields.data(), vectors);
    CostModel m = build_model(counts, o.prob_bits);
    if (o.prune_tables) {
      pruned += prune_edges(normalized, weight, vpr, vectors, row_scales, lambda, q, counts, m);
    }
    parallel_for_blocks(rows, 16, o.threads, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        for (std::size_t v = r * vpr; v < (r + 1) * vpr; ++v) {
          float y[lattice::kDim];
          load_y(normalized, v, row_scales[r], y);
          lattice::E8Point p;
          if (best_point(y, weight[r], lambda, m, p)) {  // else keep the current point
            q.coset[v] = p.c;
            lattice::point_to_fields(p, &q.fields[v * lattice::kFields]);
          }
          if (last && report) {
            // Compared with the nearest point found again (cheaper than keeping a copy of every field).
            const lattice::E8Point chosen = lattice::fields_to_point(q.coset[v], &q.fields[v * lattice::kFields]);
            const lattice::E8Point near = lattice::nearest_e8(y);
            if (chosen.c != near.c || !std::equal(chosen.z, chosen.z + lattice::kDim, near.z)) {
              changed.fetch_add(1, std::memory_order_relaxed);
            }
          }
        }
      }
    });
  }
  if (report) {
    report->lambda = lambda;
    report->changed = changed.load();
    report->pruned_entries = pruned;
  }
}

}  // namespace epk::rate
