/* libepk, C ABI. Every function returns EPK_OK (0) or an epk_status code; epk_last_error() gives the message of the
 * calling thread's last failure. No exceptions cross this boundary. Link with -lepk. */
#ifndef EPK_CLIENT_EPK_H_
#define EPK_CLIENT_EPK_H_

#include <stddef.h>
#include <stdint.h>

/* The ABI's version, also libepk.so's SOVERSION: bumped whenever a struct below changes size or layout, so that a
 * program built against an older header does not load a library that would write past its structs.
 * 2: epk_tensor gained device, on_device and event; epk_cache_stats gained resident_bytes. */
#define EPK_ABI_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

typedef struct epk_client epk_client;

enum epk_status {
  EPK_OK = 0,
  EPK_E_IO = 1,            /* socket or mapping failure; the connection may be gone */
  EPK_E_BAD_INPUT = 2,     /* a malformed model file or message (the stored tensor cannot be read) */
  EPK_E_UNSUPPORTED = 3,   /* layout or feature not served */
  EPK_E_NOT_FOUND = 4,     /* unknown model, tensor or handle */
  EPK_E_NO_SPACE = 5,      /* does not fit in the daemon's budget without evicting pinned slots */
  EPK_E_DECODE = 6,        /* the stored tensor is corrupt (a tile or a checksum) */
  EPK_E_INVALID = 7,       /* bad argument */
  EPK_E_INTERNAL = 8,
  EPK_E_DENIED = 9,        /* epkd's access rules refuse this client (its uid/gids) or this model to it */
  EPK_E_QUOTA = 10,        /* the client is over its own pin quota (pinned bytes, or pins of one tensor) */
  EPK_E_CUDA = 11          /* a CUDA call in this library failed (client-side decode, device pools) */
};

#define EPK_MAX_DIMS 8

typedef struct epk_tensor {
  void* data;              /* in a pool mapped into this process; valid until epk_release(handle) */
  uint64_t bytes;
  uint32_t dtype;          /* epk DType code (safetensors names: see codec/common/dtype.h) */
  uint32_t ndim;
  uint64_t shape[EPK_MAX_DIMS];
  int64_t strides[EPK_MAX_DIMS]; /* elements */
  uint64_t handle;
  /* Device pools: data is a device address on CUDA device `device` (on_device = 1); event (a
   * CUevent, usable as cudaEvent_t) completes when the decode has: call epk_wait before reading. Host pools:
   * on_device = 0, device = -1, event = NULL. */
  int32_t device;
  uint32_t on_device;
  void* event;
} epk_tensor;

typedef struct epk_cache_stats {
  uint64_t budget_bytes, used_bytes, pinned_bytes, slots, pinned_slots, pins, hits, misses, evictions, decodes,
      decode_ns, clients, models, prefetches, resident_bytes;
} epk_cache_stats;

/* Connects to the daemon at socket_path; *out is NULL on failure. */
int epk_connect(const char* socket_path, epk_client** out);
/* layout: "stored", "dense:bf16", "dense:fp16", "dense:fp32", "rowwise:fp8_e4m3", "rowwise:int8", and for
 * integer-quantized tensors "gptq", "gptq-v2", "awq", "marlin"; NULL = "stored".
 * Rowwise layouts: shape[0] x shape[1] one-byte values, then shape[0] float scales starting at byte
 * (shape[0] * shape[1] + 63) / 64 * 64 of data; weight = value * scale[row].
 * Packed integer layouts: one slot holds several arrays (parts). dtype is the scales' dtype, ndim is 8, strides are 0
 * and shape is a descriptor: {N, K, padded N, padded K, bits, group_size, num_groups, flags} (flags: 1 = a g_idx
 * part, 2 = a perm part). The parts follow one another, the first at offset 0 and each next one at the previous
 * one's end rounded up to 64 bytes:
 *   gptq, gptq-v2: qweight I32 [pK*bits/32, pN], qzeros I32 [groups, pN*bits/32], scales [groups, pN], g_idx I32 [pK]
 *                  (gptq stores zero-1, AutoGPTQ's v1; gptq-v2 stores the zero)
 *   awq:           qweight I32 [pK, pN/8], qzeros I32 [groups, pN/8], scales [groups, pN] (AutoAWQ GEMM)
 *   marlin:        qweight I32 [pK/16, pN*bits/2], scales [groups, pN], and with flags 3: g_idx I32 [pK],
 *                  perm I32 [pK] (vLLM gptq_marlin)
 * epk_tensor_parts() applies this rule. */
int epk_acquire(epk_client* c, const char* model, const char* tensor, const char* layout, epk_tensor* out);
/* The same from the pool of CUDA device `device` (epk_acquire: device 0; a daemon serving a host pool takes 0). A
 * device the daemon does not serve: EPK_E_NOT_FOUND. out->device says where the slot lives. */
int epk_acquire_on(epk_client* c, const char* model, const char* tensor, const char* layout, uint32_t device,
                   epk_tensor* out);
/* Tensor-parallel shards (shm/shard.h): a slice of one dimension. dim EPK_SHARD_ROWS cuts dimension 0 (a Linear
 * weight's output features, column-parallel layers; a 1-D tensor's elements), EPK_SHARD_COLS dimension 1 (input
 * features, row-parallel layers). form EPK_SHARD_RANGE: [a, b); EPK_SHARD_SPLIT: rank a of world size b, every rank
 * ceil(extent / b) indices and the last what is left (vLLM's and Megatron's split where b divides the extent,
 * torch.chunk's otherwise; a rank whose share is empty is refused). */
enum epk_shard_dim { EPK_SHARD_NONE = 0, EPK_SHARD_ROWS = 1, EPK_SHARD_COLS = 2 };
enum epk_shard_form { EPK_SHARD_RANGE = 0, EPK_SHARD_SPLIT = 1 };
typedef struct epk_shard {
  uint32_t dim;  /* epk_shard_dim; EPK_SHARD_NONE: the whole tensor */
  uint32_t form; /* epk_shard_form */
  uint64_t a, b; /* range: begin, end; split: rank, world size */
} epk_shard;
/* epk_acquire_on of a shard (NULL: the whole tensor): out describes the slice, compact and row-major, and the daemon
 * decodes only what it covers. A shard that does not fit the tensor: EPK_E_INVALID, the message naming tensor, shape
 * and range. Packed integer layouts shard along their packing rules (codec/serve/intq_producer.h): output features cut
 * qweight/scales/qzeros columns, input features qweight rows with their g_idx (and the groups they need); a boundary
 * a layout cannot take (inside a group for awq/marlin, any input shard of a tensor with a perm) is EPK_E_UNSUPPORTED
 * naming it. Each shard is a slot of its own. */
int epk_acquire_shard(epk_client* c, const char* model, const char* tensor, const char* layout, uint32_t device,
                      const epk_shard* shard, epk_tensor* out);
/* The range [*begin, *end) a shard takes of a tensor of `shape` (ndim extents) and which dimension (*axis: 0 or 1),
 * by the same rule the daemon applies; EPK_E_INVALID with the reason. */
int epk_shard_resolve(const epk_shard* shard, const uint64_t* shape, uint32_t ndim, uint32_t* axis, uint64_t* begin,
                      uint64_t* end);
typedef struct epk_part {
  const char* name; /* "qweight", "qzeros", "scales", "g_idx", "perm" (static storage) */
  void* data;       /* inside the acquired slot */
  uint64_t bytes;
  uint32_t dtype;
  uint32_t ndim;    /* 1 or 2 */
  uint64_t shape[2];
} epk_part;
/* The parts of a tensor acquired in a packed integer layout (the same layout name). *count receives how many parts
 * there are (at most 4); up to capacity are written. EPK_E_INVALID when t is not such a slot. */
int epk_tensor_parts(const epk_tensor* t, const char* layout, epk_part* parts, size_t capacity, size_t* count);
/* *queued (may be NULL) receives the number of decodes the daemon queued. */
int epk_prefetch(epk_client* c, const char* model, const char* const* tensors, size_t count, const char* layout,
                 uint32_t* queued);
/* The same from device `device`'s pool, the same shard of every name (NULL: whole tensors); a name the shard does not
 * fit is skipped, as an unknown one is. */
int epk_prefetch_shard(epk_client* c, const char* model, const char* const* tensors, size_t count, const char* layout,
                       uint32_t device, const epk_shard* shard, uint32_t* queued);
int epk_release(epk_client* c, uint64_t handle);
/* Releases without waiting for the daemon's answer; a failure is not reported to this call. */
int epk_release_nowait(epk_client* c, uint64_t handle);
int epk_stats(epk_client* c, epk_cache_stats* out);
/* One pool's share of the stats: a pool per served CUDA device (device >= 0), or the one host pool (device -1). */
typedef struct epk_pool_stats {
  uint32_t pool_id;
  int32_t device;
  uint64_t budget_bytes, used_bytes, pinned_bytes, slots, pinned_slots, pins, hits, misses, evictions, resident_bytes;
} epk_pool_stats;
/* Writes the first min(capacity, pools) pools' stats to out (NULL when capacity is 0); *count receives how many
 * pools the daemon has. */
int epk_pool_stats_get(epk_client* c, epk_pool_stats* out, size_t capacity, size_t* count);
/* Makes stream (a CUstream / cudaStream_t; NULL = the legacy default stream) wait for t's decode. A slot the daemon
 * answered before its decode finished (an uncached device acquire) is first waited for on the CPU
 * until the daemon publishes the decode's outcome; a failed decode (a corrupt tile) returns EPK_E_DECODE naming the
 * tensor, and the slot must not be read (the daemon dropped it). Otherwise the CPU does not block. No-op for host
 * slots. Call it before reading the slot; epk_copy_to_host checks the same. */
int epk_wait(epk_client* c, const epk_tensor* t, void* stream);
/* Copies t->bytes of t's slot into host memory at dst (waits for the decode on device slots). */
int epk_copy_to_host(epk_client* c, const epk_tensor* t, void* dst);
/* Device slots: records this client's interprocess event on stream after its last kernel reading the slot and
 * releases with it as the fence (the daemon reuses the bytes only after it has completed); a stream with no work
 * left releases as epk_release does. Host pools: epk_release. */
int epk_release_after(epk_client* c, uint64_t handle, void* stream);
/* Closes the connection and frees c (NULL is ignored). Pins still held are dropped by the daemon. */
/* Client-side decode (client/stored_tier.h): this process decodes lattice-rans tensors on its own CUDA streams from
 * the compressed tier epkd keeps on `device`, into device memory it owns, bit for bit what epkd would serve.
 * epk_stored_open: EPK_E_DENIED unless epkd lets this client decode itself (root, epkd's uid, client_decode_uids /
 * client_decode_gids), EPK_E_UNSUPPORTED where the model has no tier on the device or this libepk has no CUDA. The
 * tier stays valid after the client disconnects; free batches before their tier. */
typedef struct epk_stored epk_stored;
typedef struct epk_batch epk_batch;
typedef struct epk_decode_job {
  const char* tensor;
  const char* layout; /* dense:bf16, dense:fp16, dense:fp32, rowwise:int8, rowwise:fp8_e4m3 or stored; NULL: stored */
  void* out;          /* device address, 16-byte aligned, epk_stored_decoded_bytes long */
} epk_decode_job;
int epk_stored_open(epk_client* c, const char* model, uint32_t device, epk_stored** out);
/* The bytes `tensor` takes in `layout`; EPK_E_UNSUPPORTED for a tensor that is not in the tier (acquire it). */
int epk_stored_decoded_bytes(const epk_stored* s, const char* tensor, const char* layout, uint64_t* bytes);
/* A tensor's stored shape: its rank into *ndim and up to `capacity` extents into dims. */
int epk_stored_shape(const epk_stored* s, const char* tensor, uint64_t* dims, uint32_t capacity, uint32_t* ndim);
uint64_t epk_stored_tier_bytes(const epk_stored* s);
void epk_stored_close(epk_stored* s);
/* One plan for `count` jobs (descriptors and tables uploaded once); every enqueue is one kernel launch on `stream`. */
int epk_batch_create(const epk_stored* s, const epk_decode_job* jobs, size_t count, epk_batch** out);
int epk_batch_enqueue(epk_batch* b, void* stream);
/* Waits for `stream`; EPK_E_DECODE naming the first corrupt tile of the last enqueue, if any. */
int epk_batch_check(epk_batch* b, void* stream);
uint64_t epk_batch_scratch_bytes(const epk_batch* b);
void epk_batch_free(epk_batch* b);
void epk_disconnect(epk_client* c);
/* The message of the calling thread's last failed call ("" if none). Valid until the next call on this thread. */
const char* epk_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* EPK_CLIENT_EPK_H_ */
