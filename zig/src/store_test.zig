//! Tests of the store engine (store.zig) through its Zig API, each in a temporary folder.
const std = @import("std");
const diagnostic = @import("diagnostic.zig");
const testing = std.testing;
const Io = std.Io;
const store_mod = @import("store.zig");
const index_check = @import("index_check.zig");
const format = @import("format.zig");
const limits = @import("limits.zig");
const pool = @import("pool.zig");
const raw_copy = @import("raw_copy.zig");
const journal = @import("journal.zig");
const Store = store_mod.Store;
const Records = store_mod.Records;

const Folder = struct {
    tmp: testing.TmpDir,
    path_buffer: [64]u8 = undefined,

    fn init() Folder {
        return .{ .tmp = testing.tmpDir(.{}) };
    }

    fn deinit(folder: *Folder) void {
        folder.tmp.cleanup();
    }

    /// The folder relative to the working directory (where tmpDir makes it).
    fn path(folder: *Folder) []const u8 {
        return std.fmt.bufPrint(&folder.path_buffer, ".zig-cache/tmp/{s}", .{folder.tmp.sub_path}) catch unreachable;
    }

    fn open(folder: *Folder) !*Store {
        return Store.open(testing.allocator, folder.path(), .{ .create = true });
    }

    fn openExisting(folder: *Folder) !*Store {
        return Store.open(testing.allocator, folder.path(), .{});
    }
};

/// Deterministic record contents: compressible unless `noisy`, sized by `size`.
fn fillRecord(buffer: []u8, id: u64, noisy: bool) void {
    var prng = std.Random.DefaultPrng.init(id);
    for (buffer, 0..) |*b, j| b.* = if (noisy) prng.random().int(u8) else @truncate(id *% 31 +% j / 9);
}

/// A batch of `count` records with ids starting at `first_id`; sizes from `sizeOf`.
const Batch = struct {
    data: []u8,
    offsets: []u64,

    fn init(first_id: u64, count: usize, sizeOf: *const fn (u64) usize, noisy: bool) !Batch {
        const offsets = try testing.allocator.alloc(u64, count + 1);
        offsets[0] = 0;
        for (0..count) |i| offsets[i + 1] = offsets[i] + sizeOf(first_id + i);
        const data = try testing.allocator.alloc(u8, offsets[count]);
        for (0..count) |i| fillRecord(data[offsets[i]..offsets[i + 1]], first_id + i, noisy);
        return .{ .data = data, .offsets = offsets };
    }

    fn deinit(batch: *Batch) void {
        testing.allocator.free(batch.data);
        testing.allocator.free(batch.offsets);
    }

    fn records(batch: *const Batch) Records {
        return Records.fromSlices(batch.data, batch.offsets);
    }
};

fn sizeSmall(id: u64) usize {
    return @intCast((id * 7919) % 3000);
}

/// Checks record `index` holds the contents of record `id`.
fn expectRecord(store: *Store, index: u64, id: u64, size: usize, noisy: bool) !void {
    const expected = try testing.allocator.alloc(u8, size);
    defer testing.allocator.free(expected);
    fillRecord(expected, id, noisy);
    const got = try testing.allocator.alloc(u8, size);
    defer testing.allocator.free(got);
    const indices = [_]i64{@intCast(index)};
    const offsets = [_]u64{ 0, size };
    try store.gather(&indices, .{ .base = got.ptr, .offsets = &offsets }, size);
    try testing.expectEqualSlices(u8, expected, got);
}

test "round trips of every codec, the raw fallback, empty and 1 MiB records" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    var store_open = true;
    defer if (store_open) store.close();

    var batch = try Batch.init(0, 64, &sizeSmall, false);
    defer batch.deinit();
    for ([_]u8{ 0, 1 }, 0..) |codec_tag, round| {
        const first = try store.append(batch.records(), codec_tag);
        try testing.expectEqual(@as(u64, round * 64), first);
    }
    // Incompressible records come back stored raw even when zstd was asked for.
    var noisy = try Batch.init(1000, 8, &sizeSmall, true);
    defer noisy.deinit();
    const noisy_first = try store.append(noisy.records(), 1);
    for (0..8) |i| {
        const entry = store.meta.table[noisy_first + i];
        try testing.expectEqual(format.Codec.raw, entry.codec);
        try testing.expectEqual(entry.logic_length, entry.phys_length);
    }
    // Compressible records are stored compressed and smaller.
    try testing.expectEqual(format.Codec.zstd, store.meta.table[64 + 1].codec);
    try testing.expect(store.meta.table[64 + 1].phys_length < store.meta.table[64 + 1].logic_length);
    // Empty records (id 0 has size 0) and full-size records.
    try testing.expectEqual(@as(u32, 0), store.meta.table[0].logic_length);
    const big = try testing.allocator.alloc(u8, limits.record_size_max * 2);
    defer testing.allocator.free(big);
    fillRecord(big[0..limits.record_size_max], 5000, false);
    fillRecord(big[limits.record_size_max..], 5001, true);
    const big_first = try store.append(.{ .data = big.ptr, .stride = limits.record_size_max, .count = 2 }, 1);

    for (0..2) |round| for (0..64) |i| try expectRecord(store, round * 64 + i, i, sizeSmall(i), false);
    for (0..8) |i| try expectRecord(store, noisy_first + i, 1000 + i, sizeSmall(1000 + i), true);
    try expectRecord(store, big_first, 5000, limits.record_size_max, false);
    try expectRecord(store, big_first + 1, 5001, limits.record_size_max, true);

    // Fixed-stride gather of records that all have the stride's size.
    const out = try testing.allocator.alloc(u8, limits.record_size_max * 2);
    defer testing.allocator.free(out);
    const both = [_]i64{ @intCast(big_first + 1), @intCast(big_first) };
    try store.gather(&both, .{ .base = out.ptr, .stride = limits.record_size_max }, out.len);
    try testing.expectEqualSlices(u8, big[limits.record_size_max..], out[0..limits.record_size_max]);
    try testing.expectEqualSlices(u8, big[0..limits.record_size_max], out[limits.record_size_max..]);
    // A slot of the wrong size and an index out of range are refused.
    const wrong = [_]i64{0};
    try testing.expectError(error.SizeMismatch, store.gather(&wrong, .{ .base = out.ptr, .stride = 10 }, 10));
    const outside = [_]i64{ 0, @intCast(store.length()) };
    try testing.expectError(error.IndexOutOfRange, store.gather(&outside, .{ .base = out.ptr, .stride = 0 }, 0));
    const negative = [_]i64{-1};
    try testing.expectError(error.IndexOutOfRange, store.gather(&negative, .{ .base = out.ptr, .stride = 0 }, 0));
    try testing.expectError(error.InvalidArgument, store.append(batch.records(), 3));

    // Everything survives a reopen.
    const length = store.length();
    store.close();
    store_open = false;
    const reopened = try folder.open();
    defer reopened.close();
    try testing.expectEqual(length, reopened.length());
    for (0..64) |i| try expectRecord(reopened, 64 + i, i, sizeSmall(i), false);
    try expectRecord(reopened, big_first + 1, 5001, limits.record_size_max, true);
    var lengths: [2]u64 = undefined;
    try reopened.recordLengths(&both, &lengths);
    try testing.expectEqual([2]u64{ limits.record_size_max, limits.record_size_max }, lengths);
}

fn jsonSample(buffer: []u8, id: u64) []u8 {
    return std.fmt.bufPrint(buffer, "{{\"id\": {d}, \"name\": \"user-{d}\", \"tags\": [\"alpha\", \"beta\", \"gamma\"], \"score\": {d}, \"note\": \"the quick brown fox jumps over the lazy dog\"}}", .{ id, id * 7, id % 13 }) catch unreachable;
}

test "dictionary: refused without one, trained, used, reloaded, missing later" {
    var folder = Folder.init();
    defer folder.deinit();
    const count = 300;
    const data = try testing.allocator.alloc(u8, count * 256);
    defer testing.allocator.free(data);
    var offsets: [count + 1]u64 = undefined;
    offsets[0] = 0;
    for (0..count) |i| offsets[i + 1] = offsets[i] + jsonSample(data[offsets[i]..][0..256], i).len;
    const records = Records.fromSlices(data[0..offsets[count]], &offsets);
    {
        const store = try folder.open();
        defer store.close();
        try testing.expectError(error.NoDictionary, store.append(records, 2));
        try testing.expectEqual(@as(u64, 0), store.length());
        try testing.expect(!store.hasDict());
        try testing.expectError(error.InvalidArgument, store.trainDict(Records.fromSlices(data, offsets[0..4]), 4096));
        try expectMessage("needs at least 7 samples");
        try testing.expectError(error.InvalidArgument, store.trainDict(records, 10));
        try store.trainDict(records, 4096);
        try testing.expect(store.hasDict());
        _ = try store.append(records, 2);
        _ = try store.append(records, 1);
        try testing.expectEqual(format.Codec.zstd_dict, store.meta.table[5].codec);
        // The dictionary beats plain zstd on these small similar records.
        try testing.expect(store.meta.table[5].phys_length < store.meta.table[count + 5].phys_length);
        try testing.expectError(error.DictionaryExists, store.trainDict(records, 4096));
        try expectJson(store, count);
    }
    {
        const store = try folder.openExisting();
        defer store.close();
        try testing.expect(store.hasDict());
        try expectJson(store, count);
    }
    try folder.tmp.dir.deleteFile(pool.io(), "dict.zr");
    {
        const store = try folder.openExisting();
        defer store.close();
        try testing.expect(!store.hasDict());
        var out: [256]u8 = undefined;
        const indices = [_]i64{3};
        var lengths: [1]u64 = undefined;
        try store.recordLengths(&indices, &lengths);
        const offsets_out = [_]u64{ 0, lengths[0] };
        try testing.expectError(error.NoDictionary, store.gather(&indices, .{ .base = &out, .offsets = &offsets_out }, lengths[0]));
        // Plain zstd records never needed it.
        const plain = [_]i64{count + 3};
        try store.gather(&plain, .{ .base = &out, .offsets = &offsets_out }, lengths[0]);
    }
}

fn expectJson(store: *Store, count: u64) !void {
    var expected: [256]u8 = undefined;
    var got: [256]u8 = undefined;
    for (0..store.length()) |index| {
        const sample = jsonSample(&expected, index % count);
        const indices = [_]i64{@intCast(index)};
        const offsets = [_]u64{ 0, sample.len };
        try store.gather(&indices, .{ .base = &got, .offsets = &offsets }, sample.len);
        try testing.expectEqualSlices(u8, sample, got[0..sample.len]);
    }
}

fn sizeHundreds(id: u64) usize {
    return @intCast(100 + id);
}

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

/// Checks every live record against the model (model[index] = id).
fn expectModel(store: *Store, model: []const u64) !void {
    try testing.expectEqual(@as(u64, model.len), store.length());
    for (model, 0..) |id, index| try expectRecord(store, index, id, sizeSmall(id), false);
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

test "limits: an oversized record and a count past the table are refused with the store unchanged" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    var batch = try Batch.init(0, 3, &sizeHundreds, false);
    defer batch.deinit();
    _ = try store.append(batch.records(), 1);
    const before = (try store.stats());
    const big = try testing.allocator.alloc(u8, limits.record_size_max + 11);
    defer testing.allocator.free(big);
    @memset(big, 7);
    const offsets = [_]u64{ 0, 10, 10, 10 + limits.record_size_max + 1 };
    try testing.expectError(error.RecordTooLarge, store.append(Records.fromSlices(big, &offsets), 1));
    try expectMessage("record 2 is 1048577 bytes");
    try testing.expectError(error.RecordTooLarge, store.append(.{ .data = big.ptr, .stride = big.len, .count = 1 }, 0));
    try testing.expectEqual(before, (try store.stats()));
    // Fill the table by setting the length directly (entries below it are valid empty records).
    store.meta.publishLength(limits.record_count_max - 1);
    const empty = [_]u64{ 0, 0, 0 };
    try testing.expectError(error.StoreFull, store.append(Records.fromSlices(big[0..0], &empty), 0));
    try testing.expectEqual(@as(u64, limits.record_count_max - 1), store.length());
    try testing.expectEqual(@as(u64, limits.record_count_max - 1), try store.append(Records.fromSlices(big[0..10], empty[0..1] ++ [_]u64{10}), 0));
    try testing.expectError(error.StoreFull, store.append(Records.fromSlices(big[0..0], empty[0..2]), 0));
    try testing.expectEqual(@as(u64, limits.record_count_max), store.length());
    store.meta.publishLength(3);
}

fn expectMessage(part: []const u8) !void {
    const message = diagnostic.text();
    if (std.mem.indexOf(u8, message, part) == null) {
        std.debug.print("message \"{s}\" lacks \"{s}\"\n", .{ message, part });
        return error.TestUnexpectedResult;
    }
}

fn writeAt(folder: *Folder, name: []const u8, bytes: []const u8, offset: u64) !void {
    const io = pool.io();
    const f = try folder.tmp.dir.openFile(io, name, .{ .mode = .read_write });
    defer f.close(io);
    try f.writePositionalAll(io, bytes, offset);
}

fn makeSmallStore(folder: *Folder) !void {
    const store = try folder.open();
    defer store.close();
    var batch = try Batch.init(0, 3, &sizeHundreds, false);
    defer batch.deinit();
    _ = try store.append(batch.records(), 0);
}

test "corrupt and foreign stores are refused on open" {
    const io = pool.io();
    {
        var folder = Folder.init();
        defer folder.deinit();
        try testing.expectError(error.NotFound, folder.openExisting());
        try testing.expectError(error.NotFound, Store.open(testing.allocator, ".zig-cache/tmp/no-such-folder-here", .{ .create = true }));
    }
    {
        var folder = Folder.init();
        defer folder.deinit();
        try makeSmallStore(&folder);
        try writeAt(&folder, "meta.zr", "XREC", 0);
        try testing.expectError(error.NotAStore, folder.openExisting());
        try expectMessage("does not start with ZREC");
        try writeAt(&folder, "meta.zr", "ZREC\x09\x00", 0);
        try testing.expectError(error.NotAStore, folder.openExisting());
    }
    {
        var folder = Folder.init();
        defer folder.deinit();
        try makeSmallStore(&folder);
        // Shorter than a header is not a store; shorter than the table its length needs is
        // corrupt; longer is fine (meta.zr grows as entries are written).
        const f = try folder.tmp.dir.openFile(io, "meta.zr", .{ .mode = .read_write });
        try f.setLength(io, 4096);
        (try folder.openExisting()).close();
        try f.setLength(io, 16 + 3 * 16 - 1);
        try testing.expectError(error.Corrupt, folder.openExisting());
        try expectMessage("too short for the 3 records");
        try f.setLength(io, 10);
        f.close(io);
        try testing.expectError(error.NotAStore, folder.openExisting());
    }
    {
        var folder = Folder.init();
        defer folder.deinit();
        try makeSmallStore(&folder);
        // Record 1 pointing past the frontier, then into a chunk that does not exist.
        var entry: format.RecordLoc = .{ .offset = 10_000, .phys_length = 101, .logic_length = 101, .chunk_id = 0, .codec = .raw };
        try writeAt(&folder, "meta.zr", std.mem.asBytes(&entry), 16 + 16);
        try testing.expectError(error.Corrupt, folder.openExisting());
        entry.offset = 0;
        entry.chunk_id = 7;
        try writeAt(&folder, "meta.zr", std.mem.asBytes(&entry), 16 + 16);
        try testing.expectError(error.Corrupt, folder.openExisting());
        entry.chunk_id = 0;
        entry.codec = @enumFromInt(9);
        try writeAt(&folder, "meta.zr", std.mem.asBytes(&entry), 16 + 16);
        try testing.expectError(error.Corrupt, folder.openExisting());
        entry.codec = .raw;
        try writeAt(&folder, "meta.zr", std.mem.asBytes(&entry), 16 + 16);
        const store = try folder.openExisting();
        store.close();
    }
    {
        var folder = Folder.init();
        defer folder.deinit();
        try makeSmallStore(&folder);
        // A chunk cut short of its records (the three take 100 + 101 + 102 bytes).
        const f = try folder.tmp.dir.openFile(io, "0.zr", .{ .mode = .read_write });
        try f.setLength(io, 303);
        (try folder.openExisting()).close();
        try f.setLength(io, 302);
        f.close(io);
        try testing.expectError(error.Corrupt, folder.openExisting());
        try expectMessage("chunk file 0.zr, which is only 302 bytes");
        try folder.tmp.dir.deleteFile(io, "0.zr");
        try testing.expectError(error.Corrupt, folder.openExisting());
        try expectMessage("0.zr is missing");
    }
}

const Reader = struct {
    store: *Store,
    seed: u64,
    failed: *std.atomic.Value(bool),
    gathered: u64 = 0,

    fn run(reader: *Reader) void {
        reader.loop() catch reader.failed.store(true, .release);
    }

    fn loop(reader: *Reader) !void {
        var prng = std.Random.DefaultPrng.init(reader.seed);
        var indices: [16]i64 = undefined;
        var lengths: [16]u64 = undefined;
        var offsets: [17]u64 = undefined;
        const buffer = try testing.allocator.alloc(u8, 16 * 3000);
        defer testing.allocator.free(buffer);
        const expected = try testing.allocator.alloc(u8, 3000);
        defer testing.allocator.free(expected);
        for (0..150) |_| {
            const length = reader.store.length();
            for (&indices) |*index| index.* = @intCast(prng.random().uintLessThan(u64, length));
            try reader.store.recordLengths(&indices, &lengths);
            offsets[0] = 0;
            for (0..16) |i| offsets[i + 1] = offsets[i] + lengths[i];
            try reader.store.gather(&indices, .{ .base = buffer.ptr, .offsets = &offsets }, offsets[16]);
            for (indices, 0..) |index, i| {
                const id: u64 = @intCast(index);
                try testing.expectEqual(@as(u64, sizeSmall(id)), lengths[i]);
                fillRecord(expected[0..lengths[i]], id, false);
                try testing.expectEqualSlices(u8, expected[0..lengths[i]], buffer[offsets[i]..offsets[i + 1]]);
            }
            reader.gathered += 16;
        }
    }
};

test "gathers from several threads while another thread appends see exact records" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    var initial = try Batch.init(0, 100, &sizeSmall, false);
    defer initial.deinit();
    _ = try store.append(initial.records(), 1);
    var failed: std.atomic.Value(bool) = .init(false);
    var readers: [3]Reader = undefined;
    var threads: [3]std.Thread = undefined;
    for (&readers, &threads, 0..) |*reader, *thread, i| {
        reader.* = .{ .store = store, .seed = i, .failed = &failed };
        thread.* = try std.Thread.spawn(.{}, Reader.run, .{reader});
    }
    for (0..40) |round| {
        var batch = try Batch.init(store.length(), 20, &sizeSmall, false);
        defer batch.deinit();
        _ = try store.append(batch.records(), @intCast(round % 2));
    }
    for (threads) |thread| thread.join();
    try testing.expect(!failed.load(.acquire));
    try testing.expectEqual(@as(u64, 900), store.length());
    for (readers) |reader| try testing.expectEqual(@as(u64, 150 * 16), reader.gathered);
}

test "durable mode: append, delete, compact, dictionary and sync flush in order and round trip" {
    var folder = Folder.init();
    defer folder.deinit();
    var model: std.ArrayList(u64) = .empty;
    defer model.deinit(testing.allocator);
    {
        const store = try Store.open(testing.allocator, folder.path(), .{ .create = true, .durable = true });
        defer store.close();
        var batch = try Batch.init(0, 30, &sizeSmall, false);
        defer batch.deinit();
        _ = try store.append(batch.records(), 1);
        for (0..30) |i| try model.append(testing.allocator, i);
        try store.delete(&[_]i64{ 8, 2 });
        _ = model.swapRemove(8);
        _ = model.swapRemove(2);
        try store.compact();
        try store.sync();
        try expectModel(store, model.items);
    }
    const store = try folder.openExisting();
    defer store.close();
    try expectModel(store, model.items);
    try testing.expectEqual(@as(u64, 0), (try store.stats()).reclaimable);
}

test "fixed-stride gathers: raw records take the pipelined copy, every other record the general path" {
    // Strides with a copy of compile-time length (8, 64) and without (1000); batches longer
    // than a copy group, records in random order, raw and zstd records interleaved.
    for ([_]usize{ 8, 64, 1000 }) |stride| {
        var folder = Folder.init();
        defer folder.deinit();
        const store = try folder.open();
        defer store.close();
        const count = 300;
        const data = try testing.allocator.alloc(u8, count * stride);
        defer testing.allocator.free(data);
        for (0..count) |id| fillRecord(data[id * stride ..][0..stride], id, id % 3 != 0);
        // Records 0..149 raw, 150..299 zstd (the compressible ones shrink, the noisy stay raw).
        _ = try store.append(.{ .data = data.ptr, .stride = stride, .count = 150 }, @intFromEnum(format.Codec.raw));
        _ = try store.append(.{ .data = data[150 * stride ..].ptr, .stride = stride, .count = 150 }, @intFromEnum(format.Codec.zstd));
        var indices: [257]i64 = undefined;
        var prng = std.Random.DefaultPrng.init(stride);
        for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, count);
        const got = try testing.allocator.alloc(u8, indices.len * stride);
        defer testing.allocator.free(got);
        // The first gather maps the chunk on the general path; the second finds it mapped.
        for (0..2) |_| {
            @memset(got, 0xAA);
            try store.gather(&indices, .{ .base = got.ptr, .stride = stride }, got.len);
            for (indices, 0..) |index, i| {
                const id: usize = @intCast(index);
                try testing.expectEqualSlices(u8, data[id * stride ..][0..stride], got[i * stride ..][0..stride]);
            }
        }
        // A stride that differs from the records' size is refused by the general path's check.
        const short = stride - 1;
        const refused = store.gather(indices[0..1], .{ .base = got.ptr, .stride = short }, short);
        try testing.expectError(error.SizeMismatch, refused);
        try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "destination slot") != null);
    }
}

test "verify: a checksummed store verifies; a flipped stored byte and a swapped entry are found" {
    const integrity = @import("integrity.zig");
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    var data: [8 * 64]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = @truncate(i / 64 + i % 3);
    _ = try store.append(.{ .data = &data, .stride = 64, .count = 8 }, 1);
    var problems: [8]integrity.Problem = undefined;
    var summary = try store.verifyAll(&problems);
    try testing.expectEqual(@as(u64, 8), summary.records);
    try testing.expectEqual(@as(u64, 8), summary.checksummed);
    try testing.expectEqual(@as(u64, 0), summary.problem_count);
    // Entries 2 and 5 swapped: both records are reported, and a gather refuses record 2.
    const entry_2 = store.meta.table[2];
    store.meta.table[2] = store.meta.table[5];
    store.meta.table[5] = entry_2;
    summary = try store.verifyAll(&problems);
    try testing.expectEqual(@as(u64, 2), summary.problem_count);
    try testing.expectEqual(@as(u64, 2), problems[0].index);
    try testing.expectEqual(@as(u64, 5), problems[1].index);
    try testing.expectEqual(@intFromEnum(integrity.Reason.checksum), problems[0].reason);
    var out: [64]u8 = undefined;
    try testing.expectError(error.Corrupt, store.gather(&.{2}, .{ .base = &out, .stride = 64 }, 64));
    store.verify = .none;
    try store.gather(&.{2}, .{ .base = &out, .stride = 64 }, 64);
    try testing.expectEqualSlices(u8, data[5 * 64 ..][0..64], &out);
}

test "runs: learned on append and on open, relearned after delete and compact; gathers stay exact" {
    const runs_mod = @import("runs.zig");
    const block = runs_mod.block_records;
    const stride = 8;
    var folder = Folder.init();
    defer folder.deinit();
    // Two whole blocks and a partial one, appended in pieces that straddle block ends; then a
    // zstd batch of noisy 8-byte records, which zstd cannot shrink: stored raw, they complete
    // block 2's run and start block 3's.
    const count = 2 * block + 100;
    const data = try testing.allocator.alloc(u8, (count + block) * stride);
    defer testing.allocator.free(data);
    for (0..count + block) |id| fillRecord(data[id * stride ..][0..stride], id, true);
    const expected_after_appends = [_]u32{ stride, stride, stride, 0 };
    {
        const store = try folder.open();
        defer store.close();
        var first: usize = 0;
        for ([_]usize{ 1000, block, count - 1000 - block }) |piece| {
            _ = try store.append(.{ .data = data[first * stride ..].ptr, .stride = stride, .count = piece }, @intFromEnum(format.Codec.raw));
            first += piece;
        }
        for (expected_after_appends, 0..) |s, b| try testing.expectEqual(s, store.runs.stride(b));
        try testing.expectEqual(@as(u32, 100), store.runs.covered(2));
        _ = try store.append(.{ .data = data[count * stride ..].ptr, .stride = stride, .count = block }, @intFromEnum(format.Codec.zstd));
        try testing.expectEqual(@as(u32, block), store.runs.covered(2));
        try testing.expectEqual(@as(u32, 100), store.runs.covered(3));
    }
    const store = try folder.openExisting();
    defer store.close();
    for ([_]u32{ block, block, block, 100 }, 0..) |c, b| try testing.expectEqual(c, store.runs.covered(b));
    // Ids of the records at each index, as the store's operations move them.
    const ids = try testing.allocator.alloc(u64, count + block);
    defer testing.allocator.free(ids);
    for (ids, 0..) |*id, i| id.* = i;
    var length: usize = count + block;
    var prng = std.Random.DefaultPrng.init(11);
    for (0..3) |round| {
        var indices: [300]i64 = undefined;
        for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, @intCast(length));
        var got: [300 * stride]u8 = undefined;
        try store.gather(&indices, .{ .base = &got, .stride = stride }, got.len);
        for (indices, 0..) |index, i| {
            const id = ids[@intCast(index)];
            try testing.expectEqualSlices(u8, data[id * stride ..][0..stride], got[i * stride ..][0..stride]);
        }
        switch (round) {
            0 => {
                // Swap-last: record 5 (block 0) takes the last record's place; block 0's run
                // stops before it, block 3's before the record that left.
                try store.delete(&.{5});
                length -= 1;
                ids[5] = ids[length];
                for ([_]u32{ 5, block, block, 99 }, 0..) |c, b| try testing.expectEqual(c, store.runs.covered(b));
            },
            1 => {
                // Compaction packs records in physical order, so record 5, which took the
                // last record's bytes, stays out of sequence; the runs are learned again.
                try store.compact();
                for ([_]u32{ 5, block, block, 99 }, 0..) |c, b| try testing.expectEqual(c, store.runs.covered(b));
            },
            else => {},
        }
    }
}

test "gathers give the same bytes whether the advisors run them pooled or alone, streaming or cached, fetching either way" {
    // 256 records of 4 KiB per batch (1 MiB): enough for two runners on a machine with two
    // CPUs, and for streaming stores, so both advisors' warm-ups send batches both ways; every
    // batch is checked, and every other one lands one byte off alignment.
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    const stride = 4096;
    const count = 1024;
    const data = try testing.allocator.alloc(u8, count * stride);
    defer testing.allocator.free(data);
    for (0..count) |id| fillRecord(data[id * stride ..][0..stride], id, true);
    _ = try store.append(.{ .data = data.ptr, .stride = stride, .count = count }, @intFromEnum(format.Codec.raw));
    var indices: [256]i64 = undefined;
    const buffer = try testing.allocator.alloc(u8, indices.len * stride + 2);
    defer testing.allocator.free(buffer);
    var prng = std.Random.DefaultPrng.init(41);
    for (0..64) |batch| {
        for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, count);
        @memset(buffer, 0xAA);
        const got = buffer[batch % 2 ..][0 .. indices.len * stride];
        try store.gather(&indices, .{ .base = got.ptr, .stride = stride }, got.len);
        for (indices, 0..) |index, i| {
            const id: usize = @intCast(index);
            try testing.expectEqualSlices(u8, data[id * stride ..][0..stride], got[i * stride ..][0..stride]);
        }
        if (batch % 2 == 1) try testing.expectEqual(@as(u8, 0xAA), buffer[0]);
        try testing.expectEqual(@as(u8, 0xAA), buffer[buffer.len - 1]);
    }
    if (pool.cpus() > 1) {
        try testing.expectEqual(@as(u64, 64), store.gather_advisor.tickets.load(.monotonic));
        try testing.expect(store.gather_advisor.cost(.pooled) > 0);
        try testing.expect(store.gather_advisor.cost(.alone) > 0);
    }
    if (raw_copy.has_streaming_stores) {
        try testing.expectEqual(@as(u64, 64), store.copy_advisors.stores.tickets.load(.monotonic));
        try testing.expect(store.copy_advisors.stores.cost(.streaming) > 0);
        try testing.expect(store.copy_advisors.stores.cost(.cached) > 0);
        try testing.expectEqual(@as(u64, 64), store.copy_advisors.loads.tickets.load(.monotonic));
        try testing.expect(store.copy_advisors.loads.cost(.non_temporal) > 0);
        try testing.expect(store.copy_advisors.loads.cost(.temporal) > 0);
    } else {
        try testing.expectEqual(@as(u64, 0), store.copy_advisors.stores.tickets.load(.monotonic));
        try testing.expectEqual(@as(u64, 0), store.copy_advisors.loads.tickets.load(.monotonic));
    }
}

test "a fixed stores policy takes the stores advisor out of large raw gathers, with the same bytes" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    const stride = 4096; // 256 records make 1 MiB: a batch that may stream
    const count = 512;
    const data = try testing.allocator.alloc(u8, count * stride);
    defer testing.allocator.free(data);
    for (0..count) |id| fillRecord(data[id * stride ..][0..stride], id, true);
    _ = try store.append(.{ .data = data.ptr, .stride = stride, .count = count }, @intFromEnum(format.Codec.raw));
    var indices: [256]i64 = undefined;
    const got = try testing.allocator.alloc(u8, indices.len * stride);
    defer testing.allocator.free(got);
    var prng = std.Random.DefaultPrng.init(43);
    defer raw_copy.stores_policy.store(.auto, .monotonic);
    for ([_]raw_copy.StoresPolicy{ .streaming, .cached, .auto }) |policy| {
        raw_copy.stores_policy.store(policy, .monotonic);
        for (0..12) |_| {
            for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, count);
            @memset(got, 0xAA);
            try store.gather(&indices, .{ .base = got.ptr, .stride = stride }, got.len);
            for (indices, 0..) |index, i| {
                const id: usize = @intCast(index);
                try testing.expectEqualSlices(u8, data[id * stride ..][0..stride], got[i * stride ..][0..stride]);
            }
        }
        // Only `auto` asks the advisor (and only where streaming stores exist).
        const asked: u64 = if (policy == .auto and raw_copy.has_streaming_stores) 12 else 0;
        try testing.expectEqual(asked, store.copy_advisors.stores.tickets.load(.monotonic));
    }
}

test "checkIndices: the first index outside 0 <= i < length is refused and named, wherever it is" {
    const length: u64 = 1000;
    var indices: [37]i64 = undefined;
    for (&indices, 0..) |*index, i| index.* = @intCast((i * 389) % length);
    indices[5] = 0;
    indices[6] = @intCast(length - 1);
    try index_check.checkIndices(&indices, length);
    try index_check.checkIndices(&.{}, 0);
    try testing.expectError(error.IndexOutOfRange, index_check.checkIndices(&.{0}, 0));
    const bad = [_]i64{ -1, std.math.minInt(i64), @intCast(length), @intCast(length + 1), std.math.maxInt(i64) };
    for (0..indices.len) |position| {
        const kept = indices[position];
        for (bad) |value| {
            indices[position] = value;
            try testing.expectError(error.IndexOutOfRange, index_check.checkIndices(&indices, length));
            var wanted_buffer: [96]u8 = undefined;
            const wanted = try std.fmt.bufPrint(&wanted_buffer, "index {d} (position {d})", .{ value, position });
            try testing.expect(std.mem.indexOf(u8, diagnostic.text(), wanted) != null);
        }
        indices[position] = kept;
    }
    try index_check.checkIndices(&indices, length);
}

test "a small store allocates its per-chunk, run and checksum tables a group at a time" {
    const chunk = @import("chunk.zig");
    const runs_mod = @import("runs.zig");
    var folder = Folder.init();
    defer folder.deinit();
    var data: [10 * 16]u8 = undefined;
    for (0..10) |id| fillRecord(data[id * 16 ..][0..16], id, true);
    {
        const store = try folder.open();
        defer store.close();
        _ = try store.append(.{ .data = &data, .stride = 16, .count = 10 }, @intFromEnum(format.Codec.raw));
        // One chunk, one block of runs, one block of sums: one group each, not the tables of a
        // full store (chunk_count_max slots, 2^24 records' runs and counts).
        try testing.expectEqual(@as(u32, 1), store.chunks.slots.groupsCreated());
        try testing.expectEqual(@as(u32, 1), store.runs.table.groupsCreated());
        try testing.expectEqual(@as(u32, 1), store.sidecar.?.valid.groupsCreated());
        try testing.expect(@sizeOf(chunk.Chunks) < 1024 and @sizeOf(runs_mod.Runs) < 1024);
    }
    const store = try folder.openExisting();
    defer store.close();
    try testing.expectEqual(@as(u32, 1), store.chunks.slots.groupsCreated());
    try testing.expectEqual(@as(u32, 1), store.runs.table.groupsCreated());
    // Opening reads no sum: a gather that checks one reads its block.
    try testing.expectEqual(@as(u32, 0), store.sidecar.?.valid.groupsCreated());
    var out: [10 * 16]u8 = undefined;
    store.verify = .all;
    try store.gather(&.{ 9, 0, 4, 3, 2, 1, 5, 6, 7, 8 }, .{ .base = &out, .stride = 16 }, 16);
    for ([_]usize{ 9, 0, 4, 3, 2, 1, 5, 6, 7, 8 }, 0..) |id, slot| try testing.expectEqualSlices(u8, data[id * 16 ..][0..16], out[slot * 16 ..][0..16]);
    try testing.expectEqual(@as(u32, 1), store.sidecar.?.valid.groupsCreated());
    try testing.expectEqual(@as(u32, 1), store.chunks.slots.groupsCreated());
}

const gather_streams = @import("gather_streams.zig");

/// A store in `folder` holding `count` records of `size` bytes, record i filled with byte
/// (i * 7 + salt), appended with `codec_tag`.
fn fixedStore(folder: *Folder, count: usize, size: usize, salt: u8, codec_tag: u8) !*Store {
    const store = try folder.open();
    errdefer store.close();
    const data = try testing.allocator.alloc(u8, count * size);
    defer testing.allocator.free(data);
    for (0..count) |i| @memset(data[i * size ..][0..size], @as(u8, @truncate(i * 7)) +% salt);
    _ = try store.append(.{ .data = data.ptr, .stride = size, .count = count }, codec_tag);
    return store;
}

fn expectFixedRecords(out: []const u8, size: usize, indices: []const i64, salt: u8) !void {
    for (indices, 0..) |index, i| {
        const want: u8 = @as(u8, @truncate(@as(u64, @intCast(index)) * 7)) +% salt;
        for (out[i * size ..][0..size]) |b| try testing.expectEqual(want, b);
    }
}

test "gather_streams: every stream gets its store's records at the same indices, large and small, raw and zstd, pooled or alone" {
    var images_folder = Folder.init();
    defer images_folder.deinit();
    var labels_folder = Folder.init();
    defer labels_folder.deinit();
    var masks_folder = Folder.init();
    defer masks_folder.deinit();
    const images = try fixedStore(&images_folder, 300, 12 * 1024, 3, 0);
    defer images.close();
    const labels = try fixedStore(&labels_folder, 300, 8, 101, 0);
    defer labels.close();
    const masks = try fixedStore(&masks_folder, 300, 64, 55, 1);
    defer masks.close();
    // 258 records, duplicates included: the pool splits the images.
    const pattern = [_]i64{ 299, 0, 17, 17, 150, 3 };
    var indices: [258]i64 = undefined;
    for (&indices, 0..) |*index, k| index.* = pattern[k % pattern.len];
    const image_out = try testing.allocator.alloc(u8, indices.len * 12 * 1024);
    defer testing.allocator.free(image_out);
    var label_out: [indices.len * 8]u8 = undefined;
    var mask_out: [indices.len * 64]u8 = undefined;
    for ([_]pool.Policy{ .always, .never, .auto }) |policy| {
        pool.policy.store(policy, .monotonic);
        defer pool.policy.store(.auto, .monotonic);
        @memset(image_out, 0);
        @memset(&label_out, 0);
        @memset(&mask_out, 0);
        const streams = [_]gather_streams.Stream{
            .{ .store = labels, .destination = .{ .base = &label_out, .stride = 8 }, .byte_count = label_out.len },
            .{ .store = images, .destination = .{ .base = image_out.ptr, .stride = 12 * 1024 }, .byte_count = image_out.len },
            .{ .store = masks, .destination = .{ .base = &mask_out, .stride = 64 }, .byte_count = mask_out.len },
        };
        try gather_streams.gather(&streams, &indices);
        try expectFixedRecords(image_out, 12 * 1024, &indices, 3);
        try expectFixedRecords(&label_out, 8, &indices, 101);
        try expectFixedRecords(&mask_out, 64, &indices, 55);
    }
}

test "gather_streams: the same store twice is locked once; a bad index or slot is refused before any byte moves" {
    var a_folder = Folder.init();
    defer a_folder.deinit();
    var b_folder = Folder.init();
    defer b_folder.deinit();
    const a = try fixedStore(&a_folder, 10, 16, 9, 0);
    defer a.close();
    const b = try fixedStore(&b_folder, 12, 8, 200, 0);
    defer b.close();
    var first: [3 * 16]u8 = @splat(0);
    var second: [3 * 16]u8 = @splat(0);
    const twice = [_]gather_streams.Stream{
        .{ .store = a, .destination = .{ .base = &first, .stride = 16 }, .byte_count = first.len },
        .{ .store = a, .destination = .{ .base = &second, .stride = 16 }, .byte_count = second.len },
    };
    try gather_streams.gather(&twice, &.{ 9, 0, 4 });
    try expectFixedRecords(&first, 16, &.{ 9, 0, 4 }, 9);
    try expectFixedRecords(&second, 16, &.{ 9, 0, 4 }, 9);

    // Index 11 is in b but past a's 10 records: refused, and neither destination is touched.
    var a_out: [2 * 16]u8 = @splat(0xEE);
    var b_out: [2 * 8]u8 = @splat(0xEE);
    const mixed = [_]gather_streams.Stream{
        .{ .store = b, .destination = .{ .base = &b_out, .stride = 8 }, .byte_count = b_out.len },
        .{ .store = a, .destination = .{ .base = &a_out, .stride = 16 }, .byte_count = a_out.len },
    };
    try testing.expectError(error.IndexOutOfRange, gather_streams.gather(&mixed, &.{ 1, 11 }));
    try testing.expectError(error.IndexOutOfRange, gather_streams.gather(&mixed, &.{ -1, 2 }));
    for (a_out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    for (b_out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    // Slots of 8 bytes for a's 16-byte records: refused before b's stream is copied.
    var short: [2 * 8]u8 = @splat(0xEE);
    const wrong = [_]gather_streams.Stream{
        .{ .store = b, .destination = .{ .base = &b_out, .stride = 8 }, .byte_count = b_out.len },
        .{ .store = a, .destination = .{ .base = &short, .stride = 8 }, .byte_count = short.len },
    };
    try testing.expectError(error.SizeMismatch, gather_streams.gather(&wrong, &.{ 1, 2 }));
    for (b_out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    for (short) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
}
