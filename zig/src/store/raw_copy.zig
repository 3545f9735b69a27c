//! The pipelined copy of raw records (fixed-size, and ragged: copyRagged), shared by a store's
//! gather and a view's.
//!
//! A random record of a large dataset is a cache miss and a TLB miss, or two when its table
//! entry must be read first. Copied one after another those misses follow each other; here the
//! loads of the next group of records start before the current group is copied, so the misses
//! of a group overlap each other and the copy of the group before.
//!
//! Streaming stores. A store to a line that is not in the cache first reads that line from
//! memory, only to overwrite it. When the destination is cold (a loader's ring of batches, a
//! fresh result) that read is a third of the memory traffic of a large copy; x86-64's
//! non-temporal stores skip it and send the line to memory directly. When the destination is
//! still in the cache (one array gathered into again and again) they are slower: they evict
//! the lines. Which case a batch is in is learned from timings (`Stores`, pool_advice.zig).
const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const limits = @import("../base/limits.zig");
const pool = @import("../os/pool.zig");
const pool_advice = @import("../os/pool_advice.zig");
const Store = @import("store.zig").Store;

/// Records whose misses are kept in flight together (the loads of the next group start before
/// the current one is copied): enough to cover a memory round trip, few enough that the
/// prefetches (up to prefetch_lines_max per record) do not crowd each other out. With groups of
/// 32, a gather of 256 B records ran no faster than NumPy's plain loop; the record-size sweep
/// with groups of 8 is in README.md ("A raw gather finds its records before it copies them").
pub const group = 8;
/// std's false-sharing unit: 128 bytes on x86-64, two of its 64-byte lines, so the prefetches
/// below start every other line of a record (the copy's own loads bring the rest). Stepping
/// 64 bytes measured no faster on packed token records (benchmarks/reports/ragged-loader.md,
/// "The dense reference's page alignment").
const cache_line = std.atomic.cache_line;
/// Lines started per record (prefetchRecord).
const prefetch_lines_max = 4;

/// Where a batch position's record lives: a store and the record's index in it.
pub const Located = struct { store: *const Store, index: u64 };

/// How a copy writes its destination: around the caches, or through them.
pub const Stores = enum(u1) { streaming, cached };

/// Whether this build has streaming stores: movntdq is part of x86-64's baseline (SSE2), but
/// only the LLVM backend assembles it; the self-hosted one (Zig's Debug builds) copies
/// through the caches, so the Zig suite tests these stores in its ReleaseFast run.
pub const has_streaming_stores = builtin.cpu.arch == .x86_64 and builtin.zig_backend == .stage2_llvm;
/// Records below this size keep cached stores: a record of a few lines is mostly partial
/// lines at its ends, and small sizes take the inlined copies of copyRecords.
pub const streaming_stride_min: u64 = 1024;
/// Batches below this size keep cached stores: they usually fit in the caches, where a
/// destination that stays warm is cheaper to write again.
pub const streaming_bytes_min: u64 = 1 << 20;

/// Whether a dense batch of `byte_count` bytes in slots of `stride` may use streaming stores.
pub fn streams(stride: u64, byte_count: u64) bool {
    return has_streaming_stores and stride >= streaming_stride_min and byte_count >= streaming_bytes_min;
}

/// How a copy reads its sources. Records of a dataset larger than the caches are read once
/// per batch: fetched as non-temporal (prefetchnta) they stop evicting what stays, among it
/// the destination. On the AMD EPYC VM with an 8 MiB L3, a build that always fetched this way
/// gathered 256 records of 12 KiB from 120 MiB about 1.2x as fast into one reused array and
/// into a ring of two. Records that stay in the caches from batch to batch are the opposite
/// case: from 3.6 MiB of them (in that L3) it ran at 0.8x, since a line fetched that way
/// leaves the caches when it is done with. Which case a store is in is learned, like the
/// stores (README: "Large raw gathers learn how to fetch their records").
pub const Loads = enum(u1) { non_temporal, temporal };

/// What each store and view learns about its own large raw gathers.
pub const StoresAdvisor = pool_advice.StoresAdvisor(Stores);
pub const LoadsAdvisor = pool_advice.LoadsAdvisor(Loads);

/// Who picks the stores of a batch that may stream, process-wide (lx_stores_set_policy;
/// LX_STORES_* in loaderx.h): its store's or view's advisor (`auto`, the default), or a fixed
/// answer. A fixed one is for measuring each way by itself (benchmarks/probes/loader_overhead.py), and for
/// a program whose next step reads every batch at once, which a destination left in the cache
/// serves better than a faster copy. Batches that may not stream keep cached stores whatever
/// the policy.
pub const StoresPolicy = enum(u32) { auto = 0, streaming = 1, cached = 2 };
pub var stores_policy: std.atomic.Value(StoresPolicy) = .init(.auto);

/// A store's or a view's advisors of its large raw gathers.
pub const CopyAdvisors = struct {
    stores: StoresAdvisor = .{},
    loads: LoadsAdvisor = .{},
};

/// Runs the gather `task` (a store's or a view's: it has `destination`, `stores` and `loads`
/// fields) on the pool as its `pool_advisor` says. When the batch copies raw records
/// (`copies_raw`, fixed-size or ragged) and may stream, the stores policy, or under `auto` the stores advisor, picks
/// the task's stores, and the loads advisor its loads (each advisor learns from the batch's
/// time); otherwise the task keeps cached stores and temporal loads.
pub fn runGather(comptime Task: type, task: *Task, item_count: usize, batch_plan: pool.Plan, byte_count: u64, copies_raw: bool, pool_advisor: *pool.Advisor, advisors: *CopyAdvisors) void {
    // A ragged batch (slots at offsets) streams as fixed-size records of its mean size would.
    const ragged = task.destination.offsets != null or task.destination.padded != null;
    const stride = if (ragged) byte_count / @max(1, item_count) else task.destination.stride;
    const may_stream = copies_raw and streams(stride, byte_count);
    const policy = stores_policy.load(.monotonic);
    const stores: ?StoresAdvisor.Choice = if (may_stream and policy == .auto) advisors.stores.choose() else null;
    const loads: ?LoadsAdvisor.Choice = if (may_stream) advisors.loads.choose() else null;
    task.stores = if (stores) |c| c.mode else if (may_stream and policy == .streaming) .streaming else .cached;
    task.loads = if (loads) |c| c.mode else .temporal;
    const elapsed = pool.runAdvised(Task, task, item_count, batch_plan, byte_count, pool_advisor, may_stream) orelse return;
    if (stores) |c| advisors.stores.record(c, byte_count, elapsed);
    if (loads) |c| advisors.loads.record(c, byte_count, elapsed);
}

/// Copies the raw records of positions begin, begin+1, ... of a batch to dst (slot i at
/// dst + i * stride) while each is exactly `stride` bytes and needs no check beyond
/// Store.rawSource's; returns the first position not copied (`end` when all were). That record
/// needs more (decompression, a checksum, a size to re-read): the caller gathers it with its
/// messages. `batch.locate(i)` gives position i's record; the caller checked every index and
/// holds the shared lock of every store they name. `stores` is a hint: sizes that `streams`
/// refuses are copied through the caches. `loads` says how the sources are fetched.
pub fn copy(batch: anytype, dst: [*]u8, stride: u64, begin: usize, end: usize, stores: Stores, loads: Loads) usize {
    assert(begin <= end);
    if (stride == 0 or stride > limits.record_size_max) return begin;
    return switch (loads) {
        inline else => |way| copyFetching(way, batch, dst, stride, begin, end, stores),
    };
}

/// Copies the raw records of positions begin, begin+1, ... of a ragged batch (slot i is
/// dst[slots.slotStart(i)..][0..slots.slotLength(i)]: batch.Offsets, packed, or a
/// batch/padded.zig Padded, each slot at the start of its block) while each is stored raw at
/// its slot's length and needs no check beyond Store.rawSource's; returns the first position
/// not copied (`end` when all were), which the caller gathers with its messages (an empty
/// record, a compressed one, a chunk not mapped yet). As copy() does for fixed-size records,
/// it finds a window of sources before it copies any, starts the loads of each group of
/// records before the group before it is copied, so that their misses overlap, and writes and
/// reads as `stores` and `loads` say (padded records below streaming_stride_min keep cached
/// stores). The caller checked every index and every slot's length, and holds the shared lock
/// of every store `batch.locate` names.
pub fn copyRagged(batch: anytype, dst: [*]u8, slots: anytype, begin: usize, end: usize, stores: Stores, loads: Loads) usize {
    assert(begin <= end);
    return switch (loads) {
        inline else => |way| copyRaggedFetching(way, batch, dst, slots, begin, end, stores),
    };
}

fn copyRaggedFetching(comptime loads: Loads, batch: anytype, dst: [*]u8, slots: anytype, begin: usize, end: usize, stores: Stores) usize {
    const streaming = stores == .streaming and has_streaming_stores;
    defer if (streaming) fenceStreamingStores();
    var sources: [window][*]const u8 = undefined;
    var i = begin;
    while (i < end) {
        const stop = @min(end, i + window);
        var count: usize = 0;
        for (i..stop) |j| {
            const length = slots.slotLength(j);
            const at = batch.locate(j);
            if (length == 0 or !at.store.copiesRawUnchecked()) break;
            sources[count] = at.store.rawSource(at.index, length) orelse break;
            count += 1;
        }
        copyRaggedSources(loads, dst, slots, i, sources[0..count], streaming);
        i += count;
        if (i < stop) return i;
    }
    return end;
}

/// Copies sources[k] to slot first + k of `slots` for every k, starting the loads of each
/// record (every page it reaches) ragged_ahead records before its copy.
fn copyRaggedSources(comptime loads: Loads, dst: [*]u8, slots: anytype, first: usize, sources: []const [*]const u8, streaming: bool) void {
    // Packed slots lie back to back: streamed, they are one run of the destination
    // (StreamedRun). Padded ones each start a run of their own, and those below
    // streaming_stride_min keep cached stores (mostly partial lines, next to padding).
    const back_to_back = slots.backToBack();
    var run: StreamedRun = .{};
    defer if (streaming) run.finish();
    for (sources[0..@min(sources.len, ragged_ahead)], 0..) |src, k| prefetchPages(loads, src, slots.slotLength(first + k));
    var i: usize = 0;
    while (i < sources.len) {
        const stop = @min(sources.len, i + group);
        for (@min(sources.len, i + ragged_ahead)..@min(sources.len, stop + ragged_ahead)) |k| prefetchPages(loads, sources[k], slots.slotLength(first + k));
        for (i..stop) |k| {
            const length = slots.slotLength(first + k);
            const to = dst + slots.slotStart(first + k);
            if (streaming and (back_to_back or length >= streaming_stride_min)) {
                run.write(loads, to, sources[k], length);
            } else if (loads == .non_temporal and length >= fetch_ahead) {
                copyFetchingAhead(to, sources[k], length);
            } else {
                @memcpy(to[0..length], sources[k][0..length]);
            }
        }
        i = stop;
    }
}

/// copy(), with the way its sources are fetched fixed at compile time (a prefetch's locality
/// is part of the instruction).
fn copyFetching(comptime loads: Loads, batch: anytype, dst: [*]u8, stride: u64, begin: usize, end: usize, stores: Stores) usize {
    const streaming = stores == .streaming and has_streaming_stores and stride >= streaming_stride_min;
    // Streaming stores are weakly ordered: they must be visible before the batch is reported
    // done (by this thread's atomics, to the caller or to the helper's caller).
    defer if (streaming) fenceStreamingStores();
    var sources: [window][*]const u8 = undefined;
    var i = begin;
    while (i < end) {
        const stop = @min(end, i + window);
        const count = resolve(loads, batch, stride, i, stop, &sources);
        copySources(loads, dst + i * stride, stride, sources[0..count], streaming);
        i += count;
        if (i < stop) return i;
    }
    return end;
}

/// Records whose sources are found before the first of them is copied.
const window = 256;

comptime {
    // A window holds whole groups, and its sources fit in a page of the caller's stack (pool
    // helpers and Python threads alike).
    assert(window % group == 0);
    assert(window * @sizeOf([*]const u8) <= 4096);
}

/// Finds the sources of positions begin, begin+1, ... up to the first record that needs more
/// than a plain copy, and returns how many it found. A loop that does nothing else: the
/// lookups of its records (their store, then their run or table entry) overlap each other,
/// where between copies they would wait for each other (a gather of 256 8-byte records took
/// 12% less time, and one from 64 shards 1% to 3% less, once they stopped doing so). Records
/// of at most `early_fetch_stride_max` bytes also start loading here (see there).
fn resolve(comptime loads: Loads, batch: anytype, stride: u64, begin: usize, end: usize, sources: *[window][*]const u8) usize {
    assert(end - begin <= window);
    const early = fetchesEarly(stride);
    var count: usize = 0;
    for (begin..end) |j| {
        const at = batch.locate(j);
        if (!at.store.copiesRawUnchecked()) break;
        const src = at.store.rawSource(at.index, stride) orelse break;
        if (early) prefetchRecord(loads, src, stride);
        sources[count] = src;
        count += 1;
    }
    return count;
}

/// Records of at most this many bytes start loading as soon as resolve finds them, not a group
/// ahead of their copy. Such a record is a line (or two), and finding it costs a few
/// nanoseconds: one load started per record found keeps more of them in flight than a group
/// does, and their misses overlap resolve's own work. In the record-size sweep on the VM with
/// an 8 MiB L3, 256 records of 8 bytes from 128 MiB went from 1.04x-1.10x np.take's speed to
/// 1.24x-1.27x (README, "A raw gather finds its records before it copies them"). In scratch
/// runs, 32 bytes was alike and 256 bytes (four lines a record, up to a thousand lines at once)
/// a quarter slower, so larger records keep the group pipeline of copySources.
const early_fetch_stride_max: u64 = 32;

comptime {
    // Early fetches are for records of a line or two.
    assert(early_fetch_stride_max <= cache_line);
}

fn fetchesEarly(stride: u64) bool {
    return stride <= early_fetch_stride_max;
}

/// Copies sources[k] to dst + k * stride for every k, starting the loads of each group of
/// records before the group before it is copied.
fn copySources(comptime loads: Loads, dst: [*]u8, stride: u64, sources: []const [*]const u8, streaming: bool) void {
    // Slots lie back to back: streamed, they are one run of the destination (StreamedRun).
    var run: StreamedRun = .{};
    defer if (streaming) run.finish();
    // Small records started loading when resolve found them.
    const fetched = fetchesEarly(stride);
    if (!fetched) for (sources[0..@min(sources.len, group)]) |src| prefetchRecord(loads, src, stride);
    var i: usize = 0;
    while (i < sources.len) {
        const stop = @min(sources.len, i + group);
        if (!fetched) for (sources[stop..@min(sources.len, stop + group)]) |src| prefetchRecord(loads, src, stride);
        if (streaming) {
            for (sources[i..stop], 0..) |src, k| run.write(loads, dst + (i + k) * stride, src, stride);
        } else {
            copyRecords(loads, dst + i * stride, sources[i..stop], stride);
        }
        i = stop;
    }
}

/// prefetchRecord, and a line in every further page the record reaches: a record at any
/// offset usually ends on another page than it starts, and that page's translation (a TLB
/// miss, for records scattered over a large store) then starts a group ahead of the copy
/// too (in scratch runs, 0.81x of the same bytes in aligned fixed-size records without it,
/// 0.87x with it, one group ahead).
inline fn prefetchPages(comptime loads: Loads, src: [*]const u8, length: u64) void {
    prefetchRecord(loads, src, length);
    const end = @intFromPtr(src) + length;
    var page = (@intFromPtr(src) | (page_size - 1)) + 1;
    while (page < end) : (page += page_size) fetch(loads, @ptrFromInt(page));
}

/// How many records ahead of its copy a ragged record starts loading: two groups, where a
/// fixed-size copy uses one. Ragged records straddle pages, so each costs more translations;
/// in interleaved scratch runs on the EPYC VM (packed batches of 256 token records, 40 MiB
/// store, against the same bytes in aligned fixed-size records) one group gave 0.81x-0.87x,
/// two 0.83x-0.92x, three and four no better than two.
const ragged_ahead = 2 * group;

/// The smallest page: where a prefetch starts a new translation.
const page_size = std.heap.page_size_min;

/// Starts loading a record's bytes: every cache line of a small one (a record of a few lines
/// would otherwise wait for each line in turn), the first few of a large one (the copy streams
/// the rest).
inline fn prefetchRecord(comptime loads: Loads, src: [*]const u8, stride: u64) void {
    const lines = @min(prefetch_lines_max, (stride + cache_line - 1) / cache_line);
    for (0..lines) |k| fetch(loads, src + k * cache_line);
}

/// Starts loading the line at `at` the way `loads` says.
inline fn fetch(comptime loads: Loads, at: [*]const u8) void {
    @prefetch(at, .{ .rw = .read, .locality = if (loads == .non_temporal) 0 else 3, .cache = .data });
}

/// How far ahead of the line being copied the large-record copies fetch, non-temporal loads
/// only: the hardware prefetcher brings lines the temporal way by itself.
const fetch_ahead = 512;

/// Fetches the line `fetch_ahead` bytes past offset i of a record of `len` bytes, if the
/// record reaches it and the loads are non-temporal.
inline fn fetchAhead(comptime loads: Loads, src: [*]const u8, i: usize, len: usize) void {
    if (loads == .non_temporal and i + fetch_ahead < len) fetch(loads, src + i + fetch_ahead);
}

/// Record k of `sources` to dst[k * stride ..]; common small sizes get a copy of compile-time
/// length, which the compiler inlines instead of calling memcpy.
fn copyRecords(comptime loads: Loads, dst: [*]u8, sources: []const [*]const u8, stride: u64) void {
    switch (stride) {
        inline 1, 2, 4, 8, 16, 32, 64, 128, 256 => |size| {
            for (sources, 0..) |src, k| dst[k * size ..][0..size].* = src[0..size].*;
        },
        else => for (sources, 0..) |src, k| {
            if (loads == .non_temporal and stride >= fetch_ahead) {
                copyFetchingAhead(dst + k * stride, src, stride);
            } else {
                @memcpy(dst[k * stride ..][0..stride], src[0..stride]);
            }
        },
    }
}

/// Copies `len` bytes a line at a time through the caches, fetching the line `fetch_ahead`
/// bytes on the non-temporal way first (memcpy's own prefetches are temporal).
fn copyFetchingAhead(dst: [*]u8, src: [*]const u8, len: usize) void {
    var i: usize = 0;
    while (i + cache_line <= len) : (i += cache_line) {
        fetchAhead(.non_temporal, src, i, len);
        dst[i..][0..cache_line].* = src[i..][0..cache_line].*;
    }
    @memcpy(dst[i..len], src[i..len]);
}

/// Copies the whole 16-byte blocks of a copy whose dst is aligned to them, each with a
/// streaming store, and returns how many bytes it copied: len rounded down to a block. The
/// caller fences before reporting.
///
/// A load whose address matches a recent store's in its low 12 bits waits for that store
/// ("4K aliasing"). Copying line by line, the load of a line follows the stores of the line
/// before: when dst lies a little past src modulo 4096 (`aliasing_lead_max`), every load
/// waits. That case is common: glibc gives every large array (a NumPy result of 3 MiB, a
/// loader's batch) the address of a page plus 16, and raw records of whole pages lie at page
/// offsets in their chunk. There the loads run a line ahead of the stores instead, which
/// moves the waits to leads of one to two lines, where the line-by-line copy has none. A ring
/// of batches at page + 16 took 1.5x the time of one at other offsets before.
fn streamBlocks(comptime loads: Loads, dst: [*]u8, src: [*]const u8, len: usize) usize {
    assert(@intFromPtr(dst) % streaming_width == 0);
    var i: usize = 0;
    const lead = (@intFromPtr(dst) -% @intFromPtr(src)) % aliasing_period;
    if (lead < aliasing_lead_max) {
        i = copyLinesAhead(loads, dst, src, i, len);
    } else {
        while (i + streaming_line <= len) : (i += streaming_line) {
            fetchAhead(loads, src, i, len);
            storeLine(dst + i, loadLine(src + i));
        }
    }
    while (i + streaming_width <= len) : (i += streaming_width) storeStreaming(dst + i, src[i..][0..streaming_width].*);
    return i;
}

/// Streamed copies of records whose slots lie back to back (a window of a batch), written as
/// one run of the destination: every aligned 16-byte block of the run is written by one
/// streaming store, the blocks a slot boundary falls in included, whose bytes come from two
/// records (or more, for records of a few bytes) and are put together here first.
///
/// Why: copied one by one, each record wrote the ends of its slot, up to 15 bytes each, with
/// ordinary stores, into a line whose other bytes the same copy and the next
/// record's write with streaming stores. A line written both ways leaves the write-combining
/// buffer part-filled and is read into the cache for the ordinary store, then thrown out of
/// it again by the next streaming store: on the EPYC VM, 256 packed token records (4-byte
/// aligned) gathered at 0.62x the speed per byte of 256 records of 4,096 bytes, and 4,100-byte
/// dense records at 0.74x, while through the caches (no streaming stores) both ran at 0.84x
/// and 0.91x.
///
/// Only the run's ends keep ordinary stores: the bytes before its first block boundary and
/// after its last (`finish`), which may share their blocks with bytes outside the run (another
/// part of the batch, another helper's records, or memory that is not the batch's).
const StreamedRun = struct {
    /// The block being put together: its address, the first byte of it the run writes (past
    /// `base` only at the run's start), and the end of the bytes put in it so far.
    block: [streaming_width]u8 = undefined,
    base: usize = 0,
    begin: usize = 0,
    end: usize = 0,
    /// Whether a block is being put together (its bytes are in `block`, not yet in memory).
    open: bool = false,

    /// Copies len bytes from src to dst; a dst that does not continue the run where it ended
    /// starts a new one (the run before is finished first).
    fn write(run: *StreamedRun, comptime loads: Loads, dst: [*]u8, src: [*]const u8, len: usize) void {
        if (len == 0) return;
        const at = @intFromPtr(dst);
        if (run.open and run.end != at) run.finish();
        if (!run.open and at % streaming_width != 0) run.start(at & ~@as(usize, streaming_width - 1), at);
        var i: usize = 0;
        if (run.open) {
            i = @min(len, run.base + streaming_width - run.end);
            @memcpy(run.block[run.end - run.base ..][0..i], src[0..i]);
            run.end += i;
            if (run.end < run.base + streaming_width) return;
            run.flush();
        }
        assert((at + i) % streaming_width == 0);
        i += streamBlocks(loads, dst + i, src + i, len - i);
        if (i == len) return;
        run.start(at + i, at + i);
        @memcpy(run.block[0 .. len - i], src[i..len]);
        run.end += len - i;
    }

    fn start(run: *StreamedRun, base: usize, begin: usize) void {
        assert(!run.open);
        assert(base % streaming_width == 0 and begin >= base and begin < base + streaming_width);
        run.* = .{ .base = base, .begin = begin, .end = begin, .open = true };
    }

    /// Writes the full block: with a streaming store when the run owns all of it.
    fn flush(run: *StreamedRun) void {
        assert(run.open and run.end == run.base + streaming_width);
        if (run.begin == run.base) {
            storeStreaming(@ptrFromInt(run.base), run.block);
        } else {
            const to: [*]u8 = @ptrFromInt(run.begin);
            @memcpy(to[0 .. run.end - run.begin], run.block[run.begin - run.base ..]);
        }
        run.open = false;
    }

    /// Writes the bytes of an open block with ordinary stores: the run's end. The caller
    /// fences the streaming stores before reporting the copy done.
    fn finish(run: *StreamedRun) void {
        if (!run.open) return;
        const to: [*]u8 = @ptrFromInt(run.begin);
        @memcpy(to[0 .. run.end - run.begin], run.block[run.begin - run.base .. run.end - run.base]);
        run.open = false;
    }
};

/// Addresses that agree in their low 12 bits may alias (the store buffer compares no more).
const aliasing_period = 4096;
/// Leads of dst over src (modulo aliasing_period) below this take copyLinesAhead. Measured on
/// the AMD EPYC VM (README): the line-by-line copy slows down from a lead of 8 bytes to 48,
/// the copy a line ahead from about 128 on; both are at full speed between 64 and 112.
const aliasing_lead_max = 96;

/// Copies whole lines from offset `begin` on, loading each line before storing the one
/// before it; returns the offset after the last line copied.
fn copyLinesAhead(comptime loads: Loads, dst: [*]u8, src: [*]const u8, begin: usize, len: usize) usize {
    var i = begin;
    if (i + streaming_line > len) return i;
    var current = loadLine(src + i);
    while (i + 2 * streaming_line <= len) : (i += streaming_line) {
        fetchAhead(loads, src, i, len);
        const next = loadLine(src + i + streaming_line);
        storeLine(dst + i, current);
        current = next;
    }
    storeLine(dst + i, current);
    return i + streaming_line;
}

/// Bytes streamBlocks moves per step: a cache line, as four streaming stores.
const streaming_line = 4 * streaming_width;
const Line = [4]@Vector(streaming_width, u8);

inline fn loadLine(src: [*]const u8) Line {
    var line: Line = undefined;
    inline for (0..4) |q| line[q] = src[q * streaming_width ..][0..streaming_width].*;
    return line;
}

inline fn storeLine(dst: [*]u8, line: Line) void {
    inline for (0..4) |q| storeStreaming(dst + q * streaming_width, line[q]);
}

/// Bytes one streaming store writes (movntdq: 16, aligned).
const streaming_width = 16;

/// Only reached where has_streaming_stores (copy() checks it); other targets never
/// assemble the instruction.
inline fn storeStreaming(dst: [*]u8, bytes: @Vector(streaming_width, u8)) void {
    assert(@intFromPtr(dst) % streaming_width == 0);
    if (comptime has_streaming_stores) {
        asm volatile ("movntdq %[bytes], (%[dst])"
            :
            : [bytes] "x" (bytes),
              [dst] "r" (dst),
            : .{ .memory = true });
    } else unreachable;
}

fn fenceStreamingStores() void {
    if (comptime has_streaming_stores) {
        asm volatile ("sfence" ::: .{ .memory = true });
    } else unreachable;
}

test "StreamedRun: both copies (lines ahead, and line by line) land exactly at every lead" {
    if (!has_streaming_stores) return error.SkipZigTest;
    // One page-aligned buffer: the source on its first page, the destination at `lead` bytes
    // past the same page offset two pages on, so that the lead modulo 4096 is the one chosen.
    var buffer: [4 * aliasing_period]u8 align(aliasing_period) = undefined;
    for ([_]usize{ 0, 8, 16, 48, aliasing_lead_max - 1, aliasing_lead_max, 144, 2048, aliasing_period - 16 }) |lead| {
        for ([_]usize{ 0, 3 }) |source_offset| {
            for ([_]usize{ 0, 15, 63, 64, 65, 127, 128, 129, 191, 1000 }) |len| {
                for (&buffer, 0..) |*b, k| b.* = @truncate(k *% 131 +% 7);
                const src = buffer[source_offset..].ptr;
                const dst_at = 2 * aliasing_period + source_offset + lead;
                const before = buffer;
                inline for (.{ Loads.non_temporal, Loads.temporal }) |loads| {
                    streamOne(loads, buffer[dst_at..].ptr, src, len);
                    fenceStreamingStores();
                    try std.testing.expectEqualSlices(u8, before[source_offset..][0..len], buffer[dst_at..][0..len]);
                    try std.testing.expectEqualSlices(u8, before[0..dst_at], buffer[0..dst_at]);
                    try std.testing.expectEqualSlices(u8, before[dst_at + len ..], buffer[dst_at + len ..]);
                    buffer = before;
                }
            }
        }
    }
}

test "StreamedRun: one record of every length and alignment lands exactly, nothing around it moves" {
    if (!has_streaming_stores) return error.SkipZigTest;
    var source_bytes: [300]u8 = undefined;
    for (&source_bytes, 0..) |*b, k| b.* = @truncate(k *% 37 +% 11);
    for ([_]usize{ 0, 1, 15, 16, 17, 63, 64, 65, 127, 200, 255 }) |len| {
        for (0..streaming_width) |offset| {
            for (0..3) |source_offset| inline for (.{ Loads.non_temporal, Loads.temporal }) |loads| {
                var dst: [320]u8 align(16) = @splat(0xEE);
                streamOne(loads, dst[offset + 1 ..].ptr, source_bytes[source_offset..].ptr, len);
                fenceStreamingStores();
                try std.testing.expectEqualSlices(u8, source_bytes[source_offset..][0..len], dst[offset + 1 ..][0..len]);
                for (dst[0 .. offset + 1]) |b| try std.testing.expectEqual(@as(u8, 0xEE), b);
                for (dst[offset + 1 + len ..]) |b| try std.testing.expectEqual(@as(u8, 0xEE), b);
            };
        }
    }
}

test "copyRecords: every size class lands each record in its slot, with either loads" {
    var source_bytes: [4 * 1000]u8 = undefined;
    for (&source_bytes, 0..) |*b, k| b.* = @truncate(k *% 31 +% 7);
    // 512 and up take copyFetchingAhead with non-temporal loads; 1000 ends in a partial line.
    inline for (.{ 1, 8, 256, 300, 512, 1000 }) |stride| inline for (.{ Loads.non_temporal, Loads.temporal }) |loads| {
        var dst: [4 * 1000 + 1]u8 = @splat(0xEE);
        // Slots taken in reverse order, so a copy that ignored `sources` would be caught.
        const sources = [_][*]const u8{ source_bytes[3 * stride ..].ptr, source_bytes[2 * stride ..].ptr, source_bytes[stride..].ptr, source_bytes[0..].ptr };
        copyRecords(loads, &dst, &sources, stride);
        for (0..4) |k| try std.testing.expectEqualSlices(u8, source_bytes[(3 - k) * stride ..][0..stride], dst[k * stride ..][0..stride]);
        try std.testing.expectEqual(@as(u8, 0xEE), dst[4 * stride]);
    };
}

test "copySources: every record lands in its slot, across groups" {
    const count = 2 * group + 6;
    var source_bytes: [count * 3]u8 = undefined;
    for (&source_bytes, 0..) |*b, k| b.* = @truncate(k *% 13 +% 1);
    // Slot i reads record count - 1 - i, so a copy that ignored `sources` would be caught.
    var sources: [count][*]const u8 = undefined;
    for (&sources, 0..) |*source, i| source.* = source_bytes[(count - 1 - i) * 3 ..].ptr;
    inline for (.{ Loads.non_temporal, Loads.temporal }) |loads| {
        var dst: [count * 3 + 1]u8 = @splat(0xEE);
        copySources(loads, &dst, 3, &sources, false);
        for (0..count) |i| try std.testing.expectEqualSlices(u8, source_bytes[(count - 1 - i) * 3 ..][0..3], dst[i * 3 ..][0..3]);
        try std.testing.expectEqual(@as(u8, 0xEE), dst[count * 3]);
    }
}

test "copySources with streaming stores: every record of every group lands in its slot" {
    if (!has_streaming_stores) return error.SkipZigTest;
    const count = group + 5;
    const stride = 1031; // odd: the slots start at every alignment
    const source_bytes = try std.testing.allocator.alloc(u8, count * stride);
    defer std.testing.allocator.free(source_bytes);
    for (source_bytes, 0..) |*b, k| b.* = @truncate(k *% 29 +% 3);
    var sources: [count][*]const u8 = undefined;
    for (&sources, 0..) |*source, i| source.* = source_bytes[(count - 1 - i) * stride ..].ptr;
    const dst = try std.testing.allocator.alloc(u8, count * stride + 1);
    defer std.testing.allocator.free(dst);
    @memset(dst, 0xEE);
    copySources(.temporal, dst.ptr, stride, &sources, true);
    fenceStreamingStores();
    for (0..count) |i| try std.testing.expectEqualSlices(u8, source_bytes[(count - 1 - i) * stride ..][0..stride], dst[i * stride ..][0..stride]);
    try std.testing.expectEqual(@as(u8, 0xEE), dst[count * stride]);
}

/// One record streamed as a run of its own (for the tests).
fn streamOne(comptime loads: Loads, dst: [*]u8, src: [*]const u8, len: usize) void {
    var run: StreamedRun = .{};
    run.write(loads, dst, src, len);
    run.finish();
}

test "StreamedRun: back-to-back records of any length land exactly, nothing around the run moves" {
    if (!has_streaming_stores) return error.SkipZigTest;
    var prng = std.Random.DefaultPrng.init(41);
    const random = prng.random();
    var source_bytes: [4096]u8 = undefined;
    random.bytes(&source_bytes);
    for (0..200) |_| {
        // Lengths of 0 to 40 bytes (several in one block, blocks no record ends in), and some
        // of a few lines, from any source offset, into a run that starts at any alignment.
        var lengths: [24]usize = undefined;
        var starts: [24]usize = undefined;
        var total: usize = 0;
        for (&lengths, &starts) |*length, *from| {
            length.* = if (random.uintLessThan(u8, 4) == 0) random.uintLessThan(usize, 300) else random.uintLessThan(usize, 41);
            from.* = random.uintLessThan(usize, source_bytes.len - 300);
            total += length.*;
        }
        var dst: [24 * 300 + 64]u8 align(64) = @splat(0xEE);
        const offset = random.uintLessThan(usize, 32);
        inline for (.{ Loads.non_temporal, Loads.temporal }) |loads| {
            var run: StreamedRun = .{};
            var at = offset;
            for (lengths, starts) |length, from| {
                run.write(loads, dst[at..].ptr, source_bytes[from..].ptr, length);
                at += length;
            }
            run.finish();
            fenceStreamingStores();
            at = offset;
            for (lengths, starts) |length, from| {
                try std.testing.expectEqualSlices(u8, source_bytes[from..][0..length], dst[at..][0..length]);
                at += length;
            }
            for (dst[0..offset]) |b| try std.testing.expectEqual(@as(u8, 0xEE), b);
            for (dst[offset + total ..]) |b| try std.testing.expectEqual(@as(u8, 0xEE), b);
            @memset(&dst, 0xEE);
        }
    }
}

test "StreamedRun: a write that does not continue the run finishes it first" {
    if (!has_streaming_stores) return error.SkipZigTest;
    var source_bytes: [200]u8 = undefined;
    for (&source_bytes, 0..) |*b, k| b.* = @truncate(k *% 7 +% 5);
    var dst: [512]u8 align(16) = @splat(0xEE);
    var run: StreamedRun = .{};
    // 3 bytes at 5 leave a block open; the next write goes 100 bytes further on, with a gap.
    run.write(.temporal, dst[5..].ptr, &source_bytes, 3);
    run.write(.temporal, dst[108..].ptr, source_bytes[3..].ptr, 70);
    run.finish();
    fenceStreamingStores();
    try std.testing.expectEqualSlices(u8, source_bytes[0..3], dst[5..8]);
    try std.testing.expectEqualSlices(u8, source_bytes[3..73], dst[108..178]);
    for (dst[0..5]) |b| try std.testing.expectEqual(@as(u8, 0xEE), b);
    for (dst[8..108]) |b| try std.testing.expectEqual(@as(u8, 0xEE), b);
    for (dst[178..]) |b| try std.testing.expectEqual(@as(u8, 0xEE), b);
}
