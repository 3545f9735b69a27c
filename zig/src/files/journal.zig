//! The redo log that makes a delete atomic under a crash.
//!
//! A swap-last delete rewrites table entries below the old length and then publishes a shorter
//! length. A process killed in between would leave a record visible twice and another gone. So
//! the delete first writes every final entry it will change, plus both lengths, to `redo.zr`
//! (checksummed), then changes the table, publishes the length and removes the file. The next
//! writable open that finds a complete `redo.zr` applies it again (applying it twice is harmless:
//! it holds final values, not moves) and removes it; an incomplete one was never acted on and is
//! removed. With `durable` the log, and the folder entry naming it, are synced before the table
//! changes, and the table before the log goes.
//!
//! Layout (little-endian): magic "ZRDO", version u32, old_length u32, new_length u32,
//! move_count u32, then move_count x (target u32, RecordLoc 16 bytes), then CRC32 of all of it.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const Allocator = std.mem.Allocator;
const format = @import("format.zig");
const limits = @import("../base/limits.zig");
const meta_file = @import("meta.zig");
const errors = @import("../base/errors.zig");
const no_follow = @import("../os/no_follow.zig");
const diagnostic = @import("../base/diagnostic.zig");
const status = @import("../base/status.zig");
const Error = errors.Error;
const RecordLoc = format.RecordLoc;
const fail = meta_file.fail;

pub const file_name = "redo.zr";
const magic = "ZRDO".*;
const version: u32 = 1;

/// One table entry the delete sets: table[target] = entry.
pub const Move = extern struct {
    target: u32,
    entry: RecordLoc,
};

const Head = extern struct {
    magic: [4]u8,
    version: u32,
    old_length: u32,
    new_length: u32,
    move_count: u32,
};

comptime {
    std.debug.assert(@sizeOf(Move) == 20);
    std.debug.assert(@sizeOf(Head) == 20);
}

/// What a delete will do: the lengths before and after, and every entry it changes.
pub const Plan = struct {
    old_length: u32,
    new_length: u32,
    moves: []align(1) const Move,
};

fn encodedSize(move_count: usize) usize {
    return @sizeOf(Head) + move_count * @sizeOf(Move) + @sizeOf(u32);
}

/// Writes the log (synced with the folder when durable). Nothing in the table has changed yet.
pub fn write(allocator: Allocator, io: Io, dir: Io.Dir, plan: Plan, durable: bool) Error!void {
    const bytes = allocator.alloc(u8, encodedSize(plan.moves.len)) catch return errors.outOfMemory();
    defer allocator.free(bytes);
    const head: Head = .{
        .magic = magic,
        .version = version,
        .old_length = plan.old_length,
        .new_length = plan.new_length,
        .move_count = @intCast(plan.moves.len),
    };
    @memcpy(bytes[0..@sizeOf(Head)], std.mem.asBytes(&head));
    const body_end = bytes.len - @sizeOf(u32);
    @memcpy(bytes[@sizeOf(Head)..body_end], std.mem.sliceAsBytes(plan.moves));
    std.mem.writeInt(u32, bytes[body_end..][0..4], std.hash.Crc32.hash(bytes[0..body_end]), .little);
    const f = no_follow.createReplacing(io, dir, file_name, false) catch |err|
        return fail(err, "create {s}", .{file_name});
    defer f.close(io);
    // A log that failed to be written (a full disk) goes again: the delete has not started,
    // and a log left behind would make every read-only open refuse the store.
    errdefer dir.deleteFile(io, file_name) catch {};
    f.writePositionalAll(io, bytes, 0) catch |err| return fail(err, "write {s}", .{file_name});
    if (durable) {
        f.sync(io) catch |err| return fail(err, "sync {s}", .{file_name});
        try syncFolder(io, dir);
    }
}

/// Removes the log once the table holds the delete (the caller synced the table first when
/// durable). The removal is synced too: a log coming back after power loss would replay over
/// appends made since.
pub fn remove(io: Io, dir: Io.Dir, durable: bool) Error!void {
    dir.deleteFile(io, file_name) catch |err| return fail(err, "remove {s}", .{file_name});
    if (durable) try syncFolder(io, dir);
}

/// Whether a log is present (an interrupted delete, or one running in this process).
pub fn exists(io: Io, dir: Io.Dir) bool {
    dir.access(io, file_name, .{}) catch return false;
    return true;
}

/// Sets every entry of the plan and publishes its length (the delete itself, or its redo).
pub fn apply(meta: *meta_file.Meta, plan: Plan) void {
    for (plan.moves) |move| {
        std.debug.assert(move.target < plan.new_length);
        meta.table[move.target] = move.entry;
    }
    meta.publishLength(plan.new_length);
}

/// At open: finishes a delete a crash interrupted, then removes its log. Returns whether
/// there was one. A log that is incomplete was written before the table was touched: it is
/// dropped. A complete one whose lengths do not fit the table is reported as corruption.
pub fn replay(allocator: Allocator, io: Io, dir: Io.Dir, meta: *meta_file.Meta) Error!bool {
    const log = (try readLog(allocator, io, dir)) orelse return false;
    defer allocator.free(log.owned);
    if (decode(log.bytes)) |plan| {
        const length = meta.length();
        if (length != plan.old_length and length != plan.new_length) {
            diagnostic.note("corrupt store: {s} deletes from {d} to {d} records but the table holds {d}", .{ file_name, plan.old_length, plan.new_length, length });
            return error.Corrupt;
        }
        // The open checks that meta.zr covers the table only after this replay, which writes
        // entries through the mapping: a shorter file would fault (SIGBUS) instead of being
        // reported.
        try meta.checkCovers(io, plan.old_length);
        apply(meta, plan);
        try meta.flushAll(io);
    }
    try remove(io, dir, true);
    return true;
}

const Log = struct { owned: []u8, bytes: []const u8 };

/// The log's bytes (closed again before the caller may remove it), or null without one.
fn readLog(allocator: Allocator, io: Io, dir: Io.Dir) Error!?Log {
    const f = dir.openFile(io, file_name, .{ .follow_symlinks = false }) catch |err| switch (err) {
        error.FileNotFound => return null,
        error.SymLinkLoop => return no_follow.refuse(io, dir, file_name, "delete log"),
        else => return fail(err, "open {s}", .{file_name}),
    };
    defer f.close(io);
    const size = f.length(io) catch |err| return fail(err, "stat {s}", .{file_name});
    if (size > encodedSize(limits.record_count_max)) {
        diagnostic.note("corrupt store: {s} is {d} bytes", .{ file_name, size });
        return error.Corrupt;
    }
    const buffer = allocator.alloc(u8, @intCast(size)) catch return errors.outOfMemory();
    errdefer allocator.free(buffer);
    const got = f.readPositionalAll(io, buffer, 0) catch |err| return fail(err, "read {s}", .{file_name});
    return .{ .owned = buffer, .bytes = buffer[0..got] };
}

/// The plan in a complete, intact log; null for a torn or foreign one.
fn decode(bytes: []const u8) ?Plan {
    if (bytes.len < encodedSize(0)) return null;
    const head = std.mem.bytesToValue(Head, bytes[0..@sizeOf(Head)]);
    if (!std.mem.eql(u8, &head.magic, &magic) or head.version != version) return null;
    if (head.move_count > limits.record_count_max or bytes.len != encodedSize(head.move_count)) return null;
    const body_end = bytes.len - @sizeOf(u32);
    if (std.mem.readInt(u32, bytes[body_end..][0..4], .little) != std.hash.Crc32.hash(bytes[0..body_end])) return null;
    if (head.new_length > head.old_length or head.old_length > limits.record_count_max) return null;
    const moves = std.mem.bytesAsSlice(Move, bytes[@sizeOf(Head)..body_end]);
    for (moves) |move| if (move.target >= head.new_length) return null;
    return .{ .old_length = head.old_length, .new_length = head.new_length, .moves = moves };
}

/// fsyncs the folder so a new or removed name survives power loss (no-op on Windows, where
/// NTFS journals names itself).
fn syncFolder(io: Io, dir: Io.Dir) Error!void {
    if (builtin.os.tag == .windows) return;
    // The store's own handle may be a path-only descriptor (O_PATH), which fsync refuses:
    // open the folder again for reading.
    const readable = dir.openDir(io, ".", .{ .iterate = true }) catch |err| return fail(err, "open the store folder", .{});
    defer readable.close(io);
    const as_file: Io.File = .{ .handle = readable.handle, .flags = .{ .nonblocking = false } };
    as_file.sync(io) catch |err| return fail(err, "sync the store folder", .{});
}

test "a log round-trips, and torn or altered logs decode to nothing" {
    const allocator = std.testing.allocator;
    const moves = [_]Move{
        .{ .target = 3, .entry = .{ .offset = 7, .phys_length = 5, .logic_length = 9, .chunk_id = 1, .codec = .zstd } },
        .{ .target = 0, .entry = .{ .offset = 0, .phys_length = 2, .logic_length = 2, .chunk_id = 0, .codec = .raw } },
    };
    const bytes = try allocator.alloc(u8, encodedSize(moves.len));
    defer allocator.free(bytes);
    const head: Head = .{ .magic = magic, .version = version, .old_length = 9, .new_length = 6, .move_count = 2 };
    @memcpy(bytes[0..@sizeOf(Head)], std.mem.asBytes(&head));
    @memcpy(bytes[@sizeOf(Head) .. bytes.len - 4], std.mem.sliceAsBytes(&moves));
    std.mem.writeInt(u32, bytes[bytes.len - 4 ..][0..4], std.hash.Crc32.hash(bytes[0 .. bytes.len - 4]), .little);
    const plan = decode(bytes).?;
    try std.testing.expectEqual(@as(u32, 9), plan.old_length);
    try std.testing.expectEqual(@as(u32, 6), plan.new_length);
    try std.testing.expectEqualSlices(u8, std.mem.sliceAsBytes(&moves), std.mem.sliceAsBytes(plan.moves));
    for (0..bytes.len) |cut| try std.testing.expect(decode(bytes[0..cut]) == null);
    for (0..bytes.len) |i| {
        bytes[i] ^= 0x40;
        try std.testing.expect(decode(bytes) == null);
        bytes[i] ^= 0x40;
    }
}
