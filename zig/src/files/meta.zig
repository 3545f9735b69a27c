//! meta.zr mapped in place: creating it (just its header, atomically), opening and checking it,
//! the header and the record table as typed memory, writing table entries, and flushing them.
//!
//! The file holds the header and the table up to the highest entry ever written; it grows as
//! appends write entries. The mapping always spans the full table (mapping past the end of the
//! file is allowed, touching it is not), and only entries below the published length, which lie
//! inside the file, are ever read through it. Entries are written with pwrite, never through the
//! mapping: on a full disk the kernel cannot allocate a page behind a mapped store (tmpfs answers
//! with SIGBUS), while pwrite returns ENOSPC.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const format = @import("format.zig");
const limits = @import("../base/limits.zig");
const errors = @import("../base/errors.zig");
const no_follow = @import("../os/no_follow.zig");
const diagnostic = @import("../base/diagnostic.zig");
const status = @import("../base/status.zig");
const Mapping = @import("../os/mapping.zig").Mapping;
const length_generation = @import("length_generation.zig");
const Error = errors.Error;

pub const file_name = "meta.zr";
const temporary_name = "meta.zr.tmp";

pub const Meta = struct {
    file: Io.File,
    map: Mapping,
    header: *format.Header,
    table: *[limits.record_count_max]format.RecordLoc,

    /// Creates an empty meta.zr: written under a temporary name and renamed, so an interrupted
    /// creation never leaves a half-made store behind.
    pub fn create(io: Io, dir: Io.Dir) Error!void {
        const file = no_follow.createReplacing(io, dir, temporary_name, true) catch |err|
            return fail(err, "create {s}", .{temporary_name});
        defer file.close(io);
        // Windows extends a file to the size of a writable mapping anyway: do it here, where a
        // full disk is an error rather than a failed mapping.
        if (builtin.os.tag == .windows)
            file.setLength(io, format.meta_size) catch |err| return fail(err, "size {s}", .{temporary_name});
        const header: format.Header = .{
            .magic = format.magic,
            .version = format.version,
            .tail_chunk = 0,
            .tail_offset = 0,
            .length = 0,
        };
        file.writePositionalAll(io, std.mem.asBytes(&header), 0) catch |err|
            return fail(err, "write {s}", .{temporary_name});
        // On disk before the name appears, so a crash never leaves a meta.zr without its header.
        file.sync(io) catch |err| return fail(err, "sync {s}", .{temporary_name});
        dir.rename(temporary_name, dir, file_name, io) catch |err|
            return fail(err, "rename {s} to {s}", .{ temporary_name, file_name });
    }

    /// Opens and maps meta.zr (read-only when `writable` is false) and checks its header (not
    /// its table: see Store.open).
    pub fn open(io: Io, dir: Io.Dir, writable: bool) Error!Meta {
        const mode: Io.Dir.OpenFileOptions.Mode = if (writable) .read_write else .read_only;
        const file = dir.openFile(io, file_name, .{ .mode = mode, .follow_symlinks = false }) catch |err| switch (err) {
            error.FileNotFound => {
                diagnostic.note("no store here: {s} does not exist", .{file_name});
                return error.NotFound;
            },
            error.SymLinkLoop => return no_follow.refuse(io, dir, file_name, "table file"),
            else => return fail(err, "open {s}", .{file_name}),
        };
        errdefer file.close(io);
        const size = file.length(io) catch |err| return fail(err, "stat {s}", .{file_name});
        if (size < @sizeOf(format.Header) or size > format.meta_size) {
            diagnostic.note("not a store: {s} is {d} bytes, expected {d} to {d}", .{ file_name, size, @sizeOf(format.Header), format.meta_size });
            return error.NotAStore;
        }
        var map = Mapping.create(io, file, format.meta_size, writable) catch |err|
            return fail(err, "map {s}", .{file_name});
        errdefer map.destroy(io);
        const header: *format.Header = @ptrCast(map.memory.ptr);
        const table: *[limits.record_count_max]format.RecordLoc = @ptrCast(@alignCast(map.memory.ptr + @sizeOf(format.Header)));
        switch (format.checkHeader(header)) {
            .ok => {},
            .bad_magic => {
                diagnostic.note("not a store: {s} does not start with ZREC", .{file_name});
                return error.NotAStore;
            },
            .bad_version => {
                diagnostic.note("not a store: {s} has version {d}, this library reads {d}", .{ file_name, header.version, format.version });
                return error.NotAStore;
            },
            .bad_tail => {
                diagnostic.note("corrupt store: write frontier at chunk {d} offset {d}", .{ header.tail_chunk, header.tail_offset });
                return error.Corrupt;
            },
            .bad_length => {
                diagnostic.note("corrupt store: length {d} exceeds {d}", .{ header.length, limits.record_count_max });
                return error.Corrupt;
            },
        }
        return .{ .file = file, .map = map, .header = header, .table = table };
    }

    /// Checks that the table entries below `record_count` lie inside the file (a reader must never
    /// touch a mapped page past its end). Read the length first: the file grows before it does.
    pub fn checkCovers(meta: *const Meta, io: Io, record_count: u64) Error!void {
        const size = meta.file.length(io) catch |err| return fail(err, "stat {s}", .{file_name});
        const needed = entriesEnd(record_count);
        if (size < needed) {
            diagnostic.note("corrupt store: {s} is {d} bytes, too short for the {d} records its header counts ({d} bytes)", .{ file_name, size, record_count, needed });
            return error.Corrupt;
        }
    }

    /// Writes table entries [first, first + entries.len) with pwrite, growing the file as needed.
    /// On failure (a full disk) nothing below the published length has changed.
    pub fn writeEntries(meta: *Meta, io: Io, first: u64, entries: []const format.RecordLoc) Error!void {
        std.debug.assert(first + entries.len <= limits.record_count_max);
        meta.file.writePositionalAll(io, std.mem.sliceAsBytes(entries), entriesEnd(first)) catch |err|
            return fail(err, "write the table in {s}", .{file_name});
    }
    pub fn close(meta: *Meta, io: Io) void {
        meta.map.destroy(io);
        meta.file.close(io);
        meta.* = undefined;
    }

    /// The published length (acquire: entries below it are complete).
    pub fn length(meta: *const Meta) u32 {
        return @atomicLoad(u32, &meta.header.length, .acquire);
    }

    /// The write frontier as it is now. Its two fields are stored separately, so a read racing
    /// an append that rolls over to a new chunk can mix old and new: see Store.open's retry.
    pub fn tail(meta: *const Meta) format.Position {
        return .{
            .chunk = @atomicLoad(u16, &meta.header.tail_chunk, .monotonic),
            .offset = @atomicLoad(u32, &meta.header.tail_offset, .monotonic),
        };
    }

    /// Publishes a new length (release: entries below it were written first), then bumps the
    /// process's length generation: every length this process changes (an append, a delete, a
    /// delete's redo at open) goes through here, so a view that checked the lengths before
    /// the bump checks them again (see length_generation.zig).
    pub fn publishLength(meta: *Meta, new_length: u32) void {
        std.debug.assert(new_length <= limits.record_count_max);
        @atomicStore(u32, &meta.header.length, new_length, .release);
        length_generation.bump();
    }

    /// Flushes the table entries [first, first + count) to the file.
    pub fn flushEntries(meta: *Meta, io: Io, first: u64, count: u64) Error!void {
        const begin = @sizeOf(format.Header) + first * @sizeOf(format.RecordLoc);
        return meta.flushRange(io, begin, count * @sizeOf(format.RecordLoc));
    }

    pub fn flushHeader(meta: *Meta, io: Io) Error!void {
        return meta.flushRange(io, 0, @sizeOf(format.Header));
    }

    /// Flushes the header and the entries below the current length.
    pub fn flushAll(meta: *Meta, io: Io) Error!void {
        return meta.flushRange(io, 0, entriesEnd(meta.length()));
    }

    /// Writes dirty pages of the mapping in [begin, begin + size) back to disk and waits.
    fn flushRange(meta: *Meta, io: Io, begin: u64, size: u64) Error!void {
        if (size == 0) return;
        if (builtin.os.tag == .windows) {
            // FlushFileBuffers also writes back the file's mapped views on Windows.
            meta.file.sync(io) catch |err| return fail(err, "sync {s}", .{file_name});
            return;
        }
        const page = std.heap.pageSize();
        const first_page = std.mem.alignBackward(u64, begin, page);
        const end = std.mem.alignForward(u64, begin + size, page);
        const memory: []align(std.heap.page_size_min) u8 = @alignCast(meta.map.memory[first_page..@min(end, meta.map.memory.len)]);
        std.posix.msync(memory, std.posix.MSF.SYNC) catch |err| return fail(err, "msync {s}", .{file_name});
    }
};

/// Bytes of meta.zr up to the end of the first `record_count` table entries.
pub fn entriesEnd(record_count: u64) u64 {
    return @sizeOf(format.Header) + record_count * @sizeOf(format.RecordLoc);
}

/// Records a message for a failed std call and narrows the error. A full disk is named the
/// way the OS names it, so the caller can tell it from other I/O failures.
pub fn fail(err: anyerror, comptime what: []const u8, args: anytype) Error {
    if (err == error.NoSpaceLeft) {
        diagnostic.note("cannot " ++ what ++ ": no space left on device (ENOSPC)", args);
    } else {
        diagnostic.note("cannot " ++ what ++ ": {t}", args ++ .{err});
    }
    return errors.fromStd(err);
}
