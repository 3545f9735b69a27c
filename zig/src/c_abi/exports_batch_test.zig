//! The exports, continued: the ABI version and status names, open flags that exclude each
//! other, calls on several stores locking in one order, record sums, padding a packed batch,
//! and padded gathers.
const std = @import("std");
const testing = std.testing;
const Status = @import("../base/status.zig").Status;
const abi_types = @import("abi_types.zig");
const abi_version = @import("exports.zig").abi_version;
const c = @import("c_caller.zig");

test "abi basics" {
    try testing.expectEqual(abi_version, c.lx_abi_version());
    try testing.expectEqualStrings("LX_IO", std.mem.span(c.lx_status_name(12)));
    try testing.expectEqualStrings("unknown", std.mem.span(c.lx_status_name(99)));
    try testing.expectEqualStrings("unknown", std.mem.span(c.lx_status_name(-1)));
}

test "lx_store_open refuses create together with read-only, both verify flags, and unknown flags" {
    const flags = abi_types;
    var out: ?*c.LxStore = undefined;
    const create_read_only = flags.open_create | flags.open_read_only;
    try testing.expectEqual(Status.invalid_argument, c.lx_store_open(".", create_read_only, &out));
    try testing.expect(out == null);
    try testing.expectEqualStrings(
        "lx_store_open: LX_OPEN_CREATE and LX_OPEN_READ_ONLY exclude each other",
        std.mem.span(c.lx_last_error()),
    );
    try testing.expectEqual(Status.invalid_argument, c.lx_store_open(".", 32, &out));
    const both_verify = flags.open_verify_all | flags.open_verify_none;
    try testing.expectEqual(Status.invalid_argument, c.lx_store_open(".", both_verify, &out));
    try testing.expectEqualStrings(
        "lx_store_open: LX_OPEN_VERIFY_ALL and LX_OPEN_VERIFY_NONE together",
        std.mem.span(c.lx_last_error()),
    );
    try testing.expectEqualStrings("LX_STORE_LOCKED", std.mem.span(c.lx_status_name(15)));
    try testing.expectEqualStrings("LX_READ_ONLY", std.mem.span(c.lx_status_name(16)));
}

/// One thread of the lock-order race: repeats one call until told to stop, counting rounds.
const Racer = struct {
    stop: *std.atomic.Value(bool),
    finished: *std.atomic.Value(u32),
    failures: *std.atomic.Value(u32),
    rounds: u64 = 0,
    call: Call,

    const Call = union(enum) {
        delete: [2]?*c.LxStore,
        view: *c.LxView,
        streams: [2]c.LxGatherStream,
    };

    fn run(racer: *Racer) void {
        defer _ = racer.finished.fetchAdd(1, .release);
        const indices = [_]i64{ 1, 12 };
        const none = [_]u64{ 0, 0, 0 };
        while (!racer.stop.load(.acquire)) : (racer.rounds += 1) {
            var out: [8]u8 = undefined;
            const result = switch (racer.call) {
                // No index: the call still takes both stores exclusively, and changes nothing.
                .delete => |*pair| c.lx_stores_delete(pair, 2, null, &none),
                .view => |view| c.lx_view_gather_fixed(view, &indices, 2, &out, 4),
                .streams => |*pair| c.lx_store_gather_streams(&indices, 1, pair, 2),
            };
            if (result != .ok) _ = racer.failures.fetchAdd(1, .monotonic);
        }
    }
};

test "multi-store calls lock in one order whatever order they are given: no deadlock" {
    var a: c.Fixture = undefined;
    try a.init();
    var b: c.Fixture = undefined;
    try b.init();
    var forward: ?*c.LxView = null;
    var backward: ?*c.LxView = null;
    const ab = [_]*c.LxStore{ a.store, b.store };
    const ba = [_]*c.LxStore{ b.store, a.store };
    try testing.expectEqual(Status.ok, c.lx_view_open(&ab, 2, &forward));
    try testing.expectEqual(Status.ok, c.lx_view_open(&ba, 2, &backward));
    var out_a: [4]u8 = undefined;
    var out_b: [4]u8 = undefined;
    const stream_a: c.LxGatherStream = .{
        .store = a.store,
        .out = &out_a,
        .record_size = 4,
        .out_bytes = 4,
    };
    const stream_b: c.LxGatherStream = .{
        .store = b.store,
        .out = &out_b,
        .record_size = 4,
        .out_bytes = 4,
    };
    var stop: std.atomic.Value(bool) = .init(false);
    var finished: std.atomic.Value(u32) = .init(0);
    var failures: std.atomic.Value(u32) = .init(0);
    const calls = [_]Racer.Call{
        .{ .delete = .{ a.store, b.store } },
        .{ .delete = .{ b.store, a.store } },
        .{ .view = forward.? },
        .{ .view = backward.? },
        .{ .streams = .{ stream_a, stream_b } },
        .{ .streams = .{ stream_b, stream_a } },
    };
    var racers: [calls.len]Racer = undefined;
    for (&racers, calls) |*racer, call| {
        racer.* = .{ .stop = &stop, .finished = &finished, .failures = &failures, .call = call };
    }
    var threads: [racers.len]std.Thread = undefined;
    for (&threads, &racers) |*thread, *racer| {
        thread.* = try std.Thread.spawn(.{}, Racer.run, .{racer});
    }
    // The watchdog: race for a second, then give the racers ten seconds to notice the stop.
    const io = @import("../os/pool.zig").io();
    io.sleep(.fromSeconds(1), .awake) catch {};
    stop.store(true, .release);
    var waited_ms: u32 = 0;
    while (finished.load(.acquire) < racers.len and waited_ms < 10_000) : (waited_ms += 10) {
        io.sleep(.fromMilliseconds(10), .awake) catch {};
    }
    if (finished.load(.acquire) < racers.len) {
        // Deadlocked: the stuck threads keep the stores and views, which are left open.
        for (threads) |thread| thread.detach();
        const blocked = racers.len - finished.load(.acquire);
        std.debug.print("deadlock: {d} of {d} racers blocked\n", .{ blocked, racers.len });
        return error.Deadlock;
    }
    for (threads) |thread| thread.join();
    c.lx_view_close(forward);
    c.lx_view_close(backward);
    b.deinit();
    a.deinit();
    try testing.expectEqual(@as(u32, 0), failures.load(.monotonic));
    for (racers) |racer| try testing.expect(racer.rounds > 0);
}

test "lx_record_sums gives sums.zr's value for each record and refuses bad ranges, codecs and NULLs, writing nothing" {
    const checksum = @import("../codec/checksum.zig");
    const format = @import("../files/format.zig");
    const bytes = "abcdefghijklmnopqrstuvwxyz";
    const starts = [_]u64{ 0, 3, 26 };
    const stored = [_]u32{ 3, 20, 0 };
    const logic = [_]u32{ 3, 99, 0 };
    const codecs = [_]u8{ 0, 1, 2 };
    var out = [_]u32{ 7, 7, 7 };
    try testing.expectEqual(Status.ok, c.lx_record_sums(bytes, bytes.len, &starts, &stored, &logic, &codecs, 3, &out));
    try testing.expectEqual(checksum.recordSum(bytes[0..3], 3, .raw), out[0]);
    try testing.expectEqual(checksum.recordSum(bytes[3..23], 99, .zstd), out[1]);
    try testing.expectEqual(checksum.recordSum(bytes[26..26], 0, format.Codec.zstd_dict), out[2]);
    // Nothing is written when a call is refused.
    out = .{ 7, 7, 7 };
    const past = [_]u32{ 3, 24, 0 };
    try testing.expectEqual(Status.invalid_argument, c.lx_record_sums(bytes, bytes.len, &starts, &past, &logic, &codecs, 3, &out));
    const unknown = [_]u8{ 0, 9, 0 };
    try testing.expectEqual(Status.invalid_argument, c.lx_record_sums(bytes, bytes.len, &starts, &stored, &logic, &unknown, 3, &out));
    const beyond = [_]u64{ 0, 3, 27 };
    try testing.expectEqual(Status.invalid_argument, c.lx_record_sums(bytes, bytes.len, &beyond, &stored, &logic, &codecs, 3, &out));
    try testing.expectEqual(Status.invalid_argument, c.lx_record_sums(null, bytes.len, &starts, &stored, &logic, &codecs, 3, &out));
    try testing.expectEqual(Status.invalid_argument, c.lx_record_sums(bytes, bytes.len, &starts, &stored, &logic, &codecs, 3, null));
    try testing.expectEqualSlices(u32, &.{ 7, 7, 7 }, &out);
    // No records: nothing to check, NULLs included.
    try testing.expectEqual(Status.ok, c.lx_record_sums(null, 0, null, null, null, null, 0, null));
}

test "lx_batch_pad pads a packed batch and refuses NULLs, overflows, small buffers, bad offsets and overlaps, writing nothing" {
    // Rows of 2 bytes: records of 1, 3 and 0 rows padded to 2 rows (the second cut to 2).
    const values = [_]u8{ 1, 2, 3, 4, 5, 6, 7, 8 };
    const cu = [_]i32{ 0, 1, 4, 4 };
    const row = [_]u8{ 0xAB, 0xCD };
    var out: [3 * 2 * 2]u8 = @splat(0xEE);
    var mask: [3 * 2]u8 = @splat(0xEE);
    try testing.expectEqual(Status.ok, c.lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len));
    try testing.expectEqualSlices(u8, &.{ 1, 2, 0xAB, 0xCD, 3, 4, 5, 6, 0xAB, 0xCD, 0xAB, 0xCD }, &out);
    try testing.expectEqualSlices(u8, &.{ 1, 0, 1, 1, 0, 0 }, &mask);
    @memset(&out, 0xEE);
    @memset(&mask, 0xEE);
    const big: u64 = 1 << 40;
    const decreasing = [_]i32{ 0, 3, 1, 4 };
    const negative = [_]i32{ -1, 1, 4, 4 };
    const past = [_]i32{ 0, 1, 4, 5 };
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, 0, &row, 2, &out, out.len, &mask, mask.len), "row_size is 0");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, 2, null, 2, &out, out.len, &mask, mask.len), "pad_row is NULL");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, null, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "cu_seqlens is NULL");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(null, values.len, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "values is NULL");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, null, out.len, &mask, mask.len), "out is NULL");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, &out, out.len, null, mask.len), "mask is NULL");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, std.math.maxInt(u64), 2, &row, 2, &out, out.len, &mask, mask.len), "overflows the address space");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, 2, &row, std.math.maxInt(u64), &out, out.len, &mask, mask.len), "count 3 * length");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, big, &row, big, &out, out.len, &mask, mask.len), "* row_size");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, &out, out.len - 1, &mask, mask.len), "out holds 11 bytes, the padded batch needs 12");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len - 1), "mask holds 5 bytes");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &decreasing, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "decrease at 2 (3 then 1)");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &negative, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "cu_seqlens[0] is -1");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &past, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "cu_seqlens[3] is 5, past the 4 rows");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len - 1, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "past the 3 rows");
    const top: [*]const u8 = @ptrFromInt(std.math.maxInt(usize) - 3);
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(top, values.len, &cu, 3, 2, &row, 2, &out, out.len, &mask, mask.len), "runs past the address space");
    try testing.expectEqualSlices(u8, &@as([12]u8, @splat(0xEE)), &out);
    try testing.expectEqualSlices(u8, &@as([6]u8, @splat(0xEE)), &mask);
    // Writes that overlap each other or a read.
    var scratch: [32]u8 = @splat(0xEE);
    @memcpy(scratch[0..8], &values);
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, 2, &row, 2, scratch[0..], 12, scratch[8..], 6), "out and mask overlap");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(scratch[0..], 8, &cu, 3, 2, &row, 2, scratch[4..], 12, &mask, mask.len), "out overlaps values");
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, &cu, 3, 2, scratch[20..], 2, &out, out.len, scratch[16..], 6), "mask overlaps pad_row");
    var cu_bytes: [16]u8 align(4) = @bitCast(cu);
    const cu_in_out: [*]const i32 = @ptrCast(&cu_bytes);
    try c.expectRefused(.invalid_argument, c.lx_batch_pad(&values, values.len, cu_in_out, 3, 2, &row, 2, &cu_bytes, 12, &mask, mask.len), "out overlaps cu_seqlens");
    try testing.expectEqualSlices(u8, &@as([24]u8, @splat(0xEE)), scratch[8..]);
    try testing.expectEqualSlices(u8, &values, scratch[0..8]);
    try testing.expectEqualSlices(u8, &@as([6]u8, @splat(0xEE)), &mask);
    // Nothing to write: empty buffers may be NULL.
    const empty = [_]i32{ 0, 0 };
    try testing.expectEqual(Status.ok, c.lx_batch_pad(null, 0, &empty, 1, 2, &row, 0, null, 0, null, 0));
    try testing.expectEqual(Status.ok, c.lx_batch_pad(null, 0, &cu, 0, 2, &row, 5, null, 0, null, 0));
}

test "padded gathers: records straight into their rows, cut, padded and masked in one call; bad arguments refused, nothing written" {
    var f: c.Fixture = undefined;
    try f.init();
    defer f.deinit();
    const s = f.store;
    // Records 10 and 11: 3 rows and 1 row of 2 bytes, zstd-compressed (10 is cut to 2 rows below).
    const data = [_]u8{ 1, 2, 3, 4, 5, 6, 7, 8 };
    var first: u64 = 0;
    try testing.expectEqual(Status.ok, c.lx_store_append(s, &data, &[_]u64{ 0, 6, 8 }, 2, 1, &first));
    var indices: [3]i64 = .{ 10, 2, 11 };
    const pad_row = [_]u8{ 0xF0, 0x0F };
    const lengths = [_]u64{ 2, 4 };
    var out: [3 * 4 * 2]u8 align(8) = @splat(0xEE);
    var mask: [3 * 4]u8 = @splat(0xEE);
    var rows: [3]u64 = @splat(77);
    var length: u64 = 77;
    const untouched = struct {
        fn check(o: []const u8, m: []const u8, r: []const u64, l: u64) !void {
            for (o) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
            for (m) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
            for (r) |row| try testing.expectEqual(@as(u64, 77), row);
            try testing.expectEqual(@as(u64, 77), l);
        }
    }.check;
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(null, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "store is NULL");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, null, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "indices is NULL");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 0, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "row_size is 0");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, null, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "pad_row is NULL");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, null, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "lengths is NULL");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &[_]u64{ 4, 4 }, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "do not increase");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &[_]u64{0}, 1, 0, &out, out.len, &mask, mask.len, &rows, &length), "lengths[0] is 0");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 6, &out, out.len, &mask, mask.len, &rows, &length), "flags 6");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, null, 0, 1, &out, out.len, &mask, mask.len, &rows, &length), "needs lengths");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, null, out.len, &mask, mask.len, &rows, &length), "out is NULL");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, null, mask.len, &rows, &length), "mask is NULL");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, null, &length), "out_rows is NULL");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, null), "out_length is NULL");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, c.huge, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "overflow");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &[_]u64{c.huge}, 1, 0, &out, out.len, &mask, mask.len, &rows, &length), "overflows");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, c.huge, &mask, mask.len, &rows, &length), "address space");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, out[4..].ptr, 4, &rows, &length), "out overlaps mask");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, @ptrCast(@alignCast(&out)), &length), "out overlaps out_rows");
    try untouched(&out, &mask, &rows, length);
    try c.expectRefused(.invalid_argument, c.lx_store_gather_padded(s, &indices, 3, 2, out[0..2].ptr, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "out overlaps pad_row");
    try untouched(&out, &mask, &rows, length);
    var outside: [3]i64 = .{ 0, 1, 12 };
    try c.expectRefused(.index_out_of_range, c.lx_store_gather_padded(s, &outside, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "out of range");
    try untouched(&out, &mask, &rows, length);
    // A record longer than every length without truncation: only the rows and the longest.
    try c.expectRefused(.size_mismatch, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 1, 0, &out, out.len, &mask, mask.len, &rows, &length), "more than the longest padded length 2");
    try testing.expectEqual(@as(u64, 3), length);
    try testing.expectEqualSlices(u64, &.{ 3, 2, 1 }, &rows);
    // Buffers too small for the length picked: only the rows and the length.
    length = 77;
    try c.expectRefused(.size_mismatch, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, 23, &mask, mask.len, &rows, &length), "need 24");
    try testing.expectEqual(@as(u64, 4), length);
    try untouched(&out, &mask, &.{}, 77);
    // Rows that do not divide the records: corrupt, nothing but rows written.
    try c.expectRefused(.corrupt, c.lx_store_gather_padded(s, &indices, 3, 4, &[_]u8{ 0, 0, 0, 0 }, null, 0, 0, &out, out.len, &mask, mask.len, &rows, &length), "whole number of 4-byte rows");
    try untouched(&out, &mask, &.{}, 77);

    // Padded to 4 (the bucket holding 3 rows).
    try testing.expectEqual(Status.ok, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqual(@as(u64, 4), length);
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3, 4, 5, 6, 0xF0, 0x0F, 2, 2, 2, 2, 0xF0, 0x0F, 0xF0, 0x0F, 7, 8, 0xF0, 0x0F, 0xF0, 0x0F, 0xF0, 0x0F }, &out);
    try testing.expectEqualSlices(u8, &.{ 1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0 }, &mask);
    // Cut to 2 rows (the compressed record 10 is decompressed aside, its first rows kept), in
    // a larger buffer: nothing past the batch is written.
    @memset(&out, 0xEE);
    @memset(&mask, 0xEE);
    try testing.expectEqual(Status.ok, c.lx_store_gather_padded(s, &indices, 3, 2, &pad_row, &lengths, 1, 1, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqual(@as(u64, 2), length);
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3, 4, 2, 2, 2, 2, 7, 8, 0xF0, 0x0F }, out[0..12]);
    try testing.expectEqualSlices(u8, &.{ 1, 1, 1, 1, 1, 0 }, mask[0..6]);
    for (out[12..] ++ mask[6..]) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    // A raw record cut to 1 row, padded to the longest without lengths, and no records.
    var raw_first: [2]i64 = .{ 3, 2 };
    try testing.expectEqual(Status.ok, c.lx_store_gather_padded(s, &raw_first, 2, 2, &pad_row, &[_]u64{1}, 1, 1, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqualSlices(u8, &.{ 3, 3, 2, 2 }, out[0..4]);
    try testing.expectEqual(Status.ok, c.lx_store_gather_padded(s, &raw_first, 2, 1, &[_]u8{9}, null, 0, 0, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqual(@as(u64, 4), length);
    try testing.expectEqual(Status.ok, c.lx_store_gather_padded(s, null, 0, 2, &pad_row, &lengths, 2, 0, null, 0, null, 0, null, &length));
    try testing.expectEqual(@as(u64, 2), length);

    // A view over the store twice: global index 22 is record 10 of the second.
    var view: ?*c.LxView = null;
    const store_list = [_]*c.LxStore{ s, s };
    try testing.expectEqual(Status.ok, c.lx_view_open(&store_list, 2, &view));
    defer c.lx_view_close(view);
    var global: [3]i64 = .{ 22, 2, 11 };
    @memset(&out, 0xEE);
    try c.expectRefused(.invalid_argument, c.lx_view_gather_padded(null, &global, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "view is NULL");
    try c.expectRefused(.size_mismatch, c.lx_view_gather_padded(view, &global, 3, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, 3, &rows, &length), "need 24 and 12");
    for (out) |byte| try testing.expectEqual(@as(u8, 0xEE), byte);
    try testing.expectEqual(Status.ok, c.lx_view_gather_padded(view, &global, 3, 2, &pad_row, &lengths, 2, 1, &out, out.len, &mask, mask.len, &rows, &length));
    try testing.expectEqual(@as(u64, 4), length);
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3, 4, 5, 6, 0xF0, 0x0F, 2, 2, 2, 2, 0xF0, 0x0F, 0xF0, 0x0F, 7, 8, 0xF0, 0x0F, 0xF0, 0x0F, 0xF0, 0x0F }, &out);
    var far: [1]i64 = .{24};
    try c.expectRefused(.index_out_of_range, c.lx_view_gather_padded(view, &far, 1, 2, &pad_row, &lengths, 2, 0, &out, out.len, &mask, mask.len, &rows, &length), "out of range");
}
