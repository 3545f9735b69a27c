//! The pipelined copy of raw fixed-size records, shared by a store's gather and a view's.
//!
//! A random record of a large dataset is a cache miss and a TLB miss, or two when its table
//! entry must be read first. Copied one after another those misses follow each other; here the
//! loads of the next group of records start before the current group is copied, so the misses
//! of a group overlap each other and the copy of the group before.
const std = @import("std");
const assert = std.debug.assert;
const limits = @import("limits.zig");
const Store = @import("store.zig").Store;

/// Records whose misses are kept in flight together: enough to cover a memory round trip at a
/// few nanoseconds per small record, few enough for the sources to stay in L1.
pub const group = 32;
const cache_line = std.atomic.cache_line;
/// Lines started per record (prefetchRecord).
const prefetch_lines_max = 4;

/// Where a batch position's record lives: a store and the record's index in it.
pub const Located = struct { store: *const Store, index: u64 };

/// Copies the raw records of positions begin, begin+1, ... of a batch to dst (slot i at
/// dst + i * stride) while each is exactly `stride` bytes and needs no check beyond
/// Store.rawSource's; returns the first position not copied (`end` when all were). That record
/// needs more (decompression, a checksum, a size to re-read): the caller gathers it with its
/// messages. `batch.locate(i)` gives position i's record; the caller checked every index and
/// holds the shared lock of every store they name.
pub fn copy(batch: anytype, dst: [*]u8, stride: u64, begin: usize, end: usize) usize {
    assert(begin <= end);
    if (stride == 0 or stride > limits.record_size_max) return begin;
    var sources: [window][*]const u8 = undefined;
    var i = begin;
    while (i < end) {
        const stop = @min(end, i + window);
        const count = resolve(batch, stride, i, stop, &sources);
        copySources(dst + i * stride, stride, sources[0..count]);
        i += count;
        if (i < stop) return i;
    }
    return end;
}

/// Records whose sources are found before the first of them is copied.
const window = 256;

comptime {
    // A window holds whole groups, and its sources fit in a page of the caller's stack (pool
    // helpers and Python threads alike).
    assert(window % group == 0);
    assert(window * @sizeOf([*]const u8) <= 4096);
}

/// Finds the sources of positions begin, begin+1, ... up to the first record that needs more
/// than a plain copy, and returns how many it found. A loop that does nothing else: the
/// lookups of its records (their store, then their run or table entry) overlap each other,
/// where between copies they would wait for each other (a gather of 256 8-byte records took
/// 12% less time, and one from 64 shards 1% to 3% less, once they stopped doing so).
fn resolve(batch: anytype, stride: u64, begin: usize, end: usize, sources: *[window][*]const u8) usize {
    assert(end - begin <= window);
    var count: usize = 0;
    for (begin..end) |j| {
        const at = batch.locate(j);
        if (!at.store.copiesRawUnchecked()) break;
        sources[count] = at.store.rawSource(at.index, stride) orelse break;
        count += 1;
    }
    return count;
}

/// Copies sources[k] to dst + k * stride for every k, starting the loads of each group of
/// records before the group before it is copied.
fn copySources(dst: [*]u8, stride: u64, sources: []const [*]const u8) void {
    for (sources[0..@min(sources.len, group)]) |src| prefetchRecord(src, stride);
    var i: usize = 0;
    while (i < sources.len) {
        const stop = @min(sources.len, i + group);
        for (sources[stop..@min(sources.len, stop + group)]) |src| prefetchRecord(src, stride);
        copyRecords(dst + i * stride, sources[i..stop], stride);
        i = stop;
    }
}

/// Starts loading a record's bytes: every cache line of a small one (a record of a few lines
/// would otherwise wait for each line in turn), the first few of a large one (the copy streams
/// the rest).
inline fn prefetchRecord(src: [*]const u8, stride: u64) void {
    const lines = @min(prefetch_lines_max, (stride + cache_line - 1) / cache_line);
    for (0..lines) |k| @prefetch(src + k * cache_line, .{ .rw = .read, .locality = 3, .cache = .data });
}

/// Record k of `sources` to dst[k * stride ..]; common small sizes get a copy of compile-time
/// length, which the compiler inlines instead of calling memcpy.
fn copyRecords(dst: [*]u8, sources: []const [*]const u8, stride: u64) void {
    switch (stride) {
        inline 1, 2, 4, 8, 16, 32, 64, 128, 256 => |size| {
            for (sources, 0..) |src, k| dst[k * size ..][0..size].* = src[0..size].*;
        },
        else => for (sources, 0..) |src, k| @memcpy(dst[k * stride ..][0..stride], src[0..stride]),
    }
}

test "copyRecords: every size class lands each record in its slot" {
    var source_bytes: [4 * 300]u8 = undefined;
    for (&source_bytes, 0..) |*b, k| b.* = @truncate(k *% 31 +% 7);
    inline for (.{ 1, 8, 256, 300 }) |stride| {
        var dst: [4 * 300]u8 = undefined;
        // Slots taken in reverse order, so a copy that ignored `sources` would be caught.
        const sources = [_][*]const u8{ source_bytes[3 * stride ..].ptr, source_bytes[2 * stride ..].ptr, source_bytes[stride..].ptr, source_bytes[0..].ptr };
        copyRecords(&dst, &sources, stride);
        for (0..4) |k| try std.testing.expectEqualSlices(u8, source_bytes[(3 - k) * stride ..][0..stride], dst[k * stride ..][0..stride]);
    }
}

test "copySources: every record lands in its slot, across groups" {
    const count = 2 * group + 6;
    var source_bytes: [count * 3]u8 = undefined;
    for (&source_bytes, 0..) |*b, k| b.* = @truncate(k *% 13 +% 1);
    // Slot i reads record count - 1 - i, so a copy that ignored `sources` would be caught.
    var sources: [count][*]const u8 = undefined;
    for (&sources, 0..) |*source, i| source.* = source_bytes[(count - 1 - i) * 3 ..].ptr;
    var dst: [count * 3 + 1]u8 = @splat(0xEE);
    copySources(&dst, 3, &sources);
    for (0..count) |i| try std.testing.expectEqualSlices(u8, source_bytes[(count - 1 - i) * 3 ..][0..3], dst[i * 3 ..][0..3]);
    try std.testing.expectEqual(@as(u8, 0xEE), dst[count * 3]);
}
