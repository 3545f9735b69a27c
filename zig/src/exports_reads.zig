//! The C calls a store and a view share: one implementation each, generic over T (Store or
//! View), which also names the function in its messages; then the lx_store_* and lx_view_*
//! exports over them.
const std = @import("std");
const status = @import("status.zig");
const Status = status.Status;
const c_handles = @import("handles.zig");
const LxStore = c_handles.LxStore;
const LxView = c_handles.LxView;
const CHandle = c_handles.CHandle;
const nounOf = c_handles.nounOf;
const closeHandle = c_handles.closeHandle;
const lengthOf = c_handles.lengthOf;
const countOverflows = c_handles.countOverflows;
const answer = @import("exports_status.zig");
const invalid = answer.invalid;
const storeStatus = answer.storeStatus;
const coreStatus = answer.coreStatus;
const openHandle = answer.openHandle;
const record_offsets = @import("record_offsets.zig");
const store_mod = @import("store.zig");
const Store = store_mod.Store;
const View = @import("view.zig").View;

fn gatherFixed(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, dst: ?[*]u8, stride: u64) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_gather_fixed";
    const object = openHandle(T, handle, function) orelse return .invalid_argument;
    if (count == 0) return .ok;
    const indices_ptr = indices orelse return invalid(function ++ ": indices is NULL", .{});
    if (countOverflows(count, @sizeOf(i64), 0)) return invalid(function ++ ": count {d} overflows the address space", .{count});
    if (stride == 0) return invalid(function ++ ": stride is 0", .{});
    const dst_ptr = dst orelse return invalid(function ++ ": dst is NULL", .{});
    const byte_count = std.math.mul(u64, count, stride) catch return invalid(function ++ ": count * stride overflows", .{});
    return storeStatus(object.gather(indices_ptr[0..count], .{ .base = dst_ptr, .stride = stride }, byte_count));
}

fn recordLengths(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, out_lengths: ?[*]u64) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_record_lengths";
    const object = openHandle(T, handle, function) orelse return .invalid_argument;
    if (count == 0) return .ok;
    const indices_ptr = indices orelse return invalid(function ++ ": indices is NULL", .{});
    const out_ptr = out_lengths orelse return invalid(function ++ ": out_lengths is NULL", .{});
    if (countOverflows(count, @sizeOf(u64), 0)) return invalid(function ++ ": count {d} overflows the address space", .{count});
    return storeStatus(object.recordLengths(indices_ptr[0..count], out_ptr[0..count]));
}

/// The lengths of the records, summed into offsets (and rows: record_offsets.zig); the lengths
/// land in out_offsets[1..] first, so no scratch is needed.
fn recordOffsets(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, row_size: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_record_offsets";
    const object = openHandle(T, handle, function) orelse return .invalid_argument;
    const offsets_ptr = out_offsets orelse return invalid(function ++ ": out_offsets is NULL", .{});
    if (out_rows != null and row_size == 0) return invalid(function ++ ": row_size is 0 (rows need a row size)", .{});
    if (countOverflows(count, @sizeOf(u64), 1)) return invalid(function ++ ": count {d} overflows the address space", .{count});
    if (count > 0 and indices == null) return invalid(function ++ ": indices is NULL", .{});
    const offsets = offsets_ptr[0 .. count + 1];
    if (count > 0) object.recordLengths(indices.?[0..count], offsets[1..]) catch |err| return coreStatus(err);
    const rows: ?[]i32 = if (out_rows) |r| r[0 .. count + 1] else null;
    return storeStatus(record_offsets.accumulate(offsets, row_size, rows));
}

/// Sizes and copies a packed batch under one hold of the locks (Store.gatherPacked).
fn gatherPacked(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, row_size: u64, dst: ?[*]u8, dst_capacity: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_gather_packed";
    const object = openHandle(T, handle, function) orelse return .invalid_argument;
    const offsets_ptr = out_offsets orelse return invalid(function ++ ": out_offsets is NULL", .{});
    if (out_rows != null and row_size == 0) return invalid(function ++ ": row_size is 0 (rows need a row size)", .{});
    if (countOverflows(count, @sizeOf(u64), 1)) return invalid(function ++ ": count {d} overflows the address space", .{count});
    if (dst == null and dst_capacity > 0) return invalid(function ++ ": dst is NULL", .{});
    const base = dst orelse @as([*]u8, @ptrFromInt(1));
    if (@intFromPtr(base) > std.math.maxInt(usize) - dst_capacity) return invalid(function ++ ": dst_capacity {d} runs past the address space", .{dst_capacity});
    if (count == 0) {
        offsets_ptr[0] = 0;
        if (out_rows) |r| r[0] = 0;
        status.clearMessage();
        return .ok;
    }
    const indices_ptr = indices orelse return invalid(function ++ ": indices is NULL", .{});
    const rows: ?[]i32 = if (out_rows) |r| r[0 .. count + 1] else null;
    return storeStatus(object.gatherPacked(indices_ptr[0..count], base, dst_capacity, offsets_ptr[0 .. count + 1], row_size, rows));
}

fn gatherRagged(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, dst: ?[*]u8, dst_offsets: ?[*]const u64) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_gather";
    const object = openHandle(T, handle, function) orelse return .invalid_argument;
    if (count == 0) return .ok;
    const indices_ptr = indices orelse return invalid(function ++ ": indices is NULL", .{});
    const offsets_ptr = dst_offsets orelse return invalid(function ++ ": dst_offsets is NULL", .{});
    if (countOverflows(count, @sizeOf(u64), 1)) return invalid(function ++ ": count {d} overflows the address space", .{count});
    for (0..count) |i| {
        if (offsets_ptr[i + 1] < offsets_ptr[i])
            return invalid(function ++ ": dst_offsets decrease at {d} ({d} then {d})", .{ i, offsets_ptr[i], offsets_ptr[i + 1] });
    }
    const byte_count = offsets_ptr[count] - offsets_ptr[0];
    if (byte_count > 0 and dst == null) return invalid(function ++ ": dst is NULL", .{});
    const destination: store_mod.Destination = .{ .base = dst orelse @ptrFromInt(1), .offsets = offsets_ptr };
    return storeStatus(object.gather(indices_ptr[0..count], destination, byte_count));
}

export fn lx_store_close(store: ?*LxStore) callconv(.c) void {
    closeHandle(Store, store);
}

export fn lx_store_length(store: ?*const LxStore) callconv(.c) u64 {
    return lengthOf(Store, store);
}

export fn lx_store_gather_fixed(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    dst: ?[*]u8,
    stride: u64,
) callconv(.c) Status {
    return gatherFixed(Store, store, indices, count, dst, stride);
}

export fn lx_store_record_lengths(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    out_lengths: ?[*]u64,
) callconv(.c) Status {
    return recordLengths(Store, store, indices, count, out_lengths);
}

export fn lx_store_record_offsets(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    row_size: u64,
    out_offsets: ?[*]u64,
    out_rows: ?[*]i32,
) callconv(.c) Status {
    return recordOffsets(Store, store, indices, count, row_size, out_offsets, out_rows);
}

export fn lx_store_gather_packed(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    row_size: u64,
    dst: ?[*]u8,
    dst_capacity: u64,
    out_offsets: ?[*]u64,
    out_rows: ?[*]i32,
) callconv(.c) Status {
    return gatherPacked(Store, store, indices, count, row_size, dst, dst_capacity, out_offsets, out_rows);
}

export fn lx_store_gather(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    dst: ?[*]u8,
    dst_offsets: ?[*]const u64,
) callconv(.c) Status {
    return gatherRagged(Store, store, indices, count, dst, dst_offsets);
}

export fn lx_view_close(view: ?*LxView) callconv(.c) void {
    closeHandle(View, view);
}

export fn lx_view_length(view: ?*const LxView) callconv(.c) u64 {
    return lengthOf(View, view);
}

export fn lx_view_gather_fixed(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    dst: ?[*]u8,
    stride: u64,
) callconv(.c) Status {
    return gatherFixed(View, view, indices, count, dst, stride);
}

export fn lx_view_record_lengths(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    out_lengths: ?[*]u64,
) callconv(.c) Status {
    return recordLengths(View, view, indices, count, out_lengths);
}

export fn lx_view_record_offsets(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    row_size: u64,
    out_offsets: ?[*]u64,
    out_rows: ?[*]i32,
) callconv(.c) Status {
    return recordOffsets(View, view, indices, count, row_size, out_offsets, out_rows);
}

export fn lx_view_gather_packed(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    row_size: u64,
    dst: ?[*]u8,
    dst_capacity: u64,
    out_offsets: ?[*]u64,
    out_rows: ?[*]i32,
) callconv(.c) Status {
    return gatherPacked(View, view, indices, count, row_size, dst, dst_capacity, out_offsets, out_rows);
}

export fn lx_view_gather(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    dst: ?[*]u8,
    dst_offsets: ?[*]const u64,
) callconv(.c) Status {
    return gatherRagged(View, view, indices, count, dst, dst_offsets);
}
