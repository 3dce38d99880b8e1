#include "codec/rate/rdo.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "codec/common/parallel.h"
#include "codec/model/tables.h"
#include "codec/rate/refit.h"
#include "codec/rate/search.h"

namespace epk::rate {

namespace {


struct Candidate {
  lattice::QuantizedFields q;
  std::vector<float> scales;
  std::vector<double> sse;
  model::FieldCounts counts;
};

// -log2 of (count + 1/2) / (size + width/2) per table, over the range every candidate spans.
struct CostTables {
  std::int32_t minimum[model::kTables];
  std::vector<float> cost[model::kTables];
};

CostTables cost_tables(const model::FieldCounts& summary, const std::int32_t* minima, const std::int32_t* maxima) {
  CostTables ct;
  for (int t = 0; t < model::kTables; ++t) {
    const std::int64_t width = std::int64_t(maxima[t]) - minima[t] + 1;
    ct.minimum[t] = minima[t];
    std::vector<double> expanded(std::size_t(width), 0.0);
    const model::TableCounts& tc = summary[std::size_t(t)];
    for (std::size_t i = 0; i < tc.counts.size(); ++i) {
      expanded[std::size_t(std::int64_t(tc.sym_min) - minima[t] + std::int64_t(i))] = double(tc.counts[i]);
    }
    ct.cost[t].resize(std::size_t(width));
    for (std::int64_t i = 0; i < width; ++i) {
      const double prob = (expanded[std::size_t(i)] + 0.5) / (double(tc.total) + 0.5 * double(width));
      ct.cost[t][std::size_t(i)] = float(-std::log2(prob));
    }
  }
  return ct;
}

// Per-row modelled bits of one candidate.
void row_rates(const Candidate& c, const CostTables& ct, std::uint32_t rows, std::size_t vpr, double* out,
               std::size_t stride, int threads) {
  parallel_for_blocks(rows, 64, threads, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      double bits = 0.0;
      for (std::size_t v = r * vpr; v < (r + 1) * vpr; ++v) {
        const int coset = c.q.coset[v];
        bits += ct.cost[0][std::size_t(coset - ct.minimum[0])];
        for (int f = 0; f < lattice::kFields; ++f) {
          const int t = model::table_of(f, coset);
          bits += ct.cost[t][std::size_t(c.q.fields[v * lattice::kFields + std::size_t(f)] - ct.minimum[t])];
        }
      }
      out[r * stride] = bits;
    }
  });
}

std::vector<int> argmin_rows(const std::vector<double>& d, const std::vector<double>& rates, double lambda,
                             std::uint32_t rows, int k) {
  std::vector<int> choice(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    int best = 0;
    double best_v = d[r * std::size_t(k)] + lambda * rates[r * std::size_t(k)];
    for (int j = 1; j < k; ++j) {
      const double v = d[r * std::size_t(k) + std::size_t(j)] + lambda * rates[r * std::size_t(k) + std::size_t(j)];
      if (v < best_v) {
        best_v = v;
        best = j;
      }
    }
    choice[r] = best;
  }
  return choice;
}

double selected_rate(const std::vector<double>& rates, const std::vector<int>& choice, int k) {
  double s = 0.0;
  for (std::size_t r = 0; r < choice.size(); ++r) s += rates[r * std::size_t(k) + std::size_t(choice[r])];
  return s;
}

std::vector<int> choose_tradeoff(const std::vector<double>& d, const std::vector<double>& rates, std::uint32_t rows,
                                 int k, double desired) {
  const std::vector<int> zero_choice = argmin_rows(d, rates, 0.0, rows, k);
  if (selected_rate(rates, zero_choice, k) <= desired) return zero_choice;
  std::vector<int> choice = zero_choice;
  double mean = 0.0;
  for (double v : d) mean += v;
  mean /= double(d.size());
  double low = 0.0;
  double high = std::max(mean * 1e-4, 1e-12);
  for (int i = 0; i < 50; ++i) {
    if (selected_rate(rates, argmin_rows(d, rates, high, rows, k), k) <= desired) break;
    high *= 2.0;
  }
  for (int i = 0; i < 20; ++i) {
    const double middle = low == 0.0 ? high * 0.5 : std::sqrt(low * high);
    std::vector<int> trial = argmin_rows(d, rates, middle, rows, k);
    if (selected_rate(rates, trial, k) > desired) {
      low = middle;
    } else {
      high = middle;
      choice = std::move(trial);
    }
  }
  return choice;
}

void gather(const std::vector<Candidate>& cands, const std::vector<int>& choice, std::size_t vpr,
            lattice::QuantizedFields& out) {
  out.resize(choice.size() * vpr);
  for (std::size_t r = 0; r < choice.size(); ++r) {
    const lattice::QuantizedFields& src = cands[std::size_t(choice[r])].q;
    std::memcpy(&out.coset[r * vpr], &src.coset[r * vpr], vpr);
    std::memcpy(&out.fields[r * vpr * lattice::kFields], &src.fields[r * vpr * lattice::kFields],
                vpr * lattice::kFields * sizeof(std::int32_t));
  }
}

}  // namespace

std::vector<double> ratio_ladder(int count, double low, double high) {
  std::vector<double> pts = {1.0};
  while (int(pts.size()) < count) {
    std::vector<double> bounds;
    bounds.push_back(low);
    bounds.insert(bounds.end(), pts.begin(), pts.end());
    bounds.push_back(high);
    std::size_t best = 1;
    for (std::size_t j = 2; j < bounds.size(); ++j) {
      if (bounds[j] / bounds[j - 1] > bounds[best] / bounds[best - 1]) best = j;  // first widest wins
    }
    pts.insert(pts.begin() + std::ptrdiff_t(best - 1), std::sqrt(bounds[best] * bounds[best - 1]));
  }
  return pts;
}

void optimize_rows(const RdoProblem& p, lattice::QuantizedFields& fields, std::vector<float>& scales,
                   std::vector<double>& row_sse, std::vector<double>* row_ratio) {
  if (row_ratio) row_ratio->assign(p.rows, 1.0);
  if (p.sweeps <= 0 || p.candidates <= 1) return;
  const std::vector<double> ratios = ratio_ladder(p.candidates, p.ratio_low, p.ratio_high);
  const int k = int(ratios.size());
  const int base = int(std::find(ratios.begin(), ratios.end(), 1.0) - ratios.begin());
  const std::size_t vpr = p.padded_cols / 8;
  const std::size_t vectors = std::size_t(p.rows) * vpr;
  std::vector<Candidate> cands(static_cast<std::size_t>(k));
  for (int j = 0; j < k; ++j) {
    Candidate& c = cands[std::size_t(j)];
    if (j == base) {
      c.q = fields;
      c.scales = scales;
      c.sse = row_sse;
    } else {
      const double s = p.scale * ratios[std::size_t(j)];
      quantize_all(p.normalized, vectors, float(s), c.q, p.threads);
      refit_rows(p.x, p.rows, p.padded_cols, c.q, s, p.rms, c.scales, &c.sse, p.threads);
    }
    c.counts = model::count_fields(c.q.coset.data(), c.q.fields.data(), vectors);
  }
  std::int32_t minima[model::kTables] = {};
  std::int32_t maxima[model::kTables] = {};
  for (int t = 0; t < model::kTables; ++t) {
    bool any = false;
    for (const Candidate& c : cands) {
      const model::TableCounts& tc = c.counts[std::size_t(t)];
      if (tc.total == 0) continue;
      const std::int32_t lo = tc.sym_min;
      const std::int32_t hi = tc.sym_min + std::int32_t(tc.alphabet()) - 1;
      minima[t] = any ? std::min(minima[t], lo) : lo;
      maxima[t] = any ? std::max(maxima[t], hi) : hi;
      any = true;
    }
  }
  std::vector<double> distortion(std::size_t(p.rows) * std::size_t(k));
  for (std::size_t r = 0; r < p.rows; ++r) {
    for (int j = 0; j < k; ++j) distortion[r * std::size_t(k) + std::size_t(j)] = cands[std::size_t(j)].sse[r];
  }
  std::vector<int> choice(p.rows, base);
  model::FieldCounts summary = cands[std::size_t(base)].counts;
  const double target_bytes = model::estimate_stored_bytes(summary, p.rows, p.prob_bits, p.tile_symbols);
  lattice::QuantizedFields selected;
  std::vector<double> rates(std::size_t(p.rows) * std::size_t(k));
  for (int sweep = 0; sweep < p.sweeps; ++sweep) {
    const CostTables ct = cost_tables(summary, minima, maxima);
    for (int j = 0; j < k; ++j) {
      row_rates(cands[std::size_t(j)], ct, p.rows, vpr, rates.data() + j, std::size_t(k), p.threads);
    }
    const double current_rate = selected_rate(rates, choice, k);
    const double current_bytes = model::estimate_stored_bytes(summary, p.rows, p.prob_bits, p.tile_symbols);
    const double desired = current_rate + 8.0 * (target_bytes - current_bytes);
    choice = choose_tradeoff(distortion, rates, p.rows, k, desired);
    gather(cands, choice, vpr, selected);
    summary = model::count_fields(selected.coset.data(), selected.fields.data(), vectors);
  }
  gather(cands, choice, vpr, fields);
  for (std::size_t r = 0; r < p.rows; ++r) {
    scales[r] = cands[std::size_t(choice[r])].scales[r];
    row_sse[r] = cands[std::size_t(choice[r])].sse[r];
    if (row_ratio) (*row_ratio)[r] = ratios[std::size_t(choice[r])];
  }
}

}  // namespace epk::rate
