//! How an append's bytes go out: the batch cut into pieces, one positional write each.
//!
//! Records adjacent both in memory and in their chunk (a raw batch) share one write, cut at
//! every `write_align` boundary of the chunk file. The page cache sizes a file's folios by the
//! writes that fill it: a 2 MiB-aligned range filled by one write becomes one 2 MiB folio,
//! which a read-only mapping then maps with one huge-page entry, and random reads of the store
//! miss the TLB far less (measured: 64 shards written in 1.5 MiB pieces read 7% slower than
//! the same records in one store written in larger ones; cut here, both map fully huge). Two
//! writes that share an aligned range, as pool blocks cut at record counts did, leave it small
//! folios.
const std = @import("std");
const assert = std.debug.assert;
const Allocator = std.mem.Allocator;
const limits = @import("../base/limits.zig");

/// The boundary writes are cut at: the x86-64 huge page (also a multiple of every smaller
/// folio size, so the cuts never split one).
pub const write_align: u64 = 2 * 1024 * 1024;

comptime {
    assert(std.math.isPowerOfTwo(write_align));
    assert(limits.chunk_size_max % write_align == 0);
}

/// One write (`bytes` to chunk `chunk` at `offset`; none when empty) and the records whose
/// sums it computes, [first, end): those that start in it, and records of 0 bytes.
pub const Piece = struct {
    chunk: u32,
    offset: u64,
    bytes: []const u8,
    first: usize,
    end: usize,
};

/// Where record i's stored bytes go.
pub const Placed = struct { chunk: u32, offset: u64, bytes: []const u8 };

/// The pieces of a batch of `count` records; `batch.placed(i)` says where record i goes.
/// Every record belongs to exactly one piece's [first, end), in order; the caller frees the
/// result.
pub fn plan(allocator: Allocator, batch: anytype, count: usize) Allocator.Error![]Piece {
    var pieces: std.ArrayList(Piece) = .empty;
    errdefer pieces.deinit(allocator);
    for (0..count) |i| {
        const placed = batch.placed(i);
        if (placed.bytes.len == 0) {
            if (pieces.items.len == 0) try pieces.append(allocator, .{ .chunk = 0, .offset = 0, .bytes = &.{}, .first = i, .end = i });
            pieces.items[pieces.items.len - 1].end = i + 1;
            continue;
        }
        if (pieces.items.len > 0 and continues(pieces.items[pieces.items.len - 1], placed)) {
            const last = &pieces.items[pieces.items.len - 1];
            last.bytes.len += placed.bytes.len;
            last.end = i + 1;
        } else {
            try pieces.append(allocator, .{ .chunk = placed.chunk, .offset = placed.offset, .bytes = placed.bytes, .first = i, .end = i + 1 });
        }
        try splitLast(allocator, &pieces);
    }
    return pieces.toOwnedSlice(allocator);
}

/// Whether `placed` extends `last` in memory and in its chunk, within last's aligned range.
fn continues(last: Piece, placed: Placed) bool {
    const last_end = last.offset + last.bytes.len;
    return last.bytes.len > 0 and last.chunk == placed.chunk and last_end == placed.offset and
        last.bytes.ptr + last.bytes.len == placed.bytes.ptr and last_end % write_align != 0;
}

/// Cuts the last piece at each aligned boundary it crosses. The record that crossed started
/// before the first cut, so the pieces after the cuts compute no sums.
fn splitLast(allocator: Allocator, pieces: *std.ArrayList(Piece)) Allocator.Error!void {
    while (true) {
        const last = &pieces.items[pieces.items.len - 1];
        const cut = (last.offset / write_align + 1) * write_align;
        if (last.offset + last.bytes.len <= cut) return;
        const head: usize = @intCast(cut - last.offset);
        const tail: Piece = .{ .chunk = last.chunk, .offset = cut, .bytes = last.bytes[head..], .first = last.end, .end = last.end };
        last.bytes.len = head;
        try pieces.append(allocator, tail);
    }
}

// ---- tests -----------------------------------------------------------------------------------

const testing = std.testing;

const TestBatch = struct {
    memory: []const u8,
    /// Record i: memory[starts[i] ..][0..lengths[i]] to (chunks[i], offsets[i]).
    starts: []const usize,
    lengths: []const usize,
    chunks: []const u32,
    offsets: []const u64,

    fn placed(batch: TestBatch, i: usize) Placed {
        return .{ .chunk = batch.chunks[i], .offset = batch.offsets[i], .bytes = batch.memory[batch.starts[i]..][0..batch.lengths[i]] };
    }
};

test "write pieces: adjacent records share a write, cut at every aligned boundary" {
    const memory = try testing.allocator.alloc(u8, 3 * write_align);
    defer testing.allocator.free(memory);
    // Records of 1.5 MiB from offset 1 MiB of chunk 5: they end at 2.5, 4, 5.5 and 7 MiB.
    const size: usize = 3 * write_align / 4;
    const batch: TestBatch = .{
        .memory = memory,
        .starts = &.{ 0, size, 2 * size, 3 * size },
        .lengths = &.{ size, size, size, size },
        .chunks = &.{ 5, 5, 5, 5 },
        .offsets = &.{ write_align / 2, write_align / 2 + size, write_align / 2 + 2 * size, write_align / 2 + 3 * size },
    };
    const pieces = try plan(testing.allocator, batch, 4);
    defer testing.allocator.free(pieces);
    const expected = [_]struct { offset: u64, len: usize, first: usize, end: usize }{
        .{ .offset = write_align / 2, .len = write_align / 2, .first = 0, .end = 1 },
        .{ .offset = write_align, .len = write_align, .first = 1, .end = 2 },
        .{ .offset = 2 * write_align, .len = write_align, .first = 2, .end = 4 },
        .{ .offset = 3 * write_align, .len = write_align / 2, .first = 4, .end = 4 },
    };
    try testing.expectEqual(expected.len, pieces.len);
    var written: usize = 0;
    for (expected, pieces) |e, p| {
        try testing.expectEqual(e.offset, p.offset);
        try testing.expectEqual(e.len, p.bytes.len);
        try testing.expectEqual(e.first, p.first);
        try testing.expectEqual(e.end, p.end);
        // The pieces cover the batch's bytes in order.
        try testing.expectEqual(memory.ptr + written, p.bytes.ptr);
        written += p.bytes.len;
    }
    try testing.expectEqual(4 * size, written);
}

test "write pieces: records apart in memory or in the chunk, and empty ones" {
    var memory: [64]u8 = undefined;
    // 0: empty (first of all). 1, 2: adjacent. 3: a gap in memory. 4: empty. 5: another chunk.
    const batch: TestBatch = .{
        .memory = &memory,
        .starts = &.{ 0, 0, 8, 20, 28, 28 },
        .lengths = &.{ 0, 8, 8, 8, 0, 8 },
        .chunks = &.{ 0, 1, 1, 1, 0, 2 },
        .offsets = &.{ 0, 100, 108, 116, 0, 0 },
    };
    const pieces = try plan(testing.allocator, batch, 6);
    defer testing.allocator.free(pieces);
    const expected = [_]struct { chunk: u32, len: usize, first: usize, end: usize }{
        .{ .chunk = 0, .len = 0, .first = 0, .end = 1 },
        .{ .chunk = 1, .len = 16, .first = 1, .end = 3 },
        .{ .chunk = 1, .len = 8, .first = 3, .end = 5 },
        .{ .chunk = 2, .len = 8, .first = 5, .end = 6 },
    };
    try testing.expectEqual(expected.len, pieces.len);
    for (expected, pieces) |e, p| {
        try testing.expectEqual(e.chunk, p.chunk);
        try testing.expectEqual(e.len, p.bytes.len);
        try testing.expectEqual(e.first, p.first);
        try testing.expectEqual(e.end, p.end);
    }
}
