//! Tests of gather (store_gather.zig, raw_copy.zig, gather_streams.zig) through the store's
//! Zig API: threads beside an appender, the pipelined copy, runs, the advisors and policies,
//! index checks, and several streams at the same indices.
const std = @import("std");
const diagnostic = @import("../base/diagnostic.zig");
const testing = std.testing;
const Io = std.Io;
const store_mod = @import("store.zig");
const index_check = @import("../batch/index_check.zig");
const format = @import("../files/format.zig");
const limits = @import("../base/limits.zig");
const pool = @import("../os/pool.zig");
const raw_copy = @import("raw_copy.zig");
const journal = @import("../files/journal.zig");
const Store = store_mod.Store;
const Records = store_mod.Records;
const fixtures = @import("store_test.zig");
const Folder = fixtures.Folder;
const Batch = fixtures.Batch;
const fillRecord = fixtures.fillRecord;
const sizeSmall = fixtures.sizeSmall;
const expectRecord = fixtures.expectRecord;

const Reader = struct {
    store: *Store,
    seed: u64,
    failed: *std.atomic.Value(bool),
    gathered: u64 = 0,

    fn run(reader: *Reader) void {
        reader.loop() catch reader.failed.store(true, .release);
    }

    fn loop(reader: *Reader) !void {
        var prng = std.Random.DefaultPrng.init(reader.seed);
        var indices: [16]i64 = undefined;
        var lengths: [16]u64 = undefined;
        var offsets: [17]u64 = undefined;
        const buffer = try testing.allocator.alloc(u8, 16 * 3000);
        defer testing.allocator.free(buffer);
        const expected = try testing.allocator.alloc(u8, 3000);
        defer testing.allocator.free(expected);
        for (0..150) |_| {
            const length = reader.store.length();
            for (&indices) |*index| index.* = @intCast(prng.random().uintLessThan(u64, length));
            try reader.store.recordLengths(&indices, &lengths);
            offsets[0] = 0;
            for (0..16) |i| offsets[i + 1] = offsets[i] + lengths[i];
            try reader.store.gather(&indices, .{ .base = buffer.ptr, .offsets = &offsets }, offsets[16]);
            for (indices, 0..) |index, i| {
                const id: u64 = @intCast(index);
                try testing.expectEqual(@as(u64, sizeSmall(id)), lengths[i]);
                fillRecord(expected[0..lengths[i]], id, false);
                try testing.expectEqualSlices(u8, expected[0..lengths[i]], buffer[offsets[i]..offsets[i + 1]]);
            }
            reader.gathered += 16;
        }
    }
};

test "gathers from several threads while another thread appends see exact records" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    var initial = try Batch.init(0, 100, &sizeSmall, false);
    defer initial.deinit();
    _ = try store.append(initial.records(), 1);
    var failed: std.atomic.Value(bool) = .init(false);
    var readers: [3]Reader = undefined;
    var threads: [3]std.Thread = undefined;
    for (&readers, &threads, 0..) |*reader, *thread, i| {
        reader.* = .{ .store = store, .seed = i, .failed = &failed };
        thread.* = try std.Thread.spawn(.{}, Reader.run, .{reader});
    }
    for (0..40) |round| {
        var batch = try Batch.init(store.length(), 20, &sizeSmall, false);
        defer batch.deinit();
        _ = try store.append(batch.records(), @intCast(round % 2));
    }
    for (threads) |thread| thread.join();
    try testing.expect(!failed.load(.acquire));
    try testing.expectEqual(@as(u64, 900), store.length());
    for (readers) |reader| try testing.expectEqual(@as(u64, 150 * 16), reader.gathered);
}

test "fixed-stride gathers: raw records take the pipelined copy, every other record the general path" {
    // Strides with a copy of compile-time length (8, 64) and without (1000); batches longer
    // than a copy group, records in random order, raw and zstd records interleaved.
    for ([_]usize{ 8, 64, 1000 }) |stride| {
        var folder = Folder.init();
        defer folder.deinit();
        const store = try folder.open();
        defer store.close();
        const count = 300;
        const data = try testing.allocator.alloc(u8, count * stride);
        defer testing.allocator.free(data);
        for (0..count) |id| fillRecord(data[id * stride ..][0..stride], id, id % 3 != 0);
        // Records 0..149 raw, 150..299 zstd (the compressible ones shrink, the noisy stay raw).
        _ = try store.append(.{ .data = data.ptr, .stride = stride, .count = 150 }, @backingInt(format.Codec.raw));
        _ = try store.append(.{ .data = data[150 * stride ..].ptr, .stride = stride, .count = 150 }, @backingInt(format.Codec.zstd));
        var indices: [257]i64 = undefined;
        var prng = std.Random.DefaultPrng.init(stride);
        for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, count);
        const got = try testing.allocator.alloc(u8, indices.len * stride);
        defer testing.allocator.free(got);
        // The first gather maps the chunk on the general path; the second finds it mapped.
        for (0..2) |_| {
            @memset(got, 0xAA);
            try store.gather(&indices, .{ .base = got.ptr, .stride = stride }, got.len);
            for (indices, 0..) |index, i| {
                const id: usize = @intCast(index);
                try testing.expectEqualSlices(u8, data[id * stride ..][0..stride], got[i * stride ..][0..stride]);
            }
        }
        // A stride that differs from the records' size is refused by the general path's check.
        const short = stride - 1;
        const refused = store.gather(indices[0..1], .{ .base = got.ptr, .stride = short }, short);
        try testing.expectError(error.SizeMismatch, refused);
        try testing.expect(std.mem.indexOf(u8, diagnostic.text(), "destination slot") != null);
    }
}

test "ragged gathers: raw records take the pipelined copy, empty and compressed ones the general path" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    // Records 0..299 raw and 300..399 zstd, of sizeSmall's 0 to 2999 bytes (record 0 is empty),
    // some noisy (they stay raw inside the zstd append) and some compressible.
    const count = 400;
    var raw = try Batch.init(0, 300, &sizeSmall, true);
    defer raw.deinit();
    _ = try store.append(raw.records(), @backingInt(format.Codec.raw));
    var zstd = try Batch.init(300, 100, &sizeSmall, false);
    defer zstd.deinit();
    _ = try store.append(zstd.records(), @backingInt(format.Codec.zstd));
    var indices: [600]i64 = undefined; // longer than a window of sources
    var prng = std.Random.DefaultPrng.init(38);
    for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, count);
    indices[0] = 0;
    indices[300] = 0;
    indices[1] = 5;
    var lengths: [indices.len]u64 = undefined;
    try store.recordLengths(&indices, &lengths);
    var offsets: [indices.len + 1]u64 = undefined;
    offsets[0] = 0;
    for (lengths, 0..) |length, i| offsets[i + 1] = offsets[i] + length;
    const got = try testing.allocator.alloc(u8, offsets[indices.len]);
    defer testing.allocator.free(got);
    const expected = try testing.allocator.alloc(u8, 3000);
    defer testing.allocator.free(expected);
    // The first gather maps the chunks on the general path; the second finds them mapped.
    for (0..2) |_| {
        @memset(got, 0xAA);
        try store.gather(&indices, .{ .base = got.ptr, .offsets = &offsets }, got.len);
        for (indices, 0..) |index, i| {
            const id: u64 = @intCast(index);
            try testing.expectEqual(@as(u64, sizeSmall(id)), lengths[i]);
            fillRecord(expected[0..lengths[i]], id, id < 300);
            try testing.expectEqualSlices(u8, expected[0..lengths[i]], got[offsets[i]..offsets[i + 1]]);
        }
    }
    // A slot one byte short is refused before any byte moves, by the check of every slot.
    const short = [_]u64{ 0, lengths[1] - 1 };
    @memset(got, 0xAA);
    try testing.expectError(error.SizeMismatch, store.gather(indices[1..2], .{ .base = got.ptr, .offsets = &short }, short[1]));
    try testing.expect(std.mem.allEqual(u8, got, 0xAA));
}

test "runs: learned on append and on open, relearned after delete and compact; gathers stay exact" {
    const runs_mod = @import("runs.zig");
    const block = runs_mod.block_records;
    const stride = 8;
    var folder = Folder.init();
    defer folder.deinit();
    // Two whole blocks and a partial one, appended in pieces that straddle block ends; then a
    // zstd batch of noisy 8-byte records, which zstd cannot shrink: stored raw, they complete
    // block 2's run and start block 3's.
    const count = 2 * block + 100;
    const data = try testing.allocator.alloc(u8, (count + block) * stride);
    defer testing.allocator.free(data);
    for (0..count + block) |id| fillRecord(data[id * stride ..][0..stride], id, true);
    const expected_after_appends = [_]u32{ stride, stride, stride, 0 };
    {
        const store = try folder.open();
        defer store.close();
        var first: usize = 0;
        for ([_]usize{ 1000, block, count - 1000 - block }) |piece| {
            _ = try store.append(.{ .data = data[first * stride ..].ptr, .stride = stride, .count = piece }, @backingInt(format.Codec.raw));
            first += piece;
        }
        for (expected_after_appends, 0..) |s, b| try testing.expectEqual(s, store.runs.stride(b));
        try testing.expectEqual(@as(u32, 100), store.runs.covered(2));
        _ = try store.append(.{ .data = data[count * stride ..].ptr, .stride = stride, .count = block }, @backingInt(format.Codec.zstd));
        try testing.expectEqual(@as(u32, block), store.runs.covered(2));
        try testing.expectEqual(@as(u32, 100), store.runs.covered(3));
    }
    const store = try folder.openExisting();
    defer store.close();
    for ([_]u32{ block, block, block, 100 }, 0..) |c, b| try testing.expectEqual(c, store.runs.covered(b));
    // Ids of the records at each index, as the store's operations move them.
    const ids = try testing.allocator.alloc(u64, count + block);
    defer testing.allocator.free(ids);
    for (ids, 0..) |*id, i| id.* = i;
    var length: usize = count + block;
    var prng = std.Random.DefaultPrng.init(11);
    for (0..3) |round| {
        var indices: [300]i64 = undefined;
        for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, @intCast(length));
        var got: [300 * stride]u8 = undefined;
        try store.gather(&indices, .{ .base = &got, .stride = stride }, got.len);
        for (indices, 0..) |index, i| {
            const id = ids[@intCast(index)];
            try testing.expectEqualSlices(u8, data[id * stride ..][0..stride], got[i * stride ..][0..stride]);
        }
        switch (round) {
            0 => {
                // Swap-last: record 5 (block 0) takes the last record's place; block 0's run
                // stops before it, block 3's before the record that left.
                try store.delete(&.{5});
                length -= 1;
                ids[5] = ids[length];
                for ([_]u32{ 5, block, block, 99 }, 0..) |c, b| try testing.expectEqual(c, store.runs.covered(b));
            },
            1 => {
                // Compaction packs records in physical order, so record 5, which took the
                // last record's bytes, stays out of sequence; the runs are learned again.
                try store.compact();
                for ([_]u32{ 5, block, block, 99 }, 0..) |c, b| try testing.expectEqual(c, store.runs.covered(b));
            },
            else => {},
        }
    }
}

test "gathers give the same bytes whether the advisors run them pooled or alone, streaming or cached, fetching either way" {
    // 256 records of 4 KiB per batch (1 MiB): enough for two runners on a machine with two
    // CPUs, and for streaming stores, so both advisors' warm-ups send batches both ways; every
    // batch is checked, and every other one lands one byte off alignment.
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    const stride = 4096;
    const count = 1024;
    const data = try testing.allocator.alloc(u8, count * stride);
    defer testing.allocator.free(data);
    for (0..count) |id| fillRecord(data[id * stride ..][0..stride], id, true);
    _ = try store.append(.{ .data = data.ptr, .stride = stride, .count = count }, @backingInt(format.Codec.raw));
    var indices: [256]i64 = undefined;
    const buffer = try testing.allocator.alloc(u8, indices.len * stride + 2);
    defer testing.allocator.free(buffer);
    var prng = std.Random.DefaultPrng.init(41);
    for (0..64) |batch| {
        for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, count);
        @memset(buffer, 0xAA);
        const got = buffer[batch % 2 ..][0 .. indices.len * stride];
        try store.gather(&indices, .{ .base = got.ptr, .stride = stride }, got.len);
        for (indices, 0..) |index, i| {
            const id: usize = @intCast(index);
            try testing.expectEqualSlices(u8, data[id * stride ..][0..stride], got[i * stride ..][0..stride]);
        }
        if (batch % 2 == 1) try testing.expectEqual(@as(u8, 0xAA), buffer[0]);
        try testing.expectEqual(@as(u8, 0xAA), buffer[buffer.len - 1]);
    }
    if (pool.cpus() > 1) {
        try testing.expectEqual(@as(u64, 64), store.gather_advisor.tickets.load(.monotonic));
        try testing.expect(store.gather_advisor.cost(.pooled) > 0);
        try testing.expect(store.gather_advisor.cost(.alone) > 0);
    }
    if (raw_copy.has_streaming_stores) {
        try testing.expectEqual(@as(u64, 64), store.copy_advisors.stores.tickets.load(.monotonic));
        try testing.expect(store.copy_advisors.stores.cost(.streaming) > 0);
        try testing.expect(store.copy_advisors.stores.cost(.cached) > 0);
        try testing.expectEqual(@as(u64, 64), store.copy_advisors.loads.tickets.load(.monotonic));
        try testing.expect(store.copy_advisors.loads.cost(.non_temporal) > 0);
        try testing.expect(store.copy_advisors.loads.cost(.temporal) > 0);
    } else {
        try testing.expectEqual(@as(u64, 0), store.copy_advisors.stores.tickets.load(.monotonic));
        try testing.expectEqual(@as(u64, 0), store.copy_advisors.loads.tickets.load(.monotonic));
    }
}

test "a fixed stores policy takes the stores advisor out of large raw gathers, with the same bytes" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    const stride = 4096; // 256 records make 1 MiB: a batch that may stream
    const count = 512;
    const data = try testing.allocator.alloc(u8, count * stride);
    defer testing.allocator.free(data);
    for (0..count) |id| fillRecord(data[id * stride ..][0..stride], id, true);
    _ = try store.append(.{ .data = data.ptr, .stride = stride, .count = count }, @backingInt(format.Codec.raw));
    var indices: [256]i64 = undefined;
    const got = try testing.allocator.alloc(u8, indices.len * stride);
    defer testing.allocator.free(got);
    var prng = std.Random.DefaultPrng.init(43);
    defer raw_copy.stores_policy.store(.auto, .monotonic);
    for ([_]raw_copy.StoresPolicy{ .streaming, .cached, .auto }) |policy| {
        raw_copy.stores_policy.store(policy, .monotonic);
        for (0..12) |_| {
            for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, count);
            @memset(got, 0xAA);
            try store.gather(&indices, .{ .base = got.ptr, .stride = stride }, got.len);
            for (indices, 0..) |index, i| {
                const id: usize = @intCast(index);
                try testing.expectEqualSlices(u8, data[id * stride ..][0..stride], got[i * stride ..][0..stride]);
            }
        }
        // Only `auto` asks the advisor (and only where streaming stores exist).
        const asked: u64 = if (policy == .auto and raw_copy.has_streaming_stores) 12 else 0;
        try testing.expectEqual(asked, store.copy_advisors.stores.tickets.load(.monotonic));
    }
}

fn sizeLarge(id: u64) usize {
    return 1000 + @as(usize, @intCast((id * 7919) % 6000));
}

test "large ragged gathers stream and fetch as the policies and advisors say, with the same bytes" {
    var folder = Folder.init();
    defer folder.deinit();
    const store = try folder.open();
    defer store.close();
    // 1,000 to 6,999-byte records (some under streaming_stride_min): 300 of them make about
    // 1.2 MiB, a batch that may stream, with odd lengths and odd destination offsets.
    const count = 400;
    var records = try Batch.init(0, count, &sizeLarge, true);
    defer records.deinit();
    _ = try store.append(records.records(), @backingInt(format.Codec.raw));
    var indices: [300]i64 = undefined;
    var lengths: [indices.len]u64 = undefined;
    var offsets: [indices.len + 1]u64 = undefined;
    const got = try testing.allocator.alloc(u8, indices.len * 7000);
    defer testing.allocator.free(got);
    const expected = try testing.allocator.alloc(u8, 7000);
    defer testing.allocator.free(expected);
    var prng = std.Random.DefaultPrng.init(44);
    defer raw_copy.stores_policy.store(.auto, .monotonic);
    for ([_]raw_copy.StoresPolicy{ .streaming, .cached, .auto }) |policy| {
        raw_copy.stores_policy.store(policy, .monotonic);
        for (0..12) |_| {
            for (&indices) |*index| index.* = prng.random().intRangeLessThan(i64, 0, count);
            try store.recordLengths(&indices, &lengths);
            offsets[0] = 0;
            for (lengths, 0..) |length, i| offsets[i + 1] = offsets[i] + length;
            @memset(got, 0xAA);
            try store.gather(&indices, .{ .base = got.ptr, .offsets = &offsets }, offsets[indices.len]);
            for (indices, 0..) |index, i| {
                const id: u64 = @intCast(index);
                fillRecord(expected[0..lengths[i]], id, true);
                try testing.expectEqualSlices(u8, expected[0..lengths[i]], got[offsets[i]..offsets[i + 1]]);
            }
            try testing.expect(std.mem.allEqual(u8, got[offsets[indices.len]..], 0xAA));
        }
        const asked: u64 = if (policy == .auto and raw_copy.has_streaming_stores) 12 else 0;
        try testing.expectEqual(asked, store.copy_advisors.stores.tickets.load(.monotonic));
    }
}

test "checkIndices: the first index outside 0 <= i < length is refused and named, wherever it is" {
    const length: u64 = 1000;
    var indices: [37]i64 = undefined;
    for (&indices, 0..) |*index, i| index.* = @intCast((i * 389) % length);
    indices[5] = 0;
    indices[6] = @intCast(length - 1);
    try index_check.checkIndices(&indices, length);
    try index_check.checkIndices(&.{}, 0);
    try testing.expectError(error.IndexOutOfRange, index_check.checkIndices(&.{0}, 0));
    const bad = [_]i64{ -1, std.math.minInt(i64), @intCast(length), @intCast(length + 1), std.math.maxInt(i64) };
    for (0..indices.len) |position| {
        const kept = indices[position];
        for (bad) |value| {
            indices[position] = value;
            try testing.expectError(error.IndexOutOfRange, index_check.checkIndices(&indices, length));
            var wanted_buffer: [96]u8 = undefined;
            const wanted = try std.fmt.bufPrint(&wanted_buffer, "index {d} (position {d})", .{ value, position });
            try testing.expect(std.mem.indexOf(u8, diagnostic.text(), wanted) != null);
        }
        indices[position] = kept;
    }
    try index_check.checkIndices(&indices, length);
}

const gather_streams = @import("gather_streams.zig");

/// A store in `folder` holding `count` records of `size` bytes, record i filled with byte
/// (i * 7 + salt), appended with `codec_tag`.
fn fixedStore(folder: *Folder, count: usize, size: usize, salt: u8, codec_tag: u8) !*Store {
    const store = try folder.open();
    errdefer store.close();
    const data = try testing.allocator.alloc(u8, count * size);
    defer testing.allocator.free(data);
    for (0..count) |i| @memset(data[i * size ..][0..size], @as(u8, @truncate(i * 7)) +% salt);
    _ = try store.append(.{ .data = data.ptr, .stride = size, .count = count }, codec_tag);
    return store;
}

fn expectFixedRecords(out: []const u8, size: usize, indices: []const i64, salt: u8) !void {
    for (indices, 0..) |index, i| {
        const want: u8 = @as(u8, @truncate(@as(u64, @intCast(index)) * 7)) +% salt;
        for (out[i * size ..][0..size]) |b| try testing.expectEqual(want, b);
    }
}

test "gather_streams: every stream gets its store's records at the same indices, large and small, raw and zstd, pooled or alone" {
    var images_folder = Folder.init();
    defer images_folder.deinit();
    var labels_folder = Folder.init();
    defer labels_folder.deinit();
    var masks_folder = Folder.init();
    defer masks_folder.deinit();
    const images = try fixedStore(&images_folder, 300, 12 * 1024, 3, 0);
    defer images.close();
    const labels = try fixedStore(&labels_folder, 300, 8, 101, 0);
    defer labels.close();
    const masks = try fixedStore(&masks_folder, 300, 64, 55, 1);
    defer masks.close();
    // 258 records, duplicates included: the pool splits the images.
    const pattern = [_]i64{ 299, 0, 17, 17, 150, 3 };
    var indices: [258]i64 = undefined;
    for (&indices, 0..) |*index, k| index.* = pattern[k % pattern.len];
    const image_out = try testing.allocator.alloc(u8, indices.len * 12 * 1024);
    defer testing.allocator.free(image_out);
    var label_out: [indices.len * 8]u8 = undefined;
    var mask_out: [indices.len * 64]u8 = undefined;
    for ([_]pool.Policy{ .always, .never, .auto }) |policy| {
        pool.policy.store(policy, .monotonic);
        defer pool.policy.store(.auto, .monotonic);
        @memset(image_out, 0);
        @memset(&label_out, 0);
        @memset(&mask_out, 0);
        const streams = [_]gather_streams.Stream{
            .{ .store = labels, .destination = .{ .base = &label_out, .stride = 8 }, .byte_count = label_out.len },
            .{ .store = images, .destination = .{ .base = image_out.ptr, .stride = 12 * 1024 }, .byte_count = image_out.len },
            .{ .store = masks, .destination = .{ .base = &mask_out, .stride = 64 }, .byte_count = mask_out.len },
        };
        try gather_streams.gather(&streams, &indices);
        try expectFixedRecords(image_out, 12 * 1024, &indices, 3);
        try expectFixedRecords(&label_out, 8, &indices, 101);
        try expectFixedRecords(&mask_out, 64, &indices, 55);
    }
}

test "gather_streams: the same store twice is locked once; a bad index or slot is refused before any byte moves" {
    var a_folder = Folder.init();
    defer a_folder.deinit();
    var b_folder = Folder.init();
    defer b_folder.deinit();
    const a = try fixedStore(&a_folder, 10, 16, 9, 0);
    defer a.close();
    const b = try fixedStore(&b_folder, 12, 8, 200, 0);
    defer b.close();
    var first: [3 * 16]u8 = @splat(0);
    var second: [3 * 16]u8 = @splat(0);
    const twice = [_]gather_streams.Stream{
        .{ .store = a, .destination = .{ .base = &first, .stride = 16 }, .byte_count = first.len },
        .{ .store = a, .destination = .{ .base = &second, .stride = 16 }, .byte_count = second.len },
    };
    try gather_streams.gather(&twice, &.{ 9, 0, 4 });
    try expectFixedRecords(&first, 16, &.{ 9, 0, 4 }, 9);
    try expectFixedRecords(&second, 16, &.{ 9, 0, 4 }, 9);

    // Index 11 is in b but past a's 10 records: refused, and neither destination is touched.
    var a_out: [2 * 16]u8 = @splat(0xEE);
    var b_out: [2 * 8]u8 = @splat(0xEE);
    const mixed = [_]gather_streams.Stream{
        .{ .store = b, .destination = .{ .base = &b_out, .stride = 8 }, .byte_count = b_out.len },
        .{ .store = a, .destination = .{ .base = &a_out, .stride = 16 }, .byte_count = a_out.len },
    };
    try testing.expectError(error.IndexOutOfRange, gather_streams.gather(&mixed, &.{ 1, 11 }));
    try testing.expectError(error.IndexOutOfRange, gather_streams.gather(&mixed, &.{ -1, 2 }));
    for (a_out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    for (b_out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    // Slots of 8 bytes for a's 16-byte records: refused before b's stream is copied.
    var short: [2 * 8]u8 = @splat(0xEE);
    const wrong = [_]gather_streams.Stream{
        .{ .store = b, .destination = .{ .base = &b_out, .stride = 8 }, .byte_count = b_out.len },
        .{ .store = a, .destination = .{ .base = &short, .stride = 8 }, .byte_count = short.len },
    };
    try testing.expectError(error.SizeMismatch, gather_streams.gather(&wrong, &.{ 1, 2 }));
    for (b_out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    for (short) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
}
