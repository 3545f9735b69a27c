//! Integrity checks over a store: which records a gather checks against their checksum, opening
//! (or starting) a store's sums.zr, checking one record, and verify: every record, in parallel.
const std = @import("std");
const Io = std.Io;
const limits = @import("../base/limits.zig");
const format = @import("../files/format.zig");
const meta_file = @import("../files/meta.zig");
const diagnostic = @import("../base/diagnostic.zig");
const codec = @import("../codec/codec.zig");
const checksum = @import("../codec/checksum.zig");
const dictionary = @import("dictionary.zig");
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const Store = @import("store.zig").Store;
const Error = errors.Error;
const RecordLoc = format.RecordLoc;

/// Which records a gather checks against their checksum.
pub const VerifyMode = enum(u8) {
    /// None (zstd still checks each frame's content checksum).
    none,
    /// Compressed records and empty ones: the checksum costs little next to decompression. Raw
    /// records, for which it would cost as much as the copy, are left to `all` and to verify.
    compressed,
    /// Every record.
    all,

    pub fn covers(mode: VerifyMode, entry: RecordLoc) bool {
        return switch (mode) {
            .none => false,
            .compressed => entry.codec != .raw or entry.phys_length == 0,
            .all => true,
        };
    }
};

/// Opens the store's sums.zr. A writable, empty store without one (new, or from before
/// checksums) gets one; a non-empty one stays without checksums. A store that cannot be written
/// (permissions) is opened without starting one.
pub fn openSidecar(io: Io, dir: Io.Dir, meta: *const meta_file.Meta, writable: bool) Error!?checksum.Sidecar {
    if (try checksum.Sidecar.open(io, dir, meta.length(), writable)) |opened| {
        var sidecar = opened;
        errdefer sidecar.close(io);
        try checkPendingCovered(io, meta, &sidecar);
        return sidecar;
    }
    if (!writable) return null;
    const tail = meta.header.tail();
    if (meta.length() != 0 or tail.chunk != 0 or tail.offset != 0) return null;
    // A dictionary trained before checksums has no trailer; only newer ones are required to.
    const legacy_dict = if (dir.statFile(io, dictionary.file_name, .{})) |_| true else |_| false;
    checksum.Sidecar.create(io, dir, if (legacy_dict) 0 else checksum.flag_dict_trailer) catch |err| switch (err) {
        error.PermissionDenied => return null,
        else => return err,
    };
    return checksum.Sidecar.open(io, dir, 0, true);
}

/// A pending delete's entries [pending_to, pending_from) are read through the table's mapping
/// (duplicateChecks, repairPendingDelete): meta.zr must hold them all, or a damaged sums.zr
/// header would send those reads past the end of the file (SIGBUS) instead of being reported.
fn checkPendingCovered(io: Io, meta: *const meta_file.Meta, sidecar: *const checksum.Sidecar) Error!void {
    if (sidecar.pending_from == 0) return;
    const size = meta.file.length(io) catch |err| return meta_file.fail(err, "stat {s}", .{meta_file.file_name});
    if (size < meta_file.entriesEnd(sidecar.pending_from)) {
        diagnostic.note("corrupt store: {s} records a delete from {d} records, but {s} holds the entries of fewer", .{ checksum.file_name, sidecar.pending_from, meta_file.file_name });
        return error.Corrupt;
    }
}

/// Whether record `index` (below `length`), whose entry is `entry` and whose stored bytes are
/// `stored`, matches its checksum. The store has a sidecar.
pub fn checkRecord(store: *Store, index: u32, length: u32, entry: RecordLoc, stored: []const u8) Error!bool {
    const io = pool.io();
    const sidecar = &store.sidecar.?;
    const actual = checksum.recordSum(stored, entry.logic_length, entry.codec);
    if (actual == try sidecar.get(io, index, length)) return true;
    return duplicateChecks(store, index, length, entry, actual);
}

/// A delete killed between moving table entries and moving their sums leaves an entry that is
/// an exact copy of one it moved (in [pending_to, pending_from) of the pending delete that
/// sums.zr's header records), with the old sum: that record is intact. Only while a delete is
/// pending (a corruption alone cannot make an entry a copy and be believed), only after a
/// mismatch.
fn duplicateChecks(store: *Store, index: u32, length: u32, entry: RecordLoc, actual: u32) Error!bool {
    _ = length;
    const io = pool.io();
    const sidecar = &store.sidecar.?;
    if (sidecar.pending_from == 0) return false;
    const wanted = std.mem.asBytes(&entry);
    for (sidecar.pending_to..sidecar.pending_from) |j| {
        if (j == index or !std.mem.eql(u8, std.mem.asBytes(&store.meta.table[j]), wanted)) continue;
        if (try sidecar.readOne(io, @intCast(j)) == actual) return true;
    }
    return false;
}

/// Finishes the sum moves of a delete that was killed (see duplicateChecks) and clears it.
/// Entries that are exact copies hold the same bytes, length and codec, so they share a sum.
/// The caller holds the store exclusively.
pub fn repairPendingDelete(store: *Store) Error!void {
    const io = pool.io();
    const sidecar = &(store.sidecar orelse return);
    if (sidecar.pending_from == 0) return;
    const length = store.meta.length();
    try sidecar.loadAll(io, length);
    var moved = std.AutoHashMap([16]u8, u32).init(store.allocator);
    defer moved.deinit();
    for (sidecar.pending_to..sidecar.pending_from) |j| {
        const sum = try sidecar.readOne(io, @intCast(j)) orelse continue;
        moved.put(std.mem.toBytes(store.meta.table[j]), sum) catch return errors.outOfMemory();
    }
    for (store.meta.table[0..@min(length, sidecar.pending_to)], 0..) |entry, i| {
        const sum = moved.get(std.mem.toBytes(entry)) orelse continue;
        if (sidecar.sums[i] != sum) try sidecar.put(io, @intCast(i), sum);
    }
    try sidecar.clearPending(io, store.durable);
}

/// Why verify reports a record (values of lx_verify_reason in loaderx.h).
pub const Reason = enum(u32) {
    /// The table entry is impossible: outside its chunk or the written space, bad sizes or codec.
    entry = 1,
    /// The chunk file the entry points into is missing or unreadable.
    chunk = 2,
    /// The stored bytes do not match the record's checksum.
    checksum = 3,
    /// The zstd frame does not decode to exactly the logical length, or fails its own checksum.
    frame = 4,
    /// A zstd_dict record in a store without a dictionary.
    no_dictionary = 5,
};

/// One bad record (mirrors lx_verify_problem).
pub const Problem = extern struct {
    index: u64,
    reason: u32,
    _reserved: u32 = 0,
};

/// What verify found (mirrors lx_verify_summary).
pub const Summary = extern struct {
    /// Records checked: the store's length when verify started.
    records: u64,
    /// Records whose checksum was compared (0 for a store without checksums).
    checksummed: u64,
    /// Bad records found; the first `capacity` are written out.
    problem_count: u64,
    /// 1 when the store keeps per-record checksums (sums.zr).
    has_checksums: u32,
    _reserved: u32 = 0,
};

comptime {
    std.debug.assert(@sizeOf(Problem) == 16);
    std.debug.assert(@sizeOf(Summary) == 32);
}

/// Checks every record: its entry, its checksum, and that compressed records decode. The first
/// bad records found (as many as `problems` holds) are written there, sorted by index; the count
/// in the summary is complete.
pub fn verifyAll(store: *Store, problems: []Problem) Error!Summary {
    const io = pool.io();
    store.lock.lockSharedUncancelable(io);
    defer store.lock.unlockShared(io);
    // The length first: every entry below it was placed before the frontier read next.
    const length = store.meta.length();
    store.append_mutex.lockUncancelable(io);
    const tail = store.meta.header.tail();
    store.append_mutex.unlock(io);
    var task: VerifyTask = .{ .store = store, .length = length, .tail = tail, .problems = problems };
    var stored_bytes: u64 = 0;
    for (store.meta.table[0..length]) |entry| stored_bytes += entry.phys_length;
    pool.run(VerifyTask, &task, length, pool.plan(length, stored_bytes, 256 * 1024));
    if (task.failure) |err| return err;
    std.mem.sortUnstable(Problem, problems[0..@min(problems.len, task.problem_count.load(.acquire))], {}, problemBefore);
    return .{
        .records = length,
        .checksummed = if (store.sidecar != null) length else 0,
        .problem_count = task.problem_count.load(.acquire),
        .has_checksums = @intFromBool(store.sidecar != null),
    };
}

fn problemBefore(_: void, a: Problem, b: Problem) bool {
    return a.index < b.index;
}

const VerifyTask = struct {
    store: *Store,
    length: u32,
    tail: format.Position,
    problems: []Problem,
    problem_count: std.atomic.Value(u64) = .init(0),
    /// An error that stops verification itself (out of memory, I/O on sums.zr).
    failure: ?Error = null,
    failure_mutex: Io.Mutex = .init,

    pub fn runShard(task: *VerifyTask, blocks: *pool.Blocks) void {
        const io = pool.io();
        const scratch = std.heap.c_allocator.alloc(u8, limits.record_size_max) catch return task.fail(errors.outOfMemory());
        defer std.heap.c_allocator.free(scratch);
        const dctx = task.store.contexts.acquireDecompressor(io) catch return task.fail(errors.outOfMemory());
        defer task.store.contexts.releaseDecompressor(io, dctx);
        while (blocks.next()) |range| {
            for (range.begin..range.end) |i| {
                const reason = task.check(@intCast(i), dctx, scratch) catch |err| return task.fail(err);
                if (reason) |r| task.report(i, r);
            }
        }
    }

    fn fail(task: *VerifyTask, err: Error) void {
        const io = pool.io();
        task.failure_mutex.lockUncancelable(io);
        defer task.failure_mutex.unlock(io);
        if (task.failure == null) task.failure = err;
    }

    fn report(task: *VerifyTask, index: u64, reason: Reason) void {
        const slot = task.problem_count.fetchAdd(1, .acq_rel);
        if (slot < task.problems.len) task.problems[slot] = .{ .index = index, .reason = @backingInt(reason) };
    }

    /// The reason record `index` is bad, or null when it is intact.
    fn check(task: *VerifyTask, index: u32, dctx: *codec.DCtx, scratch: []u8) Error!?Reason {
        const store = task.store;
        const io = pool.io();
        const entry = store.meta.table[index];
        if (format.checkEntry(entry, task.tail) != .ok) return .entry;
        var stored: []const u8 = &.{};
        if (entry.phys_length > 0) {
            // A chunk that is missing, a link, or too short is this record's damage; any other
            // failure to map it (out of descriptors or memory, no permission) stops the
            // verification instead of reporting every record of the chunk as bad.
            const view = store.chunks.view(io, store.dir, entry.chunk_id) catch |err| switch (err) {
                error.Corrupt => return .chunk,
                else => return err,
            };
            // Never touch mapped bytes past the file's end.
            store.chunks.checkCovers(io, store.dir, entry.chunk_id, @as(u64, entry.offset) + entry.phys_length) catch |err| switch (err) {
                error.Corrupt => return .chunk,
                else => return err,
            };
            stored = view[entry.offset..][0..entry.phys_length];
        }
        if (store.sidecar != null and !try checkRecord(store, index, task.length, entry, stored)) return .checksum;
        if (entry.codec == .raw) return null;
        var ddict: ?*const codec.DDict = null;
        if (entry.codec == .zstd_dict) {
            const dict = store.dict orelse return .no_dictionary;
            ddict = dict.ddict;
        }
        if (codec.decompress(dctx, ddict, stored, scratch[0..entry.logic_length]) != null) return .frame;
        return null;
    }
};
