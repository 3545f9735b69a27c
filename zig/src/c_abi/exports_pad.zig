//! lx_batch_pad: a packed ragged batch padded to a length of rows, with its mask (batch/pad_rows.zig),
//! after every argument is checked; a refused call writes nothing.
const std = @import("std");
const status = @import("../base/status.zig");
const Status = status.Status;
const invalid = @import("exports_status.zig").invalid;
const countOverflows = @import("handles.zig").countOverflows;
const pad_rows = @import("../batch/pad_rows.zig");

/// Record i (rows cu_seqlens[i]..cu_seqlens[i + 1] of `values`, rows of row_size bytes) into
/// out's rows [i * length, (i + 1) * length): its first min(n_i, length) rows, then `pad_row`
/// (row_size bytes) repeated; mask[i * length + j] is 1 for a record row and 0 for padding.
export fn lx_batch_pad(
    values: ?[*]const u8,
    values_size: u64,
    cu_seqlens: ?[*]const i32,
    count: u64,
    row_size: u64,
    pad_row: ?[*]const u8,
    length: u64,
    out: ?[*]u8,
    out_capacity: u64,
    mask: ?[*]u8,
    mask_capacity: u64,
) callconv(.c) Status {
    const function = "lx_batch_pad";
    if (row_size == 0) return invalid(function ++ ": row_size is 0", .{});
    const row = pad_row orelse return invalid(function ++ ": pad_row is NULL", .{});
    const cu = cu_seqlens orelse return invalid(function ++ ": cu_seqlens is NULL", .{});
    if (countOverflows(count, @sizeOf(i32), 1)) return invalid(function ++ ": count {d} overflows the address space", .{count});
    const cells = std.math.mul(u64, count, length) catch
        return invalid(function ++ ": count {d} * length {d} overflows", .{ count, length });
    const out_size = std.math.mul(u64, cells, row_size) catch
        return invalid(function ++ ": count {d} * length {d} * row_size {d} overflows", .{ count, length, row_size });
    if (out_size > std.math.maxInt(usize) or row_size > std.math.maxInt(usize))
        return invalid(function ++ ": the padded batch's {d} bytes overflow the address space", .{out_size});
    if (out_capacity < out_size) return invalid(function ++ ": out holds {d} bytes, the padded batch needs {d}", .{ out_capacity, out_size });
    if (mask_capacity < cells) return invalid(function ++ ": mask holds {d} bytes, the padded batch needs {d}", .{ mask_capacity, cells });
    if (out == null and out_size > 0) return invalid(function ++ ": out is NULL", .{});
    if (mask == null and cells > 0) return invalid(function ++ ": mask is NULL", .{});
    if (values == null and values_size > 0) return invalid(function ++ ": values is NULL", .{});
    const cu_size = (count + 1) * @sizeOf(i32);
    const writes = [_]Span{ .of(out, out_size), .of(mask, cells) };
    const reads = [_]Span{ .of(values, values_size), .of(cu_seqlens, cu_size), .of(pad_row, row_size) };
    for (writes ++ reads) |span| {
        if (span.runsPast()) return invalid(function ++ ": a buffer runs past the address space", .{});
    }
    // The core reads cu_seqlens, values and pad_row while it writes out and mask.
    if (writes[0].overlaps(writes[1])) return invalid(function ++ ": out and mask overlap", .{});
    for (writes, [_][]const u8{ "out", "mask" }) |write, written| {
        for (reads, [_][]const u8{ "values", "cu_seqlens", "pad_row" }) |read, name| {
            if (write.overlaps(read)) return invalid(function ++ ": {s} overlaps {s}", .{ written, name });
        }
    }
    const offsets = cu[0 .. count + 1];
    var position: usize = 0;
    pad_rows.checkOffsets(offsets, values_size / row_size, &position) catch |err| {
        const offset = offsets[position];
        switch (err) {
            error.OffsetNegative => return invalid(function ++ ": cu_seqlens[0] is {d}, below 0", .{offset}),
            error.OffsetsDecrease => return invalid(function ++ ": cu_seqlens decrease at {d} ({d} then {d})", .{ position, offsets[position - 1], offset }),
            error.OffsetPastValues => return invalid(function ++ ": cu_seqlens[{d}] is {d}, past the {d} rows of {d} bytes values holds", .{ position, offset, values_size / row_size, row_size }),
        }
    };
    const batch: pad_rows.Packed = .{
        .values = if (values) |v| v[0..@intCast(values_size)] else &.{},
        .cu = offsets,
        .row_size = @intCast(row_size),
    };
    const out_bytes: []u8 = if (out) |o| o[0..@intCast(out_size)] else &.{};
    const mask_bytes: []u8 = if (mask) |m| m[0..@intCast(cells)] else &.{};
    pad_rows.pad(batch, row[0..@intCast(row_size)], @intCast(length), out_bytes, mask_bytes);
    status.clearMessage();
    return .ok;
}

/// A caller's buffer as addresses, for the checks made before any byte is written (here and by
/// lx_{store,view}_gather_padded).
pub const Span = struct {
    address: u64,
    size: u64,

    pub fn of(pointer: anytype, size: u64) Span {
        return .{ .address = if (pointer) |p| @intFromPtr(p) else 0, .size = size };
    }

    /// Whether the buffer would wrap past the end of the address space.
    pub fn runsPast(span: Span) bool {
        return span.size > std.math.maxInt(usize) or span.address > std.math.maxInt(usize) - span.size;
    }

    /// Whether two buffers share a byte (an empty one shares none).
    pub fn overlaps(a: Span, b: Span) bool {
        if (a.size == 0 or b.size == 0) return false;
        return a.address < b.address + b.size and b.address < a.address + a.size;
    }
};
