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
//!
//! The index math of each mode lives in its own file: sequential here, iid in sampler_iid.zig,
//! cyclic's permutation in sampler_cyclic.zig. Their tests and the golden sequences are in
//! sampler_test.zig.
const std = @import("std");
const sampler_iid = @import("sampler_iid.zig");
const Permutation = @import("sampler_cyclic.zig").Permutation;

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

/// The odd constant of SplitMix64 (2^64 / golden ratio): the iid stream steps by it, and the
/// cyclic keys are spread with it.
pub const golden_gamma: u64 = 0x9e3779b97f4a7c15;

/// SplitMix64's finaliser (Stafford's Mix13): a bijection on u64 with full avalanche.
pub fn mix64(x: u64) u64 {
    var z = x;
    z = (z ^ (z >> 30)) *% 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) *% 0x94d049bb133111eb;
    return z ^ (z >> 31);
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
        .iid => sampler_iid.fillIid(request.length, request.seed, request.step *% global +% offset, out),
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
