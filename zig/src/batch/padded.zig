//! A padded gather's destination (lx_store_gather_padded, lx_view_gather_padded): record i's
//! first min(n_i, length) rows at the start of its own block of `length` rows of `out`, the
//! padding row after them, and the (count, length) mask of the record rows. A store or a view
//! sizes the batch under its locks (layOut: each record's rows, the length picked from them),
//! then copies each record straight into its block (the raw copy and gatherRecord see slot i
//! as the block's first min(n_i, length) rows) and finishes each range of records with their
//! padding and mask (finish), on the runner that copied them.
const std = @import("std");
const assert = std.debug.assert;
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const pad_rows = @import("pad_rows.zig");
const Error = errors.Error;

/// What a caller asks of a padded gather (the export checked every field).
pub const Request = struct {
    /// Bytes of one row: every record is a whole number of them.
    row_size: u64,
    /// row_size bytes, repeated after each record.
    pad_row: []const u8,
    /// The lengths (in rows) a batch may be padded to, increasing, each at least 1: the
    /// smallest that holds the batch's longest record. Empty: the longest record's length.
    lengths: []const u64,
    /// When no length holds the longest record: pad to the last length, keeping each
    /// record's first rows (else the gather is refused).
    truncate: bool,
    /// The caller's buffers, of any size; a batch they cannot hold is refused unwritten.
    out: []u8,
    mask: []u8,
};

/// The length a batch whose longest record has `longest` rows is padded to, or null when no
/// allowed length holds it and truncation was not asked for.
pub fn pickLength(longest: u64, lengths: []const u64, truncate: bool) ?u64 {
    if (lengths.len == 0) return longest;
    for (lengths) |length| {
        if (longest <= length) return length;
    }
    return if (truncate) lengths[lengths.len - 1] else null;
}

/// On entry rows[i] is record i's logical length in bytes; on return its length in rows, and
/// `length_out` the padded length. Refuses, before any byte of out or mask is written: a record
/// that is not whole rows (error.Corrupt, naming its position), a record longer than every
/// allowed length without truncation (error.SizeMismatch, `length_out` = the longest record's
/// rows, past the last length), and out or mask too small for the batch (error.SizeMismatch,
/// `length_out` = the length it needs).
pub fn layOut(rows: []u64, request: Request, length_out: *u64) Error!Padded {
    const row_size = request.row_size;
    assert(row_size > 0 and request.pad_row.len == row_size);
    var longest: u64 = 0;
    for (rows, 0..) |*size, i| {
        if (size.* % row_size != 0) {
            diagnostic.note("corrupt store: the record at position {d} is {d} bytes, not a whole number of {d}-byte rows", .{ i, size.*, row_size });
            return error.Corrupt;
        }
        size.* /= row_size;
        longest = @max(longest, size.*);
    }
    const length = pickLength(longest, request.lengths, request.truncate) orelse {
        length_out.* = longest;
        diagnostic.note("a record of this batch has {d} rows, more than the longest padded length {d}", .{ longest, request.lengths[request.lengths.len - 1] });
        return error.SizeMismatch;
    };
    length_out.* = length;
    const cells = std.math.mul(u64, rows.len, length) catch return overflows(rows.len, length, row_size);
    const out_size = std.math.mul(u64, cells, row_size) catch return overflows(rows.len, length, row_size);
    if (out_size > request.out.len or cells > request.mask.len) {
        diagnostic.note("out holds {d} bytes and mask {d}; {d} records padded to {d} rows need {d} and {d}", .{ request.out.len, request.mask.len, rows.len, length, out_size, cells });
        return error.SizeMismatch;
    }
    return .{
        .out = request.out.ptr,
        .mask = request.mask.ptr,
        .rows = rows.ptr,
        .length = length,
        .row_size = row_size,
        .filler = .init(request.pad_row),
    };
}

fn overflows(count: u64, length: u64, row_size: u64) Error {
    diagnostic.note("{d} records padded to {d} rows of {d} bytes overflow", .{ count, length, row_size });
    return error.InvalidArgument;
}

/// A padded batch laid out (layOut): where each record goes, and its padding.
pub const Padded = struct {
    out: [*]u8,
    mask: [*]u8,
    /// Each record's length in rows (the caller's buffer, written by layOut).
    rows: [*]const u64,
    /// Rows of each record's block.
    length: u64,
    row_size: u64,
    filler: pad_rows.Filler,

    /// Where record i's block starts in out.
    pub fn slotStart(padded: *const Padded, i: usize) u64 {
        return i * padded.length * padded.row_size;
    }

    /// The bytes of record i that go to its block: all of it, or its first `length` rows.
    pub fn slotLength(padded: *const Padded, i: usize) u64 {
        return @min(padded.rows[i], padded.length) * padded.row_size;
    }

    /// Slots are apart: each is followed by its block's padding (raw_copy streams each by
    /// itself).
    pub inline fn backToBack(_: *const Padded) bool {
        return false;
    }

    /// The padding and the mask of records begin..end, whose kept rows are copied (or being
    /// copied: the bytes written here are not theirs).
    pub fn finish(padded: *const Padded, begin: usize, end: usize) void {
        const length: usize = @intCast(padded.length);
        const block_size: usize = @intCast(padded.length * padded.row_size);
        for (begin..end) |i| {
            const kept: usize = @intCast(@min(padded.rows[i], padded.length));
            const block = padded.out[i * block_size ..][0..block_size];
            padded.filler.fill(block[kept * padded.row_size ..]);
            const flags = padded.mask[i * length ..][0..length];
            @memset(flags[0..kept], 1);
            @memset(flags[kept..], 0);
        }
    }
};

/// A runner's buffer for the records it must truncate and cannot copy a prefix of directly
/// (compressed ones are decompressed whole, then their first rows copied): grown to the
/// largest such record, freed when the runner is done.
pub const Scratch = struct {
    allocator: std.mem.Allocator,
    bytes: []u8 = &.{},

    /// size bytes, or null when memory runs out.
    pub fn take(scratch: *Scratch, size: usize) ?[]u8 {
        if (scratch.bytes.len < size) {
            scratch.allocator.free(scratch.bytes);
            scratch.bytes = &.{};
            scratch.bytes = scratch.allocator.alloc(u8, size) catch return null;
        }
        return scratch.bytes[0..size];
    }

    pub fn deinit(scratch: *Scratch) void {
        scratch.allocator.free(scratch.bytes);
        scratch.bytes = &.{};
    }
};

// ---- tests -----------------------------------------------------------------------------------

const testing = std.testing;

test "the length is the smallest allowed one that holds the longest record, or the last when truncating" {
    try testing.expectEqual(@as(?u64, 7), pickLength(7, &.{}, false));
    try testing.expectEqual(@as(?u64, 0), pickLength(0, &.{}, false));
    try testing.expectEqual(@as(?u64, 4), pickLength(3, &.{ 4, 8 }, false));
    try testing.expectEqual(@as(?u64, 4), pickLength(4, &.{ 4, 8 }, false));
    try testing.expectEqual(@as(?u64, 8), pickLength(5, &.{ 4, 8 }, false));
    try testing.expectEqual(@as(?u64, null), pickLength(9, &.{ 4, 8 }, false));
    try testing.expectEqual(@as(?u64, 8), pickLength(9, &.{ 4, 8 }, true));
    try testing.expectEqual(@as(?u64, 4), pickLength(0, &.{4}, true));
}

test "layOut turns bytes into rows, refuses odd records, long ones and small buffers, then finishes blocks" {
    var out: [3 * 4 * 2]u8 = @splat(0xEE);
    var mask: [3 * 4]u8 = @splat(0xEE);
    const request: Request = .{ .row_size = 2, .pad_row = &.{ 7, 9 }, .lengths = &.{ 2, 4 }, .truncate = false, .out = &out, .mask = &mask };
    var length: u64 = 0;
    var odd = [_]u64{ 2, 3 };
    try testing.expectError(error.Corrupt, layOut(&odd, request, &length));
    try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "position 1 is 3 bytes") != null);
    var long = [_]u64{ 2, 10 };
    try testing.expectError(error.SizeMismatch, layOut(&long, request, &length));
    try testing.expectEqual(@as(u64, 5), length);
    var small = [_]u64{ 2, 6, 0, 8 };
    try testing.expectError(error.SizeMismatch, layOut(&small, request, &length));
    try testing.expectEqual(@as(u64, 4), length);
    var truncated = request;
    truncated.lengths = &.{2};
    truncated.truncate = true;
    var rows = [_]u64{ 2, 6, 0 };
    const padded = try layOut(&rows, truncated, &length);
    try testing.expectEqual(@as(u64, 2), length);
    try testing.expectEqualSlices(u64, &.{ 1, 3, 0 }, &rows);
    try testing.expectEqual(@as(u64, 2), padded.slotLength(0));
    try testing.expectEqual(@as(u64, 4), padded.slotLength(1));
    try testing.expectEqual(@as(u64, 0), padded.slotLength(2));
    try testing.expectEqual(@as(u64, 8), padded.slotStart(2));
    // Nothing was written so far; finish writes padding and mask only.
    for (out ++ mask) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    padded.finish(0, 3);
    try testing.expectEqualSlices(u8, &.{ 0xEE, 0xEE, 7, 9, 0xEE, 0xEE, 0xEE, 0xEE, 7, 9, 7, 9 }, out[0..12]);
    try testing.expectEqualSlices(u8, &.{ 1, 0, 1, 1, 0, 0 }, mask[0..6]);
    for (out[12..] ++ mask[6..]) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
}

test "a scratch grows to the largest size asked and is freed" {
    var scratch: Scratch = .{ .allocator = testing.allocator };
    defer scratch.deinit();
    try testing.expectEqual(@as(usize, 10), scratch.take(10).?.len);
    try testing.expectEqual(@as(usize, 4), scratch.take(4).?.len);
    try testing.expectEqual(@as(usize, 100), scratch.take(100).?.len);
}
