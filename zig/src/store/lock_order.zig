//! The one order in which the library takes the in-process locks of several stores at once:
//! ascending address of the Store object, each store once, released in reverse. A multi-store
//! delete, a view's gather and lx_store_gather_streams all take their stores in this order,
//! whatever order the caller listed them in, so no two calls can each hold a store the other
//! waits for. Only the locking follows this order; results keep the caller's order.
const std = @import("std");
const assert = std.debug.assert;
const Store = @import("store.zig").Store;
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const Error = errors.Error;

/// Whether store a is locked before store b.
pub fn before(a: *const Store, b: *const Store) bool {
    return @intFromPtr(a) < @intFromPtr(b);
}

/// Sorts `stores` into the lock order and drops repeats; returns the distinct prefix.
pub fn distinctInOrder(stores: []*Store) []*Store {
    if (stores.len == 0) return stores;
    std.mem.sortUnstable(*Store, stores, {}, struct {
        fn less(_: void, a: *Store, b: *Store) bool {
            return before(a, b);
        }
    }.less);
    var count: usize = 1;
    for (stores[1..]) |store| {
        if (store == stores[count - 1]) continue;
        stores[count] = store;
        count += 1;
    }
    return stores[0..count];
}

fn assertInOrder(ordered: []const *Store) void {
    if (ordered.len < 2) return;
    for (ordered[0 .. ordered.len - 1], ordered[1..]) |earlier, later| {
        assert(before(earlier, later));
    }
}

/// Takes every store's lock shared, in the lock order. `ordered` comes from distinctInOrder.
pub fn lockShared(ordered: []const *Store) void {
    assertInOrder(ordered);
    const io = pool.io();
    for (ordered) |store| store.lock.lockSharedUncancelable(io);
}

/// Releases what lockShared took, in reverse.
pub fn unlockShared(ordered: []const *Store) void {
    const io = pool.io();
    var k = ordered.len;
    while (k > 0) {
        k -= 1;
        ordered[k].lock.unlockShared(io);
    }
}

/// Begins maintenance (the store exclusive, Store.beginMaintenance) on every store, in the
/// lock order. On an error, the stores already taken are released, in reverse, and nothing
/// is held.
pub fn beginMaintenance(ordered: []const *Store, operation: []const u8) Error!void {
    assertInOrder(ordered);
    var taken: usize = 0;
    errdefer endMaintenance(ordered[0..taken]);
    for (ordered) |store| {
        try store.beginMaintenance(operation);
        taken += 1;
    }
}

/// Ends what beginMaintenance began, in reverse.
pub fn endMaintenance(ordered: []const *Store) void {
    var k = ordered.len;
    while (k > 0) {
        k -= 1;
        ordered[k].endMaintenance();
    }
}

/// The first position of each distinct store of `stores`, in the lock order: what a view
/// keeps to lock any subset of its stores (lockSharedMarked). Owned by the caller.
pub fn positionsInOrder(allocator: std.mem.Allocator, stores: []const *Store) Error![]u32 {
    const positions = allocator.alloc(u32, stores.len) catch return errors.outOfMemory();
    defer allocator.free(positions);
    for (positions, 0..) |*position, k| position.* = @intCast(k);
    // By store, then by position: each run of one store starts at its first position.
    std.mem.sortUnstable(u32, positions, stores, struct {
        fn less(context: []const *Store, a: u32, b: u32) bool {
            return before(context[a], context[b]) or (context[a] == context[b] and a < b);
        }
    }.less);
    var count: usize = 1;
    for (positions[1..]) |position| {
        if (stores[position] == stores[positions[count - 1]]) continue;
        positions[count] = position;
        count += 1;
    }
    return allocator.dupe(u32, positions[0..count]) catch return errors.outOfMemory();
}

/// Takes shared the stores at the positions marked in `marked` (a bit set over positions),
/// in the lock order given by `ordered_positions` (from positionsInOrder). Only first
/// positions may be marked: a store is locked once.
pub fn lockSharedMarked(
    stores: []const *Store,
    ordered_positions: []const u32,
    marked: []const u64,
) void {
    const io = pool.io();
    for (ordered_positions) |k| {
        if (isMarked(marked, k)) stores[k].lock.lockSharedUncancelable(io);
    }
}

/// Releases what lockSharedMarked took, in reverse.
pub fn unlockSharedMarked(
    stores: []const *Store,
    ordered_positions: []const u32,
    marked: []const u64,
) void {
    const io = pool.io();
    var i = ordered_positions.len;
    while (i > 0) {
        i -= 1;
        const k = ordered_positions[i];
        if (isMarked(marked, k)) stores[k].lock.unlockShared(io);
    }
}

fn isMarked(marked: []const u64, k: u32) bool {
    return marked[k / 64] & (@as(u64, 1) << @intCast(k % 64)) != 0;
}

test "the lock order: by address, each store once, a view's first positions" {
    const testing = std.testing;
    const low: *Store = @ptrFromInt(0x1000);
    const mid: *Store = @ptrFromInt(0x2000);
    const high: *Store = @ptrFromInt(0x3000);
    var given = [_]*Store{ high, low, high, mid, low };
    try testing.expectEqualSlices(*Store, &.{ low, mid, high }, distinctInOrder(&given));
    // Positions 1 and 4 hold low, 3 holds mid, 0 and 2 hold high: each store's first.
    const view_stores = [_]*Store{ high, low, high, mid, low };
    const positions = try positionsInOrder(testing.allocator, &view_stores);
    defer testing.allocator.free(positions);
    try testing.expectEqualSlices(u32, &.{ 1, 3, 0 }, positions);
}
