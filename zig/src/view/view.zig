//! View: several open stores (the shards of a dataset) read as one index space. Global index g
//! belongs to the store k with starts[k] <= g < starts[k + 1]; the last store's range is open
//! and ends at its live length, so appends to it are seen at once. A gather routes every
//! record to its store and runs the whole batch as one pool job, whatever the stores.
const std = @import("std");
const builtin = @import("builtin");
const Allocator = std.mem.Allocator;
const assert = std.debug.assert;
const limits = @import("../base/limits.zig");
const codec = @import("../codec/codec.zig");
const pool = @import("../os/pool.zig");
const errors = @import("../base/errors.zig");
const diagnostic = @import("../base/diagnostic.zig");
const status = @import("../base/status.zig");
const store_mod = @import("../store/store.zig");
const Store = store_mod.Store;
const Destination = store_mod.Destination;
const Failure = store_mod.Failure;
const raw_copy = @import("../store/raw_copy.zig");
const record_offsets = @import("../batch/record_offsets.zig");
const padded_mod = @import("../batch/padded.zig");
const batch_mod = @import("../batch/batch.zig");
const registry = @import("../store/registry.zig");
const lock_order = @import("../store/lock_order.zig");
const length_generation = @import("../files/length_generation.zig");
const Error = errors.Error;
const outOfMemory = errors.outOfMemory;

/// Where one global index lives.
const Route = struct {
    store_index: u32,
    local: u64,
};

pub const View = struct {
    /// Its handle at the C boundary, given by the registry at open and taken back at close.
    handle: registry.Handle = .none,
    allocator: Allocator,
    /// Borrowed: the caller keeps every store open for the view's lifetime.
    stores: []*Store,
    /// The stores' handles, taken at open: checkOpen asks the registry whether each is still
    /// open, without reading a store that may have been freed.
    store_handles: []registry.Handle,
    /// starts[k] is the global index of store k's first record (store_count entries). The
    /// lengths of every store but the last are taken at open; the caller makes a new view
    /// when one of them changes (a delete).
    starts: []u64,
    /// log2 of the length every store but the last has, when that length is one power of two
    /// (a dataset's shards fill to their capacity, 2^24 by default): global index g is then in
    /// store min(g >> shift, last), with no search.
    uniform_shift: ?u6,
    /// For each position, the first position holding the same store; null when every store
    /// is distinct (see lockSet).
    first_positions: ?[]u32,
    /// The first position of each distinct store, in the library's one lock order
    /// (lock_order.zig): the order a gather locks the stores it touches in.
    lock_positions: []u32,
    /// The length generation (length_generation.zig) at which checkRouting last found every
    /// store but the last holding the length the view was made with, each guarded by its
    /// handle's shared lock on open.lock; 0 until then. While the generation still reads this,
    /// no length changed since (in this process: every change bumps it; from another process:
    /// only this handle could shrink a guarded store), and checkRouting reads no store.
    routing_checked: std.atomic.Value(u64) = .init(0),
    /// Decompression contexts of this view's gathers (a context is not tied to a store).
    contexts: codec.ContextPool = .{},
    /// Whether this view's gathers currently run faster with the pool's helpers (pool_advice).
    gather_advisor: pool.Advisor = .{},
    /// Whether its large raw gathers currently run faster with streaming stores (raw_copy).
    copy_advisors: raw_copy.CopyAdvisors = .{},

    pub fn open(allocator: Allocator, stores: []const *Store) Error!*View {
        if (stores.len == 0 or stores.len > limits.view_store_count_max) {
            diagnostic.note("a view holds 1 to {d} stores, not {d}", .{ limits.view_store_count_max, stores.len });
            return error.InvalidArgument;
        }
        const owned = allocator.dupe(*Store, stores) catch return outOfMemory();
        errdefer allocator.free(owned);
        const starts = allocator.alloc(u64, stores.len) catch return outOfMemory();
        errdefer allocator.free(starts);
        var total: u64 = 0;
        for (stores, starts) |store, *start| {
            start.* = total;
            total += store.length();
        }
        const store_handles = allocator.alloc(registry.Handle, stores.len) catch return outOfMemory();
        errdefer allocator.free(store_handles);
        for (stores, store_handles) |store, *handle| handle.* = store.handle;
        const first_positions = try firstPositions(allocator, stores);
        errdefer if (first_positions) |positions| allocator.free(positions);
        const lock_positions = try lock_order.positionsInOrder(allocator, stores);
        errdefer allocator.free(lock_positions);
        const view = allocator.create(View) catch return outOfMemory();
        errdefer allocator.destroy(view);
        view.* = .{
            .allocator = allocator,
            .stores = owned,
            .store_handles = store_handles,
            .starts = starts,
            .uniform_shift = uniformShift(starts),
            .first_positions = first_positions,
            .lock_positions = lock_positions,
        };
        // Last: from here the view is reachable through its handle (and a fork resets it).
        view.handle = try registry.add(.view, view);
        return view;
    }

    /// For each position, the first position of its store, or null when no store repeats (the
    /// same store twice is two shards of it: each reads the whole store).
    fn firstPositions(allocator: Allocator, stores: []const *Store) Error!?[]u32 {
        const order = allocator.alloc(u32, stores.len) catch return outOfMemory();
        defer allocator.free(order);
        for (order, 0..) |*position, k| position.* = @intCast(k);
        // By store, then by position: each run of one store starts at its first position.
        std.mem.sortUnstable(u32, order, stores, struct {
            fn lessThan(context: []const *Store, a: u32, b: u32) bool {
                const a_store = @intFromPtr(context[a]);
                const b_store = @intFromPtr(context[b]);
                return a_store < b_store or (a_store == b_store and a < b);
            }
        }.lessThan);
        var repeats = false;
        for (order[1..], order[0 .. order.len - 1]) |later, earlier| repeats = repeats or stores[later] == stores[earlier];
        if (!repeats) return null;
        const first = allocator.alloc(u32, stores.len) catch return outOfMemory();
        var run_first = order[0];
        for (order, 0..) |position, i| {
            if (i > 0 and stores[position] != stores[order[i - 1]]) run_first = position;
            first[position] = run_first;
        }
        return first;
    }

    /// Releases the view (not its stores). No other thread may be using it.
    pub fn close(view: *View) void {
        // Out of the registry first: its handle is refused from here on.
        const removed = registry.remove(view.handle, .view);
        assert(removed == @as(?*anyopaque, view));
        view.free();
    }

    /// The C boundary's close: closes the view of an open handle, and does nothing for a
    /// handle closed already (a second close) or not a view's. Of two threads closing one
    /// handle at once, one closes it.
    pub fn closeHandle(handle: registry.Handle) void {
        const view = fromObject(registry.remove(handle, .view) orelse return);
        view.free();
    }

    /// The view of an open handle, or null (see registry.get). Reads no view memory.
    pub fn fromOpenHandle(handle: registry.Handle) ?*View {
        return fromObject(registry.get(handle, .view) orelse return null);
    }

    fn fromObject(object: *anyopaque) *View {
        return @ptrCast(@alignCast(object));
    }

    /// close's work once the view is out of the registry.
    fn free(view: *View) void {
        if (view.first_positions) |positions| view.allocator.free(positions);
        view.allocator.free(view.lock_positions);
        view.allocator.free(view.store_handles);
        view.contexts.deinit();
        view.allocator.free(view.starts);
        view.allocator.free(view.stores);
        view.allocator.destroy(view);
    }

    pub fn length(view: *const View) u64 {
        const last = view.stores.len - 1;
        return view.starts[last] + view.stores[last].length();
    }

    /// The store holding global index `global` (any value; the caller checks the local index).
    /// See `uniform_shift`: null unless starts[k] == k << shift for every k.
    pub fn uniformShift(starts: []const u64) ?u6 {
        // starts[1] is 0 when the first store is empty (a delete emptied it): no shift then,
        // and isPowerOfTwo must not see a 0.
        if (starts.len < 2 or starts[1] == 0 or !std.math.isPowerOfTwo(starts[1])) return null;
        const shift: u6 = @intCast(std.math.log2_int(u64, starts[1]));
        for (starts, 0..) |start, k| {
            if (start != @as(u64, k) << shift) return null;
        }
        return shift;
    }

    fn route(view: *const View, global: u64) Route {
        if (view.uniform_shift) |shift| {
            const last = view.starts.len - 1;
            const k = @min(global >> shift, last);
            assert(view.starts[k] <= global);
            return .{ .store_index = @intCast(k), .local = global - view.starts[k] };
        }
        return view.search(global);
    }

    fn search(view: *const View, global: u64) Route {
        // The last k with starts[k] <= global; starts[0] == 0 so one always exists. A search
        // whose steps select (a conditional move) instead of branch: the indices of a random
        // batch make every branch a coin toss, and mispredictions were 40% of a small-record
        // gather over 24 shards.
        const starts = view.starts;
        var low: usize = 0;
        var count: usize = starts.len;
        while (count > 1) {
            const half = count / 2;
            if (starts[low + half] <= global) {
                @branchHint(.unpredictable); // asks for a conditional move
                low += half;
            }
            count -= half;
        }
        assert(starts[low] <= global);
        assert(low + 1 == starts.len or global < starts[low + 1]);
        return .{ .store_index = @intCast(low), .local = global - starts[low] };
    }

    /// Routes every index, checking it against the total and its store's current length.
    /// Takes the shared lock of every store the batch touches (in the library's one lock
    /// order, lock_order.zig, so no other multi-store call waits on this one in a cycle) and
    /// returns the set for `unlockTouched`.
    fn routeAndLock(view: *View, indices: []const i64, scratch: Scratch) Error!void {
        const routes = scratch.routes;
        const touched = scratch.touched;
        const last = view.stores.len - 1;
        try view.checkOpen(last);
        const total = view.length();
        @memset(touched, 0);
        // The highest record of the last store the batch reads (its range is open).
        var last_local_max: u64 = 0;
        for (indices, routes, 0..) |index, *r, position| {
            if (index < 0 or @as(u64, @intCast(index)) >= total) {
                diagnostic.note("index {d} (position {d}) is out of range for a dataset of {d} records", .{ index, position, total });
                return error.IndexOutOfRange;
            }
            r.* = view.route(@intCast(index));
            touched[r.store_index / 64] |= @as(u64, 1) << @intCast(r.store_index % 64);
            last_local_max = if (r.store_index == last) @max(last_local_max, r.local) else last_local_max;
        }
        view.lockSet(touched, scratch.locked);
        // In a forked child, each store re-takes its cross-process lock on first use.
        for (scratch.locked, 0..) |word, w| {
            var bits = word;
            while (bits != 0) : (bits &= bits - 1) {
                try view.checkOpen(w * 64 + @ctz(bits));
                try view.stores[w * 64 + @ctz(bits)].relockIfForked();
            }
        }
        view.lockTouched(scratch.locked);
        errdefer view.unlockTouched(scratch.locked);
        try view.checkRouting();
        // Only the last store can now hold fewer records than the batch routes to it: every
        // other one holds at least the length the view was made with (checkRouting), which
        // covers every record routed to it, and a touched one is locked, so no delete lowers it
        // before this call returns. So one length is read here, not one per touched store (64
        // mapped headers, evicted from the cache by each large gather).
        if (builtin.mode == .debug) view.assertCovered(touched);
        const last_touched = touched[last / 64] & (@as(u64, 1) << @intCast(last % 64)) != 0;
        if (last_touched and view.stores[last].length() <= last_local_max) try view.checkShrunk(indices, routes, last);
    }

    /// What routeAndLock no longer reads outside Debug: every touched store but the last holds
    /// every record the view routes to it.
    fn assertCovered(view: *const View, touched: []const u64) void {
        for (touched, 0..) |word, w| {
            var bits = word;
            while (bits != 0) : (bits &= bits - 1) {
                const k = w * 64 + @ctz(bits);
                if (k + 1 < view.stores.len) assert(view.stores[k].length() >= view.starts[k + 1] - view.starts[k]);
            }
        }
    }

    /// Refuses the call when a store other than the last no longer holds the length the view
    /// was made with: every later store's records then sit at other global indices than the
    /// view would route to, and a record would be read for an index that never held it (a
    /// delete through the same handle, while this call waited for the locks it now holds). A
    /// store this call locked cannot change before it returns; one it did not lock either has
    /// its final length already (a delete holds every store it changes until it is done) or
    /// changes nothing this call reads.
    ///
    /// Reading 63 lengths is 63 cache lines (each store's mapped header) that a large gather
    /// evicts before the next one: about 2.4% of a raw gather from 64 shards on an 8 MiB L3.
    /// So the lengths are read only when the process's length generation moved since they
    /// last all matched (`routing_checked`), and then the check is what it always was. What
    /// the generation cannot see is a change made by another process: a shrink needs open.lock
    /// exclusive, which no other handle gets while this one holds it shared, so a store not so
    /// guarded (Locks.guardsLength: a forked child before its first call on it, a read-only
    /// handle without open.lock) keeps every call on the full check. Another process's append
    /// to a store before the last is not seen on the fast path: it moves no record the view
    /// routes to (appends only add past the length the view was made with).
    fn checkRouting(view: *View) Error!void {
        // Read before any length: a change published after this read bumps the generation
        // past it, so the value stored below never vouches for a length not read here.
        const generation = length_generation.current();
        if (generation == view.routing_checked.load(.acquire)) return;
        const last = view.stores.len - 1;
        var guarded = true;
        for (view.stores[0..last], 0..) |store, k| {
            // The guard before the length: held then, it keeps other handles' deletes out of
            // the store from before the length is read until the generation next moves.
            guarded = guarded and store.locks.guardsLength();
            if (store.length() != view.starts[k + 1] - view.starts[k]) {
                diagnostic.note("shard {d} holds {d} records, not the {d} this view was made with", .{ k, store.length(), view.starts[k + 1] - view.starts[k] });
                return error.ViewStale;
            }
        }
        // Calls on other threads may store other values: each was checked at its generation,
        // and one older than the current only sends the next call through the full check.
        if (guarded) view.routing_checked.store(generation, .release);
    }

    /// Refuses a call once store k was closed under the view (the caller broke the borrow; see
    /// lx_view_open). Asked of the registry by the handle taken at open, so a closed store's
    /// memory is not read, and a store opened since at the same address is not taken for it.
    pub fn checkOpen(view: *const View, k: usize) Error!void {
        if (Store.fromOpenHandle(view.store_handles[k])) |store| {
            assert(store == view.stores[k]);
            return;
        }
        diagnostic.note("store {d} of the view was closed before the view", .{k});
        return error.InvalidArgument;
    }

    /// Refuses the batch when a record routed to store k is past its current length (the
    /// store shrank since the view was made: a delete through the same handle).
    fn checkShrunk(view: *const View, indices: []const i64, routes: []const Route, k: usize) Error!void {
        const store_length = view.stores[k].length();
        for (indices, routes, 0..) |index, r, position| {
            if (r.store_index == k and r.local >= store_length) {
                diagnostic.note("index {d} (position {d}) is record {d} of shard {d}, which now holds {d}; reopen the dataset", .{ index, position, r.local, r.store_index, store_length });
                return error.IndexOutOfRange;
            }
        }
    }

    /// The positions whose stores a call locks: `touched` itself (the same slice) unless a
    /// store repeats, then each touched store's first position, once. A store locked shared
    /// twice by one call deadlocks with a writer (delete, compact) queued between the two.
    pub fn lockSet(view: *const View, touched: []const u64, locked: []u64) void {
        const first = view.first_positions orelse return;
        @memset(locked, 0);
        for (touched, 0..) |word, w| {
            var bits = word;
            while (bits != 0) : (bits &= bits - 1) {
                const k = first[w * 64 + @ctz(bits)];
                locked[k / 64] |= @as(u64, 1) << @intCast(k % 64);
            }
        }
    }

    fn lockTouched(view: *View, touched: []const u64) void {
        lock_order.lockSharedMarked(view.stores, view.lock_positions, touched);
    }

    fn unlockTouched(view: *View, touched: []const u64) void {
        lock_order.unlockSharedMarked(view.stores, view.lock_positions, touched);
    }

    /// Per-call scratch: a route per index, one bit per store touched and one per store locked
    /// (lockSet; the same words unless the view repeats a store).
    const Scratch = struct {
        routes: []Route,
        touched: []u64,
        locked: []u64,

        fn init(view: *const View, index_count: usize) Error!Scratch {
            const allocator = view.allocator;
            const words = (view.stores.len + 63) / 64;
            const routes = allocator.alloc(Route, index_count) catch return outOfMemory();
            errdefer allocator.free(routes);
            const touched = allocator.alloc(u64, words) catch return outOfMemory();
            errdefer allocator.free(touched);
            const locked = if (view.first_positions == null) touched else allocator.alloc(u64, words) catch return outOfMemory();
            return .{ .routes = routes, .touched = touched, .locked = locked };
        }

        fn deinit(scratch: Scratch, allocator: Allocator) void {
            allocator.free(scratch.routes);
            if (scratch.locked.ptr != scratch.touched.ptr) allocator.free(scratch.locked);
            allocator.free(scratch.touched);
        }
    };

    /// Writes global record indices[i] (decompressed) into destination slot i, for every i:
    /// one pool run over the whole batch, each record read by its own store.
    pub fn gather(view: *View, indices: []const i64, destination: Destination, byte_count: u64) Error!void {
        const scratch = try Scratch.init(view, indices.len);
        defer scratch.deinit(view.allocator);
        try view.routeAndLock(indices, scratch);
        defer view.unlockTouched(scratch.locked);
        // Every slot's size is checked before any record is copied, so a refusal leaves the
        // destination as it was.
        if (!view.slotsMatch(scratch.routes, destination)) {
            for (scratch.routes, 0..) |r, i| view.stores[r.store_index].checkSlot(r.local, destination.slotLength(i), i) catch |err|
                return placeFailure(indices, scratch.routes, i, err);
        }
        try view.copyRouted(indices, scratch.routes, destination, byte_count);
    }

    /// The copy of a gather whose routes and slots are checked, its stores locked.
    fn copyRouted(view: *View, indices: []const i64, routes: []const Route, destination: Destination, byte_count: u64) Error!void {
        const first = routes[0];
        const first_store = view.stores[first.store_index];
        const bytes_min = first_store.gatherBytesMin(first.local);
        const copies_raw = first_store.copiesRaw(first.local);
        var task: GatherTask = .{ .view = view, .routes = routes, .destination = destination };
        raw_copy.runGather(GatherTask, &task, indices.len, pool.plan(indices.len, byte_count, bytes_min), byte_count, copies_raw, &view.gather_advisor, &view.copy_advisors);
        task.failure.check() catch |err| return placeFailure(indices, routes, task.failure.position, err);
    }

    /// A packed gather of global indices, as Store.gatherPacked: offsets (and rows) from the
    /// records' lengths, then the copy into dst when `capacity` holds them (error.SizeMismatch
    /// with nothing copied otherwise), with every store touched locked throughout.
    pub fn gatherPacked(view: *View, indices: []const i64, dst: [*]u8, capacity: u64, offsets: []u64, row_size: u64, rows: ?[]i32) Error!void {
        assert(indices.len > 0 and offsets.len == indices.len + 1);
        const scratch = try Scratch.init(view, indices.len);
        defer scratch.deinit(view.allocator);
        try view.routeAndLock(indices, scratch);
        defer view.unlockTouched(scratch.locked);
        for (scratch.routes, offsets[1..]) |r, *size| size.* = view.stores[r.store_index].meta.table[@intCast(r.local)].logic_length;
        try record_offsets.accumulate(offsets, row_size, rows);
        const byte_count = offsets[indices.len];
        if (byte_count > capacity) {
            diagnostic.note("dst holds {d} bytes; the records need {d}", .{ capacity, byte_count });
            return error.SizeMismatch;
        }
        try view.copyRouted(indices, scratch.routes, .{ .base = dst, .offsets = offsets.ptr }, byte_count);
    }

    /// A padded gather of global indices, as Store.gatherPadded, with every store touched
    /// locked throughout.
    pub fn gatherPadded(view: *View, indices: []const i64, request: padded_mod.Request, rows: []u64, length_out: *u64) Error!void {
        assert(indices.len > 0 and rows.len == indices.len);
        const scratch = try Scratch.init(view, indices.len);
        defer scratch.deinit(view.allocator);
        try view.routeAndLock(indices, scratch);
        defer view.unlockTouched(scratch.locked);
        for (scratch.routes, rows) |r, *size| size.* = view.stores[r.store_index].meta.table[@intCast(r.local)].logic_length;
        const padded = try padded_mod.layOut(rows, request, length_out);
        const byte_count = rows.len * padded.length * padded.row_size;
        try view.copyRouted(indices, scratch.routes, .{ .base = request.out.ptr, .padded = &padded }, byte_count);
    }

    /// A store's message names the shard's local index ("record 7"); the caller gave a global
    /// one, so say which, and in which shard, before that message.
    fn placeFailure(indices: []const i64, routes: []const Route, position: ?usize, err: Error) Error {
        const i = position orelse return err;
        var buffer: [256]u8 = undefined;
        const text = diagnostic.text();
        const message = buffer[0..@min(text.len, buffer.len)];
        @memcpy(message, text[0..message.len]);
        diagnostic.note("index {d} (record {d} of shard {d}): {s}", .{ indices[i], routes[i].local, routes[i].store_index, message });
        return err;
    }

    /// Whether every slot has its record's logical length, in a loop with no call and no early
    /// exit so that the table misses of the batch overlap (see Store.slotsMatch).
    fn slotsMatch(view: *const View, routes: []const Route, destination: Destination) bool {
        var mismatch: u64 = 0;
        for (routes, 0..) |r, i| {
            const store = view.stores[r.store_index];
            const slot_length = destination.slotLength(i);
            if (store.runs.covers(r.local, slot_length)) continue;
            mismatch |= store.meta.table[@intCast(r.local)].logic_length ^ slot_length;
        }
        return mismatch == 0;
    }

    const GatherTask = struct {
        view: *View,
        routes: []const Route,
        destination: Destination,
        stores: raw_copy.Stores = .cached,
        loads: raw_copy.Loads = .temporal,
        failure: Failure = .{},

        pub fn runShard(task: *GatherTask, blocks: *pool.Blocks) void {
            const io = pool.io();
            var dctx: ?*codec.DCtx = null;
            defer if (dctx) |d| task.view.contexts.releaseDecompressor(io, d);
            var prefix_scratch: padded_mod.Scratch = .{ .allocator = task.view.allocator };
            defer prefix_scratch.deinit();
            while (blocks.next()) |range| {
                defer if (task.destination.padded) |padded| if (!task.failure.failed()) padded.finish(range.begin, range.end);
                var i = range.begin;
                while (i < range.end) : (i += 1) {
                    if (task.failure.failed()) return;
                    // Raw records take the pipelined copy (fixed-size or ragged), as from one store; the
                    // first record that needs more stops it and takes Store.gatherRecord, with
                    // its messages.
                    i = if (task.destination.offsets) |offsets|
                        raw_copy.copyRagged(task, task.destination.base, batch_mod.Offsets{ .offsets = offsets }, i, range.end, task.stores, task.loads)
                    else if (task.destination.padded) |padded|
                        raw_copy.copyRagged(task, task.destination.base, padded, i, range.end, task.stores, task.loads)
                    else
                        raw_copy.copy(task, task.destination.base, task.destination.stride, i, range.end, task.stores, task.loads);
                    if (i == range.end) break;
                    const r = task.routes[i];
                    const store = task.view.stores[r.store_index];
                    const slot = task.destination.slot(i);
                    const gathered = if (task.destination.padded != null)
                        store.gatherRecordPrefix(r.local, slot, &task.view.contexts, &dctx, &prefix_scratch, &task.failure)
                    else
                        store.gatherRecord(r.local, slot, &task.view.contexts, &dctx, &task.failure);
                    if (!gathered) {
                        task.failure.place(i);
                        return;
                    }
                }
            }
        }

        /// Position i's record, for raw_copy.copy.
        pub fn locate(task: *const GatherTask, i: usize) raw_copy.Located {
            const r = task.routes[i];
            return .{ .store = task.view.stores[r.store_index], .index = r.local };
        }
    };

    /// The logical length of each global record.
    pub fn recordLengths(view: *View, indices: []const i64, out: []u64) Error!void {
        assert(indices.len == out.len);
        const scratch = try Scratch.init(view, indices.len);
        defer scratch.deinit(view.allocator);
        try view.routeAndLock(indices, scratch);
        defer view.unlockTouched(scratch.locked);
        for (scratch.routes, out) |r, *len| len.* = view.stores[r.store_index].meta.table[@intCast(r.local)].logic_length;
    }
};

/// In a forked child: a parent thread may have held a view's context mutex at the moment of
/// fork. (Its stores are reset by store.afterForkChild.)
pub fn afterForkChild() void {
    var walk: registry.Walk = .{ .kind = .view };
    while (walk.next()) |object| View.fromObject(object).contexts.mutex = .init;
}
