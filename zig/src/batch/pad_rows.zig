//! Padding a packed ragged batch: each record's rows copied to the start of its own block of
//! `length` rows, one padding row repeated after them, and the (count, length) mask of the
//! record rows. What a mixture's padded stream (loaderx._loading.ragged_batch) makes of its
//! packed gathers, for lx_batch_pad (a padded gather, padded.zig, fills its rows with the
//! Filler here); the export validates every argument, this file asserts.
const std = @import("std");
const assert = std.debug.assert;
const pool = @import("../os/pool.zig");

/// A packed batch: record i is rows cu[i]..cu[i + 1] of `values`, rows of `row_size` bytes.
pub const Packed = struct {
    values: []const u8,
    /// count + 1 row offsets (cu_seqlens): not negative, never decreasing, within values.
    cu: []const i32,
    row_size: usize,

    pub fn count(batch: Packed) usize {
        assert(batch.cu.len >= 1);
        return batch.cu.len - 1;
    }
};

/// Why a batch's row offsets cannot be used (checkOffsets says at which entry).
pub const OffsetsError = error{
    /// The first offset is below 0.
    OffsetNegative,
    /// An offset is smaller than the one before it.
    OffsetsDecrease,
    /// The last offset is past the rows the values hold.
    OffsetPastValues,
};

/// Whether `cu` can address values of `row_count` rows; on an error `position.*` is the
/// entry at fault. One pass: the offsets never decrease, so only the last can be past the end.
pub fn checkOffsets(cu: []const i32, row_count: u64, position: *usize) OffsetsError!void {
    assert(cu.len >= 1);
    if (cu[0] < 0) {
        position.* = 0;
        return error.OffsetNegative;
    }
    for (cu[1..], cu[0 .. cu.len - 1], 1..) |later, earlier, i| {
        if (later < earlier) {
            position.* = i;
            return error.OffsetsDecrease;
        }
    }
    if (@as(u64, @intCast(cu[cu.len - 1])) > row_count) {
        position.* = cu.len - 1;
        return error.OffsetPastValues;
    }
}

/// Record i into out's rows [i * length, i * length + min(n_i, length)) (its first rows when
/// longer), `pad_row` into the rest of its block, and mask[i * length + j] = 1 for a record
/// row, 0 for a padding row. out holds count * length rows, mask count * length bytes. A batch
/// of more than runner_bytes_min bytes may be split between the caller and the pool's
/// helpers, as `advisor` learns is faster (and lx_pool_set_policy allows).
pub fn pad(batch: Packed, pad_row: []const u8, length: usize, out: []u8, mask: []u8) void {
    const count = batch.count();
    assert(batch.row_size > 0);
    assert(pad_row.len == batch.row_size);
    assert(mask.len == count * length);
    assert(out.len == mask.len * batch.row_size);
    var task: PadTask = .{ .batch = batch, .filler = .init(pad_row), .length = length, .out = out, .mask = mask };
    const batch_plan = pool.plan(count, out.len, runner_bytes_min);
    if (batch_plan.runner_count <= 1) return task.padRecords(0, count);
    _ = pool.runAdvised(PadTask, &task, count, batch_plan, out.len, &advisor, false);
}

/// Whether padded batches run faster with the pool's helpers, learned process-wide from their
/// timings (lock-free atomics, pool_advice.zig): a padded batch is bound by memory, which a
/// helper adds to when the destination is not in the caches, and only costs it when it is.
var advisor: pool.Advisor = .{};

/// Bytes of padded batch a runner takes at least (below that, waking a helper costs more
/// than it saves).
pub const runner_bytes_min: u64 = 256 * 1024;

const PadTask = struct {
    batch: Packed,
    filler: Filler,
    length: usize,
    out: []u8,
    mask: []u8,

    pub fn runShard(task: *PadTask, blocks: *pool.Blocks) void {
        while (blocks.next()) |range| task.padRecords(range.begin, range.end);
    }

    /// pad() of records begin..end.
    fn padRecords(task: *const PadTask, begin: usize, end: usize) void {
        const row_size = task.batch.row_size;
        const cu = task.batch.cu;
        const length = task.length;
        const block_size = length * row_size;
        for (begin..end) |i| {
            assert(cu[i] >= 0 and cu[i] <= cu[i + 1]);
            const first: usize = @intCast(cu[i]);
            const last: usize = @intCast(cu[i + 1]);
            assert(last * row_size <= task.batch.values.len);
            const kept = @min(last - first, length);
            const block = task.out[i * block_size ..][0..block_size];
            const kept_size = kept * row_size;
            @memcpy(block[0..kept_size], task.batch.values[first * row_size ..][0..kept_size]);
            task.filler.fill(block[kept_size..]);
            const flags = task.mask[i * length ..][0..length];
            @memset(flags[0..kept], 1);
            @memset(flags[kept..], 0);
        }
    }
};

/// Bytes of the padding rows repeated, copied in one piece per fill.
const pattern_size_max = 4096;

/// Writes whole padding rows fast: by memset when every byte of the row is the same (zeros,
/// the common case), else by copies of up to pattern_size_max bytes of repeated rows, else
/// (rows larger than that) row by row.
pub const Filler = struct {
    row: []const u8,
    byte: ?u8,
    pattern: [pattern_size_max]u8,
    pattern_size: usize,

    pub fn init(row: []const u8) Filler {
        assert(row.len > 0);
        var filler: Filler = .{ .row = row, .byte = row[0], .pattern = undefined, .pattern_size = 0 };
        for (row[1..]) |byte| {
            if (byte != row[0]) filler.byte = null;
        }
        if (filler.byte == null and row.len <= pattern_size_max) {
            const rows = pattern_size_max / row.len;
            for (0..rows) |k| @memcpy(filler.pattern[k * row.len ..][0..row.len], row);
            filler.pattern_size = rows * row.len;
        }
        return filler;
    }

    /// Padding rows over all of `target`, a whole number of rows.
    pub fn fill(filler: *const Filler, target: []u8) void {
        assert(target.len % filler.row.len == 0);
        if (filler.byte) |byte| return @memset(target, byte);
        if (filler.pattern_size == 0) {
            var rest = target;
            while (rest.len > 0) : (rest = rest[filler.row.len..]) @memcpy(rest[0..filler.row.len], filler.row);
            return;
        }
        var rest = target;
        while (rest.len > filler.pattern_size) : (rest = rest[filler.pattern_size..])
            @memcpy(rest[0..filler.pattern_size], filler.pattern[0..filler.pattern_size]);
        @memcpy(rest, filler.pattern[0..rest.len]);
    }
};

// ---- tests -----------------------------------------------------------------------------------

const testing = std.testing;

/// pad written the obvious way, row by row, for comparison.
fn padReference(batch: Packed, pad_row: []const u8, length: usize, out: []u8, mask: []u8) void {
    const row_size = batch.row_size;
    for (0..batch.count()) |i| {
        const start: usize = @intCast(batch.cu[i]);
        const end: usize = @intCast(batch.cu[i + 1]);
        for (0..length) |j| {
            const target = out[(i * length + j) * row_size ..][0..row_size];
            const record_row = j < end - start;
            mask[i * length + j] = @intFromBool(record_row);
            if (record_row) {
                @memcpy(target, batch.values[(start + j) * row_size ..][0..row_size]);
            } else {
                @memcpy(target, pad_row);
            }
        }
    }
}

test "records land at the start of their blocks, padding and mask after them, long ones cut" {
    // Rows of 2 bytes: records of 2, 0, 4 and 1 rows padded to 3 rows.
    const values = [_]u8{ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14 };
    const cu = [_]i32{ 0, 2, 2, 6, 7 };
    var out: [4 * 3 * 2]u8 = @splat(0xAA);
    var mask: [4 * 3]u8 = @splat(0xAA);
    pad(.{ .values = &values, .cu = &cu, .row_size = 2 }, &.{ 0xF0, 0x0F }, 3, &out, &mask);
    try testing.expectEqualSlices(u8, &.{
        1,    2,    3,    4,    0xF0, 0x0F,
        0xF0, 0x0F, 0xF0, 0x0F, 0xF0, 0x0F,
        5,    6,    7,    8,    9,    10,
        13,   14,   0xF0, 0x0F, 0xF0, 0x0F,
    }, &out);
    try testing.expectEqualSlices(u8, &.{ 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0 }, &mask);
}

test "offsets may start past 0 and leave rows unused; no records or no length write nothing" {
    const values = [_]u8{ 9, 9, 1, 2, 3, 9 };
    const cu = [_]i32{ 2, 3, 5 };
    var out: [2 * 2]u8 = undefined;
    var mask: [2 * 2]u8 = undefined;
    pad(.{ .values = &values, .cu = &cu, .row_size = 1 }, &.{0}, 2, &out, &mask);
    try testing.expectEqualSlices(u8, &.{ 1, 0, 2, 3 }, &out);
    try testing.expectEqualSlices(u8, &.{ 1, 0, 1, 1 }, &mask);
    pad(.{ .values = &.{}, .cu = &.{0}, .row_size = 4 }, &.{ 1, 2, 3, 4 }, 5, &.{}, &.{});
    pad(.{ .values = &values, .cu = &cu, .row_size = 1 }, &.{7}, 0, &.{}, &.{});
}

test "pad agrees with the row-by-row reference for every kind of padding row and length" {
    var prng: std.Random.DefaultPrng = .init(0x9AD5);
    const random = prng.random();
    var values: [12_000]u8 = undefined;
    random.bytes(&values);
    var out: [40_000]u8 = undefined;
    var expected: [40_000]u8 = undefined;
    var mask: [400]u8 = undefined;
    var expected_mask: [400]u8 = undefined;
    var pad_row_bytes: [5000]u8 = undefined;
    // Rows of one byte, of a power of two, odd ones, and ones larger than the fill pattern.
    for ([_]usize{ 1, 2, 3, 4, 8, 12, 4095, 4097, 5000 }) |row_size| {
        for (0..40) |round| {
            const count = random.uintAtMost(usize, 6);
            const length = random.uintAtMost(usize, @min(40_000 / row_size, mask.len) / @max(count, 1));
            var cu: [7]i32 = undefined;
            cu[0] = @intCast(random.uintAtMost(usize, 2));
            const rows_available = values.len / row_size;
            for (1..count + 1) |i| {
                const room = rows_available - @as(usize, @intCast(cu[i - 1]));
                const rows = random.uintAtMost(usize, @min(room / count, length + 2));
                cu[i] = cu[i - 1] + @as(i32, @intCast(rows));
            }
            // Zeros (memset), one repeated byte, and a row of distinct bytes (the pattern).
            const pad_row = pad_row_bytes[0..row_size];
            switch (round % 3) {
                0 => @memset(pad_row, 0),
                1 => @memset(pad_row, 0x7F),
                else => random.bytes(pad_row),
            }
            const batch: Packed = .{ .values = &values, .cu = cu[0 .. count + 1], .row_size = row_size };
            const cells = count * length;
            @memset(&out, 0xEE);
            @memset(&mask, 0xEE);
            pad(batch, pad_row, length, out[0 .. cells * row_size], mask[0..cells]);
            padReference(batch, pad_row, length, expected[0 .. cells * row_size], expected_mask[0..cells]);
            try testing.expectEqualSlices(u8, expected[0 .. cells * row_size], out[0 .. cells * row_size]);
            try testing.expectEqualSlices(u8, expected_mask[0..cells], mask[0..cells]);
            // Nothing past the batch is written.
            for (out[cells * row_size ..]) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
            for (mask[cells..]) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
        }
    }
}

test "a batch large enough for the pool's helpers lands as the reference says, under every pool policy" {
    const allocator = testing.allocator;
    const count = 64;
    const length = 2048;
    const row_size = 4;
    var prng: std.Random.DefaultPrng = .init(0x900D);
    const random = prng.random();
    var cu: [count + 1]i32 = undefined;
    cu[0] = 0;
    for (1..count + 1) |i| cu[i] = cu[i - 1] + @as(i32, @intCast(random.uintAtMost(usize, 2 * length)));
    const values = try allocator.alloc(u8, @as(usize, @intCast(cu[count])) * row_size);
    defer allocator.free(values);
    random.bytes(values);
    const cells = count * length;
    const out = try allocator.alloc(u8, cells * row_size);
    defer allocator.free(out);
    const mask = try allocator.alloc(u8, cells);
    defer allocator.free(mask);
    const expected = try allocator.alloc(u8, cells * row_size);
    defer allocator.free(expected);
    const expected_mask = try allocator.alloc(u8, cells);
    defer allocator.free(expected_mask);
    const batch: Packed = .{ .values = values, .cu = &cu, .row_size = row_size };
    const pad_row = [_]u8{ 1, 2, 3, 4 };
    try testing.expect(pool.plan(count, cells * row_size, runner_bytes_min).runner_count == @min(pool.cpus(), 2));
    padReference(batch, &pad_row, length, expected, expected_mask);
    const policy_before = pool.policy.load(.monotonic);
    defer pool.policy.store(policy_before, .monotonic);
    for ([_]pool.Policy{ .always, .never, .auto, .auto, .auto, .auto, .auto, .auto, .auto, .auto, .auto }) |policy| {
        pool.policy.store(policy, .monotonic);
        @memset(out, 0xEE);
        @memset(mask, 0xEE);
        pad(batch, &pad_row, length, out, mask);
        try testing.expectEqualSlices(u8, expected, out);
        try testing.expectEqualSlices(u8, expected_mask, mask);
    }
}

test "checkOffsets names the first entry that is negative, decreasing or past the values" {
    var position: usize = 99;
    try checkOffsets(&.{ 0, 2, 2, 5 }, 5, &position);
    try checkOffsets(&.{3}, 3, &position);
    try checkOffsets(&.{0}, 0, &position);
    try testing.expectEqual(@as(usize, 99), position);
    try testing.expectError(error.OffsetNegative, checkOffsets(&.{ -1, 2 }, 5, &position));
    try testing.expectEqual(@as(usize, 0), position);
    try testing.expectError(error.OffsetsDecrease, checkOffsets(&.{ 0, 4, 3, 5 }, 5, &position));
    try testing.expectEqual(@as(usize, 2), position);
    try testing.expectError(error.OffsetPastValues, checkOffsets(&.{ 0, 2, 6 }, 5, &position));
    try testing.expectEqual(@as(usize, 2), position);
    try testing.expectError(error.OffsetPastValues, checkOffsets(&.{1}, 0, &position));
    try testing.expectEqual(@as(usize, 0), position);
    // The largest int32 offset against the most rows.
    try checkOffsets(&.{ 0, std.math.maxInt(i32) }, std.math.maxInt(i32), &position);
}
