//! The exports, continued: the packed gathers that take NumPy's fields
//! (lx_store_gather_packed_arrays, lx_view_gather_packed_arrays) write byte for byte what
//! lx_store_gather_packed and lx_view_gather_packed write, and refuse every array they cannot
//! prove before writing anything.
const std = @import("std");
const testing = std.testing;
const Status = @import("../base/status.zig").Status;
const numpy_array = @import("../batch/numpy_array.zig");
const c = @import("c_caller.zig");

const vector_flags = numpy_array.flag_c_contiguous | numpy_array.flag_aligned;
const writable_flags = vector_flags | numpy_array.flag_writeable;

/// A packed batch's four arrays and their fields, as a loader's step passes them: indices,
/// out (bytes, filled with 0xEE), offsets (filled with 77) and rows (filled with -1).
const Batch = struct {
    indices: [4]i64,
    out: [20]u8 = @splat(0xEE),
    offsets: [5]u64 align(8) = @splat(77),
    rows: [5]i32 align(4) = @splat(-1),
    index_dims: [1]isize = .{4},
    out_dims: [1]isize = .{20},
    offsets_dims: [1]isize = .{5},
    rows_dims: [1]isize = .{5},
    out_strides: [1]isize = .{1},
    offsets_strides: [1]isize = .{8},
    rows_strides: [1]isize = .{4},
    index_fields: numpy_array.Fields = undefined,
    out_fields: numpy_array.Fields = undefined,
    offsets_fields: numpy_array.Fields = undefined,
    rows_fields: numpy_array.Fields = undefined,

    /// Points each array's fields at its data (call once the batch is at its final address).
    fn init(batch: *Batch, indices: [4]i64) void {
        batch.* = .{ .indices = indices };
        batch.index_fields = c.arrayFields(@ptrCast(&batch.indices), &batch.index_dims, &.{8}, vector_flags);
        batch.out_fields = c.arrayFields(&batch.out, &batch.out_dims, &batch.out_strides, writable_flags);
        batch.offsets_fields = c.arrayFields(@ptrCast(&batch.offsets), &batch.offsets_dims, &batch.offsets_strides, writable_flags);
        batch.rows_fields = c.arrayFields(@ptrCast(&batch.rows), &batch.rows_dims, &batch.rows_strides, writable_flags);
    }

    /// lx_<noun>_gather_packed_arrays on `handle` with this batch's fields (rows when `with_rows`).
    fn gather(batch: *Batch, comptime noun: enum { store, view }, handle: anytype, with_rows: bool, row_size: u32) Status {
        const h = c.halves(handle);
        const i = c.halves(&batch.index_fields);
        const o = c.halves(&batch.out_fields);
        const f = c.halves(&batch.offsets_fields);
        const r: [2]u32 = if (with_rows) c.halves(&batch.rows_fields) else .{ 0, 0 };
        const function = switch (noun) {
            .store => c.lx_store_gather_packed_arrays,
            .view => c.lx_view_gather_packed_arrays,
        };
        return function(h[0], h[1], i[0], i[1], o[0], o[1], f[0], f[1], r[0], r[1], row_size);
    }

    /// With `field` (one of the batch's fields) set to `value`, the store's and the view's
    /// gathers refuse with a message holding `fragment`; then the field is put back.
    fn expectRefusedWith(batch: *Batch, store: *c.LxStore, view: *c.LxView, field: anytype, value: @TypeOf(field.*), fragment: []const u8) !void {
        const kept = field.*;
        defer field.* = kept;
        field.* = value;
        try c.expectRefused(.invalid_argument, batch.gather(.store, store, true, 2), fragment);
        try c.expectRefused(.invalid_argument, batch.gather(.view, view, true, 2), fragment);
    }

    fn expectUntouched(batch: *const Batch) !void {
        try testing.expectEqualSlices(u8, &@as([20]u8, @splat(0xEE)), &batch.out);
        try testing.expectEqualSlices(u64, &@as([5]u64, @splat(77)), &batch.offsets);
        try testing.expectEqualSlices(i32, &@as([5]i32, @splat(-1)), &batch.rows);
    }
};

/// The fixture's store (records 0..9 of 4 bytes) with record 10 (6 bytes) and record 11 (2
/// bytes) appended zstd-compressed: records of three lengths, in rows of 2 bytes.
fn initStore(fixture: *c.Fixture) !void {
    try fixture.init();
    const data = [_]u8{ 1, 2, 3, 4, 5, 6, 7, 8 };
    var first: u64 = 0;
    try testing.expectEqual(Status.ok, c.lx_store_append(fixture.store, &data, &[_]u64{ 0, 6, 8 }, 2, 1, &first));
    try testing.expectEqual(@as(u64, 10), first);
}

test "the packed array gathers write byte for byte what lx_store_gather_packed and lx_view_gather_packed write" {
    var fixture: c.Fixture = undefined;
    try initStore(&fixture);
    defer fixture.deinit();
    const s = fixture.store;
    var batch: Batch = undefined;
    batch.init(.{ 10, 2, 11, 0 });
    var reference: Batch = undefined;
    reference.init(batch.indices);
    try testing.expectEqual(Status.ok, c.lx_store_gather_packed(s, &reference.indices, 4, 2, &reference.out, 20, &reference.offsets, &reference.rows));
    try testing.expectEqual(Status.ok, batch.gather(.store, s, true, 2));
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3, 4, 5, 6, 2, 2, 2, 2, 7, 8, 0, 0, 0, 0, 0xEE, 0xEE, 0xEE, 0xEE }, &batch.out);
    try testing.expectEqualSlices(u64, &.{ 0, 6, 10, 12, 16 }, &batch.offsets);
    try testing.expectEqualSlices(i32, &.{ 0, 3, 5, 6, 8 }, &batch.rows);
    try testing.expectEqualSlices(u8, &reference.out, &batch.out);
    try testing.expectEqualSlices(u64, &reference.offsets, &batch.offsets);
    try testing.expectEqualSlices(i32, &reference.rows, &batch.rows);

    // Without rows (both halves 0): rows untouched, and any row size, 0 included.
    batch.init(.{ 11, 10, 3, 11 });
    try testing.expectEqual(Status.ok, batch.gather(.store, s, false, 0));
    try testing.expectEqualSlices(u8, &.{ 7, 8, 1, 2, 3, 4, 5, 6, 3, 3, 3, 3, 7, 8, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE }, &batch.out);
    try testing.expectEqualSlices(u64, &.{ 0, 2, 8, 12, 14 }, &batch.offsets);
    try testing.expectEqualSlices(i32, &@as([5]i32, @splat(-1)), &batch.rows);

    // Through a view over the store twice: global 22 is record 10 of the second, 13 its 1.
    var view: ?*c.LxView = null;
    const store_list = [_]*c.LxStore{ s, s };
    try testing.expectEqual(Status.ok, c.lx_view_open(&store_list, 2, &view));
    defer c.lx_view_close(view);
    batch.init(.{ 22, 13, 11, 9 });
    reference.init(batch.indices);
    try testing.expectEqual(Status.ok, c.lx_view_gather_packed(view, &reference.indices, 4, 2, &reference.out, 20, &reference.offsets, &reference.rows));
    try testing.expectEqual(Status.ok, batch.gather(.view, view.?, true, 2));
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3, 4, 5, 6, 1, 1, 1, 1, 7, 8, 9, 9, 9, 9 }, batch.out[0..16]);
    try testing.expectEqualSlices(u8, &reference.out, &batch.out);
    try testing.expectEqualSlices(u64, &reference.offsets, &batch.offsets);
    try testing.expectEqualSlices(i32, &reference.rows, &batch.rows);

    // Too small an out: LX_SIZE_MISMATCH, only offsets and rows written, as the typed call.
    for ([_]bool{ false, true }) |through_view| {
        batch.init(.{ 10, 2, 11, 0 });
        batch.out_dims[0] = 15;
        const got = if (through_view) batch.gather(.view, view.?, true, 2) else batch.gather(.store, s, true, 2);
        try c.expectRefused(.size_mismatch, got, "need 16");
        try testing.expectEqualSlices(u8, &@as([20]u8, @splat(0xEE)), &batch.out);
        try testing.expectEqualSlices(u64, &.{ 0, 6, 10, 12, 16 }, &batch.offsets);
        try testing.expectEqualSlices(i32, &.{ 0, 3, 5, 6, 8 }, &batch.rows);
    }
}

test "the packed array gathers refuse every array they cannot prove, writing nothing" {
    var fixture: c.Fixture = undefined;
    try initStore(&fixture);
    defer fixture.deinit();
    const s = fixture.store;
    var view: ?*c.LxView = null;
    const store_list = [_]*c.LxStore{s};
    try testing.expectEqual(Status.ok, c.lx_view_open(&store_list, 1, &view));
    defer c.lx_view_close(view);
    var batch: Batch = undefined;
    batch.init(.{ 10, 2, 11, 0 });
    const i = c.halves(&batch.index_fields);
    const o = c.halves(&batch.out_fields);
    const f = c.halves(&batch.offsets_fields);
    const r = c.halves(&batch.rows_fields);
    const h = c.halves(s);
    const v = c.halves(view.?);

    // Handles, and addresses no array's fields can have.
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed_arrays(0, 0, i[0], i[1], o[0], o[1], f[0], f[1], r[0], r[1], 2), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_view_gather_packed_arrays(v[0] + 1, v[1], i[0], i[1], o[0], o[1], f[0], f[1], r[0], r[1], 2), "misaligned");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed_arrays(h[0], h[1], 0, 0, o[0], o[1], f[0], f[1], r[0], r[1], 2), "indices is not the address");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed_arrays(h[0], h[1], i[0], i[1], o[0] + 4, o[1], f[0], f[1], r[0], r[1], 2), "out is not the address");
    try c.expectRefused(.invalid_argument, c.lx_view_gather_packed_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 0, 0, r[0], r[1], 2), "offsets is not the address");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed_arrays(h[0], h[1], i[0], i[1], o[0], o[1], f[0], f[1], r[0] + 2, r[1], 2), "rows is not the address");
    try c.expectRefused(.invalid_argument, batch.gather(.store, s, true, 0), "row_size is 0");
    try batch.expectUntouched();

    // Each array changed in one way its fields show, then put back.
    const Case = struct { field: *c_int, value: c_int, fragment: []const u8 };
    const flag_cases = [_]Case{
        .{ .field = &batch.index_fields.flags, .value = numpy_array.flag_aligned, .fragment = "indices is not a non-empty" },
        .{ .field = &batch.index_fields.nd, .value = 2, .fragment = "indices is not a non-empty" },
        .{ .field = &batch.out_fields.flags, .value = vector_flags, .fragment = "out is not a writable" },
        .{ .field = &batch.out_fields.flags, .value = numpy_array.flag_aligned | numpy_array.flag_writeable, .fragment = "out is not a writable" },
        .{ .field = &batch.out_fields.nd, .value = 2, .fragment = "out is not a writable" },
        .{ .field = &batch.offsets_fields.flags, .value = vector_flags, .fragment = "offsets is not a writable" },
        .{ .field = &batch.offsets_fields.flags, .value = numpy_array.flag_c_contiguous | numpy_array.flag_writeable, .fragment = "offsets is not a writable" },
        .{ .field = &batch.rows_fields.flags, .value = vector_flags, .fragment = "rows is not a writable" },
    };
    for (flag_cases) |case| try batch.expectRefusedWith(s, view.?, case.field, case.value, case.fragment);
    const Extent = struct { field: *isize, value: isize, fragment: []const u8 };
    const extent_cases = [_]Extent{
        .{ .field = &batch.out_strides[0], .value = 4, .fragment = "out is not a writable" }, // int32 out
        .{ .field = &batch.out_strides[0], .value = -1, .fragment = "out is not a writable" },
        .{ .field = &batch.out_dims[0], .value = 1, .fragment = "at least 2 bytes" }, // a single byte
        .{ .field = &batch.out_dims[0], .value = 0, .fragment = "at least 2 bytes" },
        .{ .field = &batch.offsets_strides[0], .value = 4, .fragment = "offsets is not a writable" },
        .{ .field = &batch.offsets_dims[0], .value = 4, .fragment = "offsets has 4 entries; 4 records need 5" },
        .{ .field = &batch.offsets_dims[0], .value = 6, .fragment = "offsets has 6 entries" },
        .{ .field = &batch.rows_strides[0], .value = 8, .fragment = "rows is not a writable" },
        .{ .field = &batch.rows_dims[0], .value = 4, .fragment = "rows has 4 entries; 4 records need 5" },
        .{ .field = &batch.index_dims[0], .value = 0, .fragment = "indices is not a non-empty" },
        .{ .field = &batch.index_dims[0], .value = 3, .fragment = "offsets has 5 entries; 3 records need 4" },
    };
    for (extent_cases) |case| try batch.expectRefusedWith(s, view.?, case.field, case.value, case.fragment);
    // Data that is not aligned for its items, whatever the flags say.
    batch.index_fields.data = @as([*]u8, @ptrCast(&batch.indices)) + 4;
    try c.expectRefused(.invalid_argument, batch.gather(.store, s, true, 2), "8-byte aligned");
    batch.index_fields.data = @ptrCast(&batch.indices);
    batch.offsets_fields.data = @as([*]u8, @ptrCast(&batch.offsets)) + 4;
    try c.expectRefused(.invalid_argument, batch.gather(.view, view.?, true, 2), "offsets is not a writable");
    batch.offsets_fields.data = @ptrCast(&batch.offsets);
    batch.rows_fields.data = @as([*]u8, @ptrCast(&batch.rows)) + 2;
    try c.expectRefused(.invalid_argument, batch.gather(.store, s, true, 2), "rows is not a writable");
    batch.rows_fields.data = @ptrCast(&batch.rows);
    try batch.expectUntouched();

    // The core's own refusals, after the arrays passed: an index past the end, rows that do
    // not divide a record. Neither writes a record.
    batch.indices[2] = 12;
    try c.expectRefused(.index_out_of_range, batch.gather(.store, s, true, 2), "12");
    try c.expectRefused(.index_out_of_range, batch.gather(.view, view.?, true, 2), "12");
    try batch.expectUntouched();
    batch.indices[2] = 11;
    try c.expectRefused(.corrupt, batch.gather(.store, s, true, 4), "whole number of 4-byte rows");
    try testing.expectEqualSlices(u8, &@as([20]u8, @splat(0xEE)), &batch.out);
    try testing.expectEqualSlices(i32, &@as([5]i32, @splat(-1)), &batch.rows);
    // And with every field put back, the call goes through.
    try testing.expectEqual(Status.ok, batch.gather(.store, s, true, 2));
    try testing.expectEqualSlices(i32, &.{ 0, 3, 5, 6, 8 }, &batch.rows);
}
