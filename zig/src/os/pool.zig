//! The process-wide pool: loaderx's own helper threads, and the splitting of a batch into
//! contiguous blocks that the calling thread and the helpers claim until none are left. The
//! std.Io instance here serves locks, files and futexes; batches do not go through its tasks.
//!
//! Why threads of our own: a helper that has gone to sleep costs the caller a futex wake (on a
//! virtual machine, an inter-processor interrupt) and arrives when the caller has copied most of
//! the batch itself. std.Io.Threaded's workers sleep as soon as their queue is empty, so a
//! gather that followed any other short call (a label gather between image gathers, in every
//! loader step) ran slower on two cores than on one (benchmarks/probes/pool_wake.py). Helpers here stay
//! awake for a short while after each batch and take the next one without a system call.
const std = @import("std");
const Io = std.Io;
const assert = std.debug.assert;
const pool_advice = @import("pool_advice.zig");
const probe_burst = pool_advice.probe_burst;
pub const Advisor = pool_advice.Advisor;
pub const Policy = pool_advice.Policy;

/// lx_pool_set_policy's choice (read by every advised batch).
pub var policy: std.atomic.Value(Policy) = .init(.auto);

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
    // Nothing runs as an std.Io task (batches use the helpers below): no task threads.
    return Io.Threaded.init(std.heap.c_allocator, .{ .async_limit = .limited(0) });
}

/// In a forked child neither the std.Io threads nor the helpers exist: build a fresh std.Io and
/// forget the helpers and jobs (the old ones are abandoned, not torn down: joining or waking
/// threads that are gone would hang).
pub fn afterForkChild() void {
    if (state.load(.acquire) != .ready) return;
    threaded = newThreaded();
    helpers = .{};
    batches_wanting_help = .init(0);
    jobs_free = null;
    jobs_mutex = .init;
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

/// The shared state of one batch between its caller and the helpers that join it. Lives on the
/// heap and is recycled, never freed: a helper that has just left a batch may still read
/// `caller_sleeping` of a job its caller has already released (harmless: at worst a spurious
/// wake of the job's next caller, whose waits re-check).
const Job = struct {
    /// The link of `helpers.posted` while posted; then of `jobs_free`.
    next: ?*Job = null,
    /// Helpers this batch still takes (under helpers.mutex).
    wanted: usize = 0,
    blocks: Blocks = .{ .item_count = 0, .block_items = 1 },
    context: *anyopaque = undefined,
    runFn: *const fn (context: *anyopaque, blocks: *Blocks) void = undefined,
    /// Helpers that took this batch and have not left it; counted when taken, under
    /// helpers.mutex, so once the caller has withdrawn the batch nobody new can join.
    active: std.atomic.Value(u32) = .init(0),
    /// Set by the caller before it sleeps waiting for `active` to reach 0.
    caller_sleeping: std.atomic.Value(u32) = .init(0),

    fn help(job: *Job) void {
        job.runFn(job.context, &job.blocks);
        // Waking a caller that is still spinning would only cost a system call.
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
};

/// About 0.1 ms of pause instructions here: long enough for a block of copies, or for the next
/// batch of a loop that does something short in between; short enough that a helper with
/// nothing to do gives its core back soon.
const spin_count_max = 2_000;

/// The helper threads and the batches posted to them.
const Helpers = struct {
    mutex: Io.Mutex = .init,
    /// Batches that still want helpers, newest first (under mutex).
    posted: ?*Job = null,
    /// Bumped on every post: sleeping helpers wait on it, lingering ones watch it.
    epoch: std.atomic.Value(u32) = .init(0),
    /// Helpers asleep on `epoch` (under mutex).
    sleepers: u32 = 0,
    /// Helper threads started (written under mutex, read without it); at most cpus() - 1.
    thread_count: usize = 0,
};

var helpers: Helpers = .{};
/// Batches inside run() whose plan wants helpers (counted whether they got any or not).
var batches_wanting_help: std.atomic.Value(usize) = .init(0);
var jobs_free: ?*Job = null;
var jobs_mutex: Io.Mutex = .init;

/// A recycled job, else a new one; null when memory is short (the batch then runs inline).
fn acquireJob() ?*Job {
    const pool_io = io();
    jobs_mutex.lockUncancelable(pool_io);
    if (jobs_free) |job| {
        jobs_free = job.next;
        jobs_mutex.unlock(pool_io);
        return job;
    }
    jobs_mutex.unlock(pool_io);
    const fresh = std.heap.c_allocator.create(Job) catch return null;
    fresh.* = .{};
    return fresh;
}

fn releaseJob(job: *Job) void {
    const pool_io = io();
    jobs_mutex.lockUncancelable(pool_io);
    defer jobs_mutex.unlock(pool_io);
    job.next = jobs_free;
    jobs_free = job;
}

/// Starts helper threads until there are `count` (capped at cpus() - 1); returns how many
/// exist. A thread that cannot be started leaves fewer: batches then get less help.
fn ensureHelpers(count: usize) usize {
    const target = @min(count, cpu_count - 1);
    // Once the helpers exist (every batch after the first), no lock is taken here.
    const started = @atomicLoad(usize, &helpers.thread_count, .acquire);
    if (started >= target) return started;
    const pool_io = io();
    helpers.mutex.lockUncancelable(pool_io);
    defer helpers.mutex.unlock(pool_io);
    while (helpers.thread_count < target) {
        const thread = std.Thread.spawn(.{ .stack_size = helper_stack_size }, helperMain, .{}) catch break;
        thread.detach();
        @atomicStore(usize, &helpers.thread_count, helpers.thread_count + 1, .release);
    }
    return helpers.thread_count;
}

/// A helper runs batch code only (copies, codecs, checksums). Address space, not memory: only
/// the pages a thread touches are committed.
const helper_stack_size = 8 * 1024 * 1024;

/// Offers `job` to up to `wanted` helpers, waking sleeping ones only when needed.
fn post(job: *Job, wanted: usize) void {
    const pool_io = io();
    helpers.mutex.lockUncancelable(pool_io);
    job.wanted = wanted;
    job.next = helpers.posted;
    helpers.posted = job;
    _ = helpers.epoch.fetchAdd(1, .release);
    const wake = @min(helpers.sleepers, wanted);
    helpers.mutex.unlock(pool_io);
    if (wake > 0) pool_io.futexWake(u32, &helpers.epoch.raw, @intCast(wake));
}

/// Takes `job` back from the helpers that have not joined it; after this none can.
fn withdraw(job: *Job) void {
    const pool_io = io();
    helpers.mutex.lockUncancelable(pool_io);
    defer helpers.mutex.unlock(pool_io);
    unlink(job);
}

/// Removes `job` from the posted list if it is there (the caller holds helpers.mutex).
fn unlink(job: *Job) void {
    var link: *?*Job = &helpers.posted;
    while (link.*) |posted| : (link = &posted.next) {
        if (posted == job) {
            link.* = job.next;
            job.wanted = 0;
            return;
        }
    }
}

/// The oldest posted batch that wants a helper, joined (counted in `active`); null when none.
fn take() ?*Job {
    const pool_io = io();
    helpers.mutex.lockUncancelable(pool_io);
    defer helpers.mutex.unlock(pool_io);
    var oldest: ?*Job = null;
    var cursor = helpers.posted;
    while (cursor) |job| : (cursor = job.next) oldest = job;
    const job = oldest orelse return null;
    assert(job.wanted > 0);
    job.wanted -= 1;
    _ = job.active.fetchAdd(1, .seq_cst);
    if (job.wanted == 0) unlink(job);
    return job;
}

/// A helper thread: takes posted batches; with none, watches for the next post a little while,
/// then sleeps until one comes.
fn helperMain() void {
    const pool_io = io();
    while (true) {
        const seen = helpers.epoch.load(.acquire);
        if (take()) |job| {
            job.help();
            continue;
        }
        if (linger(seen)) continue;
        helpers.mutex.lockUncancelable(pool_io);
        if (helpers.posted != null or helpers.epoch.load(.acquire) != seen) {
            helpers.mutex.unlock(pool_io);
            continue;
        }
        helpers.sleepers += 1;
        helpers.mutex.unlock(pool_io);
        pool_io.futexWaitUncancelable(u32, &helpers.epoch.raw, seen);
        helpers.mutex.lockUncancelable(pool_io);
        helpers.sleepers -= 1;
        helpers.mutex.unlock(pool_io);
    }
}

/// Watches for a post after epoch `seen` for about linger_rounds rounds; true when one came.
/// Each round ends with a yield: a thread waiting for this core (the consumer of a loader, on
/// two cores) runs at once instead of after the spin, and the helper stays runnable.
fn linger(seen: u32) bool {
    for (0..linger_rounds) |_| {
        for (0..linger_round_spins) |_| {
            if (helpers.epoch.load(.acquire) != seen) return true;
            std.atomic.spinLoopHint();
        }
        std.Thread.yield() catch {};
    }
    return helpers.epoch.load(.acquire) != seen;
}

/// About 0.1 ms in all (a round is roughly a microsecond of pauses and a yield).
const linger_rounds = 100;
const linger_round_spins = 32;

/// Runs `task.runShard(&blocks)` on up to `plan.runner_count` runners: the calling thread and
/// helpers, each claiming contiguous blocks until none are left. Returns once every block is
/// done; it waits only for helpers that actually joined, never for one still on its way.
/// `Task.runShard` must not fail: it records its own failure for the caller to read.
pub fn run(comptime Task: type, task: *Task, item_count: usize, batch_plan: Plan) void {
    _ = runOffering(Task, task, item_count, batch_plan);
}

/// `run`, returning how many helpers the batch was offered (0: it ran on the caller alone).
fn runOffering(comptime Task: type, task: *Task, item_count: usize, batch_plan: Plan) usize {
    assert(batch_plan.runner_count <= runner_count_max);
    if (batch_plan.runner_count == 0) return 0;
    const blocks_init: Blocks = .{ .item_count = item_count, .block_items = batch_plan.block_items };
    // Each batch already running that wanted helpers keeps at least its caller's core busy:
    // this one is offered only the cores left (two loader steps made at once on two cores run
    // side by side, each on its own thread, instead of crowding the cores with a helper).
    const others = if (batch_plan.runner_count > 1) batches_wanting_help.fetchAdd(1, .monotonic) else 0;
    defer if (batch_plan.runner_count > 1) {
        _ = batches_wanting_help.fetchSub(1, .monotonic);
    };
    const helpers_wanted = @min(batch_plan.runner_count, cpus() -| others) -| 1;
    const helper_count = if (helpers_wanted > 0) @min(helpers_wanted, ensureHelpers(batch_plan.runner_count - 1)) else 0;
    const job = if (helper_count > 0) acquireJob() else null;
    if (job == null) {
        var blocks = blocks_init;
        task.runShard(&blocks);
        return 0;
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
    j.caller_sleeping.store(0, .seq_cst);
    post(j, helper_count);
    task.runShard(&j.blocks);
    // Every block is claimed: helpers that have not joined yet would find nothing to do.
    withdraw(j);
    j.waitForHelpers();
    releaseJob(j);
    return helper_count;
}

/// `run`, for a batch of `byte_count` bytes: when its plan wants helpers, `advisor` says
/// whether this kind of batch currently runs faster with them or on the calling thread alone
/// (see pool_advice.zig), and learns from how long this one took. With `timed`, returns that
/// time when it is a fair sample of the batch's other choices (the caller's stores advisor):
/// not for a pooled batch that other batches left no core for, nor for the first of a pooled
/// burst (it pays for waking a helper).
pub fn runAdvised(comptime Task: type, task: *Task, item_count: usize, batch_plan: Plan, byte_count: u64, advisor: *Advisor, timed: bool) ?u64 {
    const alone: Plan = .{ .runner_count = 1, .block_items = @max(1, item_count) };
    const process_policy = policy.load(.monotonic);
    const advised = batch_plan.runner_count > 1 and process_policy == .auto;
    const fixed_plan = if (batch_plan.runner_count > 1 and process_policy == .never) alone else batch_plan;
    if (!advised and !timed) {
        run(Task, task, item_count, fixed_plan);
        return null;
    }
    const choice: ?Advisor.Choice = if (advised) advisor.choose() else null;
    const chosen_plan = if (choice) |c| (if (c.mode == .alone) alone else batch_plan) else fixed_plan;
    const pool_io = io();
    const started = Io.Clock.awake.now(pool_io);
    const offered = runOffering(Task, task, item_count, chosen_plan);
    const elapsed = started.durationTo(Io.Clock.awake.now(pool_io)).nanoseconds;
    // A clock that failed reads 0: such a batch teaches nothing.
    if (started.nanoseconds <= 0 or elapsed <= 0) return null;
    const elapsed_ns: u64 = @intCast(@min(elapsed, std.math.maxInt(u64)));
    if (choice) |c| {
        // A pooled batch that other batches left no core for ran alone: it says nothing about
        // helpers, and it was slowed by the batches beside it.
        if (c.mode == .pooled and offered == 0) return null;
        advisor.record(c, byte_count, elapsed_ns);
        if (!c.counted()) return null;
    }
    return elapsed_ns;
}

/// A test task that counts how often each item is visited.
fn HitCounter(comptime item_count: usize) type {
    return struct {
        hits: [item_count]std.atomic.Value(u32) = @splat(.init(0)),
        fn runShard(task: *@This(), blocks: *Blocks) void {
            while (blocks.next()) |range| {
                for (range.begin..range.end) |i| _ = task.hits[i].fetchAdd(1, .monotonic);
            }
        }
    };
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
    const Task = HitCounter(4096);
    var task: Task = .{};
    run(Task, &task, task.hits.len, plan(task.hits.len, 1 << 30, 1));
    for (&task.hits) |*hit| try std.testing.expectEqual(@as(u32, 1), hit.load(.monotonic));
}

test "many threads running batches at once share recycled jobs correctly" {
    const Task = HitCounter(512);
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

test "more concurrent batches than helpers: each finishes, helped or not" {
    // Each runner holds its batch open until every caller has started one, so far more
    // batches want helpers at the same moment than there are.
    const caller_count = 100;
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
}

test "an advised run visits every item exactly once in either mode" {
    const Task = HitCounter(4096);
    var advisor: Advisor = .{};
    // The warm-up tries each mode; later batches take either.
    for (0..40) |_| {
        var task: Task = .{};
        _ = runAdvised(Task, &task, task.hits.len, .{ .runner_count = 2, .block_items = 64 }, 1 << 20, &advisor, false);
        for (&task.hits) |*hit| try std.testing.expectEqual(@as(u32, 1), hit.load(.monotonic));
    }
    try std.testing.expect(advisor.cost(.pooled) > 0);
    try std.testing.expect(advisor.cost(.alone) > 0);
    try std.testing.expectEqual(@as(u64, 40), advisor.tickets.load(.monotonic));
    // A fixed policy bypasses the advisor.
    defer policy.store(.auto, .monotonic);
    for ([_]Policy{ .always, .never }) |fixed| {
        policy.store(fixed, .monotonic);
        var task: Task = .{};
        _ = runAdvised(Task, &task, task.hits.len, .{ .runner_count = 2, .block_items = 64 }, 1 << 20, &advisor, false);
        for (&task.hits) |*hit| try std.testing.expectEqual(@as(u32, 1), hit.load(.monotonic));
    }
    try std.testing.expectEqual(@as(u64, 40), advisor.tickets.load(.monotonic));
}

test "a batch that starts while another that wanted helpers runs is offered only the cores left" {
    // The first batch's caller holds its block until the second batch is done; its other
    // block is quick, so a helper is free when the second starts. On two cores the second
    // batch must then run on its caller alone (with more cores it may get the ones left).
    const Shared = struct {
        quick_done: std.atomic.Value(bool) = .init(false),
        second_done: std.atomic.Value(bool) = .init(false),
        timed_out: std.atomic.Value(bool) = .init(false),
    };
    const First = struct {
        shared: *Shared,
        fn runShard(task: *@This(), blocks: *Blocks) void {
            while (blocks.next()) |range| {
                if (range.begin == 1) {
                    task.shared.quick_done.store(true, .seq_cst);
                    continue;
                }
                var waited: u32 = 0;
                while (!task.shared.second_done.load(.seq_cst)) : (waited += 1) {
                    if (waited > 20_000) return task.shared.timed_out.store(true, .seq_cst);
                    io().sleep(.fromMicroseconds(100), .awake) catch {};
                }
            }
        }
    };
    const Second = struct {
        runners: [256]std.Thread.Id = undefined,
        fn runShard(task: *@This(), blocks: *Blocks) void {
            while (blocks.next()) |range| {
                for (range.begin..range.end) |i| task.runners[i] = std.Thread.getCurrentId();
                // Long enough per block for an idle helper to join if it were offered the batch.
                io().sleep(.fromMicroseconds(200), .awake) catch {};
            }
        }
    };
    const Runner = struct {
        fn first(shared: *Shared) void {
            var task: First = .{ .shared = shared };
            run(First, &task, 2, .{ .runner_count = 2, .block_items = 1 });
        }
    };
    var shared: Shared = .{};
    const holder = try std.Thread.spawn(.{}, Runner.first, .{&shared});
    var waited: u32 = 0;
    while (!shared.quick_done.load(.seq_cst) and waited < 20_000) : (waited += 1)
        io().sleep(.fromMicroseconds(100), .awake) catch {};
    var second: Second = .{};
    run(Second, &second, second.runners.len, .{ .runner_count = 2, .block_items = 8 });
    shared.second_done.store(true, .seq_cst);
    holder.join();
    try std.testing.expect(!shared.timed_out.load(.seq_cst));
    if (cpus() == 2) {
        for (second.runners) |runner| try std.testing.expectEqual(std.Thread.getCurrentId(), runner);
    }
    try std.testing.expectEqual(@as(usize, 0), batches_wanting_help.load(.seq_cst));
}

test "a timed run reports its time only when it is a fair sample" {
    const Task = HitCounter(1024);
    var advisor: Advisor = .{};
    const wide: Plan = .{ .runner_count = 2, .block_items = 64 };
    // A batch too small for helpers is timed without consulting the advisor.
    var small: Task = .{};
    try std.testing.expect(runAdvised(Task, &small, small.hits.len, .{ .runner_count = 1, .block_items = 1024 }, 1 << 20, &advisor, true) != null);
    try std.testing.expectEqual(@as(u64, 0), advisor.tickets.load(.monotonic));
    // The warm-up's first batch starts a pooled burst: it pays for waking a helper.
    var first: Task = .{};
    try std.testing.expectEqual(@as(?u64, null), runAdvised(Task, &first, first.hits.len, wide, 1 << 20, &advisor, true));
    for (1..probe_burst) |_| {
        var task: Task = .{};
        _ = runAdvised(Task, &task, task.hits.len, wide, 1 << 20, &advisor, true);
    }
    // The next burst runs alone: every batch of it is a sample.
    var alone: Task = .{};
    try std.testing.expect(runAdvised(Task, &alone, alone.hits.len, wide, 1 << 20, &advisor, true) != null);
    for (&alone.hits) |*hit| try std.testing.expectEqual(@as(u32, 1), hit.load(.monotonic));
    // Untimed, nothing is reported.
    var untimed: Task = .{};
    try std.testing.expectEqual(@as(?u64, null), runAdvised(Task, &untimed, untimed.hits.len, .{ .runner_count = 1, .block_items = 1024 }, 1 << 20, &advisor, false));
}

test "an advised batch that other batches leave no core for teaches its advisor nothing" {
    const Task = HitCounter(1024);
    // As if as many batches wanting helpers were running as there are cores.
    _ = batches_wanting_help.fetchAdd(cpus(), .monotonic);
    defer _ = batches_wanting_help.fetchSub(cpus(), .monotonic);
    var advisor: Advisor = .{};
    for (0..16) |_| {
        var task: Task = .{};
        _ = runAdvised(Task, &task, task.hits.len, .{ .runner_count = 2, .block_items = 64 }, 1 << 20, &advisor, false);
        for (&task.hits) |*hit| try std.testing.expectEqual(@as(u32, 1), hit.load(.monotonic));
    }
    // The warm-up sent half the batches each way; only the ones alone were counted.
    try std.testing.expectEqual(@as(u64, 16), advisor.tickets.load(.monotonic));
    try std.testing.expectEqual(@as(u64, 0), advisor.cost(.pooled));
    try std.testing.expect(advisor.cost(.alone) > 0);
}

test "helpers that went to sleep wake for the next batch" {
    const Task = HitCounter(4096);
    for (0..3) |_| {
        var task: Task = .{};
        run(Task, &task, task.hits.len, .{ .runner_count = 2, .block_items = 16 });
        for (&task.hits) |*hit| try std.testing.expectEqual(@as(u32, 1), hit.load(.monotonic));
        // Long past the linger: every helper ends up asleep on the epoch.
        var waited: u32 = 0;
        while (waited < 2000) : (waited += 1) {
            const pool_io = io();
            helpers.mutex.lockUncancelable(pool_io);
            const asleep = helpers.sleepers == helpers.thread_count;
            helpers.mutex.unlock(pool_io);
            if (asleep) break;
            std.Thread.yield() catch {};
            io().sleep(.fromMilliseconds(1), .awake) catch {};
        }
        const pool_io = io();
        helpers.mutex.lockUncancelable(pool_io);
        defer helpers.mutex.unlock(pool_io);
        try std.testing.expectEqual(helpers.thread_count, helpers.sleepers);
        try std.testing.expect(helpers.posted == null);
    }
}
