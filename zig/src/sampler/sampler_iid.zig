//! The sampler's iid mode (defined in sampler.zig): draw number `c` of a SplitMix64 stream keyed
//! by the seed, reduced to [0, length) without bias by Lemire's multiply-shift and redraws. A
//! batch is drawn one index after another, or eight lanes at a time where the CPU multiplies
//! 64-bit lanes; both give the same indices.
const std = @import("std");
const builtin = @import("builtin");
const sampler = @import("sampler.zig");
const golden_gamma = sampler.golden_gamma;
const mix64 = sampler.mix64;

/// Domain separation: the iid and cyclic keys of one seed are unrelated (the cyclic tag is in
/// sampler_cyclic.zig).
const iid_tag: u64 = 0x6c6f616465727869; // "loaderxi"
/// Added to a rejected iid draw before it is mixed again.
const redraw_increment: u64 = 0xd1b54a32d192ed03;

/// Draws per vector of the vector fill.
pub const lanes = 8;
const V = @Vector(lanes, u64);

fn mix64V(x: V) V {
    var z = x;
    z = (z ^ (z >> @splat(30))) *% @as(V, @splat(0xbf58476d1ce4e5b9));
    z = (z ^ (z >> @splat(27))) *% @as(V, @splat(0x94d049bb133111eb));
    return z ^ (z >> @splat(31));
}

/// The key of a seed's iid stream.
pub fn iidKey(seed: u64) u64 {
    return mix64(seed ^ iid_tag);
}

/// Draw number `counter` of the iid stream, before reduction to a range.
pub fn iidDraw(key: u64, counter: u64) u64 {
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
pub fn mulWideV(a: V, b: V) struct { hi: V, lo: V } {
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

pub fn fillIid(length: u64, seed: u64, counter_first: u64, out: []i64) void {
    if (iid_in_vectors) {
        fillIidVector(length, seed, counter_first, out);
    } else {
        fillIidScalar(length, seed, counter_first, 0, out);
    }
}

/// Draws counter_first + done, counter_first + done + 1, ... into out[done..], one at a time.
pub fn fillIidScalar(length: u64, seed: u64, counter_first: u64, done: usize, out: []i64) void {
    // iidDraw's argument, key + counter * golden_gamma, advanced by an addition per draw.
    var state = iidKey(seed) +% (counter_first +% done) *% golden_gamma;
    for (out[done..]) |*slot| {
        slot.* = @intCast(reduce(mix64(state), length));
        state +%= golden_gamma;
    }
}

pub fn fillIidVector(length: u64, seed: u64, counter_first: u64, out: []i64) void {
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
