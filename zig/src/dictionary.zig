//! The store's zstd dictionary: training it from samples, writing dict.zr atomically, loading it.
const std = @import("std");
const Io = std.Io;
const Allocator = std.mem.Allocator;
const codec = @import("codec.zig");
const meta_file = @import("meta.zig");
const pool = @import("pool.zig");
const errors = @import("errors.zig");
const status = @import("status.zig");
const store_mod = @import("store.zig");
const Store = store_mod.Store;
const Records = store_mod.Records;
const Error = errors.Error;
const fail = meta_file.fail;

pub const file_name = "dict.zr";
const temporary_name = "dict.zr.tmp";

/// Trains a dictionary from samples, writes dict.zr atomically and loads it.
pub fn train(store: *Store, samples: Records, dict_size: u64) Error!void {
    const io = pool.io();
    try store.beginMaintenance("train_dict");
    defer store.endMaintenance();
    if (store.dict != null and store.meta.length() > 0) {
        status.setMessage("the store already has a dictionary and {d} records; a new one would make them unreadable", .{store.meta.length()});
        return error.DictionaryExists;
    }
    if (dict_size < codec.dict_size_min or dict_size > codec.dict_size_max) {
        status.setMessage("dict_size {d} is outside [{d}, {d}]", .{ dict_size, codec.dict_size_min, codec.dict_size_max });
        return error.InvalidArgument;
    }
    if (samples.count < codec.dict_sample_count_min) {
        status.setMessage("training a dictionary needs at least {d} samples (ideally hundreds); got {d}", .{ codec.dict_sample_count_min, samples.count });
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
            status.setMessage("dictionary training failed ({s}); give more and larger samples (about 100x dict_size in total)", .{detail});
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
        return errors.outOfMemory();
    };
    dict_owned = false;
    if (store.dict) |old| {
        old.deinit(store.allocator);
        store.allocator.destroy(old);
    }
    @atomicStore(?*codec.Dictionary, &store.dict, dict, .release);
}

fn write(io: Io, dir: Io.Dir, bytes: []const u8, durable: bool) Error!void {
    {
        const f = dir.createFile(io, temporary_name, .{ .truncate = true }) catch |err|
            return fail(err, "create {s}", .{temporary_name});
        defer f.close(io);
        f.writePositionalAll(io, bytes, 0) catch |err| return fail(err, "write {s}", .{temporary_name});
        if (durable) f.sync(io) catch |err| return fail(err, "sync {s}", .{temporary_name});
    }
    dir.rename(temporary_name, dir, file_name, io) catch |err|
        return fail(err, "rename {s} to {s}", .{ temporary_name, file_name });
}

pub fn load(allocator: Allocator, io: Io, dir: Io.Dir) Error!?*codec.Dictionary {
    const f = dir.openFile(io, file_name, .{}) catch |err| switch (err) {
        error.FileNotFound => return null,
        else => return fail(err, "open {s}", .{file_name}),
    };
    defer f.close(io);
    const size = f.length(io) catch |err| return fail(err, "stat {s}", .{file_name});
    if (size == 0 or size > codec.dict_size_max) {
        status.setMessage("corrupt store: {s} is {d} bytes", .{ file_name, size });
        return error.Corrupt;
    }
    const bytes = allocator.alloc(u8, @intCast(size)) catch return errors.outOfMemory();
    var owned = true;
    defer if (owned) allocator.free(bytes);
    const read = f.readPositionalAll(io, bytes, 0) catch |err| return fail(err, "read {s}", .{file_name});
    if (read != size) {
        status.setMessage("corrupt store: {s} shrank while being read", .{file_name});
        return error.Corrupt;
    }
    const dict = allocator.create(codec.Dictionary) catch return errors.outOfMemory();
    dict.* = codec.Dictionary.init(bytes) catch {
        allocator.destroy(dict);
        return errors.outOfMemory();
    };
    owned = false;
    return dict;
}
