//! Checks a caller's record indices against a store's length, with the message that names the
//! first bad one (gather, record_lengths, delete).
const std = @import("std");
const assert = std.debug.assert;
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const Error = errors.Error;

/// Copies `indices` into `copy`, reading each once, and checks the copies against `length`
/// (as checkIndices, whose message names the first bad one). One pass with no early exit, so
/// that it vectorises: as fast as the check alone.
pub fn copyCheckedIndices(indices: []const i64, copy: []i64, length: u64) Error!void {
    assert(copy.len == indices.len);
    assert(length <= std.math.maxInt(i64));
    var out_of_range = false;
    for (indices, copy) |index, *slot| {
        slot.* = index;
        // A negative index reads as a u64 far above any length.
        out_of_range = out_of_range or @as(u64, @bitCast(index)) >= length;
    }
    if (out_of_range) return checkIndices(copy, length);
}

pub fn checkIndices(indices: []const i64, length: u64) Error!void {
    for (indices, 0..) |index, i| {
        if (index < 0 or @as(u64, @intCast(index)) >= length) return indexOutOfRange(index, i, length);
    }
}

pub fn indexOutOfRange(index: i64, position: usize, length: u64) Error {
    diagnostic.note("index {d} (position {d}) is out of range for a store of {d} records", .{ index, position, length });
    return error.IndexOutOfRange;
}
