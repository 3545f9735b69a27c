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
    // Pool threads exclude the caller, which always works on its own batch too: cpu_count - 1
    // of them do the work. One more absorbs a helper that has finished its blocks but not yet
    // told the pool it is free; without it the next batch's helper would run inline on the
    // caller (std runs a task eagerly once the limit is reached) and the batch would get one core.
    return Io.Threaded.init(std.heap.c_allocator, .{ .async_limit = .limited(cpu_count) });
}

/// In a forked child the parent's pool threads do not exist: build a fresh pool. The old one is
/// abandoned, not deinitialised (joining threads that are gone would hang).
pub fn afterForkChild() void {
    if (state.load(.acquire) != .ready) return;
    threaded = newThreaded();
    // Recycled jobs may count helpers of the parent that do not exist here: start afresh
    // (the old ones are abandoned, like the old pool).
    jobs_free = null;
    jobs_mutex = .init;
    job_count = 0;
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

/// The shared state of one batch between its caller and the pool threads helping it. Lives on
/// the heap and is recycled, so a helper the scheduler starts only after the caller returned
/// touches nothing of the caller's: it sees `closed`, leaves, and the batch never waited for it.
const Job = struct {
    /// Helpers of the last use; awaited before the job is reused (by then they are long done).
    group: Io.Group = .init,
    next_free: ?*Job = null,
    blocks: Blocks = .{ .item_count = 0, .block_items = 1 },
    context: *anyopaque = undefined,
    runFn: *const fn (context: *anyopaque, blocks: *Blocks) void = undefined,
    /// Helpers inside `runFn` right now.
    active: std.atomic.Value(u32) = .init(0),
    /// Set by the caller once every block is claimed: helpers arriving later do nothing.
    closed: std.atomic.Value(u32) = .init(0),

    /// Set by the caller before it sleeps waiting for `active` to reach 0.
    caller_sleeping: std.atomic.Value(u32) = .init(0),

    fn help(job: *Job) void {
        _ = job.active.fetchAdd(1, .seq_cst);
        if (job.closed.load(.seq_cst) == 0) job.runFn(job.context, &job.blocks);
        // Waking a caller that is still spinning would only cost a system call and invite the
        // scheduler to switch to it before this thread has told the pool it is free.
        if (job.active.fetchSub(1, .seq_cst) == 1 and job.caller_sleeping.load(.seq_cst) != 0)
            io().futexWake(u32, &job.active.raw, 1);
    }

    /// Waits until no helper is inside the batch: spins a little (a helper that joined is
    /// running and usually finishes its last block soon), then sleeps.
    fn waitForHelpers(job: *Job) void {
        var spins: u32 = 0;
        while (job.active.load(.seq_cst) != 0) : (spins += 1) {
            if (spins < spin_count_max) {
                std.atomic.spinLoopHint();
                continue;
            }
            job.caller_sleeping.store(1, .seq_cst);
            const active = job.active.load(.seq_cst);
            if (active == 0) break;
            io().futexWaitUncancelable(u32, &job.active.raw, active);
        }
    }

    // About 0.1 ms of pause instructions here: long enough for a block of copies, short enough
    // not to burn a core while a preempted helper waits for the scheduler.
    const spin_count_max = 2_000;
};

var jobs_free: ?*Job = null;
var jobs_mutex: Io.Mutex = .init;
var job_count: usize = 0;
/// Jobs ever created; past this, a job whose late helper has not run yet is awaited instead.
const job_count_max = 64;

/// A recycled job whose helpers have all finished (its group has no pending task), else a new
/// one. Returns null when every job is in use or memory is short: the batch then runs on the
/// calling thread.
fn acquireJob() ?*Job {
    const pool_io = io();
    jobs_mutex.lockUncancelable(pool_io);
    var link: *?*Job = &jobs_free;
    while (link.*) |job| : (link = &job.next_free) {
        // A null token means the group has no pending tasks (Io.Group's documented meaning).
        if (job.group.token.load(.acquire) == null) {
            link.* = job.next_free;
            jobs_mutex.unlock(pool_io);
            return job;
        }
    }
    if (job_count == job_count_max) {
        // Every job exists: reuse a free one once its late helpers are done, or, when all of
        // them are in use by other batches right now, run this batch on the calling thread
        // (more concurrent batches than jobs means the cores are busy anyway).
        const job = jobs_free orelse {
            jobs_mutex.unlock(pool_io);
            return null;
        };
        jobs_free = job.next_free;
        jobs_mutex.unlock(pool_io);
        job.group.await(pool_io) catch {};
        return job;
    }
    job_count += 1;
    jobs_mutex.unlock(pool_io);
    const fresh = std.heap.c_allocator.create(Job) catch {
        jobs_mutex.lockUncancelable(pool_io);
        job_count -= 1;
        jobs_mutex.unlock(pool_io);
        return null;
    };
    fresh.* = .{};
    return fresh;
}

fn releaseJob(job: *Job) void {
    const pool_io = io();
    jobs_mutex.lockUncancelable(pool_io);
    defer jobs_mutex.unlock(pool_io);
    job.next_free = jobs_free;
    jobs_free = job;
}

/// Runs `task.runShard(&blocks)` on up to `plan.runner_count` runners: the calling thread and
/// pool threads, each claiming contiguous blocks until none are left. Returns once every block
/// is done; it waits only for helpers that actually joined, never for one still unscheduled.
/// `Task.runShard` must not fail: it records its own failure for the caller to read.
pub fn run(comptime Task: type, task: *Task, item_count: usize, batch_plan: Plan) void {
    assert(batch_plan.runner_count <= runner_count_max);
    if (batch_plan.runner_count == 0) return;
    const blocks_init: Blocks = .{ .item_count = item_count, .block_items = batch_plan.block_items };
    const job = if (batch_plan.runner_count > 1) acquireJob() else null;
    if (job == null) {
        var blocks = blocks_init;
        return task.runShard(&blocks);
    }
    const Erased = struct {
        fn runShard(context: *anyopaque, blocks: *Blocks) void {
            Task.runShard(@ptrCast(@alignCast(context)), blocks);
        }
    };
    const j = job.?;
    j.blocks = blocks_init;
    j.context = task;
    j.runFn = Erased.runShard;
    j.active.store(0, .seq_cst);
    j.closed.store(0, .seq_cst);
    j.caller_sleeping.store(0, .seq_cst);
    const pool_io = io();
    for (1..batch_plan.runner_count) |_| j.group.async(pool_io, Job.help, .{j});
    task.runShard(&j.blocks);
    // Every block is claimed; helpers that joined may still be finishing theirs.
    j.closed.store(1, .seq_cst);
    j.waitForHelpers();
    releaseJob(j);
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

test "many threads running batches at once share recycled jobs correctly" {
    const Task = struct {
        hits: [512]std.atomic.Value(u32) = @splat(.init(0)),
        fn runShard(task: *@This(), blocks: *Blocks) void {
            while (blocks.next()) |range| {
                for (range.begin..range.end) |i| _ = task.hits[i].fetchAdd(1, .monotonic);
            }
        }
    };
    const Caller = struct {
        fn loop(ok: *std.atomic.Value(bool)) void {
            for (0..200) |_| {
                var task: Task = .{};
                run(Task, &task, task.hits.len, .{ .runner_count = 2, .block_items = 7 });
                for (&task.hits) |*hit| if (hit.load(.monotonic) != 1) ok.store(false, .monotonic);
            }
        }
    };
    var ok: std.atomic.Value(bool) = .init(true);
    var threads: [4]std.Thread = undefined;
    for (&threads) |*t| t.* = try std.Thread.spawn(.{}, Caller.loop, .{&ok});
    for (threads) |t| t.join();
    try std.testing.expect(ok.load(.monotonic));
}

test "more concurrent batches than jobs run (inline once every job is in use)" {
    // Each runner holds its batch open until every caller has started one, so more than
    // job_count_max jobs are wanted at the same moment.
    const caller_count = job_count_max + 36;
    const Shared = struct {
        started: std.atomic.Value(u32) = .init(0),
        ok: std.atomic.Value(bool) = .init(true),
    };
    const Task = struct {
        shared: *Shared,
        entered: std.atomic.Value(bool) = .init(false),
        hits: [64]std.atomic.Value(u32) = @splat(.init(0)),
        fn runShard(task: *@This(), blocks: *Blocks) void {
            while (blocks.next()) |range| {
                if (!task.entered.swap(true, .seq_cst)) {
                    _ = task.shared.started.fetchAdd(1, .seq_cst);
                    var spins: u32 = 0;
                    while (task.shared.started.load(.seq_cst) < caller_count and spins < 2_000_000) : (spins += 1)
                        std.Thread.yield() catch {};
                }
                for (range.begin..range.end) |i| _ = task.hits[i].fetchAdd(1, .monotonic);
            }
        }
    };
    const Caller = struct {
        fn one(shared: *Shared) void {
            var task: Task = .{ .shared = shared };
            run(Task, &task, task.hits.len, .{ .runner_count = 2, .block_items = 1 });
            for (&task.hits) |*hit| if (hit.load(.monotonic) != 1) shared.ok.store(false, .monotonic);
        }
    };
    var shared: Shared = .{};
    var threads: [caller_count]std.Thread = undefined;
    for (&threads) |*t| t.* = try std.Thread.spawn(.{}, Caller.one, .{&shared});
    for (threads) |t| t.join();
    try std.testing.expect(shared.ok.load(.monotonic));
    try std.testing.expect(job_count <= job_count_max);
}
