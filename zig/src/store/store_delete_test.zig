//! Tests of delete (store_delete.zig) and compaction through the store's Zig API: swap-last
//! order, a crash between the redo log and the table, compaction stopped after any move.
const std = @import("std");
const diagnostic = @import("../base/diagnostic.zig");
const testing = std.testing;
const Io = std.Io;
const store_mod = @import("store.zig");
const index_check = @import("../batch/index_check.zig");
const format = @import("../files/format.zig");
const limits = @import("../base/limits.zig");
const pool = @import("../os/pool.zig");
const raw_copy = @import("raw_copy.zig");
const journal = @import("../files/journal.zig");
const Store = store_mod.Store;
const Records = store_mod.Records;
const fixtures = @import("store_test.zig");
const Folder = fixtures.Folder;
const Batch = fixtures.Batch;
const fillRecord = fixtures.fillRecord;
const sizeSmall = fixtures.sizeSmall;
const expectRecord = fixtures.expectRecord;
const sizeHundreds = fixtures.sizeHundreds;
const expectModel = fixtures.expectModel;

test "delete: descending order, duplicates once, swap-last" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    var batch = try Batch.init(0, 10, &sizeHundreds, false);
    defer batch.deinit();
    _ = try store.append(batch.records(), 0);
    try testing.expectError(error.IndexOutOfRange, store.delete(&[_]i64{ 1, 10 }));
    try testing.expectEqual(@as(u64, 10), store.length());
    try store.delete(&[_]i64{ 2, 9, 2, 5 });
    // 9 is dropped, then 8 fills 5, then 7 fills 2.
    const expected_ids = [_]u64{ 0, 1, 7, 3, 4, 8, 6 };
    try testing.expectEqual(@as(u64, expected_ids.len), store.length());
    for (expected_ids, 0..) |id, index| try expectRecord(store, index, id, sizeHundreds(id), false);
    try store.delete(&[_]i64{ 0, 1, 2, 3, 4, 5, 6, 6 });
    try testing.expectEqual(@as(u64, 0), store.length());
}

test "a delete a crash interrupted after its redo log is finished by the next open; a torn log is dropped" {
    var folder = Folder.init();
    defer folder.deinit();
    const io = pool.io();
    {
        const store = try folder.open();
        defer store.close();
        var batch = try Batch.init(0, 10, &sizeHundreds, false);
        defer batch.deinit();
        _ = try store.append(batch.records(), 0);
        // What delete({2, 5, 9}) logs: 8 fills 5, 7 fills 2, the length drops to 7. The crash
        // comes after the log and the first table write, before the length is published.
        const moves = [_]journal.Move{
            .{ .target = 5, .entry = store.meta.table[8] },
            .{ .target = 2, .entry = store.meta.table[7] },
        };
        try journal.write(testing.allocator, io, store.dir, .{ .old_length = 10, .new_length = 7, .moves = &moves }, false);
        store.meta.table[5] = store.meta.table[8];
    }
    {
        const store = try folder.openExisting();
        defer store.close();
        const expected_ids = [_]u64{ 0, 1, 7, 3, 4, 8, 6 };
        try testing.expectEqual(@as(u64, expected_ids.len), store.length());
        for (expected_ids, 0..) |id, index| try expectRecord(store, index, id, sizeHundreds(id), false);
        try testing.expectError(error.FileNotFound, folder.tmp.dir.access(io, journal.file_name, .{}));
    }
    // A log cut short by the crash was written before any table change: it is removed unused.
    try folder.tmp.dir.writeFile(io, .{ .sub_path = journal.file_name, .data = "ZRDO\x01\x00" });
    {
        const store = try folder.openExisting();
        defer store.close();
        try testing.expectEqual(@as(u64, 7), store.length());
        try expectRecord(store, 2, 7, sizeHundreds(7), false);
        try testing.expectError(error.FileNotFound, folder.tmp.dir.access(io, journal.file_name, .{}));
    }
}

test "compaction stopped after every single record move stays valid, and re-running finishes it" {
    var folder = Folder.init();
    defer folder.deinit();
    var model: std.ArrayList(u64) = .empty;
    defer model.deinit(testing.allocator);
    var store = try folder.open();
    var store_open = true;
    defer if (store_open) store.close();
    for (0..3) |round| {
        var batch = try Batch.init(round * 20, 20, &sizeSmall, false);
        defer batch.deinit();
        _ = try store.append(batch.records(), @intCast(round % 2));
        for (0..20) |i| try model.append(testing.allocator, round * 20 + i);
    }
    // Record 8 is small (352 bytes): the records after it overlap their destinations.
    const doomed = [_]i64{ 8, 25, 59, 0, 41, 42, 43 };
    try store.delete(&doomed);
    var sorted = doomed;
    std.mem.sortUnstable(i64, &sorted, {}, std.sort.desc(i64));
    for (sorted) |d| _ = model.swapRemove(@intCast(d));
    try expectModel(store, model.items);
    const before = (try store.stats());
    try testing.expect(before.reclaimable > 0);

    var moves: usize = 0;
    var staged: u64 = 0;
    while (true) {
        var compaction = try Store.Compaction.init(store);
        const moved = compaction.step() catch |err| {
            compaction.deinit();
            return err;
        };
        if (!moved) {
            defer compaction.deinit();
            try compaction.finish();
            break;
        }
        // Abandoned right after one move, as if the process had stopped there.
        staged += compaction.staged;
        compaction.deinit();
        moves += 1;
        // Stopped right after one move: valid now and after a reopen.
        try expectModel(store, model.items);
        store.close();
        store_open = false;
        store = try folder.openExisting();
        store_open = true;
        try expectModel(store, model.items);
    }
    try testing.expect(moves > 0);
    // Some destinations overlapped their sources and went through the scratch area.
    try testing.expect(staged > 0 and staged < moves);
    const after = (try store.stats());
    try testing.expectEqual(before.live_bytes, after.live_bytes);
    try testing.expectEqual(after.live_bytes, after.chunk_bytes);
    try testing.expectEqual(@as(u64, 0), after.reclaimable);
    // Compacting a compact store moves nothing; appends still work.
    try store.compact();
    try testing.expectEqual(after, (try store.stats()));
    var more = try Batch.init(100, 5, &sizeSmall, false);
    defer more.deinit();
    _ = try store.append(more.records(), 1);
    for (0..5) |i| try model.append(testing.allocator, 100 + i);
    try expectModel(store, model.items);
}

test "records roll over to a new chunk, and compaction moves them back and removes the file" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    // Pretend chunk 0 is nearly full of garbage.
    store.meta.header.setTail(.{ .chunk = 0, .offset = limits.chunk_size_max - 99 });
    var batch = try Batch.init(0, 5, &sizeHundreds, false);
    defer batch.deinit();
    _ = try store.append(batch.records(), 0);
    for (0..5) |i| try testing.expectEqual(@as(u16, 1), store.meta.table[i].chunk_id);
    try testing.expectEqual(@as(u64, 0), store.meta.table[0].offset);
    _ = try folder.tmp.dir.statFile(pool.io(), "1.zr", .{});
    try store.compact();
    for (0..5) |i| {
        try testing.expectEqual(@as(u16, 0), store.meta.table[i].chunk_id);
        try expectRecord(store, i, i, sizeHundreds(i), false);
    }
    try testing.expectError(error.FileNotFound, folder.tmp.dir.statFile(pool.io(), "1.zr", .{}));
    try testing.expectEqual(@as(u64, 100 + 101 + 102 + 103 + 104), (try store.stats()).chunk_bytes);
}
