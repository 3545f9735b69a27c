//! Every `lx_*` export called through its C symbol with bad arguments: NULL pointers, zero
//! sizes, overflowing counts, decreasing offsets, close(NULL). Each must answer with a status
//! and a message (no panic, no crash), and refuse before any byte of the caller's moves. This
//! file takes the store calls and the gathers; exports_handles_test.zig and
//! exports_batch_test.zig take the rest, all through c_caller.zig.
const std = @import("std");
const testing = std.testing;
const Status = @import("../base/status.zig").Status;
const limits = @import("../base/limits.zig");
const c = @import("c_caller.zig");

test "library calls: unknown statuses, close(NULL), queries on NULL" {
    try testing.expectEqualStrings("unknown", std.mem.span(c.lx_status_name(-1)));
    try testing.expectEqualStrings("unknown", std.mem.span(c.lx_status_name(std.math.maxInt(c_int))));
    c.lx_store_close(null);
    try testing.expectEqual(@as(u64, 0), c.lx_store_length(null));
    try testing.expectEqual(@as(c_int, 0), c.lx_store_has_dict(null));
}

test "every call refuses a handle that is not open: another kind, misaligned, zeroed, closed" {
    var f: c.Fixture = undefined;
    try f.init();
    var view: ?*c.LxView = null;
    const store_list = [_]*c.LxStore{f.store};
    try testing.expectEqual(Status.ok, c.lx_view_open(&store_list, 1, &view));
    var index: [1]i64 = .{0};
    var offsets: [2]u64 = .{ 0, 4 };
    var out: [4]u8 = @splat(0xEE);
    var lengths: [1]u64 = .{77};
    // A view passed as a store, a store as a view, memory that never held one, and a handle
    // one byte off: each refused with a message, nothing read through it, nothing written.
    const as_store: *c.LxStore = @ptrCast(view.?);
    const as_view: *c.LxView = @ptrCast(f.store);
    const StoreStruct = @import("../store/store.zig").Store;
    var zeros: [@sizeOf(StoreStruct) / 8 + 1]u64 align(@alignOf(StoreStruct)) = @splat(0);
    const fake: *c.LxStore = @ptrCast(&zeros);
    const off: *c.LxStore = @ptrFromInt(@intFromPtr(f.store) + 1);
    for ([_]*c.LxStore{ as_store, fake, off }) |bad| {
        try c.expectRefused(.invalid_argument, c.lx_store_gather_fixed(bad, &index, 1, &out, 4), "not an open lx_store");
        try c.expectRefused(.invalid_argument, c.lx_store_gather(bad, &index, 1, &out, &offsets), "not an open lx_store");
        try c.expectRefused(.invalid_argument, c.lx_store_record_lengths(bad, &index, 1, &lengths), "not an open lx_store");
        try c.expectRefused(.invalid_argument, c.lx_store_append_fixed(bad, &out, 4, 1, 0, null), "not an open lx_store");
        try c.expectRefused(.invalid_argument, c.lx_store_delete(bad, &index, 1), "not an open lx_store");
        try c.expectRefused(.invalid_argument, c.lx_store_compact(bad), "not an open lx_store");
        try testing.expectEqual(@as(u64, 0), c.lx_store_length(bad));
        try testing.expectEqual(@as(c_int, 0), c.lx_store_has_dict(bad));
        const one = [_]?*c.LxStore{bad};
        try c.expectRefused(.invalid_argument, c.lx_stores_delete(&one, 1, &index, &[_]u64{ 0, 1 }), "store 0 is not an open lx_store");
        var other: ?*c.LxView = null;
        const list = [_]*c.LxStore{bad};
        try c.expectRefused(.invalid_argument, c.lx_view_open(&list, 1, &other), "store 0 is not an open lx_store");
        c.lx_store_close(bad); // does nothing
    }
    try c.expectRefused(.invalid_argument, c.lx_view_gather_fixed(as_view, &index, 1, &out, 4), "not an open lx_view");
    try c.expectRefused(.invalid_argument, c.lx_view_gather(as_view, &index, 1, &out, &offsets), "not an open lx_view");
    try c.expectRefused(.invalid_argument, c.lx_view_record_lengths(as_view, &index, 1, &lengths), "not an open lx_view");
    try testing.expectEqual(@as(u64, 0), c.lx_view_length(as_view));
    c.lx_view_close(as_view); // does nothing
    try testing.expectEqualSlices(u8, &@as([4]u8, @splat(0xEE)), &out);
    try testing.expectEqual(@as(u64, 77), lengths[0]);
    for (zeros) |word| try testing.expectEqual(@as(u64, 0), word);
    // Both still work after all that.
    try testing.expectEqual(Status.ok, c.lx_view_gather_fixed(view, &index, 1, &out, 4));
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(f.store));
    // A store closed under a view of it (the caller broke the borrow): the view refuses.
    var g: c.Fixture = undefined;
    try g.init();
    var orphan: ?*c.LxView = null;
    const orphan_list = [_]*c.LxStore{g.store};
    try testing.expectEqual(Status.ok, c.lx_view_open(&orphan_list, 1, &orphan));
    c.lx_store_close(g.store);
    try testing.expectEqual(@as(u64, 0), c.lx_view_length(orphan));
    try c.expectRefused(.invalid_argument, c.lx_view_gather_fixed(orphan, &index, 1, &out, 4), "closed before the view");
    try c.expectRefused(.invalid_argument, c.lx_view_record_lengths(orphan, &index, 1, &lengths), "closed before the view");
    try testing.expectEqual(@as(u64, 77), lengths[0]);
    c.lx_view_close(orphan);
    g.tmp.cleanup();
    // Closed: the view, then the store, each twice. A second close does nothing (it freed the
    // handle a second time before); so does any call in between.
    c.lx_view_close(view);
    c.lx_view_close(view);
    try testing.expectEqual(@as(u64, 0), c.lx_view_length(view));
    c.lx_store_close(f.store);
    c.lx_store_close(f.store);
    try testing.expectEqual(@as(u64, 0), c.lx_store_length(f.store));
    f.tmp.cleanup();
}

test "lx_store_open refuses NULLs, an empty path, unknown flags and a missing store" {
    var out: ?*c.LxStore = null;
    try c.expectRefused(.invalid_argument, c.lx_store_open(null, 0, &out), "path is NULL");
    try testing.expectEqual(@as(?*c.LxStore, null), out);
    try c.expectRefused(.invalid_argument, c.lx_store_open("x", 0, null), "out is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_open("", 0, &out), "path is empty");
    try c.expectRefused(.invalid_argument, c.lx_store_open(".", 0x80, &out), "unknown flags");
    try c.expectRefused(.not_found, c.lx_store_open("/nonexistent/loaderx/store", 0, &out), "no such folder");
    try testing.expectEqual(@as(?*c.LxStore, null), out);
}

test "every store call refuses a NULL store" {
    var index: [1]i64 = .{0};
    var offsets: [2]u64 = .{ 0, 1 };
    var byte: [1]u8 = .{0};
    var stats: c.LxStats = undefined;
    var length: [1]u64 = undefined;
    try c.expectRefused(.invalid_argument, c.lx_store_append(null, &byte, &offsets, 1, 0, null), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_append_fixed(null, &byte, 1, 1, 0, null), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_fixed(null, &index, 1, &byte, 1), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_record_lengths(null, &index, 1, &length), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_gather(null, &index, 1, &byte, &offsets), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_delete(null, &index, 1), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_compact(null), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_stats(null, &stats), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_sync(null), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_train_dict(null, &byte, &offsets, 1, 1024), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_set_maintenance_check(null, null, null), "store is NULL");
}

test "appends refuse NULLs, decreasing offsets, bad codecs, zero strides and huge counts, changing nothing" {
    var f: c.Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var data: [8]u8 = @splat(7);
    var first: u64 = 12345;
    try c.expectRefused(.invalid_argument, c.lx_store_append(s, &data, null, 1, 0, &first), "offsets is NULL");
    var two: [2]u64 = .{ 0, 4 };
    try c.expectRefused(.invalid_argument, c.lx_store_append(s, null, &two, 1, 0, &first), "data is NULL");
    var decreasing: [3]u64 = .{ 0, 6, 2 };
    try c.expectRefused(.invalid_argument, c.lx_store_append(s, &data, &decreasing, 2, 0, &first), "decrease");
    try c.expectRefused(.invalid_argument, c.lx_store_append(s, &data, &two, 1, 9, &first), "unknown codec");
    var offsets_huge: [1]u64 = .{0};
    try testing.expect(c.lx_store_append(s, &data, &offsets_huge, c.huge, 0, &first) != .ok);
    try testing.expect(std.mem.span(c.lx_last_error()).len > 0);
    try testing.expect(c.lx_store_append(s, &data, &offsets_huge, limits.record_count_max + 1, 0, &first) != .ok);
    var too_large: [2]u64 = .{ 0, limits.record_size_max + 1 };
    try c.expectRefused(.record_too_large, c.lx_store_append(s, &data, &too_large, 1, 0, &first), "");
    try c.expectRefused(.invalid_argument, c.lx_store_append_fixed(s, &data, 0, 1, 0, &first), "stride is 0");
    try c.expectRefused(.invalid_argument, c.lx_store_append_fixed(s, null, 4, 1, 0, &first), "data is NULL");
    try testing.expect(c.lx_store_append_fixed(s, &data, 4, c.huge, 0, &first) != .ok);
    try testing.expect(std.mem.span(c.lx_last_error()).len > 0);
    try testing.expect(c.lx_store_append_fixed(s, &data, c.huge / 2, 4, 0, &first) != .ok);
    try testing.expect(std.mem.span(c.lx_last_error()).len > 0);
    try testing.expectEqual(@as(u64, 12345), first);
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(s));
    // Zero records is a no-op, not an error.
    try testing.expectEqual(Status.ok, c.lx_store_append_fixed(s, null, 4, 0, 0, null));
    var one: [1]u64 = .{0};
    try testing.expectEqual(Status.ok, c.lx_store_append(s, null, &one, 0, 0, null));
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(s));
}

test "record offsets: running sums and rows in one call, bad arguments refused before writing" {
    var f: c.Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var indices: [4]i64 = .{ 3, 1, 0, 2 };
    var offsets: [5]u64 = @splat(77);
    var rows: [5]i32 = @splat(-1);
    try c.expectRefused(.invalid_argument, c.lx_store_record_offsets(null, &indices, 4, 2, &offsets, &rows), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_record_offsets(s, null, 4, 2, &offsets, &rows), "indices is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_record_offsets(s, &indices, 4, 2, null, &rows), "out_offsets is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_record_offsets(s, &indices, 4, 0, &offsets, &rows), "row_size is 0");
    try c.expectRefused(.invalid_argument, c.lx_store_record_offsets(s, &indices, c.huge, 2, &offsets, &rows), "overflow");
    var outside: [4]i64 = .{ 0, 1, 2, 10 };
    try c.expectRefused(.index_out_of_range, c.lx_store_record_offsets(s, &outside, 4, 2, &offsets, &rows), "out of range");
    try testing.expectEqualSlices(u64, &@as([5]u64, @splat(77)), &offsets);
    // Records of 4 bytes are not whole rows of 3: the store's bytes disagree with the rows.
    try c.expectRefused(.corrupt, c.lx_store_record_offsets(s, &indices, 4, 3, &offsets, &rows), "whole number of 3-byte rows");
    try testing.expectEqualSlices(i32, &@as([5]i32, @splat(-1)), &rows);

    try testing.expectEqual(Status.ok, c.lx_store_record_offsets(s, &indices, 4, 2, &offsets, &rows));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 12, 16 }, &offsets);
    try testing.expectEqualSlices(i32, &.{ 0, 2, 4, 6, 8 }, &rows);
    // Without rows, any row size; with no records, a lone 0 (indices may be NULL).
    offsets = @splat(77);
    try testing.expectEqual(Status.ok, c.lx_store_record_offsets(s, &indices, 2, 0, &offsets, null));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 77, 77 }, &offsets);
    try testing.expectEqual(Status.ok, c.lx_store_record_offsets(s, null, 0, 4, &offsets, &rows));
    try testing.expectEqual(@as(u64, 0), offsets[0]);
    try testing.expectEqual(@as(i32, 0), rows[0]);
    // The offsets are what lx_store_gather takes.
    var out: [16]u8 = undefined;
    try testing.expectEqual(Status.ok, c.lx_store_record_offsets(s, &indices, 4, 1, &offsets, null));
    try testing.expectEqual(Status.ok, c.lx_store_gather(s, &indices, 4, &out, &offsets));
    try testing.expectEqualSlices(u8, &.{ 3, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2 }, &out);

    // A view answers the same, with global indices.
    var view: ?*c.LxView = null;
    const store_list = [_]*c.LxStore{ s, s };
    try testing.expectEqual(Status.ok, c.lx_view_open(&store_list, 2, &view));
    defer c.lx_view_close(view);
    var global: [3]i64 = .{ 19, 0, 10 };
    var view_offsets: [4]u64 = undefined;
    var view_rows: [4]i32 = undefined;
    try testing.expectEqual(Status.ok, c.lx_view_record_offsets(view, &global, 3, 4, &view_offsets, &view_rows));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 12 }, &view_offsets);
    try testing.expectEqualSlices(i32, &.{ 0, 1, 2, 3 }, &view_rows);
    try c.expectRefused(.invalid_argument, c.lx_view_record_offsets(null, &global, 3, 4, &view_offsets, &view_rows), "view is NULL");
    var past: [1]i64 = .{20};
    try c.expectRefused(.index_out_of_range, c.lx_view_record_offsets(view, &past, 1, 4, &view_offsets, &view_rows), "out of range");
}

test "packed gathers: offsets, rows and records in one call; a small dst says what it needs; bad arguments refused" {
    var f: c.Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var indices: [4]i64 = .{ 3, 1, 0, 2 };
    var offsets: [5]u64 = @splat(77);
    var rows: [5]i32 = @splat(-1);
    var out: [20]u8 = @splat(0xEE);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed(null, &indices, 4, 2, &out, 20, &offsets, &rows), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed(s, null, 4, 2, &out, 20, &offsets, &rows), "indices is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed(s, &indices, 4, 2, &out, 20, null, &rows), "out_offsets is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed(s, &indices, 4, 0, &out, 20, &offsets, &rows), "row_size is 0");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed(s, &indices, 4, 2, null, 20, &offsets, &rows), "dst is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed(s, &indices, 4, 2, &out, c.huge, &offsets, &rows), "address space");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_packed(s, &indices, c.huge, 2, &out, 20, &offsets, &rows), "overflow");
    var outside: [4]i64 = .{ 0, 1, 2, 10 };
    try c.expectRefused(.index_out_of_range, c.lx_store_gather_packed(s, &outside, 4, 2, &out, 20, &offsets, &rows), "out of range");
    try testing.expectEqualSlices(u64, &@as([5]u64, @splat(77)), &offsets);
    try c.expectRefused(.corrupt, c.lx_store_gather_packed(s, &indices, 4, 3, &out, 20, &offsets, &rows), "whole number of 3-byte rows");
    try testing.expectEqualSlices(i32, &@as([5]i32, @splat(-1)), &rows);
    // Too small a dst: nothing copied, and the offsets say what it needs.
    try c.expectRefused(.size_mismatch, c.lx_store_gather_packed(s, &indices, 4, 2, &out, 15, &offsets, &rows), "need 16");
    try testing.expectEqual(@as(u64, 16), offsets[4]);
    try testing.expectEqualSlices(u8, &@as([20]u8, @splat(0xEE)), &out);

    try testing.expectEqual(Status.ok, c.lx_store_gather_packed(s, &indices, 4, 2, &out, 20, &offsets, &rows));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 12, 16 }, &offsets);
    try testing.expectEqualSlices(i32, &.{ 0, 2, 4, 6, 8 }, &rows);
    try testing.expectEqualSlices(u8, &.{ 3, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2, 0xEE, 0xEE, 0xEE, 0xEE }, &out);
    // No records: a lone 0 whatever the pointers; no rows asked: any row size.
    try testing.expectEqual(Status.ok, c.lx_store_gather_packed(s, null, 0, 4, null, 0, &offsets, &rows));
    try testing.expectEqual(@as(u64, 0), offsets[0]);
    try testing.expectEqual(@as(i32, 0), rows[0]);
    try testing.expectEqual(Status.ok, c.lx_store_gather_packed(s, &indices, 1, 0, &out, 4, &offsets, null));

    var view: ?*c.LxView = null;
    const store_list = [_]*c.LxStore{ s, s };
    try testing.expectEqual(Status.ok, c.lx_view_open(&store_list, 2, &view));
    defer c.lx_view_close(view);
    var global: [3]i64 = .{ 19, 0, 12 };
    var view_out: [12]u8 = undefined;
    try c.expectRefused(.size_mismatch, c.lx_view_gather_packed(view, &global, 3, 4, &view_out, 11, &offsets, &rows), "need 12");
    try testing.expectEqual(Status.ok, c.lx_view_gather_packed(view, &global, 3, 4, &view_out, 12, &offsets, &rows));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 12 }, offsets[0..4]);
    try testing.expectEqualSlices(i32, &.{ 0, 1, 2, 3 }, rows[0..4]);
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 2, 2, 2, 2 }, &view_out);
    try c.expectRefused(.invalid_argument, c.lx_view_gather_packed(null, &global, 3, 4, &view_out, 12, &offsets, &rows), "view is NULL");
    var past: [1]i64 = .{20};
    try c.expectRefused(.index_out_of_range, c.lx_view_gather_packed(view, &past, 1, 4, &view_out, 12, &offsets, &rows), "out of range");
}

/// The gathers a store and a view share (exports_reads.zig exports both from one function) and
/// the noun their messages name a NULL handle by.
const store_gathers = .{
    .noun = "store",
    .gather_fixed = c.lx_store_gather_fixed,
    .record_lengths = c.lx_store_record_lengths,
    .gather = c.lx_store_gather,
};
const view_gathers = .{
    .noun = "view",
    .gather_fixed = c.lx_view_gather_fixed,
    .record_lengths = c.lx_view_record_lengths,
    .gather = c.lx_view_gather,
};

/// Every bad argument to a handle's gathers (the fixture's records, through a store or a view)
/// is refused before a byte of the destination moves; then the same arguments done right.
fn expectGathersRefuse(handle: anytype, comptime calls: anytype) !void {
    const null_handle = calls.noun ++ " is NULL";
    var out: [16]u8 = @splat(0xEE);
    var indices: [4]i64 = .{ 3, 1, 0, 2 };
    try c.expectRefused(.invalid_argument, calls.gather_fixed(null, &indices, 4, &out, 4), null_handle);
    try c.expectRefused(.invalid_argument, calls.gather_fixed(handle, null, 4, &out, 4), "indices is NULL");
    try c.expectRefused(.invalid_argument, calls.gather_fixed(handle, &indices, 4, null, 4), "dst is NULL");
    try c.expectRefused(.invalid_argument, calls.gather_fixed(handle, &indices, 4, &out, 0), "stride is 0");
    try c.expectRefused(.invalid_argument, calls.gather_fixed(handle, &indices, c.huge / 2, &out, 4), "overflow");
    try c.expectRefused(.invalid_argument, calls.gather_fixed(handle, &indices, c.huge, &out, 1), "overflows the address space");
    var outside: [4]i64 = .{ 0, 1, 2, 10 };
    try c.expectRefused(.index_out_of_range, calls.gather_fixed(handle, &outside, 4, &out, 4), "out of range");
    var negative: [4]i64 = .{ 0, 1, 2, -1 };
    try c.expectRefused(.index_out_of_range, calls.gather_fixed(handle, &negative, 4, &out, 4), "out of range");
    try c.expectRefused(.size_mismatch, calls.gather_fixed(handle, &indices, 2, &out, 8), "destination slot");
    try testing.expectEqualSlices(u8, &@as([16]u8, @splat(0xEE)), &out);
    // Zero records touch nothing, whatever the pointers.
    try testing.expectEqual(Status.ok, calls.gather_fixed(handle, null, 0, null, 0));

    var lengths: [4]u64 = @splat(77);
    try c.expectRefused(.invalid_argument, calls.record_lengths(null, &indices, 4, &lengths), null_handle);
    try c.expectRefused(.invalid_argument, calls.record_lengths(handle, null, 4, &lengths), "indices is NULL");
    try c.expectRefused(.invalid_argument, calls.record_lengths(handle, &indices, 4, null), "out_lengths is NULL");
    try c.expectRefused(.invalid_argument, calls.record_lengths(handle, &indices, c.huge, &lengths), "overflows the address space");
    try c.expectRefused(.index_out_of_range, calls.record_lengths(handle, &outside, 4, &lengths), "out of range");
    try testing.expectEqualSlices(u64, &@as([4]u64, @splat(77)), &lengths);

    var offsets: [5]u64 = .{ 0, 4, 8, 12, 16 };
    try c.expectRefused(.invalid_argument, calls.gather(null, &indices, 4, &out, &offsets), null_handle);
    try c.expectRefused(.invalid_argument, calls.gather(handle, null, 4, &out, &offsets), "indices is NULL");
    try c.expectRefused(.invalid_argument, calls.gather(handle, &indices, 4, &out, null), "dst_offsets is NULL");
    try c.expectRefused(.invalid_argument, calls.gather(handle, &indices, 4, null, &offsets), "dst is NULL");
    // Refused before any offset is read: the offsets past the fifth are not the caller's.
    try c.expectRefused(.invalid_argument, calls.gather(handle, &indices, c.huge, &out, &offsets), "overflows the address space");
    var decreasing: [5]u64 = .{ 0, 4, 2, 12, 16 };
    try c.expectRefused(.invalid_argument, calls.gather(handle, &indices, 4, &out, &decreasing), "decrease");
    var uneven: [5]u64 = .{ 0, 4, 8, 12, 15 };
    try c.expectRefused(.size_mismatch, calls.gather(handle, &indices, 4, &out, &uneven), "destination slot");
    try c.expectRefused(.index_out_of_range, calls.gather(handle, &outside, 4, &out, &offsets), "out of range");
    try testing.expectEqualSlices(u8, &@as([16]u8, @splat(0xEE)), &out);

    // And the same arguments done right.
    try testing.expectEqual(Status.ok, calls.gather(handle, &indices, 4, &out, &offsets));
    try testing.expectEqualSlices(u8, &.{ 3, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2 }, &out);
}

test "gathers refuse NULLs, zero strides, overflowing counts, bad indices and wrong sizes before writing" {
    var f: c.Fixture = undefined;
    try f.init();
    defer f.deinit();
    try expectGathersRefuse(f.store, store_gathers);
}

test "view gathers refuse what store gathers refuse, overflowing counts included, before writing" {
    var f: c.Fixture = undefined;
    try f.init();
    defer f.deinit();
    var view: ?*c.LxView = null;
    const store_list = [_]*c.LxStore{f.store};
    try testing.expectEqual(Status.ok, c.lx_view_open(&store_list, 1, &view));
    defer c.lx_view_close(view);
    try testing.expectEqual(@as(u64, 10), c.lx_view_length(view.?));
    try testing.expectEqual(@as(u64, 0), c.lx_view_length(null));
    try expectGathersRefuse(view.?, view_gathers);
}

test "delete, stats, sync, compact and train_dict refuse bad arguments, changing nothing" {
    var f: c.Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var outside: [2]i64 = .{ 0, 10 };
    try c.expectRefused(.invalid_argument, c.lx_store_delete(s, null, 2), "indices is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_delete(s, &outside, c.huge), "overflow");
    try c.expectRefused(.index_out_of_range, c.lx_store_delete(s, &outside, 2), "out of range");
    try testing.expectEqual(Status.ok, c.lx_store_delete(s, null, 0));
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(s));
    try c.expectRefused(.invalid_argument, c.lx_store_stats(s, null), "out is NULL");

    var samples: [64]u8 = @splat(1);
    var offsets: [9]u64 = .{ 0, 8, 16, 24, 32, 40, 48, 56, 64 };
    try c.expectRefused(.invalid_argument, c.lx_store_train_dict(s, &samples, null, 8, 1024), "offsets is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_train_dict(s, null, &offsets, 8, 1024), "samples is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_train_dict(s, &samples, &offsets, c.huge, 1024), "samples; at most");
    try c.expectRefused(.invalid_argument, c.lx_store_train_dict(s, &samples, &offsets, 8, 0), "dict_size");
    try c.expectRefused(.invalid_argument, c.lx_store_train_dict(s, &samples, &offsets, 8, c.huge), "dict_size");
    try c.expectRefused(.invalid_argument, c.lx_store_train_dict(s, &samples, &offsets, 0, 1024), "at least");
    try testing.expectEqual(@as(c_int, 0), c.lx_store_has_dict(s));

    try testing.expectEqual(Status.ok, c.lx_store_sync(s));
    try testing.expectEqual(Status.ok, c.lx_store_compact(s));
    var stats: c.LxStats = undefined;
    try testing.expectEqual(Status.ok, c.lx_store_stats(s, &stats));
    try testing.expectEqual(c.LxStats{ .records = 10, .live_bytes = 40, .chunk_bytes = 40, .reclaimable = 0 }, stats);
}
