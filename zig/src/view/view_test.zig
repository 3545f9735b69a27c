//! Tests of a view (view.zig) through its Zig API, over three stores in a temporary folder:
//! routing, stale views and shrunk stores, the routing check's length generation, stores
//! repeated in one view, and gathers that mix raw and compressed records.
const std = @import("std");
const diagnostic = @import("../base/diagnostic.zig");
const pool = @import("../os/pool.zig");
const length_generation = @import("../files/length_generation.zig");
const store_mod = @import("../store/store.zig");
const Store = store_mod.Store;
const View = @import("view.zig").View;

const testing = std.testing;

const Fixture = struct {
    tmp: testing.TmpDir,
    stores: [3]*Store,
    paths: [3][96]u8 = undefined,

    /// Three stores of 2, 0 and 3 records; record g holds the byte g repeated g + 1 times.
    fn init() !Fixture {
        var fixture: Fixture = .{ .tmp = testing.tmpDir(.{}), .stores = undefined };
        errdefer fixture.tmp.cleanup();
        const io = pool.io();
        const counts = [_]u8{ 2, 0, 3 };
        var next: u8 = 0;
        for (counts, 0..) |count, k| {
            var name_buffer: [8]u8 = undefined;
            const name = try std.fmt.bufPrint(&name_buffer, "s{d}", .{k});
            try fixture.tmp.dir.createDir(io, name, .default_dir);
            const path = try std.fmt.bufPrint(&fixture.paths[k], ".zig-cache/tmp/{s}/{s}", .{ fixture.tmp.sub_path, name });
            fixture.stores[k] = try Store.open(testing.allocator, path, .{ .create = true });
            var data: [16]u8 = undefined;
            var offsets: [4]u64 = .{ 0, 0, 0, 0 };
            var size: u64 = 0;
            for (0..count) |i| {
                @memset(data[size..][0 .. next + 1], next);
                size += next + 1;
                offsets[i + 1] = size;
                next += 1;
            }
            if (count > 0) _ = try fixture.stores[k].append(store_mod.Records.fromSlices(data[0..size], offsets[0 .. count + 1]), @backingInt(codec_tag(k)));
        }
        return fixture;
    }

    fn codec_tag(k: usize) @import("../files/format.zig").Codec {
        return if (k == 0) .raw else .zstd;
    }

    fn deinit(fixture: *Fixture) void {
        for (fixture.stores) |s| s.close();
        fixture.tmp.cleanup();
    }
};

test "a view routes global indices across stores, empty ones included" {
    var fixture = try Fixture.init();
    defer fixture.deinit();
    const view = try View.open(testing.allocator, &fixture.stores);
    defer view.close();
    try testing.expectEqual(@as(u64, 5), view.length());
    const indices = [_]i64{ 4, 0, 2, 1, 4 };
    var lengths: [5]u64 = undefined;
    try view.recordLengths(&indices, &lengths);
    try testing.expectEqualSlices(u64, &.{ 5, 1, 3, 2, 5 }, &lengths);
    var offsets: [6]u64 = .{ 0, 0, 0, 0, 0, 0 };
    for (lengths, 0..) |len, i| offsets[i + 1] = offsets[i] + len;
    // The first gather maps the chunks on the general path; the second copies the raw records
    // of the mapped chunk with the pipelined ragged copy.
    for (0..2) |_| {
        var out: [16]u8 = @splat(0xAA);
        try view.gather(&indices, .{ .base = &out, .offsets = &offsets }, offsets[5]);
        try testing.expectEqualSlices(u8, &.{ 4, 4, 4, 4, 4, 0, 2, 2, 2, 1, 1, 4, 4, 4, 4, 4 }, &out);
    }
}

test "a view refuses out-of-range indices before copying, and a stale view every gather, naming the shard" {
    var fixture = try Fixture.init();
    defer fixture.deinit();
    const view = try View.open(testing.allocator, &fixture.stores);
    defer view.close();
    var out: [8]u8 = @splat(0xAA);
    try testing.expectError(error.IndexOutOfRange, view.gather(&.{ 0, 5 }, .{ .base = &out, .stride = 1 }, 2));
    try testing.expectError(error.IndexOutOfRange, view.gather(&.{-1}, .{ .base = &out, .stride = 1 }, 1));
    try testing.expectEqualSlices(u8, &(@as([8]u8, @splat(0xAA))), &out);
    try fixture.stores[0].delete(&.{0});
    // A store before the last changed length: every later global index routes elsewhere now,
    // so the view refuses every gather (nothing copied) until the caller makes a new one.
    try testing.expectError(error.ViewStale, view.gather(&.{1}, .{ .base = &out, .stride = 2 }, 2));
    try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "shard 0 holds 1 records, not the 2") != null);
    try testing.expectError(error.ViewStale, view.gather(&.{0}, .{ .base = &out, .stride = 2 }, 2));
    try testing.expectEqualSlices(u8, &(@as([8]u8, @splat(0xAA))), &out);
    // Appends to the last store are seen at once.
    const fresh = try View.open(testing.allocator, &fixture.stores);
    defer fresh.close();
    try testing.expectEqual(@as(u64, 4), fresh.length());
    _ = try fixture.stores[2].append(.{ .data = "zz", .stride = 2, .count = 1 }, 0);
    try testing.expectEqual(@as(u64, 5), fresh.length());
    try fresh.gather(&.{4}, .{ .base = &out, .stride = 2 }, 2);
    try testing.expectEqualSlices(u8, "zz", out[0..2]);
    try testing.expectError(error.SizeMismatch, fresh.gather(&.{0}, .{ .base = &out, .stride = 1 }, 1));
}

test "a view routes by shift when every store but the last holds the same power of two" {
    var folder = testing.tmpDir(.{});
    defer folder.cleanup();
    const io = pool.io();
    // Three stores of 4, 4 and 3 records (by shift), then 4, 3, 4 (by search); record g holds
    // the byte g either way.
    for ([_][3]u8{ .{ 4, 4, 3 }, .{ 4, 3, 4 } }, 0..) |counts, case| {
        var stores: [3]*Store = undefined;
        var opened: usize = 0;
        defer for (stores[0..opened]) |s| s.close();
        var next: u8 = 0;
        for (counts, 0..) |count, k| {
            var name_buffer: [8]u8 = undefined;
            const name = try std.fmt.bufPrint(&name_buffer, "c{d}s{d}", .{ case, k });
            try folder.dir.createDir(io, name, .default_dir);
            var path_buffer: [96]u8 = undefined;
            const path = try std.fmt.bufPrint(&path_buffer, ".zig-cache/tmp/{s}/{s}", .{ folder.sub_path, name });
            stores[k] = try Store.open(testing.allocator, path, .{ .create = true });
            opened += 1;
            var data: [4]u8 = undefined;
            for (data[0..count]) |*b| {
                b.* = next;
                next += 1;
            }
            _ = try stores[k].append(.{ .data = &data, .stride = 1, .count = count }, 0);
        }
        const view = try View.open(testing.allocator, &stores);
        defer view.close();
        try testing.expectEqual(@as(?u6, if (case == 0) 2 else null), view.uniform_shift);
        var indices: [11]i64 = undefined;
        for (&indices, 0..) |*index, i| index.* = @intCast((i * 7) % 11);
        var out: [11]u8 = undefined;
        try view.gather(&indices, .{ .base = &out, .stride = 1 }, out.len);
        for (indices, out) |index, byte| try testing.expectEqual(@as(u8, @intCast(index)), byte);
        try testing.expectError(error.IndexOutOfRange, view.gather(&.{11}, .{ .base = &out, .stride = 1 }, 1));
    }
}

test "an empty first store never routes by shift" {
    try testing.expectEqual(@as(?u6, null), View.uniformShift(&.{ 0, 0, 10 }));
    try testing.expectEqual(@as(?u6, null), View.uniformShift(&.{ 0, 0 }));
    try testing.expectEqual(@as(?u6, null), View.uniformShift(&.{ 0, 0, 0 }));
    try testing.expectEqual(@as(?u6, 3), View.uniformShift(&.{ 0, 8, 16 }));
}

test "a view copies raw records of fixed size and decompresses the others, interleaved" {
    var folder = testing.tmpDir(.{});
    defer folder.cleanup();
    const io = pool.io();
    // Store k holds 200 records of 64 bytes: record j is k 32 times, then j 32 times. Store 1
    // compresses them, so positions routed there leave the pipelined copy for gatherRecord.
    const size = 64;
    var stores: [3]*Store = undefined;
    var opened: usize = 0;
    defer for (stores[0..opened]) |s| s.close();
    for (0..3) |k| {
        var name_buffer: [8]u8 = undefined;
        const name = try std.fmt.bufPrint(&name_buffer, "m{d}", .{k});
        try folder.dir.createDir(io, name, .default_dir);
        var path_buffer: [96]u8 = undefined;
        const path = try std.fmt.bufPrint(&path_buffer, ".zig-cache/tmp/{s}/{s}", .{ folder.sub_path, name });
        stores[k] = try Store.open(testing.allocator, path, .{ .create = true });
        opened += 1;
        var data: [200 * size]u8 = undefined;
        for (0..200) |j| {
            @memset(data[j * size ..][0 .. size / 2], @intCast(k));
            @memset(data[j * size + size / 2 ..][0 .. size / 2], @intCast(j));
        }
        const codec_tag: @import("../files/format.zig").Codec = if (k == 1) .zstd else .raw;
        _ = try stores[k].append(.{ .data = &data, .stride = size, .count = 200 }, @backingInt(codec_tag));
    }
    try testing.expectEqual(@import("../files/format.zig").Codec.zstd, stores[1].meta.table[0].codec);
    const view = try View.open(testing.allocator, &stores);
    defer view.close();
    // Positions 0..399 take raw records of stores 0 and 2 in turn (a run longer than a window
    // of the copy), 400..599 the compressed ones of store 1; then the batch again, shuffled.
    var indices: [1200]i64 = undefined;
    for (indices[0..600], 0..) |*index, i| {
        const j: i64 = @intCast(i / 2);
        index.* = if (i >= 400) @intCast(200 + i - 400) else if (i % 2 == 0) j else 400 + j;
    }
    for (indices[600..], 0..) |*index, i| index.* = @intCast((i * 37) % 600);
    var out: [1200 * size]u8 = undefined;
    try view.gather(&indices, .{ .base = &out, .stride = size }, out.len);
    for (indices, 0..) |index, i| {
        const slot = out[i * size ..][0..size];
        for (slot[0 .. size / 2]) |byte| try testing.expectEqual(@as(u8, @intCast(@divTrunc(index, 200))), byte);
        for (slot[size / 2 ..]) |byte| try testing.expectEqual(@as(u8, @intCast(@mod(index, 200))), byte);
    }
}

test "a view of no stores is refused" {
    try testing.expectError(error.InvalidArgument, View.open(testing.allocator, &.{}));
}

test "a view of one store twice locks it once per call and reads it at both positions" {
    var fixture = try Fixture.init();
    defer fixture.deinit();
    const stores = [_]*Store{ fixture.stores[0], fixture.stores[2], fixture.stores[0] };
    const view = try View.open(testing.allocator, &stores);
    defer view.close();
    try testing.expectEqualSlices(u32, &.{ 0, 1, 0 }, view.first_positions.?);
    var locked: [1]u64 = undefined;
    view.lockSet(&.{0b101}, &locked);
    try testing.expectEqual(@as(u64, 0b001), locked[0]);
    view.lockSet(&.{0b110}, &locked);
    try testing.expectEqual(@as(u64, 0b011), locked[0]);
    // Globals 0, 1 and 5, 6 are the first store's records ([0] and [1, 1]) at both its
    // positions; 2 is the last store's first record ([2, 2, 2]).
    const indices = [_]i64{ 6, 0, 5, 2 };
    var lengths: [4]u64 = undefined;
    try view.recordLengths(&indices, &lengths);
    try testing.expectEqualSlices(u64, &.{ 2, 1, 1, 3 }, &lengths);
    var offsets: [5]u64 = .{ 0, 2, 3, 4, 7 };
    var out: [7]u8 = undefined;
    try view.gather(&indices, .{ .base = &out, .offsets = &offsets }, out.len);
    try testing.expectEqualSlices(u8, &.{ 1, 1, 0, 0, 2, 2, 2 }, &out);
}

test "a view of distinct stores has no first positions" {
    var fixture = try Fixture.init();
    defer fixture.deinit();
    const view = try View.open(testing.allocator, &fixture.stores);
    defer view.close();
    try testing.expect(view.first_positions == null);
}

test "a view whose routing was checked still refuses a delete or an append before its last store" {
    var fixture = try Fixture.init();
    defer fixture.deinit();
    const view = try View.open(testing.allocator, &fixture.stores);
    defer view.close();
    var out: [8]u8 = @splat(0xAA);
    // The first call reads every length and remembers the generation; the second reads none.
    try view.gather(&.{4}, .{ .base = &out, .stride = 5 }, 5);
    try testing.expectEqual(length_generation.current(), view.routing_checked.load(.acquire));
    try view.gather(&.{4}, .{ .base = &out, .stride = 5 }, 5);
    // A record appended to the first store moves every later global index: refused, as it was
    // before the generation, and the fast path is off until the lengths match again.
    _ = try fixture.stores[0].append(.{ .data = "q", .stride = 1, .count = 1 }, 0);
    try testing.expectError(error.ViewStale, view.gather(&.{4}, .{ .base = &out, .stride = 5 }, 5));
    try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "shard 0 holds 3 records, not the 2") != null);
    try testing.expect(view.routing_checked.load(.acquire) != length_generation.current());
    const fresh = try View.open(testing.allocator, &fixture.stores);
    defer fresh.close();
    try fresh.gather(&.{5}, .{ .base = &out, .stride = 5 }, 5);
    try testing.expectEqualSlices(u8, &.{ 4, 4, 4, 4, 4 }, out[0..5]);
    try testing.expectEqual(length_generation.current(), fresh.routing_checked.load(.acquire));
    // A delete through the same handle, after the view has checked: refused on every call,
    // whichever stores the batch touches (here only the last).
    try fixture.stores[0].delete(&.{2});
    try testing.expectError(error.ViewStale, fresh.gather(&.{5}, .{ .base = &out, .stride = 5 }, 5));
    try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "shard 0 holds 2 records, not the 3") != null);
    try testing.expectError(error.ViewStale, fresh.gather(&.{0}, .{ .base = &out, .stride = 1 }, 1));
}

test "a view still reads the same records after a compaction of a store before its last" {
    var fixture = try Fixture.init();
    defer fixture.deinit();
    try fixture.stores[0].delete(&.{0}); // leaves a hole for the compaction to close
    const view = try View.open(testing.allocator, &fixture.stores);
    defer view.close();
    var out: [8]u8 = @splat(0xAA);
    try view.gather(&.{ 0, 3 }, .{ .base = &out, .offsets = &.{ 0, 2, 7 } }, 7);
    try testing.expectEqualSlices(u8, &.{ 1, 1, 4, 4, 4, 4, 4 }, out[0..7]);
    const checked = view.routing_checked.load(.acquire);
    // Compaction moves bytes, never a record's index or a store's length: the view is not
    // stale, but the compaction bumped the generation, so the next call checks every length.
    try fixture.stores[0].compact();
    try testing.expect(length_generation.current() != checked);
    @memset(&out, 0xAA);
    try view.gather(&.{ 0, 3 }, .{ .base = &out, .offsets = &.{ 0, 2, 7 } }, 7);
    try testing.expectEqualSlices(u8, &.{ 1, 1, 4, 4, 4, 4, 4 }, out[0..7]);
    try testing.expectEqual(length_generation.current(), view.routing_checked.load(.acquire));
}

test "a view never trusts the generation for a store its handle does not guard, and sees another handle's delete" {
    var fixture = try Fixture.init();
    defer fixture.deinit();
    const view = try View.open(testing.allocator, &fixture.stores);
    defer view.close();
    var out: [8]u8 = @splat(0xAA);
    try view.gather(&.{3}, .{ .base = &out, .stride = 4 }, 4);
    try testing.expectEqual(length_generation.current(), view.routing_checked.load(.acquire));
    // While the view's handle of store 0 holds open.lock shared, another handle (in this
    // process, or another) cannot delete from it.
    var path_buffer: [96]u8 = undefined;
    const path = try std.fmt.bufPrint(&path_buffer, ".zig-cache/tmp/{s}/s0", .{fixture.tmp.sub_path});
    const other = try Store.open(testing.allocator, path, .{});
    defer other.close();
    try testing.expectError(error.StoreLocked, other.delete(&.{0}));
    try view.gather(&.{3}, .{ .base = &out, .stride = 4 }, 4);
    // What a forked child's handle is until its first call on the store (store.afterForkChild
    // for store 0 alone): no lock on open.lock, so another process could delete from it with
    // no bump this process sees. Calls that leave store 0 alone keep it unguarded: each reads
    // every length, and none trusts the generation.
    fixture.stores[0].locks.forgetAfterFork();
    length_generation.bump();
    try testing.expect(!fixture.stores[0].locks.guardsLength());
    for (0..2) |_| {
        try view.gather(&.{3}, .{ .base = &out, .stride = 4 }, 4);
        try testing.expectEqualSlices(u8, &.{ 3, 3, 3, 3 }, out[0..4]);
        try testing.expect(view.routing_checked.load(.acquire) != length_generation.current());
    }
    // The other handle now has the store to itself: its delete runs, and the view refuses.
    try other.delete(&.{0});
    try testing.expectError(error.ViewStale, view.gather(&.{3}, .{ .base = &out, .stride = 4 }, 4));
    try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "shard 0 holds 1 records, not the 2") != null);
}
