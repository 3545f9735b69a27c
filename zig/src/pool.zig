//! The process-wide std.Io thread pool, and the splitting of a batch into contiguous blocks that
//! the calling thread and pool threads claim until none are left.
const std = @import("std");
const Io = std.Io;
const assert = std.debug.assert;

/// Threads working on one batch (one per CPU, capped), the caller included.
pub const runner_count_max = 64;

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
    // Pool threads exclude the caller, which always works on its own batch too.
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

/// How a batch is split: `runner_count` threads (the caller included) claim contiguous blocks
/// of `block_items` items until none are left.
pub const Plan = struct {
    runner_count: usize,
    block_items: usize,
};

/// Blocks each runner gets on average: small enough that a runner the scheduler starts late (or
/// never) only leaves a little work for the others to wait on, large enough to keep the shared
/// counter cold.
const blocks_per_runner = 8;

/// Plans a batch of `item_count` items totalling `byte_count` bytes: about one runner per CPU,
/// but none with fewer than `runner_bytes_min` bytes (handing work to the pool costs more than
/// copying a few small records).
pub fn plan(item_count: usize, byte_count: u64, runner_bytes_min: u64) Plan {
    if (item_count == 0) return .{ .runner_count = 0, .block_items = 1 };
    const by_bytes: u64 = @max(1, byte_count / @max(1, runner_bytes_min));
    const runner_count: usize = @intCast(@min(@min(by_bytes, @as(u64, @min(cpus(), runner_count_max))), item_count));
    if (runner_count == 1) return .{ .runner_count = 1, .block_items = item_count };
    const block_count = runner_count * blocks_per_runner;
    return .{ .runner_count = runner_count, .block_items = @max(1, (item_count + block_count - 1) / block_count) };
}

/// The contiguous blocks of a batch, handed out in order to whichever runner asks next.
pub const Blocks = struct {
    next_block: std.atomic.Value(usize) = .init(0),
    item_count: usize,
    block_items: usize,

    pub const Range = struct { begin: usize, end: usize };

    pub fn next(blocks: *Blocks) ?Range {
        const block = blocks.next_block.fetchAdd(1, .monotonic);
        if (block >= (blocks.item_count + blocks.block_items - 1) / blocks.block_items) return null;
        const begin = block * blocks.block_items;
        return .{ .begin = begin, .end = @min(blocks.item_count, begin + blocks.block_items) };
    }
};

/// Runs `task.runShard(&blocks)` on `plan.runner_count` runners: the calling thread and pool
/// threads. Each runner claims blocks until none are left; returns once all runners finished.
/// `Task.runShard` must not fail: it records its own failure for the caller to read.
pub fn run(comptime Task: type, task: *Task, item_count: usize, batch_plan: Plan) void {
    assert(batch_plan.runner_count <= runner_count_max);
    if (batch_plan.runner_count == 0) return;
    var blocks: Blocks = .{ .item_count = item_count, .block_items = batch_plan.block_items };
    if (batch_plan.runner_count == 1) return task.runShard(&blocks);
    const pool_io = io();
    var group: Io.Group = .init;
    for (1..batch_plan.runner_count) |_| group.async(pool_io, Task.runShard, .{ task, &blocks });
    task.runShard(&blocks);
    group.await(pool_io) catch {};
}

test "blocks are contiguous, cover the batch once, and runners respect the minimum size" {
    for ([_]usize{ 1, 7, 256, 1000 }) |count| {
        for ([_]usize{ 1, 3, 16 }) |block_items| {
            var blocks: Blocks = .{ .item_count = count, .block_items = block_items };
            var next: usize = 0;
            while (blocks.next()) |range| {
                try std.testing.expectEqual(next, range.begin);
                try std.testing.expect(range.end > range.begin);
                next = range.end;
            }
            try std.testing.expectEqual(count, next);
        }
    }
    try std.testing.expectEqual(@as(usize, 0), plan(0, 0, 1).runner_count);
    try std.testing.expectEqual(@as(usize, 1), plan(10, 100, 1 << 20).runner_count);
    try std.testing.expect(plan(3, 1 << 30, 1).runner_count <= 3);
}

test "run visits every item exactly once" {
    const Task = struct {
        hits: [4096]std.atomic.Value(u32) = @splat(.init(0)),
        fn runShard(task: *@This(), blocks: *Blocks) void {
            while (blocks.next()) |range| {
                for (range.begin..range.end) |i| _ = task.hits[i].fetchAdd(1, .monotonic);
            }
        }
    };
    var task: Task = .{};
    run(Task, &task, task.hits.len, plan(task.hits.len, 1 << 30, 1));
    for (&task.hits) |*hit| try std.testing.expectEqual(@as(u32, 1), hit.load(.monotonic));
}
