//! Tests of the sampler (sampler.zig, sampler_iid.zig, sampler_cyclic.zig): the golden sequences
//! (pinned from Python too, in tests/loading/test_sampler.py), validation, purity, the vector
//! paths against their definitions, bias, bijection and cycle coverage.
const std = @import("std");
const builtin = @import("builtin");
const sampler = @import("sampler.zig");
const sampler_iid = @import("sampler_iid.zig");
const sampler_cyclic = @import("sampler_cyclic.zig");
const Mode = sampler.Mode;
const Request = sampler.Request;
const length_max = sampler.length_max;
const golden_gamma = sampler.golden_gamma;
const mix64 = sampler.mix64;
const validate = sampler.validate;
const fill = sampler.fill;
const lanes = sampler_iid.lanes;
const mulWideV = sampler_iid.mulWideV;
const iidKey = sampler_iid.iidKey;
const iidDraw = sampler_iid.iidDraw;
const reduce = sampler_iid.reduce;
const fillIidVector = sampler_iid.fillIidVector;
const fillIidScalar = sampler_iid.fillIidScalar;
const Permutation = sampler_cyclic.Permutation;
const mix32 = sampler_cyclic.mix32;
const mix32KeyedV = sampler_cyclic.mix32KeyedV;
const set_bit_lanes = sampler_cyclic.set_bit_lanes;
const testing = std.testing;

fn req(mode: Mode, length: u64, batch_size: u64, seed: u64, step: u64) Request {
    return .{ .mode = @backingInt(mode), .length = length, .batch_size = batch_size, .seed = seed, .step = step };
}

/// fill() into a fresh slice owned by the testing allocator.
fn batch(r: Request) ![]i64 {
    const out = try testing.allocator.alloc(i64, @intCast(r.batch_size));
    errdefer testing.allocator.free(out);
    try fill(r, out);
    return out;
}

test "mix64 is SplitMix64's finaliser" {
    // The first output of SplitMix64 seeded with 0 (the published reference value).
    try testing.expectEqual(@as(u64, 0xe220a8397b1dcdaf), mix64(golden_gamma));
}

test "validate names every bad request" {
    try testing.expectEqual(@as(u64, 12), try validate(.{ .mode = 2, .length = 12, .batch_size = 4, .seed = 0, .step = 0, .shard_index = 2, .shard_count = 3 }));
    try testing.expectError(error.UnknownMode, validate(.{ .mode = 3, .length = 10, .batch_size = 1, .seed = 0, .step = 0 }));
    try testing.expectError(error.LengthZero, validate(req(.iid, 0, 1, 0, 0)));
    try testing.expectError(error.LengthTooLarge, validate(req(.iid, length_max + 1, 1, 0, 0)));
    try testing.expectEqual(@as(u64, 1), try validate(req(.iid, length_max, 1, 0, 0)));
    try testing.expectError(error.BatchSizeZero, validate(req(.sequential, 10, 0, 0, 0)));
    try testing.expectError(error.ShardCountZero, validate(.{ .mode = 0, .length = 10, .batch_size = 1, .seed = 0, .step = 0, .shard_count = 0 }));
    try testing.expectError(error.ShardIndexOutOfRange, validate(.{ .mode = 0, .length = 10, .batch_size = 1, .seed = 0, .step = 0, .shard_index = 2, .shard_count = 2 }));
    try testing.expectError(error.GlobalBatchTooLarge, validate(.{ .mode = 1, .length = 10, .batch_size = 1 << 40, .seed = 0, .step = 0, .shard_count = 1 << 30 }));
    try testing.expectError(error.GlobalBatchLargerThanLength, validate(req(.cyclic, 10, 11, 0, 0)));
    try testing.expectError(error.GlobalBatchLargerThanLength, validate(.{ .mode = 2, .length = 10, .batch_size = 4, .seed = 0, .step = 0, .shard_index = 1, .shard_count = 3 }));
    // Sequential and iid batches may be larger than the index space.
    try testing.expectEqual(@as(u64, 11), try validate(req(.sequential, 10, 11, 0, 0)));
    try testing.expectEqual(@as(u64, 11), try validate(req(.iid, 10, 11, 0, 0)));
}

// Golden sequences: the same values are pinned in tests/loading/test_sampler.py. A change here changes
// every user's stream of batches; it must be deliberate.
const Golden = struct { r: Request, expected: []const i64 };
const goldens = [_]Golden{
    .{ .r = req(.iid, 1000, 8, 42, 7), .expected = &.{ 79, 758, 460, 881, 70, 709, 739, 591 } },
    .{ .r = req(.cyclic, 97, 10, 7, 3), .expected = &.{ 45, 3, 42, 72, 51, 41, 1, 31, 69, 60 } },
    .{ .r = req(.cyclic, 1_000_000, 8, 0, 1_000_003), .expected = &.{ 163993, 315260, 696460, 968734, 888749, 77215, 680314, 244117 } },
    .{ .r = req(.iid, 3 << 61, 6, 1, 0), .expected = &.{
        1658399760228717134, 676640250342035171, 2348999994038307415,
        1004984340555493791, 704235113169947429, 2094240559883420487,
    } },
    .{ .r = req(.sequential, 10, 4, 0, 2), .expected = &.{ 8, 9, 0, 1 } },
};

test "golden sequences" {
    for (goldens) |golden| {
        const got = try batch(golden.r);
        defer testing.allocator.free(got);
        try testing.expectEqualSlices(i64, golden.expected, got);
    }
}

test "the vector multiply matches 128-bit arithmetic" {
    var a: [lanes]u64 = .{ 0, 1, std.math.maxInt(u64), 0xffff_ffff, 1 << 32, 3 << 61, 0x1234_5678_9abc_def0, 0 };
    var b: [lanes]u64 = .{ 0, std.math.maxInt(u64), std.math.maxInt(u64), 0xffff_ffff, 1 << 32, 1000, 0xfedc_ba98_7654_3210, 5 };
    for (0..64) |round| {
        const product = mulWideV(a, b);
        const hi: [lanes]u64 = product.hi;
        const lo: [lanes]u64 = product.lo;
        for (a, b, hi, lo) |x, y, h, l| {
            const wide = @as(u128, x) * y;
            try testing.expectEqual(@as(u64, @intCast(wide >> 64)), h);
            try testing.expectEqual(@as(u64, @truncate(wide)), l);
        }
        for (&a, &b, 0..) |*x, *y, k| {
            x.* = mix64(x.* +% round *% 31 +% k);
            y.* = mix64(y.* ^ (round + 1));
        }
    }
}

test "iid: the vector and the scalar fills equal the definition, rejections included" {
    // At length 3 * 2^61, a quarter of all draws are rejected (2^64 mod length = 2^62).
    const lengths = [_]u64{ 1, 2, 1000, 3 << 30, 3 << 61, length_max };
    const key = iidKey(99);
    for (lengths) |length| {
        const r = req(.iid, length, 203, 99, 12345);
        const got = try batch(r);
        defer testing.allocator.free(got);
        var vector: [203]i64 = undefined;
        fillIidVector(length, 99, 12345 * 203, &vector);
        var scalar: [203]i64 = undefined;
        fillIidScalar(length, 99, 12345 * 203, 0, &scalar);
        for (got, vector, scalar, 0..) |index, from_vector, from_scalar, k| {
            const expected = reduce(iidDraw(key, 12345 * 203 + k), length);
            try testing.expectEqual(@as(i64, @intCast(expected)), index);
            try testing.expectEqual(index, from_vector);
            try testing.expectEqual(index, from_scalar);
            try testing.expect(expected < length);
        }
    }
}

/// Counts of iid draws over `steps` batches falling into each of `bins` classes of `classify`.
fn iidCounts(length: u64, comptime bins: usize, steps: u64, comptime classify: fn (u64, u64) usize) ![bins]u64 {
    var counts: [bins]u64 = @splat(0);
    var out: [1000]i64 = undefined;
    for (0..steps) |step| {
        try fill(req(.iid, length, out.len, 5, step), &out);
        for (out) |index| counts[classify(@intCast(index), length)] += 1;
    }
    return counts;
}

fn third(index: u64, length: u64) usize {
    return @intCast(@as(u128, index) * 3 / length);
}

fn residue3(index: u64, _: u64) usize {
    return @intCast(index % 3);
}

test "iid: no modulo bias at lengths where 2^64 or 2^32 is not a multiple" {
    // 30000 draws, 10000 expected per class, standard deviation about 82. A plain x % length
    // gives the first third twice the weight of the others (at 3 * 2^61 over 64-bit draws, at
    // 3 * 2^30 over 32-bit draws); a multiply-shift without rejection makes residues 2 mod 3
    // rarer by a third at 3 * 2^61. The bound of 600 is over seven standard deviations.
    const cases = .{
        .{ @as(u64, 3 << 61), third },
        .{ @as(u64, 3 << 61), residue3 },
        .{ @as(u64, 3 << 30), third },
        .{ @as(u64, (1 << 63) - 1), third },
    };
    inline for (cases) |case| {
        const counts = try iidCounts(case[0], 3, 30, case[1]);
        for (counts) |count| try testing.expect(count > 10000 - 600 and count < 10000 + 600);
    }
}

fn identityClass(index: u64, _: u64) usize {
    return @intCast(index);
}

test "iid: chi-square over 1000 values is in a loose band" {
    // 200000 draws over 1000 values: chi-square has mean 999 and standard deviation about 45.
    const counts = try iidCounts(1000, 1000, 200, identityClass);
    var chi_square: f64 = 0;
    for (counts) |count| {
        const d = @as(f64, @floatFromInt(count)) - 200.0;
        chi_square += d * d / 200.0;
    }
    try testing.expect(chi_square > 999 - 270 and chi_square < 999 + 270);
}

test "iid and sequential: a step's batch is a slice of a bigger batch (purity)" {
    for ([_]Mode{ .iid, .sequential }) |mode| {
        const big = try batch(req(mode, 777, 40, 3, 2)); // steps 8..11 of batch size 10
        defer testing.allocator.free(big);
        for (0..4) |k| {
            const small = try batch(req(mode, 777, 10, 3, 8 + k));
            defer testing.allocator.free(small);
            try testing.expectEqualSlices(i64, big[k * 10 ..][0..10], small);
        }
    }
}

test "seeds and steps change the batch, and the same request gives the same batch" {
    for ([_]Mode{ .iid, .cyclic }) |mode| {
        const a = try batch(req(mode, 100_000, 64, 1, 5));
        defer testing.allocator.free(a);
        const again = try batch(req(mode, 100_000, 64, 1, 5));
        defer testing.allocator.free(again);
        const other_seed = try batch(req(mode, 100_000, 64, 2, 5));
        defer testing.allocator.free(other_seed);
        const other_step = try batch(req(mode, 100_000, 64, 1, 6));
        defer testing.allocator.free(other_step);
        try testing.expectEqualSlices(i64, a, again);
        try testing.expect(!std.mem.eql(i64, a, other_seed));
        try testing.expect(!std.mem.eql(i64, a, other_step));
    }
}

test "sequential wraps around the index space" {
    const expected = [_][4]i64{ .{ 0, 1, 2, 3 }, .{ 4, 5, 6, 7 }, .{ 8, 9, 0, 1 }, .{ 2, 3, 4, 5 } };
    for (expected, 0..) |want, step| {
        var out: [4]i64 = undefined;
        try fill(req(.sequential, 10, 4, 0, step), &out);
        try testing.expectEqualSlices(i64, &want, &out);
    }
    // Batches longer than the index space wrap more than once.
    var long: [7]i64 = undefined;
    try fill(req(.sequential, 3, 7, 0, 1), &long);
    try testing.expectEqualSlices(i64, &.{ 1, 2, 0, 1, 2, 0, 1 }, &long);
    // Huge steps do not overflow: step * 12 mod 1000 for step 2^64 - 1 is 1000 - (16 * 12 mod 1000)...
    // computed here independently with 128-bit arithmetic on the definition.
    const step: u64 = std.math.maxInt(u64);
    var tail: [12]i64 = undefined;
    try fill(req(.sequential, 1000, 12, 0, step), &tail);
    const start: u64 = @intCast((@as(u128, step) * 12) % 1000);
    for (tail, 0..) |index, k| try testing.expectEqual(@as(i64, @intCast((start + k) % 1000)), index);
}

/// Every position of [0, length) maps to a distinct index in [0, length).
fn expectBijection(p: Permutation, seen: []bool) !void {
    @memset(seen, false);
    var buffer: [4096]i64 = undefined;
    var first: u64 = 0;
    while (first < p.length) {
        const count: usize = @intCast(@min(buffer.len, p.length - first));
        p.fill(first, buffer[0..count]);
        for (buffer[0..count]) |index| {
            try testing.expect(index >= 0 and index < p.length);
            try testing.expect(!seen[@intCast(index)]);
            seen[@intCast(index)] = true;
        }
        first += count;
    }
}

test "cyclic: the keyed vector hash equals mix32(half ^ key)" {
    var state: u64 = 1;
    for (0..2000) |_| {
        var halves: [16]u32 = undefined;
        for (&halves) |*half| {
            state = mix64(state);
            half.* = @truncate(state);
        }
        state = mix64(state);
        const key: u32 = @truncate(state >> 32);
        const hashed: [16]u32 = mix32KeyedV(16, halves, key ^ (key >> 16));
        for (halves, hashed) |half, got| try testing.expectEqual(mix32(half ^ key), got);
    }
}

test "cyclic: the set-bit table lists each mask's lanes in order" {
    for (set_bit_lanes, 0..) |entry, mask| {
        const lanes_listed: [8]u16 = entry;
        var count: usize = 0;
        for (0..8) |lane| {
            if (mask >> @intCast(lane) & 1 == 1) {
                try testing.expectEqual(@as(u16, @intCast(lane)), lanes_listed[count]);
                count += 1;
            }
        }
        try testing.expectEqual(@as(usize, @popCount(@as(u8, @intCast(mask)))), count);
        for (lanes_listed[count..]) |unused| try testing.expectEqual(@as(u16, 0), unused);
    }
}

/// fill(first, out[0..count]) equals apply(first + k) for every k.
fn expectFillMatchesApply(p: Permutation, first: u64, out: []i64) !void {
    p.fill(first, out);
    for (out, 0..) |index, k| {
        try testing.expectEqual(@as(i64, @intCast(p.apply(first + k))), index);
    }
}

test "cyclic: the vector fill equals the definition at every length class, start and size" {
    // Lengths around every power of two (2^k + 1 walks almost half of all values, 2^k - 1 and
    // 2^k very few), either side of 2^32 (where the fill switches from u32 to u64 lanes), and
    // 2^63. Sizes cover the partial last vector (1 to 33 values), the walk's narrow and wide
    // groups, and several blocks (1024 positions each) with a partial last one.
    var lengths: [3 * 63 + 3]u64 = undefined;
    var length_count: usize = 0;
    for (1..64) |k| {
        const power = @as(u64, 1) << @intCast(k);
        for ([_]u64{ power - 1, power, power + 1 }) |length| {
            lengths[length_count] = length;
            length_count += 1;
        }
    }
    for ([_]u64{ 1, 3, 1_000_000 }) |length| {
        lengths[length_count] = length;
        length_count += 1;
    }
    const sizes = [_]usize{ 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 256, 1023, 1024, 1025, 2100 };
    const out = try testing.allocator.alloc(i64, 2100);
    defer testing.allocator.free(out);
    var state: u64 = 17;
    for (lengths[0..length_count]) |length| {
        if (length > length_max) continue;
        const p = Permutation.init(length, 0xfeed, 9);
        for (sizes) |size| {
            if (size > length) continue;
            // From the start, from the end, and from a random position.
            state = mix64(state);
            const starts = [_]u64{ 0, length - size, state % (length - size + 1) };
            for (starts) |first| try expectFillMatchesApply(p, first, out[0..size]);
        }
    }
}

test "cyclic: the Feistel permutation is a bijection, exhaustively for small lengths" {
    const seen = try testing.allocator.alloc(bool, 5000);
    defer testing.allocator.free(seen);
    for (1..600) |length| {
        for ([_]u64{ 0, 1, 0xdead_beef }) |seed| {
            for ([_]u64{ 0, 1, 1 << 40 }) |cycle| {
                const p = Permutation.init(length, seed, cycle);
                try expectBijection(p, seen[0..length]);
                // The vector fill and the one-at-a-time definition agree.
                var out: [600]i64 = undefined;
                p.fill(0, out[0..length]);
                for (out[0..length], 0..) |index, position| {
                    try testing.expectEqual(@as(i64, @intCast(p.apply(position))), index);
                }
            }
        }
    }
    for ([_]u64{ 1024, 1025, 4095, 4096, 4097, 5000 }) |length| {
        try expectBijection(Permutation.init(length, 77, 3), seen[0..length]);
    }
}

test "cyclic: the Feistel permutation is a bijection of [0, 2^24) and [0, 2^24 + 1)" {
    // 16 million indices: quick in ReleaseFast, about 20 s in Debug, so Debug skips it.
    if (builtin.mode != .fast) return error.SkipZigTest;
    const seen = try testing.allocator.alloc(bool, (1 << 24) + 1);
    defer testing.allocator.free(seen);
    try expectBijection(Permutation.init(1 << 24, 2024, 0), seen[0 .. 1 << 24]);
    try expectBijection(Permutation.init((1 << 24) + 1, 2024, 5), seen);
}

test "cyclic: different cycles and seeds give different permutations, which do shuffle" {
    const length = 10_000;
    var a: [length]i64 = undefined;
    var b: [length]i64 = undefined;
    var c: [length]i64 = undefined;
    Permutation.init(length, 1, 0).fill(0, &a);
    Permutation.init(length, 1, 1).fill(0, &b);
    Permutation.init(length, 2, 0).fill(0, &c);
    try testing.expect(!std.mem.eql(i64, &a, &b));
    try testing.expect(!std.mem.eql(i64, &a, &c));
    for ([_]*const [length]i64{ &a, &b, &c }) |permutation| {
        // A uniform shuffle has about one fixed point and a mean displacement of length / 3.
        var fixed: usize = 0;
        var displacement: u64 = 0;
        for (permutation, 0..) |index, position| {
            fixed += @intFromBool(index == position);
            displacement += @abs(index - @as(i64, @intCast(position)));
        }
        try testing.expect(fixed < 10);
        try testing.expect(displacement / length > 3000 and displacement / length < 3700);
    }
}

/// Checks cycle `cycle` of a cyclic sampler: no index twice, and every index once when the
/// batch size divides the length.
fn expectCycleCoverage(length: u64, batch_size: u64, seed: u64, cycle: u64, seen: []bool) !void {
    @memset(seen, false);
    const steps_per_cycle = length / batch_size;
    const out = try testing.allocator.alloc(i64, @intCast(batch_size));
    defer testing.allocator.free(out);
    for (0..steps_per_cycle) |k| {
        try fill(req(.cyclic, length, batch_size, seed, cycle * steps_per_cycle + k), out);
        for (out) |index| {
            try testing.expect(index >= 0 and index < length);
            try testing.expect(!seen[@intCast(index)]);
            seen[@intCast(index)] = true;
        }
    }
    const covered = std.mem.count(bool, seen, &.{true});
    try testing.expectEqual(steps_per_cycle * batch_size, covered);
}

test "cyclic: each cycle reaches every index once, or drops a changing remainder" {
    const seen = try testing.allocator.alloc(bool, 65537);
    defer testing.allocator.free(seen);
    const lengths = [_]u64{ 1, 2, 3, 7, 97, 256, 1000, 65537 };
    const batch_sizes = [_]u64{ 1, 2, 3, 7, 16, 64, 100, 256, 1000 };
    for (lengths) |length| {
        for (batch_sizes) |batch_size| {
            if (batch_size > length) continue;
            if (length == 65537 and batch_size < 16) continue; // 65537 calls each: too slow in Debug
            for (0..3) |cycle| try expectCycleCoverage(length, batch_size, 11, cycle, seen[0..length]);
        }
    }
    // With a remainder (1000 = 15 * 64 + 40), the 40 dropped indices change between cycles.
    var kept_first: [1000]bool = @splat(false);
    try expectCycleCoverage(1000, 64, 3, 0, &kept_first);
    try expectCycleCoverage(1000, 64, 3, 1, seen[0..1000]);
    try testing.expect(!std.mem.eql(bool, &kept_first, seen[0..1000]));
}

test "cyclic: spot checks at 2^24 records" {
    var out: [8192]i64 = undefined;
    const seen = try testing.allocator.alloc(bool, 1 << 24);
    defer testing.allocator.free(seen);
    @memset(seen, false);
    // Steps from the first two cycles (2048 steps each): in range, and never an index twice.
    for ([_]u64{ 0, 1, 2047, 2048, 4095 }) |step| {
        try fill(req(.cyclic, 1 << 24, out.len, 9, step), &out);
        for (out) |index| {
            try testing.expect(index >= 0 and index < 1 << 24);
            if (step < 2048) {
                try testing.expect(!seen[@intCast(index)]);
                seen[@intCast(index)] = true;
            }
        }
    }
}

test "sharding: the shards of a step concatenate to the global batch" {
    const lengths = [_]u64{ 7, 97, 1000 };
    for ([_]Mode{ .sequential, .iid, .cyclic }) |mode| {
        for (lengths) |length| {
            for (1..5) |shard_count| {
                const batch_size = 7 / shard_count; // the global batch is 7, 6, 6 or 4 (<= length)
                const global_size = batch_size * shard_count;
                for ([_]u64{ 0, 1, 5, 1 << 40 }) |step| {
                    const global = try batch(req(mode, length, global_size, 21, step));
                    defer testing.allocator.free(global);
                    for (0..shard_count) |shard_index| {
                        var r = req(mode, length, batch_size, 21, step);
                        r.shard_index = shard_index;
                        r.shard_count = shard_count;
                        const part = try batch(r);
                        defer testing.allocator.free(part);
                        try testing.expectEqualSlices(i64, global[shard_index * batch_size ..][0..batch_size], part);
                    }
                }
            }
        }
    }
}
