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
    for (begin..@min(end, begin + group)) |i| prefetchAhead(batch.locate(i), stride);
    var i = begin;
    while (i < end) {
        const stop = @min(end, i + group);
        var sources: [group][*]const u8 = undefined;
        var count: usize = 0;
        for (i..stop) |j| {
            const at = batch.locate(j);
            if (!at.store.copiesRawUnchecked()) break;
            sources[count] = at.store.rawSource(at.index, stride) orelse break;
            prefetchRecord(sources[count], stride);
            count += 1;
        }
        for (stop..@min(end, stop + group)) |j| prefetchAhead(batch.locate(j), stride);
        copyRecords(dst + i * stride, sources[0..count], stride);
        i += count;
        if (i < stop) return i;
    }
    return end;
}

/// copy for a batch whose sources are already known: sources[i] is position i's record
/// (exactly `stride` raw bytes needing no further check), or null for one that needs more,
/// where the copy stops and returns i (`end` when all were copied).
pub fn copySources(dst: [*]u8, stride: u64, sources: []const ?[*]const u8, begin: usize, end: usize) usize {
    assert(begin <= end and end <= sources.len);
    if (stride == 0 or stride > limits.record_size_max) return begin;
    for (sources[begin..@min(end, begin + group)]) |source| if (source) |src| prefetchRecord(src, stride);
    var i = begin;
    while (i < end) {
        const stop = @min(end, i + group);
        var ready: [group][*]const u8 = undefined;
        var count: usize = 0;
        for (sources[i..stop]) |source| {
            ready[count] = source orelse break;
            count += 1;
        }
        for (sources[stop..@min(end, stop + group)]) |source| if (source) |src| prefetchRecord(src, stride);
        copyRecords(dst + i * stride, ready[0..count], stride);
        i += count;
        if (i < stop) return i;
    }
    return end;
}

/// Starts loading what a later group needs first: a run's record its bytes (no entry is read
/// for it), any other record its table entry. Only a hint: copy checks everything again.
inline fn prefetchAhead(at: Located, stride: u64) void {
    if (at.store.runs.source(at.index, stride, at.store.chunks)) |src| {
        prefetchRecord(src, stride);
    } else @prefetch(&at.store.meta.table[@intCast(at.index)], .{ .rw = .read, .locality = 3, .cache = .data });
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

test "copySources: copies up to the first record that needs more, across groups" {
    const count = 2 * group + 6;
    var source_bytes: [count * 3]u8 = undefined;
    for (&source_bytes, 0..) |*b, k| b.* = @truncate(k *% 13 +% 1);
    var sources: [count]?[*]const u8 = undefined;
    // Position i reads record count - 1 - i, and position `stop` needs more than a copy.
    for (&sources, 0..) |*source, i| source.* = source_bytes[(count - 1 - i) * 3 ..].ptr;
    const stop = group + 8;
    sources[stop] = null;
    var dst: [count * 3]u8 = @splat(0xEE);
    try std.testing.expectEqual(@as(usize, stop), copySources(&dst, 3, &sources, 0, count));
    try std.testing.expectEqual(@as(usize, count), copySources(&dst, 3, &sources, stop + 1, count));
    for (0..count) |i| {
        const slot = dst[i * 3 ..][0..3];
        if (i == stop) {
            try std.testing.expectEqualSlices(u8, &.{ 0xEE, 0xEE, 0xEE }, slot);
        } else try std.testing.expectEqualSlices(u8, source_bytes[(count - 1 - i) * 3 ..][0..3], slot);
    }
}
