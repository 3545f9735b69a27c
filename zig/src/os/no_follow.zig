//! Opening and creating the store's own files without following a symlink in their place:
//! through a link, an O_CREAT open makes (or truncates) the file the link names, outside the
//! store. std.Io's createFile has no O_NOFOLLOW, but O_CREAT|O_EXCL never follows a final link.
const std = @import("std");
const Io = std.Io;
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const Error = errors.Error;

/// Opens `name` read-write, creating it empty when absent; error.SymLinkLoop when it is a link
/// (or dangling one). Another process may create it between the open and the exclusive create:
/// the next round then opens that file.
pub fn openOrCreate(io: Io, dir: Io.Dir, name: []const u8) Io.File.OpenError!Io.File {
    var round: u32 = 0;
    while (true) : (round += 1) {
        if (dir.openFile(io, name, .{ .mode = .read_write, .follow_symlinks = false })) |f| {
            return f;
        } else |err| switch (err) {
            error.FileNotFound => {},
            else => return err,
        }
        if (dir.createFile(io, name, .{ .read = true, .truncate = false, .exclusive = true })) |f| {
            return f;
        } else |err| switch (err) {
            // Made by another handle since (or a link put in its place, refused next round).
            error.PathAlreadyExists => if (round >= 8) return err,
            else => return err,
        }
    }
}

/// Creates `name` afresh (a temporary file or a log the caller rewrites whole): whatever is
/// there, a link included, is unlinked first (the link itself, never its target), then the
/// file is created exclusively.
pub fn createReplacing(io: Io, dir: Io.Dir, name: []const u8, read: bool) (Io.File.OpenError || Io.Dir.DeleteFileError)!Io.File {
    var round: u32 = 0;
    while (true) : (round += 1) {
        dir.deleteFile(io, name) catch |err| switch (err) {
            error.FileNotFound => {},
            else => return err,
        };
        if (dir.createFile(io, name, .{ .read = read, .truncate = false, .exclusive = true })) |f| {
            return f;
        } else |err| switch (err) {
            error.PathAlreadyExists => if (round >= 8) return err,
            else => return err,
        }
    }
}

/// A symlink in the place of one of the store's own files (`what`: "lock file", "chunk file"):
/// refused as a corrupt store, naming the file and where the link points.
pub fn refuse(io: Io, dir: Io.Dir, name: []const u8, what: []const u8) Error {
    var buffer: [256]u8 = undefined;
    if (dir.readLink(io, name, &buffer)) |len| {
        diagnostic.note("{s} is a symbolic link (to '{s}'), not the store's {s}; loaderx makes that file itself and does not follow links out of the store", .{ name, buffer[0..len], what });
    } else |_| {
        diagnostic.note("{s} is a symbolic link, not the store's {s}; loaderx makes that file itself and does not follow links out of the store", .{ name, what });
    }
    return error.Corrupt;
}

test "a link in a file's place is neither followed when opening nor when creating afresh" {
    const io = std.testing.io;
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.createDir(io, "store", .default_dir);
    try tmp.dir.createDir(io, "outside", .default_dir);
    var store = try tmp.dir.openDir(io, "store", .{});
    defer store.close(io);
    var outside = try tmp.dir.openDir(io, "outside", .{});
    defer outside.close(io);
    try store.symLink(io, "../outside/target", "0.zr", .{});
    try std.testing.expectError(error.SymLinkLoop, openOrCreate(io, store, "0.zr"));
    try std.testing.expectError(error.FileNotFound, outside.access(io, "target", .{}));
    try std.testing.expectEqual(error.Corrupt, refuse(io, store, "0.zr", "chunk file"));
    try store.symLink(io, "../outside/target", "meta.zr.tmp", .{});
    const f = try createReplacing(io, store, "meta.zr.tmp", true);
    f.close(io);
    try std.testing.expectError(error.FileNotFound, outside.access(io, "target", .{}));
    const stat = try store.statFile(io, "meta.zr.tmp", .{ .follow_symlinks = false });
    try std.testing.expectEqual(Io.File.Kind.file, stat.kind);
}
