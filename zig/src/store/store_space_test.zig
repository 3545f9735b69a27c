//! Tests of a store's size at rest: the writer trims the slack of its chunk files (grown in
//! steps of at least 1 MiB) when it syncs, closes or leaves a chunk behind, and a reader of
//! another handle, with the chunk mapped and an older, larger size in mind, still reads
//! every record.
const std = @import("std");
const testing = std.testing;
const store_test = @import("store_test.zig");
const chunk = @import("../files/chunk.zig");
const format = @import("../files/format.zig");
const limits = @import("../base/limits.zig");
const pool = @import("../os/pool.zig");
const store_mod = @import("store.zig");
const Store = store_mod.Store;
const Batch = store_test.Batch;
const Folder = store_test.Folder;
const expectRecord = store_test.expectRecord;
const sizeSmall = store_test.sizeSmall;

const raw = @backingInt(format.Codec.raw);

fn chunkLength(folder: *Folder, chunk_id: u32) !u64 {
    return (try folder.tmp.dir.statFile(pool.io(), chunk.name(chunk_id).slice(), .{})).size;
}

/// Appends records first_id.. (sizeSmall) as one raw batch.
fn appendSmall(store: *Store, first_id: u64, count: usize) !void {
    var batch = try Batch.init(first_id, count, &sizeSmall, false);
    defer batch.deinit();
    _ = try store.append(batch.records(), raw);
}

fn bytesSmall(first_id: u64, count: usize) u64 {
    var total: u64 = 0;
    for (first_id..first_id + count) |id| total += sizeSmall(id);
    return total;
}

fn expectSmall(store: *Store, count: usize) !void {
    try testing.expectEqual(@as(u64, count), store.length());
    for (0..count) |id| try expectRecord(store, id, id, sizeSmall(id), false);
}

test "sync and close trim the tail chunk to its data rounded up to a page; appends grow it again" {
    var folder = Folder.init();
    defer folder.deinit();
    const page = std.heap.pageSize();
    var data: [8 * 1024]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = @truncate(i * 3);
    {
        const store = try folder.open();
        defer store.close();
        _ = try store.append(.{ .data = &data, .stride = 8, .count = 10 }, raw);
        try testing.expectEqual(chunk.growth_size_min, try chunkLength(&folder, 0));
        try store.sync();
        try testing.expectEqual(chunk.restingSize(80), try chunkLength(&folder, 0));
        try testing.expectEqual(@as(u64, page), try chunkLength(&folder, 0));
        // Room left in the page: no growth.
        _ = try store.append(.{ .data = &data, .stride = 8, .count = 10 }, raw);
        try testing.expectEqual(@as(u64, page), try chunkLength(&folder, 0));
        // Past it: a growth step again.
        _ = try store.append(.{ .data = &data, .stride = 8, .count = 1024 }, raw);
        try testing.expectEqual(chunk.grownSize(page, 160 + 8192), try chunkLength(&folder, 0));
        var out: [(20 + 1024) * 8]u8 = undefined;
        var indices: [20 + 1024]i64 = undefined;
        for (&indices, 0..) |*index, i| index.* = @intCast(i);
        try store.gather(&indices, .{ .base = &out, .stride = 8 }, 8);
        try testing.expectEqualSlices(u8, data[0..80], out[0..80]);
        try testing.expectEqualSlices(u8, data[0..80], out[80..160]);
        try testing.expectEqualSlices(u8, &data, out[160..]);
    }
    const data_end: u64 = 160 + 8192;
    try testing.expectEqual(chunk.restingSize(data_end), try chunkLength(&folder, 0));
    // A handle that opens the store writable but writes nothing leaves the file as it is.
    {
        const store = try folder.openExisting();
        defer store.close();
        try testing.expectEqual(@as(u64, 20 + 1024), store.length());
        try store.sync();
    }
    try testing.expectEqual(chunk.restingSize(data_end), try chunkLength(&folder, 0));
}

test "a reader with the chunk mapped reads every record across the writer's trims and growths" {
    var folder = Folder.init();
    defer folder.deinit();
    const writer = try folder.open();
    defer writer.close();
    try appendSmall(writer, 0, 100);
    const grown = try chunkLength(&folder, 0);
    try testing.expect(grown >= chunk.growth_size_min);
    // Another handle, as another process would be: it maps the chunk and knows its grown size.
    const reader = try Store.open(testing.allocator, folder.path(), .{ .read_only = true });
    defer reader.close();
    try expectSmall(reader, 100);
    try testing.expectEqual(grown, reader.chunks.knownSize(0));
    try writer.sync();
    const data_end = bytesSmall(0, 100);
    try testing.expectEqual(chunk.restingSize(data_end), try chunkLength(&folder, 0));
    // The reader still has the larger size in mind; every record it can reach lies inside
    // the trimmed file.
    try testing.expectEqual(grown, reader.chunks.knownSize(0));
    try expectSmall(reader, 100);
    // Appends after the trim grow the file before they publish; the reader reads them
    // through its older size (lock-free) and past it (re-reading the size).
    try appendSmall(writer, 100, 200);
    try expectSmall(reader, 300);
    try appendSmall(writer, 300, 400);
    try expectSmall(reader, 700);
    try writer.sync();
    try testing.expectEqual(chunk.restingSize(bytesSmall(0, 700)), try chunkLength(&folder, 0));
    try expectSmall(reader, 700);
    try expectSmall(writer, 700);
}

fn sizeRollover(id: u64) usize {
    return if (id == 0) 4096 else limits.record_size_max;
}

test "a chunk left behind is trimmed when the batch rolls over; one the frontier left too" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    const page = std.heap.pageSize();
    // Pretend chunk 0 is nearly full (a sparse 4 GiB file, written up to three pages from its
    // end): record 0 (4 KiB) still fits there, record 1 (1 MiB) rolls over to chunk 1.
    const tail_offset = limits.chunk_size_max - 3 * page;
    const file = try store.chunks.file(pool.io(), store.dir, 0, true);
    try file.setLength(pool.io(), limits.chunk_size_max);
    store.chunks.closeFile(pool.io(), 0);
    store.meta.header.setTail(.{ .chunk = 0, .offset = @intCast(tail_offset) });
    var batch = try Batch.init(0, 2, &sizeRollover, false);
    defer batch.deinit();
    _ = try store.append(batch.records(), raw);
    try testing.expectEqual(@as(u16, 0), store.meta.table[0].chunk_id);
    try testing.expectEqual(@as(u16, 1), store.meta.table[1].chunk_id);
    try testing.expectEqual(chunk.restingSize(tail_offset + 4096), try chunkLength(&folder, 0));
    try expectRecord(store, 0, 0, 4096, false);
    try expectRecord(store, 1, 1, limits.record_size_max, false);
    // The frontier's chunk, holding only earlier records, is trimmed when a batch leaves it:
    // pretend chunk 1 is nearly full too.
    const frontier = limits.chunk_size_max - 2 * page - 100;
    try (try store.chunks.file(pool.io(), store.dir, 1, false)).setLength(pool.io(), limits.chunk_size_max);
    store.chunks.closeFile(pool.io(), 1);
    store.meta.header.setTail(.{ .chunk = 1, .offset = @intCast(frontier) });
    var next = try Batch.init(1, 1, &sizeRollover, false);
    defer next.deinit();
    _ = try store.append(next.records(), raw);
    try testing.expectEqual(@as(u16, 2), store.meta.table[2].chunk_id);
    try testing.expectEqual(chunk.restingSize(frontier), try chunkLength(&folder, 1));
    try store.sync();
    try testing.expectEqual(chunk.restingSize(limits.record_size_max), try chunkLength(&folder, 2));
    try expectRecord(store, 2, 1, limits.record_size_max, false);
}
