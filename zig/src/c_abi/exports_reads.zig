//! The C calls a store and a view share, written once: `Reads(T)` holds the calls of T (Store
//! or View) and the block at the end exports each under lx_<noun>_<call>, the same name its
//! messages give, so lx_store_gather_packed and lx_view_gather_packed are one function.
const std = @import("std");
const status = @import("../base/status.zig");
const Status = status.Status;
const c_handles = @import("handles.zig");
const CHandle = c_handles.CHandle;
const nounOf = c_handles.nounOf;
const countOverflows = c_handles.countOverflows;
const answer = @import("exports_status.zig");
const invalid = answer.invalid;
const storeStatus = answer.storeStatus;
const coreStatus = answer.coreStatus;
const openHandle = answer.openHandle;
const record_offsets = @import("../batch/record_offsets.zig");
const store_mod = @import("../store/store.zig");
const Store = store_mod.Store;
const View = @import("../view/view.zig").View;

comptime {
    for (.{ Store, View }) |T| {
        const reads = Reads(T);
        @export(&reads.close, .{ .name = reads.name("close") });
        @export(&reads.length, .{ .name = reads.name("length") });
        @export(&reads.gatherFixed, .{ .name = reads.name("gather_fixed") });
        @export(&reads.recordLengths, .{ .name = reads.name("record_lengths") });
        @export(&reads.recordOffsets, .{ .name = reads.name("record_offsets") });
        @export(&reads.gatherPacked, .{ .name = reads.name("gather_packed") });
        @export(&reads.gatherRagged, .{ .name = reads.name("gather") });
    }
}

fn Reads(comptime T: type) type {
    return struct {
        const Handle = CHandle(T);

        /// The C name of a call of T: lx_store_<call> or lx_view_<call>.
        fn name(comptime call: []const u8) []const u8 {
            return "lx_" ++ comptime nounOf(T) ++ "_" ++ call;
        }

        fn close(handle: ?*Handle) callconv(.c) void {
            c_handles.closeHandle(T, handle);
        }

        fn length(handle: ?*const Handle) callconv(.c) u64 {
            return c_handles.lengthOf(T, handle);
        }

        fn gatherFixed(handle: ?*Handle, indices: ?[*]const i64, count: u64, dst: ?[*]u8, stride: u64) callconv(.c) Status {
            const function = comptime name("gather_fixed");
            const object = openHandle(T, handle, function) orelse return .invalid_argument;
            if (count == 0) return .ok;
            const indices_ptr = indices orelse return invalid(function ++ ": indices is NULL", .{});
            if (countOverflows(count, @sizeOf(i64), 0)) return invalid(function ++ ": count {d} overflows the address space", .{count});
            if (stride == 0) return invalid(function ++ ": stride is 0", .{});
            const dst_ptr = dst orelse return invalid(function ++ ": dst is NULL", .{});
            const byte_count = std.math.mul(u64, count, stride) catch return invalid(function ++ ": count * stride overflows", .{});
            return storeStatus(object.gather(indices_ptr[0..count], .{ .base = dst_ptr, .stride = stride }, byte_count));
        }

        fn recordLengths(handle: ?*Handle, indices: ?[*]const i64, count: u64, out_lengths: ?[*]u64) callconv(.c) Status {
            const function = comptime name("record_lengths");
            const object = openHandle(T, handle, function) orelse return .invalid_argument;
            if (count == 0) return .ok;
            const indices_ptr = indices orelse return invalid(function ++ ": indices is NULL", .{});
            const out_ptr = out_lengths orelse return invalid(function ++ ": out_lengths is NULL", .{});
            if (countOverflows(count, @sizeOf(u64), 0)) return invalid(function ++ ": count {d} overflows the address space", .{count});
            return storeStatus(object.recordLengths(indices_ptr[0..count], out_ptr[0..count]));
        }

        /// The lengths of the records, summed into offsets (and rows: record_offsets.zig); the
        /// lengths land in out_offsets[1..] first, so no scratch is needed.
        fn recordOffsets(handle: ?*Handle, indices: ?[*]const i64, count: u64, row_size: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) callconv(.c) Status {
            const function = comptime name("record_offsets");
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
        fn gatherPacked(handle: ?*Handle, indices: ?[*]const i64, count: u64, row_size: u64, dst: ?[*]u8, dst_capacity: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) callconv(.c) Status {
            const function = comptime name("gather_packed");
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

        fn gatherRagged(handle: ?*Handle, indices: ?[*]const i64, count: u64, dst: ?[*]u8, dst_offsets: ?[*]const u64) callconv(.c) Status {
            const function = comptime name("gather");
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
    };
}
