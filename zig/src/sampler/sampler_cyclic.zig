//! The sampler's cyclic mode (defined in sampler.zig): a keyed Feistel permutation of
//! [0, length) per cycle, computed one value at a time (the definition) or a block at a time on
//! vectors, with the cycle-walk that brings values back into range.
const std = @import("std");
const sampler = @import("sampler.zig");
const golden_gamma = sampler.golden_gamma;
const mix64 = sampler.mix64;
const length_max = sampler.length_max;

/// Domain separation: the iid and cyclic keys of one seed are unrelated (the iid tag is in
/// sampler_iid.zig).
const cyclic_tag: u64 = 0x6c6f61646572786c; // "loaderxl"
/// Rounds of the Feistel network (the halves alternate, so each half is rewritten three times).
pub const feistel_rounds = 6;

/// Chris Wellons' "lowbias32" integer hash: a cheap bijection on u32 with low avalanche bias.
pub fn mix32(x: u32) u32 {
    var z = x;
    z = (z ^ (z >> 16)) *% 0x7feb352d;
    z = (z ^ (z >> 15)) *% 0x846ca68b;
    return z ^ (z >> 16);
}

/// Lanes of the first pass over a block: two 512-bit registers of u32 halves, so two independent
/// chains of rounds overlap (a single chain waits on its multiplies).
const fill_lanes = 32;
/// Lanes of the cycle-walk: few values need it (under half, about 5% at length 10^6), so a group
/// narrower than the first pass wastes fewer lanes.
const walk_lanes = 16;
/// Positions handled per block of the cyclic fill (the walk's list of slots lives on the stack).
const block_len = 1024;

comptime {
    std.debug.assert(block_len % fill_lanes == 0);
    std.debug.assert(block_len - 1 <= std.math.maxInt(u16)); // slots are listed as u16
}

/// mix32(half ^ key) on every lane, given folded_key = key ^ (key >> 16). The hash's first step
/// z ^ (z >> 16) distributes over the XOR with the key, so the key's share is a constant and the
/// step costs one shift and one three-way XOR instead of two XORs and a shift.
pub fn mix32KeyedV(comptime n: usize, half: @Vector(n, u32), folded_key: u32) @Vector(n, u32) {
    var z = half ^ (half >> @splat(16)) ^ @as(@Vector(n, u32), @splat(folded_key));
    z *%= @splat(0x7feb352d);
    z ^= z >> @splat(15);
    z *%= @splat(0x846ca68b);
    return z ^ (z >> @splat(16));
}

/// For each 8-bit mask, the positions of its set bits in ascending order (then zeros).
pub const set_bit_lanes: [256]@Vector(8, u16) = table: {
    @setEvalBranchQuota(10_000);
    var table: [256]@Vector(8, u16) = undefined;
    for (&table, 0..) |*entry, mask| {
        var lanes_set: [8]u16 = @splat(0);
        var count: usize = 0;
        for (0..8) |lane| {
            if (mask >> lane & 1 == 1) {
                lanes_set[count] = lane;
                count += 1;
            }
        }
        entry.* = lanes_set;
    }
    break :table table;
};

/// The lowest `count` bits of an integer of type Bits set (count in [1, bit width]).
fn lowBits(comptime Bits: type, count: usize) Bits {
    std.debug.assert(count >= 1 and count <= @bitSizeOf(Bits));
    const all: Bits = std.math.maxInt(Bits);
    return all >> @intCast(@bitSizeOf(Bits) - count);
}

/// A keyed bijection on [0, length). The domain is the next power of two >= length, 2^bits,
/// split into a high half of `bits / 2` bits and a low half of the rest (at most 32 bits each).
/// The network alternates rounds: even rounds XOR the low half with mix32(high ^ key), odd
/// rounds XOR the high half with mix32(low ^ key), each masked to its half's width, so every
/// round (hence the network) is a bijection of the domain. A value at or past `length` is sent
/// through the network again (cycle-walking) until it lands inside: the walk from an in-range
/// position always ends, since its orbit returns to that position.
///
/// `apply` is the definition, one value at a time; `fill` computes the same values on vectors.
pub const Permutation = struct {
    length: u64,
    low_bits: u6,
    high_mask: u32,
    low_mask: u32,
    round_keys: [feistel_rounds]u32,

    pub fn init(length: u64, seed: u64, cycle: u64) Permutation {
        std.debug.assert(length >= 1 and length <= length_max);
        const bits: u7 = if (length == 1) 0 else @as(u7, 64) - @clz(length - 1);
        const high_bits: u6 = @intCast(bits / 2); // <= 31
        const low_bits: u6 = @intCast(bits - high_bits); // <= 32
        const cycle_key = mix64(mix64(seed ^ cyclic_tag) +% mix64(cycle +% golden_gamma));
        var round_keys: [feistel_rounds]u32 = undefined;
        for (&round_keys, 0..) |*round_key, round| {
            round_key.* = @truncate(mix64(cycle_key +% (round + 1) *% golden_gamma));
        }
        return .{
            .length = length,
            .low_bits = low_bits,
            .high_mask = @intCast((@as(u64, 1) << high_bits) - 1),
            .low_mask = @intCast((@as(u64, 1) << low_bits) - 1),
            .round_keys = round_keys,
        };
    }

    /// One pass of the network over the halves of a domain value.
    fn network(p: Permutation, high: *u32, low: *u32) void {
        inline for (p.round_keys, 0..) |round_key, round| {
            if (round % 2 == 0) {
                low.* ^= mix32(high.* ^ round_key) & p.low_mask;
            } else {
                high.* ^= mix32(low.* ^ round_key) & p.high_mask;
            }
        }
    }

    fn networkV(p: Permutation, comptime n: usize, high: *@Vector(n, u32), low: *@Vector(n, u32)) void {
        const high_mask: @Vector(n, u32) = @splat(p.high_mask);
        const low_mask: @Vector(n, u32) = @splat(p.low_mask);
        inline for (p.round_keys, 0..) |round_key, round| {
            const folded_key = round_key ^ (round_key >> 16);
            if (round % 2 == 0) {
                low.* ^= mix32KeyedV(n, high.*, folded_key) & low_mask;
            } else {
                high.* ^= mix32KeyedV(n, low.*, folded_key) & high_mask;
            }
        }
    }

    /// One pass of the network over a domain value.
    fn pass(p: Permutation, x: u64) u64 {
        var high: u32 = @intCast(x >> p.low_bits);
        var low: u32 = @truncate(x & p.low_mask);
        p.network(&high, &low);
        return (@as(u64, high) << p.low_bits) | low;
    }

    /// One pass over n domain values held as T: u32 when the domain has at most 32 bits (then
    /// low_bits <= 16), u64 otherwise.
    fn passV(p: Permutation, comptime n: usize, comptime T: type, x: @Vector(n, T)) @Vector(n, T) {
        const Shift = std.math.Log2Int(T);
        // Exact, not narrowings: low_bits <= 16 when T is u32, and every x is inside the domain
        // of 2^(low_bits + high_bits) values with high_bits <= 31. A per-lane @intCast check
        // cost the cyclic sampler about 12% in ReleaseSafe (tools/release_modes.py).
        const low_shift: @Vector(n, Shift) = @splat(@truncate(p.low_bits));
        var high: @Vector(n, u32) = @truncate(x >> low_shift);
        var low: @Vector(n, u32) = @truncate(x & @as(@Vector(n, T), @splat(p.low_mask)));
        p.networkV(n, &high, &low);
        return (@as(@Vector(n, T), high) << low_shift) | @as(@Vector(n, T), low);
    }

    /// The image of `position` (< length). Under two passes on average: the domain is smaller
    /// than twice the length.
    pub fn apply(p: Permutation, position: u64) u64 {
        std.debug.assert(position < p.length);
        var x = p.pass(position);
        while (x >= p.length) x = p.pass(x);
        return x;
    }

    /// out[k] = apply(first + k) for every k.
    pub fn fill(p: Permutation, first: u64, out: []i64) void {
        std.debug.assert(first <= p.length and out.len <= p.length - first);
        var start: usize = 0;
        while (start < out.len) : (start += block_len) {
            const block = out[start..@min(out.len, start + block_len)];
            // Below 2^32 records (the usual case) the domain values are u32: half the vector
            // width of u64 for the splitting, joining and comparing around the rounds.
            if (p.length <= std.math.maxInt(u32)) {
                p.fillBlock(u32, first + start, block);
            } else {
                p.fillBlock(u64, first + start, block);
            }
        }
    }

    /// Branch-free passes keep the vector units busy: every position goes through the network
    /// once, fill_lanes at a time, noting which results landed outside the range in one bit
    /// each; then those slots alone are walked (`walk`).
    fn fillBlock(p: Permutation, comptime T: type, first: u64, out: []i64) void {
        // The hot loop of the cyclic sampler: per-element checks (slot indices, slices, lane
        // conversions) cost it 7% to 12% in ReleaseSafe. They follow from the three assertions
        // here, checked once per block (std.debug.assert checks under ReleaseSafe):
        // every slot is below out.len <= block_len, and every position and value is inside the
        // domain, which fits in T (values < 2^bits <= 2^63 also fit in i64).
        @setRuntimeSafety(false);
        std.debug.assert(out.len >= 1 and out.len <= block_len);
        std.debug.assert(first + out.len <= p.length);
        std.debug.assert(p.length <= std.math.maxInt(T));
        const n = fill_lanes;
        const Values = @Vector(n, T);
        const Bits = @Int(.unsigned, n);
        const length_v: Values = @splat(@intCast(p.length));
        const lane: Values = std.simd.iota(T, n);
        // Bit k of outside[v] is set when the value in slot v * n + k is >= length.
        var outside: [block_len / n]Bits = undefined;
        const full = out.len / n;
        for (0..full) |v| {
            const value = p.passV(n, T, @as(Values, @splat(@intCast(first + v * n))) + lane);
            outside[v] = @bitCast(value >= length_v);
            out[v * n ..][0..n].* = @bitCast(@as(@Vector(n, u64), value));
        }
        const rest = out.len - full * n;
        var vectors = full;
        if (rest > 0) {
            // The last, partial vector: its lanes past the end repeat the last position, and
            // their results are dropped.
            const position = @as(Values, @splat(@intCast(first + full * n))) +
                @min(lane, @as(Values, @splat(@intCast(rest - 1))));
            const value = p.passV(n, T, position);
            const values: [n]u64 = @as(@Vector(n, u64), value);
            for (out[full * n ..], values[0..rest]) |*slot, x| slot.* = @intCast(x);
            outside[full] = @as(Bits, @bitCast(value >= length_v)) & lowBits(Bits, rest);
            vectors += 1;
        }
        // The slots to walk, listed eight lanes at a time without a branch: a loop over the set
        // bits mispredicts (at length 10^6, 78% of the 32-lane vectors have a lane outside), and
        // took 50 ns for 256 positions against 30 ns for the table. A write covers
        // pending[pending_count..][0..8] with pending_count <= slot_first and
        // slot_first + 8 <= vectors * n <= block_len.
        var any_outside: Bits = 0;
        for (outside[0..vectors]) |bits| any_outside |= bits;
        if (any_outside == 0) return; // a length just below a power of two, or a lucky block
        var pending: [block_len]u16 = undefined;
        var pending_count: usize = 0;
        for (outside[0..vectors], 0..) |bits, v| {
            inline for (0..n / 8) |byte| {
                const lanes_outside: u8 = @truncate(bits >> (8 * byte));
                const slot_first: u16 = @intCast(v * n + 8 * byte);
                pending[pending_count..][0..8].* = set_bit_lanes[lanes_outside] +
                    @as(@Vector(8, u16), @splat(slot_first));
                pending_count += @popCount(lanes_outside);
            }
        }
        p.walk(T, out, pending[0..pending_count]);
    }

    /// Sends the values in the listed slots (each >= length) through the network again until
    /// each lands in range; after each round the list keeps, in place, the slots still outside.
    fn walk(p: Permutation, comptime T: type, out: []i64, pending_first: []u16) void {
        var pending = pending_first;
        while (pending.len > 0) {
            var kept: usize = 0;
            var start: usize = 0;
            while (start < pending.len) {
                // Wide groups while many values remain (two chains of rounds overlap), then
                // narrow ones, which waste fewer lanes on the last few values.
                if (pending.len - start > walk_lanes) {
                    start += p.walkGroup(fill_lanes, T, out, pending, start, &kept);
                } else {
                    start += p.walkGroup(walk_lanes, T, out, pending, start, &kept);
                }
            }
            pending = pending[0..kept];
        }
    }

    /// One pass over the values of up to n listed slots from pending[start]; appends the slots
    /// still outside the range at pending[kept.*] and returns how many slots it took.
    fn walkGroup(p: Permutation, comptime n: usize, comptime T: type, out: []i64, pending: []u16, start: usize, kept: *usize) usize {
        // Slots come from fillBlock (each < out.len) and values stay inside the domain, which
        // fits in T: the same proof as fillBlock's, which asserted it for this block.
        @setRuntimeSafety(false);
        std.debug.assert(kept.* <= start and start < pending.len);
        const Values = @Vector(n, T);
        const Bits = @Int(.unsigned, n);
        const count = @min(n, pending.len - start);
        // A short group repeats its last slot; the repeated lanes' results are dropped.
        var slots: [n]u16 = undefined;
        var values: [n]T = undefined;
        for (&slots, &values, 0..) |*slot, *value, lane| {
            slot.* = pending[start + @min(lane, count - 1)];
            value.* = @intCast(out[slot.*]);
        }
        const next = p.passV(n, T, values);
        const next_values: [n]T = next;
        for (slots[0..count], next_values[0..count]) |slot, x| out[slot] = @intCast(x);
        // kept <= start + lane: a kept slot overwrites only an entry already read.
        const length_v: Values = @splat(@intCast(p.length));
        var bits = @as(Bits, @bitCast(next >= length_v)) & lowBits(Bits, count);
        while (bits != 0) : (bits &= bits - 1) {
            pending[kept.*] = slots[@ctz(bits)];
            kept.* += 1;
        }
        return count;
    }
};
