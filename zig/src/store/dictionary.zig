//! The store's zstd dictionary: training it from samples, writing dict.zr atomically, loading it.
//!
//! dict.zr is the dictionary's bytes followed by a 16-byte trailer: magic "LXDC", the CRC32C of
//! the dictionary bytes and their size (both little-endian). A dict.zr without the trailer is a
//! dictionary written before checksums and loads as it is, unless the store's sums.zr says its
//! dictionaries carry one.
const std = @import("std");
const Io = std.Io;
const Allocator = std.mem.Allocator;
const codec = @import("../codec/codec.zig");
const meta_file = @import("../files/meta.zig");
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const no_follow = @import("../os/no_follow.zig");
const diagnostic = @import("../base/diagnostic.zig");
const status = @import("../base/status.zig");
const store_mod = @import("store.zig");
const Store = store_mod.Store;
const Records = store_mod.Records;
const Error = errors.Error;
const fail = meta_file.fail;
const checksum = @import("../codec/checksum.zig");

const trailer_magic = "LXDC".*;
const trailer_size = 16;

pub const file_name = "dict.zr";
const temporary_name = "dict.zr.tmp";

/// Trains a dictionary from samples, writes dict.zr atomically and loads it.
pub fn train(store: *Store, samples: Records, dict_size: u64) Error!void {
    const io = pool.io();
    try store.beginMaintenance("train_dict");
    defer store.endMaintenance();
    if (store.dict != null and store.meta.length() > 0) {
        diagnostic.note("the store already has a dictionary and {d} records; a new one would make them unreadable", .{store.meta.length()});
        return error.DictionaryExists;
    }
    if (dict_size < codec.dict_size_min or dict_size > codec.dict_size_max) {
        diagnostic.note("dict_size {d} is outside [{d}, {d}]", .{ dict_size, codec.dict_size_min, codec.dict_size_max });
        return error.InvalidArgument;
    }
    if (samples.count < codec.dict_sample_count_min) {
        diagnostic.note("training a dictionary needs at least {d} samples (ideally hundreds); got {d}", .{ codec.dict_sample_count_min, samples.count });
        return error.InvalidArgument;
    }
    try samples.validate();
    const sizes = store.allocator.alloc(usize, samples.count) catch return errors.outOfMemory();
    defer store.allocator.free(sizes);
    for (sizes, 0..) |*size, i| size.* = samples.get(i).len;
    const bytes = store.allocator.alloc(u8, dict_size) catch return errors.outOfMemory();
    var owned = true;
    defer if (owned) store.allocator.free(bytes);
    const base: u64 = if (samples.offsets) |o| o[0] else 0;
    const contiguous = samples.data[base..][0..samples.totalSize()];
    const trained_size = switch (codec.train(bytes, contiguous, sizes)) {
        .size => |size| size,
        .failed => |detail| {
            diagnostic.note("dictionary training failed ({s}); give more and larger samples (about 100x dict_size in total)", .{detail});
            return error.InvalidArgument;
        },
    };
    const trained = store.allocator.realloc(bytes, trained_size) catch bytes[0..trained_size];
    owned = false;
    var dict_owned = true;
    defer if (dict_owned) store.allocator.free(trained);
    try write(io, store.dir, trained, store.durable);
    const dict = store.allocator.create(codec.Dictionary) catch return errors.outOfMemory();
    dict.* = codec.Dictionary.init(trained) catch {
        store.allocator.destroy(dict);
        diagnostic.note("zstd cannot load the dictionary it has just trained", .{});
        return error.CodecFailed;
    };
    dict_owned = false;
    if (store.dict) |old| {
        old.deinit(store.allocator);
        store.allocator.destroy(old);
    }
    @atomicStore(?*codec.Dictionary, &store.dict, dict, .release);
}

fn trailerOf(bytes: []const u8) [trailer_size]u8 {
    var trailer: [trailer_size]u8 = undefined;
    trailer[0..4].* = trailer_magic;
    std.mem.writeInt(u32, trailer[4..8], checksum.bytesSum(bytes), .little);
    std.mem.writeInt(u64, trailer[8..16], bytes.len, .little);
    return trailer;
}

fn write(io: Io, dir: Io.Dir, bytes: []const u8, durable: bool) Error!void {
    {
        const f = no_follow.createReplacing(io, dir, temporary_name, false) catch |err|
            return fail(err, "create {s}", .{temporary_name});
        defer f.close(io);
        f.writePositionalAll(io, bytes, 0) catch |err| return fail(err, "write {s}", .{temporary_name});
        const trailer = trailerOf(bytes);
        f.writePositionalAll(io, &trailer, bytes.len) catch |err| return fail(err, "write {s}", .{temporary_name});
        if (durable) f.sync(io) catch |err| return fail(err, "sync {s}", .{temporary_name});
    }
    dir.rename(temporary_name, dir, file_name, io) catch |err|
        return fail(err, "rename {s} to {s}", .{ temporary_name, file_name });
}

/// Loads dict.zr (null when absent). With `trailer_required`, a dict.zr without its checksum
/// trailer is corrupt.
pub fn load(allocator: Allocator, io: Io, dir: Io.Dir, trailer_required: bool) Error!?*codec.Dictionary {
    const f = dir.openFile(io, file_name, .{ .follow_symlinks = false }) catch |err| switch (err) {
        error.FileNotFound => return null,
        error.SymLinkLoop => return no_follow.refuse(io, dir, file_name, "dictionary file"),
        else => return fail(err, "open {s}", .{file_name}),
    };
    defer f.close(io);
    const size = f.length(io) catch |err| return fail(err, "stat {s}", .{file_name});
    if (size == 0 or size > codec.dict_size_max + trailer_size) {
        diagnostic.note("corrupt store: {s} is {d} bytes", .{ file_name, size });
        return error.Corrupt;
    }
    const bytes = allocator.alloc(u8, @intCast(size)) catch return errors.outOfMemory();
    var owned = true;
    defer if (owned) allocator.free(bytes);
    const read = f.readPositionalAll(io, bytes, 0) catch |err| return fail(err, "read {s}", .{file_name});
    if (read != size) {
        diagnostic.note("corrupt store: {s} shrank while being read", .{file_name});
        return error.Corrupt;
    }
    const dict_bytes = try checkTrailer(bytes, trailer_required);
    const kept = allocator.realloc(bytes, dict_bytes.len) catch bytes[0..dict_bytes.len];
    owned = false;
    var kept_owned = true;
    defer if (kept_owned) allocator.free(kept);
    const dict = allocator.create(codec.Dictionary) catch return errors.outOfMemory();
    dict.* = codec.Dictionary.init(kept) catch {
        allocator.destroy(dict);
        diagnostic.note("corrupt store: {s} is not a zstd dictionary zstd can load", .{file_name});
        return error.Corrupt;
    };
    kept_owned = false;
    return dict;
}

/// The dictionary bytes of dict.zr's contents, after checking the trailer when there is one.
fn checkTrailer(bytes: []u8, trailer_required: bool) Error![]u8 {
    const has_trailer = bytes.len >= trailer_size and std.mem.eql(u8, bytes[bytes.len - trailer_size ..][0..4], &trailer_magic);
    if (!has_trailer) {
        if (trailer_required) {
            diagnostic.note("corrupt store: {s} lacks its checksum trailer", .{file_name});
            return error.Corrupt;
        }
        if (bytes.len > codec.dict_size_max) {
            diagnostic.note("corrupt store: {s} is {d} bytes", .{ file_name, bytes.len });
            return error.Corrupt;
        }
        return bytes;
    }
    const dict_bytes = bytes[0 .. bytes.len - trailer_size];
    const trailer = bytes[bytes.len - trailer_size ..][0..trailer_size];
    if (!std.mem.eql(u8, trailer, &trailerOf(dict_bytes)) or dict_bytes.len == 0) {
        diagnostic.note("corrupt store: {s} does not match its checksum", .{file_name});
        return error.Corrupt;
    }
    return dict_bytes;
}
