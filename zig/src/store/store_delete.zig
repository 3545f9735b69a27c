//! Delete: swap-last, planned on a copy of the table's tail and written to a redo log
//! (journal.zig) before the table changes, so a crash leaves a plan the next open finishes;
//! one store at a time or several as a whole (deleteEach), with the sums following the moves.
const std = @import("std");
const Allocator = std.mem.Allocator;
const assert = std.debug.assert;
const format = @import("../files/format.zig");
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const journal = @import("../files/journal.zig");
const checksum = @import("../codec/checksum.zig");
const integrity = @import("integrity.zig");
const index_check = @import("../batch/index_check.zig");
const Store = @import("store.zig").Store;
const lock_order = @import("lock_order.zig");
const Error = errors.Error;
const RecordLoc = format.RecordLoc;
const outOfMemory = errors.outOfMemory;

/// Swap-last delete: targets in descending order, duplicates once each. Atomic under a
/// crash: the final entries go to a redo log first (journal.zig).
pub fn delete(store: *Store, indices: []const i64) Error!void {
    try store.refuseIfReadOnly();
    try index_check.checkIndices(indices, store.meta.length());
    if (indices.len == 0) return;
    try store.beginMaintenance("delete");
    defer store.endMaintenance();
    try index_check.checkIndices(indices, store.meta.length());
    try deleteHeld(store, indices);
}

/// Deletes `indices[k]` from `stores[k]` for every k, as a whole or not at all. Refused with
/// nothing changed when any store is read-only, open elsewhere (StoreLocked) or given an
/// index out of its range: every store is taken exclusively and every index checked before
/// the first record moves. Stores are taken in the library's one lock order (lock_order.zig),
/// not the given one, so no other multi-store call can wait on this one in a cycle. Then two
/// phases: every store's redo log is written (the only step that needs new disk space) before
/// any table changes, so a full disk there removes the logs written and changes nothing; then
/// every table changes in memory (which cannot fail) before any is synced and its log
/// removed, so a failure in that last part leaves every store deleted, each finished for
/// good by its next writable open. The stores must be distinct (the C ABI checks).
pub fn deleteEach(stores: []const *Store, indices: []const []const i64) Error!void {
    assert(stores.len == indices.len);
    assert(stores.len > 0);
    for (stores, indices) |store, wanted| {
        try store.refuseIfReadOnly();
        try index_check.checkIndices(wanted, store.meta.length());
    }
    const allocator = stores[0].allocator;
    const ordered = allocator.dupe(*Store, stores) catch return outOfMemory();
    defer allocator.free(ordered);
    const distinct = lock_order.distinctInOrder(ordered);
    assert(distinct.len == stores.len);
    try lock_order.beginMaintenance(ordered, "delete");
    defer lock_order.endMaintenance(ordered);
    // Lengths may have changed while the locks were taken (another handle's delete).
    for (stores, indices) |store, wanted| try index_check.checkIndices(wanted, store.meta.length());
    const prepared = allocator.alloc(PreparedDelete, stores.len) catch return outOfMemory();
    defer allocator.free(prepared);
    var logged: usize = 0;
    defer for (prepared[0..logged]) |*delete_plan| delete_plan.deinit(allocator);
    {
        errdefer for (stores[0..logged], prepared[0..logged]) |store, *delete_plan| {
            abandonDelete(store, delete_plan);
        };
        for (stores, indices, prepared) |store, wanted, *delete_plan| {
            delete_plan.* = try prepareDelete(store, allocator, wanted);
            logged += 1;
        }
    }
    for (stores, prepared) |store, *delete_plan| {
        if (!delete_plan.empty()) journal.apply(&store.meta, delete_plan.plan());
    }
    for (stores, prepared) |store, *delete_plan| try finishDelete(store, delete_plan);
}

/// delete's work, the store held exclusively and every index checked against its length.
fn deleteHeld(store: *Store, indices: []const i64) Error!void {
    var delete_plan = try prepareDelete(store, store.allocator, indices);
    defer delete_plan.deinit(store.allocator);
    if (delete_plan.empty()) return;
    journal.apply(&store.meta, delete_plan.plan());
    try finishDelete(store, &delete_plan);
}

/// A delete's first half, the store held exclusively and every index checked: plans the
/// swap-last moves and writes them to the redo log (and the sums' pending mark) without
/// touching the table. On an error nothing is left behind.
fn prepareDelete(store: *Store, allocator: Allocator, indices: []const i64) Error!PreparedDelete {
    const io = pool.io();
    const old_length = store.meta.length();
    const targets = allocator.alloc(u32, indices.len) catch return outOfMemory();
    errdefer allocator.free(targets);
    // Each index read once and checked again as it is read: the callers checked them, but
    // the caller's array may have changed since.
    for (indices, targets, 0..) |index, *target, i| {
        if (@as(u64, @bitCast(index)) >= old_length) return index_check.indexOutOfRange(index, i, old_length);
        target.* = @intCast(index);
    }
    std.mem.sortUnstable(u32, targets, {}, std.sort.desc(u32));
    const unique = uniqueSorted(targets);
    const new_length: u32 = old_length - @as(u32, @intCast(unique.len));
    const moves = allocator.alloc(journal.Move, unique.len) catch return outOfMemory();
    errdefer allocator.free(moves);
    // Every entry a swap-last delete copies comes from [new_length, old_length). Running it
    // on a copy of that tail yields the final value of each entry below new_length without
    // touching the table, which changes only after the plan is in the log.
    const tail = allocator.dupe(RecordLoc, store.meta.table[new_length..old_length]) catch return outOfMemory();
    defer allocator.free(tail);
    const move_count = planMoves(tail, unique, old_length, moves);
    const prepared: PreparedDelete = .{
        .targets = targets,
        .unique_count = unique.len,
        .moves = moves,
        .move_count = move_count,
        .old_length = old_length,
        .new_length = new_length,
    };
    if (prepared.empty()) return prepared;
    if (store.sidecar) |*sidecar| {
        try integrity.repairPendingDelete(store);
        try sidecar.loadAll(io, old_length);
        // sums.zr's header records the delete before the table changes: a kill before the
        // moved sums are written leaves moved entries (redone from redo.zr) with old sums,
        // which the record lets readers accept and the next delete or compaction repair
        // (see integrity.duplicateChecks). redo.zr stays the record of the table's moves.
        try sidecar.setPending(io, old_length, new_length, store.durable);
    }
    errdefer if (store.sidecar) |*sidecar| sidecar.clearPending(io, store.durable) catch {};
    try journal.write(allocator, io, store.dir, prepared.plan(), store.durable);
    return prepared;
}

/// Undoes prepareDelete of a delete whose table never changed. Best effort: this runs after
/// another store's failure, whose error is the one reported; a log it cannot remove is a
/// plan of final entries, applied by the next writable open.
fn abandonDelete(store: *Store, delete_plan: *const PreparedDelete) void {
    if (delete_plan.empty()) return;
    const io = pool.io();
    journal.remove(io, store.dir, store.durable) catch return;
    // Only once the log is gone: a log left behind is replayed by the next writable open,
    // and the pending mark is what lets the sums of the entries it moves be settled then.
    if (store.sidecar) |*sidecar| sidecar.clearPending(io, store.durable) catch {};
}

/// A delete's second half, after journal.apply changed the table in memory: syncs the
/// table, moves the sums and removes the redo log.
fn finishDelete(store: *Store, delete_plan: *const PreparedDelete) Error!void {
    if (delete_plan.empty()) return;
    const io = pool.io();
    assert(store.meta.length() == delete_plan.new_length);
    if (store.durable) try store.meta.flushAll(io);
    if (store.sidecar) |*sidecar| {
        try moveSums(store, sidecar, delete_plan.unique(), delete_plan.old_length, delete_plan.new_length);
        try sidecar.clearPending(io, store.durable);
    }
    try journal.remove(io, store.dir, store.durable);
}

/// The sums follow delete's moves: the same swap-last steps, over the sums in memory
/// (loaded before the plan), then the moved ones are written. Exclusive lock held.
fn moveSums(store: *Store, sidecar: *checksum.Sidecar, unique: []const u32, old_length: u32, new_length: u32) Error!void {
    var last = old_length;
    for (unique) |target| {
        last -= 1;
        sidecar.move(last, target);
    }
    try sidecar.flushMoved(pool.io(), unique, new_length, store.durable);
    sidecar.truncateLoaded(new_length);
}

/// A delete planned and in its redo log, its table not changed yet (prepareDelete).
const PreparedDelete = struct {
    /// Owned; its first unique_count values are the distinct targets, in descending order.
    targets: []u32,
    unique_count: usize,
    /// Owned; the first move_count are the plan's moves.
    moves: []journal.Move,
    move_count: usize,
    old_length: u32,
    new_length: u32,

    fn empty(prepared: *const PreparedDelete) bool {
        return prepared.unique_count == 0;
    }

    fn unique(prepared: *const PreparedDelete) []const u32 {
        return prepared.targets[0..prepared.unique_count];
    }

    fn plan(prepared: *const PreparedDelete) journal.Plan {
        return .{ .old_length = prepared.old_length, .new_length = prepared.new_length, .moves = prepared.moves[0..prepared.move_count] };
    }

    fn deinit(prepared: *PreparedDelete, allocator: Allocator) void {
        allocator.free(prepared.targets);
        allocator.free(prepared.moves);
        prepared.* = undefined;
    }
};

/// The swap-last moves that delete `unique` (distinct, descending) from a table of old_length
/// entries, run on `tail`, a copy of its entries [new_length, old_length): each target below the
/// new length gets the entry of the last record still standing. Returns how many moves it
/// wrote to `moves`.
fn planMoves(tail: []RecordLoc, unique: []const u32, old_length: u32, moves: []journal.Move) usize {
    assert(tail.len == unique.len and moves.len >= unique.len);
    const new_length: u32 = old_length - @as(u32, @intCast(unique.len));
    var move_count: usize = 0;
    var last = old_length;
    for (unique) |target| {
        last -= 1;
        assert(target <= last and last >= new_length);
        const entry = tail[last - new_length];
        if (target >= new_length) {
            tail[target - new_length] = entry; // beyond the new length: invisible
        } else {
            moves[move_count] = .{ .target = target, .entry = entry };
            move_count += 1;
        }
    }
    return move_count;
}

/// Moves the distinct values of a sorted slice to its front and returns them.
fn uniqueSorted(values: []u32) []u32 {
    var count: usize = 0;
    for (values) |value| {
        if (count > 0 and values[count - 1] == value) continue;
        values[count] = value;
        count += 1;
    }
    return values[0..count];
}

test "an abandoned delete whose redo log cannot be removed keeps the sums' pending mark, and the next open finishes it" {
    const testing = std.testing;
    const io = pool.io();
    var tmp = testing.tmpDir(.{});
    defer tmp.cleanup();
    var path_buffer: [64]u8 = undefined;
    const path = try std.fmt.bufPrint(&path_buffer, ".zig-cache/tmp/{s}", .{tmp.sub_path});
    var data: [10 * 64]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = @truncate(i / 64 *% 37 +% i % 5);
    {
        const store = try Store.open(testing.allocator, path, .{ .create = true });
        defer store.close();
        _ = try store.append(.{ .data = &data, .stride = 64, .count = 10 }, 1);
        try store.beginMaintenance("delete");
        defer store.endMaintenance();
        var delete_plan = try prepareDelete(store, testing.allocator, &.{ 2, 5 });
        defer delete_plan.deinit(testing.allocator);
        // The log cannot be removed: a folder (with a file in it) stands in its place.
        try tmp.dir.rename(journal.file_name, tmp.dir, "redo.aside", io);
        try tmp.dir.createDir(io, journal.file_name, .default_dir);
        try tmp.dir.writeFile(io, .{ .sub_path = journal.file_name ++ "/x", .data = "x" });
        abandonDelete(store, &delete_plan);
        try testing.expectEqual(@as(u32, 10), store.sidecar.?.pending_from);
        try testing.expectEqual(@as(u32, 8), store.sidecar.?.pending_to);
        try tmp.dir.deleteTree(io, journal.file_name);
        try tmp.dir.rename("redo.aside", tmp.dir, journal.file_name, io);
    }
    // The log left behind is a plan of final entries: the next writable open applies it, and
    // the pending mark lets it settle the moved records' sums, so every record verifies.
    const store = try Store.open(testing.allocator, path, .{});
    defer store.close();
    try testing.expectEqual(@as(u64, 8), store.length());
    var problems: [4]integrity.Problem = undefined;
    const summary = try store.verifyAll(&problems);
    try testing.expectEqual(@as(u64, 0), summary.problem_count);
    const expected_rows = [_]usize{ 0, 1, 8, 3, 4, 9, 6, 7 }; // 9 fills 5, then 8 fills 2
    for (expected_rows, 0..) |row, index| {
        var out: [64]u8 = undefined;
        try store.gather(&.{@intCast(index)}, .{ .base = &out, .stride = 64 }, 64);
        try testing.expectEqualSlices(u8, data[row * 64 ..][0..64], &out);
    }
}
