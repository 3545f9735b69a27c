//! The C ABI of libloaderx (documented in zig/include/loaderx.h). This is the only file with
//! `export fn`s. Every argument is validated here; nothing a caller passes may panic.
const std = @import("std");
const status = @import("status.zig");
const diagnostic = @import("diagnostic.zig");
const Status = status.Status;
const sampler = @import("sampler.zig");
const c_handles = @import("handles.zig");
const LxStore = c_handles.LxStore;
const LxView = c_handles.LxView;
const CHandle = c_handles.CHandle;
const nounOf = c_handles.nounOf;
const handleOf = c_handles.handleOf;
const resolve = c_handles.resolve;
const handleAt = c_handles.handleAt;
const closeHandle = c_handles.closeHandle;
const lengthOf = c_handles.lengthOf;
const countOverflows = c_handles.countOverflows;
const abi_types = @import("abi_types.zig");
const open_create = abi_types.open_create;
const open_durable = abi_types.open_durable;
const open_read_only = abi_types.open_read_only;
const open_verify_all = abi_types.open_verify_all;
const open_verify_none = abi_types.open_verify_none;
const LxStats = abi_types.LxStats;
const LxArrayFacts = abi_types.LxArrayFacts;
const LxGatherStream = abi_types.LxGatherStream;
const LxSamplerRequest = abi_types.LxSamplerRequest;

/// Bumped on every change to loaderx.h; loaderx/_native.py refuses a library with another value.
pub const abi_version: u32 = 16;

export fn lx_abi_version() callconv(.c) u32 {
    return abi_version;
}

export fn lx_status_name(code: c_int) callconv(.c) [*:0]const u8 {
    if (code < 0 or code >= status.status_count) return "unknown";
    const s: Status = @enumFromInt(code);
    return s.name().ptr;
}

export fn lx_last_error() callconv(.c) [*:0]const u8 {
    return status.message();
}

export fn lx_pool_set_policy(policy: u32) callconv(.c) Status {
    const chosen = std.enums.fromInt(pool_advice.Policy, policy) orelse
        return invalid("pool policy {d} is not one of LX_POOL_AUTO (0), LX_POOL_ALWAYS (1) and LX_POOL_NEVER (2)", .{policy});
    store_pool.policy.store(chosen, .monotonic);
    status.clearMessage();
    return .ok;
}

export fn lx_pool_policy() callconv(.c) u32 {
    return @intFromEnum(store_pool.policy.load(.monotonic));
}

export fn lx_stores_set_policy(policy: u32) callconv(.c) Status {
    const chosen = std.enums.fromInt(raw_copy.StoresPolicy, policy) orelse
        return invalid("stores policy {d} is not one of LX_STORES_AUTO (0), LX_STORES_STREAMING (1) and LX_STORES_CACHED (2)", .{policy});
    raw_copy.stores_policy.store(chosen, .monotonic);
    status.clearMessage();
    return .ok;
}

export fn lx_stores_policy() callconv(.c) u32 {
    return @intFromEnum(raw_copy.stores_policy.load(.monotonic));
}

// ---- store ---------------------------------------------------------------------------------
// (lx_store_*, lx_after_fork_child: owned by the store work)

const store_mod = @import("store.zig");
const record_offsets = @import("record_offsets.zig");
const registry = @import("registry.zig");
const gather_streams = @import("gather_streams.zig");
const store_pool = @import("pool.zig");
const pool_advice = @import("pool_advice.zig");
const raw_copy = @import("raw_copy.zig");
const store_errors = @import("errors.zig");
const store_limits = @import("limits.zig");
const format = @import("format.zig");
const checksum = @import("checksum.zig");
pub const Store = store_mod.Store;
const integrity = @import("integrity.zig");

/// Turns a store result into a status (the message was set where the failure happened).
fn storeStatus(result: store_errors.Error!void) Status {
    result catch |err| return coreStatus(err);
    status.clearMessage();
    return .ok;
}

/// The C answer to an error of the core: its status, and its diagnostic as the message
/// lx_last_error() returns. This file alone writes that message; the core only notes why.
fn coreStatus(err: store_errors.Error) Status {
    status.setMessage("{s}", .{diagnostic.text()});
    return store_errors.toStatus(err);
}

/// The object when the handle is open, or null after setting the message of
/// LX_INVALID_ARGUMENT.
fn openHandle(comptime T: type, handle: ?*const CHandle(T), comptime function: []const u8) ?*T {
    const noun = comptime nounOf(T);
    if (handle == null) {
        _ = invalid(function ++ ": " ++ noun ++ " is NULL", .{});
        return null;
    }
    return resolve(T, handle) orelse {
        _ = invalid(function ++ ": " ++ noun ++ " is not an open lx_" ++ noun ++ " (closed already, or another kind of pointer)", .{});
        return null;
    };
}

fn invalid(comptime fmt: []const u8, args: anytype) Status {
    status.setMessage(fmt, args);
    return .invalid_argument;
}

// ---- the calls a store and a view share: one implementation each, T names the function -----

fn gatherFixed(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, dst: ?[*]u8, stride: u64) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_gather_fixed";
    const object = openHandle(T, handle, function) orelse return .invalid_argument;
    if (count == 0) return .ok;
    const indices_ptr = indices orelse return invalid(function ++ ": indices is NULL", .{});
    if (countOverflows(count, @sizeOf(i64), 0)) return invalid(function ++ ": count {d} overflows the address space", .{count});
    if (stride == 0) return invalid(function ++ ": stride is 0", .{});
    const dst_ptr = dst orelse return invalid(function ++ ": dst is NULL", .{});
    const byte_count = std.math.mul(u64, count, stride) catch return invalid(function ++ ": count * stride overflows", .{});
    return storeStatus(object.gather(indices_ptr[0..count], .{ .base = dst_ptr, .stride = stride }, byte_count));
}

fn recordLengths(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, out_lengths: ?[*]u64) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_record_lengths";
    const object = openHandle(T, handle, function) orelse return .invalid_argument;
    if (count == 0) return .ok;
    const indices_ptr = indices orelse return invalid(function ++ ": indices is NULL", .{});
    const out_ptr = out_lengths orelse return invalid(function ++ ": out_lengths is NULL", .{});
    if (countOverflows(count, @sizeOf(u64), 0)) return invalid(function ++ ": count {d} overflows the address space", .{count});
    return storeStatus(object.recordLengths(indices_ptr[0..count], out_ptr[0..count]));
}

/// The lengths of the records, summed into offsets (and rows: record_offsets.zig); the lengths
/// land in out_offsets[1..] first, so no scratch is needed.
fn recordOffsets(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, row_size: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_record_offsets";
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
fn gatherPacked(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, row_size: u64, dst: ?[*]u8, dst_capacity: u64, out_offsets: ?[*]u64, out_rows: ?[*]i32) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_gather_packed";
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

fn gatherRagged(comptime T: type, handle: ?*CHandle(T), indices: ?[*]const i64, count: u64, dst: ?[*]u8, dst_offsets: ?[*]const u64) Status {
    const function = "lx_" ++ comptime nounOf(T) ++ "_gather";
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

/// The stores of a list of handles (lx_view_open, lx_stores_delete), which the caller frees
/// with c_allocator; or null after setting the message of the status put in `refusal`.
fn resolveStores(comptime function: []const u8, handles: []const ?*LxStore, refusal: *Status) ?[]*Store {
    const stores = std.heap.c_allocator.alloc(*Store, handles.len) catch {
        refusal.* = outOfMemoryStatus(function);
        return null;
    };
    for (handles, stores, 0..) |handle, *store, i| {
        store.* = resolve(Store, handle) orelse {
            std.heap.c_allocator.free(stores);
            refusal.* = if (handle == null)
                invalid(function ++ ": store {d} is NULL", .{i})
            else
                invalid(function ++ ": store {d} is not an open lx_store (closed already, or another kind of pointer)", .{i});
            return null;
        };
    }
    return stores;
}

export fn lx_after_fork_child() callconv(.c) void {
    store_pool.afterForkChild();
    registry.afterForkChild();
    store_mod.afterForkChild();
    view_mod.afterForkChild();
}

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

export fn lx_store_close(store: ?*LxStore) callconv(.c) void {
    closeHandle(Store, store);
}

export fn lx_store_length(store: ?*const LxStore) callconv(.c) u64 {
    return lengthOf(Store, store);
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

export fn lx_store_gather_fixed(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    dst: ?[*]u8,
    stride: u64,
) callconv(.c) Status {
    return gatherFixed(Store, store, indices, count, dst, stride);
}

export fn lx_store_record_lengths(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    out_lengths: ?[*]u64,
) callconv(.c) Status {
    return recordLengths(Store, store, indices, count, out_lengths);
}

export fn lx_store_record_offsets(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    row_size: u64,
    out_offsets: ?[*]u64,
    out_rows: ?[*]i32,
) callconv(.c) Status {
    return recordOffsets(Store, store, indices, count, row_size, out_offsets, out_rows);
}

export fn lx_store_gather_packed(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    row_size: u64,
    dst: ?[*]u8,
    dst_capacity: u64,
    out_offsets: ?[*]u64,
    out_rows: ?[*]i32,
) callconv(.c) Status {
    return gatherPacked(Store, store, indices, count, row_size, dst, dst_capacity, out_offsets, out_rows);
}

export fn lx_store_gather(
    store: ?*LxStore,
    indices: ?[*]const i64,
    count: u64,
    dst: ?[*]u8,
    dst_offsets: ?[*]const u64,
) callconv(.c) Status {
    return gatherRagged(Store, store, indices, count, dst, dst_offsets);
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

fn outOfMemoryStatus(comptime function: []const u8) Status {
    status.setMessage(function ++ ": out of memory", .{});
    return .out_of_memory;
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

// ---- view ----------------------------------------------------------------------------------
// (lx_view_*: several open stores read as one index space; owned by the shards work)

const view_mod = @import("view.zig");
const View = view_mod.View;

export fn lx_view_open(stores: ?[*]const ?*LxStore, count: u64, out: ?*?*LxView) callconv(.c) Status {
    const out_ptr = out orelse return invalid("lx_view_open: out is NULL", .{});
    out_ptr.* = null;
    if (count == 0 or count > store_limits.view_store_count_max)
        return invalid("lx_view_open: count is {d}; a view holds 1 to {d} stores", .{ count, store_limits.view_store_count_max });
    const stores_ptr = stores orelse return invalid("lx_view_open: stores is NULL", .{});
    const handles = stores_ptr[0..@intCast(count)];
    var refusal: Status = .ok;
    const plain = resolveStores("lx_view_open", handles, &refusal) orelse return refusal;
    defer std.heap.c_allocator.free(plain);
    const view = View.open(std.heap.c_allocator, plain) catch |err| return coreStatus(err);
    out_ptr.* = handleOf(View, view);
    status.clearMessage();
    return .ok;
}

export fn lx_view_close(view: ?*LxView) callconv(.c) void {
    closeHandle(View, view);
}

export fn lx_view_length(view: ?*const LxView) callconv(.c) u64 {
    return lengthOf(View, view);
}

export fn lx_view_gather_fixed(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    dst: ?[*]u8,
    stride: u64,
) callconv(.c) Status {
    return gatherFixed(View, view, indices, count, dst, stride);
}

export fn lx_view_record_lengths(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    out_lengths: ?[*]u64,
) callconv(.c) Status {
    return recordLengths(View, view, indices, count, out_lengths);
}

export fn lx_view_record_offsets(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    row_size: u64,
    out_offsets: ?[*]u64,
    out_rows: ?[*]i32,
) callconv(.c) Status {
    return recordOffsets(View, view, indices, count, row_size, out_offsets, out_rows);
}

export fn lx_view_gather_packed(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    row_size: u64,
    dst: ?[*]u8,
    dst_capacity: u64,
    out_offsets: ?[*]u64,
    out_rows: ?[*]i32,
) callconv(.c) Status {
    return gatherPacked(View, view, indices, count, row_size, dst, dst_capacity, out_offsets, out_rows);
}

export fn lx_view_gather(
    view: ?*LxView,
    indices: ?[*]const i64,
    count: u64,
    dst: ?[*]u8,
    dst_offsets: ?[*]const u64,
) callconv(.c) Status {
    return gatherRagged(View, view, indices, count, dst, dst_offsets);
}

// ---- the Python binding's fast path: 32-bit halves and NumPy arrays by their fields --------
// ctypes passes a Python int as a C int far more cheaply than as any typed argument, and
// id(array) costs nothing where an array's data pointer costs a Python call. So these take
// every 64-bit value as two u32 halves (low, high) and every array as the address of its NumPy
// fields (numpy_array.zig). loaderx/_native.py uses them only after lx_join_halves and
// lx_read_array_facts have given back what it passed and what NumPy says of its probe arrays.

const numpy_array = @import("numpy_array.zig");

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

fn gatherArrays(comptime T: type, handle_low: u32, handle_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, stride: u32, out_bytes: u32) Status {
    const noun = comptime nounOf(T);
    const function = "lx_" ++ noun ++ "_gather_arrays";
    const object = handleAt(T, handle_low, handle_high) orelse return invalid(function ++ ": " ++ noun ++ " is NULL, misaligned or not open", .{});
    const request = ArrayGather.read(function, indices_low, indices_high, out_low, out_high, stride, out_bytes) orelse return .invalid_argument;
    return storeStatus(object.gather(request.indices, .{ .base = request.out, .stride = stride }, request.byte_count));
}

export fn lx_store_gather_arrays(store_low: u32, store_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, stride: u32, out_bytes: u32) callconv(.c) Status {
    return gatherArrays(Store, store_low, store_high, indices_low, indices_high, out_low, out_high, stride, out_bytes);
}

export fn lx_view_gather_arrays(view_low: u32, view_high: u32, indices_low: u32, indices_high: u32, out_low: u32, out_high: u32, stride: u32, out_bytes: u32) callconv(.c) Status {
    return gatherArrays(View, view_low, view_high, indices_low, indices_high, out_low, out_high, stride, out_bytes);
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

// ---- sampler -------------------------------------------------------------------------------
// (lx_sampler_fill: owned by the sampler work)

export fn lx_sampler_fill(
    mode: u32,
    length: u64,
    batch_size: u64,
    seed: u64,
    step: u64,
    shard_index: u64,
    shard_count: u64,
    out: ?[*]i64,
) callconv(.c) Status {
    const request: sampler.Request = .{
        .mode = mode,
        .length = length,
        .batch_size = batch_size,
        .seed = seed,
        .step = step,
        .shard_index = shard_index,
        .shard_count = shard_count,
    };
    _ = sampler.validate(request) catch |err| return samplerStatus(err, request);
    const destination = out orelse {
        status.setMessage("the output buffer is NULL", .{});
        return .invalid_argument;
    };
    if (batch_size > std.math.maxInt(usize)) {
        status.setMessage("batch_size {d} does not fit in memory", .{batch_size});
        return .invalid_argument;
    }
    sampler.fill(request, destination[0..@intCast(batch_size)]) catch |err|
        return samplerStatus(err, request);
    return .ok;
}

/// The record checksum (`sums.zr`'s value) of `count` stored records lying in `buffer`: record i
/// is `stored_lengths[i]` bytes at `starts[i]`, with its logical length and codec byte. Lets a
/// caller verify records it fetched itself (a remote cache) before any reader sees them.
export fn lx_record_sums(
    buffer: ?[*]const u8,
    buffer_len: u64,
    starts: ?[*]const u64,
    stored_lengths: ?[*]const u32,
    logic_lengths: ?[*]const u32,
    codecs: ?[*]const u8,
    count: u64,
    out_sums: ?[*]u32,
) callconv(.c) Status {
    if (count == 0) {
        status.clearMessage();
        return .ok;
    }
    if (count > store_limits.record_count_max)
        return invalid("lx_record_sums: count {d} exceeds {d}", .{ count, store_limits.record_count_max });
    const bytes = buffer orelse return invalid("lx_record_sums: buffer is NULL", .{});
    const first = starts orelse return invalid("lx_record_sums: starts is NULL", .{});
    const stored = stored_lengths orelse return invalid("lx_record_sums: stored_lengths is NULL", .{});
    const logic = logic_lengths orelse return invalid("lx_record_sums: logic_lengths is NULL", .{});
    const codec_bytes = codecs orelse return invalid("lx_record_sums: codecs is NULL", .{});
    const out = out_sums orelse return invalid("lx_record_sums: out_sums is NULL", .{});
    const n: usize = @intCast(count);
    // Every argument is checked before the first sum is written, so a refused call leaves out_sums as it was.
    for (0..n) |i| {
        const codec: format.Codec = @enumFromInt(codec_bytes[i]);
        if (!codec.isKnown()) return invalid("lx_record_sums: record {d} has unknown codec {d}", .{ i, codec_bytes[i] });
        if (first[i] > buffer_len or stored[i] > buffer_len - first[i])
            return invalid("lx_record_sums: record {d} ({d} bytes at {d}) ends past the buffer's {d} bytes", .{ i, stored[i], first[i], buffer_len });
    }
    for (0..n) |i| {
        const start: usize = @intCast(first[i]);
        const piece = bytes[start .. start + stored[i]];
        out[i] = checksum.recordSum(piece, logic[i], @enumFromInt(codec_bytes[i]));
    }
    status.clearMessage();
    return .ok;
}

export fn lx_sampler_batch(request: ?*const LxSamplerRequest, step: u64, out: ?[*]i64) callconv(.c) Status {
    const r = request orelse {
        status.setMessage("the sampler request is NULL", .{});
        return .invalid_argument;
    };
    if (r.reserved != 0) {
        status.setMessage("the sampler request's reserved field is {d}, not 0", .{r.reserved});
        return .invalid_argument;
    }
    return lx_sampler_fill(r.mode, r.length, r.batch_size, r.seed, step, r.shard_index, r.shard_count, out);
}

fn samplerStatus(err: sampler.Error, r: sampler.Request) Status {
    switch (err) {
        error.UnknownMode => status.setMessage(
            "unknown sampler mode {d} (0 sequential, 1 iid, 2 cyclic)",
            .{r.mode},
        ),
        error.LengthZero => status.setMessage("length is 0: there is nothing to sample", .{}),
        error.LengthTooLarge => status.setMessage(
            "length {d} exceeds the largest index space, 2^63",
            .{r.length},
        ),
        error.BatchSizeZero => status.setMessage("batch_size is 0", .{}),
        error.ShardCountZero => status.setMessage("shard_count is 0", .{}),
        error.ShardIndexOutOfRange => status.setMessage(
            "shard_index {d} is not below shard_count {d}",
            .{ r.shard_index, r.shard_count },
        ),
        error.GlobalBatchTooLarge => status.setMessage(
            "batch_size {d} * shard_count {d} overflows 64 bits",
            .{ r.batch_size, r.shard_count },
        ),
        error.GlobalBatchLargerThanLength => status.setMessage(
            "cyclic mode needs batch_size * shard_count ({d} * {d}) <= length {d}",
            .{ r.batch_size, r.shard_count, r.length },
        ),
    }
    return .invalid_argument;
}
