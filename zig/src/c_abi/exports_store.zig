//! The C calls of one store alone: open, append, delete (of one store and across several),
//! compact, the maintenance check, stats, verify, sync and dictionary training, and the gather
//! of several stores' streams at once. The calls a view shares are in exports_reads.zig.
const std = @import("std");
const status = @import("../base/status.zig");
const Status = status.Status;
const c_handles = @import("handles.zig");
const LxStore = c_handles.LxStore;
const handleOf = c_handles.handleOf;
const resolve = c_handles.resolve;
const countOverflows = c_handles.countOverflows;
const abi_types = @import("abi_types.zig");
const open_create = abi_types.open_create;
const open_durable = abi_types.open_durable;
const open_read_only = abi_types.open_read_only;
const open_verify_all = abi_types.open_verify_all;
const open_verify_none = abi_types.open_verify_none;
const LxStats = abi_types.LxStats;
const LxGatherStream = abi_types.LxGatherStream;
const answer = @import("exports_status.zig");
const invalid = answer.invalid;
const storeStatus = answer.storeStatus;
const coreStatus = answer.coreStatus;
const openHandle = answer.openHandle;
const outOfMemoryStatus = answer.outOfMemoryStatus;
const resolveStores = answer.resolveStores;
const store_mod = @import("../store/store.zig");
const Store = store_mod.Store;
const gather_streams = @import("../store/gather_streams.zig");
const store_limits = @import("../base/limits.zig");
const integrity = @import("../store/integrity.zig");

export fn lx_store_open(path: ?[*:0]const u8, flags: u32, out: ?*?*LxStore) callconv(.c) Status {
    const out_ptr = out orelse return invalid("lx_store_open: out is NULL", .{});
    out_ptr.* = null;
    const path_z = path orelse return invalid("lx_store_open: path is NULL", .{});
    if (flags & ~(open_create | open_durable | open_read_only | open_verify_all | open_verify_none) != 0)
        return invalid("lx_store_open: unknown flags 0x{x}", .{flags});
    if (flags & open_create != 0 and flags & open_read_only != 0)
        return invalid("lx_store_open: LX_OPEN_CREATE and LX_OPEN_READ_ONLY exclude each other", .{});
    if (flags & open_verify_all != 0 and flags & open_verify_none != 0)
        return invalid("lx_store_open: LX_OPEN_VERIFY_ALL and LX_OPEN_VERIFY_NONE together", .{});
    const path_slice = std.mem.span(path_z);
    if (path_slice.len == 0) return invalid("lx_store_open: path is empty", .{});
    const store = Store.open(std.heap.c_allocator, path_slice, .{
        .create = flags & open_create != 0,
        .durable = flags & open_durable != 0,
        .read_only = flags & open_read_only != 0,
        .verify = if (flags & open_verify_all != 0) .all else if (flags & open_verify_none != 0) .none else .compressed,
    }) catch |err| return coreStatus(err);
    out_ptr.* = handleOf(Store, store);
    status.clearMessage();
    return .ok;
}

export fn lx_store_has_dict(store: ?*const LxStore) callconv(.c) c_int {
    const s = resolve(Store, store) orelse return 0;
    return @intFromBool(s.hasDict());
}

export fn lx_store_append(
    store: ?*LxStore,
    data: ?[*]const u8,
    offsets: ?[*]const u64,
    count: u64,
    codec_tag: u8,
    out_first: ?*u64,
) callconv(.c) Status {
    const s = openHandle(Store, store, "lx_store_append") orelse return .invalid_argument;
    const offsets_ptr = offsets orelse return invalid("lx_store_append: offsets is NULL", .{});
    // An oversized count is refused by append before any offset past the first is read.
    if (data == null and count <= store_limits.record_count_max and offsets_ptr[count] != offsets_ptr[0])
        return invalid("lx_store_append: data is NULL", .{});
    const records: store_mod.Records = .{ .data = data orelse @ptrFromInt(1), .offsets = offsets_ptr, .count = count };
    const first = s.append(records, codec_tag) catch |err| return coreStatus(err);
    if (out_first) |f| f.* = first;
    status.clearMessage();
    return .ok;
}

export fn lx_store_append_fixed(
    store: ?*LxStore,
    data: ?[*]const u8,
    stride: u64,
    count: u64,
    codec_tag: u8,
    out_first: ?*u64,
) callconv(.c) Status {
    const s = openHandle(Store, store, "lx_store_append_fixed") orelse return .invalid_argument;
    if (stride == 0 and count > 0) return invalid("lx_store_append_fixed: stride is 0", .{});
    if (count > 0 and data == null) return invalid("lx_store_append_fixed: data is NULL", .{});
    const records: store_mod.Records = .{ .data = data orelse @ptrFromInt(1), .stride = stride, .count = count };
    const first = s.append(records, codec_tag) catch |err| return coreStatus(err);
    if (out_first) |f| f.* = first;
    status.clearMessage();
    return .ok;
}

export fn lx_store_delete(store: ?*LxStore, indices: ?[*]const i64, count: u64) callconv(.c) Status {
    const s = openHandle(Store, store, "lx_store_delete") orelse return .invalid_argument;
    if (count == 0) return .ok;
    const indices_ptr = indices orelse return invalid("lx_store_delete: indices is NULL", .{});
    if (countOverflows(count, @sizeOf(i64), 0)) return invalid("lx_store_delete: count {d} overflows the address space", .{count});
    return storeStatus(s.delete(indices_ptr[0..count]));
}

/// One delete across several distinct stores, refused as a whole or done as a whole (see
/// Store.deleteEach): store k deletes `indices[splits[k] .. splits[k + 1]]`; `splits` holds
/// count + 1 non-decreasing offsets from 0.
export fn lx_stores_delete(stores: ?[*]const ?*LxStore, count: u64, indices: ?[*]const i64, splits: ?[*]const u64) callconv(.c) Status {
    if (count == 0 or count > store_limits.view_store_count_max)
        return invalid("lx_stores_delete: count is {d}; give 1 to {d} stores", .{ count, store_limits.view_store_count_max });
    const stores_ptr = stores orelse return invalid("lx_stores_delete: stores is NULL", .{});
    const splits_ptr = splits orelse return invalid("lx_stores_delete: splits is NULL", .{});
    const handles = stores_ptr[0..@intCast(count)];
    const bounds = splits_ptr[0..@intCast(count + 1)];
    var refusal: Status = .ok;
    const plain = resolveStores("lx_stores_delete", handles, &refusal) orelse return refusal;
    defer std.heap.c_allocator.free(plain);
    if (bounds[0] != 0) return invalid("lx_stores_delete: splits[0] is {d}, not 0", .{bounds[0]});
    for (bounds[1..], 1..) |bound, k| {
        if (bound < bounds[k - 1])
            return invalid("lx_stores_delete: splits[{d}] = {d} is below splits[{d}] = {d}", .{ k, bound, k - 1, bounds[k - 1] });
    }
    const total = bounds[bounds.len - 1];
    if (countOverflows(total, @sizeOf(i64), 0)) return invalid("lx_stores_delete: {d} indices overflow the address space", .{total});
    const indices_ptr: [*]const i64 = if (total == 0) &[_]i64{} else indices orelse return invalid("lx_stores_delete: indices is NULL", .{});
    const sorted = std.heap.c_allocator.dupe(*Store, plain) catch return outOfMemoryStatus("lx_stores_delete");
    defer std.heap.c_allocator.free(sorted);
    // The same handle twice would wait on its own exclusive lock forever.
    if (c_handles.sortedHasRepeat(sorted))
        return invalid("lx_stores_delete: a store appears twice", .{});
    const slices = std.heap.c_allocator.alloc([]const i64, plain.len) catch return outOfMemoryStatus("lx_stores_delete");
    defer std.heap.c_allocator.free(slices);
    for (slices, 0..) |*slice, k| slice.* = indices_ptr[@intCast(bounds[k])..@intCast(bounds[k + 1])];
    return storeStatus(Store.deleteEach(plain, slices));
}

export fn lx_store_compact(store: ?*LxStore) callconv(.c) Status {
    const s = openHandle(Store, store, "lx_store_compact") orelse return .invalid_argument;
    return storeStatus(s.compact());
}

/// The caller's check for delete, compact and train_dict (see Store.MaintenanceCheck); a null
/// function removes it. Waits for calls in flight on the store, as maintenance does.
export fn lx_store_set_maintenance_check(
    store: ?*LxStore,
    function: ?*const fn (?*anyopaque, [*]const u8, u64) callconv(.c) c_int,
    context: ?*anyopaque,
) callconv(.c) Status {
    const s = openHandle(Store, store, "lx_store_set_maintenance_check") orelse return .invalid_argument;
    s.setMaintenanceCheck(if (function) |f| .{ .function = f, .context = context } else null);
    status.clearMessage();
    return .ok;
}

export fn lx_store_stats(store: ?*LxStore, out: ?*LxStats) callconv(.c) Status {
    const s = openHandle(Store, store, "lx_store_stats") orelse return .invalid_argument;
    const out_ptr = out orelse return invalid("lx_store_stats: out is NULL", .{});
    const stats = s.stats() catch |err| return coreStatus(err);
    out_ptr.* = .{
        .records = stats.records,
        .live_bytes = stats.live_bytes,
        .chunk_bytes = stats.chunk_bytes,
        .reclaimable = stats.reclaimable,
    };
    status.clearMessage();
    return .ok;
}

export fn lx_store_verify(
    store: ?*LxStore,
    out_problems: ?[*]integrity.Problem,
    capacity: u64,
    out_summary: ?*integrity.Summary,
) callconv(.c) Status {
    const s = openHandle(Store, store, "lx_store_verify") orelse return .invalid_argument;
    const summary_ptr = out_summary orelse return invalid("lx_store_verify: out_summary is NULL", .{});
    if (capacity > 0 and out_problems == null) return invalid("lx_store_verify: out_problems is NULL", .{});
    if (capacity > store_limits.record_count_max)
        return invalid("lx_store_verify: capacity {d} exceeds {d}", .{ capacity, store_limits.record_count_max });
    const problems: []integrity.Problem = if (out_problems) |p| p[0..@intCast(capacity)] else &.{};
    const summary = s.verifyAll(problems) catch |err| return coreStatus(err);
    summary_ptr.* = summary;
    status.clearMessage();
    return .ok;
}

export fn lx_store_sync(store: ?*LxStore) callconv(.c) Status {
    const s = openHandle(Store, store, "lx_store_sync") orelse return .invalid_argument;
    return storeStatus(s.sync());
}

export fn lx_store_train_dict(
    store: ?*LxStore,
    samples: ?[*]const u8,
    offsets: ?[*]const u64,
    count: u64,
    dict_size: u64,
) callconv(.c) Status {
    const s = openHandle(Store, store, "lx_store_train_dict") orelse return .invalid_argument;
    const offsets_ptr = offsets orelse return invalid("lx_store_train_dict: offsets is NULL", .{});
    if (count > store_limits.record_count_max)
        return invalid("lx_store_train_dict: {d} samples; at most {d} are accepted", .{ count, store_limits.record_count_max });
    if (samples == null and offsets_ptr[count] != offsets_ptr[0]) return invalid("lx_store_train_dict: samples is NULL", .{});
    const records: store_mod.Records = .{ .data = samples orelse @ptrFromInt(1), .offsets = offsets_ptr, .count = count };
    return storeStatus(s.trainDict(records, dict_size));
}

export fn lx_store_gather_streams(indices: ?[*]const i64, count: u64, streams: ?[*]const LxGatherStream, stream_count: u64) callconv(.c) Status {
    if (stream_count == 0 or stream_count > gather_streams.stream_count_max)
        return invalid("lx_store_gather_streams: stream_count is {d}; a call gathers 1 to {d} streams", .{ stream_count, gather_streams.stream_count_max });
    const streams_ptr = streams orelse return invalid("lx_store_gather_streams: streams is NULL", .{});
    var list: [gather_streams.stream_count_max]gather_streams.Stream = undefined;
    for (streams_ptr[0..@intCast(stream_count)], 0..) |stream, i| {
        const stream_store = resolve(Store, stream.store) orelse return invalid("lx_store_gather_streams: stream {d}'s store is NULL, closed or not an lx_store", .{i});
        if (stream.record_size == 0) return invalid("lx_store_gather_streams: stream {d}'s record_size is 0", .{i});
        const byte_count = std.math.mul(u64, count, stream.record_size) catch
            return invalid("lx_store_gather_streams: stream {d}: count * record_size overflows", .{i});
        if (stream.out_bytes != byte_count)
            return invalid("lx_store_gather_streams: stream {d}'s out holds {d} bytes, {d} records of {d} bytes need {d}", .{ i, stream.out_bytes, count, stream.record_size, byte_count });
        const out = stream.out orelse if (byte_count == 0) @as([*]u8, @ptrFromInt(1)) else return invalid("lx_store_gather_streams: stream {d}'s out is NULL", .{i});
        if (@intFromPtr(out) > std.math.maxInt(usize) - byte_count) return invalid("lx_store_gather_streams: stream {d}'s out ends past the address space", .{i});
        list[i] = .{ .store = stream_store, .destination = .{ .base = out, .stride = stream.record_size }, .byte_count = byte_count };
    }
    if (count == 0) {
        status.clearMessage();
        return .ok;
    }
    const indices_ptr = indices orelse return invalid("lx_store_gather_streams: indices is NULL", .{});
    if (countOverflows(count, @sizeOf(i64), 0)) return invalid("lx_store_gather_streams: count {d} overflows the address space", .{count});
    return storeStatus(gather_streams.gather(list[0..@intCast(stream_count)], indices_ptr[0..@intCast(count)]));
}
