//! Runs: what one open handle knows about blocks of its record table. Block b (records
//! b * block_records ..< (b + 1) * block_records) is a run when its records are all raw, all
//! `stride` bytes long, and lie back to back in one chunk. A record of a run is found from its
//! index alone, without reading its table entry: a random gather of small raw records then
//! costs one memory miss per record (its bytes) instead of two (its entry, then its bytes).
//!
//! Runs are learned by open, right after its snapshot check has read and checked every entry
//! below the length (one more pass: about 10 ms per 2^24 records here), and by this handle's
//! appends, for the blocks they complete. Entries below the length never change while a handle
//! is open (delete and compact need the store to themselves, see lock.zig), so what is learned
//! stays true until this handle runs one of them: those clear the runs and learn them again
//! from the new table before anyone reads. Records appended by another process are not learned
//! (they take the table, as before).
const std = @import("std");
const assert = std.debug.assert;
const limits = @import("limits.zig");
const format = @import("format.zig");
const chunk = @import("chunk.zig");
const RecordLoc = format.RecordLoc;

/// Records per block: large enough that the runs of a full store take 48 KiB, small enough that a
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

pub const Runs = struct {
    /// The stride of block b's records when the block is a run, else 0 (records of 0 bytes
    /// are never a run: they have no bytes to find). Stored with release after starts[b].
    strides: [block_count]std.atomic.Value(u32) = @splat(.init(0)),
    /// (chunk id << 32) | in-chunk offset of block b's first record, valid while strides[b] != 0.
    starts: [block_count]std.atomic.Value(u64) = @splat(.init(0)),

    /// Forgets every run (the caller holds the store exclusively).
    pub fn clear(runs: *Runs) void {
        for (&runs.strides) |*s| s.store(0, .monotonic);
    }

    /// Whether record `index` lies in a run of `stride`-byte records (never for stride 0, the
    /// value of a block that is not a run).
    pub inline fn covers(runs: *const Runs, index: u64, stride: u64) bool {
        return stride != 0 and runs.strides[@intCast(index / block_records)].load(.acquire) == stride;
    }

    /// Where record `index` lies when its block is a run of `stride`-byte records whose chunk is
    /// mapped and whose end is within the chunk's known size; null otherwise (the caller then
    /// reads the record's table entry). The caller has checked the index against the length.
    pub inline fn source(runs: *const Runs, index: u64, stride: u64, chunks: *const chunk.Chunks) ?[*]const u8 {
        const block = index / block_records;
        if (stride == 0 or runs.strides[@intCast(block)].load(.acquire) != stride) return null;
        const start = runs.starts[@intCast(block)].load(.monotonic);
        const chunk_id: u16 = @intCast(start >> 32);
        const first: u64 = start & 0xFFFF_FFFF;
        if (first + block_records * stride > chunks.sizes[chunk_id].load(.acquire)) return null;
        const view = chunks.views[chunk_id].load(.acquire) orelse return null;
        return view + first + (index % block_records) * stride;
    }

    /// Learns block `block` from its entries: a run when every entry is raw, of the first
    /// one's nonzero length, in its chunk, right after the one before. One pass with no branch
    /// per entry (open runs this over the whole table). Entries must have been checked against
    /// their chunk files (open's snapshot check, or written by this handle after reserving
    /// their bytes).
    pub fn learnBlock(runs: *Runs, block: u64, entries: *const [block_records]RecordLoc) void {
        const first = entries[0];
        const stride = first.logic_length;
        const fits = @as(u64, first.offset) + @as(u64, block_records) * stride <= limits.chunk_size_max;
        // A compressed block (the usual store that is not raw) shows it in its first entry.
        var run = first.codec == .raw and stride > 0 and stride <= limits.record_size_max and
            first.chunk_id < limits.chunk_count_max and fits;
        if (run) {
            var differs: u32 = 0;
            var expected: u32 = first.offset;
            for (entries) |entry| {
                // Raw is codec 0; `fits` keeps `expected` from wrapping.
                differs |= (entry.offset ^ expected) | (entry.phys_length ^ stride) | (entry.logic_length ^ stride) |
                    (@as(u32, entry.chunk_id) ^ first.chunk_id) | @intFromEnum(entry.codec);
                expected +%= stride;
            }
            run = differs == 0;
        }
        if (!run) {
            runs.strides[@intCast(block)].store(0, .release);
            return;
        }
        runs.starts[@intCast(block)].store(@as(u64, first.chunk_id) << 32 | first.offset, .monotonic);
        runs.strides[@intCast(block)].store(stride, .release);
    }

    /// Learns every whole block of table[begin_block * block_records ..< length] (see learnBlock).
    pub fn learn(runs: *Runs, table: []const RecordLoc, begin_block: u64, length: u64) void {
        var block = begin_block;
        while ((block + 1) * block_records <= length) : (block += 1) {
            runs.learnBlock(block, table[@intCast(block * block_records)..][0..block_records]);
        }
    }
};

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

test "runs: whole blocks of back-to-back raw records are learned, anything else is not" {
    const runs = try testing.allocator.create(Runs);
    defer testing.allocator.destroy(runs);
    runs.* = .{};
    const table = try testing.allocator.alloc(RecordLoc, 6 * block_records + 5);
    defer testing.allocator.free(table);
    runEntries(table, 0, 0, 8);
    // Block 1: one record compressed. Block 2: a gap between two records. Block 3: the run
    // moves to chunk 1 half-way. Block 4: another stride, in chunk 2. Block 5: records of 0 bytes.
    table[block_records + 17].codec = .zstd;
    for (table[2 * block_records + 100 .. 3 * block_records]) |*e| e.offset += 8;
    for (table[3 * block_records + 2000 .. 4 * block_records]) |*e| e.chunk_id = 1;
    runEntries(table[4 * block_records .. 5 * block_records], 2, 4096, 24);
    runEntries(table[5 * block_records .. 6 * block_records], 0, 0, 0);
    const expected_strides = [_]u32{ 8, 0, 0, 0, 24, 0, 0 };

    runs.learn(table, 0, table.len);
    for (expected_strides, 0..) |stride, b| try testing.expectEqual(stride, runs.strides[b].load(.monotonic));

    // A block learned again after it changed is forgotten.
    table[7].offset += 1;
    runs.learnBlock(0, table[0..block_records]);
    try testing.expectEqual(@as(u32, 0), runs.strides[0].load(.monotonic));
    runs.learnBlock(4, table[4 * block_records ..][0..block_records]);
    try testing.expectEqual(@as(u32, 24), runs.strides[4].load(.monotonic));

    runs.clear();
    for (expected_strides, 0..) |_, b| try testing.expectEqual(@as(u32, 0), runs.strides[b].load(.monotonic));
}

test "runs: a record's source is its block's start plus its place, only while covered and mapped" {
    const runs = try testing.allocator.create(Runs);
    defer testing.allocator.destroy(runs);
    runs.* = .{};
    const chunks = try testing.allocator.create(chunk.Chunks);
    defer testing.allocator.destroy(chunks);
    chunks.* = .{};
    const table = try testing.allocator.alloc(RecordLoc, 2 * block_records);
    defer testing.allocator.free(table);
    runEntries(table[0..block_records], 3, 64, 16);
    runEntries(table[block_records..], 3, 64 + 16 * block_records, 16);
    runs.learn(table, 0, table.len);
    var fake_chunk: [1]u8 = undefined;
    const base: [*]const u8 = &fake_chunk;
    // Not mapped, then not covered, then both.
    try testing.expect(runs.source(5, 16, chunks) == null);
    chunks.views[3].store(base, .release);
    chunks.sizes[3].store(64 + 16 * block_records - 1, .release);
    try testing.expect(runs.source(5, 16, chunks) == null);
    chunks.sizes[3].store(64 + 2 * 16 * block_records, .release);
    try testing.expectEqual(base + 64 + 5 * 16, runs.source(5, 16, chunks).?);
    try testing.expectEqual(base + 64 + (block_records + 7) * 16, runs.source(block_records + 7, 16, chunks).?);
    // Another stride is not this run.
    try testing.expect(runs.source(5, 8, chunks) == null);
    try testing.expect(runs.covers(5, 16) and !runs.covers(5, 8));
    // Stride 0 is what a block that is not a run holds: it never matches.
    runs.clear();
    try testing.expect(!runs.covers(5, 0) and runs.source(5, 0, chunks) == null);
}
