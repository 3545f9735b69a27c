//! What the dense read's fast path needs from a NumPy array, read from the array's own fields.
//!
//! Why: Python's cheapest way to a NumPy array's data pointer (ctypes' from_buffer, then
//! addressof) costs about as much as a whole gather of 256 small records, twice per call.
//! `id(array)` is free, and the fields after the object header are NumPy's C ABI: every
//! compiled NumPy extension reads them through inline functions (PyArray_DATA, PyArray_NDIM,
//! PyArray_FLAGS), so NumPy cannot move them. The binding adds the header's size to `id()`
//! (16 bytes on GIL builds of CPython, 32 on free-threaded ones: `object.__basicsize__`) and
//! passes that address; loaderx/_native.py checks what this file reads against NumPy's own
//! view of a few arrays before it uses the fast path at all.
const std = @import("std");
const assert = std.debug.assert;

/// The leading fields of NumPy's PyArrayObject_fields (numpy/ndarraytypes.h), in order. The
/// ones after `flags` are not read.
pub const Fields = extern struct {
    data: ?[*]u8,
    nd: c_int,
    dimensions: ?[*]const isize,
    strides: ?[*]const isize,
    base: ?*anyopaque,
    descr: ?*anyopaque,
    flags: c_int,
};

comptime {
    // The offsets every NumPy build has on a 64-bit platform (the only ones loaderx ships).
    assert(@offsetOf(Fields, "data") == 0);
    assert(@offsetOf(Fields, "nd") == 8);
    assert(@offsetOf(Fields, "dimensions") == 16);
    assert(@offsetOf(Fields, "flags") == 48);
}

/// NumPy's NPY_ARRAY_* flag bits (numpy/ndarraytypes.h); tests/native/test_abi.py checks them
/// against numpy.
pub const flag_c_contiguous: c_int = 0x0001;
pub const flag_aligned: c_int = 0x0100;
pub const flag_writeable: c_int = 0x0400;

/// Joins the two 32-bit halves a binding passes for one 64-bit value.
pub fn join(low: u32, high: u32) u64 {
    return @as(u64, high) << 32 | low;
}

/// The fields at `address` (an array's id() plus the object header), or null for an address
/// no array can have: 0, or not aligned for the fields.
pub fn at(address: u64) ?*const Fields {
    if (address == 0 or address % @alignOf(Fields) != 0) return null;
    return @ptrFromInt(address);
}

/// A one-dimensional, C-contiguous, aligned array's elements (the caller knows their type),
/// or null when the array is anything else or empty.
pub fn vector(fields: *const Fields) ?struct { data: [*]const u8, len: u64 } {
    if (fields.nd != 1 or !has(fields, flag_c_contiguous | flag_aligned)) return null;
    const dimensions = fields.dimensions orelse return null;
    const data = fields.data orelse return null;
    if (dimensions[0] <= 0) return null;
    return .{ .data = data, .len = @intCast(dimensions[0]) };
}

/// A writable C-contiguous array's first byte (the caller knows its size), or null.
pub fn writableBytes(fields: *const Fields) ?[*]u8 {
    if (!has(fields, flag_c_contiguous | flag_writeable)) return null;
    return fields.data;
}

/// NumPy's NPY_MAXDIMS (64 since NumPy 2, 32 before): an array claiming more is not one.
pub const dimensions_max = 64;

/// The first byte of `fields`' array when it is writable, C-contiguous and holds exactly
/// `rows` rows of `row_bytes` bytes (its first dimension is `rows`), or null.
///
/// The size comes from strides[0], since the element size lies in the dtype, whose layout
/// changed between NumPy 1 and 2. NumPy calls an array C-contiguous when every dimension longer
/// than 1 has the stride of the dimensions after it times the element size; a dimension of 1
/// may have any stride, and an empty array (a dimension of 0) is contiguous whatever its
/// strides. So strides[0] is the row size exactly when rows >= 2 and no dimension is 0, and
/// anything else (a batch of one record included) is refused: the binding then passes the
/// size it read from NumPy (writableBytes), or takes its general path.
pub fn writableRows(fields: *const Fields, rows: u64, row_bytes: u64) ?[*]u8 {
    if (!has(fields, flag_c_contiguous | flag_writeable)) return null;
    if (rows < 2 or fields.nd < 1 or fields.nd > dimensions_max) return null;
    const nd: usize = @intCast(fields.nd);
    const dimensions = fields.dimensions orelse return null;
    const strides = fields.strides orelse return null;
    if (dimensions[0] < 0 or @as(u64, @intCast(dimensions[0])) != rows) return null;
    for (dimensions[1..nd]) |extent| {
        if (extent <= 0) return null;
    }
    if (strides[0] < 0 or @as(u64, @intCast(strides[0])) != row_bytes) return null;
    return fields.data;
}

/// The elements of a writable, C-contiguous, aligned, one-dimensional array of at least 2
/// elements whose strides[0] is `@sizeOf(T)` and whose data is aligned for T, or null.
///
/// The dtype lies beyond the fields this file reads, so the caller checks its kind (a uint64
/// array and a float64 one look alike here). Its size is proven the way writableRows proves
/// a row's: NumPy gives a C-contiguous dimension longer than 1 the element size as its stride,
/// while a dimension of 1 may have any stride, so a one-element array is refused (the binding
/// then takes its older path) and so is an empty one.
pub fn writableSlice(comptime T: type, fields: *const Fields) ?[]T {
    if (fields.nd != 1 or !has(fields, flag_c_contiguous | flag_aligned | flag_writeable)) return null;
    const dimensions = fields.dimensions orelse return null;
    const strides = fields.strides orelse return null;
    const data = fields.data orelse return null;
    if (dimensions[0] < 2 or strides[0] != @sizeOf(T)) return null;
    if (@intFromPtr(data) % @alignOf(T) != 0) return null;
    const len: u64 = @intCast(dimensions[0]);
    if (len > (std.math.maxInt(usize) - @intFromPtr(data)) / @sizeOf(T)) return null;
    const items: [*]T = @ptrCast(@alignCast(data));
    return items[0..@intCast(len)];
}

fn has(fields: *const Fields, wanted: c_int) bool {
    return fields.flags & wanted == wanted;
}

test "join puts the high half above the low one, every bit kept" {
    try std.testing.expectEqual(@as(u64, 0), join(0, 0));
    try std.testing.expectEqual(@as(u64, 0x7FFF_FFFF_FFFF_FFFF), join(0xFFFF_FFFF, 0x7FFF_FFFF));
    try std.testing.expectEqual(@as(u64, 0x1_8000_0000), join(0x8000_0000, 1));
}

test "vector takes only non-empty, one-dimensional, C-contiguous, aligned arrays" {
    var values = [_]i64{ 4, 5, 6 };
    const dims = [_]isize{3};
    const strides = [_]isize{8};
    var fields: Fields = .{ .data = @ptrCast(&values), .nd = 1, .dimensions = &dims, .strides = &strides, .base = null, .descr = null, .flags = flag_c_contiguous | flag_aligned };
    const v = vector(&fields).?;
    try std.testing.expectEqual(@as(u64, 3), v.len);
    try std.testing.expectEqual(@as([*]const u8, @ptrCast(&values)), v.data);
    fields.flags = flag_aligned; // a strided view
    try std.testing.expect(vector(&fields) == null);
    fields.flags = flag_c_contiguous; // misaligned
    try std.testing.expect(vector(&fields) == null);
    fields.flags = flag_c_contiguous | flag_aligned;
    fields.nd = 2;
    try std.testing.expect(vector(&fields) == null);
    fields.nd = 1;
    const empty = [_]isize{0};
    fields.dimensions = &empty;
    try std.testing.expect(vector(&fields) == null);
    try std.testing.expect(at(0) == null);
    try std.testing.expect(at(@intFromPtr(&fields) + 4) == null);
    try std.testing.expectEqual(@as(?*const Fields, &fields), at(@intFromPtr(&fields)));
}

test "writableBytes takes writable C-contiguous arrays only" {
    var bytes: [8]u8 = @splat(0);
    const dims = [_]isize{8};
    const strides = [_]isize{1};
    var fields: Fields = .{ .data = &bytes, .nd = 1, .dimensions = &dims, .strides = &strides, .base = null, .descr = null, .flags = flag_c_contiguous | flag_writeable };
    try std.testing.expectEqual(@as(?[*]u8, &bytes), writableBytes(&fields));
    fields.flags = flag_c_contiguous; // read-only
    try std.testing.expect(writableBytes(&fields) == null);
    fields.flags = flag_writeable; // strided
    try std.testing.expect(writableBytes(&fields) == null);
}

test "writableRows takes exactly rows x row_bytes of a writable C-contiguous array, nothing else" {
    var bytes: [96]u8 = @splat(0);
    const data: [*]u8 = &bytes;
    // A (4, 3, 2) array of int32: 24-byte rows.
    var dims = [_]isize{ 4, 3, 2 };
    var strides = [_]isize{ 24, 8, 4 };
    const writable = flag_c_contiguous | flag_aligned | flag_writeable;
    var fields: Fields = .{ .data = data, .nd = 3, .dimensions = &dims, .strides = &strides, .base = null, .descr = null, .flags = writable };
    try std.testing.expectEqual(@as(?[*]u8, data), writableRows(&fields, 4, 24));
    try std.testing.expect(writableRows(&fields, 3, 24) == null); // another row count
    try std.testing.expect(writableRows(&fields, 4, 12) == null); // another row size
    fields.flags = flag_c_contiguous | flag_aligned; // read-only
    try std.testing.expect(writableRows(&fields, 4, 24) == null);
    fields.flags = flag_aligned | flag_writeable; // strided
    try std.testing.expect(writableRows(&fields, 4, 24) == null);
    fields.flags = writable;
    // An empty array is contiguous whatever its strides: a zero anywhere is refused.
    dims[2] = 0;
    try std.testing.expect(writableRows(&fields, 4, 24) == null);
    dims[2] = 2;
    // One row: strides[0] may be anything, so a batch of one is refused.
    dims[0] = 1;
    try std.testing.expect(writableRows(&fields, 1, 24) == null);
    dims[0] = 4;
    fields.nd = 0;
    try std.testing.expect(writableRows(&fields, 4, 24) == null);
    fields.nd = dimensions_max + 1;
    try std.testing.expect(writableRows(&fields, 4, 24) == null);
    fields.nd = 1; // a (4,) array of 24-byte records
    try std.testing.expectEqual(@as(?[*]u8, data), writableRows(&fields, 4, 24));
    strides[0] = -24;
    try std.testing.expect(writableRows(&fields, 4, 24) == null);
}

test "writableSlice takes a writable, C-contiguous, aligned vector of at least 2 items of T's stride" {
    var values: [4]u64 = .{ 1, 2, 3, 4 };
    const data: [*]u8 = @ptrCast(&values);
    var dims = [_]isize{4};
    var strides = [_]isize{8};
    const writable = flag_c_contiguous | flag_aligned | flag_writeable;
    var fields: Fields = .{ .data = data, .nd = 1, .dimensions = &dims, .strides = &strides, .base = null, .descr = null, .flags = writable };
    const items = writableSlice(u64, &fields).?;
    try std.testing.expectEqual(@as(usize, 4), items.len);
    try std.testing.expectEqual(@as([*]u64, &values), items.ptr);
    // The same bytes as 32 bytes of stride 1 are not u64s, nor as u32s of stride 8.
    try std.testing.expect(writableSlice(u8, &fields) == null);
    try std.testing.expect(writableSlice(u32, &fields) == null);
    strides[0] = 1;
    dims[0] = 32;
    try std.testing.expectEqual(@as(usize, 32), writableSlice(u8, &fields).?.len);
    dims[0] = 4;
    strides[0] = 8;
    fields.flags = flag_c_contiguous | flag_aligned; // read-only
    try std.testing.expect(writableSlice(u64, &fields) == null);
    fields.flags = flag_aligned | flag_writeable; // strided
    try std.testing.expect(writableSlice(u64, &fields) == null);
    fields.flags = flag_c_contiguous | flag_writeable; // NumPy says misaligned
    try std.testing.expect(writableSlice(u64, &fields) == null);
    fields.flags = writable;
    fields.data = data + 4; // misaligned for u64 whatever the flags say
    try std.testing.expect(writableSlice(u64, &fields) == null);
    fields.data = data;
    // One item (any stride is contiguous), none, or a negative extent: refused.
    for ([_]isize{ 1, 0, -1 }) |extent| {
        dims[0] = extent;
        try std.testing.expect(writableSlice(u64, &fields) == null);
    }
    dims[0] = 2;
    try std.testing.expectEqualSlices(u64, &.{ 1, 2 }, writableSlice(u64, &fields).?);
    fields.nd = 2; // a (2, 1) array: not one-dimensional
    try std.testing.expect(writableSlice(u64, &fields) == null);
    fields.nd = 1;
    strides[0] = -8;
    try std.testing.expect(writableSlice(u64, &fields) == null);
    strides[0] = 8;
    fields.data = null;
    try std.testing.expect(writableSlice(u64, &fields) == null);
    // A length that would run past the address space.
    strides[0] = 1;
    dims[0] = 32;
    fields.data = @ptrFromInt(std.math.maxInt(usize) - 15);
    try std.testing.expect(writableSlice(u8, &fields) == null);
}
