//! A ragged gather's offsets from its records' lengths, and the row offsets of a packed batch
//! (cu_seqlens: what variable-length attention kernels take), for lx_store_record_offsets and
//! lx_view_record_offsets. One pass, so that a loader sizes a batch in one call.
const std = @import("std");
const assert = std.debug.assert;
const diagnostic = @import("../base/diagnostic.zig");
const errors = @import("../base/errors.zig");
const Error = errors.Error;

/// Row offsets are int32: the most rows a batch may hold.
pub const rows_max: u64 = std.math.maxInt(i32);

/// offsets[1..] holds the records' lengths on entry; on return offsets[i] is the sum of the
/// first i lengths (offsets[0] = 0) and, with `rows`, rows[i] = offsets[i] / row_size. A length
/// that is not whole rows is error.Corrupt naming its position (the caller knows the record);
/// more rows than int32 counts is error.InvalidArgument. `rows` is written only on success.
pub fn accumulate(offsets: []u64, row_size: u64, rows: ?[]i32) Error!void {
    assert(offsets.len >= 1);
    assert(rows == null or row_size > 0);
    const size: RowSize = .of(if (rows == null) 1 else row_size);
    offsets[0] = 0;
    for (1..offsets.len) |i| {
        const length = offsets[i];
        if (rows != null and !size.whole(length)) {
            diagnostic.note("corrupt store: the record at position {d} is {d} bytes, not a whole number of {d}-byte rows", .{ i - 1, length, row_size });
            return error.Corrupt;
        }
        offsets[i] = std.math.add(u64, offsets[i - 1], length) catch {
            diagnostic.note("the records' lengths add up past 2^64 bytes", .{});
            return error.InvalidArgument;
        };
    }
    const out = rows orelse return;
    assert(out.len == offsets.len);
    const total = size.rows(offsets[offsets.len - 1]);
    if (total > rows_max) {
        diagnostic.note("the records hold {d} rows, more than int32 row offsets count ({d})", .{ total, rows_max });
        return error.InvalidArgument;
    }
    for (offsets, out) |offset, *row| row.* = @intCast(size.rows(offset));
}

/// A row size, and its log2 when it is a power of two. Rows are usually a scalar's bytes (an
/// int32 token is 4): a mask and a shift then replace the two 64-bit divisions a record cost.
/// On the EPYC VM a packed gather of 256 records of 4 to 252 bytes (one thread, in the caches)
/// took 13.8 us instead of 17.3 to 18.5 once they were gone.
const RowSize = struct {
    bytes: u64,
    shift: ?u6,

    fn of(bytes: u64) RowSize {
        assert(bytes > 0);
        return .{ .bytes = bytes, .shift = if (std.math.isPowerOfTwo(bytes)) @intCast(@ctz(bytes)) else null };
    }

    fn whole(size: RowSize, length: u64) bool {
        return if (size.shift != null) length & (size.bytes - 1) == 0 else length % size.bytes == 0;
    }

    fn rows(size: RowSize, length: u64) u64 {
        return if (size.shift) |shift| length >> shift else length / size.bytes;
    }
};

// ---- tests -----------------------------------------------------------------------------------

const testing = std.testing;

test "offsets are the running sums of the lengths, rows the offsets in rows" {
    var offsets = [_]u64{ 99, 8, 0, 4, 12 };
    var rows: [5]i32 = @splat(-1);
    try accumulate(&offsets, 4, &rows);
    try testing.expectEqualSlices(u64, &.{ 0, 8, 8, 12, 24 }, &offsets);
    try testing.expectEqualSlices(i32, &.{ 0, 2, 2, 3, 6 }, &rows);
    var alone = [_]u64{7};
    try accumulate(&alone, 1, null);
    try testing.expectEqualSlices(u64, &.{0}, &alone);
}

test "a length that is not whole rows is corrupt, and rows past int32 are refused, rows untouched" {
    var offsets = [_]u64{ 0, 8, 6 };
    var rows: [3]i32 = @splat(-1);
    try testing.expectError(error.Corrupt, accumulate(&offsets, 4, &rows));
    try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "position 1 is 6 bytes") != null);
    try testing.expectEqualSlices(i32, &.{ -1, -1, -1 }, &rows);
    // Without rows the lengths are only summed (no row size to check against).
    var plain = [_]u64{ 0, 8, 6 };
    try accumulate(&plain, 0, null);
    try testing.expectEqualSlices(u64, &.{ 0, 8, 14 }, &plain);
    var many = [_]u64{ 0, rows_max, 1 };
    try testing.expectError(error.InvalidArgument, accumulate(&many, 1, &rows));
    try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "int32") != null);
    try testing.expectEqualSlices(i32, &.{ -1, -1, -1 }, &rows);
    var exact = [_]u64{ 0, rows_max - 1, 1 };
    try accumulate(&exact, 1, &rows);
    try testing.expectEqual(@as(i32, std.math.maxInt(i32)), rows[2]);
    var past = [_]u64{ 0, std.math.maxInt(u64), 1 };
    try testing.expectError(error.InvalidArgument, accumulate(&past, 0, null));
}

test "row sizes that are not a power of two divide, and agree with the shifts where both apply" {
    var offsets = [_]u64{ 0, 12, 0, 36, 24 };
    var rows: [5]i32 = @splat(-1);
    try accumulate(&offsets, 12, &rows);
    try testing.expectEqualSlices(u64, &.{ 0, 12, 12, 48, 72 }, &offsets);
    try testing.expectEqualSlices(i32, &.{ 0, 1, 1, 4, 6 }, &rows);
    var torn = [_]u64{ 0, 12, 18 };
    try testing.expectError(error.Corrupt, accumulate(&torn, 12, &rows));
    try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "position 1 is 18 bytes, not a whole number of 12-byte rows") != null);
    var prng = std.Random.DefaultPrng.init(7);
    const random = prng.random();
    for ([_]u64{ 1, 2, 4, 8, 16, 1 << 20 }) |bytes| {
        const size: RowSize = .of(bytes);
        try testing.expect(size.shift != null);
        for (0..1000) |_| {
            const length = random.int(u64);
            try testing.expectEqual(length % bytes == 0, size.whole(length));
            try testing.expectEqual(length / bytes, size.rows(length));
        }
    }
    for ([_]u64{ 3, 6, 12, 1000 }) |bytes| try testing.expect(RowSize.of(bytes).shift == null);
}
