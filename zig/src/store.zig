//! Store: open/close, append, gather, record lengths, delete, compaction, stats, sync and the
//! dictionary. The only file that combines the others (format, meta, chunks, codec, pool, lock),
//! and the registry of open stores that a forked child resets.
const std = @import("std");
const Io = std.Io;
const Allocator = std.mem.Allocator;
const assert = std.debug.assert;
const limits = @import("limits.zig");
const format = @import("format.zig");
const meta_file = @import("meta.zig");
const chunk = @import("chunk.zig");
const codec = @import("codec.zig");
const pool = @import("pool.zig");
const errors = @import("errors.zig");
const no_follow = @import("no_follow.zig");
const diagnostic = @import("diagnostic.zig");
const status = @import("status.zig");
const Error = errors.Error;
const Codec = format.Codec;
const Position = format.Position;
const RecordLoc = format.RecordLoc;
const fail = meta_file.fail;
const compaction = @import("compaction.zig");
const dictionary = @import("dictionary.zig");
const journal = @import("journal.zig");
const checksum = @import("checksum.zig");
const integrity = @import("integrity.zig");
const outOfMemory = errors.outOfMemory;
const lock_file = @import("lock.zig");
const runs_mod = @import("runs.zig");
const raw_copy = @import("raw_copy.zig");
const write_pieces = @import("write_pieces.zig");

pub const dict_file_name = dictionary.file_name;

/// Bytes below which a batch gets no further thread: handing work to the pool costs more than
/// copying or compressing a few small records.
pub const runner_bytes_min: u64 = 64 * 1024;

/// The same for gathers of raw records, whose copies are cheaper than compression: such a batch
/// runs on the calling thread alone below twice this. Measured on 2 cores with random batches of 256 raw records
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

pub const Options = struct {
    /// Create meta.zr when it is absent.
    create: bool = false,
    /// fsync data before the table, the table before the length.
    durable: bool = false,
    /// Map meta.zr read-only, take no writer lock, create nothing and refuse every write.
    read_only: bool = false,
    /// Which records a gather checks against their checksum.
    verify: integrity.VerifyMode = .compressed,
};

/// A batch of input records: record i is data[offsets[i] .. offsets[i+1]) or, without offsets,
/// data[i*stride .. (i+1)*stride).
pub const Records = struct {
    data: [*]const u8,
    offsets: ?[*]const u64 = null,
    stride: u64 = 0,
    count: u64,

    pub fn fromSlices(data: []const u8, offsets: []const u64) Records {
        assert(offsets.len >= 1);
        return .{ .data = data.ptr, .offsets = offsets.ptr, .count = offsets.len - 1 };
    }

    pub fn begin(records: Records, i: u64) u64 {
        return if (records.offsets) |o| o[i] - o[0] else i * records.stride;
    }

    pub fn get(records: Records, i: u64) []const u8 {
        if (records.offsets) |o| return records.data[o[i]..o[i + 1]];
        return records.data[i * records.stride ..][0..records.stride];
    }

    pub fn totalSize(records: Records) u64 {
        if (records.offsets) |o| return o[records.count] - o[0];
        return records.count * records.stride;
    }

    /// Offsets must not decrease and no record may exceed record_size_max.
    pub fn validate(records: Records) Error!void {
        if (records.offsets) |o| {
            for (0..records.count) |i| {
                if (o[i + 1] < o[i]) {
                    diagnostic.note("offsets decrease at record {d} ({d} then {d})", .{ i, o[i], o[i + 1] });
                    return error.InvalidArgument;
                }
                if (o[i + 1] - o[i] > limits.record_size_max) {
                    diagnostic.note("record {d} is {d} bytes; the limit is {d}", .{ i, o[i + 1] - o[i], limits.record_size_max });
                    return error.RecordTooLarge;
                }
            }
        } else if (records.stride > limits.record_size_max and records.count > 0) {
            diagnostic.note("records of {d} bytes; the limit is {d}", .{ records.stride, limits.record_size_max });
            return error.RecordTooLarge;
        }
    }
};

/// A gather destination: slot i is base[offsets[i] .. offsets[i+1]) or, without offsets,
/// base[i*stride .. (i+1)*stride).
pub const Destination = struct {
    base: [*]u8,
    offsets: ?[*]const u64 = null,
    stride: u64 = 0,

    pub fn slot(destination: Destination, i: u64) []u8 {
        if (destination.offsets) |o| return destination.base[o[i]..o[i + 1]];
        return destination.base[i * destination.stride ..][0..destination.stride];
    }

    pub fn slotLength(destination: Destination, i: u64) u64 {
        if (destination.offsets) |o| return o[i + 1] - o[i];
        return destination.stride;
    }
};

/// The first failure of a sharded operation, with its message carried back to the calling
/// thread (messages are thread-local; shards run on pool threads).
pub const Failure = struct {
    claimed: std.atomic.Value(bool) = .init(false),
    err: Error = error.Io,
    message: [256]u8 = undefined,
    message_len: usize = 0,
    /// The thread whose record() won, so that only it names the batch position that failed.
    /// Atomic: a losing thread reads it while the winner may still be writing it (it then
    /// reads 0, which no thread's id is, or the winner's id: either way not its own).
    claimer: std.atomic.Value(std.Thread.Id) = .init(0),
    /// The batch position of the failed record, when the caller placed it (a view does: its
    /// stores' messages name a shard's local index, which the view turns into the global one).
    position: ?usize = null,

    pub fn failed(failure: *const Failure) bool {
        return failure.claimed.load(.monotonic);
    }

    pub fn record(failure: *Failure, err: Error, comptime fmt: []const u8, args: anytype) void {
        if (failure.claimed.swap(true, .acq_rel)) return;
        failure.err = err;
        failure.claimer.store(std.Thread.getCurrentId(), .monotonic);
        const written = std.fmt.bufPrint(&failure.message, fmt, args) catch failure.message[0..];
        failure.message_len = written.len;
    }

    /// Called by the thread whose record at batch position `i` just failed: names `i` when that
    /// failure is the one recorded (another thread's may have come first).
    pub fn place(failure: *Failure, i: usize) void {
        if (failure.claimer.load(.monotonic) == std.Thread.getCurrentId() and failure.position == null) failure.position = i;
    }

    /// Records an error whose message this thread has just set.
    pub fn recordCurrent(failure: *Failure, err: Error) void {
        failure.record(err, "{s}", .{diagnostic.text()});
    }

    pub fn check(failure: *const Failure) Error!void {
        if (!failure.claimed.load(.acquire)) return;
        diagnostic.note("{s}", .{failure.message[0..failure.message_len]});
        return failure.err;
    }
};

pub const Stats = struct {
    records: u64,
    live_bytes: u64,
    chunk_bytes: u64,
    reclaimable: u64,
};

/// A caller's check run by delete, compact and train_dict with the store held exclusively:
/// nonzero refuses the operation (LX_STORE_LOCKED, nothing changed). `operation` is the
/// operation's name, `operation_size` bytes, not terminated.
pub const MaintenanceCheck = struct {
    function: *const fn (context: ?*anyopaque, operation: [*]const u8, operation_size: u64) callconv(.c) c_int,
    context: ?*anyopaque,
};

pub const Store = struct {
    /// canary_open from open to close: the C boundary refuses a handle without it (exports.zig).
    canary: u64 = canary_open,
    allocator: Allocator,
    dir: Io.Dir,
    meta: meta_file.Meta,
    chunks: *chunk.Chunks,
    durable: bool,
    read_only: bool,
    /// Cross-process locks (lock.zig): open.lock shared while open, writer.lock once writing.
    locks: lock_file.Locks,
    /// Shared: gather, record_lengths, stats, append, sync. Exclusive: delete, compact,
    /// train_dict. Misuse from several threads waits instead of corrupting.
    lock: Io.RwLock = .init,
    /// Appends serialise among themselves (never blocking gathers).
    append_mutex: Io.Mutex = .init,
    contexts: codec.ContextPool = .{},
    /// Replaced only under the exclusive lock.
    dict: ?*codec.Dictionary = null,
    /// Links of the registry of open stores (guarded by registry_mutex).
    registry_previous: ?*Store = null,
    registry_next: ?*Store = null,
    /// The per-record checksums (sums.zr); null for a store from before checksums.
    sidecar: ?checksum.Sidecar = null,
    verify: integrity.VerifyMode = .compressed,
    /// Blocks of the table whose raw records lie back to back (runs.zig): their records are
    /// found without reading their entries. Its blocks are allocated as they get runs.
    runs: *runs_mod.Runs,
    /// Whether this store's gathers currently run faster with the pool's helpers (pool_advice).
    gather_advisor: pool.Advisor = .{},
    /// Whether its large raw gathers currently run faster with streaming stores (raw_copy).
    copy_advisors: raw_copy.CopyAdvisors = .{},
    /// The caller's check that delete, compact and train_dict run once they hold the store
    /// exclusively (lx_store_set_maintenance_check); set and read under the exclusive lock.
    maintenance_check: ?MaintenanceCheck = null,

    /// Opens the store in the folder `path` (which must exist).
    pub fn open(allocator: Allocator, path: []const u8, options: Options) Error!*Store {
        const io = pool.io();
        const dir = Io.Dir.cwd().openDir(io, path, .{}) catch |err| switch (err) {
            error.FileNotFound => {
                diagnostic.note("no such folder: {s}", .{path});
                return error.NotFound;
            },
            else => return fail(err, "open folder {s}", .{path}),
        };
        errdefer dir.close(io);
        const create = options.create and !options.read_only;
        // The shared lock comes first: the files are read only once no maintenance runs.
        var locks = try lock_file.Locks.acquire(io, dir, options.read_only);
        errdefer locks.release(io);
        var meta = meta_file.Meta.open(io, dir, !options.read_only) catch |err| switch (err) {
            error.NotFound => if (create) blk: {
                // Creating is writing: two processes creating one store at once must not race.
                try locks.holdWriter(io, dir);
                try meta_file.Meta.create(io, dir);
                break :blk try meta_file.Meta.open(io, dir, true);
            } else return err,
            else => return err,
        };
        errdefer meta.close(io);
        // A delete a crash interrupted is finished before anything looks at the table. That
        // writes, so it takes the writer lock, and a read-only handle cannot do it.
        if (journal.exists(io, dir)) {
            if (options.read_only) {
                diagnostic.note("a delete interrupted by a crash left {s}; open the store writable once to finish it", .{journal.file_name});
                return error.ReadOnly;
            }
            try locks.holdWriter(io, dir);
            _ = try journal.replay(allocator, io, dir, &meta);
        }
        const chunks = allocator.create(chunk.Chunks) catch return outOfMemory();
        errdefer allocator.destroy(chunks);
        chunks.* = .{ .allocator = allocator };
        // Also drops what a failure below leaves mapped or open (a repaired delete maps chunks).
        errdefer chunks.deinit(io);
        const runs = allocator.create(runs_mod.Runs) catch return outOfMemory();
        errdefer allocator.destroy(runs);
        runs.* = .{ .allocator = allocator };
        errdefer runs.deinit();
        try checkSnapshot(io, dir, &meta, chunks, runs);
        if (create and meta.length() == 0 and meta.header.tail_offset == 0 and meta.header.tail_chunk == 0) {
            // A fresh store gets its first chunk right away (empty: it grows as appends need).
            const f = no_follow.openOrCreate(io, dir, chunk.name(0).slice()) catch |err| switch (err) {
                error.SymLinkLoop => return no_follow.refuse(io, dir, chunk.name(0).slice(), "chunk file"),
                else => return fail(err, "create chunk 0.zr", .{}),
            };
            f.close(io);
        }

        const store = allocator.create(Store) catch return outOfMemory();
        errdefer allocator.destroy(store);
        store.* = .{
            .allocator = allocator,
            .dir = dir,
            .meta = meta,
            .chunks = chunks,
            .durable = options.durable,
            .read_only = options.read_only,
            .locks = locks,
            .verify = options.verify,
            .runs = runs,
        };
        store.sidecar = try integrity.openSidecar(io, dir, &store.meta, !options.read_only);
        errdefer if (store.sidecar) |*sidecar| sidecar.close(io);
        // The sums of a delete a crash interrupted (its table moves were just redone from
        // redo.zr) are settled under the writer lock too, before any append can reuse the
        // indices past the new length that hold the moved records' sums.
        errdefer locks = store.locks; // the writer lock below is released with the others
        if (!options.read_only) if (store.sidecar) |sidecar| if (sidecar.pending_from != 0) {
            try store.locks.holdWriter(io, dir);
            try integrity.repairPendingDelete(store);
        };
        const trailer_required = if (store.sidecar) |sidecar| sidecar.flags & checksum.flag_dict_trailer != 0 else false;
        store.dict = try dictionary.load(allocator, io, dir, trailer_required);
        register(store);
        return store;
    }

    /// "lxstore" and a version byte; a view's differs, so neither passes for the other.
    pub const canary_open: u64 = 0x6C78_7374_6F72_6501;
    pub const canary_closed: u64 = 0;

    /// Releases everything. The caller guarantees no other thread uses the store.
    pub fn close(store: *Store) void {
        const io = pool.io();
        // First: the handle is dead from here on (a second close does nothing).
        @atomicStore(u64, &store.canary, canary_closed, .monotonic);
        // Out of the registry first: a fork from now on must not see a half-closed store.
        unregister(store);
        store.locks.release(io);
        if (store.dict) |d| {
            d.deinit(store.allocator);
            store.allocator.destroy(d);
        }
        store.contexts.deinit();
        if (store.sidecar) |*sidecar| sidecar.close(io);
        store.chunks.deinit(io);
        store.allocator.destroy(store.chunks);
        store.runs.deinit();
        store.allocator.destroy(store.runs);
        store.meta.close(io);
        store.dir.close(io);
        store.allocator.destroy(store);
    }

    pub fn length(store: *const Store) u64 {
        return store.meta.length();
    }

    pub fn hasDict(store: *const Store) bool {
        return @atomicLoad(?*codec.Dictionary, &store.dict, .acquire) != null;
    }

    // ---- append -------------------------------------------------------------------------

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
            pool.run(CompressTask, &task, records.count, pool.plan(records.count, records.totalSize(), runner_bytes_min));
            try task.failure.check();
        }

        const frontier = try store.assignLocations(slots);
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
        pool.run(WriteTask, &write_task, write_task.pieces.len, pool.plan(write_task.pieces.len, stored_bytes, runner_bytes_min));
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
    /// byte is written. Returns the new frontier.
    fn assignLocations(store: *Store, slots: []Slot) Error!Position {
        const io = pool.io();
        var tail = store.meta.header.tail();
        // The chunk being filled and how far this batch fills it.
        var filling: ?Position = null;
        for (slots) |*slot| {
            const placement = format.place(tail, slot.phys_length) orelse {
                diagnostic.note("all {d} chunks are used; compact the store to reclaim deleted records' bytes", .{limits.chunk_count_max});
                return error.StoreFull;
            };
            slot.start = placement.start;
            tail = placement.end;
            if (slot.phys_length == 0) continue;
            const end: Position = .{ .chunk = placement.start.chunk, .offset = placement.start.offset + slot.phys_length };
            if (filling) |f| if (f.chunk != end.chunk) try store.chunks.reserve(io, store.dir, f.chunk, f.offset);
            filling = end;
        }
        if (filling) |f| try store.chunks.reserve(io, store.dir, f.chunk, f.offset);
        return tail;
    }

    fn syncChunks(store: *Store, first_chunk: u32, last_chunk: u32) Error!void {
        const io = pool.io();
        for (first_chunk..@min(last_chunk, limits.chunk_count_max - 1) + 1) |id| {
            const f = store.chunks.openedFile(@intCast(id)) orelse continue;
            f.sync(io) catch |err| return fail(err, "sync chunk {d}.zr", .{id});
        }
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

    // ---- gather -------------------------------------------------------------------------

    /// Writes record indices[i] (decompressed) into destination slot i, for every i.
    pub fn gather(store: *Store, caller_indices: []const i64, destination: Destination, byte_count: u64) Error!void {
        const io = pool.io();
        try store.relockIfForked();
        store.lock.lockSharedUncancelable(io);
        defer store.lock.unlockShared(io);
        // The indices are checked once and read again while copying, so the gather works on
        // its own copy of them, made by the check: the caller's may share memory with the
        // destination (an `out` that overlaps the index array) or be changed by another thread
        // meanwhile, and an index read after its check must be the one checked.
        const on_heap: ?[]i64 = if (caller_indices.len <= gather_indices_scratch_max) null else store.allocator.alloc(i64, caller_indices.len) catch return outOfMemory();
        defer if (on_heap) |copy| store.allocator.free(copy);
        const indices: []i64 = on_heap orelse gather_indices_scratch[0..caller_indices.len];
        try copyCheckedIndices(caller_indices, indices, store.meta.length());
        try store.checkSlots(indices, destination);
        const bytes_min = if (indices.len > 0) store.gatherBytesMin(@intCast(indices[0])) else runner_bytes_min;
        const copies_raw = destination.offsets == null and indices.len > 0 and store.copiesRaw(@intCast(indices[0]));
        var task: GatherTask = .{ .store = store, .indices = indices, .destination = destination };
        raw_copy.runGather(GatherTask, &task, indices.len, pool.plan(indices.len, byte_count, bytes_min), byte_count, copies_raw, &store.gather_advisor, &store.copy_advisors);
        try task.failure.check();
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
            while (blocks.next()) |range| {
                if (task.failure.failed()) return;
                if (!task.gatherBlock(&dctx, range.begin, range.end)) return;
            }
        }

        /// Position i's record, for raw_copy.copy.
        pub fn locate(task: *const GatherTask, i: usize) raw_copy.Located {
            return .{ .store = task.store, .index = @intCast(task.indices[i]) };
        }

        /// False after recording a failure.
        fn gatherBlock(task: *GatherTask, dctx: *?*codec.DCtx, begin: usize, end: usize) bool {
            const store = task.store;
            var i = begin;
            while (i < end) : (i += 1) {
                // Raw fixed-size records take the pipelined copy; it stops at the first record
                // that needs more (decompression, a size to check, a chunk not mapped yet),
                // which the general code below handles, with its messages. A handle that
                // checks raw records against their sums sends them all the general way.
                if (task.destination.offsets == null and store.copiesRawUnchecked()) {
                    i = raw_copy.copy(task, task.destination.base, task.destination.stride, i, end, task.stores, task.loads);
                    if (i == end) break;
                }
                const index: u64 = @intCast(task.indices[i]);
                if (!store.gatherRecord(index, task.destination.slot(i), &store.contexts, dctx, &task.failure)) return false;
            }
            return true;
        }
    };

    /// The pool threshold of a gather whose first record is `index`. Decompressing costs far
    /// more per byte than copying: a batch that starts with a compressed record (a compressed
    /// store, in practice) keeps the smaller threshold. The caller checked the index.
    pub fn gatherBytesMin(store: *const Store, index: u64) u64 {
        return if (store.meta.table[index].codec == .raw) gather_runner_bytes_min else runner_bytes_min;
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
        const src = store.checkedBytes(index, entry, failure) orelse return false;
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
        if (codec.decompress(dctx.*.?, ddict, src, slot)) |detail| {
            failure.record(error.Corrupt, "corrupt store: record {d} does not decompress: {s}", .{ index, detail });
            return false;
        }
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
        if (!store.checkSum(index, entry, src, failure)) return null;
        return src;
    }

    /// Refuses a gather whose destination slots disagree with the records' logical lengths,
    /// before any byte is copied (the copy runs sharded, so a refusal found there would leave
    /// other slots already written). One pass over table entries the copy reads anyway.
    pub fn checkSlots(store: *Store, indices: []const i64, destination: Destination) Error!void {
        if (store.slotsMatch(indices, destination)) return;
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
            if (store.checkedBytes(index, entry, &failure) == null) return failure.check();
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
        try copyCheckedIndices(indices, checked, store.meta.length());
        for (checked, out) |index, *len| len.* = store.meta.table[@intCast(index)].logic_length;
    }

    // ---- delete, stats, sync --------------------------------------------------------------

    /// Swap-last delete: targets in descending order, duplicates once each. Atomic under a
    /// crash: the final entries go to a redo log first (journal.zig).
    pub fn delete(store: *Store, indices: []const i64) Error!void {
        try store.refuseIfReadOnly();
        try checkIndices(indices, store.meta.length());
        if (indices.len == 0) return;
        try store.beginMaintenance("delete");
        defer store.endMaintenance();
        try checkIndices(indices, store.meta.length());
        try store.deleteHeld(indices);
    }

    /// Deletes `indices[k]` from `stores[k]` for every k, as a whole or not at all. Refused with
    /// nothing changed when any store is read-only, open elsewhere (StoreLocked) or given an
    /// index out of its range: every store is taken exclusively and every index checked before
    /// the first record moves. Stores are taken in the given order, the order in which a view's
    /// gathers lock them, so the two never wait on each other in a cycle. Then two phases:
    /// every store's redo log is written (the only step that needs new disk space) before any
    /// table changes, so a full disk there removes the logs written and changes nothing; then
    /// every table changes in memory (which cannot fail) before any is synced and its log
    /// removed, so a failure in that last part leaves every store deleted, each finished for
    /// good by its next writable open. The stores must be distinct (the C ABI checks).
    pub fn deleteEach(stores: []const *Store, indices: []const []const i64) Error!void {
        assert(stores.len == indices.len);
        assert(stores.len > 0);
        for (stores, indices) |store, wanted| {
            try store.refuseIfReadOnly();
            try checkIndices(wanted, store.meta.length());
        }
        var taken: usize = 0;
        defer for (stores[0..taken]) |store| store.endMaintenance();
        for (stores) |store| {
            try store.beginMaintenance("delete");
            taken += 1;
        }
        // Lengths may have changed while the locks were taken (another handle's delete).
        for (stores, indices) |store, wanted| try checkIndices(wanted, store.meta.length());
        const allocator = stores[0].allocator;
        const prepared = allocator.alloc(PreparedDelete, stores.len) catch return outOfMemory();
        defer allocator.free(prepared);
        var logged: usize = 0;
        defer for (prepared[0..logged]) |*delete_plan| delete_plan.deinit(allocator);
        {
            errdefer for (stores[0..logged], prepared[0..logged]) |store, *delete_plan| {
                store.abandonDelete(delete_plan);
            };
            for (stores, indices, prepared) |store, wanted, *delete_plan| {
                delete_plan.* = try store.prepareDelete(allocator, wanted);
                logged += 1;
            }
        }
        for (stores, prepared) |store, *delete_plan| {
            if (!delete_plan.empty()) journal.apply(&store.meta, delete_plan.plan());
        }
        for (stores, prepared) |store, *delete_plan| try store.finishDelete(delete_plan);
    }

    /// delete's work, the store held exclusively and every index checked against its length.
    fn deleteHeld(store: *Store, indices: []const i64) Error!void {
        var delete_plan = try store.prepareDelete(store.allocator, indices);
        defer delete_plan.deinit(store.allocator);
        if (delete_plan.empty()) return;
        journal.apply(&store.meta, delete_plan.plan());
        try store.finishDelete(&delete_plan);
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
            if (@as(u64, @bitCast(index)) >= old_length) return indexOutOfRange(index, i, old_length);
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
            try store.moveSums(sidecar, delete_plan.unique(), delete_plan.old_length, delete_plan.new_length);
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

    pub fn stats(store: *Store) Error!Stats {
        const io = pool.io();
        try store.relockIfForked();
        store.lock.lockSharedUncancelable(io);
        defer store.lock.unlockShared(io);
        store.append_mutex.lockUncancelable(io);
        const records = store.meta.length();
        const tail = store.meta.header.tail();
        store.append_mutex.unlock(io);
        var live_bytes: u64 = 0;
        for (store.meta.table[0..records]) |entry| live_bytes += entry.phys_length;
        const chunk_bytes = tail.bytes();
        return .{
            .records = records,
            .live_bytes = live_bytes,
            .chunk_bytes = chunk_bytes,
            .reclaimable = chunk_bytes -| live_bytes,
        };
    }

    /// fsyncs every chunk up to the frontier and msyncs meta.zr.
    pub fn sync(store: *Store) Error!void {
        const io = pool.io();
        try store.refuseIfReadOnly();
        try store.relockIfForked();
        store.lock.lockSharedUncancelable(io);
        defer store.lock.unlockShared(io);
        store.append_mutex.lockUncancelable(io);
        defer store.append_mutex.unlock(io);
        const tail = store.meta.header.tail();
        const last = if (tail.offset > 0) tail.chunk else tail.chunk -| 1;
        if (tail.offset > 0 or tail.chunk > 0) {
            for (0..last + 1) |id| _ = try store.chunks.file(io, store.dir, @intCast(id), false);
            try store.syncChunks(0, last);
        }
        try store.meta.flushAll(io);
    }

    // ---- locking ----------------------------------------------------------------------------

    fn refuseIfReadOnly(store: *const Store) Error!void {
        if (!store.read_only) return;
        diagnostic.note("the store was opened read-only (readonly=True); open it writable to change it", .{});
        return error.ReadOnly;
    }

    /// In a forked child, the first call locks open.lock through a fresh description and drops
    /// what the parent may have changed since (see lock.zig).
    pub fn relockIfForked(store: *Store) Error!void {
        if (!store.locks.relock_needed.load(.acquire)) return;
        const io = pool.io();
        store.lock.lockUncancelable(io);
        defer store.lock.unlock(io);
        try store.relockHeld();
    }

    /// relockIfForked for a caller that already holds the store exclusively.
    fn relockHeld(store: *Store) Error!void {
        if (!store.locks.relock_needed.load(.acquire)) return;
        try store.locks.relock(pool.io(), store.dir);
        try store.refresh();
    }

    /// Forgets the chunk mappings, chunk handles, sums and dictionary, which another handle's
    /// maintenance may have replaced while this one held no lock. Exclusive lock held.
    fn refresh(store: *Store) Error!void {
        const io = pool.io();
        // Another handle's maintenance may have moved records: the runs are learned again from
        // the table as it is now (a forked child comes through here once, on its first call).
        store.relearnRuns();
        store.chunks.closeAll(io);
        if (store.sidecar) |*sidecar| sidecar.close(io);
        store.sidecar = null;
        store.sidecar = try integrity.openSidecar(io, store.dir, &store.meta, !store.read_only);
        const trailer_required = if (store.sidecar) |sidecar| sidecar.flags & checksum.flag_dict_trailer != 0 else false;
        const fresh = try dictionary.load(store.allocator, io, store.dir, trailer_required);
        if (store.dict) |old| {
            old.deinit(store.allocator);
            store.allocator.destroy(old);
        }
        @atomicStore(?*codec.Dictionary, &store.dict, fresh, .release);
    }

    /// delete, compact and train_dict: the store exclusively in this process (running calls
    /// finish, new ones wait), then across handles and processes (refused while any other
    /// handle has the store open), then the caller's maintenance check, if any. Pair with
    /// endMaintenance.
    pub fn beginMaintenance(store: *Store, operation: []const u8) Error!void {
        const io = pool.io();
        try store.refuseIfReadOnly();
        store.lock.lockUncancelable(io);
        errdefer store.lock.unlock(io);
        try store.relockHeld();
        // No writer lock is needed: exclusivity means no other handle, so no other writer.
        var refreshed = false;
        store.locks.takeExclusive(io, store.dir, operation, &refreshed) catch |err| {
            if (refreshed) store.refresh() catch {};
            return err;
        };
        // Checked only now: no other handle has the store open, so nothing that must hold it
        // open (a rollover sealing it into a sharded dataset) can be half done, or start.
        if (store.maintenance_check) |check| {
            if (check.function(check.context, operation.ptr, operation.len) != 0) {
                store.locks.releaseExclusive(io);
                diagnostic.note("{s} refused by the caller's maintenance check (lx_store_set_maintenance_check)", .{operation});
                return error.StoreLocked;
            }
        }
    }

    /// Sets (or, with a null function, removes) the maintenance check, waiting for running
    /// calls as maintenance does.
    pub fn setMaintenanceCheck(store: *Store, check: ?MaintenanceCheck) void {
        const io = pool.io();
        store.lock.lockUncancelable(io);
        defer store.lock.unlock(io);
        store.maintenance_check = check;
    }

    /// Forgets every run and learns them from the current table (one pass over it). The
    /// store is held exclusively. A run's bytes are still checked against the chunk's size
    /// at each read (Runs.source), so chunks remapped later are covered.
    fn relearnRuns(store: *Store) void {
        store.runs.clear();
        store.runs.learn(store.meta.table, store.meta.length());
    }

    pub fn endMaintenance(store: *Store) void {
        const io = pool.io();
        // The table may have changed (delete, compact): its runs are learned again before any
        // gather can run. Whatever the operation left, the scan reads it as it is.
        store.relearnRuns();
        store.locks.releaseExclusive(io);
        store.lock.unlock(io);
    }

    // ---- compaction and dictionary (their own files) --------------------------------------

    /// Offline in-place compaction (takes the store exclusively); see compaction.zig.
    pub fn compact(store: *Store) Error!void {
        return compaction.compact(store);
    }

    pub const Compaction = compaction.Compaction;

    /// Checks every record (in parallel); see integrity.zig.
    pub fn verifyAll(store: *Store, problems: []integrity.Problem) Error!integrity.Summary {
        return integrity.verifyAll(store, problems);
    }

    /// Trains a dictionary from samples, writes dict.zr atomically and loads it.
    pub fn trainDict(store: *Store, samples: Records, dict_size: u64) Error!void {
        return dictionary.train(store, samples, dict_size);
    }
};

// ---- the registry of open stores (for fork) -------------------------------------------------

var registry_head: ?*Store = null;
var registry_mutex: Io.Mutex = .init;

/// Links are set so that walking forward from the head is consistent after every single store,
/// because a fork may copy the registry in the middle of an update.
fn register(store: *Store) void {
    const io = pool.io();
    registry_mutex.lockUncancelable(io);
    defer registry_mutex.unlock(io);
    store.registry_previous = null;
    store.registry_next = registry_head;
    if (registry_head) |head| head.registry_previous = store;
    registry_head = store;
}

fn unregister(store: *Store) void {
    const io = pool.io();
    registry_mutex.lockUncancelable(io);
    defer registry_mutex.unlock(io);
    if (store.registry_previous) |previous| previous.registry_next = store.registry_next else registry_head = store.registry_next;
    if (store.registry_next) |next| next.registry_previous = store.registry_previous;
    store.registry_previous = null;
    store.registry_next = null;
}

/// In a forked child (single-threaded until it returns): the parent's threads may have held
/// any store's in-process locks at the moment of fork, and they do not exist here, so every
/// lock and counter starts afresh; the cross-process locks are re-taken on first use. Data
/// written half-way by a parent thread is the parent's business: the child only ever reads
/// what the published length covers, and writes only as the store's writer.
pub fn afterForkChild() void {
    registry_mutex = .init;
    var next = registry_head;
    while (next) |store| : (next = store.registry_next) {
        store.lock = .init;
        store.append_mutex = .init;
        store.contexts.mutex = .init;
        store.chunks.map_mutex = .init;
        store.locks.forgetAfterFork();
        if (store.sidecar) |*sidecar| sidecar.load_mutex = .init;
    }
}

/// Attempts at reading a consistent header on open before calling a store corrupt.
const snapshot_attempt_max = 1000;

/// Checks the table against the header and the chunk files, on a consistent snapshot: another
/// process may be appending. The length is read first (acquire), then the frontier, then the
/// files' sizes, and only the entries below that length are checked; a writer publishes the
/// length last, so everything they point to is inside the frontier and the files. The frontier
/// is two separate fields, and a read racing a rollover to a new chunk can mix them: an entry
/// beyond it is corruption only if the header reads the same again.
fn checkSnapshot(io: Io, dir: Io.Dir, meta: *const meta_file.Meta, chunks: *chunk.Chunks, runs: *runs_mod.Runs) Error!void {
    var attempt: u32 = 0;
    while (true) : (attempt += 1) {
        const length = meta.length();
        const tail = meta.tail();
        try meta.checkCovers(io, length);
        try checkChunks(io, dir, tail, chunks);
        runs.clear();
        const bad = checkTable(meta, length, tail, chunks, runs) orelse return;
        if (bad.problem == .beyond_tail and attempt < snapshot_attempt_max) {
            if (meta.length() != length or meta.tail().order(tail) != .eq) continue;
        }
        const entry = bad.entry;
        if (bad.problem == .beyond_file) {
            diagnostic.note("corrupt store: record {d} ends at byte {d} of chunk file {s}, which is only {d} bytes (a truncated file)", .{
                bad.index, @as(u64, entry.offset) + entry.phys_length, chunk.name(entry.chunk_id).slice(), chunks.knownSize(entry.chunk_id),
            });
            return error.Corrupt;
        }
        diagnostic.note("corrupt store: record {d}'s table entry {s} (chunk {d}, offset {d}, {d} bytes)", .{
            bad.index, describeProblem(bad.problem), entry.chunk_id, entry.offset, entry.phys_length,
        });
        return error.Corrupt;
    }
}

const TableProblem = struct { index: u64, entry: RecordLoc, problem: Problem };
const Problem = union(enum) { entry: format.EntryProblem, beyond_file, beyond_tail };

/// The first entry below `length` that is not inside the frontier and its chunk file, if any.
/// Then, the table being sound, learns its runs.
fn checkTable(meta: *const meta_file.Meta, length: u32, tail: Position, chunks: *chunk.Chunks, runs: *runs_mod.Runs) ?TableProblem {
    for (meta.table[0..length], 0..) |entry, index| {
        const problem = format.checkEntry(entry, tail);
        if (problem == .beyond_tail) return .{ .index = index, .entry = entry, .problem = .beyond_tail };
        if (problem != .ok) return .{ .index = index, .entry = entry, .problem = .{ .entry = problem } };
        if (entry.phys_length > 0 and @as(u64, entry.offset) + entry.phys_length > chunks.knownSize(entry.chunk_id))
            return .{ .index = index, .entry = entry, .problem = .beyond_file };
    }
    runs.learn(meta.table, length);
    return null;
}

fn describeProblem(problem: Problem) []const u8 {
    return switch (problem) {
        .entry => |p| format.describeEntryProblem(p),
        .beyond_tail => format.describeEntryProblem(.beyond_tail),
        .beyond_file => "points past the end of its chunk file",
    };
}

/// Every chunk up to the frontier must exist; their sizes are noted for the table check.
fn checkChunks(io: Io, dir: Io.Dir, tail: Position, chunks: *chunk.Chunks) Error!void {
    const last = if (tail.offset > 0) tail.chunk + 1 else tail.chunk;
    var id: u32 = 0;
    while (id < @min(last, limits.chunk_count_max)) : (id += 1) {
        try chunks.notePresent(id, try chunk.presentSize(io, dir, id));
    }
}

fn checkCodec(tag: u8) Error!Codec {
    const c: Codec = @enumFromInt(tag);
    if (!c.isKnown()) {
        diagnostic.note("unknown codec {d} (0 raw, 1 zstd, 2 zstd_dict)", .{tag});
        return error.InvalidArgument;
    }
    return c;
}

/// A delete planned and in its redo log, its table not changed yet (Store.prepareDelete).
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

/// Copies `indices` into `copy`, reading each once, and checks the copies against `length`
/// (as checkIndices, whose message names the first bad one). One pass with no early exit, so
/// that it vectorises: as fast as the check alone.
pub fn copyCheckedIndices(indices: []const i64, copy: []i64, length: u64) Error!void {
    assert(copy.len == indices.len);
    assert(length <= std.math.maxInt(i64));
    var out_of_range = false;
    for (indices, copy) |index, *slot| {
        slot.* = index;
        // A negative index reads as a u64 far above any length.
        out_of_range = out_of_range or @as(u64, @bitCast(index)) >= length;
    }
    if (out_of_range) return checkIndices(copy, length);
}

pub fn checkIndices(indices: []const i64, length: u64) Error!void {
    for (indices, 0..) |index, i| {
        if (index < 0 or @as(u64, @intCast(index)) >= length) return indexOutOfRange(index, i, length);
    }
}

fn indexOutOfRange(index: i64, position: usize, length: u64) Error {
    diagnostic.note("index {d} (position {d}) is out of range for a store of {d} records", .{ index, position, length });
    return error.IndexOutOfRange;
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
        var delete_plan = try store.prepareDelete(testing.allocator, &.{ 2, 5 });
        defer delete_plan.deinit(testing.allocator);
        // The log cannot be removed: a folder (with a file in it) stands in its place.
        try tmp.dir.rename(journal.file_name, tmp.dir, "redo.aside", io);
        try tmp.dir.createDir(io, journal.file_name, .default_dir);
        try tmp.dir.writeFile(io, .{ .sub_path = journal.file_name ++ "/x", .data = "x" });
        store.abandonDelete(&delete_plan);
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
