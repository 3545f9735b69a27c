/* loaderx.h: the C ABI of libloaderx (the contract between zig/src/c_abi/exports.zig and
 * loaderx/_native.py). Everything here is implemented in Zig; this header documents it.
 *
 * Conventions
 * - Every function that can fail returns an lx_status (0 = LX_OK). On failure a message for the
 *   calling thread is available from lx_last_error() until that thread's next call.
 * - Handles are opaque. lx_store_close(NULL) does nothing. A handle closed already is refused as
 *   NULL is (a second close does nothing, a query answers 0, any other call LX_INVALID_ARGUMENT):
 *   a handle is not the object's address, so a closed one never reaches an object opened later.
 * - Buffers are supplied by the caller. Indices are int64, already normalised by the caller to
 *   0 <= i < length; anything else is LX_INDEX_OUT_OF_RANGE, reported before any byte is copied.
 *   A gather checks every destination slot's size against its record before copying any. A
 *   count whose arrays could not fit in memory is LX_INVALID_ARGUMENT.
 * - Codecs: 0 raw, 1 zstd (level 3), 2 zstd with the store's dictionary (level 19).
 * - Threads: gather, record_lengths, stats and length may run from any number of threads at once;
 *   append may run concurrently with them (appends serialise among themselves). delete, compact
 *   and train_dict take the store exclusively (they wait for readers and writers to finish).
 *   The native pool is shared by all stores; the calling thread also does work.
 * - Processes and handles: every handle holds "open.lock" (in the store folder) shared while
 *   open; the first write of a handle takes "writer.lock" exclusive until close, and a second
 *   writer gets LX_STORE_LOCKED at once. delete, compact and train_dict make open.lock exclusive
 *   for their duration and get LX_STORE_LOCKED while any other handle has the store open; opening
 *   waits up to 60 s for one to finish; a handle converts its lock under "maintenance.lock", and
 *   one that finds that held is refused too. Locks are flock()s: the kernel drops a dead process's.
 * - fork(): call lx_after_fork_child() in the child. Stores opened before fork() keep working
 *   there; the child re-takes its shared lock on first use and is never the parent's writer.
 */
#ifndef LOADERX_H
#define LOADERX_H
#include <stdint.h>

typedef enum lx_status {
    LX_OK = 0,
    LX_INVALID_ARGUMENT = 1,   /* ValueError: bad codec, bad offsets, zero stride, ... */
    LX_INDEX_OUT_OF_RANGE = 2, /* IndexError */
    LX_NOT_FOUND = 3,          /* FileNotFoundError: no store at path (and create not asked) */
    LX_NOT_A_STORE = 4,        /* loaderx.errors.NotAStoreError: wrong magic/version/size */
    LX_CORRUPT = 5,            /* loaderx.errors.CorruptStoreError: table points outside chunk, bad frame */
    LX_RECORD_TOO_LARGE = 6,   /* ValueError: a record over record_size_max (1 MiB) */
    LX_STORE_FULL = 7,         /* loaderx.errors.StoreFullError: past 2^24 records */
    LX_NO_DICTIONARY = 8,      /* loaderx.errors.DictionaryError: zstd_dict without dict.zr */
    LX_DICTIONARY_EXISTS = 9,  /* loaderx.errors.DictionaryError: retrain over a non-empty store */
    LX_CODEC_FAILED = 10,      /* loaderx.errors.CodecError: zstd reported an error */
    LX_OUT_OF_MEMORY = 11,     /* MemoryError */
    LX_IO = 12,                /* OSError */
    LX_SIZE_MISMATCH = 13,     /* ValueError: destination slot size != record's logical length */
    LX_PERMISSION_DENIED = 14, /* PermissionError */
    LX_STORE_LOCKED = 15,      /* loaderx.errors.StoreLockedError: another writer, or open elsewhere */
    LX_READ_ONLY = 16,         /* loaderx.errors.ReadOnlyStoreError: a write to a read-only handle */
    LX_TOO_MANY_OPEN_FILES = 17, /* loaderx.errors.DescriptorLimitError (OSError EMFILE): RLIMIT_NOFILE reached */
    LX_VIEW_STALE = 18,        /* a view's stores changed length (a delete): make a new view, call again */
    LX_STATUS_COUNT = 19
} lx_status;

/* Flags of lx_store_open. */
#define LX_OPEN_CREATE 1u  /* create the store (and its folder's files) if meta.zr is absent */
#define LX_OPEN_DURABLE 2u /* fsync data before the table and the table before the length */
#define LX_OPEN_READ_ONLY 4u /* map read-only, take no writer lock, create nothing, refuse writes;
                              * not with LX_OPEN_CREATE */
/* Which records gathers check against their checksum (sums.zr), LX_CORRUPT on a mismatch.
 * Default (neither flag): compressed and empty records; raw records are left out (the check
 * costs as much as their copy). At most one of the two flags. */
#define LX_OPEN_VERIFY_ALL 8u  /* every record */
#define LX_OPEN_VERIFY_NONE 16u /* none (zstd still checks its frames' content checksums) */

/* Limits of a store (zig/src/base/limits.zig; loaderx/_native.py repeats them, tests check all
 * three). */
#define LX_RECORD_SIZE_MAX 1048576u     /* bytes in one record, stored or logical: 2^20 */
#define LX_RECORD_COUNT_MAX 16777216u   /* records in one store: 2^24 */
#define LX_CHUNK_COUNT_MAX 4096u        /* chunk files 0.zr .. 4095.zr */
#define LX_CHUNK_SIZE_MAX 4294967296ull /* bytes addressable in one chunk file: 2^32 */

typedef struct lx_store lx_store;

typedef struct lx_stats {
    uint64_t records;     /* live records: the length */
    uint64_t live_bytes;  /* stored (physical) bytes of the live records */
    uint64_t chunk_bytes; /* bytes up to the write frontier: tail_chunk * 2^32 + tail_offset */
    uint64_t reclaimable; /* chunk_bytes - live_bytes */
} lx_stats;

/* Whether the pool's helper threads join a gather (or an lx_batch_pad) large enough for them
 * (lx_pool_set_policy). Process-wide; either way a gather writes the same bytes. */
#define LX_POOL_AUTO 0u   /* default: each store (and view) learns from its own gathers' timings
                           * whether helpers make them faster, and keeps checking (padded
                           * batches learn it together, process-wide) */
#define LX_POOL_ALWAYS 1u /* helpers join every such gather */
#define LX_POOL_NEVER 2u  /* the calling thread alone (processes sharing a machine, benchmarks) */

/* How a large raw gather (records of 1 KiB or more, 1 MiB or more in all) writes its
 * destination (lx_stores_set_policy). Process-wide; either way a gather writes the same bytes. */
#define LX_STORES_AUTO 0u      /* default: each store (and view) learns from its own gathers'
                                * timings which way is faster, and keeps checking */
#define LX_STORES_STREAMING 1u /* around the caches (non-temporal stores, where the CPU has
                                * them): no read of a cold destination before it is written */
#define LX_STORES_CACHED 2u    /* through the caches: the batch stays there for its reader */

/* --- library ---------------------------------------------------------------------------- */
uint32_t lx_abi_version(void);            /* bumped on any ABI change; Python checks it */
const char *lx_status_name(int status);   /* static string, "LX_OK", ... ; "unknown" otherwise */
const char *lx_last_error(void);          /* thread-local, valid until this thread's next call */
lx_status lx_pool_set_policy(uint32_t policy); /* LX_POOL_*; anything else LX_INVALID_ARGUMENT */
uint32_t lx_pool_policy(void);            /* the policy in force */
lx_status lx_stores_set_policy(uint32_t policy); /* LX_STORES_*; anything else LX_INVALID_ARGUMENT */
uint32_t lx_stores_policy(void);          /* the policy in force */
void lx_after_fork_child(void);           /* in a forked child: rebuilds the thread pool and
                                           * resets every open store's locks */

/* --- store ------------------------------------------------------------------------------ */
/* path: the store's folder (must exist; Python creates it). */
lx_status lx_store_open(const char *path, uint32_t flags, lx_store **out);
void lx_store_close(lx_store *store);
uint64_t lx_store_length(const lx_store *store); /* atomic load of the published length */
int lx_store_has_dict(const lx_store *store);    /* 1 if dict.zr is loaded */

/* Appends count records; record i is data[offsets[i] .. offsets[i+1]) (count+1 offsets,
 * non-decreasing). All or nothing: on failure the store is exactly as before.
 * out_first receives the index of the first new record. */
lx_status lx_store_append(lx_store *store, const uint8_t *data, const uint64_t *offsets,
                          uint64_t count, uint8_t codec, uint64_t *out_first);
/* Same with every record exactly `stride` bytes: record i is data[i*stride .. (i+1)*stride). */
lx_status lx_store_append_fixed(lx_store *store, const uint8_t *data, uint64_t stride,
                                uint64_t count, uint8_t codec, uint64_t *out_first);

/* Dense gather: record indices[i] is written (decompressed) to dst + i*stride. Every record's
 * logical length must equal stride (else LX_SIZE_MISMATCH). */
lx_status lx_store_gather_fixed(lx_store *store, const int64_t *indices, uint64_t count,
                                uint8_t *dst, uint64_t stride);
/* Logical (decompressed) length of each record. */
lx_status lx_store_record_lengths(lx_store *store, const int64_t *indices, uint64_t count,
                                  uint64_t *out_lengths);
/* A ragged gather's offsets in one call: out_offsets (count + 1 entries) gets 0 and the running
 * sums of the records' logical lengths, the dst_offsets of lx_store_gather. With out_rows
 * (count + 1 int32 entries; row_size > 0) it also gets each offset / row_size, the cu_seqlens
 * of a packed batch; a record that is not a whole number of rows is then LX_CORRUPT, and more
 * rows than int32 counts LX_INVALID_ARGUMENT, with out_rows untouched. */
lx_status lx_store_record_offsets(lx_store *store, const int64_t *indices, uint64_t count,
                                  uint64_t row_size, uint64_t *out_offsets, int32_t *out_rows);
/* A packed gather in one call (a loader's ragged batch): out_offsets and out_rows as
 * lx_store_record_offsets gives them, then, when dst_capacity holds the records, every record
 * back to back in dst, all under one hold of the store's lock (no record changes size in
 * between). When dst_capacity is too small it is LX_SIZE_MISMATCH with nothing copied, and
 * out_offsets[count] says how many bytes dst needs. */
lx_status lx_store_gather_packed(lx_store *store, const int64_t *indices, uint64_t count,
                                 uint64_t row_size, uint8_t *dst, uint64_t dst_capacity,
                                 uint64_t *out_offsets, int32_t *out_rows);
/* A padded gather in one call (a loader's padded ragged batch): under one hold of the store's
 * lock, out_rows[i] gets record indices[i]'s length in rows (rows of row_size bytes; a record
 * that is not whole rows is LX_CORRUPT), the padded length L is picked from the longest, N
 * rows: the smallest of `lengths` (length_count of them, increasing, each at least 1) that is
 * at least N, or with length_count 0 N itself; when none is, the last of them with
 * LX_PAD_TRUNCATE in flags, else LX_SIZE_MISMATCH with *out_length = N (past the last length)
 * and nothing else written. *out_length gets L. When out holds count * L * row_size bytes and
 * mask count * L, record i's first min(n_i, L) rows go to out's rows [i * L, ...) (decompressed
 * straight there; a compressed record cut to L rows is decompressed into a scratch first),
 * pad_row (row_size bytes) fills the rest of its L rows, and mask[i * L + j] is 1 for a record
 * row, 0 for a padding row; otherwise LX_SIZE_MISMATCH with only out_rows and *out_length
 * written: call again with buffers that large. Refuses (writing nothing) NULLs, a zero row_size,
 * lengths that do not increase, unknown flags, LX_PAD_TRUNCATE without lengths, sizes that
 * overflow and writes that overlap each other, pad_row or lengths. out and mask may be NULL
 * when their capacity is 0, indices and out_rows when count is 0 (then *out_length is
 * lengths[0], or 0). */
lx_status lx_store_gather_padded(lx_store *store, const int64_t *indices, uint64_t count,
                                 uint64_t row_size, const uint8_t *pad_row,
                                 const uint64_t *lengths, uint64_t length_count, uint32_t flags,
                                 uint8_t *out, uint64_t out_capacity, uint8_t *mask,
                                 uint64_t mask_capacity, uint64_t *out_rows, uint64_t *out_length);
#define LX_PAD_TRUNCATE 1u /* flags of lx_{store,view}_gather_padded: cut long records to the last length */
/* Ragged gather: record indices[i] goes to dst + dst_offsets[i]; the slot
 * [dst_offsets[i], dst_offsets[i+1]) must be exactly its logical length. */
lx_status lx_store_gather(lx_store *store, const int64_t *indices, uint64_t count, uint8_t *dst,
                          const uint64_t *dst_offsets);
/* One stream of lx_store_gather_streams: records of record_size bytes go to out, slot i at
 * out + i * record_size. */
typedef struct lx_gather_stream {
    lx_store *store;
    uint8_t *out;          /* count * record_size bytes */
    uint64_t record_size;  /* bytes of each record (its logical length), > 0 */
    uint64_t out_bytes;    /* the size of out: must be count * record_size */
} lx_gather_stream;
#define LX_GATHER_STREAMS_MAX 8u /* streams one lx_store_gather_streams call takes */
/* Several stores gathered at the same indices in one call (a loader's streams of one step):
 * the largest stream runs on the pool, the others beside it. Every index is checked against
 * every store's length and every slot against its record before any byte moves. Each distinct
 * store is held shared for the call, locked in the library's one lock order (below). */
lx_status lx_store_gather_streams(const int64_t *indices, uint64_t count,
                                  const lx_gather_stream *streams, uint64_t stream_count);

/* Swap-last delete of the given records (any order, duplicates allowed). */
lx_status lx_store_delete(lx_store *store, const int64_t *indices, uint64_t count);
/* One delete across `count` distinct stores, all or nothing refused: store k deletes
 * indices[splits[k] .. splits[k + 1]) (splits: count + 1 offsets from 0, non-decreasing).
 * Every store is taken exclusively, every index checked and every store's redo log written
 * before any record moves, so an error there (a full disk) changes nothing; an error after
 * that leaves every store deleted (each finished by its next writable open).
 * Lock order: every call that holds several stores at once (this one, a view's gathers and
 * lx_store_gather_streams) takes them in one order, ascending address of the store object,
 * whatever order they are listed in, so no two such calls can deadlock. */
lx_status lx_stores_delete(lx_store *const *stores, uint64_t count, const int64_t *indices,
                           const uint64_t *splits);
/* Offline, in-place compaction (see README). */
lx_status lx_store_compact(lx_store *store);
/* A caller's check that lx_store_delete, lx_store_compact, lx_store_train_dict (and
 * lx_stores_delete, for each store) run once they hold the store exclusively, so that no other
 * handle has it open: nonzero refuses the operation with LX_STORE_LOCKED and nothing changed.
 * It gets `context` and the operation's name ("delete", "compact" or "train_dict",
 * operation_size bytes, not terminated), on the calling thread. A NULL function removes it. */
typedef int (*lx_maintenance_check)(void *context, const char *operation, uint64_t operation_size);
lx_status lx_store_set_maintenance_check(lx_store *store, lx_maintenance_check function,
                                         void *context);
lx_status lx_store_stats(lx_store *store, lx_stats *out);
/* Why lx_store_verify reports a record. */
#define LX_VERIFY_ENTRY 1u         /* impossible table entry (outside its chunk or the written space) */
#define LX_VERIFY_CHUNK 2u         /* its chunk file is missing or unreadable */
#define LX_VERIFY_CHECKSUM 3u      /* stored bytes differ from the record's checksum */
#define LX_VERIFY_FRAME 4u         /* zstd frame does not decode to its logical length, or fails its checksum */
#define LX_VERIFY_NO_DICTIONARY 5u /* zstd_dict record in a store without dict.zr */

typedef struct lx_verify_problem {
    uint64_t index;   /* record index */
    uint32_t reason;  /* LX_VERIFY_* */
    uint32_t reserved;
} lx_verify_problem;

typedef struct lx_verify_summary {
    uint64_t records;       /* records checked: the length when verify started */
    uint64_t checksummed;   /* records compared with their checksum (0 without sums.zr) */
    uint64_t problem_count; /* bad records found (all of them, even past capacity) */
    uint32_t has_checksums; /* 1 when the store keeps per-record checksums */
    uint32_t reserved;
} lx_verify_summary;

/* Checks every record in parallel: its table entry, its checksum (when the store keeps them) and
 * that compressed records decode. The first `capacity` bad records, sorted by index, go to
 * out_problems (may be NULL when capacity is 0). Runs beside gathers and appends. */
lx_status lx_store_verify(lx_store *store, lx_verify_problem *out_problems, uint64_t capacity,
                          lx_verify_summary *out_summary);
/* fsync every chunk and msync meta.zr. */
lx_status lx_store_sync(lx_store *store);

/* Trains a zstd dictionary of at most dict_size bytes from count samples laid out like
 * lx_store_append's input, writes it as dict.zr (atomically) and loads it. Refused with
 * LX_DICTIONARY_EXISTS when the store already has a dictionary and at least one record. */
lx_status lx_store_train_dict(lx_store *store, const uint8_t *samples, const uint64_t *offsets,
                              uint64_t count, uint64_t dict_size);

/* --- view: several open stores (the shards of a dataset) read as one index space -------- */
typedef struct lx_view lx_view;
/* A view over stores[0..count) (1 <= count <= 2^20), in that order: global index g is record
 * g - start(k) of the store k whose range holds it. The lengths of every store but the last
 * are taken now (make a new view after a delete); the last store's range ends at its live
 * length, so appends to it are seen at once. The view borrows the handles: close it before
 * any of its stores. At most 2^20 stores x 2^24 records = 2^44 records. */
lx_status lx_view_open(lx_store *const *stores, uint64_t count, lx_view **out);
void lx_view_close(lx_view *view);                 /* NULL does nothing */
uint64_t lx_view_length(const lx_view *view);      /* total records; 0 for NULL */
/* As lx_store_gather_fixed / lx_store_record_lengths / lx_store_record_offsets /
 * lx_store_gather_packed / lx_store_gather / lx_store_gather_padded, with global indices:
 * the whole batch is one pool run, each record read by its own store under that store's
 * shared lock. An index past a store that shrank since the view was made is
 * LX_INDEX_OUT_OF_RANGE (with a message naming the shard). */
lx_status lx_view_gather_fixed(lx_view *view, const int64_t *indices, uint64_t count,
                               uint8_t *dst, uint64_t stride);
lx_status lx_view_record_lengths(lx_view *view, const int64_t *indices, uint64_t count,
                                 uint64_t *out_lengths);
lx_status lx_view_record_offsets(lx_view *view, const int64_t *indices, uint64_t count,
                                 uint64_t row_size, uint64_t *out_offsets, int32_t *out_rows);
lx_status lx_view_gather_packed(lx_view *view, const int64_t *indices, uint64_t count,
                                uint64_t row_size, uint8_t *dst, uint64_t dst_capacity,
                                uint64_t *out_offsets, int32_t *out_rows);
lx_status lx_view_gather(lx_view *view, const int64_t *indices, uint64_t count, uint8_t *dst,
                         const uint64_t *dst_offsets);
lx_status lx_view_gather_padded(lx_view *view, const int64_t *indices, uint64_t count,
                                uint64_t row_size, const uint8_t *pad_row,
                                const uint64_t *lengths, uint64_t length_count, uint32_t flags,
                                uint8_t *out, uint64_t out_capacity, uint8_t *mask,
                                uint64_t mask_capacity, uint64_t *out_rows, uint64_t *out_length);

/* --- the Python binding's fast path ----------------------------------------------------
 * ctypes passes a Python int as a C int far more cheaply than as a typed argument, and the
 * address of a NumPy array's fields (id(array) plus the Python object header's size) costs it
 * nothing, where the array's data pointer costs a Python call. So these take every pointer as
 * two uint32_t halves, low then high, and every array as the address of its NumPy fields
 * (PyArrayObject_fields: data, nd, dimensions, strides, base, descr, flags). `indices` must be
 * a non-empty, one-dimensional, C-contiguous, aligned array (the caller checks that its dtype
 * is native int64) and `out` a writable C-contiguous array. With out_bytes 0 the library
 * proves out's size itself: its first dimension must be count, indices' length, with
 * strides[0] == stride, no dimension 0 and count >= 2 (NumPy lets a dimension of 1 have any
 * stride, so a single row's size is not known from the strides). Otherwise out_bytes is out's
 * size as NumPy gives it (nbytes), which must be count * stride. Any other array is
 * LX_INVALID_ARGUMENT before any byte moves; otherwise they are lx_store_gather_fixed and
 * lx_view_gather_fixed. A binding checks its way of passing with lx_join_halves and
 * lx_read_array_facts before it relies on it. */
lx_status lx_store_gather_arrays(uint32_t store_low, uint32_t store_high, uint32_t indices_low,
                                 uint32_t indices_high, uint32_t out_low, uint32_t out_high,
                                 uint32_t stride, uint32_t out_bytes);
lx_status lx_view_gather_arrays(uint32_t view_low, uint32_t view_high, uint32_t indices_low,
                                uint32_t indices_high, uint32_t out_low, uint32_t out_high,
                                uint32_t stride, uint32_t out_bytes);
/* The packed gather the same way: `indices` as above; `out` a writable, C-contiguous,
 * one-dimensional array of bytes (strides[0] == 1) of at least 2 elements, its length the
 * capacity (a single element's stride proves nothing, so a one-byte out is refused);
 * `offsets` a writable, C-contiguous, aligned, one-dimensional array of exactly count + 1
 * elements with strides[0] == 8 and 8-byte aligned data (the caller checks that its dtype is
 * uint64); `rows`, when its halves are not both 0, the same with strides[0] == 4 (int32) and
 * a row_size above 0. Any other array is LX_INVALID_ARGUMENT before any byte moves;
 * otherwise they are lx_store_gather_packed and lx_view_gather_packed (LX_SIZE_MISMATCH with
 * only offsets and rows written when out is too small). */
lx_status lx_store_gather_packed_arrays(uint32_t store_low, uint32_t store_high,
                                        uint32_t indices_low, uint32_t indices_high,
                                        uint32_t out_low, uint32_t out_high,
                                        uint32_t offsets_low, uint32_t offsets_high,
                                        uint32_t rows_low, uint32_t rows_high, uint32_t row_size);
lx_status lx_view_gather_packed_arrays(uint32_t view_low, uint32_t view_high,
                                       uint32_t indices_low, uint32_t indices_high,
                                       uint32_t out_low, uint32_t out_high,
                                       uint32_t offsets_low, uint32_t offsets_high,
                                       uint32_t rows_low, uint32_t rows_high, uint32_t row_size);
/* (high << 32) | low. */
uint64_t lx_join_halves(uint32_t low, uint32_t high);

/* What lx_read_array_facts reads from an array's fields. */
typedef struct lx_array_facts {
    uint64_t data;   /* the data pointer */
    uint64_t ndim;   /* nd, as a two's-complement int64 */
    uint64_t length; /* dimensions[0], or 0 when nd < 1 */
    uint64_t flags;  /* NumPy's NPY_ARRAY_* bits */
    uint64_t stride; /* strides[0], as a two's-complement int64, or 0 when nd < 1 */
} lx_array_facts;
lx_status lx_read_array_facts(uint32_t fields_low, uint32_t fields_high, lx_array_facts *out);

/* --- sampler (pure functions of their arguments) --------------------------------------- */
#define LX_SAMPLER_SEQUENTIAL 0u
#define LX_SAMPLER_IID 1u
#define LX_SAMPLER_CYCLIC 2u
/* Writes this shard's batch_size indices for `step` into out. The global batch of a step is
 * batch_size * shard_count indices; shard shard_index takes the contiguous slice
 * [shard_index*batch_size, (shard_index+1)*batch_size) of it. */
lx_status lx_sampler_fill(uint32_t mode, uint64_t length, uint64_t batch_size, uint64_t seed,
                          uint64_t step, uint64_t shard_index, uint64_t shard_count, int64_t *out);

/* lx_sampler_fill's constant arguments, prepared once per sampler. */
typedef struct lx_sampler_request {
    uint32_t mode;
    uint32_t reserved; /* 0 */
    uint64_t length;
    uint64_t batch_size;
    uint64_t seed;
    uint64_t shard_index;
    uint64_t shard_count;
} lx_sampler_request;

/* lx_sampler_fill with the constant arguments read from *request: the per-batch call passes
 * three arguments instead of eight (each costs the Python binding a conversion). */
lx_status lx_sampler_batch(const lx_sampler_request *request, uint64_t step, int64_t *out);

/* The record checksum (sums.zr's value) of count stored records lying in buffer: record i is
 * stored_lengths[i] bytes at starts[i], with its logical length and codec. For a caller that
 * fetched records itself (the remote cache) and checks them before any reader uses them.
 * Refuses (writing nothing) a record past buffer_len, an unknown codec or a NULL. */
lx_status lx_record_sums(const uint8_t *buffer, uint64_t buffer_len, const uint64_t *starts,
                         const uint32_t *stored_lengths, const uint32_t *logic_lengths,
                         const uint8_t *codecs, uint64_t count, uint32_t *out_sums);

/* --- padded batches --------------------------------------------------------------------- */
/* A packed ragged batch padded to `length` rows a record: record i is rows cu_seqlens[i] to
 * cu_seqlens[i + 1] of values (rows of row_size bytes; count + 1 offsets, not negative, never
 * decreasing, within values_size). Its first min(n_i, length) rows go to out's rows
 * [i * length, ...), pad_row (row_size bytes) fills the rest of its length rows, and
 * mask[i * length + j] is 1 for a record row, 0 for a padding row: out needs
 * count * length * row_size bytes, mask count * length. A record longer than length keeps its
 * first rows. Refuses (writing nothing) NULLs, sizes that overflow, too small out or mask,
 * bad offsets and writes that overlap a read; values, out and mask may be NULL when empty.
 * A large batch is split with the pool's helpers as LX_POOL_* says. */
lx_status lx_batch_pad(const uint8_t *values, uint64_t values_size, const int32_t *cu_seqlens,
                       uint64_t count, uint64_t row_size, const uint8_t *pad_row, uint64_t length,
                       uint8_t *out, uint64_t out_capacity, uint8_t *mask, uint64_t mask_capacity);

#endif
