// How long a waiter polls before it sleeps when nobody configured it. epkd's io threads (after a request) and
// libepk's reply wait use the same rule: on a machine with cores to spare, a reply that comes back within the window
// is picked up without a sleeping thread's wake-up; on a small machine the polling thread takes the core the other
// side needs. Measured on the H200 host and the 2-core build VM: docs/measurements/cache-hit-round-trips.md.
#pragma once

#include <cstdint>

namespace epk::shm {

inline constexpr std::uint32_t kAutoSpinUs = 50;
inline constexpr unsigned kAutoSpinMinCores = 8;

inline std::uint32_t auto_spin_us(unsigned cores) { return cores >= kAutoSpinMinCores ? kAutoSpinUs : 0; }

}  // namespace epk::shm
