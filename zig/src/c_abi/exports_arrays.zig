//! The Python binding's fast path: 32-bit halves and NumPy arrays by their fields, and the dense
//! and packed gathers of a store or a view that take them (lx_store_gather_arrays,
//! lx_view_gather_arrays, lx_store_gather_packed_arrays, lx_view_gather_packed_arrays).
//!
//! ctypes passes a Python int as a C int far more cheaply than as any typed argument, and
//! id(array) costs nothing where an array's data pointer costs a Python call. So these take
//! every 64-bit value as two u32 halves (low, high) and every array as the address of its NumPy
//! fields (numpy_array.zig). loaderx/_native.py uses them only after lx_join_halves and
//! lx_read_array_facts have given back what it passed and what NumPy says of its probe arrays.
const std = @import("std");
const status = @import("../base/status.zig");
const Status = status.Status;
const c_handles = @import("handles.zig");
const nounOf = c_handles.nounOf;
const handleAt = c_handles.handleAt;
const countOverflows = c_handles.countOverflows;
const numpy_array = @import("../batch/numpy_array.zig");
const LxArrayFacts = @import("abi_types.zig").LxArrayFacts;
const answer = @import("exports_status.zig");
const invalid = answer.invalid;
const storeStatus = answer.storeStatus;
const Store = @import("../store/store.zig").Store;
const View = @import("../view/view.zig").View;

export fn lx_join_halves(low: u32, high: u32) callconv(.c) u64 {
    return numpy_array.join(low, high);
}

export fn lx_read_array_facts(fields_low: u32, fields_high: u32, out: ?*LxArrayFacts) callconv(.c) Status {
    const out_ptr = out orelse return invalid("lx_read_array_facts: out is NULL", .{});
    const address = numpy_array.join(fields_low, fields_high);
    const fields = numpy_array.at(address) orelse return invalid("lx_read_array_facts: 0x{x} is not the address of an array's fields", .{address});
    const length: u64 = if (fields.nd >= 1 and fields.dimensions != null) @bitCast(@as(i64, fields.dimensions.?[0])) else 0;
    const stride: u64 = if (fields.nd >= 1 and fields.strides != null) @bitCast(@as(i64, fields.strides.?[0])) else 0;
    out_ptr.* = .{
        .data = @intFromPtr(fields.data),
        .ndim = @bitCast(@as(i64, fields.nd)),
        .length = length,
        .flags = @as(u32, @bitCast(fields.flags)),
        .stride = stride,
    };
    status.clearMessage();
    return .ok;
}

/// A dense gather's arguments read from two arrays' fields: what lx_*_gather_fixed take.
const ArrayGather = struct {
    indices: []const i64,
    out: [*]u8,
    byte_count: u64,

    /// The request, or null after setting the message of LX_INVALID_ARGUMENT.
    fn read(comptime function: []const u8, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, stride: u32, out_bytes: u32) ?ArrayGather {
        const indices = readIndices(function, indices_low, indices_high) orelse return null;
        const out_fields = numpy_array.at(numpy_array.join(out_low, out_high)) orelse
            return refuse(ArrayGather, function ++ ": out is not the address of an array's fields", .{});
        if (stride == 0) return refuse(ArrayGather, function ++ ": stride is 0", .{});
        const byte_count = std.math.mul(u64, indices.len, stride) catch return refuse(ArrayGather, function ++ ": count * stride overflows", .{});
        const out = if (out_bytes == 0)
            numpy_array.writableRows(out_fields, indices.len, stride) orelse
                return refuse(ArrayGather, function ++ ": out is not a writable C-contiguous array of {d} rows of {d} bytes (nor, for one row, a checkable one)", .{ indices.len, stride })
        else out: {
            if (out_bytes != byte_count) return refuse(ArrayGather, function ++ ": out holds {d} bytes, {d} records of {d} bytes need {d}", .{ out_bytes, indices.len, stride, byte_count });
            break :out numpy_array.writableBytes(out_fields) orelse
                return refuse(ArrayGather, function ++ ": out is not a writable C-contiguous array", .{});
        };
        return .{ .indices = indices, .out = out, .byte_count = byte_count };
    }
};

/// A packed gather's arguments read from four arrays' fields (rows' halves both 0: no rows):
/// what lx_*_gather_packed take. out's capacity is its length, offsets (and rows) have one
/// entry more than the indices; the element sizes come from strides[0], the dtypes' kinds are
/// the caller's to check.
const PackedArrays = struct {
    indices: []const i64,
    out: []u8,
    offsets: []u64,
    rows: ?[]i32,

    /// The request, or null after setting the message of LX_INVALID_ARGUMENT.
    fn read(comptime function: []const u8, indices_halves: [2]u32, out_halves: [2]u32, offsets_halves: [2]u32, rows_halves: [2]u32, row_size: u32) ?PackedArrays {
        const indices = readIndices(function, indices_halves[0], indices_halves[1]) orelse return null;
        const out_fields = numpy_array.at(numpy_array.join(out_halves[0], out_halves[1])) orelse
            return refuse(PackedArrays, function ++ ": out is not the address of an array's fields", .{});
        const out = numpy_array.writableSlice(u8, out_fields) orelse
            return refuse(PackedArrays, function ++ ": out is not a writable, C-contiguous, one-dimensional array of at least 2 bytes of stride 1", .{});
        const offsets = counted(u64, function, "offsets", offsets_halves, indices.len) orelse return null;
        if (rows_halves[0] == 0 and rows_halves[1] == 0) return .{ .indices = indices, .out = out, .offsets = offsets, .rows = null };
        if (row_size == 0) return refuse(PackedArrays, function ++ ": row_size is 0 (rows need a row size)", .{});
        const rows = counted(i32, function, "rows", rows_halves, indices.len) orelse return null;
        return .{ .indices = indices, .out = out, .offsets = offsets, .rows = rows };
    }

    /// The count + 1 entries of T at the fields `halves` give, or null after the message.
    fn counted(comptime T: type, comptime function: []const u8, comptime name: []const u8, halves: [2]u32, count: u64) ?[]T {
        const fields = numpy_array.at(numpy_array.join(halves[0], halves[1])) orelse
            return refuse([]T, function ++ ": " ++ name ++ " is not the address of an array's fields", .{});
        const items = numpy_array.writableSlice(T, fields) orelse
            return refuse([]T, function ++ ": " ++ name ++ " is not a writable, C-contiguous, aligned, one-dimensional array of {d}-byte items", .{@sizeOf(T)});
        if (items.len != count + 1) return refuse([]T, function ++ ": " ++ name ++ " has {d} entries; {d} records need {d}", .{ items.len, count, count + 1 });
        return items;
    }
};

/// The indices at the fields `low` and `high` give: a non-empty, one-dimensional,
/// C-contiguous, 8-byte aligned array (the caller checks that its dtype is int64); or null
/// after setting the message of LX_INVALID_ARGUMENT.
fn readIndices(comptime function: []const u8, low: u32, high: u32) ?[]const i64 {
    const fields = numpy_array.at(numpy_array.join(low, high)) orelse
        return refuse([]const i64, function ++ ": indices is not the address of an array's fields", .{});
    const vector = numpy_array.vector(fields) orelse
        return refuse([]const i64, function ++ ": indices is not a non-empty, one-dimensional, C-contiguous, aligned array", .{});
    if (@intFromPtr(vector.data) % @alignOf(i64) != 0) return refuse([]const i64, function ++ ": indices are not 8-byte aligned", .{});
    if (countOverflows(vector.len, @sizeOf(i64), 0)) return refuse([]const i64, function ++ ": count {d} overflows the address space", .{vector.len});
    const indices: [*]const i64 = @ptrCast(@alignCast(vector.data));
    return indices[0..@intCast(vector.len)];
}

/// Null after setting the message of LX_INVALID_ARGUMENT.
fn refuse(comptime T: type, comptime fmt: []const u8, args: anytype) ?T {
    _ = invalid(fmt, args);
    return null;
}

comptime {
    for (.{ Store, View }) |T| {
        @export(&GatherArrays(T).call, .{ .name = GatherArrays(T).function });
        @export(&GatherPackedArrays(T).call, .{ .name = GatherPackedArrays(T).function });
    }
}

/// The dense gather of T from arrays' fields: one function for lx_store_gather_arrays and
/// lx_view_gather_arrays.
fn GatherArrays(comptime T: type) type {
    return struct {
        const noun = nounOf(T);
        const function = "lx_" ++ noun ++ "_gather_arrays";

        fn call(handle_low: u32, handle_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, stride: u32, out_bytes: u32) callconv(.c) Status {
            const object = handleAt(T, handle_low, handle_high) orelse return invalid(function ++ ": " ++ noun ++ " is NULL, misaligned or not open", .{});
            const request = ArrayGather.read(function, indices_low, indices_high, out_low, out_high, stride, out_bytes) orelse return .invalid_argument;
            return storeStatus(object.gather(request.indices, .{ .base = request.out, .stride = stride }, request.byte_count));
        }
    };
}

/// The packed gather of T from arrays' fields: one function for lx_store_gather_packed_arrays
/// and lx_view_gather_packed_arrays, exactly what lx_*_gather_packed do once the arrays are
/// read (LX_SIZE_MISMATCH with only offsets and rows written when out is too small).
fn GatherPackedArrays(comptime T: type) type {
    return struct {
        const noun = nounOf(T);
        const function = "lx_" ++ noun ++ "_gather_packed_arrays";

        fn call(handle_low: u32, handle_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, offsets_low: u32, offsets_high: u32, rows_low: u32, rows_high: u32, row_size: u32) callconv(.c) Status {
            const object = handleAt(T, handle_low, handle_high) orelse return invalid(function ++ ": " ++ noun ++ " is NULL, misaligned or not open", .{});
            const request = PackedArrays.read(function, .{ indices_low, indices_high }, .{ out_low, out_high }, .{ offsets_low, offsets_high }, .{ rows_low, rows_high }, row_size) orelse return .invalid_argument;
            return storeStatus(object.gatherPacked(request.indices, request.out.ptr, request.out.len, request.offsets, row_size, request.rows));
        }
    };
}
