//! Append: a batch compressed on the pool, placed after the frontier, written (in pieces, on
//! the pool), its sums and table entries written after it, and its length published last.
const std = @import("std");
const limits = @import("../base/limits.zig");
const format = @import("../files/format.zig");
const meta_file = @import("../files/meta.zig");
const codec = @import("../codec/codec.zig");
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const checksum = @import("../codec/checksum.zig");
const write_pieces = @import("../batch/write_pieces.zig");
const batch = @import("../batch/batch.zig");
const store_mod = @import("store.zig");
const Store = store_mod.Store;
const Records = batch.Records;
const Failure = batch.Failure;
const Error = errors.Error;
const Codec = format.Codec;
const Position = format.Position;
const RecordLoc = format.RecordLoc;
const fail = meta_file.fail;
const outOfMemory = errors.outOfMemory;

/// Appends a batch, all or nothing; returns the index of its first record.
pub fn append(store: *Store, records: Records, codec_tag: u8) Error!u64 {
    const io = pool.io();
    const record_codec = try checkCodec(codec_tag);
    if (records.count > limits.record_count_max) {
        diagnostic.note("a batch of {d} records exceeds the limit of {d}", .{ records.count, limits.record_count_max });
        return error.StoreFull;
    }
    try records.validate();
    try store.refuseIfReadOnly();
    try store.relockIfForked();
    store.lock.lockSharedUncancelable(io);
    defer store.lock.unlockShared(io);
    store.append_mutex.lockUncancelable(io);
    defer store.append_mutex.unlock(io);
    try store.locks.holdWriter(io, store.dir);

    const first: u64 = store.meta.header.length;
    if (records.count > limits.record_count_max - first) {
        diagnostic.note("appending {d} records to {d} would exceed the limit of {d}", .{ records.count, first, limits.record_count_max });
        return error.StoreFull;
    }
    var cdict: ?*const codec.CDict = null;
    if (record_codec == .zstd_dict) {
        const dict = store.dict orelse {
            diagnostic.note("codec zstd_dict needs a dictionary: train one first (dict.zr is absent)", .{});
            return error.NoDictionary;
        };
        cdict = dict.compressionDict() catch return outOfMemory();
    }
    if (records.count == 0) return first;

    const slots = store.allocator.alloc(Slot, records.count) catch return outOfMemory();
    defer store.allocator.free(slots);
    var staging: []u8 = &.{};
    defer store.allocator.free(staging);
    if (record_codec == .raw) {
        for (slots, 0..) |*slot, i| slot.* = .{ .phys_length = @intCast(records.get(i).len), .codec = .raw, .start = undefined };
    } else {
        staging = store.allocator.alloc(u8, records.totalSize()) catch return outOfMemory();
        var task: CompressTask = .{ .store = store, .records = records, .codec = record_codec, .cdict = cdict, .staging = staging, .slots = slots };
        pool.run(CompressTask, &task, records.count, pool.plan(records.count, records.totalSize(), store_mod.runner_bytes_min));
        try task.failure.check();
    }

    const frontier = try assignLocations(store, slots);
    const sums: []u32 = if (store.sidecar != null)
        store.allocator.alloc(u32, records.count) catch return outOfMemory()
    else
        &.{};
    defer store.allocator.free(sums);
    var write_task: WriteTask = .{ .store = store, .records = records, .staging = staging, .slots = slots, .sums = sums, .pieces = &.{} };
    write_task.pieces = write_pieces.plan(store.allocator, &write_task, slots.len) catch return outOfMemory();
    defer store.allocator.free(write_task.pieces);
    var stored_bytes: u64 = 0;
    for (slots) |slot| stored_bytes += slot.phys_length;
    pool.run(WriteTask, &write_task, write_task.pieces.len, pool.plan(write_task.pieces.len, stored_bytes, store_mod.runner_bytes_min));
    try write_task.failure.check();
    if (store.durable) try store.syncChunks(slots[0].start.chunk, frontier.chunk);
    // The sums are on disk before the table entries they check.
    if (store.sidecar) |*sidecar| try sidecar.write(io, @intCast(first), sums, store.durable);

    const entries = store.allocator.alloc(RecordLoc, records.count) catch return outOfMemory();
    defer store.allocator.free(entries);
    for (slots, entries, 0..) |slot, *entry, i| {
        entry.* = .{
            .offset = @intCast(slot.start.offset),
            .phys_length = slot.phys_length,
            .logic_length = @intCast(records.get(i).len),
            .chunk_id = @intCast(slot.start.chunk),
            .codec = slot.codec,
        };
    }
    try store.meta.writeEntries(io, first, entries);
    if (store.durable) try store.meta.flushEntries(io, first, records.count);
    store.meta.header.setTail(frontier);
    store.meta.publishLength(@intCast(first + records.count));
    if (store.durable) try store.meta.flushHeader(io);
    // The runs this batch extends or starts (its bytes were reserved and written above).
    store.runs.learnAppended(store.meta.table, first, first + records.count);
    return first;
}

const Slot = struct {
    phys_length: u32,
    codec: Codec,
    start: Position,
};

/// Places every record after the frontier (serially: the only order-dependent step) and
/// makes sure its chunk file is long enough to hold it, with the space reserved, before any
/// byte is written. A chunk the batch leaves behind (rolling over to the next) gets its slack
/// trimmed (leaveChunk). Returns the new frontier.
fn assignLocations(store: *Store, slots: []Slot) Error!Position {
    const io = pool.io();
    var tail = store.meta.header.tail();
    // The chunk records are placed in and where its data ends: at first the frontier's chunk,
    // which earlier batches grew for their records, then each chunk this batch fills.
    var filling: Position = tail;
    var filled_here = false;
    for (slots) |*slot| {
        const placement = format.place(tail, slot.phys_length) orelse {
            diagnostic.note("all {d} chunks are used; compact the store to reclaim deleted records' bytes", .{limits.chunk_count_max});
            return error.StoreFull;
        };
        slot.start = placement.start;
        tail = placement.end;
        if (slot.phys_length == 0) continue;
        const end: Position = .{ .chunk = placement.start.chunk, .offset = placement.start.offset + slot.phys_length };
        if (end.chunk != filling.chunk) try leaveChunk(store, filling, filled_here);
        filling = end;
        filled_here = true;
    }
    if (filled_here) try store.chunks.reserve(io, store.dir, filling.chunk, filling.offset);
    return tail;
}

/// Done with chunk `left.chunk`, whose records end at `left.offset`: grown to hold this batch's
/// records there when it placed some (`filled_here`), then trimmed to them (Chunks.settle),
/// for good, since later records go to later chunks. The trim stays past the end of every
/// record in the chunk, published or about to be written, so no reader loses a byte.
fn leaveChunk(store: *Store, left: Position, filled_here: bool) Error!void {
    const io = pool.io();
    if (filled_here) {
        try store.chunks.reserve(io, store.dir, left.chunk, left.offset);
    } else {
        // The frontier's chunk, holding only earlier batches' records (so it exists).
        _ = try store.chunks.file(io, store.dir, left.chunk, false);
    }
    try store.chunks.settle(io, left.chunk, left.offset);
}

const CompressTask = struct {
    store: *Store,
    records: Records,
    codec: Codec,
    cdict: ?*const codec.CDict,
    staging: []u8,
    slots: []Slot,
    failure: Failure = .{},

    pub fn runShard(task: *CompressTask, blocks: *pool.Blocks) void {
        const io = pool.io();
        const cctx = task.store.contexts.acquireCompressor(io) catch {
            task.failure.record(error.OutOfMemory, "out of memory creating a zstd context", .{});
            return;
        };
        defer task.store.contexts.releaseCompressor(io, cctx);
        while (blocks.next()) |range| task.compressBlock(cctx, range.begin, range.end);
    }

    fn compressBlock(task: *CompressTask, cctx: *codec.CCtx, begin: usize, end: usize) void {
        for (begin..end) |i| {
            if (task.failure.failed()) return;
            const src = task.records.get(i);
            const dst = task.staging[task.records.begin(i)..][0..src.len];
            task.slots[i] = switch (codec.compress(cctx, task.codec, task.cdict, src, dst)) {
                .size => |size| .{ .phys_length = @intCast(size), .codec = task.codec, .start = undefined },
                .raw => .{ .phys_length = @intCast(src.len), .codec = .raw, .start = undefined },
                .failed => |detail| {
                    task.failure.record(error.CodecFailed, "zstd failed on record {d}: {s}", .{ i, detail });
                    return;
                },
            };
        }
    }
};

const WriteTask = struct {
    store: *Store,
    records: Records,
    staging: []const u8,
    slots: []const Slot,
    /// Filled with each record's checksum when the store keeps them (else empty).
    sums: []u32,
    /// The writes (write_pieces.zig); the pool's items.
    pieces: []const write_pieces.Piece,
    failure: Failure = .{},

    pub fn runShard(task: *WriteTask, blocks: *pool.Blocks) void {
        while (blocks.next()) |range| {
            for (task.pieces[range.begin..range.end]) |piece| {
                if (task.sums.len > 0) {
                    for (piece.first..piece.end) |i| {
                        task.sums[i] = checksum.recordSum(task.storedBytes(i), @intCast(task.records.get(i).len), task.slots[i].codec);
                    }
                }
                if (piece.bytes.len > 0 and !task.write(piece.chunk, piece.offset, piece.bytes)) return;
            }
        }
    }

    /// Record i's bytes as stored: its own when raw, its compressed form from staging.
    fn storedBytes(task: *const WriteTask, i: usize) []const u8 {
        const slot = task.slots[i];
        if (slot.codec == .raw) return task.records.get(i);
        return task.staging[task.records.begin(i)..][0..slot.phys_length];
    }

    /// Where record i goes, for write_pieces.plan.
    pub fn placed(task: *const WriteTask, i: usize) write_pieces.Placed {
        const slot = task.slots[i];
        const bytes = if (slot.phys_length == 0) &.{} else task.storedBytes(i);
        return .{ .chunk = slot.start.chunk, .offset = slot.start.offset, .bytes = bytes };
    }

    fn write(task: *WriteTask, chunk_id: u32, offset: u64, bytes: []const u8) bool {
        const f = task.store.chunks.openedFile(chunk_id).?;
        f.writePositionalAll(pool.io(), bytes, offset) catch |err| {
            task.failure.recordCurrent(fail(err, "write chunk {d}.zr", .{chunk_id}));
            return false;
        };
        return true;
    }
};

fn checkCodec(tag: u8) Error!Codec {
    const c: Codec = @fromBackingInt(@intCast(tag));
    if (!c.isKnown()) {
        diagnostic.note("unknown codec {d} (0 raw, 1 zstd, 2 zstd_dict)", .{tag});
        return error.InvalidArgument;
    }
    return c;
}
