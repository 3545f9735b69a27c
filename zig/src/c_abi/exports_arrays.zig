//! The Python binding's fast path: 32-bit halves and NumPy arrays by their fields, and the dense
//! gather of a store or a view that takes them (lx_store_gather_arrays, lx_view_gather_arrays).
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
        const indices_fields = numpy_array.at(numpy_array.join(indices_low, indices_high)) orelse
            return refuse(function ++ ": indices is not the address of an array's fields", .{});
        const vector = numpy_array.vector(indices_fields) orelse
            return refuse(function ++ ": indices is not a non-empty, one-dimensional, C-contiguous, aligned array", .{});
        if (@intFromPtr(vector.data) % @alignOf(i64) != 0) return refuse(function ++ ": indices are not 8-byte aligned", .{});
        if (countOverflows(vector.len, @sizeOf(i64), 0)) return refuse(function ++ ": count {d} overflows the address space", .{vector.len});
        const out_fields = numpy_array.at(numpy_array.join(out_low, out_high)) orelse
            return refuse(function ++ ": out is not the address of an array's fields", .{});
        if (stride == 0) return refuse(function ++ ": stride is 0", .{});
        const byte_count = std.math.mul(u64, vector.len, stride) catch return refuse(function ++ ": count * stride overflows", .{});
        const out = if (out_bytes == 0)
            numpy_array.writableRows(out_fields, vector.len, stride) orelse
                return refuse(function ++ ": out is not a writable C-contiguous array of {d} rows of {d} bytes (nor, for one row, a checkable one)", .{ vector.len, stride })
        else out: {
            if (out_bytes != byte_count) return refuse(function ++ ": out holds {d} bytes, {d} records of {d} bytes need {d}", .{ out_bytes, vector.len, stride, byte_count });
            break :out numpy_array.writableBytes(out_fields) orelse
                return refuse(function ++ ": out is not a writable C-contiguous array", .{});
        };
        const indices: [*]const i64 = @ptrCast(@alignCast(vector.data));
        return .{ .indices = indices[0..@intCast(vector.len)], .out = out, .byte_count = byte_count };
    }

    fn refuse(comptime fmt: []const u8, args: anytype) ?ArrayGather {
        _ = invalid(fmt, args);
        return null;
    }
};

comptime {
    for (.{ Store, View }) |T| {
        @export(&GatherArrays(T).call, .{ .name = GatherArrays(T).function });
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
