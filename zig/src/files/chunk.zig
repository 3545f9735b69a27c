//! Chunk files `0.zr`, `1.zr`, ...: growing them as appends need room (in steps, with the
//! blocks reserved), positional writes, the read-only mappings gather copies and decompresses
//! from (mapped lazily, kept for the store's life, installed thread-safely), and the sizes that
//! keep every read inside a file.
//!
//! A chunk file is only as long as its records need: it grows in steps while a writer appends,
//! and the writer trims the slack off again (`settle`) when it leaves the chunk behind, syncs or
//! closes, down to the end of its last record rounded up to a page. Its mapping always spans the
//! full chunk_size_max: mapping past the end of a file is allowed, and only touching a page past
//! it is not (SIGBUS). So the writer grows a file before it publishes an entry pointing into the
//! new part, trims only past the end of every record it published (readers touch nothing else),
//! and a reader checks each record's end against the size it knows, re-reading the size when a
//! record lies beyond it: a record past the real end of its file is corrupt, not a crash.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const limits = @import("../base/limits.zig");
const errors = @import("../base/errors.zig");
const no_follow = @import("../os/no_follow.zig");
const diagnostic = @import("../base/diagnostic.zig");
const status = @import("../base/status.zig");
const meta = @import("meta.zig");
const Mapping = @import("../os/mapping.zig").Mapping;
const LazyTable = @import("../base/lazy_table.zig").LazyTable;
const Error = errors.Error;
const fail = meta.fail;

/// The smallest growth of a chunk file, and the unit sizes are rounded up to.
pub const growth_size_min: u64 = 1 << 20;
/// The largest growth step; between the two a chunk grows by an eighth of its size.
pub const growth_size_max: u64 = 64 << 20;

/// The length a chunk file keeps at rest when its records end at `data_end`: that end rounded up
/// to a page, so the page holding the last record's end stays whole (a read that touches any
/// byte of it cannot fault) and the file takes no block past it.
pub fn restingSize(data_end: u64) u64 {
    std.debug.assert(data_end <= limits.chunk_size_max);
    return std.mem.alignForward(u64, data_end, std.heap.pageSize());
}

/// The size a chunk file of `size` bytes grows to when a write must reach `end`: at least `end`,
/// and a step of size/8 (1 to 64 MiB) more, in whole MiB, never past chunk_size_max. Steps keep
/// growth rare; the cap keeps the apparent size of a store close to its data. Windows maps a
/// file read-only only up to its length, so there chunks take their full size at once.
pub fn grownSize(size: u64, end: u64) u64 {
    std.debug.assert(end <= limits.chunk_size_max);
    if (builtin.os.tag == .windows) return limits.chunk_size_max;
    const step = std.math.clamp(size / 8, growth_size_min, growth_size_max);
    const target = std.mem.alignForward(u64, @max(end, size + step), growth_size_min);
    return @min(target, limits.chunk_size_max);
}

pub const Name = struct {
    buffer: [16]u8,
    len: usize,

    pub fn slice(chunk_name: *const Name) []const u8 {
        return chunk_name.buffer[0..chunk_name.len];
    }
};

pub fn name(chunk_id: u32) Name {
    var result: Name = .{ .buffer = undefined, .len = 0 };
    result.len = (std.fmt.bufPrint(&result.buffer, "{d}.zr", .{chunk_id}) catch unreachable).len;
    return result;
}

/// What the store knows of one chunk file. Everything starts empty (no handle, no mapping,
/// size 0).
pub const Slot = struct {
    /// The read-write handle, opened on demand by writers (append, compact, sync), which are
    /// serialised by the store; never touched by gather.
    file: ?Io.File = null,
    /// What the writer knows of the file's length (valid while `file` holds it open).
    file_size: u64 = 0,
    /// A length the file was seen with, past the end of every record a reader may touch:
    /// readers touch no byte at or past it. Mostly the largest length seen; the writer lowers
    /// it when it trims slack (`settle`), never below the end of a published record, and a
    /// reader may still raise it to a length seen before that trim, which is harmless: it
    /// reads only published records, all of which end inside the trimmed file.
    size: std.atomic.Value(u64) = .init(0),
    /// The read-only mapping of the whole chunk, published with release ordering once complete.
    view: std.atomic.Value(?[*]const u8) = .init(null),
    map: Mapping = undefined,
};

/// Chunks whose slots exist at once: most stores (every shard of a dataset of small shards)
/// use one chunk, and 64 slots are 3.5 KiB.
const slot_group_length = 64;
pub const Slots = LazyTable(Slot, limits.chunk_count_max, slot_group_length, .{});

pub const Chunks = struct {
    allocator: std.mem.Allocator,
    /// One slot per chunk id, allocated in groups when a chunk is first noted, opened or mapped.
    slots: Slots = .{},
    map_mutex: Io.Mutex = .init,

    /// The slot of `chunk_id`, created when absent.
    fn slot(chunks: *Chunks, chunk_id: u32) Error!*Slot {
        return chunks.slots.slot(chunks.allocator, chunk_id) catch return errors.outOfMemory();
    }

    /// The largest length chunk `chunk_id` was seen with (0 when never seen). Lock-free.
    pub inline fn knownSize(chunks: *const Chunks, chunk_id: u32) u64 {
        const s = chunks.slots.peek(chunk_id) orelse return 0;
        return s.size.load(.acquire);
    }

    /// The mapping of chunk `chunk_id` when it is mapped already. Lock-free.
    pub inline fn mapped(chunks: *const Chunks, chunk_id: u32) ?[*]const u8 {
        const s = chunks.slots.peek(chunk_id) orelse return null;
        return s.view.load(.acquire);
    }

    /// The writable handle of chunk `chunk_id` when a writer has opened it (writers only).
    pub fn openedFile(chunks: *const Chunks, chunk_id: u32) ?Io.File {
        const s = chunks.slots.peek(chunk_id) orelse return null;
        return s.file;
    }

    /// Notes the size of a chunk file found at open (the caller has the store to itself).
    pub fn notePresent(chunks: *Chunks, chunk_id: u32, size: u64) Error!void {
        (try chunks.slot(chunk_id)).size.store(size, .monotonic);
    }

    /// The writable handle of a chunk; creates the file (empty) when `create` says so.
    pub fn file(chunks: *Chunks, io: Io, dir: Io.Dir, chunk_id: u32, create: bool) Error!Io.File {
        std.debug.assert(chunk_id < limits.chunk_count_max);
        const s = try chunks.slot(chunk_id);
        if (s.file) |f| return f;
        const chunk_name = name(chunk_id);
        // Never through a link: creating or writing the file it names would write outside the store.
        const opened = if (create)
            no_follow.openOrCreate(io, dir, chunk_name.slice())
        else
            dir.openFile(io, chunk_name.slice(), .{ .mode = .read_write, .follow_symlinks = false });
        const f = opened catch |err| switch (err) {
            error.FileNotFound => {
                diagnostic.note("corrupt store: chunk file {s} is missing", .{chunk_name.slice()});
                return error.Corrupt;
            },
            error.SymLinkLoop => return no_follow.refuse(io, dir, chunk_name.slice(), "chunk file"),
            else => return fail(err, "open chunk {s}", .{chunk_name.slice()}),
        };
        errdefer f.close(io);
        const size = f.length(io) catch |err| return fail(err, "stat chunk {s}", .{chunk_name.slice()});
        noteSize(s, size);
        s.file_size = size;
        s.file = f;
        return f;
    }

    /// Makes chunk `chunk_id` at least `end` bytes long, growing it by a step (grownSize) with the
    /// blocks reserved, so the writes that follow cannot run out of space. Writers only (they are
    /// serialised). On failure the file may have grown, but no record has changed.
    pub fn reserve(chunks: *Chunks, io: Io, dir: Io.Dir, chunk_id: u32, end: u64) Error!void {
        std.debug.assert(end <= limits.chunk_size_max);
        const f = try chunks.file(io, dir, chunk_id, true);
        const s = chunks.slots.peek(chunk_id).?; // file() created it
        if (s.file_size >= end) return;
        const chunk_name = name(chunk_id);
        const size = f.length(io) catch |err| return fail(err, "stat chunk {s}", .{chunk_name.slice()});
        if (size < end) {
            const target = grownSize(size, end);
            grow(io, f, size, target) catch |err| switch (err) {
                // A full step does not fit: take just what this write needs.
                error.NoSpaceLeft => if (target > end) grow(io, f, size, end) catch |err2|
                    return fail(err2, "grow chunk {s} to {d} bytes", .{ chunk_name.slice(), end }) else return fail(err, "grow chunk {s} to {d} bytes", .{ chunk_name.slice(), end }),
                else => return fail(err, "grow chunk {s} to {d} bytes", .{ chunk_name.slice(), target }),
            };
        }
        const grown = f.length(io) catch |err| return fail(err, "stat chunk {s}", .{chunk_name.slice()});
        std.debug.assert(grown >= end);
        s.file_size = grown;
        noteSize(s, grown);
    }

    /// Cuts chunk `chunk_id` down to `size` bytes (compaction, holding the store exclusively).
    pub fn trim(chunks: *Chunks, io: Io, dir: Io.Dir, chunk_id: u32, size: u64) Error!void {
        const f = try chunks.file(io, dir, chunk_id, true);
        f.setLength(io, size) catch |err| return fail(err, "trim chunk {s}", .{name(chunk_id).slice()});
        const s = chunks.slots.peek(chunk_id).?; // file() created it
        s.file_size = size;
        s.size.store(size, .release);
    }

    /// Trims the slack off chunk `chunk_id` when this handle has its file open and it is longer
    /// than `restingSize(data_end)`, where `data_end` is at or past the end of every record
    /// in the chunk, published or being written: so no byte any reader, in any process, can
    /// reach is cut, and a process that has the chunk mapped cannot fault. The caller is the
    /// store's writer (it holds writer.lock, so no other handle writes this chunk meanwhile).
    /// The next append that needs room grows the file again. Not on Windows, where a chunk
    /// takes its full size at once (see grownSize).
    pub fn settle(chunks: *Chunks, io: Io, chunk_id: u32, data_end: u64) Error!void {
        if (builtin.os.tag == .windows) return;
        const s = chunks.slots.peek(chunk_id) orelse return;
        const f = s.file orelse return;
        const target = restingSize(data_end);
        const chunk_name = name(chunk_id);
        const size = f.length(io) catch |err| return fail(err, "stat chunk {s}", .{chunk_name.slice()});
        if (size <= target) {
            s.file_size = size;
            return;
        }
        f.setLength(io, target) catch |err| return fail(err, "trim chunk {s}", .{chunk_name.slice()});
        s.file_size = target;
        s.size.store(target, .release);
    }

    /// Raises the known size of a chunk (only `settle` and compaction's `trim` lower it).
    fn noteSize(s: *Slot, size: u64) void {
        _ = s.size.fetchMax(size, .acq_rel);
    }

    /// Checks that bytes [.., end) of chunk `chunk_id` exist in its file before a reader touches
    /// them. Lock-free while `end` is within the size already known; past it the file is stat'ed
    /// again (it may have grown in another process), and a record still beyond its end is corrupt.
    pub fn checkCovers(chunks: *Chunks, io: Io, dir: Io.Dir, chunk_id: u16, end: u64) Error!void {
        if (end <= chunks.knownSize(chunk_id)) return;
        const chunk_name = name(chunk_id);
        const stat = dir.statFile(io, chunk_name.slice(), .{}) catch |err| switch (err) {
            error.FileNotFound => {
                diagnostic.note("corrupt store: chunk file {s} is missing", .{chunk_name.slice()});
                return error.Corrupt;
            },
            else => return fail(err, "stat chunk {s}", .{chunk_name.slice()}),
        };
        noteSize(try chunks.slot(chunk_id), stat.size);
        if (end > stat.size) {
            diagnostic.note("corrupt store: a record ends at byte {d} of chunk {s}, which is {d} bytes", .{ end, chunk_name.slice(), stat.size });
            return error.Corrupt;
        }
    }

    /// The read-only mapping of a whole chunk. Lock-free once mapped.
    pub fn view(chunks: *Chunks, io: Io, dir: Io.Dir, chunk_id: u16) Error![*]const u8 {
        if (chunks.mapped(chunk_id)) |v| return v;
        const s = try chunks.slot(chunk_id);
        chunks.map_mutex.lockUncancelable(io);
        defer chunks.map_mutex.unlock(io);
        if (s.view.load(.acquire)) |v| return v;
        const chunk_name = name(chunk_id);
        const f = dir.openFile(io, chunk_name.slice(), .{ .mode = .read_only, .follow_symlinks = false }) catch |err| switch (err) {
            error.FileNotFound => {
                diagnostic.note("corrupt store: chunk file {s} is missing", .{chunk_name.slice()});
                return error.Corrupt;
            },
            error.SymLinkLoop => return no_follow.refuse(io, dir, chunk_name.slice(), "chunk file"),
            else => return fail(err, "open chunk {s}", .{chunk_name.slice()}),
        };
        defer f.close(io); // The mapping outlives the handle.
        // The size now, even if smaller than seen before (a file cut short since open is then
        // refused by checkCovers instead of faulting). A writer growing the file meanwhile
        // only makes the next read past this size take checkCovers' slow path.
        const stat = f.stat(io) catch |err| return fail(err, "stat chunk {s}", .{chunk_name.slice()});
        try requireRegular(chunk_name, stat.kind);
        const size = stat.size;
        s.size.store(size, .release);
        const map = Mapping.create(io, f, limits.chunk_size_max, false) catch |err|
            return fail(err, "map chunk {s}", .{chunk_name.slice()});
        s.map = map;
        s.view.store(map.memory.ptr, .release);
        return map.memory.ptr;
    }

    /// Drops every mapping (only while the store is held exclusively or closing).
    pub fn unmapAll(chunks: *Chunks, io: Io) void {
        for (0..Slots.group_count) |g| {
            const group = chunks.slots.groupAt(g) orelse continue;
            for (group) |*s| {
                if (s.view.load(.acquire) == null) continue;
                s.map.destroy(io);
                s.view.store(null, .release);
            }
        }
    }

    pub fn closeFile(chunks: *Chunks, io: Io, chunk_id: u32) void {
        const s = chunks.slots.peek(chunk_id) orelse return;
        if (s.file) |f| f.close(io);
        s.file = null;
        s.file_size = 0;
    }

    pub fn closeAll(chunks: *Chunks, io: Io) void {
        chunks.unmapAll(io);
        for (0..Slots.group_count) |g| {
            const group = chunks.slots.groupAt(g) orelse continue;
            for (group) |*s| {
                if (s.file) |f| f.close(io);
                s.file = null;
                s.file_size = 0;
            }
        }
    }

    /// Closes every file and mapping and frees the slots (the store is closing).
    pub fn deinit(chunks: *Chunks, io: Io) void {
        chunks.closeAll(io);
        chunks.slots.deinit(chunks.allocator);
    }

    /// Removes a chunk file past the frontier (compaction). Missing files are fine.
    pub fn remove(chunks: *Chunks, io: Io, dir: Io.Dir, chunk_id: u32) Error!void {
        std.debug.assert(chunks.mapped(chunk_id) == null);
        chunks.closeFile(io, chunk_id);
        if (chunks.slots.peek(chunk_id)) |s| s.size.store(0, .release);
        const chunk_name = name(chunk_id);
        dir.deleteFile(io, chunk_name.slice()) catch |err| switch (err) {
            error.FileNotFound => {},
            else => return fail(err, "remove chunk {s}", .{chunk_name.slice()}),
        };
    }
};

/// The size of a chunk file at or below the frontier, which must exist (checked on open).
pub fn presentSize(io: Io, dir: Io.Dir, chunk_id: u32) Error!u64 {
    const chunk_name = name(chunk_id);
    const stat = dir.statFile(io, chunk_name.slice(), .{}) catch |err| switch (err) {
        error.FileNotFound => {
            diagnostic.note("corrupt store: chunk file {s} is missing", .{chunk_name.slice()});
            return error.Corrupt;
        },
        else => return fail(err, "stat chunk {s}", .{chunk_name.slice()}),
    };
    try requireRegular(chunk_name, stat.kind);
    return stat.size;
}

/// A chunk is a regular file: a folder or a device in its place is damage (Corrupt, which
/// verify reports as the record's chunk), not a mapping that fails with an I/O error.
fn requireRegular(chunk_name: Name, kind: Io.File.Kind) Error!void {
    if (kind == .file) return;
    diagnostic.note("corrupt store: chunk file {s} is a {s}, not a regular file", .{ chunk_name.slice(), @tagName(kind) });
    return error.Corrupt;
}

/// Extends `f` from `size` to `target` bytes with the blocks allocated (fallocate), so a full
/// disk is reported here rather than by a later write. Where the OS or the file system cannot
/// reserve, the file is extended sparse and the writes report a full disk themselves.
fn grow(io: Io, f: Io.File, size: u64, target: u64) anyerror!void {
    std.debug.assert(target > size);
    if (builtin.os.tag == .linux) {
        const fallocate = if (std.posix.lfs64_abi) std.c.fallocate64 else std.c.fallocate;
        while (true) {
            const rc = fallocate(f.handle, 0, @intCast(size), @intCast(target - size));
            if (rc == 0) return;
            switch (std.posix.errno(rc)) {
                .INTR => continue,
                .NOSPC => return error.NoSpaceLeft,
                .FBIG => return error.FileTooBig,
                .IO => return error.InputOutput,
                .OPNOTSUPP, .NOSYS => break,
                else => return error.Unexpected,
            }
        }
    }
    try f.setLength(io, target);
}

test "growth steps: at least the end, whole MiB, an eighth of the size, capped" {
    if (builtin.os.tag == .windows) return error.SkipZigTest;
    const mib: u64 = 1 << 20;
    try std.testing.expectEqual(mib, grownSize(0, 10));
    try std.testing.expectEqual(2 * mib, grownSize(mib, mib + 1));
    try std.testing.expectEqual(3 * mib, grownSize(0, 2 * mib + 5));
    try std.testing.expectEqual(18 * mib, grownSize(16 * mib, 16 * mib + 1));
    try std.testing.expectEqual(1088 * mib, grownSize(1024 * mib, 1024 * mib + 1));
    try std.testing.expectEqual(limits.chunk_size_max, grownSize(limits.chunk_size_max - 5, limits.chunk_size_max));
    // From a trimmed (page-sized) length, the next growth is a whole step again.
    try std.testing.expectEqual(2 * mib, grownSize(8192, 8193));
}

test "resting size: the data rounded up to a page" {
    const page = std.heap.pageSize();
    try std.testing.expectEqual(@as(u64, 0), restingSize(0));
    try std.testing.expectEqual(@as(u64, page), restingSize(1));
    try std.testing.expectEqual(@as(u64, page), restingSize(page));
    try std.testing.expectEqual(@as(u64, 2 * page), restingSize(page + 80));
    try std.testing.expectEqual(limits.chunk_size_max, restingSize(limits.chunk_size_max));
}
