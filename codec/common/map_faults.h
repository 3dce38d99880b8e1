// A mapped file can fail under its reader: truncated (or a smaller file copied over it in place), or on a disk that
// returns EIO. Touching such a page raises SIGBUS, which would kill a process that serves many files (epkd) for one
// file's sake. With the handler installed (install_map_fault_handler), a SIGBUS on a page of a live MappedFile maps a
// page of zeros over it, so the read that faulted retries and reads zeros, and marks that mapping damaged: whoever
// used its bytes checks MappedFile::damaged() afterwards and throws the result away. A SIGBUS anywhere else (not in a
// watched mapping, or when the page cannot be replaced) keeps its default action.
//
// The watch table is fixed-size and lock-free (the handler reads it): MappedFile registers itself on open and
// unregisters on destruction. Mappings past the table's size are not watched (their SIGBUS is the default's).
#pragma once

#include <cstddef>
#include <cstdint>

namespace epk::map_faults {

inline constexpr int kNoWatch = -1;

// Idempotent; safe to call from any thread. Chains nothing: epkd owns SIGBUS.
void install_map_fault_handler();

// [data, data + size) is watched from now on; returns its watch id (kNoWatch when the table is full).
int watch(const void* data, std::size_t size);
// Stops watching (the mapping is about to go). kNoWatch is ignored.
void unwatch(int id);
// Whether a SIGBUS was absorbed in the watched range since watch().
bool damaged(int id);

}  // namespace epk::map_faults
