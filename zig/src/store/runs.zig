//! Runs: what one open handle knows about blocks of its record table. The run of block b
//! (records b * block_records ..< (b + 1) * block_records) is the longest prefix of the block
//! whose records are all raw, all `stride` bytes long, and lie back to back in one chunk. A
//! record of a run is found from its index alone, without reading its table entry: a random
//! gather of small raw records then costs one memory miss per record (its bytes) instead of
//! two (its entry, then its bytes). Prefixes matter: the last block of a store (of every shard
//! of a dataset, which may hold a few hundred records) is partly filled, and a delete breaks a
//! block only from the record it moved.
//!
//! Runs are learned by open, right after its snapshot check has read and checked every entry
//! below the length (one more pass: about 10 ms per 2^24 records here), and by this handle's
//! appends, which extend the run of the block they continue and learn the blocks they start.
//! Entries below the length never change while a handle is open (delete and compact need the
//! store to themselves, see lock.zig), so what is learned stays true until this handle runs
//! one of them: those clear the runs and learn them again from the new table before anyone
//! reads. Records appended by another process are not learned (they take the table, as
//! before).
const std = @import("std");
const assert = std.debug.assert;
const limits = @import("../base/limits.zig");
const format = @import("../files/format.zig");
const chunk = @import("../files/chunk.zig");
const LazyTable = @import("../base/lazy_table.zig").LazyTable;
const RecordLoc = format.RecordLoc;

/// Records per block: large enough that the runs of a full store take 64 KiB, small enough that a
/// delete or a chunk boundary costs only its own block the fast path.
pub const block_records: u32 = 4096;
pub const block_count: u32 = limits.record_count_max / block_records;

comptime {
    assert(limits.record_count_max % block_records == 0);
    assert(std.math.isPowerOfTwo(block_records));
    // A start packs the chunk id above the in-chunk offset.
    assert(limits.chunk_count_max <= 1 << 16);
    assert(limits.chunk_size_max <= 1 << 32);
}

/// Block b's run: `shape` is (records covered << 32) | stride, 0 when the block has none
/// (records of 0 bytes are never a run: they have no bytes to find), stored with release
/// after `start`; a run only ever grows while the handle is open. `start` is (chunk id << 32) |
/// in-chunk offset of the block's first record, valid while `shape` != 0.
pub const Run = struct {
    shape: std.atomic.Value(u64) = .init(0),
    start: std.atomic.Value(u64) = .init(0),
};

/// Blocks whose runs exist at once: 64 blocks (2^18 records) are 1 KiB, and a small store (a
/// shard of a dataset of small shards) uses one group instead of the 64 KiB a full table takes.
const run_group_length = 64;
pub const RunTable = LazyTable(Run, block_count, run_group_length, .{});

pub const Runs = struct {
    allocator: std.mem.Allocator,
    /// Groups are created by the writer of the runs (open, this handle's appends, maintenance:
    /// one at a time); a block whose group is absent has no run.
    table: RunTable = .{},

    pub fn deinit(runs: *Runs) void {
        runs.table.deinit(runs.allocator);
    }

    /// Forgets every run (the caller holds the store exclusively).
    pub fn clear(runs: *Runs) void {
        for (0..RunTable.group_count) |g| {
            const group = runs.table.groupAt(g) orelse continue;
            for (group) |*run| run.shape.store(0, .monotonic);
        }
    }

    inline fn shapeOf(runs: *const Runs, block: u64) u64 {
        const run = runs.table.peek(@intCast(block)) orelse return 0;
        return run.shape.load(.acquire);
    }

    /// The stride of block b's run (0 when it has none).
    pub fn stride(runs: *const Runs, block: u64) u32 {
        return @truncate(runs.shapeOf(block));
    }

    /// How many of block b's first records its run covers.
    pub fn covered(runs: *const Runs, block: u64) u32 {
        return @intCast(runs.shapeOf(block) >> 32);
    }

    inline fn shapeCovers(shape: u64, index: u64, record_stride: u64) bool {
        return record_stride != 0 and (shape & 0xFFFF_FFFF) == record_stride and index % block_records < shape >> 32;
    }

    /// Whether record `index` lies in a run of `record_stride`-byte records (never for stride
    /// 0, the value of a block with no run).
    pub inline fn covers(runs: *const Runs, index: u64, record_stride: u64) bool {
        return shapeCovers(runs.shapeOf(index / block_records), index, record_stride);
    }

    /// Where record `index` lies when it is in a run of `record_stride`-byte records whose chunk
    /// is mapped and whose end is within the chunk's known size; null otherwise (the caller then
    /// reads the record's table entry). The caller has checked the index against the length.
    pub inline fn source(runs: *const Runs, index: u64, record_stride: u64, chunks: *const chunk.Chunks) ?[*]const u8 {
        const block = index / block_records;
        const run = runs.table.peek(@intCast(block)) orelse return null;
        const shape = run.shape.load(.acquire);
        if (!shapeCovers(shape, index, record_stride)) return null;
        const start = run.start.load(.monotonic);
        const chunk_id: u16 = @intCast(start >> 32);
        const first: u64 = start & 0xFFFF_FFFF;
        if (first + (shape >> 32) * record_stride > chunks.knownSize(chunk_id)) return null;
        const view = chunks.mapped(chunk_id) orelse return null;
        return view + first + (index % block_records) * record_stride;
    }

    /// Learns block `block` from its first entries (all of them below the length, at most a
    /// block): its run is the longest prefix of raw entries of the first one's nonzero length,
    /// in its chunk, each right after the one before. Entries must have been checked against
    /// their chunk files (open's snapshot check, or written by this handle after reserving
    /// their bytes).
    pub fn learnBlock(runs: *Runs, block: u64, entries: []const RecordLoc) void {
        assert(entries.len <= block_records);
        const count = if (entries.len == 0 or !startsRun(entries[0])) 0 else prefixLength(entries, entries[0], 0);
        runs.publish(block, if (count == 0) null else entries[0], count);
    }

    /// Learns what records [old_length, new_length) of `table`, just appended by this handle,
    /// add: the run of the block they continue grows when they continue it (and its run
    /// reached old_length), and the blocks they start are learned.
    pub fn learnAppended(runs: *Runs, table: []const RecordLoc, old_length: u64, new_length: u64) void {
        assert(old_length <= new_length and new_length <= table.len);
        var block = old_length / block_records;
        while (block * block_records < new_length) : (block += 1) {
            const begin = block * block_records;
            const end = @min(new_length, begin + block_records);
            const entries = table[@intCast(begin)..@intCast(end)];
            if (begin >= old_length) {
                runs.learnBlock(block, entries);
                continue;
            }
            const shape = runs.shapeOf(block);
            const have = shape >> 32;
            if (shape == 0 or begin + have != old_length) continue;
            const count = prefixLength(entries, entries[0], @intCast(have));
            runs.publish(block, entries[0], count);
        }
    }

    /// Learns every block of table[0..length] (see learnBlock).
    pub fn learn(runs: *Runs, table: []const RecordLoc, length: u64) void {
        var block: u64 = 0;
        while (block * block_records < length) : (block += 1) {
            const begin = block * block_records;
            runs.learnBlock(block, table[@intCast(begin)..@intCast(@min(length, begin + block_records))]);
        }
    }

    fn publish(runs: *Runs, block: u64, first: ?RecordLoc, count: usize) void {
        const head = first orelse {
            // An absent group already reads as "no run".
            if (runs.table.peek(@intCast(block))) |run| run.shape.store(0, .release);
            return;
        };
        assert(count > 0 and count <= block_records);
        // Runs only make reads faster: without memory for the group the block simply has none
        // (its records are found through their table entries, as any record outside a run).
        const run = runs.table.slot(runs.allocator, @intCast(block)) catch return;
        run.start.store(@as(u64, head.chunk_id) << 32 | head.offset, .monotonic);
        run.shape.store(@as(u64, count) << 32 | head.logic_length, .release);
    }
};

/// Whether a run can start at `first`: raw, nonzero, at most a record's size, in a real chunk.
fn startsRun(first: RecordLoc) bool {
    return first.codec == .raw and first.logic_length > 0 and first.logic_length <= limits.record_size_max and
        first.chunk_id < limits.chunk_count_max;
}

/// How many of `entries` from the front are the run `first` starts, given that the first
/// `known` of them are: each raw, of first's length, in first's chunk, right after the one
/// before. The check is one loop with no early exit over blocks of 64 entries (open runs
/// this over the whole table), then exact within the block that breaks.
fn prefixLength(entries: []const RecordLoc, first: RecordLoc, known: usize) usize {
    assert(startsRun(first) and known <= entries.len);
    const record_stride: u64 = first.logic_length;
    // The run's last byte must fit a chunk, which also keeps the expected offsets in range.
    const fitting: usize = @intCast(@min(entries.len, (limits.chunk_size_max - first.offset) / record_stride));
    var k = @min(known, fitting);
    while (k < fitting) {
        const stop = @min(fitting, k + 64);
        var differs: u64 = 0;
        for (entries[k..stop], k..) |entry, position| differs |= mismatch(entry, first, position);
        if (differs != 0) {
            while (mismatch(entries[k], first, k) == 0) k += 1;
            return k;
        }
        k = stop;
    }
    return k;
}

/// Nonzero when `entry`, at `position` in its block, is not the next record of first's run.
inline fn mismatch(entry: RecordLoc, first: RecordLoc, position: usize) u64 {
    const expected = @as(u64, first.offset) + position * @as(u64, first.logic_length);
    // Raw is codec 0.
    return (entry.offset ^ expected) | (entry.phys_length ^ first.logic_length) | (entry.logic_length ^ first.logic_length) |
        (@as(u64, entry.chunk_id) ^ first.chunk_id) | @backingInt(entry.codec);
}

// ---- tests -----------------------------------------------------------------------------------

const testing = std.testing;

fn runEntries(entries: []RecordLoc, chunk_id: u16, first: u32, stride: u32) void {
    for (entries, 0..) |*entry, k| entry.* = .{
        .offset = first + @as(u32, @intCast(k)) * stride,
        .phys_length = stride,
        .logic_length = stride,
        .chunk_id = chunk_id,
        .codec = .raw,
    };
}

test "runs: a block's run is its longest prefix of back-to-back raw records of one size" {
    const runs = try testing.allocator.create(Runs);
    defer testing.allocator.destroy(runs);
    runs.* = .{ .allocator = testing.allocator };
    defer runs.deinit();
    const table = try testing.allocator.alloc(RecordLoc, 7 * block_records + 5);
    defer testing.allocator.free(table);
    runEntries(table, 0, 0, 8);
    // Block 1: record 17 compressed. Block 2: a gap before record 100. Block 3: the run moves
    // to chunk 1 at record 2000. Block 4: another stride, in chunk 2. Block 5: records of 0
    // bytes. Block 6: its first record compressed. Block 7: 5 records, the store's last.
    table[block_records + 17].codec = .zstd;
    for (table[2 * block_records + 100 .. 3 * block_records]) |*e| e.offset += 8;
    for (table[3 * block_records + 2000 .. 4 * block_records]) |*e| e.chunk_id = 1;
    runEntries(table[4 * block_records .. 5 * block_records], 2, 4096, 24);
    runEntries(table[5 * block_records .. 6 * block_records], 0, 0, 0);
    table[6 * block_records].codec = .zstd;
    const expected_strides = [_]u32{ 8, 8, 8, 8, 24, 0, 0, 8 };
    const expected_covered = [_]u32{ block_records, 17, 100, 2000, block_records, 0, 0, 5 };

    runs.learn(table, table.len);
    for (expected_strides, expected_covered, 0..) |stride, count, b| {
        try testing.expectEqual(stride, runs.stride(b));
        try testing.expectEqual(count, runs.covered(b));
    }
    try testing.expect(runs.covers(block_records + 16, 8) and !runs.covers(block_records + 17, 8));
    try testing.expect(runs.covers(7 * block_records + 4, 8) and !runs.covers(7 * block_records + 5, 8));

    // A block learned again after it changed keeps only the prefix before the change.
    table[7].offset += 1;
    runs.learnBlock(0, table[0..block_records]);
    try testing.expectEqual(@as(u32, 7), runs.covered(0));
    table[0].codec = .zstd;
    runs.learnBlock(0, table[0..block_records]);
    try testing.expectEqual(@as(u32, 0), runs.stride(0));

    runs.clear();
    for (expected_strides, 0..) |_, b| try testing.expectEqual(@as(u32, 0), runs.stride(b));
}

test "runs: appends grow the run they continue and learn the blocks they start" {
    const runs = try testing.allocator.create(Runs);
    defer testing.allocator.destroy(runs);
    runs.* = .{ .allocator = testing.allocator };
    defer runs.deinit();
    const table = try testing.allocator.alloc(RecordLoc, 3 * block_records);
    defer testing.allocator.free(table);
    runEntries(table, 4, 0, 16);
    runs.learn(table, 10);
    try testing.expectEqual(@as(u32, 10), runs.covered(0));
    // Across a block end: block 0 grows to whole, block 1 is learned.
    runs.learnAppended(table, 10, block_records + 3);
    try testing.expectEqual(@as(u32, block_records), runs.covered(0));
    try testing.expectEqual(@as(u32, 3), runs.covered(1));
    // Records that do not continue the run (another size) leave it as it was.
    for (table[block_records + 3 .. block_records + 6]) |*e| e.logic_length = 15;
    runs.learnAppended(table, block_records + 3, block_records + 6);
    try testing.expectEqual(@as(u32, 3), runs.covered(1));
    // Nor does a run whose end another process's appends moved past (it did not learn them).
    runEntries(table[2 * block_records ..], 4, 0, 16);
    runs.learnBlock(2, table[2 * block_records ..][0..5]);
    runs.learnAppended(table, 2 * block_records + 8, 2 * block_records + 20);
    try testing.expectEqual(@as(u32, 5), runs.covered(2));
}

test "runs: a record's source is its block's start plus its place, only while covered and mapped" {
    const runs = try testing.allocator.create(Runs);
    defer testing.allocator.destroy(runs);
    runs.* = .{ .allocator = testing.allocator };
    defer runs.deinit();
    const chunks = try testing.allocator.create(chunk.Chunks);
    defer testing.allocator.destroy(chunks);
    chunks.* = .{ .allocator = testing.allocator };
    defer chunks.slots.deinit(testing.allocator); // its fake view is no mapping to drop
    const table = try testing.allocator.alloc(RecordLoc, 2 * block_records);
    defer testing.allocator.free(table);
    runEntries(table[0..block_records], 3, 64, 16);
    runEntries(table[block_records..], 3, 64 + 16 * block_records, 16);
    runs.learn(table, table.len);
    var fake_chunk: [1]u8 = undefined;
    const base: [*]const u8 = &fake_chunk;
    // Not mapped, then not covered, then both.
    try testing.expect(runs.source(5, 16, chunks) == null);
    try chunks.notePresent(3, 64 + 16 * block_records - 1);
    try testing.expect(runs.source(5, 16, chunks) == null);
    chunks.slots.peek(3).?.view.store(base, .release);
    try testing.expect(runs.source(5, 16, chunks) == null);
    try chunks.notePresent(3, 64 + 2 * 16 * block_records);
    try testing.expectEqual(base + 64 + 5 * 16, runs.source(5, 16, chunks).?);
    try testing.expectEqual(base + 64 + (block_records + 7) * 16, runs.source(block_records + 7, 16, chunks).?);
    // Another stride is not this run.
    try testing.expect(runs.source(5, 8, chunks) == null);
    try testing.expect(runs.covers(5, 16) and !runs.covers(5, 8));
    // Stride 0 is what a block that is not a run holds: it never matches.
    runs.clear();
    try testing.expect(!runs.covers(5, 0) and runs.source(5, 0, chunks) == null);
}
