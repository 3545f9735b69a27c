//! The sampler's C calls: lx_sampler_fill, lx_sampler_batch (the same from a request struct),
//! and the messages of the sampler's refusals.
const std = @import("std");
const status = @import("../base/status.zig");
const Status = status.Status;
const sampler = @import("../sampler/sampler.zig");
const LxSamplerRequest = @import("abi_types.zig").LxSamplerRequest;

export fn lx_sampler_fill(
    mode: u32,
    length: u64,
    batch_size: u64,
    seed: u64,
    step: u64,
    shard_index: u64,
    shard_count: u64,
    out: ?[*]i64,
) callconv(.c) Status {
    const request: sampler.Request = .{
        .mode = mode,
        .length = length,
        .batch_size = batch_size,
        .seed = seed,
        .step = step,
        .shard_index = shard_index,
        .shard_count = shard_count,
    };
    _ = sampler.validate(request) catch |err| return samplerStatus(err, request);
    const destination = out orelse {
        status.setMessage("the output buffer is NULL", .{});
        return .invalid_argument;
    };
    if (batch_size > std.math.maxInt(usize)) {
        status.setMessage("batch_size {d} does not fit in memory", .{batch_size});
        return .invalid_argument;
    }
    sampler.fill(request, destination[0..@intCast(batch_size)]) catch |err|
        return samplerStatus(err, request);
    return .ok;
}

export fn lx_sampler_batch(request: ?*const LxSamplerRequest, step: u64, out: ?[*]i64) callconv(.c) Status {
    const r = request orelse {
        status.setMessage("the sampler request is NULL", .{});
        return .invalid_argument;
    };
    if (r.reserved != 0) {
        status.setMessage("the sampler request's reserved field is {d}, not 0", .{r.reserved});
        return .invalid_argument;
    }
    return lx_sampler_fill(r.mode, r.length, r.batch_size, r.seed, step, r.shard_index, r.shard_count, out);
}

fn samplerStatus(err: sampler.Error, r: sampler.Request) Status {
    switch (err) {
        error.UnknownMode => status.setMessage(
            "unknown sampler mode {d} (0 sequential, 1 iid, 2 cyclic)",
            .{r.mode},
        ),
        error.LengthZero => status.setMessage("length is 0: there is nothing to sample", .{}),
        error.LengthTooLarge => status.setMessage(
            "length {d} exceeds the largest index space, 2^63",
            .{r.length},
        ),
        error.BatchSizeZero => status.setMessage("batch_size is 0", .{}),
        error.ShardCountZero => status.setMessage("shard_count is 0", .{}),
        error.ShardIndexOutOfRange => status.setMessage(
            "shard_index {d} is not below shard_count {d}",
            .{ r.shard_index, r.shard_count },
        ),
        error.GlobalBatchTooLarge => status.setMessage(
            "batch_size {d} * shard_count {d} overflows 64 bits",
            .{ r.batch_size, r.shard_count },
        ),
        error.GlobalBatchLargerThanLength => status.setMessage(
            "cyclic mode needs batch_size * shard_count ({d} * {d}) <= length {d}",
            .{ r.batch_size, r.shard_count, r.length },
        ),
    }
    return .invalid_argument;
}
