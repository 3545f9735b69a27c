//! Shared memory mappings of whole files (meta.zr read-write, chunks read-only).
//!
//! On POSIX systems this calls mmap(MAP_SHARED) itself. std's Io.File.MemoryMap asks Linux for
//! MAP_SHARED_VALIDATE, which kernels before 4.15 (the manylinux2014 floor is 3.10) and older
//! qemu-user reject with EINVAL, and std treats that EINVAL as a programmer bug (a panic in
//! Debug builds, inside the user's Python process). Windows keeps std's mapping.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;

const is_windows = builtin.os.tag == .windows;
const page_size_min = std.heap.page_size_min;

pub const Error = error{ AccessDenied, OutOfMemory, MappingFailed };

pub const Mapping = struct {
    memory: []align(page_size_min) u8,
    /// std's mapping object where std does the mapping (Windows); nothing elsewhere.
    std_map: if (is_windows) Io.File.MemoryMap else void,

    /// Maps `len` bytes of `file` from offset 0, shared, without prefaulting.
    pub fn create(io: Io, file: Io.File, len: usize, writable: bool) Error!Mapping {
        std.debug.assert(len > 0);
        if (is_windows) return createWithStd(io, file, len, writable);
        const prot: std.c.PROT = .{ .READ = true, .WRITE = writable };
        const flags: std.c.MAP = .{ .TYPE = .SHARED };
        const mmap = if (std.posix.lfs64_abi) std.c.mmap64 else std.c.mmap;
        const address = mmap(null, len, prot, flags, file.handle, 0);
        if (address == std.c.MAP_FAILED) {
            return switch (std.posix.errno(-1)) {
                .ACCES, .PERM => error.AccessDenied,
                .NOMEM, .AGAIN => error.OutOfMemory,
                else => error.MappingFailed,
            };
        }
        const bytes: [*]align(page_size_min) u8 = @ptrCast(@alignCast(address));
        return .{ .memory = bytes[0..len], .std_map = {} };
    }

    fn createWithStd(io: Io, file: Io.File, len: usize, writable: bool) Error!Mapping {
        var map = Io.File.MemoryMap.create(io, file, .{
            .len = len,
            .protection = .{ .read = true, .write = writable },
            .populate = false,
        }) catch |err| return switch (err) {
            error.AccessDenied, error.PermissionDenied => error.AccessDenied,
            error.OutOfMemory => error.OutOfMemory,
            else => error.MappingFailed,
        };
        // std falls back to a heap copy when it cannot map: wrong for the table, ruinous for a
        // 4 GiB chunk. Only a real mapping (a section handle) is accepted.
        if (map.section == null) {
            map.destroy(io);
            return error.MappingFailed;
        }
        return .{ .memory = map.memory, .std_map = map };
    }

    pub fn destroy(mapping: *Mapping, io: Io) void {
        if (is_windows) {
            mapping.std_map.destroy(io);
        } else {
            const rc = std.c.munmap(@ptrCast(mapping.memory.ptr), mapping.memory.len);
            // munmap of a mapping we made can only fail on a bug in this file.
            std.debug.assert(rc == 0);
        }
        mapping.* = undefined;
    }
};

test "a mapping sees positional writes and writes through" {
    const io = std.testing.io;
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    const file = try tmp.dir.createFile(io, "m.bin", .{ .read = true });
    defer file.close(io);
    try file.setLength(io, 1 << 16);
    try file.writePositionalAll(io, "abc", 100);
    var mapping = try Mapping.create(io, file, 1 << 16, true);
    defer mapping.destroy(io);
    try std.testing.expectEqualStrings("abc", mapping.memory[100..103]);
    @memcpy(mapping.memory[200..203], "xyz");
    var back: [3]u8 = undefined;
    _ = try file.readPositionalAll(io, &back, 200);
    try std.testing.expectEqualStrings("xyz", &back);
}
