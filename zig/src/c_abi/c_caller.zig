//! The C ABI as a C caller sees it, for the export tests (exports_test.zig and the
//! exports_*_test.zig files beside it): loaderx.h's types and functions declared in Zig, which
//! the linker resolves to the export files' symbols, a refusal check, a store fixture and NumPy
//! arrays' fields as the Python binding passes them.
const std = @import("std");
const testing = std.testing;
const Status = @import("../base/status.zig").Status;
const numpy_array = @import("../batch/numpy_array.zig");

pub const LxStore = opaque {};
pub const LxStats = extern struct { records: u64, live_bytes: u64, chunk_bytes: u64, reclaimable: u64 };

// Declared as a C caller sees loaderx.h; the linker resolves them to the export files' symbols.
pub extern fn lx_abi_version() u32;
pub extern fn lx_status_name(status: c_int) [*:0]const u8;
pub extern fn lx_last_error() [*:0]const u8;
pub extern fn lx_store_open(path: ?[*:0]const u8, flags: u32, out: ?*?*LxStore) Status;
pub extern fn lx_store_close(store: ?*LxStore) void;
pub extern fn lx_store_length(store: ?*const LxStore) u64;
pub extern fn lx_store_has_dict(store: ?*const LxStore) c_int;
pub extern fn lx_store_append(store: ?*LxStore, data: ?[*]const u8, offsets: ?[*]const u64, count: u64, codec: u8, out_first: ?*u64) Status;
pub extern fn lx_store_append_fixed(store: ?*LxStore, data: ?[*]const u8, stride: u64, count: u64, codec: u8, out_first: ?*u64) Status;
pub extern fn lx_store_gather_fixed(store: ?*LxStore, indices: ?[*]const i64, count: u64, dst: ?[*]u8, stride: u64) Status;
pub extern fn lx_store_record_lengths(store: ?*LxStore, indices: ?[*]const i64, count: u64, out_lengths: ?[*]u64) Status;
pub extern fn lx_store_record_offsets(store: ?*LxStore, indices: ?[*]const i64, count: u64, row_size: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status;
pub extern fn lx_store_gather_packed(store: ?*LxStore, indices: ?[*]const i64, count: u64, row_size: u64, dst: ?[*]u8, dst_capacity: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status;
pub extern fn lx_store_gather_padded(store: ?*LxStore, indices: ?[*]const i64, count: u64, row_size: u64, pad_row: ?[*]const u8, lengths: ?[*]const u64, length_count: u64, flags: u32, out: ?[*]u8, out_capacity: u64, mask: ?[*]u8, mask_capacity: u64, out_rows: ?[*]u64, out_length: ?*u64) Status;
pub extern fn lx_store_gather(store: ?*LxStore, indices: ?[*]const i64, count: u64, dst: ?[*]u8, dst_offsets: ?[*]const u64) Status;
pub const LxGatherStream = extern struct { store: ?*LxStore, out: ?[*]u8, record_size: u64, out_bytes: u64 };
pub extern fn lx_store_gather_streams(indices: ?[*]const i64, count: u64, streams: ?[*]const LxGatherStream, stream_count: u64) Status;
pub extern fn lx_store_delete(store: ?*LxStore, indices: ?[*]const i64, count: u64) Status;
pub extern fn lx_store_compact(store: ?*LxStore) Status;
pub extern fn lx_record_sums(buffer: ?[*]const u8, buffer_len: u64, starts: ?[*]const u64, stored_lengths: ?[*]const u32, logic_lengths: ?[*]const u32, codecs: ?[*]const u8, count: u64, out_sums: ?[*]u32) Status;
pub extern fn lx_batch_pad(values: ?[*]const u8, values_size: u64, cu_seqlens: ?[*]const i32, count: u64, row_size: u64, pad_row: ?[*]const u8, length: u64, out: ?[*]u8, out_capacity: u64, mask: ?[*]u8, mask_capacity: u64) Status;
pub extern fn lx_stores_delete(stores: ?[*]const ?*LxStore, count: u64, indices: ?[*]const i64, splits: ?[*]const u64) Status;
pub extern fn lx_store_stats(store: ?*LxStore, out: ?*LxStats) Status;
pub extern fn lx_store_sync(store: ?*LxStore) Status;
pub extern fn lx_store_train_dict(store: ?*LxStore, samples: ?[*]const u8, offsets: ?[*]const u64, count: u64, dict_size: u64) Status;
pub const MaintenanceCheck = *const fn (context: ?*anyopaque, operation: [*]const u8, operation_size: u64) callconv(.c) c_int;
pub extern fn lx_store_set_maintenance_check(store: ?*LxStore, function: ?MaintenanceCheck, context: ?*anyopaque) Status;
pub const LxSamplerRequest = extern struct { mode: u32, reserved: u32, length: u64, batch_size: u64, seed: u64, shard_index: u64, shard_count: u64 };
pub extern fn lx_sampler_batch(request: ?*const LxSamplerRequest, step: u64, out: ?[*]i64) Status;
pub extern fn lx_sampler_fill(mode: u32, length: u64, batch_size: u64, seed: u64, step: u64, shard_index: u64, shard_count: u64, out: ?[*]i64) Status;
pub const LxView = opaque {};
pub extern fn lx_view_open(stores: ?[*]const *LxStore, count: u64, out: ?*?*LxView) Status;
pub extern fn lx_view_close(view: ?*LxView) void;
pub extern fn lx_view_length(view: ?*const LxView) u64;
pub extern fn lx_view_gather_fixed(view: ?*LxView, indices: ?[*]const i64, count: u64, dst: ?[*]u8, stride: u64) Status;
pub extern fn lx_view_record_lengths(view: ?*LxView, indices: ?[*]const i64, count: u64, out_lengths: ?[*]u64) Status;
pub extern fn lx_view_record_offsets(view: ?*LxView, indices: ?[*]const i64, count: u64, row_size: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status;
pub extern fn lx_view_gather_packed(view: ?*LxView, indices: ?[*]const i64, count: u64, row_size: u64, dst: ?[*]u8, dst_capacity: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status;
pub extern fn lx_view_gather_padded(view: ?*LxView, indices: ?[*]const i64, count: u64, row_size: u64, pad_row: ?[*]const u8, lengths: ?[*]const u64, length_count: u64, flags: u32, out: ?[*]u8, out_capacity: u64, mask: ?[*]u8, mask_capacity: u64, out_rows: ?[*]u64, out_length: ?*u64) Status;
pub extern fn lx_view_gather(view: ?*LxView, indices: ?[*]const i64, count: u64, dst: ?[*]u8, dst_offsets: ?[*]const u64) Status;
pub extern fn lx_store_gather_arrays(store_low: u32, store_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, stride: u32, out_bytes: u32) Status;
pub extern fn lx_view_gather_arrays(view_low: u32, view_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, stride: u32, out_bytes: u32) Status;
pub extern fn lx_store_gather_packed_arrays(store_low: u32, store_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, offsets_low: u32, offsets_high: u32, rows_low: u32, rows_high: u32, row_size: u32) Status;
pub extern fn lx_view_gather_packed_arrays(view_low: u32, view_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, offsets_low: u32, offsets_high: u32, rows_low: u32, rows_high: u32, row_size: u32) Status;
pub extern fn lx_pool_set_policy(policy: u32) Status;
pub extern fn lx_pool_policy() u32;
pub extern fn lx_stores_set_policy(policy: u32) Status;
pub extern fn lx_stores_policy() u32;

/// A refusal: the expected status and a non-empty message naming the problem.
pub fn expectRefused(expected: Status, got: Status, fragment: []const u8) !void {
    try testing.expectEqual(expected, got);
    const message = std.mem.span(lx_last_error());
    if (std.mem.indexOf(u8, message, fragment) == null) {
        std.debug.print("message \"{s}\" lacks \"{s}\"\n", .{ message, fragment });
        return error.TestUnexpectedMessage;
    }
}

/// A store with records 0..9 of 4 bytes each (bytes i, i, i, i) in a fresh temporary folder.
pub const Fixture = struct {
    tmp: testing.TmpDir,
    path: [80:0]u8 = @splat(0),
    store: *LxStore,

    pub fn init(fixture: *Fixture) !void {
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

    pub fn deinit(fixture: *Fixture) void {
        lx_store_close(fixture.store);
        fixture.tmp.cleanup();
    }
};

pub const huge: u64 = std.math.maxInt(u64);

/// The halves of a pointer, as the Python binding passes them.
pub fn halves(pointer: anytype) [2]u32 {
    const address: u64 = @intFromPtr(pointer);
    return .{ @truncate(address), @intCast(address >> 32) };
}

/// NumPy's fields of a one-dimensional array of dims[0] items of strides[0] bytes at `data`.
pub fn arrayFields(data: [*]u8, dims: *const [1]isize, strides: *const [1]isize, flags: c_int) numpy_array.Fields {
    return .{ .data = data, .nd = 1, .dimensions = dims, .strides = strides, .base = null, .descr = null, .flags = flags };
}
