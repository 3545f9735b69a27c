//! The process-wide std.Io thread pool, and the splitting of a batch into contiguous shards run
//! on it (the calling thread runs one shard itself).
const std = @import("std");
const Io = std.Io;
const assert = std.debug.assert;

/// Shards one batch may be split into (one per CPU, capped).
pub const shard_count_max = 64;

const State = enum(u8) { absent, initializing, ready };

var threaded: Io.Threaded = undefined;
var state: std.atomic.Value(State) = .init(.absent);
var cpu_count: usize = 1;

/// The shared pool's Io, created on first use (thread-safe).
pub fn io() Io {
    if (state.load(.acquire) != .ready) initSlow();
    return threaded.io();
}

fn initSlow() void {
    if (state.cmpxchgStrong(.absent, .initializing, .acquire, .acquire) == null) {
        cpu_count = @max(1, std.Thread.getCpuCount() catch 1);
        threaded = newThreaded();
        state.store(.ready, .release);
        return;
    }
    while (state.load(.acquire) != .ready) std.Thread.yield() catch {};
}

fn newThreaded() Io.Threaded {
    // Pool threads exclude the caller, which always runs a shard itself.
    return Io.Threaded.init(std.heap.c_allocator, .{ .async_limit = .limited(cpu_count - 1) });
}

/// In a forked child the parent's pool threads do not exist: build a fresh pool. The old one is
/// abandoned, not deinitialised (joining threads that are gone would hang).
pub fn afterForkChild() void {
    if (state.load(.acquire) == .ready) threaded = newThreaded();
}

pub fn cpus() usize {
    _ = io();
    return cpu_count;
}

/// How many shards a batch of `item_count` items totalling `byte_count` bytes gets: about one
/// per CPU, but none smaller than `shard_bytes_min` bytes (the pool hand-off costs more than
/// copying a few small records).
pub fn shardCount(item_count: usize, byte_count: u64, shard_bytes_min: u64) usize {
    if (item_count == 0) return 0;
    const by_bytes: u64 = @max(1, byte_count / @max(1, shard_bytes_min));
    const count: usize = @intCast(@min(by_bytes, @as(u64, @min(cpus(), shard_count_max))));
    return @min(count, item_count);
}

/// Items [begin, end) of shard `shard` when `item_count` items are split in `shard_count`
/// contiguous blocks.
pub fn shardRange(item_count: usize, shard_count: usize, shard: usize) struct { begin: usize, end: usize } {
    assert(shard < shard_count);
    return .{
        .begin = item_count * shard / shard_count,
        .end = item_count * (shard + 1) / shard_count,
    };
}

/// Runs `task.runShard(begin, end)` for every shard of `item_count` items, shard 0 on the
/// calling thread and the rest on the pool, and returns once all have finished.
/// `Task.runShard` must not fail: it records its own failure for the caller to read.
pub fn run(comptime Task: type, task: *Task, item_count: usize, shard_count: usize) void {
    assert(shard_count <= shard_count_max);
    if (shard_count == 0) return;
    if (shard_count == 1) return task.runShard(0, item_count);
    const pool_io = io();
    var group: Io.Group = .init;
    for (1..shard_count) |shard| {
        const range = shardRange(item_count, shard_count, shard);
        group.async(pool_io, Task.runShard, .{ task, range.begin, range.end });
    }
    const first = shardRange(item_count, shard_count, 0);
    task.runShard(first.begin, first.end);
    group.await(pool_io) catch {};
}

test "shards are contiguous, cover the batch, and respect the minimum size" {
    const count = 1000;
    for (1..9) |shard_count| {
        var next: usize = 0;
        for (0..shard_count) |shard| {
            const range = shardRange(count, shard_count, shard);
            try std.testing.expectEqual(next, range.begin);
            next = range.end;
        }
        try std.testing.expectEqual(@as(usize, count), next);
    }
    try std.testing.expectEqual(@as(usize, 0), shardCount(0, 0, 1));
    try std.testing.expectEqual(@as(usize, 1), shardCount(10, 100, 1 << 20));
    try std.testing.expect(shardCount(3, 1 << 30, 1) <= 3);
}

test "run visits every item exactly once" {
    const Task = struct {
        hits: [4096]u32 = @splat(0),
        fn runShard(task: *@This(), begin: usize, end: usize) void {
            for (begin..end) |i| task.hits[i] += 1;
        }
    };
    var task: Task = .{};
    run(Task, &task, task.hits.len, shardCount(task.hits.len, 1 << 30, 1));
    for (task.hits) |hit| try std.testing.expectEqual(@as(u32, 1), hit);
}
