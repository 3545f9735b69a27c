//! The index sampler: which records a training step reads. Every mode is a pure function of
//! (mode, length, batch_size, seed, step, shard_index, shard_count); nothing is kept between
//! calls, so a run resumes exactly by asking for the step it stopped at.
//!
//! The global batch of a step has `global = batch_size * shard_count` positions; shard `s` takes
//! positions [s * batch_size, (s + 1) * batch_size). Position `j` of step `k` maps to an index:
//!
//! - sequential: (k * global + j) mod length, computed in 128 bits so no step overflows.
//! - iid: draw number `c = k * global + j` (mod 2^64) of a SplitMix64 stream keyed by the seed,
//!   reduced to [0, length) by Lemire's multiply-shift; a rejected draw `x` is replaced by
//!   mix64(x + redraw_increment) until one is accepted, which keeps the result unbiased.
//! - cyclic: cycle `c = k / steps_per_cycle` with `steps_per_cycle = length / global`; the index is
//!   perm_c((k mod steps_per_cycle) * global + j), where perm_c is a keyed Feistel network over
//!   the next power of two >= length (six alternating rounds on unbalanced halves, round
//!   function mix32(half ^ round_key), round keys from (seed, c)), brought into [0, length) by
//!   cycle-walking: a value >= length goes through the network again until it is in range.
const std = @import("std");
const builtin = @import("builtin");

pub const Mode = enum(u32) {
    sequential = 0,
    iid = 1,
    cyclic = 2,
};

/// Indices are written as int64, so the largest index must fit: length <= 2^63.
pub const length_max: u64 = 1 << 63;

pub const Error = error{
    UnknownMode,
    LengthZero,
    LengthTooLarge,
    BatchSizeZero,
    ShardCountZero,
    ShardIndexOutOfRange,
    GlobalBatchTooLarge,
    GlobalBatchLargerThanLength,
};

/// Everything an index depends on. `mode` is the raw C value and is checked by `validate`.
pub const Request = struct {
    mode: u32,
    length: u64,
    batch_size: u64,
    seed: u64,
    step: u64,
    shard_index: u64 = 0,
    shard_count: u64 = 1,
};

/// The odd constant of SplitMix64 (2^64 / golden ratio).
const golden_gamma: u64 = 0x9e3779b97f4a7c15;
/// Domain separation: the iid and cyclic keys of one seed are unrelated.
const iid_tag: u64 = 0x6c6f616465727869; // "loaderxi"
const cyclic_tag: u64 = 0x6c6f61646572786c; // "loaderxl"
/// Added to a rejected iid draw before it is mixed again.
const redraw_increment: u64 = 0xd1b54a32d192ed03;
/// Rounds of the Feistel network (the halves alternate, so each half is rewritten three times).
pub const feistel_rounds = 6;

const lanes = 8;
const V = @Vector(lanes, u64);

/// SplitMix64's finaliser (Stafford's Mix13): a bijection on u64 with full avalanche.
pub fn mix64(x: u64) u64 {
    var z = x;
    z = (z ^ (z >> 30)) *% 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) *% 0x94d049bb133111eb;
    return z ^ (z >> 31);
}

fn mix64V(x: V) V {
    var z = x;
    z = (z ^ (z >> @splat(30))) *% @as(V, @splat(0xbf58476d1ce4e5b9));
    z = (z ^ (z >> @splat(27))) *% @as(V, @splat(0x94d049bb133111eb));
    return z ^ (z >> @splat(31));
}

/// Steps in one cycle of the cyclic mode: every cycle visits length / global positions.
pub fn stepsPerCycle(length: u64, global: u64) u64 {
    return length / global;
}

/// Checks a request; returns the global batch size. Every mode answers the same checks except
/// the cyclic one, which also needs at least one full global batch per cycle.
pub fn validate(request: Request) Error!u64 {
    const mode = std.enums.fromInt(Mode, request.mode) orelse return error.UnknownMode;
    if (request.length == 0) return error.LengthZero;
    if (request.length > length_max) return error.LengthTooLarge;
    if (request.batch_size == 0) return error.BatchSizeZero;
    if (request.shard_count == 0) return error.ShardCountZero;
    if (request.shard_index >= request.shard_count) return error.ShardIndexOutOfRange;
    const global = std.math.mul(u64, request.batch_size, request.shard_count) catch
        return error.GlobalBatchTooLarge;
    if (mode == .cyclic and global > request.length) return error.GlobalBatchLargerThanLength;
    return global;
}

/// Writes this shard's batch_size indices for request.step into out (out.len == batch_size).
pub fn fill(request: Request, out: []i64) Error!void {
    const global = try validate(request);
    std.debug.assert(out.len == request.batch_size);
    const offset = request.shard_index * request.batch_size; // < global, no overflow
    switch (@as(Mode, @fromBackingInt(request.mode))) {
        .sequential => fillSequential(request.length, request.step, global, offset, out),
        .iid => fillIid(request.length, request.seed, request.step *% global +% offset, out),
        .cyclic => {
            const steps_per_cycle = stepsPerCycle(request.length, global);
            const cycle = request.step / steps_per_cycle;
            const first = (request.step % steps_per_cycle) * global + offset; // < length
            const permutation = Permutation.init(request.length, request.seed, cycle);
            permutation.fill(first, out);
        },
    }
}

// ---- sequential ----------------------------------------------------------------------------

fn fillSequential(length: u64, step: u64, global: u64, offset: u64, out: []i64) void {
    const start: u128 = @as(u128, step) * global + offset;
    var index: u64 = @intCast(start % length);
    var done: usize = 0;
    while (done < out.len) {
        // A run of consecutive indices up to the end of the index space, then wrap to 0.
        const run: usize = @intCast(@min(out.len - done, length - index));
        for (out[done..][0..run], 0..) |*slot, k| slot.* = @intCast(index + k);
        done += run;
        index = 0;
    }
}

// ---- iid -----------------------------------------------------------------------------------

/// The key of a seed's iid stream.
fn iidKey(seed: u64) u64 {
    return mix64(seed ^ iid_tag);
}

/// Draw number `counter` of the iid stream, before reduction to a range.
fn iidDraw(key: u64, counter: u64) u64 {
    return mix64(key +% counter *% golden_gamma);
}

/// Lemire's unbiased reduction of the draw `x` to [0, length): the high word of x * length,
/// rejecting the (length mod 2^64) low words that would favour some outputs.
pub fn reduce(x_first: u64, length: u64) u64 {
    var x = x_first;
    var product = @as(u128, x) * length;
    if (@as(u64, @truncate(product)) < length) {
        const threshold = (0 -% length) % length; // 2^64 mod length
        while (@as(u64, @truncate(product)) < threshold) {
            x = mix64(x +% redraw_increment);
            product = @as(u128, x) * length;
        }
    }
    return @intCast(product >> 64);
}

/// 64 x 64 -> 128-bit products of vectors as (high, low) words, from 32-bit partial products
/// (vector hardware multiplies 32 x 32 -> 64, and 128-bit lanes do not vectorise).
fn mulWideV(a: V, b: V) struct { hi: V, lo: V } {
    const low32: V = @splat(0xffff_ffff);
    const shift: @Vector(lanes, u6) = @splat(32);
    const a_lo = a & low32;
    const a_hi = a >> shift;
    const b_lo = b & low32;
    const b_hi = b >> shift;
    const ll = a_lo * b_lo;
    const lh = a_lo * b_hi;
    const hl = a_hi * b_lo;
    const hh = a_hi * b_hi;
    // Cannot overflow: (2^32 - 1) + (2^32 - 1) + (2^32 - 1)^2 < 2^64.
    const cross = (ll >> shift) + (lh & low32) + hl;
    return .{ .hi = hh + (lh >> shift) + (cross >> shift), .lo = (cross << shift) | (ll & low32) };
}

/// Whether iid batches are drawn eight lanes at a time. Each draw takes three 64-bit multiplies
/// (two in mix64, one wide in reduce). Vector units multiply 64-bit lanes only with AVX-512DQ;
/// elsewhere they are built from 32-bit products, and the wide one is taken apart lane by lane,
/// so one draw after another on the scalar multiplier, whose draws overlap, is faster: on the
/// AVX2 VM with an 8 MiB L3, 20.8 to 23.5 against 33.1 to 33.8 us for a batch of 8192
/// (`benchmarks/compare.py sampler`; README, "Sampler"), while the vector path made the
/// earlier AVX-512 VM's figures. Both give the same indices.
const iid_in_vectors = builtin.cpu.arch == .x86_64 and std.Target.x86.featureSetHas(builtin.cpu.features, .avx512dq);

fn fillIid(length: u64, seed: u64, counter_first: u64, out: []i64) void {
    if (iid_in_vectors) {
        fillIidVector(length, seed, counter_first, out);
    } else {
        fillIidScalar(length, seed, counter_first, 0, out);
    }
}

/// Draws counter_first + done, counter_first + done + 1, ... into out[done..], one at a time.
fn fillIidScalar(length: u64, seed: u64, counter_first: u64, done: usize, out: []i64) void {
    // iidDraw's argument, key + counter * golden_gamma, advanced by an addition per draw.
    var state = iidKey(seed) +% (counter_first +% done) *% golden_gamma;
    for (out[done..]) |*slot| {
        slot.* = @intCast(reduce(mix64(state), length));
        state +%= golden_gamma;
    }
}

fn fillIidVector(length: u64, seed: u64, counter_first: u64, out: []i64) void {
    const key = iidKey(seed);
    const length_v: V = @splat(length);
    const step_v: V = @splat(golden_gamma *% lanes);
    var state: V = @as(V, @splat(key +% counter_first *% golden_gamma)) +%
        std.simd.iota(u64, lanes) *% @as(V, @splat(golden_gamma));
    var done: usize = 0;
    while (done + lanes <= out.len) : (done += lanes) {
        const x = mix64V(state);
        const product = mulWideV(x, length_v);
        if (@reduce(.Or, product.lo < length_v)) {
            // Possibly a rejection (probability below length / 2^64): take the scalar path.
            const draws: [lanes]u64 = x;
            for (draws, out[done..][0..lanes]) |draw, *slot| slot.* = @intCast(reduce(draw, length));
        } else {
            const indices: @Vector(lanes, i64) = @bitCast(product.hi);
            out[done..][0..lanes].* = indices;
        }
        state +%= step_v;
    }
    fillIidScalar(length, seed, counter_first, done, out);
}

// ---- cyclic --------------------------------------------------------------------------------

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
fn mix32KeyedV(comptime n: usize, half: @Vector(n, u32), folded_key: u32) @Vector(n, u32) {
    var z = half ^ (half >> @splat(16)) ^ @as(@Vector(n, u32), @splat(folded_key));
    z *%= @splat(0x7feb352d);
    z ^= z >> @splat(15);
    z *%= @splat(0x846ca68b);
    return z ^ (z >> @splat(16));
}

/// For each 8-bit mask, the positions of its set bits in ascending order (then zeros).
const set_bit_lanes: [256]@Vector(8, u16) = table: {
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
        // cost the cyclic sampler about 12% in ReleaseSafe (benchmarks/probes/release_modes.py).
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

// ---- tests ---------------------------------------------------------------------------------

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
