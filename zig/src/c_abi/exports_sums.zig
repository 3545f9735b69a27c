//! lx_record_sums: the record checksums of records a caller fetched itself, checked against
//! their codec bytes and the buffer's bounds before any sum is written.
const status = @import("../base/status.zig");
const Status = status.Status;
const invalid = @import("exports_status.zig").invalid;
const store_limits = @import("../base/limits.zig");
const format = @import("../files/format.zig");
const checksum = @import("../codec/checksum.zig");

/// The record checksum (`sums.zr`'s value) of `count` stored records lying in `buffer`: record i
/// is `stored_lengths[i]` bytes at `starts[i]`, with its logical length and codec byte. Lets a
/// caller verify records it fetched itself (a remote cache) before any reader sees them.
export fn lx_record_sums(
    buffer: ?[*]const u8,
    buffer_len: u64,
    starts: ?[*]const u64,
    stored_lengths: ?[*]const u32,
    logic_lengths: ?[*]const u32,
    codecs: ?[*]const u8,
    count: u64,
    out_sums: ?[*]u32,
) callconv(.c) Status {
    if (count == 0) {
        status.clearMessage();
        return .ok;
    }
    if (count > store_limits.record_count_max)
        return invalid("lx_record_sums: count {d} exceeds {d}", .{ count, store_limits.record_count_max });
    const bytes = buffer orelse return invalid("lx_record_sums: buffer is NULL", .{});
    const first = starts orelse return invalid("lx_record_sums: starts is NULL", .{});
    const stored = stored_lengths orelse return invalid("lx_record_sums: stored_lengths is NULL", .{});
    const logic = logic_lengths orelse return invalid("lx_record_sums: logic_lengths is NULL", .{});
    const codec_bytes = codecs orelse return invalid("lx_record_sums: codecs is NULL", .{});
    const out = out_sums orelse return invalid("lx_record_sums: out_sums is NULL", .{});
    const n: usize = @intCast(count);
    // Every argument is checked before the first sum is written, so a refused call leaves out_sums as it was.
    for (0..n) |i| {
        const codec: format.Codec = @fromBackingInt(@intCast(codec_bytes[i]));
        if (!codec.isKnown()) return invalid("lx_record_sums: record {d} has unknown codec {d}", .{ i, codec_bytes[i] });
        if (first[i] > buffer_len or stored[i] > buffer_len - first[i])
            return invalid("lx_record_sums: record {d} ({d} bytes at {d}) ends past the buffer's {d} bytes", .{ i, stored[i], first[i], buffer_len });
    }
    for (0..n) |i| {
        const start: usize = @intCast(first[i]);
        const piece = bytes[start .. start + stored[i]];
        out[i] = checksum.recordSum(piece, logic[i], @fromBackingInt(@intCast(codec_bytes[i])));
    }
    status.clearMessage();
    return .ok;
}
