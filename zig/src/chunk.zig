//! Chunk files `0.zr`, `1.zr`, ...: creating them sparse at full size, positional writes, and the
//! read-only mappings gather copies and decompresses from (mapped lazily, kept for the store's
//! life, installed thread-safely).
const std = @import("std");
const Io = std.Io;
const limits = @import("limits.zig");
const errors = @import("errors.zig");
const status = @import("status.zig");
const meta = @import("meta.zig");
const Mapping = @import("mapping.zig").Mapping;
const Error = errors.Error;
const fail = meta.fail;

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

pub const Chunks = struct {
    /// Read-write handles, opened on demand by writers (append, compact, sync), which are
    /// serialised by the store; never touched by gather.
    files: [limits.chunk_count_max]?Io.File = @splat(null),
    /// Read-only mappings of whole chunks, published with release ordering once complete.
    views: [limits.chunk_count_max]std.atomic.Value(?[*]const u8) = @splat(.init(null)),
    maps: [limits.chunk_count_max]Mapping = undefined,
    map_mutex: Io.Mutex = .init,

    /// The writable handle of a chunk; creates the file (sparse, full size) when `create` says so.
    pub fn file(chunks: *Chunks, io: Io, dir: Io.Dir, chunk_id: u32, create: bool) Error!Io.File {
        std.debug.assert(chunk_id < limits.chunk_count_max);
        if (chunks.files[chunk_id]) |f| return f;
        const chunk_name = name(chunk_id);
        const f = dir.openFile(io, chunk_name.slice(), .{ .mode = .read_write }) catch |err| switch (err) {
            error.FileNotFound => if (create)
                dir.createFile(io, chunk_name.slice(), .{ .read = true, .truncate = false }) catch |err2|
                    return fail(err2, "create chunk {s}", .{chunk_name.slice()})
            else {
                status.setMessage("corrupt store: chunk file {s} is missing", .{chunk_name.slice()});
                return error.Corrupt;
            },
            else => return fail(err, "open chunk {s}", .{chunk_name.slice()}),
        };
        errdefer f.close(io);
        const size = f.length(io) catch |err| return fail(err, "stat chunk {s}", .{chunk_name.slice()});
        if (size < limits.chunk_size_max) {
            // Only a chunk at or past the frontier can be short (open checks the others), so
            // growing it never exposes holes inside live data.
            f.setLength(io, limits.chunk_size_max) catch |err| return fail(err, "size chunk {s}", .{chunk_name.slice()});
        }
        chunks.files[chunk_id] = f;
        return f;
    }

    /// The read-only mapping of a whole chunk. Lock-free once mapped.
    pub fn view(chunks: *Chunks, io: Io, dir: Io.Dir, chunk_id: u16) Error![*]const u8 {
        if (chunks.views[chunk_id].load(.acquire)) |v| return v;
        chunks.map_mutex.lockUncancelable(io);
        defer chunks.map_mutex.unlock(io);
        if (chunks.views[chunk_id].load(.acquire)) |v| return v;
        const chunk_name = name(chunk_id);
        const f = dir.openFile(io, chunk_name.slice(), .{ .mode = .read_only }) catch |err| switch (err) {
            error.FileNotFound => {
                status.setMessage("corrupt store: chunk file {s} is missing", .{chunk_name.slice()});
                return error.Corrupt;
            },
            else => return fail(err, "open chunk {s}", .{chunk_name.slice()}),
        };
        defer f.close(io); // The mapping outlives the handle.
        // Touching a mapped page past the end of the file raises SIGBUS: refuse short files.
        const size = f.length(io) catch |err| return fail(err, "stat chunk {s}", .{chunk_name.slice()});
        if (size < limits.chunk_size_max) {
            status.setMessage("corrupt store: chunk file {s} is {d} bytes, expected {d}", .{ chunk_name.slice(), size, limits.chunk_size_max });
            return error.Corrupt;
        }
        const map = Mapping.create(io, f, limits.chunk_size_max, false) catch |err|
            return fail(err, "map chunk {s}", .{chunk_name.slice()});
        chunks.maps[chunk_id] = map;
        chunks.views[chunk_id].store(map.memory.ptr, .release);
        return map.memory.ptr;
    }

    /// Drops every mapping (only while the store is held exclusively or closing).
    pub fn unmapAll(chunks: *Chunks, io: Io) void {
        for (&chunks.views, &chunks.maps) |*v, *map| {
            if (v.load(.acquire) == null) continue;
            map.destroy(io);
            v.store(null, .release);
        }
    }

    pub fn closeFile(chunks: *Chunks, io: Io, chunk_id: u32) void {
        if (chunks.files[chunk_id]) |f| f.close(io);
        chunks.files[chunk_id] = null;
    }

    pub fn closeAll(chunks: *Chunks, io: Io) void {
        chunks.unmapAll(io);
        for (0..limits.chunk_count_max) |id| chunks.closeFile(io, @intCast(id));
    }

    /// Removes a chunk file past the frontier (compaction). Missing files are fine.
    pub fn remove(chunks: *Chunks, io: Io, dir: Io.Dir, chunk_id: u32) Error!void {
        std.debug.assert(chunks.views[chunk_id].load(.acquire) == null);
        chunks.closeFile(io, chunk_id);
        const chunk_name = name(chunk_id);
        dir.deleteFile(io, chunk_name.slice()) catch |err| switch (err) {
            error.FileNotFound => {},
            else => return fail(err, "remove chunk {s}", .{chunk_name.slice()}),
        };
    }
};

/// Checks on open that a chunk below or at the frontier exists with its full size.
pub fn checkPresent(io: Io, dir: Io.Dir, chunk_id: u32) Error!void {
    const chunk_name = name(chunk_id);
    const stat = dir.statFile(io, chunk_name.slice(), .{}) catch |err| switch (err) {
        error.FileNotFound => {
            status.setMessage("corrupt store: chunk file {s} is missing", .{chunk_name.slice()});
            return error.Corrupt;
        },
        else => return fail(err, "stat chunk {s}", .{chunk_name.slice()}),
    };
    if (stat.size < limits.chunk_size_max) {
        status.setMessage("corrupt store: chunk file {s} is {d} bytes, expected {d}", .{ chunk_name.slice(), stat.size, limits.chunk_size_max });
        return error.Corrupt;
    }
}
