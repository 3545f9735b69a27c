//! Several stores gathered at the same indices in one call (lx_store_gather_streams): a
//! loader's streams of one step (images and their labels). Why one call: the largest stream
//! runs on the pool as Store.gather would run it, and the first of its runners to start (a
//! helper, when the pool lends one) gathers the other streams beside it. A label stream's
//! random reads, which miss the caches after the images' copy has gone through them, then cost
//! little time on the step's critical path instead of following the copy (README, issue 11).
//!
//! Everything is checked before any byte moves: every index against every store's length (one
//! checked copy serves all streams), every slot against its record's logical length. Each
//! distinct store is held shared for the whole call, locked in the library's one lock order
//! (lock_order.zig), so that this call and any other multi-store call never lock the same
//! stores in opposite orders.
const std = @import("std");
const assert = std.debug.assert;
const store_mod = @import("store.zig");
const index_check = @import("../batch/index_check.zig");
const pool = @import("../os/pool.zig");
const lock_order = @import("lock_order.zig");
const raw_copy = @import("raw_copy.zig");
const errors = @import("../base/errors.zig");
const Store = store_mod.Store;
const Error = errors.Error;

/// Streams one call gathers at most: a loader's images, labels and a few more. Bounded so that
/// the call's tasks live on its stack (each holds a Failure with its message).
pub const stream_count_max = 8;

/// Indices a call copies into its thread's scratch; more go to the heap.
const indices_scratch_max = 1024;
threadlocal var indices_scratch: [indices_scratch_max]i64 = undefined;

comptime {
    assert(stream_count_max >= 2);
    assert(indices_scratch_max * @sizeOf(i64) <= 8 * 1024);
    assert(stream_count_max * @sizeOf(Store.GatherTask) <= 4 * 1024);
}

pub const Stream = struct {
    store: *Store,
    /// A fixed-stride destination (no offsets) of indices.len slots.
    destination: store_mod.Destination,
    byte_count: u64,
};

/// Gathers record indices[i] of every stream's store into slot i of its destination.
pub fn gather(streams: []const Stream, caller_indices: []const i64) Error!void {
    assert(streams.len >= 1 and streams.len <= stream_count_max);
    for (streams) |s| assert(s.destination.offsets == null and s.destination.stride > 0);
    if (caller_indices.len == 0) return;
    for (streams) |s| try s.store.relockIfForked();
    var distinct: [stream_count_max]*Store = undefined;
    for (streams, distinct[0..streams.len]) |s, *store| store.* = s.store;
    const locked = lock_order.distinctInOrder(distinct[0..streams.len]);
    lock_order.lockShared(locked);
    defer lock_order.unlockShared(locked);

    const allocator = streams[0].store.allocator;
    const on_heap: ?[]i64 = if (caller_indices.len <= indices_scratch_max) null else allocator.alloc(i64, caller_indices.len) catch return errors.outOfMemory();
    defer if (on_heap) |copy| allocator.free(copy);
    const indices: []i64 = on_heap orelse indices_scratch[0..caller_indices.len];
    var length: u64 = std.math.maxInt(u64);
    for (locked) |s| length = @min(length, s.meta.length());
    try index_check.copyCheckedIndices(caller_indices, indices, length);
    for (streams) |s| try s.store.checkSlots(indices, s.destination);

    const main = largest(streams);
    var tasks: [stream_count_max]Store.GatherTask = undefined;
    var side_count: usize = 0;
    for (streams, 0..) |s, i| {
        if (i == main) continue;
        side_count += 1;
        tasks[side_count] = .{ .store = s.store, .indices = indices, .destination = s.destination };
    }
    var sides: Store.Sides = .{ .tasks = tasks[1 .. 1 + side_count] };
    const m = streams[main];
    tasks[0] = .{ .store = m.store, .indices = indices, .destination = m.destination, .sides = if (side_count > 0) &sides else null };
    const first: u64 = @intCast(indices[0]);
    const plan = pool.plan(indices.len, m.byte_count, m.store.gatherBytesMin(first));
    raw_copy.runGather(Store.GatherTask, &tasks[0], indices.len, plan, m.byte_count, m.store.copiesRaw(first), &m.store.gather_advisor, &m.store.copy_advisors);
    // A batch with indices always has a runner, which ran the sides; this only proves it.
    assert(side_count == 0 or sides.claimed.load(.acquire));
    try tasks[0].failure.check();
    for (tasks[1 .. 1 + side_count]) |*task| try task.failure.check();
}

/// The stream with the most bytes (the first of equals): the one the pool splits.
fn largest(streams: []const Stream) usize {
    var best: usize = 0;
    for (streams, 0..) |s, i| {
        if (s.byte_count > streams[best].byte_count) best = i;
    }
    return best;
}
