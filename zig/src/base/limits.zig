//! The store's size limits as named constants, and the compile-time proof that they agree.
const std = @import("std");

/// Chunk files a store may hold: `0.zr` .. `4095.zr`.
pub const chunk_count_max: u32 = 1 << 12;
/// Bytes in one chunk file (its sparse length).
pub const chunk_size_max: u64 = 1 << 32;
/// Bytes in one record, before or after compression.
pub const record_size_max: u32 = 1 << 20;
/// Records a store may hold: the number of entries in meta.zr's table.
pub const record_count_max: u32 = 1 << 24;
/// Stores (shards) one view may read as one index space (loaderx.shards.SHARD_COUNT_MAX).
pub const view_store_count_max: u32 = 1 << 20;
/// Records a view (a sharded dataset) may hold: 2^44, about 1.8 * 10^13.
pub const view_record_count_max: u64 = @as(u64, view_store_count_max) * record_count_max;

comptime {
    // Equality is the point: full-size records exactly fill every chunk when the table is full,
    // and a chunk filled up to its last whole record always holds at least
    // chunk_size_max / record_size_max records, so chunks never run out before table slots
    // (garbage left by deletes aside, which compaction reclaims).
    std.debug.assert(@as(u64, chunk_count_max) * chunk_size_max / record_size_max == record_count_max);
    std.debug.assert(chunk_size_max % record_size_max == 0);
    // Table fields: chunk ids fit a u16 (tail_chunk may reach chunk_count_max, see format.zig),
    // record sizes and in-chunk offsets fit a u32.
    std.debug.assert(chunk_count_max <= std.math.maxInt(u16));
    std.debug.assert(record_size_max <= std.math.maxInt(u32));
    std.debug.assert(chunk_size_max - 1 <= std.math.maxInt(u32));
    std.debug.assert(record_count_max <= std.math.maxInt(u32));
    // A view's global indices are the C ABI's int64: every record of every store must be
    // addressable, and a store number fits the u32 a route keeps.
    std.debug.assert(view_record_count_max <= std.math.maxInt(i64));
    std.debug.assert(view_store_count_max <= std.math.maxInt(u32));
}

test "limits agree" {
    try std.testing.expectEqual(@as(u64, record_count_max), @as(u64, chunk_count_max) * (chunk_size_max / record_size_max));
}
