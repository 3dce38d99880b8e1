#include "codec/common/checksum.h"

// xxhash's header where it is installed (libxxhash-dev); elsewhere (the Python package built on a machine without
// it) the six functions of libxxhash.so.0's stable XXH3 API, which apt itself needs on every Debian and Ubuntu, are
// declared here with the header's types: XXH64_hash_t is a uint64_t, XXH_errorcode an int-sized enum (ignored),
// XXH3_state_t opaque behind XXH3_createState.
#if __has_include(<xxhash.h>) && !defined(EPK_XXHASH_DECLARED)
#include <xxhash.h>
#else
extern "C" {
typedef struct XXH3_state_s XXH3_state_t;
typedef enum { XXH_OK = 0, XXH_ERROR } XXH_errorcode;
std::uint64_t XXH3_64bits(const void* input, std::size_t length);
XXH3_state_t* XXH3_createState(void);
XXH_errorcode XXH3_freeState(XXH3_state_t* state);
XXH_errorcode XXH3_64bits_reset(XXH3_state_t* state);
XXH_errorcode XXH3_64bits_update(XXH3_state_t* state, const void* input, std::size_t length);
std::uint64_t XXH3_64bits_digest(const XXH3_state_t* state);
}
#endif

namespace epk {

std::uint64_t xxh3_64(std::span<const std::uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_)); }
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Xxh3Stream::update(std::span<const std::uint8_t> bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}
std::uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }

}  // namespace epk
