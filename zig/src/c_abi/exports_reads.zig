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
const padded = @import("../batch/padded.zig");
const pad_truncate = @import("abi_types.zig").pad_truncate;
const Span = @import("exports_pad.zig").Span;
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
        @export(&reads.gatherPadded, .{ .name = reads.name("gather_padded") });
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

        /// A padded batch in one call under one hold of the locks (Store.gatherPadded): every
        /// argument is checked here first, and a refusal writes nothing.
        fn gatherPadded(
            handle: ?*Handle,
            indices: ?[*]const i64,
            count: u64,
            row_size: u64,
            pad_row: ?[*]const u8,
            lengths: ?[*]const u64,
            length_count: u64,
            flags: u32,
            out: ?[*]u8,
            out_capacity: u64,
            mask: ?[*]u8,
            mask_capacity: u64,
            out_rows: ?[*]u64,
            out_length: ?*u64,
        ) callconv(.c) Status {
            const function = comptime name("gather_padded");
            const object = openHandle(T, handle, function) orelse return .invalid_argument;
            if (row_size == 0) return invalid(function ++ ": row_size is 0", .{});
            const row = pad_row orelse return invalid(function ++ ": pad_row is NULL", .{});
            const length_ptr = out_length orelse return invalid(function ++ ": out_length is NULL", .{});
            if (flags & ~pad_truncate != 0) return invalid(function ++ ": flags {d} has bits other than LX_PAD_TRUNCATE ({d})", .{ flags, pad_truncate });
            const truncate = flags & pad_truncate != 0;
            if (countOverflows(length_count, @sizeOf(u64), 0)) return invalid(function ++ ": length_count {d} overflows the address space", .{length_count});
            if (length_count > 0 and lengths == null) return invalid(function ++ ": lengths is NULL", .{});
            if (truncate and length_count == 0) return invalid(function ++ ": LX_PAD_TRUNCATE needs lengths to truncate to", .{});
            const allowed: []const u64 = if (lengths) |l| l[0..@intCast(length_count)] else &.{};
            for (allowed, 0..) |allowed_length, i| {
                if (allowed_length == 0) return invalid(function ++ ": lengths[{d}] is 0", .{i});
                if (i > 0 and allowed_length <= allowed[i - 1]) return invalid(function ++ ": lengths do not increase at {d} ({d} then {d})", .{ i, allowed[i - 1], allowed_length });
            }
            if (countOverflows(count, @sizeOf(u64), 0)) return invalid(function ++ ": count {d} overflows the address space", .{count});
            if (count > 0 and indices == null) return invalid(function ++ ": indices is NULL", .{});
            if (count > 0 and out_rows == null) return invalid(function ++ ": out_rows is NULL", .{});
            if (out == null and out_capacity > 0) return invalid(function ++ ": out is NULL", .{});
            if (mask == null and mask_capacity > 0) return invalid(function ++ ": mask is NULL", .{});
            if (allowed.len > 0) {
                // The largest batch the lengths allow must be addressable (the longest record's
                // length is bounded by record_size_max).
                const last = allowed[allowed.len - 1];
                const cells = std.math.mul(u64, count, last) catch return invalid(function ++ ": count {d} * lengths[{d}] {d} overflows", .{ count, allowed.len - 1, last });
                const size = std.math.mul(u64, cells, row_size) catch return invalid(function ++ ": count {d} * lengths[{d}] {d} * row_size {d} overflows", .{ count, allowed.len - 1, last, row_size });
                if (size > std.math.maxInt(usize)) return invalid(function ++ ": the padded batch's {d} bytes overflow the address space", .{size});
            }
            const writes = [_]Span{ .of(out, out_capacity), .of(mask, mask_capacity), .of(out_rows, count * @sizeOf(u64)), .of(out_length, @sizeOf(u64)) };
            const reads = [_]Span{ .of(pad_row, row_size), .of(lengths, length_count * @sizeOf(u64)) };
            const write_names = [_][]const u8{ "out", "mask", "out_rows", "out_length" };
            for (writes ++ reads) |span| {
                if (span.runsPast()) return invalid(function ++ ": a buffer runs past the address space", .{});
            }
            // The core reads pad_row, lengths and out_rows while it writes out and mask.
            for (writes, write_names, 0..) |write, written, w| {
                for (writes[w + 1 ..], write_names[w + 1 ..]) |other, other_name| {
                    if (write.overlaps(other)) return invalid(function ++ ": {s} overlaps {s}", .{ written, other_name });
                }
                for (reads, [_][]const u8{ "pad_row", "lengths" }) |read, read_name| {
                    if (write.overlaps(read)) return invalid(function ++ ": {s} overlaps {s}", .{ written, read_name });
                }
            }
            if (count == 0) {
                length_ptr.* = if (allowed.len > 0) allowed[0] else 0;
                status.clearMessage();
                return .ok;
            }
            const request: padded.Request = .{
                .row_size = row_size,
                .pad_row = row[0..@intCast(row_size)],
                .lengths = allowed,
                .truncate = truncate,
                .out = if (out) |o| o[0..@intCast(out_capacity)] else &.{},
                .mask = if (mask) |m| m[0..@intCast(mask_capacity)] else &.{},
            };
            return storeStatus(object.gatherPadded(indices.?[0..count], request, out_rows.?[0..count], length_ptr));
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
