//! The exports, continued: maintenance checks, deletes across stores, the sampler, the array
//! gathers that take NumPy's fields, the pool and stores policies, a gather of several streams,
//! and handles that are stale (closed, or their memory reused by a newer store or view).
const std = @import("std");
const testing = std.testing;
const Status = @import("../base/status.zig").Status;
const numpy_array = @import("../batch/numpy_array.zig");
const c = @import("c_caller.zig");

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
    var f: c.Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    var record: CheckRecord = .{ .refuse = true };
    try testing.expectEqual(Status.ok, c.lx_store_set_maintenance_check(s, CheckRecord.check, &record));
    var index: [1]i64 = .{0};
    try c.expectRefused(.store_locked, c.lx_store_delete(s, &index, 1), "delete refused by the caller's maintenance check");
    try testing.expect(record.saw("delete"));
    try c.expectRefused(.store_locked, c.lx_store_compact(s), "compact refused");
    try testing.expect(record.saw("compact"));
    var samples: [64]u8 = @splat(1);
    var offsets: [9]u64 = .{ 0, 8, 16, 24, 32, 40, 48, 56, 64 };
    try c.expectRefused(.store_locked, c.lx_store_train_dict(s, &samples, &offsets, 8, 1024), "train_dict refused");
    try testing.expect(record.saw("train_dict"));
    try testing.expectEqual(@as(u32, 3), record.calls);
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(s));
    try testing.expectEqual(@as(c_int, 0), c.lx_store_has_dict(s));
    // A refused call released the store: another handle opens it, and the next call runs.
    var other: ?*c.LxStore = null;
    try testing.expectEqual(Status.ok, c.lx_store_open(&f.path, 0, &other));
    c.lx_store_close(other);
    record.refuse = false;
    try testing.expectEqual(Status.ok, c.lx_store_delete(s, &index, 1));
    try testing.expectEqual(@as(u32, 4), record.calls);
    try testing.expectEqual(@as(u64, 9), c.lx_store_length(s));
    var last: [4]u8 = undefined;
    try testing.expectEqual(Status.ok, c.lx_store_gather_fixed(s, &index, 1, &last, 4));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9 }, &last); // swap-last: record 9 moved to 0
    // A NULL function removes the check.
    record.refuse = true;
    try testing.expectEqual(Status.ok, c.lx_store_set_maintenance_check(s, null, null));
    try testing.expectEqual(Status.ok, c.lx_store_compact(s));
    try testing.expectEqual(@as(u32, 4), record.calls);
}

test "lx_stores_delete refuses bad arguments, and a store open elsewhere refuses it all" {
    var first: c.Fixture = undefined;
    try first.init();
    defer first.deinit();
    var second: c.Fixture = undefined;
    try second.init();
    defer second.deinit();
    var both = [_]?*c.LxStore{ first.store, second.store };
    var indices = [_]i64{ 9, 0, 4 };
    var splits = [_]u64{ 0, 1, 3 };
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&both, 0, &indices, &splits), "count is 0");
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&both, c.huge, &indices, &splits), "count is");
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(null, 2, &indices, &splits), "stores is NULL");
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&both, 2, &indices, null), "splits is NULL");
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&both, 2, null, &splits), "indices is NULL");
    var with_null = [_]?*c.LxStore{ first.store, null };
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&with_null, 2, &indices, &splits), "store 1 is NULL");
    var twice = [_]?*c.LxStore{ first.store, first.store };
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&twice, 2, &indices, &splits), "appears twice");
    var not_from_zero = [_]u64{ 1, 1, 3 };
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&both, 2, &indices, &not_from_zero), "splits[0]");
    var decreasing = [_]u64{ 0, 2, 1 };
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&both, 2, &indices, &decreasing), "is below");
    var overflowing = [_]u64{ 0, 1, c.huge };
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&both, 2, &indices, &overflowing), "overflow");
    var outside = [_]i64{ 9, 0, 10 };
    try c.expectRefused(.index_out_of_range, c.lx_stores_delete(&both, 2, &outside, &splits), "out of range");
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(first.store));
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(second.store));

    // A second handle on the second store: the whole delete is refused, the first store included.
    var other: ?*c.LxStore = null;
    try testing.expectEqual(Status.ok, c.lx_store_open(&second.path, 0, &other));
    try c.expectRefused(.store_locked, c.lx_stores_delete(&both, 2, &indices, &splits), "needs the store to itself");
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(first.store));
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(second.store));
    c.lx_store_close(other);

    try testing.expectEqual(Status.ok, c.lx_stores_delete(&both, 2, &indices, &splits));
    try testing.expectEqual(@as(u64, 9), c.lx_store_length(first.store));
    try testing.expectEqual(@as(u64, 8), c.lx_store_length(second.store));
    // Swap-last, highest target first: record 4 took record 9's bytes, then record 0 took 8's.
    var got: [8]u8 = undefined;
    var picks = [_]i64{ 0, 4 };
    try testing.expectEqual(Status.ok, c.lx_store_gather_fixed(second.store, &picks, 2, &got, 4));
    try testing.expectEqualSlices(u8, &.{ 8, 8, 8, 8, 9, 9, 9, 9 }, &got);
    try testing.expectEqual(Status.ok, c.lx_store_gather_fixed(first.store, &picks, 2, &got, 4));
    try testing.expectEqualSlices(u8, &.{ 0, 0, 0, 0, 4, 4, 4, 4 }, &got);
}

test "lx_sampler_fill refuses every bad argument with a message" {
    var out: [4]i64 = @splat(-5);
    try c.expectRefused(.invalid_argument, c.lx_sampler_fill(0, 10, 4, 0, 0, 0, 1, null), "NULL");
    try c.expectRefused(.invalid_argument, c.lx_sampler_fill(9, 10, 4, 0, 0, 0, 1, &out), "unknown sampler mode");
    try c.expectRefused(.invalid_argument, c.lx_sampler_fill(0, 0, 4, 0, 0, 0, 1, &out), "length is 0");
    try c.expectRefused(.invalid_argument, c.lx_sampler_fill(0, c.huge, 4, 0, 0, 0, 1, &out), "exceeds");
    try c.expectRefused(.invalid_argument, c.lx_sampler_fill(0, 10, 0, 0, 0, 0, 1, &out), "batch_size is 0");
    try c.expectRefused(.invalid_argument, c.lx_sampler_fill(0, 10, 4, 0, 0, 0, 0, &out), "shard_count is 0");
    try c.expectRefused(.invalid_argument, c.lx_sampler_fill(0, 10, 4, 0, 0, 3, 3, &out), "shard_index");
    try c.expectRefused(.invalid_argument, c.lx_sampler_fill(1, 10, c.huge, 0, 0, 0, 2, &out), "overflows");
    var request: c.LxSamplerRequest = .{ .mode = 0, .reserved = 0, .length = 10, .batch_size = 4, .seed = 0, .shard_index = 0, .shard_count = 1 };
    try c.expectRefused(.invalid_argument, c.lx_sampler_batch(null, 0, &out), "request is NULL");
    try c.expectRefused(.invalid_argument, c.lx_sampler_batch(&request, 0, null), "NULL");
    request.reserved = 1;
    try c.expectRefused(.invalid_argument, c.lx_sampler_batch(&request, 0, &out), "reserved");
    request.reserved = 0;
    request.batch_size = 0;
    try c.expectRefused(.invalid_argument, c.lx_sampler_batch(&request, 0, &out), "batch_size is 0");
    try testing.expectEqualSlices(i64, &@as([4]i64, @splat(-5)), &out);
}

test "the array gathers copy what gather_fixed copies, and refuse bad arrays before writing" {
    var fixture: c.Fixture = undefined;
    try fixture.init();
    defer fixture.deinit();
    var store_list = [_]*c.LxStore{fixture.store};
    var view: ?*c.LxView = null;
    try testing.expectEqual(Status.ok, c.lx_view_open(&store_list, 1, &view));
    defer c.lx_view_close(view);
    const vector_flags = numpy_array.flag_c_contiguous | numpy_array.flag_aligned;
    const out_flags = vector_flags | numpy_array.flag_writeable;
    var indices = [_]i64{ 9, 0, 4 };
    const index_dims = [_]isize{3};
    var index_fields = c.arrayFields(@ptrCast(&indices), &index_dims, &.{8}, vector_flags);
    var out: [12]u8 = @splat(0xEE);
    var out_dims = [_]isize{3};
    var out_fields = c.arrayFields(&out, &out_dims, &.{4}, out_flags);
    const s = c.halves(fixture.store);
    const v = c.halves(view.?);
    const i = c.halves(&index_fields);
    const o = c.halves(&out_fields);
    try testing.expectEqual(Status.ok, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 4, 4, 4, 4 }, &out);
    out = @splat(0xEE);
    try testing.expectEqual(Status.ok, c.lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 0));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 4, 4, 4, 4 }, &out);

    // Every refusal leaves out as it was.
    out = @splat(0xEE);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(0, 0, i[0], i[1], o[0], o[1], 4, 0), "store is NULL");
    try c.expectRefused(.invalid_argument, c.lx_view_gather_arrays(v[0] + 1, v[1], i[0], i[1], o[0], o[1], 4, 0), "misaligned");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(s[0], s[1], 0, 0, o[0], o[1], 4, 0), "indices is not the address");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0] + 4, o[1], 4, 0), "out is not the address");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 0, 0), "stride is 0");
    out_fields.flags = vector_flags; // read-only
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "not a writable");
    out_fields.flags = out_flags;
    index_fields.flags = numpy_array.flag_aligned; // strided
    try c.expectRefused(.invalid_argument, c.lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 0), "C-contiguous");
    index_fields.flags = vector_flags;
    index_fields.nd = 2;
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "one-dimensional");
    index_fields.nd = 1;
    index_fields.data = @as([*]u8, @ptrCast(&indices)) + 1;
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "8-byte aligned");
    index_fields.data = @ptrCast(&indices);
    indices[1] = 10; // past the length
    try c.expectRefused(.index_out_of_range, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "10");
    indices[1] = 0;
    // out's rows must be exactly the records: their count and their size.
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 2, 0), "3 rows of 2 bytes");
    out_dims[0] = 2;
    try c.expectRefused(.invalid_argument, c.lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 0), "3 rows of 4 bytes");
    out_dims[0] = 3;
    // One record: out's strides[0] says nothing then, so the call with out_bytes 0 is refused.
    const one_index = [_]isize{1};
    index_fields.dimensions = &one_index;
    out_dims[0] = 1;
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 0), "1 rows of 4 bytes");
    // The binding then vouches for out's size (NumPy's nbytes): it must be the record's.
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 8), "out holds 8 bytes, 1 records of 4 bytes need 4");
    out_fields.flags = vector_flags; // read-only
    try c.expectRefused(.invalid_argument, c.lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 4), "not a writable");
    out_fields.flags = out_flags;
    const untouched_yet: [12]u8 = @splat(0xEE);
    try testing.expectEqualSlices(u8, &untouched_yet, &out);
    try testing.expectEqual(Status.ok, c.lx_store_gather_arrays(s[0], s[1], i[0], i[1], o[0], o[1], 4, 4));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9 }, out[0..4]);
    out = @splat(0xEE);
    try testing.expectEqual(Status.ok, c.lx_view_gather_arrays(v[0], v[1], i[0], i[1], o[0], o[1], 4, 4));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9 }, out[0..4]);
    out = @splat(0xEE);
    const untouched: [12]u8 = @splat(0xEE);
    try testing.expectEqualSlices(u8, &untouched, &out);
}

test "the pool and stores policies: each value reads back; another is refused and the policy kept" {
    defer _ = c.lx_pool_set_policy(0);
    defer _ = c.lx_stores_set_policy(0);
    try testing.expectEqual(@as(u32, 0), c.lx_stores_policy());
    for ([_]u32{ 1, 2, 0 }) |policy| {
        try testing.expectEqual(Status.ok, c.lx_pool_set_policy(policy));
        try testing.expectEqual(policy, c.lx_pool_policy());
        try testing.expectEqual(Status.ok, c.lx_stores_set_policy(policy));
        try testing.expectEqual(policy, c.lx_stores_policy());
    }
    try testing.expectEqual(Status.ok, c.lx_pool_set_policy(2));
    try testing.expectEqual(Status.ok, c.lx_stores_set_policy(1));
    for ([_]u32{ 3, 0xFFFF_FFFF }) |bad| {
        try c.expectRefused(.invalid_argument, c.lx_pool_set_policy(bad), "is not one of LX_POOL_AUTO (0)");
        try testing.expectEqual(@as(u32, 2), c.lx_pool_policy());
        try c.expectRefused(.invalid_argument, c.lx_stores_set_policy(bad), "is not one of LX_STORES_AUTO (0)");
        try testing.expectEqual(@as(u32, 1), c.lx_stores_policy());
    }
}

test "lx_store_gather_streams gathers every stream at the same indices and refuses bad streams before writing" {
    var first: c.Fixture = undefined;
    try first.init();
    defer first.deinit();
    var second: c.Fixture = undefined;
    try second.init();
    defer second.deinit();
    const indices = [_]i64{ 9, 0, 4 };
    var a: [12]u8 = @splat(0xEE);
    var b: [12]u8 = @splat(0xEE);
    var streams = [_]c.LxGatherStream{
        .{ .store = first.store, .out = &a, .record_size = 4, .out_bytes = 12 },
        .{ .store = second.store, .out = &b, .record_size = 4, .out_bytes = 12 },
    };
    try testing.expectEqual(Status.ok, c.lx_store_gather_streams(&indices, 3, &streams, 2));
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 4, 4, 4, 4 }, &a);
    try testing.expectEqualSlices(u8, &.{ 9, 9, 9, 9, 0, 0, 0, 0, 4, 4, 4, 4 }, &b);
    // No records: nothing to read, every stream's out holds 0 bytes.
    try testing.expectEqual(Status.ok, c.lx_store_gather_streams(null, 0, &[_]c.LxGatherStream{
        .{ .store = first.store, .out = null, .record_size = 4, .out_bytes = 0 },
    }, 1));

    // Every refusal leaves both outputs as they were.
    a = @splat(0xEE);
    b = @splat(0xEE);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(&indices, 3, &streams, 0), "stream_count is 0");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(&indices, 3, &streams, 9), "stream_count is 9");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(&indices, 3, null, 2), "streams is NULL");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(null, 3, &streams, 2), "indices is NULL");
    streams[1].store = null;
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(&indices, 3, &streams, 2), "stream 1's store is NULL");
    streams[1].store = second.store;
    streams[0].record_size = 0;
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(&indices, 3, &streams, 2), "record_size is 0");
    streams[0].record_size = 4;
    streams[1].out_bytes = 16;
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(&indices, 3, &streams, 2), "out holds 16 bytes");
    streams[1].out_bytes = 12;
    streams[0].out = null;
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(&indices, 3, &streams, 2), "stream 0's out is NULL");
    streams[0].out = &a;
    streams[0].record_size = c.huge;
    streams[0].out_bytes = 12;
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(&indices, 3, &streams, 2), "overflows");
    streams[0].record_size = 4;
    try c.expectRefused(.index_out_of_range, c.lx_store_gather_streams(&[_]i64{ 1, 10 }, 2, &[_]c.LxGatherStream{
        .{ .store = first.store, .out = &a, .record_size = 4, .out_bytes = 8 },
        .{ .store = second.store, .out = &b, .record_size = 4, .out_bytes = 8 },
    }, 2), "");
    try c.expectRefused(.size_mismatch, c.lx_store_gather_streams(&indices, 1, &[_]c.LxGatherStream{
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
fn expectStoreRefused(stale: *c.LxStore) !void {
    var index: [1]i64 = .{0};
    var offsets: [2]u64 = .{ 0, 4 };
    var out: [4]u8 = @splat(0xEE);
    var lengths: [1]u64 = .{77};
    var stats: c.LxStats = undefined;
    const closed = "not an open lx_store";
    try testing.expectEqual(@as(u64, 0), c.lx_store_length(stale));
    try testing.expectEqual(@as(c_int, 0), c.lx_store_has_dict(stale));
    try c.expectRefused(.invalid_argument, c.lx_store_gather_fixed(stale, &index, 1, &out, 4), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_gather(stale, &index, 1, &out, &offsets), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_record_lengths(stale, &index, 1, &lengths), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_append_fixed(stale, &out, 4, 1, 0, null), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_append(stale, &out, &offsets, 1, 0, null), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_delete(stale, &index, 1), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_compact(stale), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_stats(stale, &stats), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_sync(stale), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_train_dict(stale, &out, &offsets, 1, 1024), closed);
    try c.expectRefused(.invalid_argument, c.lx_store_set_maintenance_check(stale, null, null), closed);
    try c.expectRefused(.invalid_argument, c.lx_stores_delete(&[_]?*c.LxStore{stale}, 1, &index, &[_]u64{ 0, 1 }), "store 0 is not an open lx_store");
    var view: ?*c.LxView = null;
    try c.expectRefused(.invalid_argument, c.lx_view_open(&[_]*c.LxStore{stale}, 1, &view), "store 0 is not an open lx_store");
    try testing.expectEqual(@as(?*c.LxView, null), view);
    const address = @intFromPtr(stale);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_arrays(@truncate(address), @truncate(address >> 32), 0, 0, 0, 0, 4, 0), "store is NULL, misaligned or not open");
    try c.expectRefused(.invalid_argument, c.lx_store_gather_streams(&index, 1, &[_]c.LxGatherStream{
        .{ .store = stale, .out = &out, .record_size = 4, .out_bytes = 4 },
    }, 1), "stream 0's store is NULL, closed or not an lx_store");
    c.lx_store_close(stale); // does nothing
    try testing.expectEqualSlices(u8, &@as([4]u8, @splat(0xEE)), &out);
    try testing.expectEqual(@as(u64, 77), lengths[0]);
}

test "a stale store handle is refused, and never reaches a store opened since in its memory" {
    const Store = @import("../store/store.zig").Store;
    var old: c.Fixture = undefined;
    try old.init();
    defer old.tmp.cleanup();
    const stale = old.store;
    const stale_address = objectAddress(Store, stale).?;
    c.lx_store_close(stale);
    c.lx_store_close(stale); // a second close does nothing
    try testing.expectEqual(@as(?usize, null), objectAddress(Store, stale));
    // New stores until one takes the closed store's memory: malloc usually hands it to the
    // very next one, a few tries make it likelier still, and the test holds either way.
    var news: [4]c.Fixture = undefined;
    var new_count: usize = 0;
    defer for (news[0..new_count]) |*fixture| fixture.deinit();
    var same_memory = false;
    while (new_count < news.len and !same_memory) : (new_count += 1) {
        try news[new_count].init();
        same_memory = objectAddress(Store, news[new_count].store).? == stale_address;
    }
    // The last one, told apart from the old by an eleventh record.
    const new = &news[new_count - 1];
    try testing.expectEqual(Status.ok, c.lx_store_append_fixed(new.store, "kkkk", 4, 1, 0, null));
    try testing.expect(new.store != stale);
    try expectStoreRefused(stale);
    // The new store kept working and unchanged through all of it.
    try testing.expectEqual(@as(u64, 11), c.lx_store_length(new.store));
    var out: [8]u8 = undefined;
    try testing.expectEqual(Status.ok, c.lx_store_gather_fixed(new.store, &[_]i64{ 10, 3 }, 2, &out, 4));
    try testing.expectEqualSlices(u8, "kkkk" ++ [_]u8{ 3, 3, 3, 3 }, &out);
}

test "a stale view handle is refused, and a view whose store was replaced refuses too" {
    const View = @import("../view/view.zig").View;
    var first: c.Fixture = undefined;
    try first.init();
    defer first.deinit();
    var stale: ?*c.LxView = null;
    try testing.expectEqual(Status.ok, c.lx_view_open(&[_]*c.LxStore{first.store}, 1, &stale));
    const stale_address = objectAddress(View, stale.?).?;
    c.lx_view_close(stale);
    c.lx_view_close(stale); // a second close does nothing
    // New views until one takes the closed view's memory (as for stores above).
    var views: [4]?*c.LxView = @splat(null);
    defer for (views) |v| c.lx_view_close(v);
    var same_memory = false;
    var fresh: ?*c.LxView = null;
    for (&views) |*v| {
        try testing.expectEqual(Status.ok, c.lx_view_open(&[_]*c.LxStore{first.store}, 1, v));
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
    try testing.expectEqual(@as(u64, 0), c.lx_view_length(stale));
    try c.expectRefused(.invalid_argument, c.lx_view_gather_fixed(stale, &index, 1, &out, 4), closed);
    try c.expectRefused(.invalid_argument, c.lx_view_gather(stale, &index, 1, &out, &offsets), closed);
    try c.expectRefused(.invalid_argument, c.lx_view_record_lengths(stale, &index, 1, &lengths), closed);
    const address = @intFromPtr(stale.?);
    try c.expectRefused(.invalid_argument, c.lx_view_gather_arrays(@truncate(address), @truncate(address >> 32), 0, 0, 0, 0, 4, 0), "view is NULL, misaligned or not open");
    try testing.expectEqualSlices(u8, &@as([4]u8, @splat(0xEE)), &out);
    try testing.expectEqual(@as(u64, 77), lengths[0]);
    try testing.expectEqual(@as(u64, 10), c.lx_view_length(fresh));
    try testing.expectEqual(Status.ok, c.lx_view_gather_fixed(fresh, &index, 1, &out, 4));
    try testing.expectEqualSlices(u8, &.{ 2, 2, 2, 2 }, &out);

    // A view over a store closed under it, whose memory a new store may have taken: the view
    // refuses rather than read the newcomer.
    var second: c.Fixture = undefined;
    try second.init();
    var orphan: ?*c.LxView = null;
    try testing.expectEqual(Status.ok, c.lx_view_open(&[_]*c.LxStore{second.store}, 1, &orphan));
    defer c.lx_view_close(orphan);
    c.lx_store_close(second.store);
    second.tmp.cleanup();
    var newcomer: c.Fixture = undefined;
    try newcomer.init();
    defer newcomer.deinit();
    try testing.expectEqual(@as(u64, 0), c.lx_view_length(orphan));
    try c.expectRefused(.invalid_argument, c.lx_view_gather_fixed(orphan, &index, 1, &out, 4), "closed before the view");
    try testing.expectEqual(@as(u64, 10), c.lx_store_length(newcomer.store));
}

test "lx_sampler_fill writes a batch and refuses bad arguments with a message" {
    var out: [4]i64 = undefined;
    try testing.expectEqual(Status.ok, c.lx_sampler_fill(0, 10, 4, 0, 2, 0, 1, &out));
    try testing.expectEqualSlices(i64, &.{ 8, 9, 0, 1 }, &out);
    try testing.expectEqual(Status.invalid_argument, c.lx_sampler_fill(1, 10, 4, 0, 0, 0, 1, null));
    try testing.expectEqualStrings("the output buffer is NULL", std.mem.span(c.lx_last_error()));
    try testing.expectEqual(Status.invalid_argument, c.lx_sampler_fill(2, 10, 4, 0, 0, 1, 3, &out));
    try testing.expectEqualStrings(
        "cyclic mode needs batch_size * shard_count (4 * 3) <= length 10",
        std.mem.span(c.lx_last_error()),
    );
    try testing.expectEqual(Status.invalid_argument, c.lx_sampler_fill(7, 10, 4, 0, 0, 0, 1, &out));
    try testing.expectEqual(Status.invalid_argument, c.lx_sampler_fill(1, 0, 4, 0, 0, 0, 1, &out));
}

test "lx_sampler_batch equals lx_sampler_fill and refuses a bad request" {
    var want: [5]i64 = undefined;
    var got: [5]i64 = undefined;
    try testing.expectEqual(Status.ok, c.lx_sampler_fill(2, 100, 5, 7, 3, 1, 2, &want));
    var request: c.LxSamplerRequest = .{
        .mode = 2,
        .reserved = 0,
        .length = 100,
        .batch_size = 5,
        .seed = 7,
        .shard_index = 1,
        .shard_count = 2,
    };
    try testing.expectEqual(Status.ok, c.lx_sampler_batch(&request, 3, &got));
    try testing.expectEqualSlices(i64, &want, &got);
    try testing.expectEqual(Status.invalid_argument, c.lx_sampler_batch(null, 3, &got));
    request.reserved = 1;
    try testing.expectEqual(Status.invalid_argument, c.lx_sampler_batch(&request, 3, &got));
    request.reserved = 0;
    request.mode = 9;
    try testing.expectEqual(Status.invalid_argument, c.lx_sampler_batch(&request, 3, &got));
}
