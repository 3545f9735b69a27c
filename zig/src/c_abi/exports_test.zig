//! Every `lx_*` export called through its C symbol with bad arguments: NULL pointers, zero
//! sizes, overflowing counts, decreasing offsets, close(NULL). Each must answer with a status
//! and a message (no panic, no crash), and refuse before any byte of the caller's moves.
const std = @import("std");
const testing = std.testing;
const Status = @import("../base/status.zig").Status;
const limits = @import("../base/limits.zig");
const abi_types = @import("abi_types.zig");
const abi_version = @import("exports.zig").abi_version;

const LxStore = opaque {};
const LxStats = extern struct { records: u64, live_bytes: u64, chunk_bytes: u64, reclaimable: u64 };

// Declared as a C caller sees loaderx.h; the linker resolves them to the export files' symbols.
extern fn lx_abi_version() u32;
extern fn lx_status_name(status: c_int) [*:0]const u8;
extern fn lx_last_error() [*:0]const u8;
extern fn lx_store_open(path: ?[*:0]const u8, flags: u32, out: ?*?*LxStore) Status;
extern fn lx_store_close(store: ?*LxStore) void;
extern fn lx_store_length(store: ?*const LxStore) u64;
extern fn lx_store_has_dict(store: ?*const LxStore) c_int;
extern fn lx_store_append(store: ?*LxStore, data: ?[*]const u8, offsets: ?[*]const u64, count: u64, codec: u8, out_first: ?*u64) Status;
extern fn lx_store_append_fixed(store: ?*LxStore, data: ?[*]const u8, stride: u64, count: u64, codec: u8, out_first: ?*u64) Status;
extern fn lx_store_gather_fixed(store: ?*LxStore, indices: ?[*]const i64, count: u64, dst: ?[*]u8, stride: u64) Status;
extern fn lx_store_record_lengths(store: ?*LxStore, indices: ?[*]const i64, count: u64, out_lengths: ?[*]u64) Status;
extern fn lx_store_record_offsets(store: ?*LxStore, indices: ?[*]const i64, count: u64, row_size: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status;
extern fn lx_store_gather_packed(store: ?*LxStore, indices: ?[*]const i64, count: u64, row_size: u64, dst: ?[*]u8, dst_capacity: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status;
extern fn lx_store_gather_padded(store: ?*LxStore, indices: ?[*]const i64, count: u64, row_size: u64, pad_row: ?[*]const u8, lengths: ?[*]const u64, length_count: u64, flags: u32, out: ?[*]u8, out_capacity: u64, mask: ?[*]u8, mask_capacity: u64, out_rows: ?[*]u64, out_length: ?*u64) Status;
extern fn lx_store_gather(store: ?*LxStore, indices: ?[*]const i64, count: u64, dst: ?[*]u8, dst_offsets: ?[*]const u64) Status;
const LxGatherStream = extern struct { store: ?*LxStore, out: ?[*]u8, record_size: u64, out_bytes: u64 };
extern fn lx_store_gather_streams(indices: ?[*]const i64, count: u64, streams: ?[*]const LxGatherStream, stream_count: u64) Status;
extern fn lx_store_delete(store: ?*LxStore, indices: ?[*]const i64, count: u64) Status;
extern fn lx_store_compact(store: ?*LxStore) Status;
extern fn lx_record_sums(buffer: ?[*]const u8, buffer_len: u64, starts: ?[*]const u64, stored_lengths: ?[*]const u32, logic_lengths: ?[*]const u32, codecs: ?[*]const u8, count: u64, out_sums: ?[*]u32) Status;
extern fn lx_batch_pad(values: ?[*]const u8, values_size: u64, cu_seqlens: ?[*]const i32, count: u64, row_size: u64, pad_row: ?[*]const u8, length: u64, out: ?[*]u8, out_capacity: u64, mask: ?[*]u8, mask_capacity: u64) Status;
extern fn lx_stores_delete(stores: ?[*]const ?*LxStore, count: u64, indices: ?[*]const i64, splits: ?[*]const u64) Status;
extern fn lx_store_stats(store: ?*LxStore, out: ?*LxStats) Status;
extern fn lx_store_sync(store: ?*LxStore) Status;
extern fn lx_store_train_dict(store: ?*LxStore, samples: ?[*]const u8, offsets: ?[*]const u64, count: u64, dict_size: u64) Status;
const MaintenanceCheck = *const fn (context: ?*anyopaque, operation: [*]const u8, operation_size: u64) callconv(.c) c_int;
extern fn lx_store_set_maintenance_check(store: ?*LxStore, function: ?MaintenanceCheck, context: ?*anyopaque) Status;
const LxSamplerRequest = extern struct { mode: u32, reserved: u32, length: u64, batch_size: u64, seed: u64, shard_index: u64, shard_count: u64 };
extern fn lx_sampler_batch(request: ?*const LxSamplerRequest, step: u64, out: ?[*]i64) Status;
extern fn lx_sampler_fill(mode: u32, length: u64, batch_size: u64, seed: u64, step: u64, shard_index: u64, shard_count: u64, out: ?[*]i64) Status;
const LxView = opaque {};
extern fn lx_view_open(stores: ?[*]const *LxStore, count: u64, out: ?*?*LxView) Status;
extern fn lx_view_close(view: ?*LxView) void;
extern fn lx_view_length(view: ?*const LxView) u64;
extern fn lx_view_gather_fixed(view: ?*LxView, indices: ?[*]const i64, count: u64, dst: ?[*]u8, stride: u64) Status;
extern fn lx_view_record_lengths(view: ?*LxView, indices: ?[*]const i64, count: u64, out_lengths: ?[*]u64) Status;
extern fn lx_view_record_offsets(view: ?*LxView, indices: ?[*]const i64, count: u64, row_size: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status;
extern fn lx_view_gather_packed(view: ?*LxView, indices: ?[*]const i64, count: u64, row_size: u64, dst: ?[*]u8, dst_capacity: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status;
extern fn lx_view_gather_padded(view: ?*LxView, indices: ?[*]const i64, count: u64, row_size: u64, pad_row: ?[*]const u8, lengths: ?[*]const u64, length_count: u64, flags: u32, out: ?[*]u8, out_capacity: u64, mask: ?[*]u8, mask_capacity: u64, out_rows: ?[*]u64, out_length: ?*u64) Status;
extern fn lx_view_gather(view: ?*LxView, indices: ?[*]const i64, count: u64, dst: ?[*]u8, dst_offsets: ?[*]const u64) Status;
extern fn lx_store_gather_arrays(store_low: u32, store_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, stride: u32, out_bytes: u32) Status;
extern fn lx_view_gather_arrays(view_low: u32, view_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, stride: u32, out_bytes: u32) Status;
extern fn lx_pool_set_policy(policy: u32) Status;
extern fn lx_pool_policy() u32;
extern fn lx_stores_set_policy(policy: u32) Status;
extern fn lx_stores_policy() u32;
const numpy_array = @import("../batch/numpy_array.zig");

/// A refusal: the expected status and a non-empty message naming the problem.
fn expectRefused(expected: Status, got: Status, fragment: []const u8) !void {
    try testing.expectEqual(expected, got);
    const message = std.mem.span(lx_last_error());
    if (std.mem.indexOf(u8, message, fragment) == null) {
        std.debug.print("message \"{s}\" lacks \"{s}\"\n", .{ message, fragment });
        return error.TestUnexpectedMessage;
    }
}

/// A store with records 0..9 of 4 bytes each (bytes i, i, i, i) in a fresh temporary folder.
const Fixture = struct {
    tmp: testing.TmpDir,
    path: [80:0]u8 = @splat(0),
    store: *LxStore,

    fn init(fixture: *Fixture) !void {
        fixture.* = .{ .tmp = testing.tmpDir(.{}), .store = undefined };
        _ = try std.fmt.bufPrint(&fixture.path, ".zig-cache/tmp/{s}", .{fixture.tmp.sub_path});
        var out: ?*LxStore = null;
        try testing.expectEqual(Status.ok, lx_store_open(&fixture.path, 1, &out));
        fixture.store = out.?;
        var data: [40]u8 = undefined;
        for (&data, 0..) |*b, i| b.* = @intCast(i / 4);
        var first: u64 = 99;
        try testing.expectEqual(Status.ok, lx_store_append_fixed(fixture.store, &data, 4, 10, 0, &first));
        try testing.expectEqual(@as(u64, 0), first);
    }

    fn deinit(fixture: *Fixture) void {
        lx_store_close(fixture.store);
        fixture.tmp.cleanup();
    }
};

const huge: u64 = std.math.maxInt(u64);

test "library calls: unknown statuses, close(NULL), queries on NULL" {
    try testing.expectEqualStrings("unknown", std.mem.span(lx_status_name(-1)));
    try testing.expectEqualStrings("unknown", std.mem.span(lx_status_name(std.math.maxInt(c_int))));
    lx_store_close(null);
    try testing.expectEqual(@as(u64, 0), lx_store_length(null));
    try testing.expectEqual(@as(c_int, 0), lx_store_has_dict(null));
}

test "every call refuses a handle that is not open: another kind, misaligned, zeroed, closed" {
    var f: Fixture = undefined;
    try f.init();
    var view: ?*LxView = null;
    const store_list = [_]*LxStore{f.store};
    try testing.expectEqual(Status.ok, lx_view_open(&store_list, 1, &view));
    var index: [1]i64 = .{0};
    var offsets: [2]u64 = .{ 0, 4 };
    var out: [4]u8 = @splat(0xEE);
    var lengths: [1]u64 = .{77};
    // A view passed as a store, a store as a view, memory that never held one, and a handle
    // one byte off: each refused with a message, nothing read through it, nothing written.
    const as_store: *LxStore = @ptrCast(view.?);
    const as_view: *LxView = @ptrCast(f.store);
    const StoreStruct = @import("../store/store.zig").Store;
    var zeros: [@sizeOf(StoreStruct) / 8 + 1]u64 align(@alignOf(StoreStruct)) = @splat(0);
    const fake: *LxStore = @ptrCast(&zeros);
    const off: *LxStore = @ptrFromInt(@intFromPtr(f.store) + 1);
    for ([_]*LxStore{ as_store, fake, off }) |bad| {
        try expectRefused(.invalid_argument, lx_store_gather_fixed(bad, &index, 1, &out, 4), "not an open lx_store");
        try expectRefused(.invalid_argument, lx_store_gather(bad, &index, 1, &out, &offsets), "not an open lx_store");
        try expectRefused(.invalid_argument, lx_store_record_lengths(bad, &index, 1, &lengths), "not an open lx_store");
        try expectRefused(.invalid_argument, lx_store_append_fixed(bad, &out, 4, 1, 0, null), "not an open lx_store");
        try expectRefused(.invalid_argument, lx_store_delete(bad, &index, 1), "not an open lx_store");
        try expectRefused(.invalid_argument, lx_store_compact(bad), "not an open lx_store");
        try testing.expectEqual(@as(u64, 0), lx_store_length(bad));
        try testing.expectEqual(@as(c_int, 0), lx_store_has_dict(bad));
        const one = [_]?*LxStore{bad};
        try expectRefused(.invalid_argument, lx_stores_delete(&one, 1, &index, &[_]u64{ 0, 1 }), "store 0 is not an open lx_store");
        var other: ?*LxView = null;
        const list = [_]*LxStore{bad};
        try expectRefused(.invalid_argument, lx_view_open(&list, 1, &other), "store 0 is not an open lx_store");
        lx_store_close(bad); // does nothing
    }
    try expectRefused(.invalid_argument, lx_view_gather_fixed(as_view, &index, 1, &out, 4), "not an open lx_view");
    try expectRefused(.invalid_argument, lx_view_gather(as_view, &index, 1, &out, &offsets), "not an open lx_view");
    try expectRefused(.invalid_argument, lx_view_record_lengths(as_view, &index, 1, &lengths), "not an open lx_view");
    try testing.expectEqual(@as(u64, 0), lx_view_length(as_view));
    lx_view_close(as_view); // does nothing
    try testing.expectEqualSlices(u8, &@as([4]u8, @splat(0xEE)), &out);
    try testing.expectEqual(@as(u64, 77), lengths[0]);
    for (zeros) |word| try testing.expectEqual(@as(u64, 0), word);
    // Both still work after all that.
    try testing.expectEqual(Status.ok, lx_view_gather_fixed(view, &index, 1, &out, 4));
    try testing.expectEqual(@as(u64, 10), lx_store_length(f.store));
    // A store closed under a view of it (the caller broke the borrow): the view refuses.
    var g: Fixture = undefined;
    try g.init();
    var orphan: ?*LxView = null;
    const orphan_list = [_]*LxStore{g.store};
    try testing.expectEqual(Status.ok, lx_view_open(&orphan_list, 1, &orphan));
    lx_store_close(g.store);
    try testing.expectEqual(@as(u64, 0), lx_view_length(orphan));
    try expectRefused(.invalid_argument, lx_view_gather_fixed(orphan, &index, 1, &out, 4), "closed before the view");
    try expectRefused(.invalid_argument, lx_view_record_lengths(orphan, &index, 1, &lengths), "closed before the view");
    try testing.expectEqual(@as(u64, 77), lengths[0]);
    lx_view_close(orphan);
    g.tmp.cleanup();
    // Closed: the view, then the store, each twice. A second close does nothing (it freed the
    // handle a second time before); so does any call in between.
    lx_view_close(view);
    lx_view_close(view);
    try testing.expectEqual(@as(u64, 0), lx_view_length(view));
    lx_store_close(f.store);
    lx_store_close(f.store);
    try testing.expectEqual(@as(u64, 0), lx_store_length(f.store));
    f.tmp.cleanup();
}

test "lx_store_open refuses NULLs, an empty path, unknown flags and a missing store" {
    var out: ?*LxStore = null;
    try expectRefused(.invalid_argument, lx_store_open(null, 0, &out), "path is NULL");
    try testing.expectEqual(@as(?*LxStore, null), out);
    try expectRefused(.invalid_argument, lx_store_open("x", 0, null), "out is NULL");
    try expectRefused(.invalid_argument, lx_store_open("", 0, &out), "path is empty");
    try expectRefused(.invalid_argument, lx_store_open(".", 0x80, &out), "unknown flags");
    try expectRefused(.not_found, lx_store_open("/nonexistent/loaderx/store", 0, &out), "no such folder");
    try testing.expectEqual(@as(?*LxStore, null), out);
}

test "every store call refuses a NULL store" {
    var index: [1]i64 = .{0};
    var offsets: [2]u64 = .{ 0, 1 };
    var byte: [1]u8 = .{0};
    var stats: LxStats = undefined;
    var length: [1]u64 = undefined;
    try expectRefused(.invalid_argument, lx_store_append(null, &byte, &offsets, 1, 0, null), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_append_fixed(null, &byte, 1, 1, 0, null), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_gather_fixed(null, &index, 1, &byte, 1), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_record_lengths(null, &index, 1, &length), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_gather(null, &index, 1, &byte, &offsets), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_delete(null, &index, 1), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_compact(null), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_stats(null, &stats), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_sync(null), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_train_dict(null, &byte, &offsets, 1, 1024), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_set_maintenance_check(null, null, null), "store is NULL");
}

test "appends refuse NULLs, decreasing offsets, bad codecs, zero strides and huge counts, changing nothing" {
    var f: Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var data: [8]u8 = @splat(7);
    var first: u64 = 12345;
    try expectRefused(.invalid_argument, lx_store_append(s, &data, null, 1, 0, &first), "offsets is NULL");
    var two: [2]u64 = .{ 0, 4 };
    try expectRefused(.invalid_argument, lx_store_append(s, null, &two, 1, 0, &first), "data is NULL");
    var decreasing: [3]u64 = .{ 0, 6, 2 };
    try expectRefused(.invalid_argument, lx_store_append(s, &data, &decreasing, 2, 0, &first), "decrease");
    try expectRefused(.invalid_argument, lx_store_append(s, &data, &two, 1, 9, &first), "unknown codec");
    var offsets_huge: [1]u64 = .{0};
    try testing.expect(lx_store_append(s, &data, &offsets_huge, huge, 0, &first) != .ok);
    try testing.expect(std.mem.span(lx_last_error()).len > 0);
    try testing.expect(lx_store_append(s, &data, &offsets_huge, limits.record_count_max + 1, 0, &first) != .ok);
    var too_large: [2]u64 = .{ 0, limits.record_size_max + 1 };
    try expectRefused(.record_too_large, lx_store_append(s, &data, &too_large, 1, 0, &first), "");
    try expectRefused(.invalid_argument, lx_store_append_fixed(s, &data, 0, 1, 0, &first), "stride is 0");
    try expectRefused(.invalid_argument, lx_store_append_fixed(s, null, 4, 1, 0, &first), "data is NULL");
    try testing.expect(lx_store_append_fixed(s, &data, 4, huge, 0, &first) != .ok);
    try testing.expect(std.mem.span(lx_last_error()).len > 0);
    try testing.expect(lx_store_append_fixed(s, &data, huge / 2, 4, 0, &first) != .ok);
    try testing.expect(std.mem.span(lx_last_error()).len > 0);
    try testing.expectEqual(@as(u64, 12345), first);
    try testing.expectEqual(@as(u64, 10), lx_store_length(s));
    // Zero records is a no-op, not an error.
    try testing.expectEqual(Status.ok, lx_store_append_fixed(s, null, 4, 0, 0, null));
    var one: [1]u64 = .{0};
    try testing.expectEqual(Status.ok, lx_store_append(s, null, &one, 0, 0, null));
    try testing.expectEqual(@as(u64, 10), lx_store_length(s));
}

test "record offsets: running sums and rows in one call, bad arguments refused before writing" {
    var f: Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var indices: [4]i64 = .{ 3, 1, 0, 2 };
    var offsets: [5]u64 = @splat(77);
    var rows: [5]i32 = @splat(-1);
    try expectRefused(.invalid_argument, lx_store_record_offsets(null, &indices, 4, 2, &offsets, &rows), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_record_offsets(s, null, 4, 2, &offsets, &rows), "indices is NULL");
    try expectRefused(.invalid_argument, lx_store_record_offsets(s, &indices, 4, 2, null, &rows), "out_offsets is NULL");
    try expectRefused(.invalid_argument, lx_store_record_offsets(s, &indices, 4, 0, &offsets, &rows), "row_size is 0");
    try expectRefused(.invalid_argument, lx_store_record_offsets(s, &indices, huge, 2, &offsets, &rows), "overflow");
    var outside: [4]i64 = .{ 0, 1, 2, 10 };
    try expectRefused(.index_out_of_range, lx_store_record_offsets(s, &outside, 4, 2, &offsets, &rows), "out of range");
    try testing.expectEqualSlices(u64, &@as([5]u64, @splat(77)), &offsets);
    // Records of 4 bytes are not whole rows of 3: the store's bytes disagree with the rows.
    try expectRefused(.corrupt, lx_store_record_offsets(s, &indices, 4, 3, &offsets, &rows), "whole number of 3-byte rows");
    try testing.expectEqualSlices(i32, &@as([5]i32, @splat(-1)), &rows);

    try testing.expectEqual(Status.ok, lx_store_record_offsets(s, &indices, 4, 2, &offsets, &rows));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 12, 16 }, &offsets);
    try testing.expectEqualSlices(i32, &.{ 0, 2, 4, 6, 8 }, &rows);
    // Without rows, any row size; with no records, a lone 0 (indices may be NULL).
    offsets = @splat(77);
    try testing.expectEqual(Status.ok, lx_store_record_offsets(s, &indices, 2, 0, &offsets, null));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 77, 77 }, &offsets);
    try testing.expectEqual(Status.ok, lx_store_record_offsets(s, null, 0, 4, &offsets, &rows));
    try testing.expectEqual(@as(u64, 0), offsets[0]);
    try testing.expectEqual(@as(i32, 0), rows[0]);
    // The offsets are what lx_store_gather takes.
    var out: [16]u8 = undefined;
    try testing.expectEqual(Status.ok, lx_store_record_offsets(s, &indices, 4, 1, &offsets, null));
    try testing.expectEqual(Status.ok, lx_store_gather(s, &indices, 4, &out, &offsets));
    try testing.expectEqualSlices(u8, &.{ 3, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2 }, &out);

    // A view answers the same, with global indices.
    var view: ?*LxView = null;
    const store_list = [_]*LxStore{ s, s };
    try testing.expectEqual(Status.ok, lx_view_open(&store_list, 2, &view));
    defer lx_view_close(view);
    var global: [3]i64 = .{ 19, 0, 10 };
    var view_offsets: [4]u64 = undefined;
    var view_rows: [4]i32 = undefined;
    try testing.expectEqual(Status.ok, lx_view_record_offsets(view, &global, 3, 4, &view_offsets, &view_rows));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 12 }, &view_offsets);
    try testing.expectEqualSlices(i32, &.{ 0, 1, 2, 3 }, &view_rows);
    try expectRefused(.invalid_argument, lx_view_record_offsets(null, &global, 3, 4, &view_offsets, &view_rows), "view is NULL");
    var past: [1]i64 = .{20};
    try expectRefused(.index_out_of_range, lx_view_record_offsets(view, &past, 1, 4, &view_offsets, &view_rows), "out of range");
}

test "packed gathers: offsets, rows and records in one call; a small dst says what it needs; bad arguments refused" {
    var f: Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var indices: [4]i64 = .{ 3, 1, 0, 2 };
    var offsets: [5]u64 = @splat(77);
    var rows: [5]i32 = @splat(-1);
    var out: [20]u8 = @splat(0xEE);
    try expectRefused(.invalid_argument, lx_store_gather_packed(null, &indices, 4, 2, &out, 20, &offsets, &rows), "store is NULL");
    try expectRefused(.invalid_argument, lx_store_gather_packed(s, null, 4, 2, &out, 20, &offsets, &rows), "indices is NULL");
    try expectRefused(.invalid_argument, lx_store_gather_packed(s, &indices, 4, 2, &out, 20, null, &rows), "out_offsets is NULL");
    try expectRefused(.invalid_argument, lx_store_gather_packed(s, &indices, 4, 0, &out, 20, &offsets, &rows), "row_size is 0");
    try expectRefused(.invalid_argument, lx_store_gather_packed(s, &indices, 4, 2, null, 20, &offsets, &rows), "dst is NULL");
    try expectRefused(.invalid_argument, lx_store_gather_packed(s, &indices, 4, 2, &out, huge, &offsets, &rows), "address space");
    try expectRefused(.invalid_argument, lx_store_gather_packed(s, &indices, huge, 2, &out, 20, &offsets, &rows), "overflow");
    var outside: [4]i64 = .{ 0, 1, 2, 10 };
    try expectRefused(.index_out_of_range, lx_store_gather_packed(s, &outside, 4, 2, &out, 20, &offsets, &rows), "out of range");
    try testing.expectEqualSlices(u64, &@as([5]u64, @splat(77)), &offsets);
    try expectRefused(.corrupt, lx_store_gather_packed(s, &indices, 4, 3, &out, 20, &offsets, &rows), "whole number of 3-byte rows");
    try testing.expectEqualSlices(i32, &@as([5]i32, @splat(-1)), &rows);
    // Too small a dst: nothing copied, and the offsets say what it needs.
    try expectRefused(.size_mismatch, lx_store_gather_packed(s, &indices, 4, 2, &out, 15, &offsets, &rows), "need 16");
    try testing.expectEqual(@as(u64, 16), offsets[4]);
    try testing.expectEqualSlices(u8, &@as([20]u8, @splat(0xEE)), &out);

    try testing.expectEqual(Status.ok, lx_store_gather_packed(s, &indices, 4, 2, &out, 20, &offsets, &rows));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 12, 16 }, &offsets);
    try testing.expectEqualSlices(i32, &.{ 0, 2, 4, 6, 8 }, &rows);
    try testing.expectEqualSlices(u8, &.{ 3, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2, 0xEE, 0xEE, 0xEE, 0xEE }, &out);
    // No records: a lone 0 whatever the pointers; no rows asked: any row size.
    try testing.expectEqual(Status.ok, lx_store_gather_packed(s, null, 0, 4, null, 0, &offsets, &rows));
    try testing.expectEqual(@as(u64, 0), offsets[0]);
    try testing.expectEqual(@as(i32, 0), rows[0]);
    try testing.expectEqual(Status.ok, lx_store_gather_packed(s, &indices, 1, 0, &out, 4, &offsets, null));

    var view: ?*LxView = null;
    const store_list = [_]*LxStore{ s, s };
    try testing.expectEqual(Status.ok, lx_view_open(&store_list, 2, &view));
    defer lx_view_close(view);
    var global: [3]i64 = .{ 19, 0, 12 };
    var view_out: [12]u8 = undefined;
    try expectRefused(.size_mismatch, lx_view_gather_packed(view, &global, 3, 4, &view_out, 11, &offsets, &rows), "need 12");
    try testing.expectEqual(Status.ok, lx_view_gather_packed(view, &global, 3, 4, &view_out, 12, &offsets, &rows));
    try testing.expectEqualSlices(u64, &.{ 0, 4, 8, 12 }, offsets[0..4]);
    try testing.expectEqualSlices(i32, &.{ 0, 1, 2, 3 }, rows[0..4]);
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 2, 2, 2, 2 }, &view_out);
    try expectRefused(.invalid_argument, lx_view_gather_packed(null, &global, 3, 4, &view_out, 12, &offsets, &rows), "view is NULL");
    var past: [1]i64 = .{20};
    try expectRefused(.index_out_of_range, lx_view_gather_packed(view, &past, 1, 4, &view_out, 12, &offsets, &rows), "out of range");
}

/// The gathers a store and a view share (exports_reads.zig exports both from one function) and
/// the noun their messages name a NULL handle by.
const store_gathers = .{
    .noun = "store",
    .gather_fixed = lx_store_gather_fixed,
    .record_lengths = lx_store_record_lengths,
    .gather = lx_store_gather,
};
const view_gathers = .{
    .noun = "view",
    .gather_fixed = lx_view_gather_fixed,
    .record_lengths = lx_view_record_lengths,
    .gather = lx_view_gather,
};

/// Every bad argument to a handle's gathers (the fixture's records, through a store or a view)
/// is refused before a byte of the destination moves; then the same arguments done right.
fn expectGathersRefuse(handle: anytype, comptime calls: anytype) !void {
    const null_handle = calls.noun ++ " is NULL";
    var out: [16]u8 = @splat(0xEE);
    var indices: [4]i64 = .{ 3, 1, 0, 2 };
    try expectRefused(.invalid_argument, calls.gather_fixed(null, &indices, 4, &out, 4), null_handle);
    try expectRefused(.invalid_argument, calls.gather_fixed(handle, null, 4, &out, 4), "indices is NULL");
    try expectRefused(.invalid_argument, calls.gather_fixed(handle, &indices, 4, null, 4), "dst is NULL");
    try expectRefused(.invalid_argument, calls.gather_fixed(handle, &indices, 4, &out, 0), "stride is 0");
    try expectRefused(.invalid_argument, calls.gather_fixed(handle, &indices, huge / 2, &out, 4), "overflow");
    try expectRefused(.invalid_argument, calls.gather_fixed(handle, &indices, huge, &out, 1), "overflows the address space");
    var outside: [4]i64 = .{ 0, 1, 2, 10 };
    try expectRefused(.index_out_of_range, calls.gather_fixed(handle, &outside, 4, &out, 4), "out of range");
    var negative: [4]i64 = .{ 0, 1, 2, -1 };
    try expectRefused(.index_out_of_range, calls.gather_fixed(handle, &negative, 4, &out, 4), "out of range");
    try expectRefused(.size_mismatch, calls.gather_fixed(handle, &indices, 2, &out, 8), "destination slot");
    try testing.expectEqualSlices(u8, &@as([16]u8, @splat(0xEE)), &out);
    // Zero records touch nothing, whatever the pointers.
    try testing.expectEqual(Status.ok, calls.gather_fixed(handle, null, 0, null, 0));

    var lengths: [4]u64 = @splat(77);
    try expectRefused(.invalid_argument, calls.record_lengths(null, &indices, 4, &lengths), null_handle);
    try expectRefused(.invalid_argument, calls.record_lengths(handle, null, 4, &lengths), "indices is NULL");
    try expectRefused(.invalid_argument, calls.record_lengths(handle, &indices, 4, null), "out_lengths is NULL");
    try expectRefused(.invalid_argument, calls.record_lengths(handle, &indices, huge, &lengths), "overflows the address space");
    try expectRefused(.index_out_of_range, calls.record_lengths(handle, &outside, 4, &lengths), "out of range");
    try testing.expectEqualSlices(u64, &@as([4]u64, @splat(77)), &lengths);

    var offsets: [5]u64 = .{ 0, 4, 8, 12, 16 };
    try expectRefused(.invalid_argument, calls.gather(null, &indices, 4, &out, &offsets), null_handle);
    try expectRefused(.invalid_argument, calls.gather(handle, null, 4, &out, &offsets), "indices is NULL");
    try expectRefused(.invalid_argument, calls.gather(handle, &indices, 4, &out, null), "dst_offsets is NULL");
    try expectRefused(.invalid_argument, calls.gather(handle, &indices, 4, null, &offsets), "dst is NULL");
    // Refused before any offset is read: the offsets past the fifth are not the caller's.
    try expectRefused(.invalid_argument, calls.gather(handle, &indices, huge, &out, &offsets), "overflows the address space");
    var decreasing: [5]u64 = .{ 0, 4, 2, 12, 16 };
    try expectRefused(.invalid_argument, calls.gather(handle, &indices, 4, &out, &decreasing), "decrease");
    var uneven: [5]u64 = .{ 0, 4, 8, 12, 15 };
    try expectRefused(.size_mismatch, calls.gather(handle, &indices, 4, &out, &uneven), "destination slot");
    try expectRefused(.index_out_of_range, calls.gather(handle, &outside, 4, &out, &offsets), "out of range");
    try testing.expectEqualSlices(u8, &@as([16]u8, @splat(0xEE)), &out);

    // And the same arguments done right.
    try testing.expectEqual(Status.ok, calls.gather(handle, &indices, 4, &out, &offsets));
    try testing.expectEqualSlices(u8, &.{ 3, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2 }, &out);
}

test "gathers refuse NULLs, zero strides, overflowing counts, bad indices and wrong sizes before writing" {
    var f: Fixture = undefined;
    try f.init();
    defer f.deinit();
    try expectGathersRefuse(f.store, store_gathers);
}

test "view gathers refuse what store gathers refuse, overflowing counts included, before writing" {
    var f: Fixture = undefined;
    try f.init();
    defer f.deinit();
    var view: ?*LxView = null;
    const store_list = [_]*LxStore{f.store};
    try testing.expectEqual(Status.ok, lx_view_open(&store_list, 1, &view));
    defer lx_view_close(view);
    try testing.expectEqual(@as(u64, 10), lx_view_length(view.?));
    try testing.expectEqual(@as(u64, 0), lx_view_length(null));
    try expectGathersRefuse(view.?, view_gathers);
}

test "delete, stats, sync, compact and train_dict refuse bad arguments, changing nothing" {
    var f: Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var outside: [2]i64 = .{ 0, 10 };
    try expectRefused(.invalid_argument, lx_store_delete(s, null, 2), "indices is NULL");
    try expectRefused(.invalid_argument, lx_store_delete(s, &outside, huge), "overflow");
    try expectRefused(.index_out_of_range, lx_store_delete(s, &outside, 2), "out of range");
    try testing.expectEqual(Status.ok, lx_store_delete(s, null, 0));
    try testing.expectEqual(@as(u64, 10), lx_store_length(s));
    try expectRefused(.invalid_argument, lx_store_stats(s, null), "out is NULL");

    var samples: [64]u8 = @splat(1);
    var offsets: [9]u64 = .{ 0, 8, 16, 24, 32, 40, 48, 56, 64 };
    try expectRefused(.invalid_argument, lx_store_train_dict(s, &samples, null, 8, 1024), "offsets is NULL");
    try expectRefused(.invalid_argument, lx_store_train_dict(s, null, &offsets, 8, 1024), "samples is NULL");
    try expectRefused(.invalid_argument, lx_store_train_dict(s, &samples, &offsets, huge, 1024), "samples; at most");
    try expectRefused(.invalid_argument, lx_store_train_dict(s, &samples, &offsets, 8, 0), "dict_size");
    try expectRefused(.invalid_argument, lx_store_train_dict(s, &samples, &offsets, 8, huge), "dict_size");
    try expectRefused(.invalid_argument, lx_store_train_dict(s, &samples, &offsets, 0, 1024), "at least");
    try testing.expectEqual(@as(c_int, 0), lx_store_has_dict(s));

    try testing.expectEqual(Status.ok, lx_store_sync(s));
    try testing.expectEqual(Status.ok, lx_store_compact(s));
    var stats: LxStats = undefined;
    try testing.expectEqual(Status.ok, lx_store_stats(s, &stats));
    try testing.expectEqual(LxStats{ .records = 10, .live_bytes = 40, .chunk_bytes = 40, .reclaimable = 0 }, stats);
}

/// What a maintenance check saw, and whether it refuses.
const CheckRecord = struct {
    refuse: bool,
    calls: u32 = 0,
    operation: [16]u8 = @splat(0),
    operation_size: u64 = 0,

    fn check(context: ?*anyopaque, operation: [*]const u8, operation_size: u64) callconv(.c) c_int {
        const record: *CheckRecord = @ptrCast(@alignCast(context.?));
        record.calls += 1;
        record.operation_size = operation_size;
        @memcpy(record.operation[0..@intCast(operation_size)], operation[0..@intCast(operation_size)]);
        return @intFromBool(record.refuse);
    }

    fn saw(record: *const CheckRecord, operation: []const u8) bool {
        return std.mem.eql(u8, record.operation[0..@intCast(record.operation_size)], operation);
    }
};

test "a maintenance check runs in delete, compact and train_dict; one that refuses changes nothing" {
    var f: Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var record: CheckRecord = .{ .refuse = true };
    try testing.expectEqual(Status.ok, lx_store_set_maintenance_check(s, CheckRecord.check, &record));
    var index: [1]i64 = .{0};
    try expectRefused(.store_locked, lx_store_delete(s, &index, 1), "delete refused by the caller's maintenance check");
    try testing.expect(record.saw("delete"));
    try expectRefused(.store_locked, lx_store_compact(s), "compact refused");
    try testing.expect(record.saw("compact"));
    var samples: [64]u8 = @splat(1);
    var offsets: [9]u64 = .{ 0, 8, 16, 24, 32, 40, 48, 56, 64 };
    try expectRefused(.store_locked, lx_store_train_dict(s, &samples, &offsets, 8, 1024), "train_dict refused");
    try testing.expect(record.saw("train_dict"));
    try testing.expectEqual(@as(u32, 3), record.calls);
    try testing.expectEqual(@as(u64, 10), lx_store_length(s));
    try testing.expectEqual(@as(c_int, 0), lx_store_has_dict(s));
    // A refused call released the store: another handle opens it, and the next call runs.
    var other: ?*LxStore = null;
    try testing.expectEqual(Status.ok, lx_store_open(&f.path, 0, &other));
    lx_store_close(other);
    record.refuse = false;
    try testing.expectEqual(Status.ok, lx_store_delete(s, &index, 1));
    try testing.expectEqual(@as(u32, 4), record.calls);
    try testing.expectEqual(@as(u64, 9), lx_store_length(s));
    var last: [4]u8 = undefined;
    try testing.expectEqual(Status.ok, lx_store_gather_fixed(s, &index, 1, &last, 4));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9 }, &last); // swap-last: record 9 moved to 0
    // A NULL function removes the check.
    record.refuse = true;
    try testing.expectEqual(Status.ok, lx_store_set_maintenance_check(s, null, null));
    try testing.expectEqual(Status.ok, lx_store_compact(s));
    try testing.expectEqual(@as(u32, 4), record.calls);
}

test "lx_stores_delete refuses bad arguments, and a store open elsewhere refuses it all" {
    var first: Fixture = undefined;
    try first.init();
    defer first.deinit();
    var second: Fixture = undefined;
    try second.init();
    defer second.deinit();
    var both = [_]?*LxStore{ first.store, second.store };
    var indices = [_]i64{ 9, 0, 4 };
    var splits = [_]u64{ 0, 1, 3 };
    try expectRefused(.invalid_argument, lx_stores_delete(&both, 0, &indices, &splits), "count is 0");
    try expectRefused(.invalid_argument, lx_stores_delete(&both, huge, &indices, &splits), "count is");
    try expectRefused(.invalid_argument, lx_stores_delete(null, 2, &indices, &splits), "stores is NULL");
    try expectRefused(.invalid_argument, lx_stores_delete(&both, 2, &indices, null), "splits is NULL");
    try expectRefused(.invalid_argument, lx_stores_delete(&both, 2, null, &splits), "indices is NULL");
    var with_null = [_]?*LxStore{ first.store, null };
    try expectRefused(.invalid_argument, lx_stores_delete(&with_null, 2, &indices, &splits), "store 1 is NULL");
    var twice = [_]?*LxStore{ first.store, first.store };
    try expectRefused(.invalid_argument, lx_stores_delete(&twice, 2, &indices, &splits), "appears twice");
    var not_from_zero = [_]u64{ 1, 1, 3 };
    try expectRefused(.invalid_argument, lx_stores_delete(&both, 2, &indices, &not_from_zero), "splits[0]");
    var decreasing = [_]u64{ 0, 2, 1 };
    try expectRefused(.invalid_argument, lx_stores_delete(&both, 2, &indices, &decreasing), "is below");
    var overflowing = [_]u64{ 0, 1, huge };
    try expectRefused(.invalid_argument, lx_stores_delete(&both, 2, &indices, &overflowing), "overflow");
    var outside = [_]i64{ 9, 0, 10 };
    try expectRefused(.index_out_of_range, lx_stores_delete(&both, 2, &outside, &splits), "out of range");
    try testing.expectEqual(@as(u64, 10), lx_store_length(first.store));
    try testing.expectEqual(@as(u64, 10), lx_store_length(second.store));

    // A second handle on the second store: the whole delete is refused, the first store included.
    var other: ?*LxStore = null;
    try testing.expectEqual(Status.ok, lx_store_open(&second.path, 0, &other));
    try expectRefused(.store_locked, lx_stores_delete(&both, 2, &indices, &splits), "needs the store to itself");
    try testing.expectEqual(@as(u64, 10), lx_store_length(first.store));
    try testing.expectEqual(@as(u64, 10), lx_store_length(second.store));
    lx_store_close(other);

    try testing.expectEqual(Status.ok, lx_stores_delete(&both, 2, &indices, &splits));
    try testing.expectEqual(@as(u64, 9), lx_store_length(first.store));
    try testing.expectEqual(@as(u64, 8), lx_store_length(second.store));
    // Swap-last, highest target first: record 4 took record 9's bytes, then record 0 took 8's.
    var got: [8]u8 = undefined;
    var picks = [_]i64{ 0, 4 };
    try testing.expectEqual(Status.ok, lx_store_gather_fixed(second.store, &picks, 2, &got, 4));
    try testing.expectEqualSlices(u8, &.{ 8, 8, 8, 8, 9, 9, 9, 9 }, &got);
    try testing.expectEqual(Status.ok, lx_store_gather_fixed(first.store, &picks, 2, &got, 4));
    try testing.expectEqualSlices(u8, &.{ 0, 0, 0, 0, 4, 4, 4, 4 }, &got);
}

test "lx_sampler_fill refuses every bad argument with a message" {
    var out: [4]i64 = @splat(-5);
    try expectRefused(.invalid_argument, lx_sampler_fill(0, 10, 4, 0, 0, 0, 1, null), "NULL");
    try expectRefused(.invalid_argument, lx_sampler_fill(9, 10, 4, 0, 0, 0, 1, &out), "unknown sampler mode");
    try expectRefused(.invalid_argument, lx_sampler_fill(0, 0, 4, 0, 0, 0, 1, &out), "length is 0");
    try expectRefused(.invalid_argument, lx_sampler_fill(0, huge, 4, 0, 0, 0, 1, &out), "exceeds");
    try expectRefused(.invalid_argument, lx_sampler_fill(0, 10, 0, 0, 0, 0, 1, &out), "batch_size is 0");
    try expectRefused(.invalid_argument, lx_sampler_fill(0, 10, 4, 0, 0, 0, 0, &out), "shard_count is 0");
    try expectRefused(.invalid_argument, lx_sampler_fill(0, 10, 4, 0, 0, 3, 3, &out), "shard_index");
    try expectRefused(.invalid_argument, lx_sampler_fill(1, 10, huge, 0, 0, 0, 2, &out), "overflows");
    var request: LxSamplerRequest = .{ .mode = 0, .reserved = 0, .length = 10, .batch_size = 4, .seed = 0, .shard_index = 0, .shard_count = 1 };
    try expectRefused(.invalid_argument, lx_sampler_batch(null, 0, &out), "request is NULL");
    try expectRefused(.invalid_argument, lx_sampler_batch(&request, 0, null), "NULL");
    request.reserved = 1;
    try expectRefused(.invalid_argument, lx_sampler_batch(&request, 0, &out), "reserved");
    request.reserved = 0;
    request.batch_size = 0;
    try expectRefused(.invalid_argument, lx_sampler_batch(&request, 0, &out), "batch_size is 0");
    try testing.expectEqualSlices(i64, &@as([4]i64, @splat(-5)), &out);
}

/// The halves of a pointer, as the Python binding passes them.
fn halves(pointer: anytype) [2]u32 {
    const address: u64 = @intFromPtr(pointer);
    return .{ @truncate(address), @intCast(address >> 32) };
}

/// NumPy's fields of a one-dimensional array of dims[0] items of strides[0] bytes at `data`.
fn arrayFields(data: [*]u8, dims: *const [1]isize, strides: *const [1]isize, flags: c_int) numpy_array.Fields {
    return .{ .data = data, .nd = 1, .dimensions = dims, .strides = strides, .base = null, .descr = null, .flags = flags };
}

test "the array gathers copy what gather_fixed copies, and refuse bad arrays before writing" {
    var fixture: Fixture = undefined;
    try fixture.init();
    defer fixture.deinit();
    var store_list = [_]*LxStore{fixture.store};
    var view: ?*LxView = null;
    try testing.expectEqual(Status.ok, lx_view_open(&store_list, 1, &view));
    defer lx_view_close(view);
    const vector_flags = numpy_array.flag_c_contiguous | numpy_array.flag_aligned;
    const out_flags = vector_flags | numpy_array.flag_writeable;
    var indices = [_]i64{ 9, 0, 4 };
    const index_dims = [_]isize{3};
    var index_fields = arrayFields(@ptrCast(&indices), &index_dims, &.{8}, vector_flags);
    var out: [12]u8 = @splat(0xEE);
    var out_dims = [_]isize{3};
    var out_fields = arrayFields(&out, &out_dims, &.{4}, out_flags);
    const s = halves(fixture.store);
    const v = halves(view.?);
    const i = halves(&index_fields);
    const o = halves(&out_fields);
    try testing.expectEqual(Status.ok, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 4, 4, 4, 4 }, &out);
    out = @splat(0xEE);
    try testing.expectEqual(Status.ok, lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 0));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 4, 4, 4, 4 }, &out);

    // Every refusal leaves out as it was.
    out = @splat(0xEE);
    try expectRefused(.invalid_argument, lx_store_gather_arrays(0, 0, i[0], i[1], o[0], o[1], 4, 0), "store is NULL");
    try expectRefused(.invalid_argument, lx_view_gather_arrays(v[0] + 1, v[1], i[0], i[1], o[0], o[1], 4, 0), "misaligned");
    try expectRefused(.invalid_argument, lx_store_gather_arrays(s[0], s[1], 0, 0, o[0], o[1], 4, 0), "indices is not the address");
    try expectRefused(.invalid_argument, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0] + 4, o[1], 4, 0), "out is not the address");
    try expectRefused(.invalid_argument, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 0, 0), "stride is 0");
    out_fields.flags = vector_flags; // read-only
    try expectRefused(.invalid_argument, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "not a writable");
    out_fields.flags = out_flags;
    index_fields.flags = numpy_array.flag_aligned; // strided
    try expectRefused(.invalid_argument, lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 0), "C-contiguous");
    index_fields.flags = vector_flags;
    index_fields.nd = 2;
    try expectRefused(.invalid_argument, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "one-dimensional");
    index_fields.nd = 1;
    index_fields.data = @as([*]u8, @ptrCast(&indices)) + 1;
    try expectRefused(.invalid_argument, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "8-byte aligned");
    index_fields.data = @ptrCast(&indices);
    indices[1] = 10; // past the length
    try expectRefused(.index_out_of_range, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "10");
    indices[1] = 0;
    // out's rows must be exactly the records: their count and their size.
    try expectRefused(.invalid_argument, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 2, 0), "3 rows of 2 bytes");
    out_dims[0] = 2;
    try expectRefused(.invalid_argument, lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 0), "3 rows of 4 bytes");
    out_dims[0] = 3;
    // One record: out's strides[0] says nothing then, so the call with out_bytes 0 is refused.
    const one_index = [_]isize{1};
    index_fields.dimensions = &one_index;
    out_dims[0] = 1;
    try expectRefused(.invalid_argument, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "1 rows of 4 bytes");
    // The binding then vouches for out's size (NumPy's nbytes): it must be the record's.
    try expectRefused(.invalid_argument, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 8), "out holds 8 bytes, 1 records of 4 bytes need 4");
    out_fields.flags = vector_flags; // read-only
    try expectRefused(.invalid_argument, lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 4), "not a writable");
    out_fields.flags = out_flags;
    const untouched_yet: [12]u8 = @splat(0xEE);
    try testing.expectEqualSlices(u8, &untouched_yet, &out);
    try testing.expectEqual(Status.ok, lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 4));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9 }, out[0..4]);
    out = @splat(0xEE);
    try testing.expectEqual(Status.ok, lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 4));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9 }, out[0..4]);
    out = @splat(0xEE);
    const untouched: [12]u8 = @splat(0xEE);
    try testing.expectEqualSlices(u8, &untouched, &out);
}

test "the pool and stores policies: each value reads back; another is refused and the policy kept" {
    defer _ = lx_pool_set_policy(0);
    defer _ = lx_stores_set_policy(0);
    try testing.expectEqual(@as(u32, 0), lx_stores_policy());
    for ([_]u32{ 1, 2, 0 }) |policy| {
        try testing.expectEqual(Status.ok, lx_pool_set_policy(policy));
        try testing.expectEqual(policy, lx_pool_policy());
        try testing.expectEqual(Status.ok, lx_stores_set_policy(policy));
        try testing.expectEqual(policy, lx_stores_policy());
    }
    try testing.expectEqual(Status.ok, lx_pool_set_policy(2));
    try testing.expectEqual(Status.ok, lx_stores_set_policy(1));
    for ([_]u32{ 3, 0xFFFF_FFFF }) |bad| {
        try expectRefused(.invalid_argument, lx_pool_set_policy(bad), "is not one of LX_POOL_AUTO (0)");
        try testing.expectEqual(@as(u32, 2), lx_pool_policy());
        try expectRefused(.invalid_argument, lx_stores_set_policy(bad), "is not one of LX_STORES_AUTO (0)");
        try testing.expectEqual(@as(u32, 1), lx_stores_policy());
    }
}

test "lx_store_gather_streams gathers every stream at the same indices and refuses bad streams before writing" {
    var first: Fixture = undefined;
    try first.init();
    defer first.deinit();
    var second: Fixture = undefined;
    try second.init();
    defer second.deinit();
    const indices = [_]i64{ 9, 0, 4 };
    var a: [12]u8 = @splat(0xEE);
    var b: [12]u8 = @splat(0xEE);
    var streams = [_]LxGatherStream{
        .{ .store = first.store, .out = &a, .record_size = 4, .out_bytes = 12 },
        .{ .store = second.store, .out = &b, .record_size = 4, .out_bytes = 12 },
    };
    try testing.expectEqual(Status.ok, lx_store_gather_streams(&indices, 3, &streams, 2));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 4, 4, 4, 4 }, &a);
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 4, 4, 4, 4 }, &b);
    // No records: nothing to read, every stream's out holds 0 bytes.
    try testing.expectEqual(Status.ok, lx_store_gather_streams(null, 0, &[_]LxGatherStream{
        .{ .store = first.store, .out = null, .record_size = 4, .out_bytes = 0 },
    }, 1));

    // Every refusal leaves both outputs as they were.
    a = @splat(0xEE);
    b = @splat(0xEE);
    try expectRefused(.invalid_argument, lx_store_gather_streams(&indices, 3, &streams, 0), "stream_count is 0");
    try expectRefused(.invalid_argument, lx_store_gather_streams(&indices, 3, &streams, 9), "stream_count is 9");
    try expectRefused(.invalid_argument, lx_store_gather_streams(&indices, 3, null, 2), "streams is NULL");
    try expectRefused(.invalid_argument, lx_store_gather_streams(null, 3, &streams, 2), "indices is NULL");
    streams[1].store = null;
    try expectRefused(.invalid_argument, lx_store_gather_streams(&indices, 3, &streams, 2), "stream 1's store is NULL");
    streams[1].store = second.store;
    streams[0].record_size = 0;
    try expectRefused(.invalid_argument, lx_store_gather_streams(&indices, 3, &streams, 2), "record_size is 0");
    streams[0].record_size = 4;
    streams[1].out_bytes = 16;
    try expectRefused(.invalid_argument, lx_store_gather_streams(&indices, 3, &streams, 2), "out holds 16 bytes");
    streams[1].out_bytes = 12;
    streams[0].out = null;
    try expectRefused(.invalid_argument, lx_store_gather_streams(&indices, 3, &streams, 2), "stream 0's out is NULL");
    streams[0].out = &a;
    streams[0].record_size = huge;
    streams[0].out_bytes = 12;
    try expectRefused(.invalid_argument, lx_store_gather_streams(&indices, 3, &streams, 2), "overflows");
    streams[0].record_size = 4;
    try expectRefused(.index_out_of_range, lx_store_gather_streams(&[_]i64{ 1, 10 }, 2, &[_]LxGatherStream{
        .{ .store = first.store, .out = &a, .record_size = 4, .out_bytes = 8 },
        .{ .store = second.store, .out = &b, .record_size = 4, .out_bytes = 8 },
    }, 2), "");
    try expectRefused(.size_mismatch, lx_store_gather_streams(&indices, 1, &[_]LxGatherStream{
        .{ .store = first.store, .out = &a, .record_size = 2, .out_bytes = 2 },
    }, 1), "");
    for (a) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    for (b) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
}

/// Where the library keeps the store or view behind an open handle (null once closed): lets a
/// test say whether a new object took a closed one's memory.
fn objectAddress(comptime T: type, handle: anytype) ?usize {
    const object = T.fromOpenHandle(@fromBackingInt(@intCast(@intFromPtr(handle)))) orelse return null;
    return @intFromPtr(object);
}

/// Calls every store function through `stale` and expects each refused as a closed handle is,
/// with nothing read or written.
fn expectStoreRefused(stale: *LxStore) !void {
    var index: [1]i64 = .{0};
    var offsets: [2]u64 = .{ 0, 4 };
    var out: [4]u8 = @splat(0xEE);
    var lengths: [1]u64 = .{77};
    var stats: LxStats = undefined;
    const closed = "not an open lx_store";
    try testing.expectEqual(@as(u64, 0), lx_store_length(stale));
    try testing.expectEqual(@as(c_int, 0), lx_store_has_dict(stale));
    try expectRefused(.invalid_argument, lx_store_gather_fixed(stale, &index, 1, &out, 4), closed);
    try expectRefused(.invalid_argument, lx_store_gather(stale, &index, 1, &out, &offsets), closed);
    try expectRefused(.invalid_argument, lx_store_record_lengths(stale, &index, 1, &lengths), closed);
    try expectRefused(.invalid_argument, lx_store_append_fixed(stale, &out, 4, 1, 0, null), closed);
    try expectRefused(.invalid_argument, lx_store_append(stale, &out, &offsets, 1, 0, null), closed);
    try expectRefused(.invalid_argument, lx_store_delete(stale, &index, 1), closed);
    try expectRefused(.invalid_argument, lx_store_compact(stale), closed);
    try expectRefused(.invalid_argument, lx_store_stats(stale, &stats), closed);
    try expectRefused(.invalid_argument, lx_store_sync(stale), closed);
    try expectRefused(.invalid_argument, lx_store_train_dict(stale, &out, &offsets, 1, 1024), closed);
    try expectRefused(.invalid_argument, lx_store_set_maintenance_check(stale, null, null), closed);
    try expectRefused(.invalid_argument, lx_stores_delete(&[_]?*LxStore{stale}, 1, &index, &[_]u64{ 0, 1 }), "store 0 is not an open lx_store");
    var view: ?*LxView = null;
    try expectRefused(.invalid_argument, lx_view_open(&[_]*LxStore{stale}, 1, &view), "store 0 is not an open lx_store");
    try testing.expectEqual(@as(?*LxView, null), view);
    const address = @intFromPtr(stale);
    try expectRefused(.invalid_argument, lx_store_gather_arrays(@truncate(address), @truncate(address >> 32), 0, 0, 0, 0, 4, 0), "store is NULL, misaligned or not open");
    try expectRefused(.invalid_argument, lx_store_gather_streams(&index, 1, &[_]LxGatherStream{
        .{ .store = stale, .out = &out, .record_size = 4, .out_bytes = 4 },
    }, 1), "stream 0's store is NULL, closed or not an lx_store");
    lx_store_close(stale); // does nothing
    try testing.expectEqualSlices(u8, &@as([4]u8, @splat(0xEE)), &out);
    try testing.expectEqual(@as(u64, 77), lengths[0]);
}

test "a stale store handle is refused, and never reaches a store opened since in its memory" {
    const Store = @import("../store/store.zig").Store;
    var old: Fixture = undefined;
    try old.init();
    defer old.tmp.cleanup();
    const stale = old.store;
    const stale_address = objectAddress(Store, stale).?;
    lx_store_close(stale);
    lx_store_close(stale); // a second close does nothing
    try testing.expectEqual(@as(?usize, null), objectAddress(Store, stale));
    // New stores until one takes the closed store's memory: malloc usually hands it to the
    // very next one, a few tries make it likelier still, and the test holds either way.
    var news: [4]Fixture = undefined;
    var new_count: usize = 0;
    defer for (news[0..new_count]) |*fixture| fixture.deinit();
    var same_memory = false;
    while (new_count < news.len and !same_memory) : (new_count += 1) {
        try news[new_count].init();
        same_memory = objectAddress(Store, news[new_count].store).? == stale_address;
    }
    // The last one, told apart from the old by an eleventh record.
    const new = &news[new_count - 1];
    try testing.expectEqual(Status.ok, lx_store_append_fixed(new.store, "kkkk", 4, 1, 0, null));
    try testing.expect(new.store != stale);
    try expectStoreRefused(stale);
    // The new store kept working and unchanged through all of it.
    try testing.expectEqual(@as(u64, 11), lx_store_length(new.store));
    var out: [8]u8 = undefined;
    try testing.expectEqual(Status.ok, lx_store_gather_fixed(new.store, &[_]i64{ 10, 3 }, 2, &out, 4));
    try testing.expectEqualSlices(u8, "kkkk" ++ [_]u8{ 3, 3, 3, 3 }, &out);
}

test "a stale view handle is refused, and a view whose store was replaced refuses too" {
    const View = @import("../view/view.zig").View;
    var first: Fixture = undefined;
    try first.init();
    defer first.deinit();
    var stale: ?*LxView = null;
    try testing.expectEqual(Status.ok, lx_view_open(&[_]*LxStore{first.store}, 1, &stale));
    const stale_address = objectAddress(View, stale.?).?;
    lx_view_close(stale);
    lx_view_close(stale); // a second close does nothing
    // New views until one takes the closed view's memory (as for stores above).
    var views: [4]?*LxView = @splat(null);
    defer for (views) |v| lx_view_close(v);
    var same_memory = false;
    var fresh: ?*LxView = null;
    for (&views) |*v| {
        try testing.expectEqual(Status.ok, lx_view_open(&[_]*LxStore{first.store}, 1, v));
        fresh = v.*;
        same_memory = objectAddress(View, fresh.?).? == stale_address;
        if (same_memory) break;
    }
    try testing.expect(fresh != stale);
    var index: [1]i64 = .{2};
    var offsets: [2]u64 = .{ 0, 4 };
    var out: [4]u8 = @splat(0xEE);
    var lengths: [1]u64 = .{77};
    const closed = "not an open lx_view";
    try testing.expectEqual(@as(u64, 0), lx_view_length(stale));
    try expectRefused(.invalid_argument, lx_view_gather_fixed(stale, &index, 1, &out, 4), closed);
    try expectRefused(.invalid_argument, lx_view_gather(stale, &index, 1, &out, &offsets), closed);
    try expectRefused(.invalid_argument, lx_view_record_lengths(stale, &index, 1, &lengths), closed);
    const address = @intFromPtr(stale.?);
    try expectRefused(.invalid_argument, lx_view_gather_arrays(@truncate(address), @truncate(address >> 32), 0, 0, 0, 0, 4, 0), "view is NULL, misaligned or not open");
    try testing.expectEqualSlices(u8, &@as([4]u8, @splat(0xEE)), &out);
    try testing.expectEqual(@as(u64, 77), lengths[0]);
    try testing.expectEqual(@as(u64, 10), lx_view_length(fresh));
    try testing.expectEqual(Status.ok, lx_view_gather_fixed(fresh, &index, 1, &out, 4));
    try testing.expectEqualSlices(u8, &.{ 2, 2, 2, 2 }, &out);

    // A view over a store closed under it, whose memory a new store may have taken: the view
    // refuses rather than read the newcomer.
    var second: Fixture = undefined;
    try second.init();
    var orphan: ?*LxView = null;
    try testing.expectEqual(Status.ok, lx_view_open(&[_]*LxStore{second.store}, 1, &orphan));
    defer lx_view_close(orphan);
    lx_store_close(second.store);
    second.tmp.cleanup();
    var newcomer: Fixture = undefined;
    try newcomer.init();
    defer newcomer.deinit();
    try testing.expectEqual(@as(u64, 0), lx_view_length(orphan));
    try expectRefused(.invalid_argument, lx_view_gather_fixed(orphan, &index, 1, &out, 4), "closed before the view");
    try testing.expectEqual(@as(u64, 10), lx_store_length(newcomer.store));
}

test "lx_sampler_fill writes a batch and refuses bad arguments with a message" {
    var out: [4]i64 = undefined;
    try testing.expectEqual(Status.ok, lx_sampler_fill(0, 10, 4, 0, 2, 0, 1, &out));
    try testing.expectEqualSlices(i64, &.{ 8, 9, 0, 1 }, &out);
    try testing.expectEqual(Status.invalid_argument, lx_sampler_fill(1, 10, 4, 0, 0, 0, 1, null));
    try testing.expectEqualStrings("the output buffer is NULL", std.mem.span(lx_last_error()));
    try testing.expectEqual(Status.invalid_argument, lx_sampler_fill(2, 10, 4, 0, 0, 1, 3, &out));
    try testing.expectEqualStrings(
        "cyclic mode needs batch_size * shard_count (4 * 3) <= length 10",
        std.mem.span(lx_last_error()),
    );
    try testing.expectEqual(Status.invalid_argument, lx_sampler_fill(7, 10, 4, 0, 0, 0, 1, &out));
    try testing.expectEqual(Status.invalid_argument, lx_sampler_fill(1, 0, 4, 0, 0, 0, 1, &out));
}

test "lx_sampler_batch equals lx_sampler_fill and refuses a bad request" {
    var want: [5]i64 = undefined;
    var got: [5]i64 = undefined;
    try testing.expectEqual(Status.ok, lx_sampler_fill(2, 100, 5, 7, 3, 1, 2, &want));
    var request: LxSamplerRequest = .{
        .mode = 2,
        .reserved = 0,
        .length = 100,
        .batch_size = 5,
        .seed = 7,
        .shard_index = 1,
        .shard_count = 2,
    };
    try testing.expectEqual(Status.ok, lx_sampler_batch(&request, 3, &got));
    try testing.expectEqualSlices(i64, &want, &got);
    try testing.expectEqual(Status.invalid_argument, lx_sampler_batch(null, 3, &got));
    request.reserved = 1;
    try testing.expectEqual(Status.invalid_argument, lx_sampler_batch(&request, 3, &got));
    request.reserved = 0;
    request.mode = 9;
    try testing.expectEqual(Status.invalid_argument, lx_sampler_batch(&request, 3, &got));
}

test "abi basics" {
    try testing.expectEqual(abi_version, lx_abi_version());
    try testing.expectEqualStrings("LX_IO", std.mem.span(lx_status_name(12)));
    try testing.expectEqualStrings("unknown", std.mem.span(lx_status_name(99)));
    try testing.expectEqualStrings("unknown", std.mem.span(lx_status_name(-1)));
}

test "lx_store_open refuses create together with read-only, both verify flags, and unknown flags" {
    const flags = abi_types;
    var out: ?*LxStore = undefined;
    const create_read_only = flags.open_create | flags.open_read_only;
    try testing.expectEqual(Status.invalid_argument, lx_store_open(".", create_read_only, &out));
    try testing.expect(out == null);
    try testing.expectEqualStrings(
        "lx_store_open: LX_OPEN_CREATE and LX_OPEN_READ_ONLY exclude each other",
        std.mem.span(lx_last_error()),
    );
    try testing.expectEqual(Status.invalid_argument, lx_store_open(".", 32, &out));
    const both_verify = flags.open_verify_all | flags.open_verify_none;
    try testing.expectEqual(Status.invalid_argument, lx_store_open(".", both_verify, &out));
    try testing.expectEqualStrings(
        "lx_store_open: LX_OPEN_VERIFY_ALL and LX_OPEN_VERIFY_NONE together",
        std.mem.span(lx_last_error()),
    );
    try testing.expectEqualStrings("LX_STORE_LOCKED", std.mem.span(lx_status_name(15)));
    try testing.expectEqualStrings("LX_READ_ONLY", std.mem.span(lx_status_name(16)));
}

/// One thread of the lock-order race: repeats one call until told to stop, counting rounds.
const Racer = struct {
    stop: *std.atomic.Value(bool),
    finished: *std.atomic.Value(u32),
    failures: *std.atomic.Value(u32),
    rounds: u64 = 0,
    call: Call,

    const Call = union(enum) {
        delete: [2]?*LxStore,
        view: *LxView,
        streams: [2]LxGatherStream,
    };

    fn run(racer: *Racer) void {
        defer _ = racer.finished.fetchAdd(1, .release);
        const indices = [_]i64{ 1, 12 };
        const none = [_]u64{ 0, 0, 0 };
        while (!racer.stop.load(.acquire)) : (racer.rounds += 1) {
            var out: [8]u8 = undefined;
            const result = switch (racer.call) {
                // No index: the call still takes both stores exclusively, and changes nothing.
                .delete => |*pair| lx_stores_delete(pair, 2, null, &none),
                .view => |view| lx_view_gather_fixed(view, &indices, 2, &out, 4),
                .streams => |*pair| lx_store_gather_streams(&indices, 1, pair, 2),
            };
            if (result != .ok) _ = racer.failures.fetchAdd(1, .monotonic);
        }
    }
};

test "multi-store calls lock in one order whatever order they are given: no deadlock" {
    var a: Fixture = undefined;
    try a.init();
    var b: Fixture = undefined;
    try b.init();
    var forward: ?*LxView = null;
    var backward: ?*LxView = null;
    const ab = [_]*LxStore{ a.store, b.store };
    const ba = [_]*LxStore{ b.store, a.store };
    try testing.expectEqual(Status.ok, lx_view_open(&ab, 2, &forward));
    try testing.expectEqual(Status.ok, lx_view_open(&ba, 2, &backward));
    var out_a: [4]u8 = undefined;
    var out_b: [4]u8 = undefined;
    const stream_a: LxGatherStream = .{
        .store = a.store,
        .out = &out_a,
        .record_size = 4,
        .out_bytes = 4,
    };
    const stream_b: LxGatherStream = .{
        .store = b.store,
        .out = &out_b,
        .record_size = 4,
        .out_bytes = 4,
    };
    var stop: std.atomic.Value(bool) = .init(false);
    var finished: std.atomic.Value(u32) = .init(0);
    var failures: std.atomic.Value(u32) = .init(0);
    const calls = [_]Racer.Call{
        .{ .delete = .{ a.store, b.store } },
        .{ .delete = .{ b.store, a.store } },
        .{ .view = forward.? },
        .{ .view = backward.? },
        .{ .streams = .{ stream_a, stream_b } },
        .{ .streams = .{ stream_b, stream_a } },
    };
    var racers: [calls.len]Racer = undefined;
    for (&racers, calls) |*racer, call| {
        racer.* = .{ .stop = &stop, .finished = &finished, .failures = &failures, .call = call };
    }
    var threads: [racers.len]std.Thread = undefined;
    for (&threads, &racers) |*thread, *racer| {
        thread.* = try std.Thread.spawn(.{}, Racer.run, .{racer});
    }
    // The watchdog: race for a second, then give the racers ten seconds to notice the stop.
    const io = @import("../os/pool.zig").io();
    io.sleep(.fromSeconds(1), .awake) catch {};
    stop.store(true, .release);
    var waited_ms: u32 = 0;
    while (finished.load(.acquire) < racers.len and waited_ms < 10_000) : (waited_ms += 10) {
        io.sleep(.fromMilliseconds(10), .awake) catch {};
    }
    if (finished.load(.acquire) < racers.len) {
        // Deadlocked: the stuck threads keep the stores and views, which are left open.
        for (threads) |thread| thread.detach();
        const blocked = racers.len - finished.load(.acquire);
        std.debug.print("deadlock: {d} of {d} racers blocked\n", .{ blocked, racers.len });
        return error.Deadlock;
    }
    for (threads) |thread| thread.join();
    lx_view_close(forward);
    lx_view_close(backward);
    b.deinit();
    a.deinit();
    try testing.expectEqual(@as(u32, 0), failures.load(.monotonic));
    for (racers) |racer| try testing.expect(racer.rounds > 0);
}

test "lx_record_sums gives sums.zr's value for each record and refuses bad ranges, codecs and NULLs, writing nothing" {
    const checksum = @import("../codec/checksum.zig");
    const format = @import("../files/format.zig");
    const bytes = "abcdefghijklmnopqrstuvwxyz";
    const starts = [_]u64{ 0, 3, 26 };
    const stored = [_]u32{ 3, 20, 0 };
    const logic = [_]u32{ 3, 99, 0 };
    const codecs = [_]u8{ 0, 1, 2 };
    var out = [_]u32{ 7, 7, 7 };
    try testing.expectEqual(Status.ok, lx_record_sums(bytes, bytes.len, &starts, &stored, &logic, &codecs, 3, &out));
    try testing.expectEqual(checksum.recordSum(bytes[0..3], 3, .raw), out[0]);
    try testing.expectEqual(checksum.recordSum(bytes[3..23], 99, .zstd), out[1]);
    try testing.expectEqual(checksum.recordSum(bytes[26..26], 0, format.Codec.zstd_dict), out[2]);
    // Nothing is written when a call is refused.
    out = .{ 7, 7, 7 };
    const past = [_]u32{ 3, 24, 0 };
    try testing.expectEqual(Status.invalid_argument, lx_record_sums(bytes, bytes.len, &starts, &past, &logic, &codecs, 3, &out));
    const unknown = [_]u8{ 0, 9, 0 };
    try testing.expectEqual(Status.invalid_argument, lx_record_sums(bytes, bytes.len, &starts, &stored, &logic, &unknown, 3, &out));
    const beyond = [_]u64{ 0, 3, 27 };
    try testing.expectEqual(Status.invalid_argument, lx_record_sums(bytes, bytes.len, &beyond, &stored, &logic, &codecs, 3, &out));
    try testing.expectEqual(Status.invalid_argument, lx_record_sums(null, bytes.len, &starts, &stored, &logic, &codecs, 3, &out));
    try testing.expectEqual(Status.invalid_argument, lx_record_sums(bytes, bytes.len, &starts, &stored, &logic, &codecs, 3, null));
    try testing.expectEqualSlices(u32, &.{ 7, 7, 7 }, &out);
    // No records: nothing to check, NULLs included.
    try testing.expectEqual(Status.ok, lx_record_sums(null, 0, null, null, null, null, 0, null));
}

test "lx_batch_pad pads a packed batch and refuses NULLs, overflows, small buffers, bad offsets and overlaps, writing nothing" {
    // Rows of 2 bytes: records of 1, 3 and 0 rows padded to 2 rows (the second cut to 2).
    const values = [_]u8{ 1, 2, 3, 4, 5, 6, 7, 8 };
    const cu = [_]i32{ 0, 1, 4, 4 };
    const row = [_]u8{ 0xAB, 0xCD };
    var out: [3 * 2 * 2]u8 = @splat(0xEE);
    var mask: [3 * 2]u8 = @splat(0xEE);
    try testing.expectEqual(Status.ok, lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len));
    try testing.expectEqualSlices(u8, &.{ 1, 2, 0xAB, 0xCD, 3, 4, 5, 6, 0xAB, 0xCD, 0xAB, 0xCD }, &out);
    try testing.expectEqualSlices(u8, &.{ 1, 0, 1, 1, 0, 0 }, &mask);
    @memset(&out, 0xEE);
    @memset(&mask, 0xEE);
    const big: u64 = 1 << 40;
    const decreasing = [_]i32{ 0, 3, 1, 4 };
    const negative = [_]i32{ -1, 1, 4, 4 };
    const past = [_]i32{ 0, 1, 4, 5 };
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, 0, &row, 2, &out, out.len, &mask, mask.len), "row_size is 0");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, 2, null, 2, &out, out.len, &mask, mask.len), "pad_row is NULL");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, null, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "cu_seqlens is NULL");
    try expectRefused(.invalid_argument, lx_batch_pad(null, values.len, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "values is NULL");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, null, out.len, &mask, mask.len), "out is NULL");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, &out, out.len, null, mask.len), "mask is NULL");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, std.math.maxInt(u64), 2, &row, 2, &out, out.len, &mask, mask.len), "overflows the address space");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, 2, &row, std.math.maxInt(u64), &out, out.len, &mask, mask.len), "count 3 * length");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, big, &row, big, &out, out.len, &mask, mask.len), "* row_size");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, &out, out.len - 1, &mask, mask.len), "out holds 11 bytes, the padded batch needs 12");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len - 1), "mask holds 5 bytes");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &decreasing, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "decrease at 2 (3 then 1)");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &negative, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "cu_seqlens[0] is -1");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &past, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "cu_seqlens[3] is 5, past the 4 rows");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len - 1, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "past the 3 rows");
    const top: [*]const u8 = @ptrFromInt(std.math.maxInt(usize) - 3);
    try expectRefused(.invalid_argument, lx_batch_pad(top, values.len, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "runs past the address space");
    try testing.expectEqualSlices(u8, &@as([12]u8, @splat(0xEE)), &out);
    try testing.expectEqualSlices(u8, &@as([6]u8, @splat(0xEE)), &mask);
    // Writes that overlap each other or a read.
    var scratch: [32]u8 = @splat(0xEE);
    @memcpy(scratch[0..8], &values);
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, scratch[0..], 12, scratch[8..], 6), "out and mask overlap");
    try expectRefused(.invalid_argument, lx_batch_pad(scratch[0..], 8, &cu, 3, 2, &row, 2, scratch[4..], 12, &mask, mask.len), "out overlaps values");
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, &cu, 3, 2, scratch[20..], 2, &out, out.len, scratch[16..], 6), "mask overlaps pad_row");
    var cu_bytes: [16]u8 align(4) = @bitCast(cu);
    const cu_in_out: [*]const i32 = @ptrCast(&cu_bytes);
    try expectRefused(.invalid_argument, lx_batch_pad(&values, values.len, cu_in_out, 3, 2, &row, 2, &cu_bytes, 12, &mask, mask.len), "out overlaps cu_seqlens");
    try testing.expectEqualSlices(u8, &@as([24]u8, @splat(0xEE)), scratch[8..]);
    try testing.expectEqualSlices(u8, &values, scratch[0..8]);
    try testing.expectEqualSlices(u8, &@as([6]u8, @splat(0xEE)), &mask);
    // Nothing to write: empty buffers may be NULL.
    const empty = [_]i32{ 0, 0 };
    try testing.expectEqual(Status.ok, lx_batch_pad(null, 0, &empty, 1, 2, &row, 0, null, 0, null, 0));
    try testing.expectEqual(Status.ok, lx_batch_pad(null, 0, &cu, 0, 2, &row, 5, null, 0, null, 0));
}

test "padded gathers: records straight into their rows, cut, padded and masked in one call; bad arguments refused, nothing written" {
    var f: Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    // Records 10 and 11: 3 rows and 1 row of 2 bytes, zstd-compressed (10 is cut to 2 rows below).
    const data = [_]u8{ 1, 2, 3, 4, 5, 6, 7, 8 };
    var first: u64 = 0;
    try testing.expectEqual(Status.ok, lx_store_append(s, &data, &[_]u64{ 0, 6, 8 }, 2, 1, &first));
    var indices: [3]i64 = .{ 10, 2, 11 };
    const pad_row = [_]u8{ 0xF0, 0x0F };
    const lengths = [_]u64{ 2, 4 };
    var out: [3 * 4 * 2]u8 align(8) = @splat(0xEE);
    var mask: [3 * 4]u8 = @splat(0xEE);
    var rows: [3]u64 = @splat(77);
    var length: u64 = 77;
    const untouched = struct {
        fn check(o: []const u8, m: []const u8, r: []const u64, l: u64) !void {
            for (o) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
            for (m) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
            for (r) |row| try testing.expectEqual(@as(u64, 77), row);
            try testing.expectEqual(@as(u64, 77), l);
        }
    }.check;
    try expectRefused(.invalid_argument, lx_store_gather_padded(null, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "store is NULL");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, null, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "indices is NULL");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 0, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "row_size is 0");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, null, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "pad_row is NULL");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, null, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "lengths is NULL");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &[_]u64{ 4, 4 }, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "do not increase");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &[_]u64{0}, 1, 0, &out, out.len, &mask, mask.len, &rows, &length), "lengths[0] is 0");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 6, &out, out.len, &mask, mask.len, &rows, &length), "flags 6");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, null, 0, 1, &out, out.len, &mask, mask.len, &rows, &length), "needs lengths");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, null, out.len, &mask, mask.len, &rows, &length), "out is NULL");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, null, mask.len, &rows, &length), "mask is NULL");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, null, &length), "out_rows is NULL");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, null), "out_length is NULL");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, huge, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "overflow");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &[_]u64{huge}, 1, 0, &out, out.len, &mask, mask.len, &rows, &length), "overflows");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, huge, &mask, mask.len, &rows, &length), "address space");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, out[4..].ptr, 4, &rows, &length), "out overlaps mask");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, @ptrCast(@alignCast(&out)), &length), "out overlaps out_rows");
    try untouched(&out, &mask, &rows, length);
    try expectRefused(.invalid_argument, lx_store_gather_padded(s, &indices, 3, 2, out[0..2].ptr, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "out overlaps pad_row");
    try untouched(&out, &mask, &rows, length);
    var outside: [3]i64 = .{ 0, 1, 12 };
    try expectRefused(.index_out_of_range, lx_store_gather_padded(s, &outside, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "out of range");
    try untouched(&out, &mask, &rows, length);
    // A record longer than every length without truncation: only the rows and the longest.
    try expectRefused(.size_mismatch, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 1, 0, &out, out.len, &mask, mask.len, &rows, &length), "more than the longest padded length 2");
    try testing.expectEqual(@as(u64, 3), length);
    try testing.expectEqualSlices(u64, &.{ 3, 2, 1 }, &rows);
    // Buffers too small for the length picked: only the rows and the length.
    length = 77;
    try expectRefused(.size_mismatch, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, 23, &mask, mask.len, &rows, &length), "need 24");
    try testing.expectEqual(@as(u64, 4), length);
    try untouched(&out, &mask, &.{}, 77);
    // Rows that do not divide the records: corrupt, nothing but rows written.
    try expectRefused(.corrupt, lx_store_gather_padded(s, &indices, 3, 4, &[_]u8{ 0, 0, 0, 0 }, null, 0, 0, &out, out.len, &mask, mask.len, &rows, &length), "whole number of 4-byte rows");
    try untouched(&out, &mask, &.{}, 77);

    // Padded to 4 (the bucket holding 3 rows).
    try testing.expectEqual(Status.ok, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqual(@as(u64, 4), length);
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3, 4, 5, 6, 0xF0, 0x0F, 2, 2, 2, 2, 0xF0, 0x0F, 0xF0, 0x0F, 7, 8, 0xF0, 0x0F, 0xF0, 0x0F, 0xF0, 0x0F }, &out);
    try testing.expectEqualSlices(u8, &.{ 1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0 }, &mask);
    // Cut to 2 rows (the compressed record 10 is decompressed aside, its first rows kept), in
    // a larger buffer: nothing past the batch is written.
    @memset(&out, 0xEE);
    @memset(&mask, 0xEE);
    try testing.expectEqual(Status.ok, lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 1, 1, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqual(@as(u64, 2), length);
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3, 4, 2, 2, 2, 2, 7, 8, 0xF0, 0x0F }, out[0..12]);
    try testing.expectEqualSlices(u8, &.{ 1, 1, 1, 1, 1, 0 }, mask[0..6]);
    for (out[12..] ++ mask[6..]) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    // A raw record cut to 1 row, padded to the longest without lengths, and no records.
    var raw_first: [2]i64 = .{ 3, 2 };
    try testing.expectEqual(Status.ok, lx_store_gather_padded(s, &raw_first, 2, 2, &pad_row, &[_]u64{1}, 1, 1, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqualSlices(u8, &.{ 3, 3, 2, 2 }, out[0..4]);
    try testing.expectEqual(Status.ok, lx_store_gather_padded(s, &raw_first, 2, 1, &[_]u8{9}, null, 0, 0, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqual(@as(u64, 4), length);
    try testing.expectEqual(Status.ok, lx_store_gather_padded(s, null, 0, 2, &pad_row, &lengths, 2, 0, null, 0, null, 0, null, &length));
    try testing.expectEqual(@as(u64, 2), length);

    // A view over the store twice: global index 22 is record 10 of the second.
    var view: ?*LxView = null;
    const store_list = [_]*LxStore{ s, s };
    try testing.expectEqual(Status.ok, lx_view_open(&store_list, 2, &view));
    defer lx_view_close(view);
    var global: [3]i64 = .{ 22, 2, 11 };
    @memset(&out, 0xEE);
    try expectRefused(.invalid_argument, lx_view_gather_padded(null, &global, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "view is NULL");
    try expectRefused(.size_mismatch, lx_view_gather_padded(view, &global, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, 3, &rows, &length), "need 24 and 12");
    for (out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    try testing.expectEqual(Status.ok, lx_view_gather_padded(view, &global, 3, 2, &pad_row, &lengths, 2, 1, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqual(@as(u64, 4), length);
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3, 4, 5, 6, 0xF0, 0x0F, 2, 2, 2, 2, 0xF0, 0x0F, 0xF0, 0x0F, 7, 8, 0xF0, 0x0F, 0xF0, 0x0F, 0xF0, 0x0F }, &out);
    var far: [1]i64 = .{24};
    try expectRefused(.index_out_of_range, lx_view_gather_padded(view, &far, 1, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "out of range");
}
