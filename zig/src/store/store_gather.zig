//! Gather and record_lengths: indices checked on a private copy, every slot's size checked
//! before any byte moves, then raw records copied (raw_copy.zig) and compressed ones checked
//! and decompressed, on the pool. A view calls gatherRecord for the records it routes here.
const std = @import("std");
const assert = std.debug.assert;
const limits = @import("../base/limits.zig");
const format = @import("../files/format.zig");
const codec = @import("../codec/codec.zig");
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const integrity = @import("integrity.zig");
const raw_copy = @import("raw_copy.zig");
const batch = @import("../batch/batch.zig");
const index_check = @import("../batch/index_check.zig");
const store_mod = @import("store.zig");
const record_offsets = @import("../batch/record_offsets.zig");
const padded_mod = @import("../batch/padded.zig");
const Store = store_mod.Store;
const Destination = batch.Destination;
const Failure = batch.Failure;
const Error = errors.Error;
const RecordLoc = format.RecordLoc;
const outOfMemory = errors.outOfMemory;

/// runner_bytes_min (store.zig) for gathers of raw records, whose copies are cheaper than
/// compression: such a batch runs on the calling thread alone below twice this. Measured on 2 cores with random batches of 256 raw records
/// (out of cache): up to 256 KiB a batch the pool only ties with the inline copy, so waking a
/// thread is not worth it; from 1 MiB on the pool is about twice as fast.
const gather_runner_bytes_min: u64 = 256 * 1024;
/// A gather copies up to this many indices into its thread's scratch (8 KiB), more to the heap.
const gather_indices_scratch_max = 1024;
comptime {
    assert(gather_indices_scratch_max * @sizeOf(i64) <= 8 * 1024);
}
/// Per thread, not on the stack: a large frame costs a gather of small records measurably
/// (stack probes and safety fills in ReleaseSafe). A gather never runs inside another on the
/// same thread.
threadlocal var gather_indices_scratch: [gather_indices_scratch_max]i64 = undefined;

/// A gather's indices, checked against the store's length, on a copy of its own: they are
/// read again while copying, and the caller's may share memory with the destination (an
/// `out` that overlaps the index array) or be changed by another thread meanwhile, while an
/// index read after its check must be the one checked. The copy is the thread's scratch, or
/// the heap past gather_indices_scratch_max indices. Taken under the store's shared lock.
const CheckedIndices = struct {
    indices: []i64,
    on_heap: bool,

    fn take(store: *Store, caller_indices: []const i64) Error!CheckedIndices {
        const on_heap = caller_indices.len > gather_indices_scratch_max;
        const indices: []i64 = if (on_heap) store.allocator.alloc(i64, caller_indices.len) catch return outOfMemory() else gather_indices_scratch[0..caller_indices.len];
        errdefer if (on_heap) store.allocator.free(indices);
        try index_check.copyCheckedIndices(caller_indices, indices, store.meta.length());
        return .{ .indices = indices, .on_heap = on_heap };
    }

    fn release(checked: CheckedIndices, store: *Store) void {
        if (checked.on_heap) store.allocator.free(checked.indices);
    }
};

/// Writes record indices[i] (decompressed) into destination slot i, for every i.
pub fn gather(store: *Store, caller_indices: []const i64, destination: Destination, byte_count: u64) Error!void {
    const io = pool.io();
    try store.relockIfForked();
    store.lock.lockSharedUncancelable(io);
    defer store.lock.unlockShared(io);
    const checked = try CheckedIndices.take(store, caller_indices);
    defer checked.release(store);
    const indices = checked.indices;
    try store.checkSlots(indices, destination);
    try copyChecked(store, indices, destination, byte_count);
}

/// The copy of a gather whose indices and slots are checked, under the shared lock.
fn copyChecked(store: *Store, indices: []const i64, destination: Destination, byte_count: u64) Error!void {
    const bytes_min = if (indices.len > 0) store.gatherBytesMin(@intCast(indices[0])) else store_mod.runner_bytes_min;
    const copies_raw = indices.len > 0 and store.copiesRaw(@intCast(indices[0]));
    var task: GatherTask = .{ .store = store, .indices = indices, .destination = destination };
    raw_copy.runGather(GatherTask, &task, indices.len, pool.plan(indices.len, byte_count, bytes_min), byte_count, copies_raw, &store.gather_advisor, &store.copy_advisors);
    try task.failure.check();
}

/// A packed gather: the records of indices back to back in dst. offsets (indices.len + 1) gets
/// their running byte offsets and, with rows, their running row counts (record_offsets.zig);
/// then, when dst's `capacity` holds them, the records are copied there, all under one hold
/// of the shared lock, so that no delete can change a size in between. A capacity too small is
/// error.SizeMismatch with nothing copied: the caller reads the bytes needed in
/// offsets[indices.len] and calls again with a larger dst.
pub fn gatherPacked(store: *Store, caller_indices: []const i64, dst: [*]u8, capacity: u64, offsets: []u64, row_size: u64, rows: ?[]i32) Error!void {
    assert(offsets.len == caller_indices.len + 1);
    const io = pool.io();
    try store.relockIfForked();
    store.lock.lockSharedUncancelable(io);
    defer store.lock.unlockShared(io);
    const checked = try CheckedIndices.take(store, caller_indices);
    defer checked.release(store);
    const indices = checked.indices;
    for (indices, offsets[1..]) |index, *length| length.* = store.meta.table[@intCast(index)].logic_length;
    try record_offsets.accumulate(offsets, row_size, rows);
    const byte_count = offsets[indices.len];
    if (byte_count > capacity) {
        diagnostic.note("dst holds {d} bytes; the records need {d}", .{ capacity, byte_count });
        return error.SizeMismatch;
    }
    try copyChecked(store, indices, .{ .base = dst, .offsets = offsets.ptr }, byte_count);
}

/// A padded gather: record indices[i]'s first min(n_i, L) rows at the start of block i of
/// request.out (L rows each), the padding row after them, and the mask (batch/padded.zig).
/// Under one hold of the shared lock the records' lengths go to `rows` (in rows), L is picked
/// from them and the buffers' sizes checked (layOut's refusals write only rows and
/// length_out), then every record is copied straight into its block.
pub fn gatherPadded(store: *Store, caller_indices: []const i64, request: padded_mod.Request, rows: []u64, length_out: *u64) Error!void {
    assert(rows.len == caller_indices.len and caller_indices.len > 0);
    const io = pool.io();
    try store.relockIfForked();
    store.lock.lockSharedUncancelable(io);
    defer store.lock.unlockShared(io);
    const checked = try CheckedIndices.take(store, caller_indices);
    defer checked.release(store);
    const indices = checked.indices;
    for (indices, rows) |index, *size| size.* = store.meta.table[@intCast(index)].logic_length;
    const padded = try padded_mod.layOut(rows, request, length_out);
    const byte_count = rows.len * padded.length * padded.row_size;
    try copyChecked(store, indices, .{ .base = request.out.ptr, .padded = &padded }, byte_count);
}

/// Gathers that run beside a GatherTask (gather_streams.zig): the first of its runners to
/// start runs all of them, then goes on with its own blocks.
pub const Sides = struct {
    tasks: []GatherTask,
    claimed: std.atomic.Value(bool) = .init(false),

    pub fn runOnce(sides: *Sides) void {
        if (sides.claimed.swap(true, .acq_rel)) return;
        for (sides.tasks) |*task| {
            assert(task.sides == null);
            var blocks: pool.Blocks = .{ .item_count = task.indices.len, .block_items = @max(1, task.indices.len) };
            task.runShard(&blocks);
        }
    }
};

pub const GatherTask = struct {
    store: *Store,
    indices: []const i64,
    destination: Destination,
    stores: raw_copy.Stores = .cached,
    loads: raw_copy.Loads = .temporal,
    failure: Failure = .{},
    /// Other stores' gathers at the same indices, run by whichever runner starts first.
    sides: ?*Sides = null,

    pub fn runShard(task: *GatherTask, blocks: *pool.Blocks) void {
        if (task.sides) |sides| sides.runOnce();
        const io = pool.io();
        // Taken on the first compressed record, then reused for every block of this runner.
        var dctx: ?*codec.DCtx = null;
        defer if (dctx) |d| task.store.contexts.releaseDecompressor(io, d);
        var scratch: padded_mod.Scratch = .{ .allocator = task.store.allocator };
        defer scratch.deinit();
        while (blocks.next()) |range| {
            if (task.failure.failed()) return;
            if (!task.gatherBlock(&dctx, &scratch, range.begin, range.end)) return;
            if (task.destination.padded) |padded| padded.finish(range.begin, range.end);
        }
    }

    /// Position i's record, for raw_copy.copy.
    pub fn locate(task: *const GatherTask, i: usize) raw_copy.Located {
        return .{ .store = task.store, .index = @intCast(task.indices[i]) };
    }

    /// False after recording a failure.
    fn gatherBlock(task: *GatherTask, dctx: *?*codec.DCtx, scratch: *padded_mod.Scratch, begin: usize, end: usize) bool {
        const store = task.store;
        var i = begin;
        while (i < end) : (i += 1) {
            // Raw records take the pipelined copy (fixed-size or ragged); it stops at the
            // first record that needs more (decompression, a size to check, a chunk not
            // mapped yet, an empty record),
            // which the general code below handles, with its messages. A handle that
            // checks raw records against their sums sends them all the general way.
            if (store.copiesRawUnchecked()) {
                i = if (task.destination.offsets) |offsets|
                    raw_copy.copyRagged(task, task.destination.base, batch.Offsets{ .offsets = offsets }, i, end, task.stores, task.loads)
                else if (task.destination.padded) |padded|
                    raw_copy.copyRagged(task, task.destination.base, padded, i, end, task.stores, task.loads)
                else
                    raw_copy.copy(task, task.destination.base, task.destination.stride, i, end, task.stores, task.loads);
                if (i == end) break;
            }
            const index: u64 = @intCast(task.indices[i]);
            const slot = task.destination.slot(i);
            const gathered = if (task.destination.padded != null)
                store.gatherRecordPrefix(index, slot, &store.contexts, dctx, scratch, &task.failure)
            else
                store.gatherRecord(index, slot, &store.contexts, dctx, &task.failure);
            if (!gathered) return false;
        }
        return true;
    }
};

/// The pool threshold of a gather whose first record is `index`. Decompressing costs far
/// more per byte than copying: a batch that starts with a compressed record (a compressed
/// store, in practice) keeps the smaller threshold. The caller checked the index.
pub fn gatherBytesMin(store: *const Store, index: u64) u64 {
    return if (store.meta.table[index].codec == .raw) gather_runner_bytes_min else store_mod.runner_bytes_min;
}

/// Whether raw records may be copied with no check beyond rawSource's: not when this
/// handle checks raw records against their sums (verify=True), which gatherRecord does.
pub fn copiesRawUnchecked(store: *const Store) bool {
    return !(store.sidecar != null and store.verify == .all);
}

/// Whether a dense gather starting at record `index` is a raw copy (what its stores
/// matter for): the record is raw and this handle copies raw records unchecked. The
/// caller checked the index.
pub fn copiesRaw(store: *const Store, index: u64) bool {
    return store.copiesRawUnchecked() and store.meta.table[index].codec == .raw;
}

/// Where raw record `index` lies when it is exactly `stride` bytes and needs no further
/// check before a plain copy: stored raw at full length, in a chunk that is mapped, and
/// ending within the chunk's known size (open checked every record below the length
/// against its file; records appended since by another process are checked here, and a
/// record past the known size goes to gatherRecord, which re-reads the size and reports
/// corruption). Null sends the record to gatherRecord. The caller holds the shared lock
/// and has checked the index against the length.
pub inline fn rawSource(store: *const Store, index: u64, stride: u64) ?[*]const u8 {
    if (store.runs.source(index, stride, store.chunks)) |src| return src;
    const entry = store.meta.table[index];
    if (entry.codec != .raw or entry.logic_length != stride or entry.phys_length != stride) return null;
    if (entry.chunk_id >= limits.chunk_count_max) return null;
    const end = @as(u64, entry.offset) + stride;
    if (end > limits.chunk_size_max or end > store.chunks.knownSize(entry.chunk_id)) return null;
    const view = store.chunks.mapped(entry.chunk_id) orelse return null;
    return view + entry.offset;
}

/// Copies or decompresses record `index` into `slot`, after checking its table entry and
/// that the slot has its size. The caller holds the shared lock and has checked the index.
/// `dctx` is taken from `contexts` on the first compressed record, then reused by the
/// caller's later records (the caller releases it to `contexts`). False after recording a
/// failure. A view over several stores calls this for each record it routes here.
pub fn gatherRecord(
    store: *Store,
    index: u64,
    slot: []u8,
    contexts: *codec.ContextPool,
    dctx: *?*codec.DCtx,
    failure: *Failure,
) bool {
    const io = pool.io();
    const entry = store.meta.table[index];
    const src = checkedBytes(store, index, entry, failure) orelse return false;
    if (slot.len != entry.logic_length) {
        failure.record(error.SizeMismatch, "record {d} is {d} bytes but its destination slot is {d}", .{ index, entry.logic_length, slot.len });
        return false;
    }
    if (entry.phys_length == 0 and entry.codec == .raw) return true;
    if (entry.codec == .raw) {
        @memcpy(slot, src);
        return true;
    }
    var ddict: ?*const codec.DDict = null;
    if (entry.codec == .zstd_dict) {
        const dict = store.dict orelse {
            failure.record(error.NoDictionary, "record {d} needs the store's dictionary, and dict.zr is absent", .{index});
            return false;
        };
        ddict = dict.ddict;
    }
    if (dctx.* == null) dctx.* = contexts.acquireDecompressor(io) catch {
        failure.record(error.OutOfMemory, "out of memory creating a zstd context", .{});
        return false;
    };
    const summed = store.sidecar != null and store.verify.covers(entry);
    if (codec.decompressChecking(dctx.*.?, ddict, src, slot, !summed)) |detail| {
        failure.record(error.Corrupt, "corrupt store: record {d} does not decompress: {s}", .{ index, detail });
        return false;
    }
    return true;
}

/// gatherRecord into a padded block's slot, which holds only the record's first rows when the
/// record is longer than the block (it was truncated): a raw record's first bytes are copied
/// from its checked stored bytes, a compressed one is decompressed whole into `scratch` and
/// its first bytes copied. A slot longer than the record is gatherRecord's size mismatch.
pub fn gatherRecordPrefix(
    store: *Store,
    index: u64,
    slot: []u8,
    contexts: *codec.ContextPool,
    dctx: *?*codec.DCtx,
    scratch: *padded_mod.Scratch,
    failure: *Failure,
) bool {
    const entry = store.meta.table[index];
    if (slot.len >= entry.logic_length) return store.gatherRecord(index, slot, contexts, dctx, failure);
    if (entry.codec == .raw) {
        const src = checkedBytes(store, index, entry, failure) orelse return false;
        if (src.len < slot.len) {
            failure.record(error.Corrupt, "corrupt store: raw record {d} stores {d} bytes, not its {d}", .{ index, src.len, entry.logic_length });
            return false;
        }
        @memcpy(slot, src[0..slot.len]);
        return true;
    }
    const whole = scratch.take(entry.logic_length) orelse {
        failure.record(error.OutOfMemory, "out of memory decompressing record {d} ({d} bytes) to truncate it", .{ index, entry.logic_length });
        return false;
    };
    if (!store.gatherRecord(index, whole, contexts, dctx, failure)) return false;
    @memcpy(slot, whole[0..slot.len]);
    return true;
}

/// Record `index`'s stored bytes, after checking its entry's shape, that its chunk covers
/// them and, as the verify mode says, its checksum; null after recording a failure.
fn checkedBytes(store: *Store, index: u64, entry: RecordLoc, failure: *Failure) ?[]const u8 {
    const io = pool.io();
    const problem = format.checkEntryShape(entry);
    if (problem != .ok) {
        failure.record(error.Corrupt, "corrupt store: record {d}'s table entry: {s}", .{ index, format.describeEntryProblem(problem) });
        return null;
    }
    var src: []const u8 = &.{};
    if (entry.phys_length > 0) {
        // Mapping a chunk refreshes its size, so the check comes after it.
        const view = store.chunks.view(io, store.dir, entry.chunk_id) catch |err| {
            failure.recordCurrent(err);
            return null;
        };
        store.chunks.checkCovers(io, store.dir, entry.chunk_id, @as(u64, entry.offset) + entry.phys_length) catch |err| {
            failure.recordCurrent(err);
            return null;
        };
        src = view[entry.offset..][0..entry.phys_length];
    }
    if (!checkSum(store, index, entry, src, failure)) return null;
    return src;
}

/// Refuses a gather whose destination slots disagree with the records' logical lengths,
/// before any byte is copied (the copy runs sharded, so a refusal found there would leave
/// other slots already written). One pass over table entries the copy reads anyway.
pub fn checkSlots(store: *Store, indices: []const i64, destination: Destination) Error!void {
    if (slotsMatch(store, indices, destination)) return;
    for (indices, 0..) |index, i| try store.checkSlot(@intCast(index), destination.slotLength(i), i);
}

/// Whether every slot has its record's logical length: the common case, in a loop with no
/// call and no early exit, so the table misses of a whole batch overlap (a call per record,
/// with checkSlot's large frame, let only a few be in flight: 3x slower at 8-byte records).
/// The caller has checked every index against the length.
fn slotsMatch(store: *const Store, indices: []const i64, destination: Destination) bool {
    const table = store.meta.table;
    var mismatch: u64 = 0;
    if (destination.offsets) |o| {
        for (indices, 0..) |index, i| mismatch |= table[@intCast(index)].logic_length ^ (o[i + 1] - o[i]);
    } else {
        // Records in a run of this stride have it: their entries are not even read.
        const stride = destination.stride;
        for (indices) |index| {
            if (store.runs.covers(@intCast(index), stride)) continue;
            mismatch |= table[@intCast(index)].logic_length ^ stride;
        }
    }
    return mismatch == 0;
}

/// Refuses slot `position` of a gather unless it has record `index`'s logical length.
pub fn checkSlot(store: *Store, index: u64, slot_length: u64, position: usize) Error!void {
    const entry = store.meta.table[index];
    const logic_length = entry.logic_length;
    if (slot_length != logic_length) {
        // A damaged entry often shows first as a wrong size: it is reported as the
        // corruption it is (its shape, its chunk, its checksum), not as the caller's mistake.
        var failure: Failure = .{};
        if (checkedBytes(store, index, entry, &failure) == null) return failure.check();
        diagnostic.note("record {d} is {d} bytes but its destination slot is {d} (position {d})", .{ index, logic_length, slot_length, position });
        return error.SizeMismatch;
    }
}

/// False after recording a failure: the record's checksum, when this store keeps them and
/// its verify mode covers the record, differs from its stored bytes'. The caller holds the
/// shared lock and checked the index against the length, which cannot have dropped since.
fn checkSum(store: *Store, index: u64, entry: RecordLoc, stored: []const u8, failure: *Failure) bool {
    if (store.sidecar == null or !store.verify.covers(entry)) return true;
    const matches = integrity.checkRecord(store, @intCast(index), store.meta.length(), entry, stored) catch |err| {
        failure.recordCurrent(err);
        return false;
    };
    if (matches) return true;
    failure.record(error.Corrupt, "corrupt store: record {d}'s stored bytes do not match its checksum", .{index});
    return false;
}

/// The logical length of each record.
pub fn recordLengths(store: *Store, indices: []const i64, out: []u64) Error!void {
    const io = pool.io();
    try store.relockIfForked();
    store.lock.lockSharedUncancelable(io);
    defer store.lock.unlockShared(io);
    // Checked on a copy, read once, before anything is written: the caller's array may
    // change meanwhile.
    const checked = store.allocator.alloc(i64, indices.len) catch return outOfMemory();
    defer store.allocator.free(checked);
    try index_check.copyCheckedIndices(indices, checked, store.meta.length());
    for (checked, out) |index, *len| len.* = store.meta.table[@intCast(index)].logic_length;
}
