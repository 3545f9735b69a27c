//! Whether a stream of similar batches (one store's gathers, or one view's) runs faster with the
//! pool's helpers or on the calling thread alone, learned from the batches' own timings.
//!
//! Why it is learned and not planned: which way wins depends on where the records are and on
//! the host, and changes while a program runs. On the 2-core VM this was written on, 256
//! random records of 12 KiB from a 512 MiB store take about 0.54x the time with the helper,
//! while 256 records of 3 KiB from a 12 MiB store (in the CPU caches) take 0.61x the time in
//! some minutes and 1.19x in others, when the two virtual cores seem to share one physical
//! core (`benchmarks/probes/pool_phases.py` prints both; figures in README.md). A helper that does not
//! speed a batch up also takes a core from the rest of the program.
//!
//! How: each mode keeps an estimate of its cost per byte. The first batches alternate between
//! the modes in bursts until each has `warmup_samples`; an estimate is then the cheapest of its
//! samples (any batch may have been descheduled: the cheapest one is what the mode can do).
//! After that it is a moving average that falls faster than it rises (a batch can be slowed
//! by the system but not sped up by it). The first batch of a pooled burst is not counted: after
//! a spell alone the helpers are asleep, and that batch is mostly over by the time one wakes
//! (it stays awake for the next ones); counting it would make the pool look no better than the
//! thread alone for good.
//! A batch takes the cheaper mode, except for short bursts of the other one ("probes"): often
//! while the two are close, the other has few samples or the machine has moved since they were
//! last compared, rarely once one is clearly cheaper and both are well measured (a probe costs
//! the difference between them).
//!
//! Which is cheaper is not read off the two estimates: the way in use is timed at every batch
//! and the other only in probes, so the two differ by whatever the machine did in between. A
//! slow spell raises the estimate of the way in use while the other keeps its figure from
//! before, and the advisor moves to the other way for the length of the spell and beyond (in
//! `benchmarks/compare.py shards`, a loader over 64 shards sent up to 37% of its batches
//! through streaming stores at 1.3x to 1.6x the cost of cached ones). So each probe is paired
//! with the way in use just before it: the probe's batches after its first, each against the
//! estimate of a way timed at least `pair_streak_min` times in a row right before, say how the
//! two compare on the machine as it is at that moment. Those pairs teach a ratio (the first
//! sets it: the warm-up's estimates may carry a first touch of the destination), and the ratio
//! decides. While the last pair disagrees with the ratio by more than a quarter, or the way in
//! use has moved by more than a quarter since the last pair, or no pair has been timed yet,
//! the verdict is not clear and the probes come as often as a close call's.
//!
//! The state is a few atomics updated without a lock: two batches finishing at once may lose
//! one sample, which only slows the averaging. Either mode gives the same bytes.
//!
//! The same learning picks a large raw gather's stores (raw_copy.zig: streaming stores win
//! when the destination is cold, cached ones when it is still in the cache), with its own
//! advisor: `AdvisorOf` makes one for any choice between a candidate way and a default one.
//! Two advisors of the same batches must not probe in step (each would blame the other's
//! probes on its own mode): theirs differ by `Tuning.salt`, and the stores' warm-up bursts
//! are twice as long as the pool's, so that each of its ways meets both pool modes.
const std = @import("std");
const assert = std.debug.assert;

pub const Mode = enum(u1) { pooled, alone };

/// Who decides, process-wide (lx_pool_set_policy; LX_POOL_* in loaderx.h): the advisors
/// (`auto`, the default), or a fixed answer for every batch large enough for the pool:
/// helpers `always` join, or `never` (benchmarks, and processes that share a machine).
pub const Policy = enum(u32) { auto = 0, always = 1, never = 2 };

/// Samples of each mode before the modes are compared.
pub const warmup_samples = 8;
/// Samples of a mode after which a clear verdict against it is probed rarely.
pub const samples_settled = 32;
/// Batches in a probe burst (and in a burst of the warm-up). The first batch pooled after a spell alone usually has to wake a
/// sleeping helper; the rest of the burst measures the pool as it runs when in use.
pub const probe_burst = 4;
/// One burst in this many is a probe while the two estimates are within 25% of each other...
pub const probe_period_close = 32;
/// ...and one in this many once one mode is clearly cheaper and the other has
/// `samples_settled` samples.
pub const probe_period_clear = 256;
/// The candidate way must be this much cheaper (in 1/16ths) to be preferred: a helper that
/// gains less is not worth the core it takes from the rest of the program, and a destination
/// written through the caches is still there for whoever reads the batch next.
pub const candidate_gain_min_16ths = 1;
/// A sample counts at most 1 + 1/2^sample_rise_shift times the current estimate (1.25x): a
/// batch whose thread the system descheduled says nothing about the way, and on a small shared
/// machine such batches are common. One of them then moves an estimate by at most 1/32 (a
/// quarter, weighted 1/8), half the gain a candidate way needs, so it cannot flip a settled
/// choice by itself; with a cap of 4x it could move it by 37%, and a store then sent its
/// gathers the slower way until probes of the other corrected it. A real slowdown still moves the
/// estimate by about 3% per batch (a doubling in about 23 batches).
pub const sample_rise_shift = 2;
/// Each sample above its estimate moves it by 1/2^average_shift of the difference...
pub const average_shift = 3;
/// ...and one below by 1/2^fall_shift: a faster batch is what the way can do now (the
/// warm-up's reasoning), and a stale estimate of a way probed in a burst of four comes down
/// within that burst.
pub const fall_shift = 1;
/// A streak of one way this long has a current estimate, which the other way's next streak is
/// paired with (a burst of the way in use qualifies; alternating single samples do not).
pub const pair_streak_min = probe_burst;
/// A streak's samples paired with the other way's estimate: its 2nd to 4th (a probe burst's).
pub const pair_samples_max = probe_burst;
pub const ratio_one: u64 = 1 << 10; // the ratio's unit
const no_way: u8 = 2;

/// Estimates are nanoseconds per 2^cost_scale_shift bytes, so that a batch of a few hundred
/// KiB keeps its precision; elapsed times are capped so that no product overflows.
const cost_scale_shift = 16;
const elapsed_ns_max: u64 = 1 << 40;

comptime {
    assert(probe_period_close < probe_period_clear);
    assert(candidate_gain_min_16ths < 16);
    assert(fall_shift < average_shift);
    assert(warmup_samples % probe_burst == 0);
    assert(warmup_samples < samples_settled);
    // The largest estimate, times the largest factor takesCandidate() and blend() multiply it by.
    assert(@as(u128, elapsed_ns_max << cost_scale_shift) * 16 * 2 < std.math.maxInt(u64));
    // One outlier moves an estimate less than a candidate must gain (in 256ths).
    assert(sample_rise_shift >= 1 and candidate_gain_min_16ths * 16 > (256 >> sample_rise_shift) >> average_shift);
}

/// How an advisor schedules its batches.
pub const Tuning = struct {
    /// Batches in a burst of the warm-up (a multiple of probe_burst).
    warmup_burst: u64 = probe_burst,
    /// Whether the first batch of a burst of the candidate way is left out of the samples (the
    /// pool's: it pays for waking a sleeping helper).
    skip_burst_start: bool = false,
    /// Mixed into the probe schedule.
    salt: u64 = 0,
};

/// An advisor choosing between the two values of `Way`: the first is the candidate (it must
/// gain candidate_gain_min_16ths to be preferred), the second the default.
pub fn AdvisorOf(comptime Way: type, comptime tuning: Tuning) type {
    comptime {
        const names = @typeInfo(Way).@"enum".field_names;
        assert(names.len == 2);
        assert(@backingInt(@field(Way, names[0])) == 0 and @backingInt(@field(Way, names[1])) == 1);
        assert(tuning.warmup_burst % probe_burst == 0);
        assert(warmup_samples % probe_burst == 0);
    }
    return struct {
        const Self = @This();
        pub const candidate: Way = @fromBackingInt(@intCast(0));
        pub const default: Way = @fromBackingInt(@intCast(1));

        /// A batch's way, and its place in the advisor's sequence (which says whether it counts).
        pub const Choice = struct {
            mode: Way,
            ticket: u64,

            /// Whether its timing is a sample (see Tuning.skip_burst_start).
            pub fn counted(choice: Choice) bool {
                return !tuning.skip_burst_start or choice.mode != candidate or choice.ticket % probe_burst != 0;
            }
        };

        /// The cost estimate of each way, indexed by Way; 0 while the way has no sample.
        costs: [2]std.atomic.Value(u64) = .{ .init(0), .init(0) },
        /// Samples recorded of each way, indexed by Way (counting stops at samples_settled).
        samples: [2]std.atomic.Value(u32) = .{ .init(0), .init(0) },
        /// The candidate's cost over the default's, in units of 1/ratio_one; 0 until the first
        /// pair (see learnPair).
        ratio: std.atomic.Value(u64) = .init(0),
        /// Each way's estimate when the ratio last learned, indexed by Way (0 before): how far
        /// the way in use has moved since.
        paired_at: [2]std.atomic.Value(u64) = .{ .init(0), .init(0) },
        /// What the last pair said (same units): a ratio still far from it is still moving.
        said_last: std.atomic.Value(u64) = .init(0),
        /// The way of the last sample (no_way before any) and how many samples of it in a row.
        streak_way: std.atomic.Value(u8) = .init(no_way),
        streak: std.atomic.Value(u32) = .init(0),
        /// The other way's estimate when this streak began, if it had run long enough to be
        /// current then (0 otherwise): what this streak's first samples are paired with.
        streak_baseline: std.atomic.Value(u64) = .init(0),
        /// Batches advised so far; picks the probes.
        tickets: std.atomic.Value(u64) = .init(0),

        pub fn choose(advisor: *Self) Choice {
            const ticket = advisor.tickets.fetchAdd(1, .monotonic);
            const takes_candidate = if (advisor.warming())
                (ticket / tuning.warmup_burst) % 2 == 0
            else
                takesCandidate(advisor.verdict(), ticket, tuning.salt);
            return .{ .mode = if (takes_candidate) candidate else default, .ticket = ticket };
        }

        /// Learns from a batch of `byte_count` bytes that took `elapsed_ns` as `choice` said.
        pub fn record(advisor: *Self, choice: Choice, byte_count: u64, elapsed_ns: u64) void {
            if (!choice.counted()) return;
            advisor.recordSample(choice.mode, byte_count, elapsed_ns);
        }

        /// Counts a batch of `byte_count` bytes that took `elapsed_ns` in `mode`.
        pub fn recordSample(advisor: *Self, mode: Way, byte_count: u64, elapsed_ns: u64) void {
            if (byte_count == 0 or elapsed_ns == 0) return;
            const stored = &advisor.costs[@backingInt(mode)];
            const samples = &advisor.samples[@backingInt(mode)];
            const sample = sampleCost(byte_count, elapsed_ns);
            advisor.pair(mode, sample);
            const old = stored.load(.monotonic);
            const count = samples.load(.monotonic);
            if (count < samples_settled) _ = samples.fetchAdd(1, .monotonic);
            if (count < warmup_samples) {
                stored.store(if (old == 0) sample else @min(old, sample), .monotonic);
            } else {
                stored.store(blend(old, sample), .monotonic);
            }
        }

        /// Follows each way's streaks. When a way takes over from a streak of the other at least
        /// `pair_streak_min` long, that one's estimate is current: the new streak's samples after
        /// its first (which pays for the state the other way left: a cold destination, helpers
        /// asleep), up to `pair_samples_max`, are each paired with it.
        fn pair(advisor: *Self, mode: Way, sample: u64) void {
            const m = @backingInt(mode);
            const run = advisor.streak.load(.monotonic);
            const way = advisor.streak_way.load(.monotonic);
            if (way != m) {
                const current = way == 1 - m and run >= pair_streak_min and !advisor.warming();
                advisor.streak_baseline.store(if (current) advisor.costs[1 - m].load(.monotonic) else 0, .monotonic);
                advisor.streak_way.store(m, .monotonic);
                advisor.streak.store(1, .monotonic);
                return;
            }
            advisor.streak.store(run +| 1, .monotonic);
            const baseline = advisor.streak_baseline.load(.monotonic);
            if (baseline != 0 and run < pair_samples_max) advisor.learnPair(mode, sample, baseline);
        }

        /// Moves the ratio toward what one pair says (blendRatio), or sets it from the first.
        fn learnPair(advisor: *Self, mode: Way, sample: u64, baseline: u64) void {
            const c_cost: u128 = if (mode == candidate) sample else baseline;
            const d_cost: u128 = if (mode == candidate) baseline else sample;
            const said: u64 = @intCast(@min(c_cost * ratio_one / d_cost, std.math.maxInt(u32)));
            // The first pair sets the ratio: the warm-up's estimates may carry a first touch of
            // the destination that no later batch pays.
            const old = advisor.ratio.load(.monotonic);
            advisor.ratio.store(if (old != 0) blendRatio(old, @max(1, said)) else @max(1, said), .monotonic);
            advisor.said_last.store(said, .monotonic);
            advisor.paired_at[@backingInt(mode)].store(sample, .monotonic);
            advisor.paired_at[1 - @backingInt(mode)].store(baseline, .monotonic);
        }

        /// What takesCandidate() weighs: the learned ratio, unsettled while the last pair or the
        /// preferred way has moved by a quarter since; before any pair, the two estimates, unsettled.
        pub fn verdict(advisor: *const Self) Verdict {
            const samples: [2]u32 = .{ advisor.samples[0].load(.monotonic), advisor.samples[1].load(.monotonic) };
            const ratio = advisor.ratio.load(.monotonic);
            if (ratio == 0) return .{
                .candidate = advisor.cost(candidate),
                .default = advisor.cost(default),
                .candidate_samples = samples[@backingInt(candidate)],
                .default_samples = samples[@backingInt(default)],
                .drifted = true,
            };
            const preferred = if (prefersCandidate(ratio, ratio_one)) candidate else default;
            const now = advisor.cost(preferred);
            const then = advisor.paired_at[@backingInt(preferred)].load(.monotonic);
            const said = advisor.said_last.load(.monotonic);
            return .{
                .candidate = ratio,
                .default = ratio_one,
                .candidate_samples = samples[@backingInt(candidate)],
                .default_samples = samples[@backingInt(default)],
                .drifted = apart(now, then) or apart(ratio, said),
            };
        }

        fn warming(advisor: *const Self) bool {
            return advisor.samples[0].load(.monotonic) < warmup_samples or
                advisor.samples[1].load(.monotonic) < warmup_samples;
        }

        pub fn cost(advisor: *const Self, mode: Way) u64 {
            return advisor.costs[@backingInt(mode)].load(.monotonic);
        }
    };
}

/// Whether the pool's helpers join a batch (pool.runAdvised).
pub const Advisor = AdvisorOf(Mode, .{ .skip_burst_start = true });

/// Whether a large raw gather writes with streaming stores (raw_copy.Stores). Consulted for
/// the same batches as a pool Advisor, so it probes on another schedule (see the top).
pub fn StoresAdvisor(comptime Stores: type) type {
    return AdvisorOf(Stores, .{ .warmup_burst = 2 * probe_burst, .salt = stores_salt });
}

/// Whether a large raw gather fetches its sources non-temporally (raw_copy.Loads). Consulted
/// for the same batches as the pool's and the stores' advisors: its warm-up bursts are twice
/// the stores', so that its first way meets both of theirs and its second the one they then
/// prefer (which way to fetch matters with the stores that will write), and it probes on a
/// third schedule.
pub fn LoadsAdvisor(comptime Loads: type) type {
    return AdvisorOf(Loads, .{ .warmup_burst = 4 * probe_burst, .salt = loads_salt });
}

/// Any constant other than the pool's 0: the probe schedules only need to differ.
const stores_salt: u64 = 0x5EED_0F_5702E5;
const loads_salt: u64 = 0x10AD_5EED_F00D;

/// A way's estimate and its sample count (what the tests give takesCandidate).
pub const Estimate = struct { cost: u64, samples: u32 };

/// What takesCandidate() compares (AdvisorOf.verdict: costs or ratio, samples, unsettled).
pub const Verdict = struct {
    candidate: u64,
    default: u64,
    candidate_samples: u32,
    default_samples: u32,
    drifted: bool = false,

    pub fn of(candidate: Estimate, default: Estimate) Verdict {
        return .{ .candidate = candidate.cost, .default = default.cost, .candidate_samples = candidate.samples, .default_samples = default.samples };
    }
};

/// Whether batch number `ticket` takes the candidate way once both ways are warm: the cheaper
/// one by `verdict`, except in probe bursts: often while the two are within a quarter of
/// each other, while the other way has few samples, or while the machine has moved since
/// they were last paired; rarely otherwise.
fn takesCandidate(verdict: Verdict, ticket: u64, salt: u64) bool {
    assert(verdict.candidate > 0 and verdict.default > 0);
    const prefer_candidate = prefersCandidate(verdict.candidate, verdict.default);
    const other_samples = if (prefer_candidate) verdict.default_samples else verdict.candidate_samples;
    const cheaper = @min(verdict.candidate, verdict.default);
    const dearer = @max(verdict.candidate, verdict.default);
    const clear = dearer * 4 > cheaper * 5 and other_samples >= samples_settled and !verdict.drifted;
    const period: u64 = if (clear) probe_period_clear else probe_period_close;
    const probe = mix((ticket / probe_burst) ^ salt) % period == 0;
    return prefer_candidate != probe;
}

/// Whether a candidate costing `candidate` gains enough over a default costing `default`.
fn prefersCandidate(candidate: u64, default: u64) bool {
    return candidate * 16 <= default * (16 - candidate_gain_min_16ths);
}

/// Whether two figures (both nonzero) differ by more than a quarter.
fn apart(a: u64, b: u64) bool {
    return a != 0 and b != 0 and (a * 4 > b * 5 or b * 4 > a * 5);
}

/// The ratio after one pair that said `said` (both in units of 1/ratio_one): a quarter of the
/// way toward it, the pair counted at most 1.5x off the ratio (one descheduled batch then
/// moves the ratio by an eighth at most, which does not turn a clear verdict).
pub fn blendRatio(ratio: u64, said: u64) u64 {
    assert(ratio > 0);
    const bounded = std.math.clamp(said, ratio - ratio / 3, ratio + ratio / 2);
    const moved = if (bounded >= ratio) ratio + (bounded - ratio) / 4 else ratio - (ratio - bounded) / 4;
    return @max(1, moved);
}

/// Nanoseconds per 2^cost_scale_shift bytes, at least 1 (0 means "no sample").
pub fn sampleCost(byte_count: u64, elapsed_ns: u64) u64 {
    assert(byte_count > 0);
    const scaled = @min(elapsed_ns, elapsed_ns_max) << cost_scale_shift;
    return @max(1, scaled / byte_count);
}

/// The estimate after one more sample.
pub fn blend(estimate: u64, sample: u64) u64 {
    assert(sample > 0);
    if (estimate == 0) return sample;
    if (sample < estimate) return @max(1, estimate - ((estimate - sample) >> fall_shift));
    const bounded = @min(sample, estimate + (estimate >> sample_rise_shift));
    const moved = estimate - (estimate >> average_shift) + (bounded >> average_shift);
    return @max(1, moved);
}

/// Spreads consecutive burst numbers over the probe periods, so that probes do not fall in
/// step with a caller that alternates between batches of different kinds (splitmix64's
/// finaliser).
fn mix(value: u64) u64 {
    var z = value +% 0x9E3779B97F4A7C15;
    z = (z ^ (z >> 30)) *% 0xBF58476D1CE4E5B9;
    z = (z ^ (z >> 27)) *% 0x94D049BB133111EB;
    return z ^ (z >> 31);
}

const testing = std.testing;

test "the warm-up alternates bursts until each mode has its samples, keeping the cheapest" {
    var advisor: Advisor = .{};
    var ticket: u64 = 0;
    while (advisor.warming()) : (ticket += 1) {
        const choice = advisor.choose();
        try testing.expectEqual(ticket, choice.ticket);
        try testing.expectEqual(if ((ticket / probe_burst) % 2 == 0) Mode.pooled else Mode.alone, choice.mode);
        // The first batch of each pooled burst is slow (it wakes the helpers) and not counted.
        const elapsed: u64 = if (choice.mode == .alone) 20_000 else if (ticket % probe_burst == 0) 500_000 else 10_000;
        advisor.record(choice, 1 << 20, elapsed);
    }
    // Alone: tickets 4-7 and 12-15. Pooled, 3 of each 4: tickets 1-3, 9-11, then 17 and 18.
    try testing.expectEqual(@as(u64, 19), ticket);
    try testing.expectEqual(sampleCost(1 << 20, 10_000), advisor.cost(.pooled));
    try testing.expectEqual(sampleCost(1 << 20, 20_000), advisor.cost(.alone));
    // From here the pool, twice as fast, takes nearly every batch.
    var pooled: u32 = 0;
    for (0..1000) |_| pooled += @intFromBool(advisor.choose().mode == .pooled);
    try testing.expect(pooled > 950);
}

/// The pool advisor's mode of batch number `ticket` once both modes are warm.
fn decide(pooled: Estimate, alone: Estimate, ticket: u64) Mode {
    return if (takesCandidate(.of(pooled, alone), ticket, 0)) .pooled else .alone;
}

/// How many of `count` consecutive tickets decide() sends to each mode, both well measured.
fn tally(pooled: u64, alone: u64, count: u64) [2]u64 {
    return tallySamples(pooled, alone, samples_settled, count);
}

fn tallySamples(pooled: u64, alone: u64, samples: u32, count: u64) [2]u64 {
    var modes: [2]u64 = .{ 0, 0 };
    const p: Estimate = .{ .cost = pooled, .samples = samples };
    const a: Estimate = .{ .cost = alone, .samples = samples };
    for (0..count) |ticket| modes[@backingInt(decide(p, a, ticket))] += 1;
    return modes;
}

test "the cheaper mode takes most batches; a close call is probed more often than a clear one" {
    const count = 1 << 16;
    // The pool clearly cheaper (twice as fast): probes alone about once per 256 bursts.
    const clear = tally(100, 200, count);
    try testing.expect(clear[1] > 0);
    try testing.expect(clear[1] < count / 40);
    // Alone cheaper by 20%: a close call, probed about once per 32 bursts.
    const close = tally(120, 100, count);
    try testing.expect(close[0] > clear[1] * 3);
    try testing.expect(close[0] < count / 4);
    try testing.expect(close[1] > close[0]);
    // Within the pool's minimum gain, the thread alone is preferred.
    const tie = tally(100, 100, count);
    try testing.expect(tie[1] > tie[0]);
    // A clear verdict against a mode with few samples is still probed often.
    const young = tallySamples(100, 200, warmup_samples, count);
    try testing.expect(young[1] > clear[1] * 3);
    try testing.expect(young[1] < count / 4);
}

test "probes come in bursts of consecutive batches" {
    var ticket: u64 = 0;
    var bursts: u32 = 0;
    while (ticket < 1 << 16) : (ticket += probe_burst) {
        const pooled: Estimate = .{ .cost = 100, .samples = samples_settled };
        const alone: Estimate = .{ .cost = 200, .samples = samples_settled };
        const first = decide(pooled, alone, ticket);
        for (1..probe_burst) |offset| try testing.expectEqual(first, decide(pooled, alone, ticket + offset));
        if (first == .alone) bursts += 1;
    }
    try testing.expect(bursts > 0);
}

test "an advisor follows the machine: it moves to the mode that became cheaper" {
    var advisor: Advisor = .{};
    const bytes = 768 * 1024;
    // The pool halves the time: after the warm-up, it is preferred.
    var modes: [2]u32 = .{ 0, 0 };
    for (0..4096) |_| {
        const choice = advisor.choose();
        modes[@backingInt(choice.mode)] += 1;
        advisor.record(choice, bytes, if (choice.mode == .pooled) 10_000 else 20_000);
    }
    try testing.expect(modes[0] > modes[1] * 20);
    try testing.expect(modes[1] > 1);
    // Then the pool becomes slower than the thread alone (a shared physical core).
    modes = .{ 0, 0 };
    for (0..4096) |_| {
        const choice = advisor.choose();
        modes[@backingInt(choice.mode)] += 1;
        advisor.record(choice, bytes, if (choice.mode == .pooled) 25_000 else 20_000);
    }
    try testing.expect(modes[1] > modes[0] * 4);
    try testing.expect(advisor.cost(.alone) < advisor.cost(.pooled));
    // The estimates end within a few percent of the truth.
    const alone_truth = sampleCost(bytes, 20_000);
    try testing.expect(advisor.cost(.alone) * 100 > alone_truth * 97);
    try testing.expect(advisor.cost(.alone) * 100 < alone_truth * 103);
}

test "an outlier moves an estimate by a bounded step; empty samples are ignored" {
    try testing.expectEqual(@as(u64, 800), blend(0, 800));
    const settled = blend(800, 800);
    try testing.expectEqual(@as(u64, 800), settled);
    // A batch descheduled for a second counts as at most 1.25x the estimate.
    const after = blend(800, sampleCost(1 << 20, 1_000_000_000));
    try testing.expectEqual(@as(u64, 800 - 100 + 125), after);
    // A faster one counts in full, and moves the estimate half way.
    try testing.expectEqual(@as(u64, 600), blend(800, 400));
    var advisor: Advisor = .{};
    advisor.recordSample(.pooled, 0, 5);
    advisor.recordSample(.pooled, 5, 0);
    advisor.record(.{ .mode = .pooled, .ticket = probe_burst }, 1 << 20, 5_000);
    try testing.expectEqual(@as(u64, 0), advisor.cost(.pooled));
    try testing.expectEqual(@as(u32, 0), advisor.samples[0].load(.monotonic));
    // The longest elapsed time over one byte does not overflow.
    try testing.expect(sampleCost(1, std.math.maxInt(u64)) > 0);
    try testing.expect(blend(sampleCost(1, std.math.maxInt(u64)), sampleCost(1, std.math.maxInt(u64))) > 0);
}

/// Bytes per sample in the tests below: a sample's cost is then its nanoseconds.
const bytes_per_ns = 1 << cost_scale_shift;

/// An advisor whose two modes each have samples_settled samples of the given nanoseconds.
fn settledAdvisor(pooled_ns: u64, alone_ns: u64) Advisor {
    var advisor: Advisor = .{};
    for (0..samples_settled) |_| {
        advisor.recordSample(.pooled, bytes_per_ns, pooled_ns);
        advisor.recordSample(.alone, bytes_per_ns, alone_ns);
    }
    return advisor;
}

test "one descheduled batch does not flip a settled choice" {
    var advisor = settledAdvisor(10_000, 12_000);
    // The pool, 1/6 cheaper, takes the batches that are not probes.
    var pooled: u32 = 0;
    for (0..1024) |_| pooled += @intFromBool(advisor.choose().mode == .pooled);
    try testing.expect(pooled > 900);
    // One pooled batch that took ten times as long (its thread was descheduled).
    advisor.recordSample(.pooled, bytes_per_ns, 100_000);
    try testing.expectEqual(@as(u64, 10_000 - 1_250 + 1_562), advisor.cost(.pooled));
    pooled = 0;
    for (0..1024) |_| pooled += @intFromBool(advisor.choose().mode == .pooled);
    try testing.expect(pooled > 900);
}

test "a slow spell that slows both ways keeps the advisor on the cheaper one, and it stays there after" {
    var advisor = settledAdvisor(10_000, 12_000);
    // Every batch takes twice as long for 2,048 batches (a busy machine). The probes pair each
    // alone batch with the pooled estimate of its moment: alone is still the dearer.
    var wrong: u32 = 0;
    for (0..2048) |_| {
        const choice = advisor.choose();
        wrong += @intFromBool(choice.mode == .alone);
        advisor.record(choice, bytes_per_ns, if (choice.mode == .pooled) 20_000 else 24_000);
    }
    try testing.expect(advisor.cost(.pooled) > 18_000);
    // Only probes went alone, a burst in 32 at most (60 batches; the estimates compared as
    // they stood gave 56 here, their own rises bounding each other).
    try testing.expect(wrong <= 2048 / 32 * probe_burst * 2);
    wrong = 0;
    for (0..2048) |_| {
        const choice = advisor.choose();
        wrong += @intFromBool(choice.mode == .alone);
        advisor.record(choice, bytes_per_ns, if (choice.mode == .pooled) 10_000 else 12_000);
    }
    try testing.expect(wrong <= 2048 / 32 * probe_burst * 2);
    try testing.expect(advisor.cost(.pooled) < advisor.cost(.alone));
}

test "a slow spell that left the cheaper way's estimate high is corrected within a few probes" {
    // From 16 places in the probe schedule: how soon the first probe comes depends on it.
    var wrong: u32 = 0;
    var worst: u32 = 0;
    for (0..16) |k| {
        const batches = try afterSpell(k * 997);
        wrong += batches;
        worst = @max(worst, batches);
    }
    // The streaming batches after the spell, paired with the cached estimate it left, turn the
    // ratio toward streaming stores, but their last pair disagrees with it by more than a
    // quarter: probed as a close call (a burst in 32), the first probe settles it. 3,322
    // batches in all, 554 at worst (with stop 52's anchors, 3,287 and 551; neither, 21,472).
    try testing.expect(wrong < 16 * 300);
    try testing.expect(worst < 800);
}

/// The shape of a trace from the shards bench: cached stores (the default way, truly 10,000)
/// were in use when the machine got busy and were timed at 25,000 while the streaming ones'
/// estimate stood at 30,000; the spell ended while streaming stores were in use, and those
/// came back to their 14,000, leaving the cached estimate at 25,000. Starting at ticket
/// `start`, returns how many of the next 4,096 batches still took the streaming stores.
fn afterSpell(start: u64) !u32 {
    const Ways = enum(u1) { streaming, cached };
    const truth: [2]u64 = .{ 14_000, 10_000 };
    var advisor: AdvisorOf(Ways, .{}) = .{};
    for (0..samples_settled) |_| {
        advisor.recordSample(.streaming, bytes_per_ns, truth[0]);
        advisor.recordSample(.cached, bytes_per_ns, truth[1]);
    }
    for (0..64) |_| advisor.recordSample(.streaming, bytes_per_ns, 30_000);
    for (0..64) |_| advisor.recordSample(.cached, bytes_per_ns, 25_000);
    for (0..8) |_| advisor.recordSample(.streaming, bytes_per_ns, truth[0]);
    try testing.expect(advisor.cost(.cached) > 24_000);
    try testing.expect(advisor.cost(.streaming) < truth[0] + 100);
    advisor.tickets.store(start, .monotonic);
    var wrong: u32 = 0;
    for (0..4096) |_| {
        const choice = advisor.choose();
        wrong += @intFromBool(choice.mode == .streaming);
        advisor.record(choice, bytes_per_ns, truth[@backingInt(choice.mode)]);
    }
    try testing.expect(advisor.cost(.cached) < advisor.cost(.streaming));
    return wrong;
}

test "a slow spell on the way in use does not send the batches after it the dearer way" {
    // Cached stores cost 10,000, streaming ones 14,000, and cached stores 1.5x on their first
    // batch after streaming ones (a cold destination); 300 batches at half speed, then 4,096.
    const Ways = enum(u1) { streaming, cached };
    const truth: [2]u64 = .{ 14_000, 10_000 };
    var advisor: AdvisorOf(Ways, .{}) = .{};
    for (0..samples_settled) |_| {
        advisor.recordSample(.streaming, bytes_per_ns, truth[0]);
        for (0..pair_streak_min) |_| advisor.recordSample(.cached, bytes_per_ns, truth[1]);
    }
    var previous: Ways = .cached;
    var wrong: u32 = 0;
    for (0..300 + 4096) |batch| {
        const choice = advisor.choose();
        const slow: u64 = if (batch < 300) 2 else 1;
        const cold: u64 = if (choice.mode == .cached and previous == .streaming) 3 else 2;
        advisor.record(choice, bytes_per_ns, truth[@backingInt(choice.mode)] * slow * cold / 2);
        if (batch >= 300) wrong += @intFromBool(choice.mode == .streaming);
        previous = choice.mode;
    }
    // After the spell, only probes went the dearer way: 18 batches. Deciding on the two
    // estimates as they stood (before the pairs), the advisor moved to streaming stores during
    // the spell, and a probe of cached ones read their cold first batch: 354 batches.
    try testing.expect(wrong < 4096 / 32);
}

test "a warm-up that met a bad moment for the pool is corrected within a thousand batches" {
    var advisor: Advisor = .{};
    const bytes = 768 * 1024;
    // During the warm-up the pool is twice as slow as the thread alone...
    for (0..2 * warmup_samples) |_| {
        const choice = advisor.choose();
        advisor.record(choice, bytes, if (choice.mode == .pooled) 40_000 else 20_000);
    }
    try testing.expect(advisor.cost(.pooled) > advisor.cost(.alone));
    // ...then twice as fast: the probes find it out.
    for (0..4096) |batch| {
        const choice = advisor.choose();
        advisor.record(choice, bytes, if (choice.mode == .pooled) 10_000 else 20_000);
        if (batch == 1000) try testing.expect(advisor.cost(.pooled) < advisor.cost(.alone));
    }
    try testing.expect(advisor.cost(.pooled) < advisor.cost(.alone));
}

test "a stores advisor warms up and probes out of step with the pool advisor of the same batches" {
    const Stores = enum(u1) { streaming, cached };
    var pool_advisor: Advisor = .{};
    var stores_advisor: StoresAdvisor(Stores) = .{};
    // Warm-up: each way of the stores meets both pool modes (counts indexed [stores][pool]).
    var met: [2][2]u32 = .{ .{ 0, 0 }, .{ 0, 0 } };
    for (0..4 * probe_burst) |_| {
        const pool_choice = pool_advisor.choose();
        const stores_choice = stores_advisor.choose();
        met[@backingInt(stores_choice.mode)][@backingInt(pool_choice.mode)] += 1;
        pool_advisor.record(pool_choice, 1 << 20, 10_000);
        stores_advisor.record(stores_choice, 1 << 20, 10_000);
    }
    for (met) |row| for (row) |count| try testing.expectEqual(@as(u32, probe_burst), count);
    // Every stores batch counts (no helper to wake), so its warm-up is over after 16 batches.
    try testing.expectEqual(@as(u32, 2 * warmup_samples), stores_advisor.samples[0].load(.monotonic) + stores_advisor.samples[1].load(.monotonic));
    // Once settled, their probe bursts rarely coincide.
    const clear: Estimate = .{ .cost = 100, .samples = samples_settled };
    const dear: Estimate = .{ .cost = 200, .samples = samples_settled };
    var pool_probes: u32 = 0;
    var both: u32 = 0;
    var ticket: u64 = 0;
    while (ticket < 1 << 20) : (ticket += probe_burst) {
        const pool_probe = !takesCandidate(.of(clear, dear), ticket, 0);
        const stores_probe = !takesCandidate(.of(clear, dear), ticket, stores_salt);
        pool_probes += @intFromBool(pool_probe);
        both += @intFromBool(pool_probe and stores_probe);
    }
    try testing.expect(pool_probes > 100);
    try testing.expect(both * 8 < pool_probes);
}

test "a loads advisor's first way meets both ways of the stores' warm-up, and it probes on its own schedule" {
    const Ways = enum(u1) { first, second };
    var stores_advisor: StoresAdvisor(Ways) = .{};
    var loads_advisor: LoadsAdvisor(Ways) = .{};
    // Counts indexed [loads][stores].
    var met: [2][2]u32 = @splat(@splat(0));
    for (0..8 * probe_burst) |_| {
        const stores_choice = stores_advisor.choose();
        const loads_choice = loads_advisor.choose();
        met[@backingInt(loads_choice.mode)][@backingInt(stores_choice.mode)] += 1;
        stores_advisor.record(stores_choice, 1 << 20, 10_000);
        loads_advisor.record(loads_choice, 1 << 20, 10_000);
    }
    // Its first burst (16 batches) spans the whole warm-up of the stores, so its first way
    // meets both of theirs; its second then meets the stores' way of choice.
    try testing.expectEqual(@as(u32, 2 * probe_burst), met[0][0]);
    try testing.expectEqual(@as(u32, 2 * probe_burst), met[0][1]);
    try testing.expectEqual(@as(u32, 4 * probe_burst), met[1][0] + met[1][1]);
    try testing.expectEqual(@as(u32, 8 * probe_burst), loads_advisor.samples[0].load(.monotonic) + loads_advisor.samples[1].load(.monotonic));
    const clear: Estimate = .{ .cost = 100, .samples = samples_settled };
    const dear: Estimate = .{ .cost = 200, .samples = samples_settled };
    var loads_probes: u32 = 0;
    var with_another: u32 = 0;
    var ticket: u64 = 0;
    while (ticket < 1 << 20) : (ticket += probe_burst) {
        const loads_probe = !takesCandidate(.of(clear, dear), ticket, loads_salt);
        const other_probe = !takesCandidate(.of(clear, dear), ticket, 0) or !takesCandidate(.of(clear, dear), ticket, stores_salt);
        loads_probes += @intFromBool(loads_probe);
        with_another += @intFromBool(loads_probe and other_probe);
    }
    try testing.expect(loads_probes > 100);
    try testing.expect(with_another * 4 < loads_probes);
}
