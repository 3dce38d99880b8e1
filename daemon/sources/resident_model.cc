#include "daemon/sources/resident_model.h"

#include <chrono>
#include <vector>

#include "codec/common/bytes.h"

namespace epk::daemon {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

Result<std::unique_ptr<ResidentModel>> ResidentModel::load(const container::Reader& file, int fd,
                                                           const ResidentOptions& options) {
  std::unique_ptr<ResidentModel> m(new ResidentModel());
  // Place each section at the next 4096 boundary of the arena, keeping its offset within the file's page: a section
  // aligned in the file is then aligned in memory too (O_DIRECT), whatever the sections before it.
  std::vector<container::TensorEntry> entries = file.tensors();
  std::vector<std::uint64_t> at(entries.size(), 0);
  std::uint64_t cursor = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const container::TensorEntry& e = entries[i];
    if (e.section_size == 0) continue;
    at[i] = align_up(cursor, kDirectAlign) + e.section_offset % kDirectAlign;
    cursor = at[i] + e.section_size;  // sections lie inside the file (the reader checked): no overflow
    m->stats_.bytes += e.section_size;
    ++m->stats_.sections;
  }
  auto t0 = Clock::now();
  EPK_TRY_ASSIGN(m->arena_, PinnedArena::create(cursor, options.lock));
  m->stats_.arena_ms = ms_since(t0);
  m->stats_.arena_bytes = m->arena_.size();
  m->stats_.locked = m->arena_.locked();

  std::vector<ReadRange> ranges;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].section_size == 0) continue;
    ranges.push_back({entries[i].section_offset, entries[i].section_size, m->arena_.data() + at[i]});
  }
  bool done = false;
  if (options.method == ResidentRead::kIoUring) {
    auto reader = SectionReader::create(options.reader);
    if (reader) {
      // Fixed buffers are an optimisation: without them (RLIMIT_MEMLOCK) the reads still go through the ring.
      t0 = Clock::now();
      if (options.register_buffers) m->stats_.registered = static_cast<bool>(reader->register_memory(m->arena_.span()));
      m->stats_.register_ms = ms_since(t0);
      t0 = Clock::now();
      Result<ReadStats> reads = reader->read(fd, file.path(), ranges);
      if (reads) {
        m->stats_.reads = *reads;
        m->stats_.io_uring = true;
        done = true;
      } else if (reads.error().code != ErrorCode::kUnsupported) {  // kUnsupported: no /proc, pread below
        return std::move(reads).error();
      }
    }
  }
  if (!done) {
    t0 = Clock::now();
    EPK_TRY(pread_ranges(fd, file.path(), ranges));
  }
  m->stats_.read_ms = ms_since(t0);

  for (std::size_t i = 0; i < entries.size(); ++i) {
    container::TensorEntry& e = entries[i];
    if (e.section_size == 0) {
      e.section_offset = 0;
      for (container::BufferRef& b : e.buffers) b.offset = 0;  // empty buffers (rule 4.4)
      continue;
    }
    for (container::BufferRef& b : e.buffers) b.offset = at[i] + (b.offset - e.section_offset);
    e.section_offset = at[i];
  }
  EPK_TRY_ASSIGN(m->reader_, container::Reader::over_memory(file.path(), m->arena_.span(), std::move(entries),
                                                            file.metadata()));
  if (options.verify_checksums) {
    t0 = Clock::now();
    EPK_TRY(m->reader_.verify_all());
    m->stats_.checksum_ms = ms_since(t0);
  }
  return m;
}

}  // namespace epk::daemon
