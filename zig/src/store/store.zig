//! Store: open, close, stats, sync and the locks (in-process and across processes), and the
//! reset of every open store in a forked child. Its other jobs have files of their own,
//! reached through the methods declared below: store_append.zig, store_gather.zig,
//! store_delete.zig, open_check.zig (the checks at open), compaction.zig, dictionary.zig and
//! integrity.zig.
const std = @import("std");
const Io = std.Io;
const Allocator = std.mem.Allocator;
const assert = std.debug.assert;
const limits = @import("../base/limits.zig");
const meta_file = @import("../files/meta.zig");
const chunk = @import("../files/chunk.zig");
const codec = @import("../codec/codec.zig");
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const no_follow = @import("../os/no_follow.zig");
const diagnostic = @import("../base/diagnostic.zig");
const Error = errors.Error;
const fail = meta_file.fail;
const compaction = @import("compaction.zig");
const dictionary = @import("dictionary.zig");
const journal = @import("../files/journal.zig");
const checksum = @import("../codec/checksum.zig");
const integrity = @import("integrity.zig");
const outOfMemory = errors.outOfMemory;
const lock_file = @import("../os/lock.zig");
const runs_mod = @import("runs.zig");
const raw_copy = @import("raw_copy.zig");
const batch = @import("../batch/batch.zig");
const open_check = @import("open_check.zig");
const store_append = @import("store_append.zig");
const store_gather = @import("store_gather.zig");
const store_delete = @import("store_delete.zig");
const registry = @import("registry.zig");
const length_generation = @import("../files/length_generation.zig");

pub const dict_file_name = dictionary.file_name;

/// Bytes below which a batch gets no further thread: handing work to the pool costs more than
/// copying or compressing a few small records.
pub const runner_bytes_min: u64 = 64 * 1024;

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

pub const Records = batch.Records;
pub const Destination = batch.Destination;
pub const Failure = batch.Failure;

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
    /// Its handle at the C boundary, given by the registry at open and taken back at close.
    handle: registry.Handle = .none,
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
        try open_check.checkSnapshot(io, dir, &meta, chunks, runs);
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
        errdefer if (store.dict) |d| {
            d.deinit(allocator);
            allocator.destroy(d);
        };
        // Last: from here the store is reachable through its handle (and a fork resets it).
        store.handle = try registry.add(.store, store);
        return store;
    }

    /// Releases everything. The caller guarantees no other thread uses the store.
    pub fn close(store: *Store) void {
        // Out of the registry first: its handle is refused from here on, and a fork from now on
        // does not see a half-closed store.
        const removed = registry.remove(store.handle, .store);
        assert(removed == @as(?*anyopaque, store));
        store.free();
    }

    /// The C boundary's close: closes the store of an open handle, and does nothing for a
    /// handle closed already (a second close) or not a store's. Of two threads closing one
    /// handle at once, one closes it.
    pub fn closeHandle(handle: registry.Handle) void {
        const store = fromObject(registry.remove(handle, .store) orelse return);
        store.free();
    }

    /// The store of an open handle, or null (see registry.get). Reads no store memory.
    pub fn fromOpenHandle(handle: registry.Handle) ?*Store {
        return fromObject(registry.get(handle, .store) orelse return null);
    }

    fn fromObject(object: *anyopaque) *Store {
        return @ptrCast(@alignCast(object));
    }

    /// close's work once the store is out of the registry.
    fn free(store: *Store) void {
        const io = pool.io();
        // Before the writer lock goes. A failure leaves the slack in place, which costs only
        // space: the next writer trims it.
        store.settleChunks() catch {};
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

    // ---- append, gather and delete (their own files) ----------------------------------------

    pub const append = store_append.append;
    pub const gather = store_gather.gather;
    pub const gatherPacked = store_gather.gatherPacked;
    pub const gatherPadded = store_gather.gatherPadded;
    pub const recordLengths = store_gather.recordLengths;
    pub const GatherTask = store_gather.GatherTask;
    pub const Sides = store_gather.Sides;
    pub const gatherBytesMin = store_gather.gatherBytesMin;
    pub const copiesRawUnchecked = store_gather.copiesRawUnchecked;
    pub const copiesRaw = store_gather.copiesRaw;
    pub const rawSource = store_gather.rawSource;
    pub const gatherRecord = store_gather.gatherRecord;
    pub const gatherRecordPrefix = store_gather.gatherRecordPrefix;
    pub const checkSlots = store_gather.checkSlots;
    pub const checkSlot = store_gather.checkSlot;
    pub const delete = store_delete.delete;
    pub const deleteEach = store_delete.deleteEach;

    // ---- stats and sync ---------------------------------------------------------------------

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

    /// Trims the chunk files this handle wrote down to what they hold (Chunks.settle): the tail
    /// chunk to the frontier rounded up to a page, and chunks past the frontier (grown by an
    /// append that failed after rolling over into them) to nothing. Only the store's writer
    /// does this: holding writer.lock, no other handle appends meanwhile, and the frontier lies
    /// past every record a reader can reach. Chunks before the tail chunk were trimmed when
    /// the appends left them (store_append.zig). The caller holds the append mutex (sync) or
    /// the store alone (close).
    fn settleChunks(store: *Store) Error!void {
        if (!store.locks.writer_held) return;
        const io = pool.io();
        const tail = store.meta.header.tail();
        if (tail.chunk >= limits.chunk_count_max) return; // full: every chunk was left behind
        try store.chunks.settle(io, tail.chunk, tail.offset);
        var id: u32 = @as(u32, tail.chunk) + 1;
        while (id < limits.chunk_count_max and store.chunks.openedFile(id) != null) : (id += 1) {
            try store.chunks.settle(io, id, 0);
        }
    }

    /// Trims the chunks' slack (settleChunks), fsyncs every chunk up to the frontier and msyncs
    /// meta.zr: a synced store is as small on disk as a closed one.
    pub fn sync(store: *Store) Error!void {
        const io = pool.io();
        try store.refuseIfReadOnly();
        try store.relockIfForked();
        store.lock.lockSharedUncancelable(io);
        defer store.lock.unlockShared(io);
        store.append_mutex.lockUncancelable(io);
        defer store.append_mutex.unlock(io);
        try store.settleChunks();
        const tail = store.meta.header.tail();
        const last = if (tail.offset > 0) tail.chunk else tail.chunk -| 1;
        if (tail.offset > 0 or tail.chunk > 0) {
            for (0..last + 1) |id| _ = try store.chunks.file(io, store.dir, @intCast(id), false);
            try store.syncChunks(0, last);
        }
        try store.meta.flushAll(io);
    }

    /// fsyncs the open chunks from first_chunk to last_chunk (append, sync).
    pub fn syncChunks(store: *Store, first_chunk: u32, last_chunk: u32) Error!void {
        const io = pool.io();
        for (first_chunk..@min(last_chunk, limits.chunk_count_max - 1) + 1) |id| {
            const f = store.chunks.openedFile(@intCast(id)) orelse continue;
            f.sync(io) catch |err| return fail(err, "sync chunk {d}.zr", .{id});
        }
    }

    // ---- locking ----------------------------------------------------------------------------

    pub fn refuseIfReadOnly(store: *const Store) Error!void {
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
        // A refusal below may leave the handle without its shared lock on open.lock (see
        // Locks.takeExclusive): bumped before the store is let go, so a view that found the
        // store guarded checks it again (Locks.guardsLength).
        errdefer length_generation.bump();
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
        // Whatever the operation did (a delete publishes its lengths itself; releaseExclusive
        // may have lost the shared lock), a view checks every length again before trusting the
        // generation: bumped while the store is still held, so the next call that locks it
        // sees the bump.
        length_generation.bump();
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

/// In a forked child (single-threaded until it returns): the parent's threads may have held
/// any store's in-process locks at the moment of fork, and they do not exist here, so every
/// lock and counter starts afresh; the cross-process locks are re-taken on first use. Data
/// written half-way by a parent thread is the parent's business: the child only ever reads
/// what the published length covers, and writes only as the store's writer.
pub fn afterForkChild() void {
    var walk: registry.Walk = .{ .kind = .store };
    while (walk.next()) |object| {
        const store = Store.fromObject(object);
        store.lock = .init;
        store.append_mutex = .init;
        store.contexts.mutex = .init;
        store.chunks.map_mutex = .init;
        store.locks.forgetAfterFork();
        if (store.sidecar) |*sidecar| sidecar.load_mutex = .init;
    }
    // The child's stores hold no lock on open.lock until their first call: the parent may
    // delete from them meanwhile, and the child sees the new lengths through the mapping it
    // shares, with no bump of its own generation (a copy of the parent's). Views copied from
    // the parent check every store again, and trust the generation again only for stores
    // re-locked since (Locks.guardsLength).
    length_generation.bump();
}
