//! The flags and extern structs of the C ABI that mirror zig/include/loaderx.h (abi_test.zig
//! checks that they agree); the export files (exports.zig) read and fill them.
const LxStore = @import("handles.zig").LxStore;

/// Flags of lx_store_open (LX_OPEN_* in loaderx.h).
pub const open_create: u32 = 1;
pub const open_durable: u32 = 2;
pub const open_read_only: u32 = 4;
/// LX_OPEN_VERIFY_ALL and LX_OPEN_VERIFY_NONE: which records gathers check (default: compressed).
pub const open_verify_all: u32 = 8;
pub const open_verify_none: u32 = 16;

/// Flag of lx_{store,view}_gather_padded (LX_PAD_TRUNCATE): keep the first rows of a record
/// longer than the last allowed length.
pub const pad_truncate: u32 = 1;

/// Mirrors lx_stats in loaderx.h.
pub const LxStats = extern struct {
    records: u64,
    live_bytes: u64,
    chunk_bytes: u64,
    reclaimable: u64,
};

/// Mirrors lx_array_facts.
pub const LxArrayFacts = extern struct {
    data: u64,
    ndim: u64,
    length: u64,
    flags: u64,
    stride: u64,
};

/// Mirrors lx_gather_stream in loaderx.h.
pub const LxGatherStream = extern struct {
    store: ?*LxStore,
    out: ?[*]u8,
    record_size: u64,
    out_bytes: u64,
};

/// Mirrors lx_sampler_request in loaderx.h.
pub const LxSamplerRequest = extern struct {
    mode: u32,
    reserved: u32,
    length: u64,
    batch_size: u64,
    seed: u64,
    shard_index: u64,
    shard_count: u64,
};
