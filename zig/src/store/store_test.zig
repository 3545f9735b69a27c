//! Tests of the store engine (store.zig) through its Zig API, each in a temporary folder:
//! round trips, the dictionary, limits, corrupt stores at open, durable mode, verify and the
//! tables of a small store; and the fixtures store_delete_test.zig and store_gather_test.zig
//! share.
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

pub const Folder = struct {
    tmp: testing.TmpDir,
    path_buffer: [64]u8 = undefined,

    pub fn init() Folder {
        return .{ .tmp = testing.tmpDir(.{}) };
    }

    pub fn deinit(folder: *Folder) void {
        folder.tmp.cleanup();
    }

    /// The folder relative to the working directory (where tmpDir makes it).
    pub fn path(folder: *Folder) []const u8 {
        return std.fmt.bufPrint(&folder.path_buffer, ".zig-cache/tmp/{s}", .{folder.tmp.sub_path}) catch unreachable;
    }

    pub fn open(folder: *Folder) !*Store {
        return Store.open(testing.allocator, folder.path(), .{ .create = true });
    }

    pub fn openExisting(folder: *Folder) !*Store {
        return Store.open(testing.allocator, folder.path(), .{});
    }
};

/// Deterministic record contents: compressible unless `noisy`, sized by `size`.
pub fn fillRecord(buffer: []u8, id: u64, noisy: bool) void {
    var prng = std.Random.DefaultPrng.init(id);
    for (buffer, 0..) |*b, j| b.* = if (noisy) prng.random().int(u8) else @truncate(id *% 31 +% j / 9);
}

/// A batch of `count` records with ids starting at `first_id`; sizes from `sizeOf`.
pub const Batch = struct {
    data: []u8,
    offsets: []u64,

    pub fn init(first_id: u64, count: usize, sizeOf: *const fn (u64) usize, noisy: bool) !Batch {
        const offsets = try testing.allocator.alloc(u64, count + 1);
        offsets[0] = 0;
        for (0..count) |i| offsets[i + 1] = offsets[i] + sizeOf(first_id + i);
        const data = try testing.allocator.alloc(u8, offsets[count]);
        for (0..count) |i| fillRecord(data[offsets[i]..offsets[i + 1]], first_id + i, noisy);
        return .{ .data = data, .offsets = offsets };
    }

    pub fn deinit(batch: *Batch) void {
        testing.allocator.free(batch.data);
        testing.allocator.free(batch.offsets);
    }

    pub fn records(batch: *const Batch) Records {
        return Records.fromSlices(batch.data, batch.offsets);
    }
};

pub fn sizeSmall(id: u64) usize {
    return @intCast((id * 7919) % 3000);
}

/// Checks record `index` holds the contents of record `id`.
pub fn expectRecord(store: *Store, index: u64, id: u64, size: usize, noisy: bool) !void {
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

pub fn sizeHundreds(id: u64) usize {
    return @intCast(100 + id);
}

/// Checks every live record against the model (model[index] = id).
pub fn expectModel(store: *Store, model: []const u64) !void {
    try testing.expectEqual(@as(u64, model.len), store.length());
    for (model, 0..) |id, index| try expectRecord(store, index, id, sizeSmall(id), false);
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
        entry.codec = @fromBackingInt(@intCast(9));
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
    try testing.expectEqual(@backingInt(integrity.Reason.checksum), problems[0].reason);
    var out: [64]u8 = undefined;
    try testing.expectError(error.Corrupt, store.gather(&.{2}, .{ .base = &out, .stride = 64 }, 64));
    store.verify = .none;
    try store.gather(&.{2}, .{ .base = &out, .stride = 64 }, 64);
    try testing.expectEqualSlices(u8, data[5 * 64 ..][0..64], &out);
}

test "a small store allocates its per-chunk, run and checksum tables a group at a time" {
    const chunk = @import("../files/chunk.zig");
    const runs_mod = @import("runs.zig");
    var folder = Folder.init();
    defer folder.deinit();
    var data: [10 * 16]u8 = undefined;
    for (0..10) |id| fillRecord(data[id * 16 ..][0..16], id, true);
    {
        const store = try folder.open();
        defer store.close();
        _ = try store.append(.{ .data = &data, .stride = 16, .count = 10 }, @backingInt(format.Codec.raw));
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
