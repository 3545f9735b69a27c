//! Per-record checksums and their sidecar file sums.zr.
//!
//! A record's checksum is CRC32C over its stored bytes, then its logical length (4 bytes,
//! little-endian) and its codec byte. sums.zr is a 16-byte header followed by one u32 per table
//! index, parallel to meta.zr's table (which the specification fixes, so the sums live beside it).
//! The file only ever grows by the positional writes of appends: it is as long as the most
//! records the store has held, never sparse, never mapped (a full disk is a clean error).
//! A process keeps the sums it has needed in memory (virtual memory reserved for the whole index
//! space, touched only where used), read from the file a block at a time on first use: opening a
//! store reads none of them (an open costs the same for ten records or sixteen million), and a
//! gather reads only the blocks of the records it checks.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const limits = @import("../base/limits.zig");
const format = @import("../files/format.zig");
const errors = @import("../base/errors.zig");
const no_follow = @import("../os/no_follow.zig");
const LazyTable = @import("../base/lazy_table.zig").LazyTable;
const diagnostic = @import("../base/diagnostic.zig");
const status = @import("../base/status.zig");
const Error = errors.Error;
const Codec = format.Codec;

pub const file_name = "sums.zr";
const temporary_name = "sums.zr.tmp";
pub const magic = "ZSUM".*;
pub const version: u16 = 1;

/// CRC32C (Castagnoli). std uses the SSE4.2 instruction when the target has it (x86-64-v2, the
/// wheels' baseline) but goes a byte at a time elsewhere (4x slower than slicing here), so other
/// targets get the slicing-by-8 below.
const hardware = builtin.cpu.arch == .x86_64 and builtin.cpu.hasAll(.x86, &.{ .@"64bit", .crc32 });
const Crc32cStd = std.hash.crc.@"CRC-32/ISCSI";
const Crc32c = if (hardware) Crc32cStd else Crc32cSliced;

/// CRC32C (reflected polynomial 0x82F63B78), eight bytes per step.
const Crc32cSliced = struct {
    /// The register, inverted (the CRC's initial value and final xor are both all ones).
    state: u32 = 0xFFFF_FFFF,

    const polynomial: u32 = 0x82F6_3B78;
    const tables: [8][256]u32 = makeTables();

    fn makeTables() [8][256]u32 {
        @setEvalBranchQuota(20_000);
        var result: [8][256]u32 = undefined;
        for (0..256) |n| {
            var crc: u32 = n;
            for (0..8) |_| crc = if (crc & 1 != 0) (crc >> 1) ^ polynomial else crc >> 1;
            result[0][n] = crc;
        }
        for (1..8) |k| {
            for (0..256) |n| result[k][n] = (result[k - 1][n] >> 8) ^ result[0][result[k - 1][n] & 0xFF];
        }
        return result;
    }

    pub fn init() Crc32cSliced {
        return .{};
    }

    pub fn update(self: *Crc32cSliced, bytes: []const u8) void {
        var crc = self.state;
        var rest = bytes;
        while (rest.len >= 8) : (rest = rest[8..]) {
            const low = crc ^ std.mem.readInt(u32, rest[0..4], .little);
            const high = std.mem.readInt(u32, rest[4..8], .little);
            crc = tables[7][low & 0xFF] ^ tables[6][(low >> 8) & 0xFF] ^
                tables[5][(low >> 16) & 0xFF] ^ tables[4][low >> 24] ^
                tables[3][high & 0xFF] ^ tables[2][(high >> 8) & 0xFF] ^
                tables[1][(high >> 16) & 0xFF] ^ tables[0][high >> 24];
        }
        for (rest) |b| crc = tables[0][(crc ^ b) & 0xFF] ^ (crc >> 8);
        self.state = crc;
    }

    pub fn final(self: Crc32cSliced) u32 {
        return ~self.state;
    }

    pub fn hash(bytes: []const u8) u32 {
        var crc = init();
        crc.update(bytes);
        return crc.final();
    }
};

pub const Header = extern struct {
    magic: [4]u8,
    version: u16,
    flags: u16,
    /// A delete in progress (0 when none): it lowers the length from `pending_from` to
    /// `pending_to`, moving entries of [pending_to, pending_from) into holes below.
    pending_from: u32 = 0,
    pending_to: u32 = 0,
};

/// Header flag: every dict.zr this store writes ends with a checksum trailer, so a dict.zr
/// without one is corrupt rather than a dictionary from before checksums.
pub const flag_dict_trailer: u16 = 1;

comptime {
    std.debug.assert(@sizeOf(Header) == 16);
    std.debug.assert(@sizeOf(u32) * @as(u64, limits.record_count_max) + @sizeOf(Header) < 1 << 27);
}

/// The checksum of one record: its stored bytes, its logical length and its codec.
pub fn recordSum(stored: []const u8, logic_length: u32, codec: Codec) u32 {
    var crc = Crc32c.init();
    crc.update(stored);
    var tail: [5]u8 = undefined;
    std.mem.writeInt(u32, tail[0..4], logic_length, .little);
    tail[4] = @backingInt(codec);
    crc.update(&tail);
    return crc.final();
}

/// CRC32C of a byte string (dict.zr's trailer).
pub fn bytesSum(bytes: []const u8) u32 {
    return Crc32c.hash(bytes);
}

/// Sums read from the file at a time (4 KiB).
const block_size: u32 = 1024;
const block_count: u32 = (limits.record_count_max + block_size - 1) / block_size;
/// Blocks whose counts exist at once: one page of counts (2^20 records); a store of fewer
/// records needs one, instead of the 64 KiB of counts of a full table.
const valid_group_length = 1024;
const ValidTable = LazyTable(std.atomic.Value(u32), block_count, valid_group_length, .init(0));
/// The counts come from pages, like the sums: one group is one page.
const valid_allocator = std.heap.page_allocator;
comptime {
    std.debug.assert(limits.record_count_max % block_size == 0);
    std.debug.assert(@sizeOf(ValidTable.Group) == 4096);
}

fn entryOffset(index: u64) u64 {
    return @sizeOf(Header) + index * @sizeOf(u32);
}

/// Virtual memory for the sums of the whole index space (64 MiB), left untouched: Allocator.alloc
/// and free fill the memory with 0xAA in safe builds, which would make every open and close
/// write (and commit) all of it, in time proportional to the limit instead of the store.
fn reserveSums() Error![]u32 {
    const bytes = @as(usize, limits.record_count_max) * @sizeOf(u32);
    const memory = std.heap.page_allocator.rawAlloc(bytes, .of(u32), @returnAddress()) orelse return errors.outOfMemory();
    return @as([*]u32, @ptrCast(@alignCast(memory)))[0..limits.record_count_max];
}

fn releaseSums(sums: []u32) void {
    std.heap.page_allocator.rawFree(std.mem.sliceAsBytes(sums), .of(u32), @returnAddress());
}

pub const Sidecar = struct {
    file: Io.File,
    flags: u16,
    /// Sums by table index, reserved for the whole index space. In block b, the first
    /// valid[b] sums are in memory; the rest are read from the file when first needed.
    sums: []u32,
    /// Its groups are created as blocks are read or written (an absent one counts 0 for each
    /// of its blocks). Only handles (`|*sidecar|`) may change it: a copy would lose its groups.
    valid: ValidTable = .{},
    /// The header's pending delete (changed only while the store is held exclusively).
    pending_from: u32 = 0,
    pending_to: u32 = 0,
    /// Serialises reading blocks from the file and raising `valid`.
    load_mutex: Io.Mutex = .init,

    /// Creates an empty sums.zr (under a temporary name, then renamed).
    pub fn create(io: Io, dir: Io.Dir, flags: u16) Error!void {
        const f = no_follow.createReplacing(io, dir, temporary_name, false) catch |err|
            return fail(err, "create {s}", .{temporary_name});
        defer f.close(io);
        const header: Header = .{ .magic = magic, .version = version, .flags = flags };
        f.writePositionalAll(io, std.mem.asBytes(&header), 0) catch |err|
            return fail(err, "write {s}", .{temporary_name});
        f.sync(io) catch |err| return fail(err, "sync {s}", .{temporary_name});
        dir.rename(temporary_name, dir, file_name, io) catch |err|
            return fail(err, "rename {s} to {s}", .{ temporary_name, file_name });
    }

    /// Opens sums.zr (read-only unless `writable`) and checks that it holds a sum for each of
    /// the first `length` records, reading none of them; null when the store has none (a store
    /// from before checksums).
    pub fn open(io: Io, dir: Io.Dir, length: u32, writable: bool) Error!?Sidecar {
        const mode: Io.Dir.OpenFileOptions.Mode = if (writable) .read_write else .read_only;
        const f = dir.openFile(io, file_name, .{ .mode = mode, .follow_symlinks = false }) catch |err| switch (err) {
            error.FileNotFound => return null,
            error.SymLinkLoop => return no_follow.refuse(io, dir, file_name, "checksum file"),
            error.AccessDenied, error.PermissionDenied, error.ReadOnlyFileSystem => dir.openFile(io, file_name, .{ .mode = .read_only, .follow_symlinks = false }) catch |err2|
                return fail(err2, "open {s}", .{file_name}),
            else => return fail(err, "open {s}", .{file_name}),
        };
        errdefer f.close(io);
        var header: Header = undefined;
        const read = f.readPositionalAll(io, std.mem.asBytes(&header), 0) catch |err|
            return fail(err, "read {s}", .{file_name});
        if (read != @sizeOf(Header) or !std.mem.eql(u8, &header.magic, &magic) or header.version != version) {
            diagnostic.note("corrupt store: {s} has no valid header", .{file_name});
            return error.Corrupt;
        }
        if (header.flags & ~flag_dict_trailer != 0) {
            diagnostic.note("corrupt store: {s} has unknown flags 0x{x}", .{ file_name, header.flags });
            return error.Corrupt;
        }
        if (header.pending_from != 0 and (header.pending_to >= header.pending_from or header.pending_from > limits.record_count_max)) {
            diagnostic.note("corrupt store: {s} records an impossible delete", .{file_name});
            return error.Corrupt;
        }
        const size = f.length(io) catch |err| return fail(err, "stat {s}", .{file_name});
        if (size < entryOffset(length)) {
            diagnostic.note("corrupt store: {s} holds the sums of {d} records, the store has {d}", .{
                file_name, (@max(size, @sizeOf(Header)) - @sizeOf(Header)) / @sizeOf(u32), length,
            });
            return error.Corrupt;
        }
        const sums = try reserveSums();
        errdefer releaseSums(sums);
        return .{
            .file = f,
            .flags = header.flags,
            .sums = sums,
            .pending_from = header.pending_from,
            .pending_to = header.pending_to,
        };
    }

    pub fn close(sidecar: *Sidecar, io: Io) void {
        releaseSums(sidecar.sums);
        sidecar.valid.deinit(valid_allocator);
        sidecar.file.close(io);
        sidecar.* = undefined;
    }

    /// Reads the sums of [first, end) from the file into memory.
    fn readRange(sidecar: *Sidecar, io: Io, first: u32, end: u32) Error!void {
        if (end <= first) return;
        const bytes = std.mem.sliceAsBytes(sidecar.sums[first..end]);
        const read = sidecar.file.readPositionalAll(io, bytes, entryOffset(first)) catch |err|
            return fail(err, "read {s}", .{file_name});
        if (read != bytes.len) {
            diagnostic.note("corrupt store: {s} holds the sums of {d} records, the store has {d}", .{
                file_name, first + read / @sizeOf(u32), end,
            });
            return error.Corrupt;
        }
    }

    /// The stored sum of record `index` (below the store's published `length`).
    pub fn get(sidecar: *Sidecar, io: Io, index: u32, length: u32) Error!u32 {
        std.debug.assert(index < length);
        const block = index / block_size;
        const start = block * block_size;
        if (sidecar.validCount(block) > index - start) return sidecar.sums[index];
        // Not read yet (or appended by another process since): read the rest of its block that
        // lies below the length, once.
        sidecar.load_mutex.lockUncancelable(io);
        defer sidecar.load_mutex.unlock(io);
        const count = sidecar.valid.slot(valid_allocator, block) catch return errors.outOfMemory();
        const valid = count.load(.acquire);
        if (index - start >= valid) {
            const end = @min(length, start + block_size);
            try sidecar.readRange(io, start + valid, end);
            count.store(end - start, .release);
        }
        return sidecar.sums[index];
    }

    /// The stored sum of any index the file holds (also past the length), read from the file.
    pub fn readOne(sidecar: *Sidecar, io: Io, index: u32) Error!?u32 {
        var value: u32 = undefined;
        const read = sidecar.file.readPositionalAll(io, std.mem.asBytes(&value), entryOffset(index)) catch |err|
            return fail(err, "read {s}", .{file_name});
        return if (read == @sizeOf(u32)) value else null;
    }

    /// Records a delete from `from` records down to `to` before it moves anything.
    pub fn setPending(sidecar: *Sidecar, io: Io, from: u32, to: u32, durable: bool) Error!void {
        std.debug.assert(to < from);
        try sidecar.writePending(io, from, to, durable);
    }

    pub fn clearPending(sidecar: *Sidecar, io: Io, durable: bool) Error!void {
        try sidecar.writePending(io, 0, 0, durable);
    }

    fn writePending(sidecar: *Sidecar, io: Io, from: u32, to: u32, durable: bool) Error!void {
        const fields = [2]u32{ from, to };
        sidecar.file.writePositionalAll(io, std.mem.asBytes(&fields), @offsetOf(Header, "pending_from")) catch |err|
            return fail(err, "write {s}", .{file_name});
        if (durable) sidecar.file.sync(io) catch |err| return fail(err, "sync {s}", .{file_name});
        sidecar.pending_from = from;
        sidecar.pending_to = to;
    }

    /// Makes sure every sum below `length` is in memory (before delete moves them).
    pub fn loadAll(sidecar: *Sidecar, io: Io, length: u32) Error!void {
        var start: u32 = 0;
        while (start < length) : (start += block_size) {
            _ = try sidecar.get(io, @min(length, start + block_size) - 1, length);
        }
    }

    /// Writes the sums of new records [first, first + values.len) to the file, then to memory.
    /// The caller serialises writers and publishes the table length only after this.
    pub fn write(sidecar: *Sidecar, io: Io, first: u32, values: []const u32, durable: bool) Error!void {
        if (values.len == 0) return;
        sidecar.file.writePositionalAll(io, std.mem.sliceAsBytes(values), entryOffset(first)) catch |err|
            return fail(err, "write {s}", .{file_name});
        if (durable) sidecar.file.sync(io) catch |err| return fail(err, "sync {s}", .{file_name});
        @memcpy(sidecar.sums[first..][0..values.len], values);
        // A block whose valid sums reach `first` now reaches the end of the new ones; any other
        // keeps reading them from the file, which holds them.
        sidecar.load_mutex.lockUncancelable(io);
        defer sidecar.load_mutex.unlock(io);
        const end: u32 = @intCast(first + values.len);
        var at = first;
        while (at < end) {
            const block = at / block_size;
            const start = block * block_size;
            const block_end = @min(end, start + block_size);
            if (sidecar.validCount(block) == at - start) {
                // Without memory for the count the block keeps reading these sums from the file.
                const count = sidecar.valid.slot(valid_allocator, block) catch null;
                if (count) |c| c.store(block_end - start, .release);
            }
            at = block_end;
        }
    }

    /// Swap-last delete's move: the sum of `from` becomes the sum of `to` (memory only; the
    /// caller loaded both with loadAll and writes the changed ones with flushMoved).
    pub fn move(sidecar: *Sidecar, from: u32, to: u32) void {
        sidecar.sums[to] = sidecar.sums[from];
    }

    /// Sets the sum of `index` (below the length) in memory and in the file (delete repair).
    pub fn put(sidecar: *Sidecar, io: Io, index: u32, value: u32) Error!void {
        sidecar.sums[index] = value;
        sidecar.file.writePositionalAll(io, std.mem.asBytes(&value), entryOffset(index)) catch |err|
            return fail(err, "write {s}", .{file_name});
    }

    /// Writes the in-memory sums of the delete targets that stay below `length` to the file.
    pub fn flushMoved(sidecar: *Sidecar, io: Io, targets: []const u32, length: u32, durable: bool) Error!void {
        for (targets) |target| {
            if (target >= length) continue;
            const bytes = std.mem.asBytes(&sidecar.sums[target]);
            sidecar.file.writePositionalAll(io, bytes, entryOffset(target)) catch |err|
                return fail(err, "write {s}", .{file_name});
        }
        if (durable) sidecar.file.sync(io) catch |err| return fail(err, "sync {s}", .{file_name});
    }

    /// After a delete the store holds `length` records; the sums in memory stay valid below it
    /// (the ones past it are read again if records are appended there).
    pub fn truncateLoaded(sidecar: *Sidecar, length: u32) void {
        var block = length / block_size;
        while (block < block_count) : (block += 1) {
            const keep = (@max(length, block * block_size)) - block * block_size;
            const count = sidecar.valid.peek(block) orelse continue; // counts 0: nothing to drop
            if (count.load(.acquire) > keep) count.store(keep, .release);
        }
    }

    /// How many sums of block `block` are in memory, from its start.
    fn validCount(sidecar: *const Sidecar, block: u32) u32 {
        const count = sidecar.valid.peek(block) orelse return 0;
        return count.load(.acquire);
    }
};

/// The store's failure message (ENOSPC spelled so Python raises OSError with that errno).
const fail = @import("../files/meta.zig").fail;

test "recordSum covers the bytes, the logical length and the codec" {
    const a = recordSum("hello", 5, .raw);
    try std.testing.expectEqual(a, recordSum("hello", 5, .raw));
    try std.testing.expect(a != recordSum("hellp", 5, .raw));
    try std.testing.expect(a != recordSum("hello", 6, .raw));
    try std.testing.expect(a != recordSum("hello", 5, .zstd));
    // The CRC32C check value ("123456789" -> 0xE3069283) pins the polynomial.
    try std.testing.expectEqual(@as(u32, 0xE3069283), bytesSum("123456789"));
}

test "sidecar: create, write, reopen, another process's sums, short file is corrupt" {
    const io = std.testing.io;
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    try std.testing.expect(try Sidecar.open(io, tmp.dir, 0, true) == null);
    try Sidecar.create(io, tmp.dir, flag_dict_trailer);
    var sidecar = (try Sidecar.open(io, tmp.dir, 0, true)).?;
    try sidecar.write(io, 0, &.{ 11, 22, 33 }, false);
    try std.testing.expectEqual(@as(u32, 22), try sidecar.get(io, 1, 3));
    // A second handle (another process) appends two more; the first reads them on demand.
    var other = (try Sidecar.open(io, tmp.dir, 3, true)).?;
    try other.write(io, 3, &.{ 44, 55 }, false);
    other.close(io);
    try std.testing.expectEqual(@as(u32, 55), try sidecar.get(io, 4, 5));
    try sidecar.setPending(io, 5, 4, false);
    sidecar.move(4, 1);
    try sidecar.flushMoved(io, &.{ 4, 1 }, 4, false);
    sidecar.truncateLoaded(4);
    sidecar.close(io);
    var again = (try Sidecar.open(io, tmp.dir, 4, true)).?;
    try std.testing.expectEqual(flag_dict_trailer, again.flags);
    try std.testing.expectEqual(@as(u32, 5), again.pending_from);
    try std.testing.expectEqual(@as(u32, 55), (try again.readOne(io, 4)).?);
    try std.testing.expect(try again.readOne(io, 5) == null);
    try again.clearPending(io, false);
    // Opening read none of the sums (and allocated no counts for them); loadAll reads them.
    try std.testing.expectEqual(@as(u32, 0), again.validCount(0));
    try std.testing.expectEqual(@as(u32, 0), again.valid.groupsCreated());
    try again.loadAll(io, 4);
    try std.testing.expectEqualSlices(u32, &.{ 11, 55, 33, 44 }, again.sums[0..4]);
    again.close(io);
    try std.testing.expectError(error.Corrupt, Sidecar.open(io, tmp.dir, 6, true));
}

test "sidecar: sums are read a block at a time, across blocks, and follow appends and deletes" {
    const io = std.testing.io;
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    try Sidecar.create(io, tmp.dir, 0);
    const count = 3 * block_size + 5;
    const values = try std.testing.allocator.alloc(u32, count);
    defer std.testing.allocator.free(values);
    for (values, 0..) |*v, i| v.* = @intCast(i * 7 + 1);
    var writer = (try Sidecar.open(io, tmp.dir, 0, true)).?;
    defer writer.close(io);
    try writer.write(io, 0, values[0..10], false);
    var reader = (try Sidecar.open(io, tmp.dir, 10, false)).?;
    defer reader.close(io);
    try std.testing.expectEqual(values[9], try reader.get(io, 9, 10));
    try std.testing.expectEqual(@as(u32, 10), reader.validCount(0));
    // The writer appends the rest (another process, for the reader): the reader reads the
    // blocks it needs, and only those.
    try writer.write(io, 10, values[10..], false);
    try std.testing.expectEqual(values[2 * block_size + 3], try reader.get(io, 2 * block_size + 3, count));
    try std.testing.expectEqual(@as(u32, 0), reader.validCount(1));
    try std.testing.expectEqual(block_size, reader.validCount(2));
    for (values, 0..) |v, i| try std.testing.expectEqual(v, try reader.get(io, @intCast(i), count));
    try std.testing.expectEqual(@as(u32, 5), reader.validCount(3));
    // The writer's own appends stay in memory; a shrink forgets the sums past the length.
    try std.testing.expectEqual(@as(u32, 5), writer.validCount(3));
    writer.truncateLoaded(block_size + 2);
    try std.testing.expectEqual(@as(u32, 2), writer.validCount(1));
    try std.testing.expectEqual(@as(u32, 0), writer.validCount(3));
    try std.testing.expectEqual(values[count - 1], try writer.get(io, count - 1, count));
}

test "the sliced CRC32C agrees with std's" {
    try std.testing.expectEqual(@as(u32, 0xE3069283), Crc32cSliced.hash("123456789"));
    var buffer: [1000]u8 = undefined;
    var prng = std.Random.DefaultPrng.init(3);
    prng.random().bytes(&buffer);
    for ([_]usize{ 0, 1, 7, 8, 9, 63, 1000 }) |len| {
        try std.testing.expectEqual(Crc32cStd.hash(buffer[0..len]), Crc32cSliced.hash(buffer[0..len]));
        var split = Crc32cSliced.init();
        split.update(buffer[0 .. len / 3]);
        split.update(buffer[len / 3 .. len]);
        try std.testing.expectEqual(Crc32cStd.hash(buffer[0..len]), split.final());
    }
}
